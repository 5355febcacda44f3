//! How the stack's permissions scope its clusters (template.yaml: `Clusters` or `CellClusters`;
//! docs/iam-and-rbac.md, Permission scopes), read from the stack outputs [`PERMISSION_SCOPE`]
//! and [`CELL_TAG`]:
//! - the `scope` check: a stack naming its clusters fits IAM's inline policy cap for about
//!   [`CLUSTERS_THAT_FIT`] of them ([`CLUSTERS_THAT_FIT_IN_A_VPC`] in a VPC); CloudFormation
//!   Rules cannot count a list, so this is where the limit is named before IAM refuses the next
//!   cluster (a warn from the limit on: the deployed stack fits, by definition);
//! - the `cellTag` check: with `CellClusters`, each cluster, managed node group, Auto Scaling
//!   group and launch template nodecycle reaches carries `nodecycle.dev/cell=<cell>` (IAM's
//!   conditions require it; nothing else tells the operator).

use std::collections::BTreeMap;

use super::{Check, CheckKind};
use crate::tags::CELL as CELL_TAG_KEY;

/// Output: `ClusterNames` or `CellTag` (missing: a stack from before the output, `ClusterNames`).
pub const PERMISSION_SCOPE: &str = "PermissionScope";
/// Output: the value of the cell tag (the stack's name).
pub const CELL_TAG: &str = "CellTag";
/// The most clusters of 20-character names `Clusters` takes (tests/tests/template.rs measures it).
pub const CLUSTERS_THAT_FIT: usize = 8;
/// [`CLUSTERS_THAT_FIT`] with the functions in a VPC (their network interface policy counts too).
pub const CLUSTERS_THAT_FIT_IN_A_VPC: usize = 7;

/// The stack's permission scope.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Scope {
    /// The permissions name each cluster (`Clusters`).
    #[default]
    ClusterNames,
    /// The permissions name the cell's tag value (`CellClusters`).
    CellTag(String),
}

impl Scope {
    /// From the stack outputs; `stack` stands in for a missing [`CELL_TAG`] (its default).
    pub fn from_outputs(outputs: &BTreeMap<String, String>, stack: &str) -> Scope {
        let get = |k: &str| outputs.get(k).map(|v| v.trim()).filter(|v| !v.is_empty());
        match get(PERMISSION_SCOPE) {
            Some("CellTag") => Scope::CellTag(get(CELL_TAG).unwrap_or(stack).to_owned()),
            _ => Scope::ClusterNames,
        }
    }

    /// The cell tag value, when the scope is the cell tag.
    pub fn cell(&self) -> Option<&str> {
        match self {
            Scope::ClusterNames => None,
            Scope::CellTag(v) => Some(v),
        }
    }
}

/// The `scope` check of `stack`: `clusters` the stack serves, its functions `in_vpc` or not.
pub fn check(stack: &str, scope: &Scope, clusters: usize, in_vpc: bool) -> Check {
    let limit = if in_vpc {
        CLUSTERS_THAT_FIT_IN_A_VPC
    } else {
        CLUSTERS_THAT_FIT
    };
    match scope {
        Scope::CellTag(cell) => Check::ok(
            CheckKind::Scope,
            stack,
            format!(
                "{PERMISSION_SCOPE}=CellTag: {clusters} cluster(s) trusted by the tag \
                 {CELL_TAG_KEY}={cell}, permissions of one size for any number"
            ),
        ),
        // The stack deployed, so its policies fit; at the limit the next cluster may not.
        Scope::ClusterNames if clusters >= limit => Check::warn(
            CheckKind::Scope,
            stack,
            format!(
                "{PERMISSION_SCOPE}=ClusterNames names {clusters} clusters; IAM's 10,240 \
                 characters of inline policies a role take about {limit} of 20-character \
                 names{}: another cluster may fail the deploy on the rotator role",
                if in_vpc { " (functions in a VPC)" } else { "" }
            ),
            format!(
                "give the clusters as CellClusters (empty Clusters), tagged \
                 {CELL_TAG_KEY}={stack} (docs/iam-and-rbac.md, Permission scopes), or split them \
                 over stacks"
            ),
        ),
        Scope::ClusterNames => Check::ok(
            CheckKind::Scope,
            stack,
            format!(
                "{PERMISSION_SCOPE}=ClusterNames: {clusters} of at most {limit} clusters named \
                 in the permissions"
            ),
        ),
    }
}

/// The `cellTag` check of `what` (e.g. `cluster prod`, `Auto Scaling group g`) for `subject`
/// (a cluster or pool): `tags` hold [`CELL_TAG_KEY`]=`cell`; `fix` adds it.
pub fn tagged(
    subject: &str,
    what: &str,
    tags: &BTreeMap<String, String>,
    cell: &str,
    fix: impl FnOnce(&str) -> String,
) -> Check {
    match tags.get(CELL_TAG_KEY) {
        Some(v) if v == cell => Check::ok(
            CheckKind::CellTag,
            subject,
            format!("{what}, tagged {CELL_TAG_KEY}={cell}"),
        ),
        Some(v) => Check::fail(
            CheckKind::CellTag,
            subject,
            format!(
                "{what} is tagged {CELL_TAG_KEY}={v}, not {cell}: another cell's; this stack \
                 may not reach it"
            ),
            fix(cell),
        ),
        None => Check::fail(
            CheckKind::CellTag,
            subject,
            format!("{what} has no tag {CELL_TAG_KEY}={cell}: this stack may not reach it"),
            fix(cell),
        ),
    }
}

/// The command that tags an EKS cluster or node group (`arn`).
pub fn eks_fix(arn: &str) -> impl FnOnce(&str) -> String + '_ {
    move |cell| format!("aws eks tag-resource --resource-arn {arn} --tags {CELL_TAG_KEY}={cell}")
}

/// The command that tags Auto Scaling group `group`.
pub fn asg_fix(group: &str) -> impl FnOnce(&str) -> String + '_ {
    move |cell| {
        format!(
            "aws autoscaling create-or-update-tags --tags ResourceId={group},\
             ResourceType=auto-scaling-group,Key={CELL_TAG_KEY},Value={cell},PropagateAtLaunch=false"
        )
    }
}

/// The command that tags launch template `id`.
pub fn template_fix(id: &str) -> impl FnOnce(&str) -> String + '_ {
    move |cell| {
        format!("aws ec2 create-tags --resources {id} --tags Key={CELL_TAG_KEY},Value={cell}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::Status;

    fn outputs(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn scope_from_outputs() {
        let cases: [(&[(&str, &str)], Scope); 5] = [
            (&[], Scope::ClusterNames),
            (&[(PERMISSION_SCOPE, "ClusterNames")], Scope::ClusterNames),
            (
                &[(PERMISSION_SCOPE, "CellTag"), (CELL_TAG, "platform-a")],
                Scope::CellTag("platform-a".into()),
            ),
            // No CellTag output: the stack's name is the template's value.
            (
                &[(PERMISSION_SCOPE, " CellTag ")],
                Scope::CellTag("nodecycle".into()),
            ),
            (&[(PERMISSION_SCOPE, "")], Scope::ClusterNames),
        ];
        for (given, want) in cases {
            assert_eq!(
                Scope::from_outputs(&outputs(given), "nodecycle"),
                want,
                "{given:?}"
            );
        }
    }

    #[test]
    fn the_scope_check_names_the_limit() {
        let cell = Scope::CellTag("nodecycle".into());
        // (scope, clusters, in a VPC, status, the detail says, the fix says)
        let cases: [(&Scope, usize, bool, Status, &str, &str); 8] = [
            (
                &Scope::ClusterNames,
                1,
                false,
                Status::Ok,
                "1 of at most 8",
                "",
            ),
            (
                &Scope::ClusterNames,
                7,
                false,
                Status::Ok,
                "7 of at most 8",
                "",
            ),
            (
                &Scope::ClusterNames,
                8,
                false,
                Status::Warn,
                "names 8 clusters; IAM's 10,240 characters of inline policies a role take about 8",
                "CellClusters",
            ),
            (
                &Scope::ClusterNames,
                12,
                false,
                Status::Warn,
                "another cluster may fail",
                "CellClusters",
            ),
            (
                &Scope::ClusterNames,
                6,
                true,
                Status::Ok,
                "6 of at most 7",
                "",
            ),
            (
                &Scope::ClusterNames,
                7,
                true,
                Status::Warn,
                "about 7 of 20-character names (functions in a VPC)",
                "nodecycle.dev/cell=nodecycle",
            ),
            (
                &cell,
                100,
                true,
                Status::Ok,
                "100 cluster(s) trusted by the tag nodecycle.dev/cell=nodecycle",
                "",
            ),
            (&cell, 1, false, Status::Ok, "PermissionScope=CellTag", ""),
        ];
        for (scope, n, vpc, status, detail, fix) in cases {
            let c = check("nodecycle", scope, n, vpc);
            assert_eq!(c.check, CheckKind::Scope);
            assert_eq!(c.subject, "nodecycle");
            assert_eq!(c.status, status, "{scope:?} {n} {vpc}: {c}");
            assert!(c.detail.contains(detail), "{scope:?} {n} {vpc}: {c}");
            assert!(c.fix.contains(fix), "{scope:?} {n} {vpc}: {c}");
        }
    }

    #[test]
    fn the_cell_tag_check_names_the_tag_its_value_and_the_command() {
        let tags = |v: Option<&str>| -> BTreeMap<String, String> {
            v.map(|v| (CELL_TAG_KEY.to_owned(), v.to_owned()))
                .into_iter()
                .chain([("eks:cluster-name".to_owned(), "prod".to_owned())])
                .collect()
        };
        // (tag value, status, the detail says)
        let cases: [(Option<&str>, Status, &str); 4] = [
            (
                Some("cell-a"),
                Status::Ok,
                "cluster prod, tagged nodecycle.dev/cell=cell-a",
            ),
            (
                Some("cell-b"),
                Status::Fail,
                "cluster prod is tagged nodecycle.dev/cell=cell-b, not cell-a: another cell's",
            ),
            (
                None,
                Status::Fail,
                "cluster prod has no tag nodecycle.dev/cell=cell-a",
            ),
            (
                Some(""),
                Status::Fail,
                "tagged nodecycle.dev/cell=, not cell-a",
            ),
        ];
        let arn = "arn:aws:eks:us-east-1:123456789012:cluster/prod";
        for (value, status, detail) in cases {
            let c = tagged("prod", "cluster prod", &tags(value), "cell-a", eks_fix(arn));
            assert_eq!(c.check, CheckKind::CellTag);
            assert_eq!(c.status, status, "{value:?}: {c}");
            assert!(c.detail.contains(detail), "{value:?}: {c}");
            if status == Status::Fail {
                assert_eq!(
                    c.fix,
                    format!(
                        "aws eks tag-resource --resource-arn {arn} --tags nodecycle.dev/cell=cell-a"
                    )
                );
            }
        }
        let c = tagged("p", "Auto Scaling group g", &tags(None), "c", asg_fix("g"));
        assert!(
            c.fix.contains(
                "ResourceId=g,ResourceType=auto-scaling-group,Key=nodecycle.dev/cell,Value=c"
            ),
            "{c}"
        );
        let c = tagged(
            "p",
            "launch template lt-1",
            &tags(None),
            "c",
            template_fix("lt-1"),
        );
        assert_eq!(
            c.fix,
            "aws ec2 create-tags --resources lt-1 --tags Key=nodecycle.dev/cell,Value=c"
        );
    }
}
