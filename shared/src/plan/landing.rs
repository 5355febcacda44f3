//! Where evicted pods land (pure): the nodes a pool's rollout will replace, which carry
//! nodecycle's `PreferNoSchedule` taint ([`crate::rotation::marks::REPLACING_TAINT`]) while it
//! runs, so that the scheduler puts the pods it evicts (and any new pod) on nodes of the
//! desired release when it can: each pod moves once instead of landing on a node the rollout
//! drains next. Surge capacity is no landing place that goes away: nodecycle gives a surge's
//! unit back by terminating the drained old instance, or a podless one.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Utc};

use super::{Drift, Expiry, Snapshot, assess};
use crate::fleet::Lifecycle;

/// The instances whose nodes carry the taint this pass, `None` to leave the taints as they
/// are. `None` while the deployment is stopped (nothing of the pool moves), the desired AMI is
/// unresolved (drift is unknown: taints must not flap with a transient failure) or the
/// snapshot lists an instance twice (not trusted). A halted pool's rollout is off until an
/// operator acts: no node. Otherwise the registered in-service members that need replacing
/// (drifted, expired or forced: [`assess`]) and the subjects of in-flight rotations of any
/// reason (a surge-first rotation's node is still schedulable until it is cordoned). When
/// the rollout ends (nothing drifted) or is cancelled (the desired AMI rolled back), the set
/// empties and the taints go.
pub fn replacing(snapshot: &Snapshot, now: DateTime<Utc>) -> Option<BTreeSet<String>> {
    let desired = snapshot.gates.desired_ami.as_deref()?;
    if snapshot.gates.stopped.is_some() {
        return None;
    }
    let mut seen: BTreeMap<&str, u32> = BTreeMap::new();
    for m in &snapshot.members {
        *seen.entry(m.instance_id.as_str()).or_default() += 1;
    }
    if seen.values().any(|n| *n > 1) {
        return None;
    }
    if snapshot.gates.halted.is_some() {
        return Some(BTreeSet::new());
    }
    let expiration = snapshot.expiration();
    let in_flight: BTreeSet<&str> = snapshot
        .rotations
        .iter()
        .filter(|r| r.in_flight() && !r.waiting())
        .map(|r| r.instance_id.as_str())
        .collect();
    Some(
        snapshot
            .members
            .iter()
            .filter(|m| m.node.is_some() && m.lifecycle == Lifecycle::InService)
            .filter(|m| {
                let a = assess(m, Some(desired), &expiration, now);
                in_flight.contains(m.instance_id.as_str())
                    || matches!(a.drift, Drift::Drifted { .. })
                    || matches!(a.expiry, Expiry::Expired { .. } | Expiry::Forced { .. })
            })
            .map(|m| m.instance_id.clone())
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::tests::{NEW, OLD, member, now, policy, snapshot};
    use crate::rotation::{Rotation, RotationReason};

    #[test]
    fn the_nodes_a_rollout_replaces_are_no_landing_place() {
        let members = vec![
            member("i-old", OLD, 10),
            member("i-new", NEW, 1),
            member("i-aged", NEW, 2000),
            member("i-rot", NEW, 5),
        ];
        let manual = Rotation::new(
            "prod/general",
            "i-rot",
            RotationReason::Manual,
            false,
            now(),
        )
        .enter(crate::rotation::Step::Surging, now());
        let base = snapshot(policy(""), members, vec![manual]);
        let set = |ids: &[&str]| ids.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();
        assert_eq!(
            replacing(&base, now()),
            Some(set(&["i-aged", "i-old", "i-rot"])),
            "drifted, expired and rotating nodes"
        );

        let mut halted = base.clone();
        halted.gates.halted = Some("a failure".into());
        assert_eq!(
            replacing(&halted, now()),
            Some(BTreeSet::new()),
            "halted: none"
        );

        let mut stopped = base.clone();
        stopped.gates.stopped = Some("stop switch".into());
        assert_eq!(replacing(&stopped, now()), None, "stopped: left as is");

        let mut unresolved = base.clone();
        unresolved.gates.desired_ami = None;
        assert_eq!(
            replacing(&unresolved, now()),
            None,
            "unknown AMI: left as is"
        );

        let mut twice = base.clone();
        twice.members.push(member("i-old", OLD, 10));
        assert_eq!(
            replacing(&twice, now()),
            None,
            "untrusted snapshot: left as is"
        );

        let done = snapshot(policy(""), vec![member("i-new", NEW, 1)], Vec::new());
        assert_eq!(
            replacing(&done, now()),
            Some(BTreeSet::new()),
            "rollout over"
        );
    }
}
