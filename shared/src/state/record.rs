//! The records of the state table (pure): their types, as stored in an item's `doc`, and the
//! merge rules that make concurrent writers safe. No I/O, no key formats (see
//! [`super::keys`]), no bus: an outbox holds leaf [`crate::bus::BusEvent`] values that the
//! announcer staged.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::ami::resolve::Ami;
use crate::promotion::{Quarantined, Release, Rollback, release_of};

/// Entries kept in a pool's resolution history.
pub const HISTORY_LIMIT: usize = 100;

/// One AMI the pool resolved to at some point.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HistoryEntry {
    /// The AMI (with provenance).
    pub ami: Ami,
    /// First observation time.
    pub first_seen: DateTime<Utc>,
    /// Latest observation time.
    pub last_seen: DateTime<Utc>,
}

/// A recorded failure.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RecordedError {
    /// What went wrong and what to fix.
    pub message: String,
    /// When it was observed.
    pub at: DateTime<Utc>,
}

/// A pool's state record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct PoolRecord {
    /// `<cluster>/<name>`.
    pub pool: String,
    /// The AMI the pool should run.
    pub desired: Option<Ami>,
    /// The desired AMI before the last change.
    pub previous_desired: Option<Ami>,
    /// When `desired` last changed.
    pub desired_changed_at: Option<DateTime<Utc>>,
    /// Observation time of the resolution `desired` came from.
    pub resolved_at: Option<DateTime<Utc>>,
    /// Cluster version at that resolution.
    pub kubernetes_version: Option<String>,
    /// Every AMI the pool resolved to, oldest first, at most [`HISTORY_LIMIT`].
    #[serde(default)]
    pub history: Vec<HistoryEntry>,
    /// When the pool's AMI first resolved (the earliest resolution observed, whatever order
    /// writers land in): from then on nodecycle could act on the pool's nodes, so their forced
    /// expiry counts from here at the earliest ([`Self::adopted`]). Absent in records written
    /// before the field existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adopted_at: Option<DateTime<Utc>>,
    /// The latest failure not yet superseded by a later success.
    pub last_error: Option<RecordedError>,
    /// Set when a rotation failed (e.g. a replacement never became Ready): no new rotation
    /// starts until an operator resumes the pool.
    #[serde(default)]
    pub halted: Option<RecordedError>,
    /// Operator override of the desired AMI (`ops pin`) until unpinned; the watcher keeps
    /// recording what the terms resolve to in `desired`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pin: Option<Pin>,
    /// Operator pause (`ops pause`): no voluntary rotation starts until `ops resume`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused: Option<OperatorAction>,
    /// The periods this pool ran one release on all its nodes, healthy (the rotator records
    /// them; downstream pools read them to know what is proven).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ledger: Vec<crate::promotion::SoakPeriod>,
    /// How the desired AMI moved through promotion and rollback, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub releases: Vec<ReleaseEvent>,
    /// What nodecycle holds on the pool's group while it rotates (a process it suspended,
    /// `MaxSize` it raised), recorded before the call; see [`crate::rotation::group`].
    #[serde(
        default,
        skip_serializing_if = "crate::rotation::group::GroupHolds::is_empty"
    )]
    pub group_holds: crate::rotation::group::GroupHolds,
    /// Why a pool with `promotion` keeps its desired AMI (what it waits for), if it does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub promotion_wait: Option<String>,
    /// Repair is suspended by its circuit breaker (too much of the pool or of a zone is
    /// unhealthy: an outage, not a node), since when and why; cleared when it resumes. Its
    /// setting is announced once (*Repair Suspended*).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repair_suspended: Option<RecordedError>,
    /// The pool's passes keep failing: it is left out of passes until `until`
    /// ([`crate::backoff`]); cleared by a successful pass. Its setting is announced once (*Pool
    /// Backing Off*).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff: Option<crate::backoff::Backoff>,
    /// The pool's rollout status as last published ([`crate::rollout`]): the rotator writes it
    /// (and the SSM status parameter) only when it changed; each condition whose status changes
    /// is announced (*Rollout Condition Changed*). Absent before the first pass that computed it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<crate::rollout::Rollout>,
    /// What the ami-watcher last found ahead of time ([`crate::deprecation`]): the pool's AMIs
    /// deprecating within the horizon, the nearest deprecation, and whether its pinned release
    /// has builds for the next Kubernetes minor. Written when it changes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub findings: Option<crate::deprecation::Findings>,
    /// The *AMI Deprecating* announcements made for this pool
    /// ([`crate::deprecation::announce_key`]: AMI and horizon), oldest first, at most 50: each
    /// is announced once.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deprecation_warned: Vec<String>,
    /// Events of transitions of this record not yet put on the bus (see [`crate::bus`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub outbox: Vec<crate::bus::BusEvent>,
    /// The instance ids of the pool's rotation records (in flight or finished), so that a pass
    /// reads them by key in batches instead of querying the pool's partition
    /// ([`super::Repository::pool_partitions`]). May name more than there are (a record the
    /// table expired), never fewer: every writer that creates a rotation record adds its id
    /// in the same transaction ([`super::Repository::put_rotation`]). `None`: not known (a
    /// record written before the index, or by an earlier version, which drops the field): the
    /// pass queries the partition and records what it found.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rotation_index: Option<std::collections::BTreeSet<String>>,
}

/// Release events kept per pool.
pub const RELEASE_EVENTS_LIMIT: usize = 50;

/// A release reaching a pool, or leaving it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReleaseEvent {
    /// The release.
    pub release: crate::promotion::Release,
    /// The image the pool got.
    pub image: String,
    /// When.
    pub at: DateTime<Utc>,
    /// How.
    #[serde(flatten)]
    pub how: ReleaseHow,
}

/// How a release reached (or left) a pool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "how", rename_all = "camelCase")]
pub enum ReleaseHow {
    /// Promoted: proven in the upstream pool.
    #[serde(rename_all = "camelCase")]
    Promoted {
        /// The upstream pool.
        from: String,
        /// When its soak completed.
        proven_at: DateTime<Utc>,
    },
    /// Rolled back to it: the desired release was quarantined.
    #[serde(rename_all = "camelCase")]
    RolledBack {
        /// The quarantined release the pool left.
        from_release: crate::promotion::Release,
        /// The quarantine's reason.
        reason: String,
    },
}

impl PoolRecord {
    /// What the record says of the release the pool runs, for the simulator: the release of
    /// its desired AMI (`None` while pinned: the pin names an image only) and the start of its
    /// open soak period when that period is on the AMI the pool runs (its pin, else its
    /// desired AMI).
    pub fn release_state(&self) -> crate::simulate::ReleaseState {
        let release = match (&self.pin, &self.desired) {
            (None, Some(ami)) => Some(crate::promotion::release_of(ami).0),
            _ => None,
        };
        let effective = self.effective_desired();
        let soaking_since = self
            .ledger
            .iter()
            .rev()
            .find(|p| p.until.is_none())
            .filter(|p| Some(p.image.as_str()) == effective)
            .map(|p| p.since);
        crate::simulate::ReleaseState {
            release,
            soaking_since,
        }
    }

    /// Appends a release event (keeping the last [`RELEASE_EVENTS_LIMIT`]).
    pub fn push_release(&mut self, event: ReleaseEvent) {
        self.releases.push(event);
        if self.releases.len() > RELEASE_EVENTS_LIMIT {
            let excess = self.releases.len() - RELEASE_EVENTS_LIMIT;
            self.releases.drain(..excess);
        }
    }

    /// Moves the desired AMI back to `target` because the current one is quarantined (`why`):
    /// the quarantined AMI becomes `previous_desired`, a pin on it is dropped, a halt caused by
    /// it is lifted (`lift_halt`), and the rollback is recorded.
    pub fn roll_back(
        &self,
        target: &Ami,
        why: &str,
        lift_halt: bool,
        now: DateTime<Utc>,
    ) -> PoolRecord {
        let mut next = self.clone();
        let from = self.desired.clone();
        if let Some(f) = &from {
            next.push_release(ReleaseEvent {
                release: crate::promotion::release_of(target),
                image: target.id.clone(),
                at: now,
                how: ReleaseHow::RolledBack {
                    from_release: crate::promotion::release_of(f),
                    reason: why.to_string(),
                },
            });
        }
        next.previous_desired = from;
        next.desired = Some(target.clone());
        next.desired_changed_at = Some(now);
        next.resolved_at = next.resolved_at.max(Some(now));
        if next
            .pin
            .as_ref()
            .is_some_and(|p| Some(p.ami.as_str()) != Some(target.id.as_str()))
        {
            next.pin = None;
        }
        if lift_halt {
            next.halted = None;
        }
        next
    }
}

impl PoolRecord {
    /// The release the pool's nodes should run, for its rollout status: the pin (its release
    /// read from its image name), else the resolved AMI (its alias release, if it has one).
    pub fn desired_release(&self) -> Option<crate::rollout::Release> {
        match (&self.pin, &self.desired) {
            (Some(p), _) => Some(crate::rollout::Release {
                ami: p.ami.clone(),
                name: p.name.clone(),
                release: p
                    .name
                    .as_deref()
                    .and_then(crate::promotion::release::version_in_name)
                    .map(|r| r.0),
            }),
            (None, Some(a)) => Some(crate::rollout::Release {
                ami: a.id.clone(),
                name: Some(a.name.clone()),
                release: Some(crate::promotion::release_of(a))
                    .filter(|r| !r.is_image())
                    .map(|r| r.0),
            }),
            (None, None) => None,
        }
    }

    /// The release the pool left because it was quarantined: its latest release event, when
    /// that is a rollback to the AMI it should run now.
    pub fn rejected(&self) -> Option<crate::rollout::Rejected> {
        let last = self.releases.last()?;
        match &last.how {
            ReleaseHow::RolledBack {
                from_release,
                reason,
            } if Some(last.image.as_str()) == self.effective_desired() => {
                Some(crate::rollout::Rejected {
                    release: from_release.to_string(),
                    reason: reason.clone(),
                    at: last.at,
                })
            }
            _ => None,
        }
    }

    /// The AMI id nodes should run: the pin, else what the terms resolved to.
    pub fn effective_desired(&self) -> Option<&str> {
        self.pin
            .as_ref()
            .map(|p| p.ami.as_str())
            .or(self.desired.as_ref().map(|a| a.id.as_str()))
    }
}

/// Who did something to a pool, when and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OperatorAction {
    /// The operator's reason.
    pub reason: String,
    /// When.
    pub at: DateTime<Utc>,
    /// Caller identity, when known.
    #[serde(default)]
    pub by: Option<String>,
}

/// A pinned AMI.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Pin {
    /// `ami-...`.
    pub ami: String,
    /// Its name (from DescribeImages at pin time).
    #[serde(default)]
    pub name: Option<String>,
    /// Who, when, why.
    #[serde(flatten)]
    pub by: OperatorAction,
}

/// One watcher observation of a pool.
#[derive(Debug, Clone, PartialEq)]
pub enum Observation {
    /// The terms resolved.
    Resolved {
        /// When the resolution started.
        at: DateTime<Utc>,
        /// Cluster version.
        kubernetes_version: String,
        /// The chosen AMI.
        desired: Ami,
    },
    /// Resolution failed; the pool keeps its desired AMI.
    Failed {
        /// When the resolution started.
        at: DateTime<Utc>,
        /// Why.
        message: String,
    },
}

impl PoolRecord {
    /// When nodecycle adopted the pool: [`Self::adopted_at`], or for a record written before
    /// that field, the first observation its history still holds (the history may have dropped
    /// older ones, so this errs late: nodes are forced later, never earlier). `None` before
    /// the first resolution.
    pub fn adopted(&self) -> Option<DateTime<Utc>> {
        let first_seen = self.history.iter().map(|h| h.first_seen).min();
        match (self.adopted_at, first_seen) {
            (Some(a), Some(h)) => Some(a.min(h)),
            (a, h) => a.or(h),
        }
    }

    /// Applies an observation. Order-independent for the outcome that matters: `desired` is
    /// always the AMI of the newest successful observation, whatever order writers land in,
    /// history keeps every AMI ever observed (earliest first-seen), and an error is cleared only
    /// by a success observed after it. Stale observations never move `desired` backwards.
    pub fn apply(&self, obs: &Observation) -> PoolRecord {
        let mut next = self.clone();
        match obs {
            Observation::Resolved {
                at,
                kubernetes_version,
                desired,
            } => {
                next.adopted_at = Some(self.adopted().map_or(*at, |a| a.min(*at)));
                match next.history.iter_mut().find(|h| h.ami.id == desired.id) {
                    Some(h) => {
                        h.first_seen = h.first_seen.min(*at);
                        h.last_seen = h.last_seen.max(*at);
                    }
                    None => next.history.push(HistoryEntry {
                        ami: desired.clone(),
                        first_seen: *at,
                        last_seen: *at,
                    }),
                }
                next.history.sort_by(|a, b| {
                    a.first_seen
                        .cmp(&b.first_seen)
                        .then(a.ami.id.cmp(&b.ami.id))
                });
                if next.history.len() > HISTORY_LIMIT {
                    let excess = next.history.len() - HISTORY_LIMIT;
                    next.history.drain(..excess);
                }
                let newer = self.resolved_at.is_none_or(|r| *at >= r);
                if newer {
                    if self.desired.as_ref().map(|d| &d.id) != Some(&desired.id) {
                        next.previous_desired = self.desired.clone();
                        next.desired_changed_at = Some(*at);
                    }
                    next.desired = Some(desired.clone());
                    next.resolved_at = Some(*at);
                    next.kubernetes_version = Some(kubernetes_version.clone());
                }
                if next.last_error.as_ref().is_some_and(|e| *at >= e.at) {
                    next.last_error = None;
                }
            }
            Observation::Failed { at, message } => {
                let newer_than_error = self.last_error.as_ref().is_none_or(|e| *at >= e.at);
                let newer_than_success = self.resolved_at.is_none_or(|r| *at >= r);
                if newer_than_error && newer_than_success {
                    next.last_error = Some(RecordedError {
                        message: message.clone(),
                        at: *at,
                    });
                }
            }
        }
        next
    }
}

/// A lease: one holder at a time until it expires.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Lease {
    /// Who holds it (invocation id).
    pub holder: String,
    /// When it lapses if not released.
    pub expires: DateTime<Utc>,
}

/// Promotion decisions over a pool record (pure; see [`crate::promotion`]).
impl PoolRecord {
    /// The AMI this pool, when its desired AMI is quarantined goes back to: its previous desired AMI when
    /// that is not quarantined, else the newest AMI of its history (by last observation) that is
    /// not quarantined and is not the current one. `None` when there is nothing to go back to.
    pub fn rollback_target(&self, quarantined: &Quarantined) -> Option<Ami> {
        let record = self;
        let current = record.desired.as_ref().map(|a| a.id.as_str());
        let ok = |a: &Ami| {
            Some(a.id.as_str()) != current && quarantined.covers(&a.id, &release_of(a)).is_none()
        };
        if let Some(prev) = record.previous_desired.as_ref().filter(|a| ok(a)) {
            return Some(prev.clone());
        }
        let mut history: Vec<_> = record.history.iter().filter(|h| ok(&h.ami)).collect();
        history.sort_by(|a, b| b.last_seen.cmp(&a.last_seen).then(b.ami.id.cmp(&a.ami.id)));
        history.first().map(|h| h.ami.clone())
    }

    /// The rollback this record needs under `quarantined`, if any (see [`Rollback`]).
    pub fn rollback(&self, quarantined: &Quarantined) -> Option<Rollback> {
        let record = self;
        if let Some(pin) = &record.pin {
            let release = record
                .history
                .iter()
                .find(|h| h.ami.id == pin.ami)
                .map(|h| release_of(&h.ami))
                .unwrap_or_else(|| Release(pin.ami.clone()));
            if let Some(q) = quarantined.covers(&pin.ami, &release) {
                return Some(Rollback::Unpin {
                    reason: format!("pinned {} is quarantined: {}", pin.ami, q.reason),
                });
            }
            return None;
        }
        let desired = record.desired.as_ref()?;
        let q = quarantined.covers(&desired.id, &release_of(desired))?;
        let ours = q.cause.pool() == Some(record.pool.as_str());
        let reason = format!(
            "{} ({}) is quarantined: {}",
            desired.id,
            release_of(desired),
            q.reason
        );
        Some(match record.rollback_target(quarantined) {
            Some(target) => Rollback::To {
                target,
                reason,
                lift_halt: ours && record.halted.is_some(),
            },
            None => Rollback::Nowhere {
                reason: format!(
                    "{reason}; the pool has no earlier AMI to go back to: pin one (nodecycle pin) or lift the quarantine"
                ),
            },
        })
    }

    /// Every AMI this pool ever resolved to, most relevant first: desired, previous, then the
    /// history newest first (see [`crate::managed::release_parameters`]).
    pub fn known_amis(&self) -> impl Iterator<Item = &Ami> {
        self.desired
            .iter()
            .chain(self.previous_desired.iter())
            .chain(self.history.iter().rev().map(|h| &h.ami))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::ami::Architecture;
    use crate::ami::select::Provenance;
    use proptest::prelude::*;

    /// A test image `id` named `name-<id>` (x86_64), chosen by an `id` term.
    pub(crate) fn ami(id: &str) -> Ami {
        Ami {
            id: id.into(),
            name: format!("name-{id}"),
            architecture: Architecture::X86_64,
            variant: None,
            creation_date: "2026-01-01T00:00:00Z".into(),
            deprecated: false,
            source: Provenance {
                term: 0,
                field: "id".into(),
                value: id.into(),
                parameter: None,
            },
        }
    }

    fn t(minute: u32) -> DateTime<Utc> {
        DateTime::from_timestamp(1_790_000_000 + i64::from(minute) * 60, 0).unwrap()
    }

    fn ok(minute: u32, id: &str) -> Observation {
        Observation::Resolved {
            at: t(minute),
            kubernetes_version: "1.30".into(),
            desired: ami(id),
        }
    }

    #[test]
    fn a_change_records_previous_and_time() {
        let r = PoolRecord::default()
            .apply(&ok(1, "ami-a"))
            .apply(&ok(2, "ami-b"));
        assert_eq!(r.desired.unwrap().id, "ami-b");
        assert_eq!(r.previous_desired.unwrap().id, "ami-a");
        assert_eq!(r.desired_changed_at, Some(t(2)));
        assert_eq!(r.history.len(), 2);
    }

    #[test]
    fn a_stale_observation_never_moves_desired_backwards() {
        let r = PoolRecord::default()
            .apply(&ok(5, "ami-new"))
            .apply(&ok(3, "ami-old"));
        assert_eq!(r.desired.as_ref().unwrap().id, "ami-new");
        assert!(r.previous_desired.is_none());
        assert_eq!(
            r.history[0].ami.id, "ami-old",
            "history keeps the stale AMI, oldest first"
        );
    }

    #[test]
    fn failure_keeps_desired_and_a_later_success_clears_it() {
        let failed = Observation::Failed {
            at: t(2),
            message: "boom".into(),
        };
        let r = PoolRecord::default().apply(&ok(1, "ami-a")).apply(&failed);
        assert_eq!(r.desired.as_ref().unwrap().id, "ami-a");
        assert_eq!(r.last_error.as_ref().unwrap().message, "boom");
        let r = r.apply(&ok(3, "ami-a"));
        assert!(r.last_error.is_none());
        assert_eq!(r.previous_desired, None, "same AMI is not a change");
    }

    #[test]
    fn a_stale_success_does_not_clear_a_newer_error() {
        let failed = Observation::Failed {
            at: t(5),
            message: "boom".into(),
        };
        let r = PoolRecord::default().apply(&failed).apply(&ok(4, "ami-a"));
        assert!(r.last_error.is_some());
    }

    proptest! {
        #[test]
        fn desired_is_the_newest_success_in_any_order(
            obs in proptest::collection::vec((0u32..50, 0u8..4), 1..12),
            seed in any::<u64>()
        ) {
            // Distinct times so "newest" is well defined.
            let mut seen = std::collections::HashSet::new();
            let obs: Vec<_> = obs.into_iter().filter(|(m, _)| seen.insert(*m)).collect();
            let newest = obs.iter().max_by_key(|(m, _)| *m).map(|(_, i)| format!("ami-{i}"));
            let mut shuffled = obs.clone();
            // Deterministic shuffle from the seed.
            let mut s = seed;
            for i in (1..shuffled.len()).rev() {
                s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                shuffled.swap(i, (s >> 33) as usize % (i + 1));
            }
            let mut r = PoolRecord::default();
            for (m, i) in &shuffled {
                r = r.apply(&ok(*m, &format!("ami-{i}")));
            }
            prop_assert_eq!(r.desired.map(|d| d.id), newest);
            let mut ids: Vec<String> = obs.iter().map(|(_, i)| format!("ami-{i}")).collect();
            ids.sort();
            ids.dedup();
            prop_assert_eq!(r.history.len(), ids.len());
        }
    }

    /// `adoptedAt` is the earliest resolution whatever order the writers land in, and a record
    /// written before the field counts from its history's first observation.
    #[test]
    fn adoption_is_the_earliest_resolution_in_any_order() {
        let t = |h: i64| {
            DateTime::parse_from_rfc3339("2026-12-01T00:00:00Z")
                .unwrap()
                .with_timezone(&Utc)
                + chrono::TimeDelta::hours(h)
        };
        let obs = |h: i64, id: &str| Observation::Resolved {
            at: t(h),
            kubernetes_version: "1.30".into(),
            desired: ami(id),
        };
        let empty = PoolRecord::default();
        assert_eq!(empty.adopted(), None);
        let a = empty.apply(&obs(5, "ami-a")).apply(&obs(2, "ami-b"));
        let b = empty.apply(&obs(2, "ami-b")).apply(&obs(5, "ami-a"));
        assert_eq!(a.adopted_at, Some(t(2)));
        assert_eq!(b.adopted_at, Some(t(2)));
        // An older record: no field, the history's first observation counts.
        let old = PoolRecord {
            adopted_at: None,
            ..a.clone()
        };
        assert_eq!(old.adopted(), Some(t(2)));
        // A failure never adopts.
        let failed = empty.apply(&Observation::Failed {
            at: t(1),
            message: "no image".into(),
        });
        assert_eq!(failed.adopted(), None);
    }
}
