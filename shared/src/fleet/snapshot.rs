//! The rotator's per-cluster snapshot port: many Auto Scaling groups read at once (their sizes,
//! instances joined with EC2, and the image their launch template version launches), so a
//! pass costs calls per batch and page, not per pool or node. The pure per-pool observation
//! (`handlers::rotator::observe`) reads its group from the snapshot; writes stay per pool.

use std::collections::BTreeMap;

use crate::fleet::{Group, Member};
use crate::port::{ErrorKind, PortError};

/// Group names per DescribeAutoScalingGroups call (the API's limit) and per DescribeInstances
/// tag filter (EC2 accepts up to 200 values a filter).
pub const GROUPS_PER_CALL: usize = 100;

/// One group as a batch read it, or why it could not be read: its pool's report.
pub type GroupRead = Result<(Group, Vec<Member>), PortError>;

/// Reads many groups at once.
#[async_trait::async_trait]
pub trait GroupSnapshots: Send + Sync {
    /// Every group of `names` (duplicates read once) with its instances and its template's
    /// image, in batched, paginated calls. The answer holds an entry for every name: a group
    /// the service does not report is a [`ErrorKind::NotFound`] entry, a batch that failed
    /// (after the SDK's retries of throttling) is that error in the entry of each of its
    /// names. Never fails as a whole: one unreadable group does not block the others.
    async fn describe_groups(&self, names: &[String]) -> BTreeMap<String, GroupRead>;

    /// Reads, in batches, what the template writes after [`Self::describe_groups`] check (the
    /// opt-in tags of the groups' templates), so that each write does not read them itself.
    /// Only a pass that may write calls it; without it (the default does nothing) each write
    /// reads its template's tags.
    async fn prefetch_template_tags(&self, _names: &[String]) {}
}

/// The entry of a group a batch answer did not hold.
pub fn missing(name: &str) -> PortError {
    PortError::new(
        "autoscaling:DescribeAutoScalingGroups",
        ErrorKind::NotFound,
        format!("Auto Scaling group {name} does not exist"),
    )
}

/// `names` without duplicates, in [`GROUPS_PER_CALL`]-sized batches (in order of first
/// appearance).
pub fn batches(names: &[String]) -> Vec<Vec<String>> {
    let mut seen = std::collections::BTreeSet::new();
    let unique: Vec<String> = names
        .iter()
        .filter(|n| seen.insert(n.as_str()))
        .cloned()
        .collect();
    unique
        .chunks(GROUPS_PER_CALL)
        .map(<[String]>::to_vec)
        .collect()
}

/// The answer for `names` from what the batches returned: each name's read, a
/// [`missing`] entry for a name no batch reported, and `failed` (a batch's error) for the names
/// of a batch that could not be read.
pub fn assemble(
    names: &[String],
    mut found: BTreeMap<String, (Group, Vec<Member>)>,
    failed: &BTreeMap<String, PortError>,
) -> BTreeMap<String, GroupRead> {
    names
        .iter()
        .map(|n| {
            let read = match (found.remove(n), failed.get(n)) {
                (Some(g), _) => Ok(g),
                (None, Some(e)) => Err(e.clone()),
                (None, None) => Err(missing(n)),
            };
            (n.clone(), read)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("g{i}")).collect()
    }

    fn group(name: &str) -> (Group, Vec<Member>) {
        (
            Group {
                name: name.into(),
                min_size: 0,
                max_size: 3,
                desired_capacity: 1,
                launch_template_image: Some("ami-1".into()),
                suspended_processes: Vec::new(),
                do_not_repair: false,
                retained: Vec::new(),
            },
            Vec::new(),
        )
    }

    #[test]
    fn batches_hold_at_most_a_call_s_names_each_once() {
        for n in [0, 1, 99, 100, 101, 250] {
            let mut all = names(n);
            all.extend(names(n.min(5)));
            let b = batches(&all);
            assert_eq!(b.len(), n.div_ceil(GROUPS_PER_CALL), "{n} names");
            assert!(b.iter().all(|c| c.len() <= GROUPS_PER_CALL));
            let flat: Vec<String> = b.concat();
            assert_eq!(flat, names(n), "every name once, in order");
        }
    }

    #[test]
    fn a_group_missing_from_the_answer_is_its_own_not_found_and_a_failed_batch_its_names_error() {
        let all = names(3);
        let found: BTreeMap<_, _> = [("g0".to_string(), group("g0"))].into();
        let throttled = PortError::new(
            "autoscaling:DescribeAutoScalingGroups",
            ErrorKind::Throttled,
            "Rate exceeded",
        );
        let failed: BTreeMap<_, _> = [("g2".to_string(), throttled.clone())].into();
        let out = assemble(&all, found, &failed);
        assert_eq!(out.len(), 3, "an entry for every name");
        assert_eq!(
            out["g0"].as_ref().map(|g| g.0.name.clone()),
            Ok("g0".into())
        );
        let gone = out["g1"].as_ref().unwrap_err();
        assert_eq!(gone.kind, ErrorKind::NotFound);
        assert!(gone.message.contains("g1 does not exist"), "{gone}");
        assert_eq!(out["g2"].as_ref().unwrap_err(), &throttled);
    }
}
