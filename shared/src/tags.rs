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
/// Tag EKS puts on the launch templates and Auto Scaling groups it creates for a managed node
/// group: the node group's name.
pub const NODEGROUP: &str = "eks:nodegroup-name";
