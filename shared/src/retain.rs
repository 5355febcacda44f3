//! Retain, not kill (the pure part): how a terminate lifecycle action handed over to the
//! rotator is answered, when an instance Auto Scaling retained (`Terminating:Retained`) may be
//! terminated, and whether a group's instance lifecycle policy retains.
//!
//! A self-managed group whose instance lifecycle policy says
//! `RetentionTriggers.TerminateHookAbandon: retain` keeps an instance whose terminate lifecycle
//! action was abandoned (CompleteLifecycleAction ABANDON, or a timeout with the hook's default
//! result ABANDON) in `Terminating:Retained` instead of terminating it. Such an instance no
//! longer counts toward the group's desired capacity and stays until
//! TerminateInstanceInAutoScalingGroup ends it. nodecycle uses that as the last guard against
//! killing a node whose drain never finished:
//!
//! * the interruption handler's schedule tick answers a handed-over action CONTINUE only once
//!   the drain finished, and ABANDON once the action is out of time
//!   ([`hand_over_answer`], [`hand_over_limit`]);
//! * the rotator terminates a retained instance only once its node has no evictable pod left,
//!   or is gone ([`cleanup`]); never one with pods;
//! * `status`, `doctor`, the `RetainedInstances` metric and its alarm report retained instances
//!   (`doctor` also warns about a group with the hook whose policy does not retain:
//!   [`policy_retains`]).

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::fleet::Member;

/// The Auto Scaling lifecycle state of a retained instance.
pub const RETAINED: &str = "Terminating:Retained";

/// The `TerminateHookAbandon` retention trigger value that retains.
pub const RETAIN: &str = "retain";

/// The longest a lifecycle action can last whatever its heartbeats (Auto Scaling's global
/// timeout is 100 times the hook's heartbeat timeout, at most 48 hours).
pub const GLOBAL_TIMEOUT_CAP: Duration = Duration::from_secs(48 * 3600);

/// How a handed-over terminate lifecycle action is answered at one schedule tick.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum HandOverAnswer {
    /// The drain finished: CompleteLifecycleAction CONTINUE (the instance terminates empty).
    Continue,
    /// Still draining and in time: RecordLifecycleActionHeartbeat.
    Heartbeat,
    /// Still draining and out of time: CompleteLifecycleAction ABANDON (with the group's
    /// retain policy the instance is retained with its pods; without it, it terminates as a
    /// timeout would have terminated it).
    Abandon,
}

/// The answer to a handed-over action whose drain is `drained` (finished) or not, which
/// started at `started` (the lifecycle event's time), at `now`, when nodecycle abandons an
/// action still draining `limit` after it started ([`hand_over_limit`]). A finished drain is
/// always continued, however late; an unfinished one is never continued.
pub fn hand_over_answer(
    drained: bool,
    started: DateTime<Utc>,
    now: DateTime<Utc>,
    limit: Duration,
) -> HandOverAnswer {
    if drained {
        return HandOverAnswer::Continue;
    }
    let elapsed = (now - started).to_std().unwrap_or_default();
    if elapsed >= limit {
        HandOverAnswer::Abandon
    } else {
        HandOverAnswer::Heartbeat
    }
}

/// How long after its start a handed-over action still draining is abandoned, for a hook
/// whose heartbeat timeout is `heartbeat_timeout`: Auto Scaling's global timeout (100 times
/// the heartbeat timeout, at most 48 hours) less a margin of a tenth of it, at least 5 minutes
/// (five schedule ticks) and at most half of it. nodecycle answers before Auto Scaling's own
/// timeout does, so the hook's default result never decides (a `CONTINUE` default would
/// terminate the node with its pods).
pub fn hand_over_limit(heartbeat_timeout: Duration) -> Duration {
    let global = heartbeat_timeout
        .saturating_mul(100)
        .min(GLOBAL_TIMEOUT_CAP);
    let margin = (global / 10).max(Duration::from_secs(300)).min(global / 2);
    global - margin
}

/// What the rotator does with one retained instance this pass.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase", tag = "decision")]
pub enum Cleanup {
    /// TerminateInstanceInAutoScalingGroup (no decrement: a retained instance does not count
    /// toward desired capacity), for `why`.
    Terminate {
        /// Why it may go.
        why: String,
    },
    /// Kept retained, for `why`.
    Keep {
        /// Why it stays.
        why: String,
    },
}

/// Whether the retained instance `m` may be terminated: its instance never registered a node
/// (or the node is gone), or its node's evictable pods were counted this pass and none is
/// left. Pods not counted (the listing failed) keep it: nothing is terminated on a guess.
pub fn cleanup(m: &Member) -> Cleanup {
    match &m.node {
        None => Cleanup::Terminate {
            why: "no Kubernetes node has this instance (gone or never registered)".into(),
        },
        Some(n) if n.pods_counted && n.evictable_pods == 0 => Cleanup::Terminate {
            why: format!("node {} has no evictable pod left", n.name),
        },
        Some(n) if n.pods_counted => Cleanup::Keep {
            why: format!(
                "node {} still has {} evictable pod(s): kept until they leave (a drain that finishes, or an operator)",
                n.name, n.evictable_pods
            ),
        },
        Some(n) => Cleanup::Keep {
            why: format!("the pods of node {} could not be counted this pass", n.name),
        },
    }
}

/// Whether a group's `TerminateHookAbandon` retention trigger (`None`: no instance lifecycle
/// policy) retains an instance whose terminate lifecycle action is abandoned.
pub fn policy_retains(terminate_hook_abandon: Option<&str>) -> bool {
    terminate_hook_abandon.is_some_and(|v| v.eq_ignore_ascii_case(RETAIN))
}

/// The command that makes group `group` retain instances whose terminate hook is abandoned.
pub fn policy_fix(group: &str) -> String {
    format!(
        "aws autoscaling update-auto-scaling-group --auto-scaling-group-name {group} \
         --instance-lifecycle-policy 'RetentionTriggers={{TerminateHookAbandon=retain}}'"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::{Lifecycle, NodeStatus};

    fn t(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_700_000_000 + s, 0).unwrap()
    }

    #[test]
    fn a_hand_over_continues_only_drained_and_abandons_out_of_time() {
        let limit = Duration::from_secs(600);
        let cases = [
            ("drained in time", true, 10, HandOverAnswer::Continue),
            ("drained late", true, 10_000, HandOverAnswer::Continue),
            ("draining in time", false, 599, HandOverAnswer::Heartbeat),
            ("draining at the limit", false, 600, HandOverAnswer::Abandon),
            ("draining past it", false, 90_000, HandOverAnswer::Abandon),
            ("clock before start", false, -30, HandOverAnswer::Heartbeat),
        ];
        for (what, drained, at, expected) in cases {
            assert_eq!(
                hand_over_answer(drained, t(0), t(at), limit),
                expected,
                "{what}"
            );
        }
    }

    #[test]
    fn the_limit_comes_before_the_global_timeout() {
        let cases = [
            // heartbeat timeout -> limit
            (300, 30_000 - 3_000),
            (30, 3_000 - 300),
            (7_200, 48 * 3600 - 48 * 360),
            (2, 100),
        ];
        for (heartbeat, limit) in cases {
            let got = hand_over_limit(Duration::from_secs(heartbeat));
            assert_eq!(got, Duration::from_secs(limit), "heartbeat {heartbeat}");
            let global = (heartbeat * 100).min(48 * 3600);
            assert!(got.as_secs() < global, "heartbeat {heartbeat}");
        }
    }

    fn member(node: Option<(u32, bool)>) -> Member {
        Member {
            instance_id: "i-1".into(),
            availability_zone: "us-east-2a".into(),
            image_id: None,
            launch_time: t(0),
            lifecycle: Lifecycle::Leaving,
            node: node.map(|(pods, counted)| NodeStatus {
                evictable_pods: pods,
                pods_counted: counted,
                ..NodeStatus::ready("n1".into())
            }),
        }
    }

    #[test]
    fn a_retained_instance_goes_only_without_pods() {
        let cases = [
            ("no node", None, true),
            ("counted empty", Some((0, true)), true),
            ("counted with pods", Some((2, true)), false),
            ("not counted", Some((0, false)), false),
            ("listing failed", Some((u32::MAX, false)), false),
        ];
        for (what, node, goes) in cases {
            let c = cleanup(&member(node));
            assert_eq!(
                matches!(c, Cleanup::Terminate { .. }),
                goes,
                "{what}: {c:?}"
            );
        }
    }

    #[test]
    fn only_retain_retains() {
        for (v, retains) in [
            (None, false),
            (Some("terminate"), false),
            (Some("retain"), true),
            (Some("Retain"), true),
        ] {
            assert_eq!(policy_retains(v), retains, "{v:?}");
        }
    }
}
