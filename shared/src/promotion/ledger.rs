//! The soak ledger of a pool: the periods during which every node of the pool ran one release,
//! Ready, with nothing in flight and the pool not halted. The rotator records it from each
//! pass's snapshot (a write only when a period starts or ends); downstream pools read it to
//! decide whether a release is proven.

use chrono::{DateTime, TimeDelta, Utc};
use serde::{Deserialize, Serialize};

use super::{Quarantined, Release};

/// Periods kept per pool (oldest dropped first).
pub const LEDGER_LIMIT: usize = 20;

/// One period of a pool fully on a release.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SoakPeriod {
    /// The release.
    pub release: Release,
    /// The image the pool ran it as.
    pub image: String,
    /// When the last node became Ready on it (the period's start).
    pub since: DateTime<Utc>,
    /// When the period ended (another release, a node not Ready, a rotation, a halt); `None`
    /// while it lasts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<DateTime<Utc>>,
    /// The fewest nodes the pool ran it on during the period (`None`: a period recorded
    /// before this was counted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes: Option<u32>,
}

/// What a pass saw: every node of the pool on one release (and image), Ready, healthy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FullyOn<'a> {
    /// The release.
    pub release: &'a Release,
    /// The image.
    pub image: &'a str,
    /// How many nodes.
    pub nodes: u32,
}

/// The ledger after this pass's observation: `current` is the release (and image) every node
/// runs healthy now, with how many nodes, `None` when the pool is not fully on one. `None`
/// when nothing changes (an open period of the same release and image keeps going; it records
/// a lower node count).
pub fn observe(
    ledger: &[SoakPeriod],
    current: Option<FullyOn<'_>>,
    now: DateTime<Utc>,
) -> Option<Vec<SoakPeriod>> {
    let open = ledger.iter().rposition(|p| p.until.is_none());
    match (open, current) {
        (Some(i), Some(c)) if ledger[i].release == *c.release && ledger[i].image == c.image => {
            let fewer = ledger[i].nodes.is_some_and(|n| c.nodes < n);
            fewer.then(|| {
                let mut next = ledger.to_vec();
                next[i].nodes = Some(c.nodes);
                next
            })
        }
        (None, None) => None,
        (open, current) => {
            let mut next = ledger.to_vec();
            if let Some(i) = open {
                next[i].until = Some(now);
            }
            if let Some(c) = current {
                next.push(SoakPeriod {
                    release: c.release.clone(),
                    image: c.image.to_string(),
                    since: now,
                    until: None,
                    nodes: Some(c.nodes),
                });
            }
            if next.len() > LEDGER_LIMIT {
                let excess = next.len() - LEDGER_LIMIT;
                next.drain(..excess);
            }
            Some(next)
        }
    }
}

/// Alarm states for a promotion (the downstream pool's `promotion.alarms`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Alarms {
    /// Alarms in ALARM now.
    pub firing: Vec<String>,
    /// The latest state change among the alarms that are not firing (an alarm that changed
    /// state during a soak may have been in ALARM then: the soak counts from that change).
    pub last_change: Option<DateTime<Utc>>,
}

/// Whether a release is proven upstream, and if not, why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "camelCase")]
pub enum Proof {
    /// Proven: fully on it, healthy, for `soak` from `since` (counting from the last alarm
    /// change), proven at `at`.
    Proven {
        /// The release.
        release: Release,
        /// The image the upstream ran.
        image: String,
        /// Start of the clean soak.
        since: DateTime<Utc>,
        /// When the soak completed.
        at: DateTime<Utc>,
    },
    /// Soaking: fully on it since `since`, proven at `at` if nothing breaks it.
    Soaking {
        /// The release.
        release: Release,
        /// Start of the clean soak so far.
        since: DateTime<Utc>,
        /// When it will be proven.
        at: DateTime<Utc>,
    },
    /// Not proven and not soaking: why (upstream not fully on any release, halted, an alarm
    /// firing, quarantined).
    Waiting {
        /// Why, in words.
        why: String,
    },
}

/// The newest release proven upstream that is not quarantined, else what the newest candidate
/// waits for. `halted` = the upstream is halted now (its open period proves nothing);
/// `soak_nodes` = `promotion.soakNodes`: a period on fewer nodes proves nothing (unset: every
/// node of the upstream, however many).
pub fn best_proven(
    ledger: &[SoakPeriod],
    soak: TimeDelta,
    soak_nodes: Option<u32>,
    alarms: &Alarms,
    quarantined: &Quarantined,
    halted: bool,
    now: DateTime<Utc>,
) -> Proof {
    let mut waiting: Option<Proof> = None;
    for p in ledger.iter().rev() {
        if let Some(q) = quarantined.covers(&p.image, &p.release) {
            waiting.get_or_insert(Proof::Waiting {
                why: format!("release {} is quarantined: {}", p.release, q.reason),
            });
            continue;
        }
        if let Some(needed) = soak_nodes
            && p.nodes.unwrap_or(0) < needed
        {
            waiting.get_or_insert(Proof::Waiting {
                why: format!(
                    "release {} ran on {} upstream node(s); promotion.soakNodes asks for {needed}",
                    p.release,
                    p.nodes
                        .map_or_else(|| "an uncounted number of".to_string(), |n| n.to_string())
                ),
            });
            continue;
        }
        let open = p.until.is_none();
        if open && halted {
            waiting.get_or_insert(Proof::Waiting {
                why: format!("the upstream pool is halted while on {}", p.release),
            });
            continue;
        }
        if !alarms.firing.is_empty() {
            return waiting.unwrap_or(Proof::Waiting {
                why: format!("promotion alarm(s) {} in ALARM", alarms.firing.join(", ")),
            });
        }
        let since = match alarms.last_change {
            Some(c) if c > p.since => c,
            _ => p.since,
        };
        let end = p.until.unwrap_or(now);
        if end - since >= soak {
            return Proof::Proven {
                release: p.release.clone(),
                image: p.image.clone(),
                since,
                at: since + soak,
            };
        }
        if open {
            waiting.get_or_insert(Proof::Soaking {
                release: p.release.clone(),
                since,
                at: since + soak,
            });
        }
    }
    waiting.unwrap_or(Proof::Waiting {
        why: "the upstream pool has not run any release on all its nodes yet".to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::promotion::quarantine::{Cause, Quarantine, Target};

    fn t(min: i64) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-12-01T00:00:00Z")
            .map(|d| d.with_timezone(&Utc))
            .unwrap_or_default()
            + TimeDelta::minutes(min)
    }

    fn rel(s: &str) -> Release {
        Release(s.to_string())
    }

    /// Every one of 3 nodes on `image` of `release`.
    fn on<'a>(release: &'a Release, image: &'a str) -> Option<FullyOn<'a>> {
        Some(FullyOn {
            release,
            image,
            nodes: 3,
        })
    }

    #[test]
    fn periods_open_and_close_with_the_observations() {
        let r1 = rel("v1");
        let r2 = rel("v2");
        let l = observe(&[], on(&r1, "ami-1"), t(0)).unwrap_or_default();
        assert_eq!(l.len(), 1);
        assert_eq!(observe(&l, on(&r1, "ami-1"), t(5)), None, "unchanged");
        let l = observe(&l, None, t(10)).unwrap_or_default();
        assert_eq!(l[0].until, Some(t(10)));
        assert_eq!(observe(&l, None, t(11)), None);
        let l = observe(&l, on(&r2, "ami-2"), t(20)).unwrap_or_default();
        let l = observe(&l, on(&r1, "ami-1"), t(30)).unwrap_or_default();
        assert_eq!(
            l.iter()
                .map(|p| (p.release.0.as_str(), p.until))
                .collect::<Vec<_>>(),
            vec![("v1", Some(t(10))), ("v2", Some(t(30))), ("v1", None)]
        );
        let mut many = l.clone();
        for i in 0..30 {
            many =
                observe(&many, on(&rel(&format!("x{i}")), "ami-x"), t(40 + i)).unwrap_or_default();
        }
        assert_eq!(many.len(), LEDGER_LIMIT);
    }

    #[test]
    fn a_release_is_proven_after_a_clean_soak() {
        let r1 = rel("v1");
        let l = observe(&[], on(&r1, "ami-1"), t(0)).unwrap_or_default();
        let soak = TimeDelta::minutes(60);
        let none = Quarantined::default();
        let clean = Alarms::default();
        assert!(
            matches!(best_proven(&l, soak, None, &clean, &none, false, t(59)), Proof::Soaking { at, .. } if at == t(60))
        );
        assert!(
            matches!(best_proven(&l, soak, None, &clean, &none, false, t(60)), Proof::Proven { at, .. } if at == t(60))
        );
        // An alarm firing now: not proven.
        let firing = Alarms {
            firing: vec!["p99".into()],
            last_change: None,
        };
        assert!(matches!(
            best_proven(&l, soak, None, &firing, &none, false, t(90)),
            Proof::Waiting { .. }
        ));
        // An alarm that changed state at 30: the soak counts from 30.
        let changed = Alarms {
            firing: vec![],
            last_change: Some(t(30)),
        };
        assert!(matches!(
            best_proven(&l, soak, None, &changed, &none, false, t(89)),
            Proof::Soaking { .. }
        ));
        assert!(matches!(
            best_proven(&l, soak, None, &changed, &none, false, t(90)),
            Proof::Proven { .. }
        ));
        // Halted upstream: its open period proves nothing.
        assert!(matches!(
            best_proven(&l, soak, None, &clean, &none, true, t(90)),
            Proof::Waiting { .. }
        ));
        // Quarantined: skipped; an older proven period still counts.
        let r0 = rel("v0");
        let older = vec![
            SoakPeriod {
                release: r0.clone(),
                image: "ami-0".into(),
                since: t(-500),
                until: Some(t(-100)),
                nodes: None,
            },
            l[0].clone(),
        ];
        let q = Quarantined(vec![Quarantine {
            target: Target::Release(r1.clone()),
            reason: "bad".into(),
            by: "op".into(),
            at: t(1),
            cause: Cause::Operator {
                request_id: "r".into(),
            },
            outbox: Vec::new(),
        }]);
        assert!(
            matches!(best_proven(&older, soak, None, &clean, &q, false, t(90)), Proof::Proven { ref release, .. } if *release == r0)
        );
        // A period that ended before the soak completed is not proof.
        let short = vec![SoakPeriod {
            release: r1,
            image: "ami-1".into(),
            since: t(0),
            until: Some(t(30)),
            nodes: None,
        }];
        assert!(matches!(
            best_proven(&short, soak, None, &clean, &none, false, t(999)),
            Proof::Waiting { .. }
        ));
    }

    fn period(r: &str, image: &str, since: i64, until: Option<i64>) -> SoakPeriod {
        SoakPeriod {
            release: rel(r),
            image: image.into(),
            since: t(since),
            until: until.map(t),
            nodes: None,
        }
    }

    #[test]
    fn the_same_release_on_another_image_opens_a_new_period() {
        let r1 = rel("v1");
        let l = vec![period("v1", "ami-1", 0, None)];
        let next = observe(&l, on(&r1, "ami-1b"), t(10)).unwrap_or_default();
        assert_eq!(
            next,
            vec![
                period("v1", "ami-1", 0, Some(10)),
                SoakPeriod {
                    nodes: Some(3),
                    ..period("v1", "ami-1b", 10, None)
                }
            ]
        );
    }

    #[test]
    fn a_ledger_longer_than_the_limit_keeps_its_newest_periods() {
        // Read from the table: it may be longer than the limit (written by another version).
        for (len, want_first) in [(19, 0), (20, 1), (26, 7)] {
            let l: Vec<SoakPeriod> = (0..len)
                .map(|i| period(&format!("x{i}"), "ami-x", i, Some(i + 1)))
                .collect();
            let next = observe(&l, on(&rel("new"), "ami-n"), t(100)).unwrap_or_default();
            assert_eq!(next.len(), LEDGER_LIMIT.min(len as usize + 1), "len {len}");
            assert_eq!(next[0].release, rel(&format!("x{want_first}")), "len {len}");
            assert_eq!(next.last().map(|p| p.since), Some(t(100)), "len {len}");
        }
    }

    #[test]
    fn soak_boundaries_and_the_alarm_change_guard() {
        let soak = TimeDelta::minutes(60);
        let none = Quarantined::default();
        // (ledger, last alarm change, halted, now) -> proof (state, release, since, at).
        type Want = (&'static str, Option<&'static str>, Option<i64>, Option<i64>);
        type Case = (Vec<SoakPeriod>, Option<i64>, bool, i64, Want);
        let cases: Vec<Case> = vec![
            // An alarm change before the period began does not move its start.
            (
                vec![period("v1", "ami-1", 0, None)],
                Some(-30),
                false,
                59,
                ("soaking", Some("v1"), Some(0), Some(60)),
            ),
            (
                vec![period("v1", "ami-1", 0, None)],
                Some(-30),
                false,
                60,
                ("proven", Some("v1"), Some(0), Some(60)),
            ),
            // ... one at the period's start neither.
            (
                vec![period("v1", "ami-1", 0, None)],
                Some(0),
                false,
                60,
                ("proven", Some("v1"), Some(0), Some(60)),
            ),
            // One inside it restarts the soak from the change.
            (
                vec![period("v1", "ami-1", 0, None)],
                Some(10),
                false,
                60,
                ("soaking", Some("v1"), Some(10), Some(70)),
            ),
            // A closed period exactly as long as the soak is proof; a minute shorter is not.
            (
                vec![period("v1", "ami-1", 0, Some(60))],
                None,
                false,
                500,
                ("proven", Some("v1"), Some(0), Some(60)),
            ),
            (
                vec![period("v1", "ami-1", 0, Some(59))],
                None,
                false,
                500,
                ("waiting", None, None, None),
            ),
            // Halted: only the open period proves nothing; an older closed one still counts.
            (
                vec![
                    period("v0", "ami-0", -200, Some(-100)),
                    period("v1", "ami-1", 0, None),
                ],
                None,
                true,
                500,
                ("proven", Some("v0"), Some(-200), Some(-140)),
            ),
            // The newest proven period wins over an older one.
            (
                vec![
                    period("v0", "ami-0", -200, Some(-100)),
                    period("v1", "ami-1", 0, None),
                ],
                None,
                false,
                500,
                ("proven", Some("v1"), Some(0), Some(60)),
            ),
        ];
        for (i, (ledger, change, halted, now, want)) in cases.into_iter().enumerate() {
            let alarms = Alarms {
                firing: vec![],
                last_change: change.map(t),
            };
            let got = match best_proven(&ledger, soak, None, &alarms, &none, halted, t(now)) {
                Proof::Proven {
                    release, since, at, ..
                } => ("proven", Some(release.0), Some(since), Some(at)),
                Proof::Soaking { release, since, at } => {
                    ("soaking", Some(release.0), Some(since), Some(at))
                }
                Proof::Waiting { .. } => ("waiting", None, None, None),
            };
            let want = (
                want.0,
                want.1.map(str::to_string),
                want.2.map(t),
                want.3.map(t),
            );
            assert_eq!(got, want, "case {i}");
        }
    }

    #[test]
    fn a_soak_on_fewer_nodes_than_soak_nodes_proves_nothing() {
        let r1 = rel("v1");
        let on = |nodes| {
            Some(FullyOn {
                release: &r1,
                image: "ami-1",
                nodes,
            })
        };
        let l = observe(&[], on(4), t(0)).unwrap_or_default();
        // The pool shrank to 2 nodes during the period: recorded, once.
        let l = observe(&l, on(2), t(10)).unwrap_or_default();
        assert_eq!(l[0].nodes, Some(2));
        assert_eq!(observe(&l, on(3), t(20)), None, "more nodes change nothing");
        let (soak, clean, none) = (
            TimeDelta::minutes(60),
            Alarms::default(),
            Quarantined::default(),
        );
        let proof = |needed| best_proven(&l, soak, needed, &clean, &none, false, t(90));
        assert!(matches!(proof(None), Proof::Proven { .. }));
        assert!(matches!(proof(Some(2)), Proof::Proven { .. }));
        assert!(
            matches!(proof(Some(3)), Proof::Waiting { ref why } if why.contains("ran on 2 upstream node(s); promotion.soakNodes asks for 3")),
            "{:?}",
            proof(Some(3))
        );
    }
}
