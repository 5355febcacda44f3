//! The AWS tag keys nodecycle reads, each defined once: Auto Scaling, EKS and eksctl put them
//! on the groups, launch templates and instances they create, and the stack's IAM conditions
//! name some of them (template.yaml).

/// Tag Auto Scaling puts on every instance it launches: its group's name.
pub const AUTO_SCALING_GROUP: &str = "aws:autoscaling:groupName";
/// Tag naming the EKS cluster (EKS managed node groups, eksctl, Karpenter). The stack's IAM
/// conditions require it on the groups and launch templates nodecycle changes.
pub const CLUSTER: &str = "eks:cluster-name";
/// Prefix of the `kubernetes.io/cluster/<name>` tag (`owned` or `shared`).
pub const KUBERNETES_CLUSTER_PREFIX: &str = "kubernetes.io/cluster/";
/// Tag a stack given `CellClusters` trusts (value: the stack's name) on every cluster, managed
/// node group, Auto Scaling group and launch template it describes or changes, in place of the
/// cluster names (template.yaml, docs/iam-and-rbac.md: Permission scopes).
pub const CELL: &str = "nodecycle.dev/cell";
/// Tag EKS puts on the launch templates and Auto Scaling groups it creates for a managed node
/// group: the node group's name.
pub const NODEGROUP: &str = "eks:nodegroup-name";
