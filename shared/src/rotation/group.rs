//! What nodecycle holds on a self-managed group while it rotates (pure): the `AZRebalance`
//! process suspended, and `MaxSize` raised for surges (policy `disruption.surgeAboveMaxSize`).
//! Both are recorded in the pool's record ([`GroupHolds`]) *before* the call that takes them,
//! and released only when nodecycle took them, so a crash anywhere repeats or finishes the
//! work on the next pass and a process the user suspended stays suspended:
//! - `AZRebalance` is suspended while any rotation of the pool is in flight (released by the
//!   planner) and the group does not show it suspended already; resumed (then forgotten) once
//!   none is, only if the record says nodecycle suspended it.
//! - `MaxSize` raised by nodecycle is put back to what it was once no surge holds or owes a
//!   unit and the desired capacity fits under it again; if someone else changed `MaxSize` in
//!   between, their value stays and the record is forgotten.

use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};

use super::Rotation;
use crate::fleet::Group;

/// The Auto Scaling process that terminates instances to balance Availability Zones.
pub const AZ_REBALANCE: &str = "AZRebalance";

/// How long a refusal to raise `MaxSize` (no permission) stops surges above it before it is
/// tried again (the stack parameter may have been enabled meanwhile).
pub const DENIED_RETRY: Duration = Duration::hours(1);

/// What nodecycle holds on the pool's group (in the pool's state record).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupHolds {
    /// Processes nodecycle suspended (recorded before the call) and has not resumed yet.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub suspended: Vec<String>,
    /// `MaxSize` raised by nodecycle for surges.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_size: Option<MaxRaise>,
    /// When raising `MaxSize` was last refused for lack of permission, and the message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_size_denied: Option<(DateTime<Utc>, String)>,
}

impl GroupHolds {
    /// Nothing held.
    pub fn is_empty(&self) -> bool {
        self == &GroupHolds::default()
    }
}

/// `MaxSize` as nodecycle raised it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MaxRaise {
    /// What it was before nodecycle's first raise (restored).
    pub original: i32,
    /// What nodecycle set it to.
    pub raised_to: i32,
}

/// One thing to do to the group this pass.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "groupCommand", rename_all = "camelCase")]
pub enum GroupCommand {
    /// Record `process` as suspended by nodecycle (unless recorded), then `SuspendProcesses`.
    Suspend {
        /// The process.
        process: String,
    },
    /// `ResumeProcesses`, then forget it.
    Resume {
        /// The process.
        process: String,
    },
    /// `UpdateAutoScalingGroup` `MaxSize` back to `to`, then forget the raise.
    RestoreMaxSize {
        /// The `MaxSize` before nodecycle raised it.
        to: i32,
    },
    /// Forget the raise without a call: `MaxSize` is no longer what nodecycle set.
    ForgetMaxSize {
        /// Why.
        why: String,
    },
}

/// A surge may raise `MaxSize` now: the policy allows it and no refusal for lack of
/// permission is younger than [`DENIED_RETRY`].
pub fn may_raise_max(allowed: bool, holds: &GroupHolds, now: DateTime<Utc>) -> bool {
    allowed
        && holds
            .max_size_denied
            .as_ref()
            .is_none_or(|(at, _)| now - *at >= DENIED_RETRY)
}

/// The group commands of this pass (see the module documentation); `self_managed` = the
/// group is the pool's own (a managed node group's is EKS's to manage).
pub fn commands(
    group: &Group,
    rotations: &[Rotation],
    holds: &GroupHolds,
    self_managed: bool,
) -> Vec<GroupCommand> {
    let mut out = Vec::new();
    let rolling = rotations.iter().any(|r| r.in_flight() && !r.waiting());
    let suspended_now = group.suspended_processes.iter().any(|p| p == AZ_REBALANCE);
    let ours = holds.suspended.iter().any(|p| p == AZ_REBALANCE);
    if self_managed && rolling && !suspended_now {
        out.push(GroupCommand::Suspend {
            process: AZ_REBALANCE.into(),
        });
    }
    if !rolling && ours {
        out.push(GroupCommand::Resume {
            process: AZ_REBALANCE.into(),
        });
    }
    let holding = rotations.iter().any(|r| r.surge_active() || r.surge_owed());
    if let Some(raise) = holds.max_size
        && !holding
    {
        if group.max_size == raise.raised_to {
            if group.desired_capacity <= raise.original {
                out.push(GroupCommand::RestoreMaxSize { to: raise.original });
            }
        } else {
            out.push(GroupCommand::ForgetMaxSize {
                why: format!(
                    "MaxSize is {}, not the {} nodecycle set: kept as it is",
                    group.max_size, raise.raised_to
                ),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rotation::{RotationReason, Step, Surge};

    fn group(desired: i32, max: i32, suspended: &[&str]) -> Group {
        Group {
            name: "g".into(),
            min_size: 0,
            max_size: max,
            desired_capacity: desired,
            launch_template_image: None,
            suspended_processes: suspended.iter().map(|s| s.to_string()).collect(),
            do_not_repair: false,
            retained: Vec::new(),
        }
    }

    fn rotation(step: Step, surge: bool) -> Rotation {
        let mut r = Rotation::new(
            "prod/general",
            "i-1",
            RotationReason::Drifted,
            false,
            DateTime::UNIX_EPOCH,
        )
        .enter(step, DateTime::UNIX_EPOCH);
        if surge {
            r.surge = Some(Surge {
                target_desired: 0,
                baseline: vec![],
                base: None,
                read: None,
                above_max: true,
                release: None,
            });
        }
        r
    }

    fn held(suspended: bool, max: Option<(i32, i32)>) -> GroupHolds {
        GroupHolds {
            suspended: if suspended {
                vec![AZ_REBALANCE.into()]
            } else {
                vec![]
            },
            max_size: max.map(|(original, raised_to)| MaxRaise {
                original,
                raised_to,
            }),
            max_size_denied: None,
        }
    }

    fn suspend() -> GroupCommand {
        GroupCommand::Suspend {
            process: AZ_REBALANCE.into(),
        }
    }

    fn resume() -> GroupCommand {
        GroupCommand::Resume {
            process: AZ_REBALANCE.into(),
        }
    }

    type Row<'a> = (
        &'a str,
        Group,
        &'a [Rotation],
        GroupHolds,
        bool,
        Vec<GroupCommand>,
    );

    #[test]
    fn az_rebalance_is_suspended_while_rolling_and_resumed_only_if_nodecycle_suspended_it() {
        let rolling = [rotation(Step::Draining, false)];
        let done = [rotation(Step::Done, false)];
        let queued = [Rotation {
            queued: Some(crate::rotation::Queue {
                request_id: "r".into(),
                ignore_budgets: false,
                max_concurrent: 1,
                reason: String::new(),
            }),
            ..rotation(Step::Pending, false)
        }];
        let cases: Vec<Row<'_>> = vec![
            (
                "rolling",
                group(6, 10, &[]),
                &rolling,
                held(false, None),
                true,
                vec![suspend()],
            ),
            // A crash after recording, before the call: suspended again.
            (
                "recorded, not suspended",
                group(6, 10, &[]),
                &rolling,
                held(true, None),
                true,
                vec![suspend()],
            ),
            (
                "suspended by nodecycle",
                group(6, 10, &[AZ_REBALANCE]),
                &rolling,
                held(true, None),
                true,
                vec![],
            ),
            (
                "the user's suspension",
                group(6, 10, &[AZ_REBALANCE]),
                &rolling,
                held(false, None),
                true,
                vec![],
            ),
            (
                "user's stays after",
                group(6, 10, &[AZ_REBALANCE]),
                &done,
                held(false, None),
                true,
                vec![],
            ),
            (
                "ours resumed after",
                group(6, 10, &[AZ_REBALANCE]),
                &done,
                held(true, None),
                true,
                vec![resume()],
            ),
            // A crash after the resume, before forgetting it: resumed again (idempotent).
            (
                "resumed, not forgotten",
                group(6, 10, &[]),
                &done,
                held(true, None),
                true,
                vec![resume()],
            ),
            (
                "a queued rotation is not rolling",
                group(6, 10, &[]),
                &queued,
                held(false, None),
                true,
                vec![],
            ),
            (
                "managed: not suspended",
                group(6, 10, &[]),
                &rolling,
                held(false, None),
                false,
                vec![],
            ),
            (
                "nothing",
                group(6, 10, &[]),
                &[],
                held(false, None),
                true,
                vec![],
            ),
        ];
        for (name, g, rotations, holds, own, want) in cases {
            assert_eq!(commands(&g, rotations, &holds, own), want, "{name}");
        }
    }

    #[test]
    fn max_size_is_restored_only_when_no_surge_holds_and_only_if_nodecycle_set_it() {
        let surging = [rotation(Step::Surging, true)];
        let done = [rotation(Step::Done, false)];
        let owed = [rotation(Step::Done, true).with_release(crate::rotation::UnitRelease::Owed)];
        let restore = |to| vec![GroupCommand::RestoreMaxSize { to }];
        let cases: Vec<(&str, Group, &[Rotation], Vec<GroupCommand>)> = vec![
            ("surge holds", group(7, 7, &[]), &surging, vec![]),
            ("unit owed", group(7, 7, &[]), &owed, vec![]),
            // Back at the original size, but a surge still holds (or owes) its unit: kept.
            (
                "surge holds at the original",
                group(6, 7, &[]),
                &surging,
                vec![],
            ),
            ("unit owed at the original", group(6, 7, &[]), &owed, vec![]),
            ("back under", group(6, 7, &[]), &done, restore(6)),
            ("at the original", group(6, 7, &[]), &[], restore(6)),
            // Another writer filled the raised room: restored once it is back under.
            (
                "desired above the original",
                group(7, 7, &[]),
                &done,
                vec![],
            ),
        ];
        let max_only = |c: Vec<GroupCommand>| -> Vec<GroupCommand> {
            c.into_iter()
                .filter(|c| {
                    !matches!(
                        c,
                        GroupCommand::Suspend { .. } | GroupCommand::Resume { .. }
                    )
                })
                .collect()
        };
        for (name, g, rotations, want) in cases {
            let got = max_only(commands(&g, rotations, &held(false, Some((6, 7))), true));
            assert_eq!(got, want, "{name}");
        }
        // Someone else changed MaxSize (or nodecycle's raise never happened): kept.
        let got = commands(&group(6, 9, &[]), &done, &held(false, Some((6, 7))), true);
        assert!(
            matches!(got.as_slice(), [GroupCommand::ForgetMaxSize { .. }]),
            "{got:?}"
        );
        let got = commands(&group(6, 6, &[]), &done, &held(false, Some((6, 7))), true);
        assert!(
            matches!(got.as_slice(), [GroupCommand::ForgetMaxSize { .. }]),
            "{got:?}"
        );
    }

    #[test]
    fn a_refusal_stops_raising_max_size_for_an_hour() {
        let now = DateTime::UNIX_EPOCH + Duration::hours(5);
        let mut holds = GroupHolds::default();
        assert!(may_raise_max(true, &holds, now));
        assert!(!may_raise_max(false, &holds, now));
        holds.max_size_denied = Some((now - Duration::minutes(59), "AccessDenied".into()));
        assert!(!may_raise_max(true, &holds, now));
        holds.max_size_denied = Some((now - DENIED_RETRY, "AccessDenied".into()));
        assert!(may_raise_max(true, &holds, now));
    }

    #[test]
    fn holds_are_empty_only_when_nothing_is_held() {
        assert!(GroupHolds::default().is_empty());
        let held = [
            GroupHolds {
                suspended: vec!["AZRebalance".into()],
                ..GroupHolds::default()
            },
            GroupHolds {
                max_size: Some(MaxRaise {
                    original: 3,
                    raised_to: 4,
                }),
                ..GroupHolds::default()
            },
            GroupHolds {
                max_size_denied: Some((DateTime::<Utc>::UNIX_EPOCH, "denied".into())),
                ..GroupHolds::default()
            },
        ];
        for h in held {
            assert!(!h.is_empty(), "{h:?}");
        }
    }
}
