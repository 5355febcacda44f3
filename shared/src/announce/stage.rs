//! Which recorded transition becomes which event (pure): the one place that decides it. The
//! repository ([`crate::state`]) writes records with whatever outbox it is given; the
//! [`super::Announcer`] stages the events of a write with these functions, inside the
//! conditional write that records the transition.

use chrono::{DateTime, Utc};

use crate::bus::{BusEvent, HaltCause, Kind, append, clip, event, stamp};
use crate::promotion::{Cause, Quarantine, Target};
use crate::rotation::{Rotation, Step};
use crate::state::{PoolRecord, ReleaseHow};

/// The event of a rotation record's write from `before` (`None`: the record is new) to
/// `after`, if the write is a transition worth announcing: leaving `Pending` (or a new record
/// that starts past it) is *started*; entering `Done`, `Failed` or `Cancelled` from an
/// unfinished step is *finished* (a repair's: *node repaired*), *failed*, *cancelled*. Anything else (a drain step, a
/// surge given back, a new `Pending` record) is none. The id is
/// `<kind>:<pool>:<instance>:<step>:<step time>`.
pub fn rotation_transition(before: Option<&Rotation>, after: &Rotation) -> Option<BusEvent> {
    let started_before = before.is_some_and(|b| b.in_flight() && b.step != Step::Pending);
    let kind = match after.step {
        Step::Done | Step::Failed | Step::Cancelled if before.is_some_and(|b| b.in_flight()) => {
            match after.step {
                Step::Done if after.reason == crate::rotation::RotationReason::Unhealthy => {
                    Kind::NodeRepaired
                }
                Step::Done => Kind::RotationFinished,
                Step::Failed => Kind::RotationFailed,
                _ => Kind::RotationCancelled,
            }
        }
        Step::Surging | Step::Cordoned | Step::Draining | Step::Terminating if !started_before => {
            Kind::RotationStarted
        }
        _ => return None,
    };
    let step = format!("{:?}", after.step);
    let from_step = before
        .filter(|b| b.in_flight())
        .map(|b| format!("{:?}", b.step));
    let mut e = event(
        kind,
        &after.pool,
        after.step_at,
        &[&after.instance_id, &step],
    );
    let d = &mut e.detail;
    d.instance = Some(after.instance_id.clone());
    d.reason = Some(format!("{:?}", after.reason));
    d.forced = Some(after.forced);
    d.step = Some(step.clone());
    d.from_step = from_step;
    d.replacement = after.replacement.clone();
    d.condition = after.repair.as_ref().map(|r| r.condition.clone());
    if matches!(kind, Kind::RotationFailed | Kind::RotationCancelled) {
        d.error = after.error.as_deref().map(clip);
    }
    Some(e)
}

fn stopped(r: &PoolRecord) -> bool {
    r.halted.is_some() || r.paused.is_some()
}

/// The events of a pool record's write from `before` to `after` at `now`:
/// - *Pool Halted* (`cause: failure`) when `halted` is set, (`cause: operator`) when `paused`
///   is set; id `pool-halted:<pool>:<time of the halt or pause>`;
/// - *Pool Resumed* when neither is set any more; id from the time of what was lifted;
/// - *Pool Backing Off* when `backoff` is set (once per episode); id
///   `pool-backing-off:<pool>:<its first failure>`;
/// - *Repair Suspended* when `repairSuspended` is set; id
///   `repair-suspended:<pool>:<time it was set>`;
/// - *Desired AMI Changed* when the effective desired AMI (the pin, else the resolved AMI)
///   changes to another AMI; id `desired-ami-changed:<pool>:<ami>:<now>`;
/// - *Rollout Condition Changed* for each rollout condition whose status changed
///   ([`crate::rollout::Rollout::changed_since`]); id
///   `rollout-condition-changed:<pool>:<type>:<status>:<since>`;
/// - *AMI Deprecating* for each AMI of `findings` whose announcement key
///   ([`crate::deprecation::announce_key`]) the write added to `deprecationWarned`; id
///   `ami-deprecating:<pool>:<key>:<deprecation time>`.
pub fn pool_transitions(
    before: &PoolRecord,
    after: &PoolRecord,
    now: DateTime<Utc>,
) -> Vec<BusEvent> {
    let pool = if after.pool.is_empty() {
        before.pool.as_str()
    } else {
        after.pool.as_str()
    };
    let mut out = Vec::new();
    if let (None, Some(h)) = (&before.halted, &after.halted) {
        let mut e = event(Kind::PoolHalted, pool, h.at, &[]);
        e.detail.cause = Some(HaltCause::Failure);
        e.detail.reason = Some(clip(&h.message));
        out.push(e);
    }
    if let (None, Some(b)) = (&before.backoff, &after.backoff) {
        let mut e = event(Kind::PoolBackingOff, pool, b.since, &[]);
        e.detail.reason = Some(clip(&b.reason));
        out.push(e);
    }
    if let (None, Some(s)) = (&before.repair_suspended, &after.repair_suspended) {
        let mut e = event(Kind::RepairSuspended, pool, s.at, &[]);
        e.detail.reason = Some(clip(&s.message));
        out.push(e);
    }
    if let (None, Some(p)) = (&before.paused, &after.paused) {
        let mut e = event(Kind::PoolHalted, pool, p.at, &["paused"]);
        e.detail.cause = Some(HaltCause::Operator);
        e.detail.reason = Some(clip(&p.reason));
        e.detail.by = p.by.clone();
        out.push(e);
    }
    if stopped(before) && !stopped(after) {
        let lifted = before
            .halted
            .as_ref()
            .map(|h| (h.at, h.message.as_str()))
            .or(before.paused.as_ref().map(|p| (p.at, p.reason.as_str())));
        if let Some((lifted_at, why)) = lifted {
            let mut e = event(Kind::PoolResumed, pool, lifted_at, &[]);
            e.detail.at = now;
            e.detail.reason = Some(clip(why));
            e.detail.cause = Some(if before.halted.is_some() {
                HaltCause::Failure
            } else {
                HaltCause::Operator
            });
            out.push(e);
        }
    }
    let (was, is) = (before.effective_desired(), after.effective_desired());
    if let Some(ami) = is.filter(|a| Some(*a) != was) {
        let mut e = event(Kind::DesiredAmiChanged, pool, now, &[ami]);
        let d = &mut e.detail;
        d.ami = Some(ami.to_string());
        d.ami_name = match &after.pin {
            Some(p) => p.name.clone(),
            None => after.desired.as_ref().map(|a| a.name.clone()),
        };
        d.previous_ami = was.map(str::to_string);
        d.resolved_ami = after.desired.as_ref().map(|a| a.id.clone());
        d.pinned = Some(after.pin.is_some());
        d.by = after.pin.as_ref().and_then(|p| p.by.by.clone());
        out.push(e);
    }
    if let Some(f) = &after.findings {
        for d in &f.deprecating {
            let key = crate::deprecation::announce_key(&d.ami, f.horizon_days);
            if after.deprecation_warned.contains(&key) && !before.deprecation_warned.contains(&key)
            {
                let mut e = event(Kind::AmiDeprecating, pool, d.deprecates_at, &[&key]);
                let det = &mut e.detail;
                det.ami = Some(d.ami.clone());
                det.ami_name = Some(d.name.clone());
                det.reason = Some(clip(&d.message(now)));
                det.deprecates_at = Some(d.deprecates_at);
                det.uses = Some(
                    d.uses
                        .iter()
                        .map(|u| format!("{u:?}").to_ascii_lowercase())
                        .collect(),
                );
                det.horizon_days = Some(f.horizon_days);
                det.at = now;
                out.push(e);
            }
        }
    }
    if let Some(rollout) = &after.rollout {
        for c in rollout.changed_since(before.rollout.as_ref()) {
            out.push(rollout_changed(rollout, c));
        }
    }
    let promoted = after
        .releases
        .iter()
        .filter(|r| !before.releases.contains(r))
        .filter_map(|r| match &r.how {
            ReleaseHow::Promoted { from, proven_at } => Some((r, from, proven_at)),
            ReleaseHow::RolledBack { .. } => None,
        });
    for (r, from, proven_at) in promoted {
        let release = r.release.to_string();
        let mut e = event(Kind::AmiPromoted, pool, r.at, &[&release, &r.image]);
        let d = &mut e.detail;
        d.ami = Some(r.image.clone());
        d.release = Some(release);
        d.upstream = Some(from.clone());
        d.proven_at = Some(*proven_at);
        out.push(e);
    }
    out
}

/// The *Rollout Condition Changed* event of condition `c` of `rollout`.
fn rollout_changed(rollout: &crate::rollout::Rollout, c: &crate::rollout::Condition) -> BusEvent {
    let kind = format!("{:?}", c.kind);
    let status = format!("{:?}", c.status);
    let mut e = event(
        Kind::RolloutConditionChanged,
        &rollout.pool,
        c.since,
        &[&kind, &status],
    );
    let d = &mut e.detail;
    d.condition = Some(kind);
    d.reason = Some(c.reason.clone());
    d.ami = rollout.desired.as_ref().map(|r| r.ami.clone());
    d.release = rollout.desired.as_ref().and_then(|r| r.release.clone());
    d.rollout = serde_json::to_value(c).ok().map(|mut v| {
        if let Some(o) = v.as_object_mut() {
            o.insert(
                "counts".into(),
                serde_json::to_value(rollout.counts).unwrap_or_default(),
            );
            o.insert(
                "release".into(),
                serde_json::to_value(&rollout.desired).unwrap_or_default(),
            );
        }
        v
    });
    e
}

/// The *AMI Quarantined* event of quarantine entry `q` (recorded by the write that created
/// it). Id `ami-quarantined:<pool or ->:<target sort key>:<time of the quarantine>`.
pub fn quarantined(q: &Quarantine) -> BusEvent {
    let pool = q.cause.pool().unwrap_or_default();
    let sk = crate::state::keys::quarantine_sk(&q.target);
    let mut e = event(Kind::AmiQuarantined, pool, q.at, &[&sk]);
    if pool.is_empty() {
        e.detail.event_id = format!("{}:-:{sk}:{}", Kind::AmiQuarantined.slug(), stamp(q.at));
    }
    let d = &mut e.detail;
    match &q.target {
        Target::Ami(id) => d.ami = Some(id.clone()),
        Target::Release(r) => d.release = Some(r.to_string()),
    }
    d.reason = Some(clip(&q.reason));
    d.by = Some(q.by.clone());
    match &q.cause {
        Cause::ReplacementNotReady { instance, .. } => d.instance = Some(instance.clone()),
        Cause::Alarm { alarm, .. } => d.error = Some(format!("alarm {alarm} in ALARM")),
        Cause::Operator { request_id } => d.source_event_id = Some(request_id.clone()),
        Cause::Unhealthy { .. } | Cause::WorkloadFailures { .. } => {}
        Cause::Withdrawn {
            parameter, version, ..
        } => d.error = Some(format!("{parameter} moved back at version {version}")),
    }
    e
}

/// The *Release Indicted* event of a quarantine caused by health evidence (recorded with its
/// *AMI Quarantined* event), `None` for other causes. Id
/// `release-indicted:<pool>:<target sort key>:<time>`; `evidence` is the indictment (cause,
/// nodes and their conditions, failure reason, tallies new and old).
pub fn indicted(q: &Quarantine) -> Option<BusEvent> {
    let evidence = q.cause.evidence()?;
    let pool = q.cause.pool().unwrap_or_default();
    let sk = crate::state::keys::quarantine_sk(&q.target);
    let mut e = event(Kind::ReleaseIndicted, pool, q.at, &[&sk]);
    let d = &mut e.detail;
    d.release = Some(evidence.release.clone());
    d.reason = Some(clip(&q.reason));
    d.evidence = serde_json::to_value(evidence).ok();
    Some(e)
}

/// `after`, ready to be written over `before`: its outbox is the stored one (`before`'s,
/// which a new record replacing a finished one inherits) plus the event of this transition.
pub fn stage_rotation(before: Option<&Rotation>, mut after: Rotation) -> Rotation {
    let stored = before.map(|b| b.outbox.clone()).unwrap_or_default();
    after.outbox = append(stored, rotation_transition(before, &after));
    after
}

/// `after`, ready to be written over `before` at `now`: `after`'s outbox (the change derives
/// it from `before`'s, and may remove entries already put) plus the events of this write
/// ([`pool_transitions`]).
pub fn stage_pool(before: &PoolRecord, mut after: PoolRecord, now: DateTime<Utc>) -> PoolRecord {
    let new = pool_transitions(before, &after, now);
    after.outbox = append(std::mem::take(&mut after.outbox), new);
    after
}
