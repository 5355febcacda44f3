//! Planning for EKS managed node groups (pure).
//!
//! Drift is fixed by the node group itself: one `UpdateNodegroupVersion` replaces every node,
//! at most `maxUnavailable` at a time. [`plan_managed`] decides whether that update starts this
//! pass and how wide it runs; everything else (expired nodes, operator rotations) is the
//! node-by-node plan of [`plan()`] run against the group's Auto Scaling group, without its
//! launch template action (EKS owns that template) and without drift starts.
//!
//! Rules, in order:
//! 0. A node group that is not `ACTIVE` while nodecycle runs no update of its own (someone
//!    started an update in the console, EKS is creating or repairing it, it is `DEGRADED`):
//!    nothing starts, in-flight rotations still advance.
//! 1. An update that is not finished (`Starting` or `InProgress`) continues; no node-level
//!    rotation starts meanwhile (both would replace nodes of the same group), in-flight ones
//!    still advance. EKS cannot pause an update: if the Drifted budget closes meanwhile the
//!    update runs on, and the plan says so.
//! 2. Gates (stopped, halted, paused, unresolved AMI, untrusted snapshot) start nothing; while
//!    the deployment is stopped a recorded start EKS never received is not issued either.
//! 3. When nodes run another image than the desired AMI, or the group launches another image:
//!    - node-level rotations still in flight: wait for them;
//!    - `allowed(Drifted) == 0`: wait (the budget message says until when);
//!    - the update would outlast the open Drifted window (estimate: waves of `maxUnavailable`
//!      nodes × [`NodeGroupState::wave`]) and a later window within [`FIT_LOOKAHEAD_DAYS`] is
//!      long enough, or longer than what is left of this one by more than a wave: wait for it
//!      (EKS cannot pause an update, so starting now would run into the closed window). When no
//!      window fits, the update starts at the opening of the longest one;
//!    - otherwise start an update to the desired AMI with `maxUnavailable = allowed(Drifted)`
//!      (at most [`MAX_UNAVAILABLE_LIMIT`]); no node-level rotation starts in the same pass.
//! 4. Otherwise the node-level plan stands (minus drift starts, which cannot happen here).
//!
//! Whenever the group launches another AMI than the desired one, no node-level rotation starts
//! (forced expiry and operator rotations included): its replacement would come up on the old AMI
//! and never count as done. Only the update moves the group.

use chrono::{DateTime, TimeDelta, Utc};
use serde::Serialize;

use super::Snapshot;
use super::{Action, Decision, DecisionKind, Plan, budget_message, plan};
use crate::fleet::Lifecycle;
use crate::managed::{MAX_UNAVAILABLE_LIMIT, ManagedUpdate, Phase};
use crate::rotation::{RotationReason, Step};

/// What happens to the node group this pass.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "update", rename_all = "camelCase")]
pub enum UpdateAction {
    /// No update is needed or allowed now.
    None,
    /// The recorded update is not finished: issue its start again if it is still `Starting`
    /// (same client request token), otherwise follow it.
    Continue,
    /// Start an update rolling out `image`.
    #[serde(rename_all = "camelCase")]
    Start {
        /// The desired AMI.
        image: String,
        /// `updateConfig.maxUnavailable` to run it with.
        max_unavailable: u32,
    },
}

/// A managed node group's plan: the node group update and the node-level plan.
///
/// Serializes as the node-level plan's JSON plus `drifted` and the update decision (`update`:
/// `none`, `continue`, or `start` with `image` and `maxUnavailable`); when the update starts,
/// `actions` begins with `{"action": "startNodeGroupUpdate", "image", "maxUnavailable"}`, the
/// executor's first act of the pass, so `actions` lists everything the pass does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManagedPlan {
    /// The node-level plan (budgets, candidates, actions, decisions), adjusted as above. Its
    /// `blocked` says why the update does not start, when it does not.
    pub plan: Plan,
    /// Nodes (in service) running an image other than the desired AMI.
    pub drifted: u32,
    /// The node group update decision.
    pub update: UpdateAction,
}

impl Serialize for ManagedPlan {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Fields<'a> {
            #[serde(flatten)]
            plan: &'a Plan,
            drifted: u32,
            #[serde(flatten)]
            update: &'a UpdateAction,
        }
        let mut value = serde_json::to_value(Fields {
            plan: &self.plan,
            drifted: self.drifted,
            update: &self.update,
        })
        .map_err(serde::ser::Error::custom)?;
        if let UpdateAction::Start {
            image,
            max_unavailable,
        } = &self.update
            && let Some(actions) = value
                .get_mut("actions")
                .and_then(serde_json::Value::as_array_mut)
        {
            actions.insert(
                0,
                serde_json::json!({
                    "action": "startNodeGroupUpdate",
                    "image": image,
                    "maxUnavailable": max_unavailable,
                }),
            );
        }
        value.serialize(serializer)
    }
}

/// Days ahead searched for a Drifted window long enough for an update.
pub const FIT_LOOKAHEAD_DAYS: i64 = 8;

/// What the planner knows about the node group besides the snapshot.
#[derive(Debug, Clone, Copy)]
pub struct NodeGroupState<'a> {
    /// The pool's update record as last observed (after `DescribeUpdate`).
    pub update: Option<&'a ManagedUpdate>,
    /// `DescribeNodegroup` status.
    pub status: &'a str,
    /// Expected time for one wave of `maxUnavailable` replacements (surge, drain, terminate).
    pub wave: std::time::Duration,
}

/// Plans one pass for a managed node group pool. `snapshot.group` is its Auto Scaling group,
/// with `launch_template_image` = the AMI the node group launches now (`None` = unknown).
pub fn plan_managed(
    snapshot: &Snapshot,
    group: &NodeGroupState<'_>,
    now: DateTime<Utc>,
) -> ManagedPlan {
    let (update, status) = (group.update, group.status);
    let mut base = plan(snapshot, now);
    let desired = snapshot.gates.desired_ami.as_deref();
    let drifted = desired.map_or(0, |d| {
        snapshot
            .members
            .iter()
            .filter(|m| m.lifecycle == Lifecycle::InService)
            .filter(|m| m.image_id.as_deref().is_some_and(|i| i != d))
            .count()
    });
    let drifted = u32::try_from(drifted).unwrap_or(u32::MAX);
    let launches_other = match (desired, snapshot.group.launch_template_image.as_deref()) {
        (Some(d), Some(l)) => l != d,
        _ => false,
    };

    // EKS owns the group's launch template; drift is the update's job.
    base.actions
        .retain(|a| !matches!(a, Action::UpdateLaunchTemplate { .. }));
    base.decisions
        .retain(|d| d.kind != DecisionKind::LaunchTemplate);
    drop_actions(
        &mut base,
        |a| {
            matches!(
                a,
                Action::StartRotation {
                    reason: RotationReason::Drifted,
                    ..
                }
            )
        },
        "drifted nodes are replaced by the node group update, not node by node",
    );
    // The node-level plan's "Drifted candidates wait for the Drifted budget" is not what
    // happens to them: the update decision below says whether (and how wide) it starts.
    base.decisions
        .retain(|d| d.waits_for != Some(RotationReason::Drifted));

    let gated = base.gate.is_some();

    // A recorded start that never reached EKS (no update id) for an AMI that is no longer the
    // desired one is superseded: planned as if absent, so a start replaces it.
    let superseded = update.filter(|u| {
        u.phase == Phase::Starting && u.update_id.is_none() && desired.is_some_and(|d| d != u.image)
    });
    if let Some(u) = superseded {
        base.decisions.push(Decision::pool(DecisionKind::NodeGroupUpdate, format!(
            "the recorded start of an update to {} never reached EKS and the desired AMI is now {}: a new start replaces it",
            u.image,
            desired.unwrap_or_default()
        )));
    }
    // While the deployment is stopped, a start recorded but never issued to EKS stays unissued;
    // an update EKS runs goes on (EKS cannot pause one).
    let stopped = matches!(base.gate, Some(super::Gate::Stopped(_)));
    let running = update.filter(|u| {
        !u.phase.is_finished() && superseded.is_none() && !(stopped && u.update_id.is_none())
    });
    let action = if running.is_none() && status != "ACTIVE" {
        let why = format!(
            "node group is {status}, not ACTIVE, and no update of nodecycle's is running: nothing starts until it is ACTIVE"
        );
        hold_starts(&mut base, DecisionKind::Gate, why)
    } else if let Some(u) = running {
        let id = u.update_id.as_deref().unwrap_or("(starting)");
        let why = format!(
            "managed node group update {id} to {} in progress (maxUnavailable {}); node-level rotations wait",
            u.image, u.max_unavailable
        );
        drop_starts(&mut base, &why);
        if stopped {
            base.decisions.push(Decision::pool(DecisionKind::NodeGroupUpdate, format!(
                "the deployment is stopped, but EKS cannot pause update {id}: it runs to completion (its nodes are EKS's to replace)"
            )));
        }
        if base.allowed.drifted == 0 && drifted > 0 {
            base.decisions.push(Decision::pool(DecisionKind::NodeGroupUpdate, format!(
                "Drifted budget is now 0, but EKS cannot pause update {id}: it runs to completion"
            )));
        }
        base.decisions
            .push(Decision::pool(DecisionKind::NodeGroupUpdate, why.clone()));
        base.blocked = Some(why);
        UpdateAction::Continue
    } else if gated || (drifted == 0 && !launches_other) {
        UpdateAction::None
    } else if let Some(d) = desired {
        // Rotations past `Pending` hold nodes of the group: the update waits for them. Those
        // still at `Pending` wait for the update instead (their instance may well be replaced by
        // it), so the two never wait for each other.
        let in_flight = snapshot
            .rotations
            .iter()
            .filter(|r| r.pool == base.pool && r.in_flight() && r.step != Step::Pending)
            .count();
        let what = format!(
            "{drifted} node(s) drifted{}",
            if launches_other {
                format!(
                    ", the node group launches {}",
                    snapshot
                        .group
                        .launch_template_image
                        .as_deref()
                        .unwrap_or("?")
                )
            } else {
                String::new()
            }
        );
        if in_flight > 0 {
            let why = format!(
                "{what}: the node group update waits for {in_flight} node-level rotation(s) in flight"
            );
            hold_starts(&mut base, DecisionKind::Wait, why)
        } else if base.allowed.drifted == 0 {
            let why = budget_message(
                &snapshot.policy.budgets,
                crate::budget::Reason::Drifted,
                base.total,
                base.disrupting,
                0,
                now,
            );
            let said = format!("not starting the node group update: {why}; {what}");
            hold(&mut base, DecisionKind::Wait, said, why)
        } else {
            let max_unavailable = base.allowed.drifted.min(MAX_UNAVAILABLE_LIMIT);
            match window_fit(snapshot, &base, drifted, max_unavailable, group.wave, now) {
                Err(why) => {
                    let said = format!("not starting the node group update: {why}; {what}");
                    hold(&mut base, DecisionKind::Wait, said, why)
                }
                Ok(fit) => {
                    drop_starts(&mut base, "the node group update replaces nodes this pass");
                    base.decisions.push(Decision::pool(DecisionKind::NodeGroupUpdate, format!(
                        "starting the node group update to {d}: {what}; maxUnavailable {max_unavailable} (Drifted budget allows {}); {fit}",
                        base.allowed.drifted
                    )));
                    base.blocked = None;
                    UpdateAction::Start {
                        image: d.to_string(),
                        max_unavailable,
                    }
                }
            }
        }
    } else {
        UpdateAction::None
    };
    // A replacement launched now would come up on what the group launches, not on the desired
    // AMI (only the update changes that): such a rotation could never finish. Node-level starts
    // (expiry, forced expiry, operator rotations) wait for the update.
    // Gates included: a halted or paused pool still advances forced rotations (maintenance
    // near its deadline, interruptions), and their replacement would be just as stranded.
    if launches_other {
        let why = format!(
            "the node group launches {}, not the desired {}, until its update",
            snapshot
                .group
                .launch_template_image
                .as_deref()
                .unwrap_or("?"),
            desired.unwrap_or_default()
        );
        drop_starts(&mut base, &why);
    }
    ManagedPlan {
        plan: base,
        drifted,
        update: action,
    }
}

/// Whether an update of `drifted` nodes, `max_unavailable` at a time, should start now given the
/// Drifted windows: `Ok(how it fits)` or `Err(why wait)`.
fn window_fit(
    snapshot: &Snapshot,
    base: &Plan,
    drifted: u32,
    max_unavailable: u32,
    wave: std::time::Duration,
    now: DateTime<Utc>,
) -> Result<String, String> {
    let wave = TimeDelta::from_std(wave).unwrap_or(TimeDelta::minutes(10));
    let waves = drifted.max(1).div_ceil(max_unavailable.max(1));
    let estimate = wave * i32::try_from(waves).unwrap_or(i32::MAX);
    let spans = crate::budget::open_spans(
        &snapshot.policy.budgets,
        crate::budget::Reason::Drifted,
        base.total,
        now,
        now + TimeDelta::days(FIT_LOOKAHEAD_DAYS),
    );
    let needs = format!(
        "the update needs about {} ({waves} wave(s) of {max_unavailable} x {})",
        fmt(estimate),
        fmt(wave)
    );
    let Some(close) = spans.first().filter(|s| s.start <= now).and_then(|s| s.end) else {
        return Ok(format!("{needs}; the Drifted window stays open"));
    };
    let remaining = close - now;
    if remaining >= estimate {
        return Ok(format!(
            "{needs}; the Drifted window closes at {}",
            super::instant(close)
        ));
    }
    // The first later window long enough, else the longest (the earliest of equals).
    let length = |s: &crate::budget::Span| s.length().unwrap_or(TimeDelta::MAX);
    let later = || spans.iter().skip(1);
    let best = later()
        .find(|s| length(s) >= estimate)
        .or_else(|| later().reduce(|best, s| if length(s) > length(best) { s } else { best }));
    match best {
        Some(b)
            if b.length()
                .is_none_or(|l| l >= estimate || l > remaining + wave) =>
        {
            Err(format!(
                "{needs} but the Drifted window closes at {} and EKS cannot pause an update: waiting for the window opening at {}{}",
                super::instant(close),
                super::instant(b.start),
                b.length()
                    .map(|l| format!(" ({})", fmt(l)))
                    .unwrap_or_default()
            ))
        }
        _ => Ok(format!(
            "{needs}, more than any Drifted window in the next {FIT_LOOKAHEAD_DAYS} days: starting at the opening of the longest (it closes at {})",
            super::instant(close)
        )),
    }
}

/// Starts no update this pass: says `said` as a pool decision of `kind` and records `why` as
/// what blocks the pool.
fn hold(base: &mut Plan, kind: DecisionKind, said: String, why: String) -> UpdateAction {
    base.decisions.push(Decision::pool(kind, said));
    base.blocked = Some(why);
    UpdateAction::None
}

/// Nothing starts this pass, node-level or the update, for `why`: the node-level starts are
/// dropped ([`drop_starts`]) and the pool [`hold`]s with `not starting: <why>`.
fn hold_starts(base: &mut Plan, kind: DecisionKind, why: String) -> UpdateAction {
    drop_starts(base, &why);
    hold(base, kind, format!("not starting: {why}"), why)
}

fn fmt(d: TimeDelta) -> String {
    crate::duration::format(d.to_std().unwrap_or_default())
}

/// Removes every start of the node-level plan: new rotations, the launch template, and the
/// first step of every rotation still at `Pending` (queued operator rotations, maintenance
/// rotations released within budget, forced ones not started yet): their replacement would
/// come up beside (or instead of) the node group's own. Their decisions go with them, and one
/// `Wait` decision per instance says why.
fn drop_starts(plan: &mut Plan, why: &str) {
    drop_actions(
        plan,
        |a| match a {
            Action::StartRotation { .. } | Action::UpdateLaunchTemplate { .. } => true,
            Action::Advance { step, .. } => *step == Step::Pending,
        },
        why,
    );
}

/// Removes the actions matching `drop`, the `Start` decisions of their instances, and says
/// `why` they wait (once per instance).
fn drop_actions(plan: &mut Plan, drop: impl Fn(&Action) -> bool, why: &str) {
    let mut dropped = std::collections::BTreeSet::new();
    plan.actions.retain(|a| {
        if !drop(a) {
            return true;
        }
        match a {
            Action::StartRotation { instance_id, .. } | Action::Advance { instance_id, .. } => {
                dropped.insert(instance_id.clone());
            }
            Action::UpdateLaunchTemplate { .. } => {}
        }
        false
    });
    plan.decisions.retain(|d| {
        !(d.kind == DecisionKind::Start
            && d.instance_id.as_ref().is_some_and(|i| dropped.contains(i)))
    });
    for id in dropped {
        plan.decisions.push(Decision::instance(
            DecisionKind::Wait,
            &id,
            format!("{id} waits: {why}"),
        ));
    }
}

#[cfg(test)]
mod tests {
    use chrono::TimeDelta;

    use super::super::tests::{NEW, OLD, at, member, now, policy, rotation, snapshot};
    use super::*;
    use crate::managed::Phase;
    use crate::rotation::Queue;

    fn budgets(extra: &str) -> crate::policy::Policy {
        policy(&format!(
            "disruption:\n  budgets:\n{extra}expireAfter: 720h\n"
        ))
    }

    fn fleet(old: usize, new: usize) -> Vec<crate::fleet::Member> {
        (0..old)
            .map(|i| member(&format!("i-o{i}"), OLD, 10))
            .chain((0..new).map(|i| member(&format!("i-n{i}"), NEW, 1)))
            .collect()
    }

    fn update(phase: Phase) -> ManagedUpdate {
        let mut u = ManagedUpdate::starting("prod/general", NEW, 2, now() - TimeDelta::minutes(3));
        u.phase = phase;
        u.update_id = (phase != Phase::Starting).then(|| "u-1".to_string());
        u
    }

    fn group<'a>(update: Option<&'a ManagedUpdate>, status: &'a str) -> NodeGroupState<'a> {
        NodeGroupState {
            update,
            status,
            wave: std::time::Duration::from_secs(600),
        }
    }

    fn starts(p: &ManagedPlan) -> usize {
        p.plan
            .actions
            .iter()
            .filter(|a| matches!(a, Action::StartRotation { .. }))
            .count()
    }

    struct Case {
        name: &'static str,
        budgets: &'static str,
        old: usize,
        new: usize,
        launches: &'static str,
        update: Option<Phase>,
        rotations: Vec<crate::rotation::Rotation>,
        gate: Option<&'static str>,
        status: &'static str,
        want: UpdateAction,
        blocked: Option<&'static str>,
    }

    fn start(n: u32) -> UpdateAction {
        UpdateAction::Start {
            image: NEW.into(),
            max_unavailable: n,
        }
    }

    #[test]
    fn update_decisions() {
        let b2 = "    - nodes: \"2\"\n";
        let window0 = "    - nodes: \"2\"\n    - nodes: \"0\"\n      schedule: \"0 12 * * *\"\n      duration: 1h\n";
        let cases = vec![
            Case {
                name: "drift within budget starts with the allowance",
                budgets: b2,
                old: 5,
                new: 0,
                launches: OLD,
                update: None,
                rotations: vec![],
                gate: None,
                status: "ACTIVE",
                want: start(2),
                blocked: None,
            },
            Case {
                name: "percentages: 50% of 6",
                budgets: "    - nodes: \"50%\"\n",
                old: 6,
                new: 0,
                launches: OLD,
                update: None,
                rotations: vec![],
                gate: None,
                status: "ACTIVE",
                want: start(3),
                blocked: None,
            },
            Case {
                name: "budget above 100 is capped at EKS's limit",
                budgets: "    - nodes: \"100%\"\n",
                old: 150,
                new: 0,
                launches: OLD,
                update: None,
                rotations: vec![],
                gate: None,
                status: "ACTIVE",
                want: start(100),
                blocked: None,
            },
            Case {
                name: "closed window waits until it opens",
                budgets: window0,
                old: 3,
                new: 0,
                launches: OLD,
                update: None,
                rotations: vec![],
                gate: None,
                status: "ACTIVE",
                want: UpdateAction::None,
                blocked: Some("until 2026-12-05T13:00:00Z"),
            },
            Case {
                name: "no drift, group launches desired: nothing",
                budgets: b2,
                old: 0,
                new: 4,
                launches: NEW,
                update: None,
                rotations: vec![],
                gate: None,
                status: "ACTIVE",
                want: UpdateAction::None,
                blocked: None,
            },
            Case {
                name: "no node drifted but the group launches the old AMI (scale-outs would)",
                budgets: b2,
                old: 0,
                new: 2,
                launches: OLD,
                update: None,
                rotations: vec![],
                gate: None,
                status: "ACTIVE",
                want: start(2),
                blocked: None,
            },
            Case {
                name: "update in progress continues, even in a closed window",
                budgets: window0,
                old: 3,
                new: 1,
                launches: NEW,
                update: Some(Phase::InProgress),
                rotations: vec![],
                gate: None,
                status: "UPDATING",
                want: UpdateAction::Continue,
                blocked: Some("u-1"),
            },
            Case {
                name: "a Starting record continues (same token)",
                budgets: b2,
                old: 3,
                new: 0,
                launches: OLD,
                update: Some(Phase::Starting),
                rotations: vec![],
                gate: None,
                status: "UPDATING",
                want: UpdateAction::Continue,
                blocked: Some("in progress"),
            },
            Case {
                name: "a finished update and new drift: start again",
                budgets: b2,
                old: 3,
                new: 0,
                launches: OLD,
                update: Some(Phase::Successful),
                rotations: vec![],
                gate: None,
                status: "ACTIVE",
                want: start(2),
                blocked: None,
            },
            Case {
                name: "halted: nothing",
                budgets: b2,
                old: 3,
                new: 0,
                launches: OLD,
                update: Some(Phase::Failed),
                rotations: vec![],
                gate: Some("halted"),
                status: "ACTIVE",
                want: UpdateAction::None,
                blocked: Some("halted"),
            },
            Case {
                name: "paused: nothing",
                budgets: b2,
                old: 3,
                new: 0,
                launches: OLD,
                update: None,
                rotations: vec![],
                gate: Some("paused"),
                status: "ACTIVE",
                want: UpdateAction::None,
                blocked: Some("paused"),
            },
            Case {
                name: "unresolved AMI: nothing",
                budgets: b2,
                old: 3,
                new: 0,
                launches: OLD,
                update: None,
                rotations: vec![],
                gate: Some("unresolved"),
                status: "ACTIVE",
                want: UpdateAction::None,
                blocked: Some("unresolved"),
            },
            Case {
                name: "node-level rotation in flight: the update waits",
                budgets: b2,
                old: 3,
                new: 0,
                launches: OLD,
                update: None,
                rotations: vec![rotation("i-o0", RotationReason::Expired, Step::Draining)],
                gate: None,
                status: "ACTIVE",
                want: UpdateAction::None,
                blocked: Some("waits for 1 node-level rotation"),
            },
            Case {
                name: "someone else's update (UPDATING, no record): nothing starts",
                budgets: b2,
                old: 3,
                new: 0,
                launches: OLD,
                update: None,
                rotations: vec![],
                gate: None,
                status: "UPDATING",
                want: UpdateAction::None,
                blocked: Some("UPDATING, not ACTIVE"),
            },
            Case {
                name: "DEGRADED: nothing starts",
                budgets: b2,
                old: 0,
                new: 3,
                launches: NEW,
                update: None,
                rotations: vec![],
                gate: None,
                status: "DEGRADED",
                want: UpdateAction::None,
                blocked: Some("DEGRADED"),
            },
        ];
        for c in cases {
            let mut s = snapshot(budgets(c.budgets), fleet(c.old, c.new), c.rotations);
            s.group.launch_template_image = Some(c.launches.to_string());
            match c.gate {
                Some("halted") => s.gates.halted = Some("update u-1 failed".into()),
                Some("paused") => s.gates.paused = Some("by ops: freeze".into()),
                Some("unresolved") => s.gates.desired_ami = None,
                _ => {}
            }
            let u = c.update.map(update);
            let p = plan_managed(&s, &group(u.as_ref(), c.status), now());
            assert_eq!(p.update, c.want, "{}: {:?}", c.name, p.plan.decisions);
            match c.blocked {
                Some(want) => {
                    let got = p.plan.blocked.clone().unwrap_or_default();
                    assert!(got.contains(want), "{}: blocked {got:?}", c.name);
                }
                None => assert_eq!(p.plan.blocked, None, "{}", c.name),
            }
            // Never a drift start node by node, never a launch template change.
            assert!(
                p.plan.actions.iter().all(|a| !matches!(
                    a,
                    Action::UpdateLaunchTemplate { .. }
                        | Action::StartRotation {
                            reason: RotationReason::Drifted,
                            ..
                        }
                )),
                "{}: {:?}",
                c.name,
                p.plan.actions
            );
            if matches!(
                p.update,
                UpdateAction::Start { .. } | UpdateAction::Continue
            ) {
                assert_eq!(
                    starts(&p),
                    0,
                    "{}: no node-level start beside an update",
                    c.name
                );
            }
        }
    }

    /// Issue 25: `nodecycle plan` of a managed node group whose update starts printed
    /// `actions: []` and a decision "not starting: Drifted budget ..." (the node-level plan's
    /// wait for the drifted candidates the update replaces).
    #[test]
    fn the_plan_of_a_managed_group_says_what_the_pass_does_to_it() {
        let wait_decisions = |p: &ManagedPlan| {
            p.plan
                .decisions
                .iter()
                .filter(|d| d.instance_id.is_none() && d.kind == DecisionKind::Wait)
                .count()
        };
        // Six drifted nodes, budget 2: the update starts two wide.
        let mut s = snapshot(budgets("    - nodes: \"2\"\n"), fleet(6, 0), vec![]);
        s.group.launch_template_image = Some(OLD.to_string());
        let p = plan_managed(&s, &group(None, "ACTIVE"), now());
        assert_eq!(p.update, start(2));
        let json = serde_json::to_value(&p).expect("serializes");
        assert_eq!(
            json["actions"],
            serde_json::json!([{"action": "startNodeGroupUpdate", "image": NEW, "maxUnavailable": 2}]),
            "{json}"
        );
        assert_eq!(json["update"], "start");
        assert_eq!(wait_decisions(&p), 0, "{:?}", p.plan.decisions);
        let update_decisions = p
            .plan
            .decisions
            .iter()
            .filter(|d| d.kind == DecisionKind::NodeGroupUpdate)
            .count();
        assert_eq!(update_decisions, 1, "{:?}", p.plan.decisions);
        // A closed window: nothing starts, and one decision (the update's) says why.
        let window0 = "    - nodes: \"2\"\n    - nodes: \"0\"\n      schedule: \"0 12 * * *\"\n      duration: 1h\n";
        let mut s = snapshot(budgets(window0), fleet(6, 0), vec![]);
        s.group.launch_template_image = Some(OLD.to_string());
        let p = plan_managed(&s, &group(None, "ACTIVE"), at("2026-12-05T12:30:00Z"));
        assert_eq!(p.update, UpdateAction::None);
        let json = serde_json::to_value(&p).expect("serializes");
        assert_eq!(json["actions"], serde_json::json!([]), "{json}");
        assert_eq!(wait_decisions(&p), 1, "{:?}", p.plan.decisions);
    }

    #[test]
    fn expired_nodes_rotate_node_by_node_when_nothing_drifted() {
        let mut members = fleet(0, 3);
        members[0].launch_time = now() - TimeDelta::hours(800);
        let s = snapshot(budgets("    - nodes: \"1\"\n"), members, vec![]);
        let p = plan_managed(&s, &group(None, "ACTIVE"), now());
        assert_eq!(p.update, UpdateAction::None);
        assert_eq!(starts(&p), 1, "{:?}", p.plan.decisions);
        // Its start decision stays (only the dropped drifted starts' decisions go).
        assert!(
            p.plan
                .decisions
                .iter()
                .any(|d| d.kind == DecisionKind::Start && d.instance_id.as_deref() == Some("i-n0")),
            "{:?}",
            p.plan.decisions
        );
    }

    #[test]
    fn in_flight_rotations_keep_advancing_and_queued_ones_wait_during_an_update() {
        let draining = rotation("i-o0", RotationReason::Expired, Step::Draining);
        let mut queued = rotation("i-o1", RotationReason::Manual, Step::Pending);
        queued.queued = Some(Queue {
            request_id: "r1".into(),
            ignore_budgets: true,
            max_concurrent: 5,
            reason: "test".into(),
        });
        let s = snapshot(
            budgets("    - nodes: \"3\"\n"),
            fleet(3, 0),
            vec![draining, queued],
        );
        let u = update(Phase::InProgress);
        let p = plan_managed(&s, &group(Some(&u), "UPDATING"), now());
        let advanced: Vec<&str> = p
            .plan
            .actions
            .iter()
            .filter_map(|a| match a {
                Action::Advance { instance_id, .. } => Some(instance_id.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(advanced, ["i-o0"]);
    }

    /// Defect 4 of the rotation-core issue: a budgeted maintenance rotation was released (its
    /// first step planned) during a running node group update; its replacement would come up
    /// beside the update's and never match.
    #[test]
    fn maintenance_and_pending_rotations_wait_during_an_update() {
        let mut maintenance = rotation("i-n1", RotationReason::Maintenance, Step::Pending);
        maintenance.deadline = Some(now() + TimeDelta::days(3));
        let forced = rotation("i-n2", RotationReason::Interrupted, Step::Pending);
        let s = snapshot(
            budgets("    - nodes: \"3\"\n"),
            fleet(0, 3),
            vec![maintenance, forced],
        );
        // Without an update both go (released within budget / in flight).
        let idle = plan_managed(&s, &group(None, "ACTIVE"), now());
        let moving = |p: &ManagedPlan| -> Vec<String> {
            p.plan
                .actions
                .iter()
                .filter_map(|a| match a {
                    Action::Advance { instance_id, .. } => Some(instance_id.clone()),
                    _ => None,
                })
                .collect()
        };
        assert_eq!(moving(&idle), ["i-n2", "i-n1"], "{:?}", idle.plan.decisions);
        let u = update(Phase::InProgress);
        let p = plan_managed(&s, &group(Some(&u), "UPDATING"), now());
        assert!(moving(&p).is_empty(), "{:?}", p.plan.actions);
        for id in ["i-n1", "i-n2"] {
            let kinds: Vec<DecisionKind> = p
                .plan
                .decisions
                .iter()
                .filter(|d| d.instance_id.as_deref() == Some(id))
                .map(|d| d.kind)
                .collect();
            assert!(
                kinds.contains(&DecisionKind::Wait) && !kinds.contains(&DecisionKind::Start),
                "{id}: {:?}",
                p.plan.decisions
            );
        }
    }

    #[test]
    fn serializes_the_update_beside_the_plan() {
        let mut s = snapshot(budgets("    - nodes: \"2\"\n"), fleet(2, 0), vec![]);
        s.group.launch_template_image = Some(OLD.into());
        let v = serde_json::to_value(plan_managed(
            &s,
            &group(None, "ACTIVE"),
            at("2026-12-05T12:00:00Z"),
        ))
        .unwrap_or_default();
        assert_eq!(v["update"], "start", "{v}");
        assert_eq!(v["maxUnavailable"], 2, "{v}");
        assert_eq!(v["drifted"], 2, "{v}");
        assert_eq!(v["allowed"]["Drifted"], 2, "{v}");
    }

    #[test]
    fn an_update_starts_only_when_it_fits_the_open_window() {
        // Business-hours freeze: 0 from 09:00 for 9h UTC, else 2 (open 18:00 -> 09:00).
        let freeze = "    - nodes: \"2\"\n    - nodes: \"0\"\n      schedule: \"0 9 * * *\"\n      duration: 9h\n";
        // Open only 01:00 -> 02:00 (a "0" budget 23h a day from 02:00).
        let hour = "    - nodes: \"1\"\n    - nodes: \"0\"\n      schedule: \"0 2 * * *\"\n      duration: 23h\n";
        // The same, but on Saturdays closed from 01:30: open 01:00 -> 01:30.
        let short_saturday = "    - nodes: \"1\"\n    - nodes: \"0\"\n      schedule: \"0 2 * * *\"\n      duration: 23h\n    - nodes: \"0\"\n      schedule: \"30 1 * * sat\"\n      duration: 30m\n";
        let cases: Vec<(&str, &str, usize, &str, Option<&str>)> = vec![
            // 6 drifted / 2 = 3 waves x 10m = 30m, 30m left: starts.
            ("fits exactly", freeze, 6, "2026-12-05T08:30:00Z", None),
            // 8 drifted = 40m > 30m left, the evening window is 15h: wait for it.
            (
                "waits for the evening",
                freeze,
                8,
                "2026-12-05T08:30:00Z",
                Some("waiting for the window opening at 2026-12-05T18:00:00Z (15h)"),
            ),
            // 10 drifted at 1 = 100m; no window is longer than 1h: start at the opening.
            (
                "no window fits: starts at the opening",
                hour,
                10,
                "2026-12-05T01:00:00Z",
                None,
            ),
            // Half an hour in, tomorrow's whole hour is better by more than a wave: wait.
            (
                "no window fits: waits for a whole one",
                hour,
                10,
                "2026-12-05T01:30:00Z",
                Some("waiting for the window opening at 2026-12-06T01:00:00Z (1h)"),
            ),
            // Five minutes in (less than a wave lost): start.
            (
                "no window fits: a late pass still starts",
                hour,
                10,
                "2026-12-05T01:05:00Z",
                None,
            ),
            // Ten minutes in: tomorrow's hour is longer than what is left by exactly one wave,
            // not more: start.
            (
                "no window fits: a wave lost is not worth a day",
                hour,
                10,
                "2026-12-05T01:10:00Z",
                None,
            ),
            // Friday 01:30, 30m left; Saturday's window is cut to 30m, Sunday's is the whole
            // hour: the longest later window is the one waited for.
            (
                "no window fits: waits for the longest later one",
                short_saturday,
                10,
                "2026-12-04T01:30:00Z",
                Some("waiting for the window opening at 2026-12-06T01:00:00Z (1h)"),
            ),
        ];
        for (name, b, old, at_, wait) in cases {
            let mut s = snapshot(budgets(b), fleet(old, 0), vec![]);
            s.group.launch_template_image = Some(OLD.into());
            let p = plan_managed(&s, &group(None, "ACTIVE"), at(at_));
            match wait {
                None => assert!(
                    matches!(p.update, UpdateAction::Start { .. }),
                    "{name}: {:?}",
                    p.plan.decisions
                ),
                Some(why) => {
                    assert_eq!(p.update, UpdateAction::None, "{name}");
                    let blocked = p.plan.blocked.unwrap_or_default();
                    assert!(blocked.contains(why), "{name}: {blocked}");
                    assert!(blocked.contains("EKS cannot pause"), "{name}: {blocked}");
                }
            }
        }
    }

    #[test]
    fn a_start_that_never_reached_eks_is_superseded_by_a_newer_ami() {
        let mut s = snapshot(budgets("    - nodes: \"2\"\n"), fleet(3, 0), vec![]);
        s.group.launch_template_image = Some(OLD.into());
        let mut stale = update(Phase::Starting);
        stale.image = "ami-older".into();
        let p = plan_managed(&s, &group(Some(&stale), "ACTIVE"), now());
        assert_eq!(p.update, start(2), "{:?}", p.plan.decisions);
        // Once EKS accepted it (an update id), it runs to completion instead.
        stale.update_id = Some("u-9".into());
        stale.phase = Phase::InProgress;
        let p = plan_managed(&s, &group(Some(&stale), "UPDATING"), now());
        assert_eq!(p.update, UpdateAction::Continue);
        // A start for the desired AMI itself is continued, not replaced.
        let own = update(Phase::Starting);
        let p = plan_managed(&s, &group(Some(&own), "ACTIVE"), now());
        assert_eq!(p.update, UpdateAction::Continue);
    }

    #[test]
    fn no_node_level_start_while_the_group_launches_another_ami() {
        // A forced-expired node and a queued emergency rotation, in a closed window, while the
        // group still launches the old AMI: both wait for the update.
        let freeze = "    - nodes: \"0\"\n";
        let mut members = fleet(2, 0);
        members[0].launch_time = now() - TimeDelta::hours(2000);
        let mut queued = rotation("i-o1", RotationReason::Manual, Step::Pending);
        queued.queued = Some(Queue {
            request_id: "r1".into(),
            ignore_budgets: true,
            max_concurrent: 5,
            reason: "CVE".into(),
        });
        let mut s = snapshot(budgets(freeze), members, vec![queued]);
        s.group.launch_template_image = Some(OLD.into());
        let p = plan_managed(&s, &group(None, "ACTIVE"), now());
        assert_eq!(p.update, UpdateAction::None);
        assert!(p.plan.actions.is_empty(), "{:?}", p.plan.actions);
        let about_o1: Vec<DecisionKind> = p
            .plan
            .decisions
            .iter()
            .filter(|d| d.instance_id.as_deref() == Some("i-o1"))
            .map(|d| d.kind)
            .collect();
        // The release's "starting" decision went with its action; the wait is said instead.
        assert_eq!(about_o1, vec![DecisionKind::Wait], "{:?}", p.plan.decisions);
        // Once the group launches the desired AMI, they go.
        s.group.launch_template_image = Some(NEW.into());
        for m in &mut s.members {
            m.image_id = Some(NEW.into());
        }
        let p = plan_managed(&s, &group(None, "ACTIVE"), now());
        assert!(!p.plan.actions.is_empty(), "{:?}", p.plan.decisions);
    }

    /// Found by `a_managed_group_never_starts_node_level_work_beside_its_update` (CI): a
    /// halted or paused pool advanced a forced maintenance rotation (deadline in 10 minutes) at
    /// `Pending` while the group launched the old AMI, because the "launches another AMI" rule
    /// skipped gated pools; its replacement would have come up on the old AMI.
    #[test]
    fn gated_pools_do_not_start_forced_work_while_the_group_launches_another_ami() {
        let mut maintenance = rotation("i-o0", RotationReason::Maintenance, Step::Pending);
        maintenance.deadline = Some(now() + TimeDelta::minutes(10));
        for gate in ["halted", "paused"] {
            let mut s = snapshot(
                budgets("    - nodes: \"0\"\n"),
                fleet(1, 0),
                vec![maintenance.clone()],
            );
            match gate {
                "halted" => s.gates.halted = Some("rotation of i-x failed".into()),
                _ => s.gates.paused = Some("operator".into()),
            }
            // The group launches the desired AMI: the forced rotation goes despite the gate.
            s.group.launch_template_image = Some(NEW.into());
            let p = plan_managed(&s, &group(None, "ACTIVE"), now());
            assert!(
                p.plan.actions.iter().any(|a| matches!(a, Action::Advance { instance_id, step: Step::Pending } if instance_id == "i-o0")),
                "{gate}: {:?}",
                p.plan.decisions
            );
            // It launches the old one: the rotation waits, and the plan says why.
            s.group.launch_template_image = Some(OLD.into());
            let p = plan_managed(&s, &group(None, "ACTIVE"), now());
            assert!(p.plan.actions.is_empty(), "{gate}: {:?}", p.plan.actions);
            assert!(
                p.plan
                    .decisions
                    .iter()
                    .any(|d| d.kind == DecisionKind::Wait
                        && d.instance_id.as_deref() == Some("i-o0")),
                "{gate}: {:?}",
                p.plan.decisions
            );
        }
    }

    /// EKS owns a managed group's launch template: the plan never says it moves it, even when
    /// the node-level plan would have.
    #[test]
    fn the_plan_never_moves_a_managed_groups_launch_template() {
        let mut s = snapshot(budgets("    - nodes: \"2\"\n"), fleet(3, 0), vec![]);
        s.group.launch_template_image = Some(OLD.into());
        let p = plan_managed(&s, &group(None, "ACTIVE"), now());
        assert_eq!(p.update, start(2));
        assert!(
            !p.plan
                .actions
                .iter()
                .any(|a| matches!(a, Action::UpdateLaunchTemplate { .. })),
            "{:?}",
            p.plan.actions
        );
        assert!(
            !p.plan
                .decisions
                .iter()
                .any(|d| d.kind == DecisionKind::LaunchTemplate),
            "{:?}",
            p.plan.decisions
        );
        assert!(
            p.plan
                .decisions
                .iter()
                .any(|d| d.kind == DecisionKind::NodeGroupUpdate),
            "{:?}",
            p.plan.decisions
        );
    }

    /// A running update whose Drifted budget has closed says it runs on (EKS cannot pause it),
    /// only while nodes are still drifted and only when the budget is 0.
    #[test]
    fn a_running_update_says_when_its_budget_closed_under_it() {
        let open = "    - nodes: \"2\"\n";
        // 0 from 12:00 for 1h: closed at now().
        let closed = "    - nodes: \"2\"\n    - nodes: \"0\"\n      schedule: \"0 12 * * *\"\n      duration: 1h\n";
        let cases = [
            ("budget closed, nodes drifted", closed, 3, 0, true),
            ("budget closed, one node drifted", closed, 1, 2, true),
            ("budget open, nodes drifted", open, 3, 0, false),
            ("budget closed, nothing drifted", closed, 0, 3, false),
        ];
        let said = "Drifted budget is now 0, but EKS cannot pause update u-1";
        for (name, b, old, new, want) in cases {
            let s = snapshot(budgets(b), fleet(old, new), vec![]);
            let u = update(Phase::InProgress);
            let p = plan_managed(&s, &group(Some(&u), "UPDATING"), now());
            assert_eq!(p.update, UpdateAction::Continue, "{name}");
            let says = p
                .plan
                .decisions
                .iter()
                .any(|d| d.kind == DecisionKind::NodeGroupUpdate && d.message.contains(said));
            assert_eq!(says, want, "{name}: {:?}", p.plan.decisions);
        }
    }

    /// The update waits for this pool's rotations past `Pending` only: not for its own queued
    /// (`Pending`) or finished ones, nor for another pool's.
    #[test]
    fn the_update_waits_only_for_this_pools_rotations_past_pending() {
        let mut other = rotation("i-x0", RotationReason::Expired, Step::Draining);
        other.pool = "prod/other".into();
        let cases = [
            (
                "own draining rotation",
                rotation("i-o0", RotationReason::Expired, Step::Draining),
                true,
            ),
            (
                "own surging rotation",
                rotation("i-o0", RotationReason::Expired, Step::Surging),
                true,
            ),
            (
                "own pending rotation",
                rotation("i-o0", RotationReason::Expired, Step::Pending),
                false,
            ),
            (
                "own finished rotation",
                rotation("i-o0", RotationReason::Expired, Step::Done),
                false,
            ),
            ("another pool's draining rotation", other, false),
        ];
        for (name, r, waits) in cases {
            let s = snapshot(budgets("    - nodes: \"3\"\n"), fleet(3, 0), vec![r]);
            let p = plan_managed(&s, &group(None, "ACTIVE"), now());
            if waits {
                assert_eq!(p.update, UpdateAction::None, "{name}");
                let blocked = p.plan.blocked.unwrap_or_default();
                assert!(
                    blocked.contains("waits for 1 node-level rotation(s) in flight"),
                    "{name}: {blocked}"
                );
            } else {
                assert!(
                    matches!(p.update, UpdateAction::Start { .. }),
                    "{name}: {:?}",
                    p.plan.decisions
                );
            }
        }
    }
}
