//! Launch template opt-in: nodecycle writes versions of a launch template (and makes one the
//! default) only when the template's owner tagged it [`MANAGED_TAG`]=[`MANAGED_VALUE`], and never
//! a template EKS created for a managed node group. IAM cannot limit what a version holds (image,
//! user data, instance profile), so the stack's role grants these writes on opted-in templates
//! only (template.yaml `NewVersionsOfOptedInTemplatesOnly`); the code checks the same tags first
//! and fails closed with what to do, so a missing tag reads as a pool report, not an
//! AccessDenied.

use std::collections::BTreeMap;

use crate::tags::NODEGROUP as EKS_NODEGROUP_TAG;

/// The opt-in tag's key.
pub const MANAGED_TAG: &str = "nodecycle.dev/managed";
/// The opt-in tag's value.
pub const MANAGED_VALUE: &str = "true";

/// Why nodecycle may not write versions of launch template `id` whose tags are `tags`; `None`
/// when it may. Pure: the adapter and `nodecycle doctor` both ask it.
pub fn refusal(id: &str, tags: &BTreeMap<String, String>) -> Option<String> {
    if let Some(node_group) = tags.get(EKS_NODEGROUP_TAG) {
        return Some(format!(
            "launch template {id} was created by EKS for managed node group {node_group} (tag \
             {EKS_NODEGROUP_TAG}): nodecycle never writes it; give the node group a launch \
             template of your own tagged {MANAGED_TAG}={MANAGED_VALUE}"
        ));
    }
    match tags.get(MANAGED_TAG) {
        Some(v) if v == MANAGED_VALUE => None,
        _ => Some(format!(
            "launch template {id} lacks tag {MANAGED_TAG}={MANAGED_VALUE}; add it to let \
             nodecycle write versions"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tags(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn only_opted_in_templates_not_created_by_eks() {
        let cluster = ("eks:cluster-name", "prod");
        assert_eq!(
            refusal("lt-1", &tags(&[cluster, (MANAGED_TAG, "true")])),
            None
        );
        assert_eq!(refusal("lt-1", &tags(&[(MANAGED_TAG, "true")])), None);
        for t in [
            tags(&[cluster]),
            tags(&[]),
            tags(&[cluster, (MANAGED_TAG, "True")]),
            tags(&[cluster, (MANAGED_TAG, "false")]),
            tags(&[cluster, ("nodecycle.dev/Managed", "true")]),
        ] {
            assert_eq!(
                refusal("lt-1", &t).as_deref(),
                Some(
                    "launch template lt-1 lacks tag nodecycle.dev/managed=true; add it to let \
                     nodecycle write versions"
                ),
                "{t:?}"
            );
        }
        let eks = refusal(
            "lt-2",
            &tags(&[
                cluster,
                (MANAGED_TAG, "true"),
                (EKS_NODEGROUP_TAG, "golden"),
            ]),
        )
        .unwrap();
        assert!(
            eks.contains("created by EKS for managed node group golden"),
            "{eks}"
        );
    }
}
