//! What an interruption event claims, checked against what nodecycle knows before it may act
//! (pure): the deployment's own hook, what EC2 says of the instance. Each check answers
//! `Err(why)` for a refusal: the handler logs why and changes nothing. Which accounts and
//! regions are served is [`super::served`].

use super::instance_events::{InstanceInfo, InstanceState, LifecycleAction};
use crate::problem::quote;

/// A state change that claims the instance is going away (`shutting-down`, `terminated`) or
/// stopping is believed only when EC2 reports it so (a stopping claim: stopping, stopped or
/// going away). `Ok` when EC2 agrees, or does not know the instance (then it is not ours, and
/// nothing is done anyway).
pub fn state_claim(claim: &InstanceState, ec2: Option<&InstanceInfo>) -> Result<(), String> {
    let Some(info) = ec2 else {
        return Ok(());
    };
    let seen = InstanceState::parse(&info.state);
    let agrees = if claim.is_gone() {
        seen.is_gone()
    } else if claim.is_stopping() {
        seen.is_stopping() || seen.is_gone()
    } else {
        true
    };
    if agrees {
        Ok(())
    } else {
        Err(format!(
            "the event says {} is {claim:?}, but EC2 reports it {}: nothing is done to its node",
            info.instance_id,
            quote(&info.state)
        ))
    }
}

/// A lifecycle action is answered only for `hook` (the deployment's, not another tool's), and
/// only for an instance EC2 knows as a member of the action's group (its
/// `aws:autoscaling:groupName` tag, which only Auto Scaling sets): an action naming an instance
/// of another group never drains that instance.
pub fn lifecycle_claim(
    action: &LifecycleAction,
    hook: &str,
    ec2: Option<&InstanceInfo>,
) -> Result<(), String> {
    if action.hook != hook {
        return Err(format!(
            "lifecycle hook {} is not nodecycle's ({hook}): another tool's action is never completed",
            quote(&action.hook)
        ));
    }
    match ec2 {
        None => Err(format!(
            "EC2 does not know {}: the lifecycle action of group {} is not answered",
            action.instance_id,
            quote(&action.group)
        )),
        Some(info) if info.group() == Some(action.group.as_str()) => Ok(()),
        Some(info) => Err(format!(
            "{} is in group {}, not in {} as the lifecycle action says: nothing is done to it",
            info.instance_id,
            info.group().map_or("(none)".to_string(), quote),
            quote(&action.group)
        )),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn info(state: &str, group: Option<&str>) -> InstanceInfo {
        InstanceInfo {
            instance_id: "i-0123456789abcdef0".into(),
            state: state.into(),
            availability_zone: "us-east-2a".into(),
            tags: group
                .map(|g| BTreeMap::from([(crate::tags::AUTO_SCALING_GROUP.to_string(), g.into())]))
                .unwrap_or_default(),
        }
    }

    #[test]
    fn state_claims_need_ec2_to_agree() {
        use InstanceState::*;
        let cases = [
            (Terminated, "running", false),
            (Terminated, "pending", false),
            (Terminated, "stopping", false),
            (Terminated, "shutting-down", true),
            (Terminated, "terminated", true),
            (ShuttingDown, "running", false),
            (ShuttingDown, "terminated", true),
            (Stopping, "running", false),
            (Stopping, "stopping", true),
            (Stopped, "stopped", true),
            (Stopped, "terminated", true),
            (Running, "running", true),
        ];
        for (claim, ec2, ok) in cases {
            let got = state_claim(&claim, Some(&info(ec2, None)));
            assert_eq!(got.is_ok(), ok, "{claim:?} vs {ec2}: {got:?}");
            if let Err(why) = got {
                assert!(why.contains(&format!("EC2 reports it \"{ec2}\"")), "{why}");
            }
        }
        assert_eq!(state_claim(&Terminated, None), Ok(()));
    }

    #[test]
    fn lifecycle_actions_of_our_hook_for_members_only() {
        let action = LifecycleAction {
            group: "prod-general".into(),
            hook: "nodecycle-drain".into(),
            token: None,
            instance_id: "i-0123456789abcdef0".into(),
        };
        let member = info("running", Some("prod-general"));
        assert_eq!(
            lifecycle_claim(&action, "nodecycle-drain", Some(&member)),
            Ok(())
        );
        let other_hook = LifecycleAction {
            hook: "backup-snapshot-hook".into(),
            ..action.clone()
        };
        let e = lifecycle_claim(&other_hook, "nodecycle-drain", Some(&member)).unwrap_err();
        assert!(
            e.contains("\"backup-snapshot-hook\" is not nodecycle's"),
            "{e}"
        );
        let e = lifecycle_claim(
            &action,
            "nodecycle-drain",
            Some(&info("running", Some("prod-spot"))),
        )
        .unwrap_err();
        assert!(
            e.contains("is in group \"prod-spot\", not in \"prod-general\""),
            "{e}"
        );
        assert!(lifecycle_claim(&action, "nodecycle-drain", Some(&info("running", None))).is_err());
        assert!(lifecycle_claim(&action, "nodecycle-drain", None).is_err());
    }
}
