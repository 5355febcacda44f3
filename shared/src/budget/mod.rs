//! Disruption budgets: how many more nodes may be disrupted now, which budget limits it, and when
//! the answer next changes. Pure: time is passed in.

use serde::{Deserialize, Serialize};

use crate::problem::Problems;

/// Why a node is disrupted; budgets may apply to some reasons only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Reason {
    /// The node's image differs from the pool's desired AMI.
    Drifted,
    /// The node is older than `expireAfter`.
    Expired,
    /// Accepted for Karpenter compatibility; never produced by nodecycle.
    Underutilized,
    /// Accepted for Karpenter compatibility; never produced by nodecycle.
    Empty,
}

/// A validated budget (placeholder until the budgets work lands).
#[derive(Debug, Clone, PartialEq)]
pub struct Budget {
    /// Reasons this budget applies to; `None` = every reason.
    pub reasons: Option<Vec<Reason>>,
}

/// Validates `disruption.budgets` (the JSON value at `path`, `None` when the field is absent)
/// and returns the typed budgets; absent means the default single `nodes: 10%` budget. Every
/// problem is pushed to `problems` with its full field path.
pub fn parse_budgets(
    value: Option<&serde_json::Value>,
    path: &str,
    problems: &mut Problems,
) -> Vec<Budget> {
    let _ = (value, path, problems);
    vec![Budget { reasons: None }]
}
