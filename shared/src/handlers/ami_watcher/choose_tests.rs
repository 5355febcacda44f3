//! Table tests of [`super::choose`]: facts in, verdict (or the next read, or a quarantine) out.

use chrono::{DateTime, Duration, Utc};

use super::*;
use crate::ami::select::Provenance;
use crate::ami::{Architecture, Variant};
use crate::promotion::{Cause, SoakPeriod, Target};
use crate::state::ReleaseEvent;

fn now() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-12-01T12:00:00Z")
        .map(|d| d.with_timezone(&Utc))
        .unwrap_or_default()
}

/// An AL2023 alias image of release `v<date>`, created `age_days` before [`now`].
fn al(id: &str, date: &str, age_days: i64) -> Ami {
    Ami {
        id: id.into(),
        name: format!("amazon-eks-node-al2023-x86_64-standard-1.31-v{date}"),
        architecture: Architecture::X86_64,
        variant: Some(Variant::Standard),
        creation_date: (now() - Duration::days(age_days)).to_rfc3339(),
        deprecated: false,
        source: Provenance {
            term: 0,
            field: "alias".into(),
            value: "al2023@latest".into(),
            parameter: None,
        },
    }
}

fn resolution(desired: &Ami, candidates: &[&Ami]) -> Resolution {
    Resolution {
        pool: "prod/general".into(),
        kubernetes_version: "1.31".into(),
        architecture: Architecture::X86_64,
        desired: desired.clone(),
        candidates: candidates.iter().map(|a| (*a).clone()).collect(),
    }
}

fn policy(promotion: &str) -> Policy {
    crate::policy::parse(&format!(
        "cluster: prod\nname: general\nnodeGroup: {{ autoScalingGroup: prod-general }}\narchitecture: x86_64\namiSelectorTerms: [{{ alias: al2023@latest }}]\n{promotion}"
    ))
    .policy
    .unwrap_or_else(|| panic!("test policy with {promotion:?} is invalid"))
}

fn record(desired: Option<&Ami>) -> PoolRecord {
    PoolRecord {
        pool: "prod/general".into(),
        desired: desired.cloned(),
        ..PoolRecord::default()
    }
}

fn quarantine_of(target: Target) -> Quarantined {
    Quarantined(vec![Quarantine {
        target,
        reason: "bad".into(),
        by: "ops".into(),
        at: now(),
        cause: Cause::Operator {
            request_id: "r-1".into(),
        },
        outbox: Vec::new(),
    }])
}

fn taken(choice: &Choice) -> Option<(&str, bool)> {
    match choice {
        Choice::Is(Verdict::Take { ami, promoted, .. }) => {
            Some((ami.id.as_str(), promoted.is_some()))
        }
        _ => None,
    }
}

fn kept(choice: &Choice) -> Option<&str> {
    match choice {
        Choice::Is(Verdict::Keep { why }) => Some(why.as_str()),
        _ => None,
    }
}

enum Want {
    Take(&'static str),
    Keep(&'static str),
    Failed(&'static str),
}

/// (name, desired before, terms' answer, quarantine, promotion, expected).
type FollowRow<'a> = (
    &'static str,
    Option<&'a Ami>,
    Result<Resolution, String>,
    Quarantined,
    &'static str,
    Want,
);

/// A pool without promotion: each row is (name, desired before, terms' answer, quarantine,
/// minAge, expected: taken id or kept-with-words).
#[test]
fn follow_table() {
    let new = al("ami-new", "20261130", 1);
    let old = al("ami-old", "20261101", 30);
    let older = al("ami-older", "20261001", 60);
    let mid = al("ami-mid", "20261128", 3);
    let none = Quarantined::default();
    let rows: Vec<FollowRow<'_>> = vec![
        (
            "the terms' best is taken",
            Some(&old),
            Ok(resolution(&new, &[&new, &old])),
            none.clone(),
            "",
            Want::Take("ami-new"),
        ),
        (
            "a failed resolution fails",
            Some(&old),
            Err("DescribeImages: throttled".into()),
            none.clone(),
            "",
            Want::Failed("throttled"),
        ),
        (
            "a quarantined best gives way to the next candidate",
            None,
            Ok(resolution(&new, &[&new, &old])),
            quarantine_of(Target::Ami("ami-new".into())),
            "",
            Want::Take("ami-old"),
        ),
        (
            "a quarantined best with the current next keeps it",
            Some(&old),
            Ok(resolution(&new, &[&new, &old])),
            quarantine_of(Target::Ami("ami-new".into())),
            "",
            Want::Keep("which is quarantined"),
        ),
        (
            "never back: the current ranks above the best usable one",
            Some(&mid),
            Ok(resolution(&new, &[&new, &mid, &older])),
            none.clone(),
            "promotion: { minAge: 168h }\n",
            Want::Keep("younger than promotion.minAge"),
        ),
        (
            "a quarantined desired AMI is left to the rotator",
            Some(&old),
            Ok(resolution(&new, &[&new, &old])),
            quarantine_of(Target::Ami("ami-old".into())),
            "",
            Want::Keep("the desired AMI ami-old"),
        ),
        (
            "too young for minAge: the newest old enough",
            Some(&older),
            Ok(resolution(&new, &[&new, &old, &older])),
            none.clone(),
            "promotion: { minAge: 168h }\n",
            Want::Take("ami-old"),
        ),
        (
            "too young, and the current is the newest old enough",
            Some(&old),
            Ok(resolution(&new, &[&new, &old])),
            none.clone(),
            "promotion: { minAge: 168h }\n",
            Want::Keep("younger than promotion.minAge"),
        ),
        (
            "old enough",
            Some(&old),
            Ok(resolution(&new, &[&new, &old])),
            none.clone(),
            "promotion: { minAge: 12h }\n",
            Want::Take("ami-new"),
        ),
    ];
    for (name, desired, terms, quarantined, promotion, want) in rows {
        let p = policy(promotion);
        let rec = desired.map(|d| record(Some(d)));
        let mut facts = Facts::new(&p, rec.as_ref(), &quarantined);
        facts.terms = Some(terms);
        let got = choose(&facts, now());
        match want {
            Want::Take(id) => assert_eq!(taken(&got), Some((id, false)), "{name}: {got:?}"),
            Want::Keep(words) => assert!(
                kept(&got).is_some_and(|w| w.contains(words)),
                "{name}: {got:?}"
            ),
            Want::Failed(words) => assert!(
                matches!(&got, Choice::Is(Verdict::Failed { message }) if message.contains(words)),
                "{name}: {got:?}"
            ),
        }
    }
}

#[test]
fn a_candidate_taken_instead_says_why() {
    let new = al("ami-new", "20261130", 1);
    let old = al("ami-old", "20261101", 30);
    let p = policy("");
    let q = quarantine_of(Target::Ami("ami-new".into()));
    let mut facts = Facts::new(&p, None, &q);
    facts.terms = Some(Ok(resolution(&new, &[&new, &old])));
    let Choice::Is(Verdict::Take { instead, .. }) = choose(&facts, now()) else {
        panic!("expected a take");
    };
    assert!(instead.is_some_and(|w| w.contains("quarantined")));
}

#[test]
fn reads_are_asked_for_in_order_and_only_when_needed() {
    let new = al("ami-new", "20261130", 1);
    let p = policy("");
    let none = Quarantined::default();
    // Nothing read yet: the terms first.
    let mut facts = Facts::new(&p, None, &none);
    assert_eq!(choose(&facts, now()), Choice::Read(Need::Terms));
    // A pool with no desired AMI whose terms' best is too young starts from its group.
    let young = policy("promotion: { minAge: 168h }\n");
    let mut facts_young = Facts::new(&young, None, &none);
    facts_young.terms = Some(Ok(resolution(&new, &[&new])));
    assert_eq!(choose(&facts_young, now()), Choice::Read(Need::GroupImage));
    facts_young.group_image = Some(Some("ami-running".into()));
    assert_eq!(
        choose(&facts_young, now()),
        Choice::Read(Need::ById("ami-running".into()))
    );
    let running = Ami {
        name: "custom-image".into(),
        ..al("ami-running", "20260101", 300)
    };
    facts_young.by_id = Some(Ok(resolution(&running, &[&running])));
    assert_eq!(
        taken(&choose(&facts_young, now())),
        Some(("ami-running", false))
    );
    // A group that names no image: the pool keeps waiting.
    facts_young.group_image = Some(None);
    assert!(kept(&choose(&facts_young, now())).is_some_and(|w| w.contains("minAge")));
    // The terms resolve: no other read.
    facts.terms = Some(Ok(resolution(&new, &[&new])));
    assert_eq!(taken(&choose(&facts, now())), Some(("ami-new", false)));
}

#[test]
fn a_group_image_of_an_alias_release_is_taken_through_the_pinned_alias() {
    let p = policy("promotion: { minAge: 168h }\n");
    let none = Quarantined::default();
    let new = al("ami-new", "20261130", 1);
    let running = al("ami-running", "20261101", 30);
    let mut facts = Facts::new(&p, None, &none);
    facts.terms = Some(Ok(resolution(&new, &[&new])));
    facts.group_image = Some(Some("ami-running".into()));
    let by_id = Ami {
        source: Provenance {
            field: "id".into(),
            value: "ami-running".into(),
            ..running.source.clone()
        },
        ..running.clone()
    };
    facts.by_id = Some(Ok(resolution(&by_id, &[&by_id])));
    assert_eq!(
        choose(&facts, now()),
        Choice::Read(Need::Pinned("v20261101".into()))
    );
    facts
        .pinned
        .insert("v20261101".into(), Ok(resolution(&running, &[&running])));
    let Choice::Is(Verdict::Take { ami, .. }) = choose(&facts, now()) else {
        panic!("expected a take");
    };
    // The alias' image (its release is the version), not the id term's.
    assert_eq!(ami.source.field, "alias");
    assert_eq!(release_of(&ami).as_str(), "v20261101");
}

fn soaked(release: &str, image: &str, days: i64) -> SoakPeriod {
    SoakPeriod {
        release: Release(release.into()),
        image: image.into(),
        since: now() - Duration::days(days),
        until: None,
        nodes: None,
    }
}

/// A pool with `promotion.from`: rows of (name, upstream record, expected).
#[test]
fn promote_table() {
    let p = policy("promotion: { from: prod/canary, soak: 24h }\n");
    let old = al("ami-old", "20261101", 30);
    let new = al("ami-new", "20261130", 3);
    let none = Quarantined::default();
    let current = record(Some(&old));
    let upstream = |ledger: Vec<SoakPeriod>, halted: bool| PoolRecord {
        pool: "prod/canary".into(),
        ledger,
        halted: halted.then(|| crate::state::RecordedError {
            message: "halted".into(),
            at: now(),
        }),
        ..PoolRecord::default()
    };
    // Needs the upstream first.
    let facts = Facts::new(&p, Some(&current), &none);
    assert_eq!(
        choose(&facts, now()),
        Choice::Read(Need::Upstream("prod/canary".into()))
    );
    type PromoteRow = (
        &'static str,
        Result<Option<PoolRecord>, String>,
        &'static str,
    );
    let rows: Vec<PromoteRow> = vec![
        ("no upstream state", Ok(None), "keep:has no state yet"),
        (
            "unreadable upstream",
            Err("throttled".into()),
            "failed:cannot read upstream pool",
        ),
        (
            "soaking upstream",
            Ok(Some(upstream(
                vec![soaked("v20261130", "ami-new-up", 0)],
                false,
            ))),
            "keep:soaking in prod/canary",
        ),
        (
            "halted upstream",
            Ok(Some(upstream(
                vec![soaked("v20261130", "ami-new-up", 3)],
                true,
            ))),
            "keep:halted",
        ),
        (
            "proven upstream: resolve the release for this pool",
            Ok(Some(upstream(
                vec![soaked("v20261130", "ami-new-up", 3)],
                false,
            ))),
            "read:v20261130",
        ),
        (
            "proven and already here",
            Ok(Some(upstream(
                vec![soaked("v20261101", "ami-old-up", 30)],
                false,
            ))),
            "keep:",
        ),
    ];
    for (name, up, want) in rows {
        let mut facts = Facts::new(&p, Some(&current), &none);
        facts.upstream = Some(up);
        let got = choose(&facts, now());
        let (kind, words) = want.split_once(':').unwrap_or((want, ""));
        let ok = match (kind, &got) {
            ("keep", Choice::Is(Verdict::Keep { why })) => {
                if words.is_empty() {
                    why.is_empty()
                } else {
                    why.contains(words)
                }
            }
            ("failed", Choice::Is(Verdict::Failed { message })) => message.contains(words),
            ("read", Choice::Read(Need::Pinned(v))) => v == words,
            _ => false,
        };
        assert!(ok, "{name}: {got:?}");
    }
    // Proven and resolved: taken as promoted.
    let mut facts = Facts::new(&p, Some(&current), &none);
    facts.upstream = Some(Ok(Some(upstream(
        vec![soaked("v20261130", "ami-new-up", 3)],
        false,
    ))));
    facts
        .pinned
        .insert("v20261130".into(), Ok(resolution(&new, &[&new])));
    assert_eq!(taken(&choose(&facts, now())), Some(("ami-new", true)));
    // ... unless this pool's image of it is quarantined.
    let q = quarantine_of(Target::Ami("ami-new".into()));
    let mut facts_q = facts.clone();
    facts_q.quarantined = &q;
    assert!(kept(&choose(&facts_q, now())).is_some_and(|w| w.contains("quarantined")));
    // ... or it does not resolve here.
    facts
        .pinned
        .insert("v20261130".into(), Err("no image for 1.31".into()));
    assert!(kept(&choose(&facts, now())).is_some_and(|w| w.contains("does not resolve")));
}

#[test]
fn an_alarm_firing_while_rolling_to_a_promoted_release_quarantines_it() {
    let p = policy("promotion: { from: prod/canary, soak: 24h, alarms: [errors] }\n");
    let new = al("ami-new", "20261130", 3);
    let none = Quarantined::default();
    let rolling = PoolRecord {
        releases: vec![ReleaseEvent {
            release: Release("v20261130".into()),
            image: "ami-new".into(),
            at: now() - Duration::hours(1),
            how: ReleaseHow::Promoted {
                from: "prod/canary".into(),
                proven_at: now() - Duration::hours(2),
            },
        }],
        ..record(Some(&new))
    };
    let up = PoolRecord {
        pool: "prod/canary".into(),
        ledger: vec![soaked("v20261130", "ami-new-up", 3)],
        ..PoolRecord::default()
    };
    let mut facts = Facts::new(&p, Some(&rolling), &none);
    facts.upstream = Some(Ok(Some(up)));
    assert_eq!(
        choose(&facts, now()),
        Choice::Read(Need::Alarms(vec!["errors".into()]))
    );
    let state = |firing| AlarmState {
        name: "errors".into(),
        firing,
        updated: Some(now() - Duration::days(5)),
    };
    facts.alarms = Some(Ok(vec![state(true)]));
    let Choice::Quarantine { quarantine, why } = choose(&facts, now()) else {
        panic!("expected a quarantine: {:?}", choose(&facts, now()));
    };
    assert_eq!(
        quarantine.target,
        Target::Release(Release("v20261130".into()))
    );
    assert!(matches!(&quarantine.cause, Cause::Alarm { alarm, .. } if alarm == "errors"));
    assert_eq!(why, quarantine.reason);
    // Settled on it already (its soak period here is open): no quarantine, it waits.
    let settled = PoolRecord {
        ledger: vec![soaked("v20261130", "ami-new", 1)],
        ..rolling.clone()
    };
    let mut facts_settled = facts.clone();
    facts_settled.record = Some(&settled);
    assert!(matches!(
        choose(&facts_settled, now()),
        Choice::Is(Verdict::Keep { .. })
    ));
    // Quiet alarms: the release is kept (already here).
    facts.alarms = Some(Ok(vec![state(false)]));
    assert_eq!(kept(&choose(&facts, now())), Some(""));
    // Unreadable alarms: promotion waits, loudly.
    facts.alarms = Some(Err("AccessDenied".into()));
    assert!(matches!(
        choose(&facts, now()),
        Choice::Is(Verdict::Failed { message }) if message.contains("cloudwatch:DescribeAlarms")
    ));
}
