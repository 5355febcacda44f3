//! Pool policy documents (YAML or JSON): parsing and validation that reports every problem.
//!
//! ```yaml
//! cluster: prod                      # required: EKS cluster name (1-100, [0-9A-Za-z][A-Za-z0-9_-]*)
//! account: "111122223333"            # optional, with region: the cluster's account (default: the cell's)
//! region: eu-west-1                  # optional, with account: the cluster's region (default: the cell's)
//! name: general                      # required: pool name (1-63, same characters)
//! nodeGroup: { autoScalingGroup: prod-general }   # required: or { managedNodeGroup: general }
//! architecture: x86_64               # optional: x86_64 | arm64 (default: the node group's AMI)
//! variant: standard                  # standard | nvidia | neuron (alias terms only)
//! amiSelectorTerms:                  # required: 1-30 Karpenter terms
//!   - alias: al2023@v20240807
//! disruption: { budgets: [...] }     # validated by crate::budget::parse_budgets
//! expireAfter: 720h                  # default 720h, or Never
//! terminationGracePeriod: 2h         # optional
//! interruption: { rebalance: ignore }  # ignore | cordon | replace
//! paused: false
//! ```
//!
//! Every problem is a field path, what is wrong and what is expected, e.g.
//! `amiSelectorTerms[0].alias: unknown family "al2024"; expected one of al2, al2023,
//! bottlerocket, windows2019, windows2022, windows2025`. Unknown fields are errors at every
//! level. Kubernetes-version gates (al2 before 1.33, windows2025 from 1.35) are left to
//! resolution.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;

use crate::budget::Budget;
use crate::duration;
use crate::image::alias::Alias;
use crate::image::{Architecture, Variant};
use crate::problem::{Problems, join};
use fields::{NameRule, describe, eks_name, quote, unknown_field, wrong_type};
pub use place::Place;
pub use pool_id::PoolId;
pub use repair::RepairPolicy;
use source::{Owner, PolicyDocument};

mod fields;
pub mod limits;
pub mod place;
mod pool_id;
pub mod repair;
pub mod source;
pub mod stored;
mod terms;
#[cfg(test)]
mod tests;

/// Default `expireAfter`: 30 days.
pub const DEFAULT_EXPIRE_AFTER: Duration = Duration::from_secs(720 * 3600);

/// The shortest `expireAfter` accepted without a warning: 1 hour. Below it, nodes expire about
/// as fast as a replacement (launch, Ready, drain) takes, so the pool would never stop rotating.
pub const MIN_SENSIBLE_EXPIRE_AFTER: Duration = Duration::from_secs(3600);

/// The node group a pool manages.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum NodeGroup {
    /// A self-managed Auto Scaling group, by name.
    #[serde(rename = "autoScalingGroup")]
    AutoScalingGroup(String),
    /// An EKS managed node group, by name.
    #[serde(rename = "managedNodeGroup")]
    ManagedNodeGroup(String),
}

/// The order in which a pool's candidates are taken (`disruption.order`); forced candidates
/// always come first ([`crate::plan::StartStrategy`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum CandidateOrder {
    /// Nodes without evictable pods first, then the oldest (nothing to move is the cheapest
    /// disruption).
    #[default]
    EmptiestFirst,
    /// The oldest first, whatever runs on them (age-based hygiene: expiry and drift retire
    /// nodes in launch order).
    OldestFirst,
}

impl fmt::Display for CandidateOrder {
    /// The policy's spelling (`emptiestFirst`, `oldestFirst`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CandidateOrder::EmptiestFirst => "emptiestFirst",
            CandidateOrder::OldestFirst => "oldestFirst",
        })
    }
}

/// How a pool's nodes are replaced (`rollout.strategy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum RolloutStrategy {
    /// Surge first (a replacement launched and Ready before the old node is drained) where the
    /// group has room; terminate-first where it cannot surge (derived each pass:
    /// [`crate::plan::Replacement`]).
    #[default]
    Auto,
    /// Always terminate first: cordon and drain, terminate with a relaunch, and confirm the
    /// replacement Ready on the desired AMI before the next node starts (groups whose capacity
    /// is scarce or reserved: GPU groups, Capacity Blocks).
    TerminateFirst,
}

impl fmt::Display for RolloutStrategy {
    /// The policy's spelling (`auto`, `terminateFirst`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RolloutStrategy::Auto => "auto",
            RolloutStrategy::TerminateFirst => "terminateFirst",
        })
    }
}

/// The thresholds of the policy's `health:` (defaults safe for a pool that sets nothing).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HealthPolicy {
    /// `health.window` (default 24h, or `promotion.soak` when longer; given, at least the
    /// soak): a node that turns unhealthy
    /// within this long of joining is evidence against its release, not only a node to repair.
    #[serde(serialize_with = "crate::duration::serialize")]
    pub window: std::time::Duration,
    /// `health.maxRatio` (default 3): the new release is indicted when its rate is more than
    /// this many times the previous release's.
    pub max_ratio: f64,
    /// `health.minSamples` (default 20): pod starts on the new release's nodes before its pod
    /// failure rate counts.
    pub min_samples: u32,
    /// `health.minFailureRate` (default 0.1): a pod failure rate below this indicts nothing,
    /// whatever the previous release did (one failure in 20 starts is noise).
    pub min_failure_rate: f64,
}

impl Default for HealthPolicy {
    fn default() -> Self {
        HealthPolicy {
            window: std::time::Duration::from_secs(24 * 3600),
            max_ratio: 3.0,
            min_samples: 20,
            min_failure_rate: 0.1,
        }
    }
}

/// What to do on an EC2 rebalance recommendation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RebalanceAction {
    /// Record only.
    #[default]
    Ignore,
    /// Cordon the node.
    Cordon,
    /// Start a rotation of the node (surge first, no budget wait).
    Replace,
}

impl fmt::Display for RebalanceAction {
    /// The policy's spelling (`ignore`, `cordon`, `replace`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RebalanceAction::Ignore => "ignore",
            RebalanceAction::Cordon => "cordon",
            RebalanceAction::Replace => "replace",
        })
    }
}

/// One validated `amiSelectorTerms` entry. Fields inside a term are ANDed; terms are ORed.
/// Validation guarantees the Karpenter exclusivity rules (alias alone in its term and in the
/// list, id alone, owner never alone) and nodecycle's (ssmParameter alone, one owner per term).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct SelectorTerm {
    /// `family@version`; when set, nothing else is.
    pub alias: Option<Alias>,
    /// An AMI id; when set, nothing else is.
    pub id: Option<String>,
    /// EC2 image name, wildcards `*` and `?` allowed.
    pub name: Option<String>,
    /// One owner: a 12-digit account id, `self`, `amazon`, `aws-marketplace` or
    /// `aws-backup-vault`. `None` with `name` means owners `self` and `amazon` (resolution).
    pub owner: Option<String>,
    /// Tag filters; value `*` means "key present".
    pub tags: BTreeMap<String, String>,
    /// SSM parameter (name or ARN) whose value is an AMI id.
    pub ssm_parameter: Option<String>,
}

/// A validated pool policy.
#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    /// EKS cluster name.
    pub cluster: String,
    /// The cluster's account and region (`account`, `region`); `None` = the cell's own.
    pub place: Option<Place>,
    /// Pool name, unique within the cluster.
    pub name: String,
    /// The node group this pool manages.
    pub node_group: NodeGroup,
    /// Fixed architecture, or `None` to take it from the node group's current AMI.
    pub architecture: Option<Architecture>,
    /// Accelerator variant (default standard).
    pub variant: Variant,
    /// 1 to 30 terms.
    pub ami_selector_terms: Vec<SelectorTerm>,
    /// Budgets after defaulting (absent field = one `nodes: 10%` budget).
    pub budgets: Vec<Budget>,
    /// Node age limit; `None` = `Never`.
    pub expire_after: Option<Duration>,
    /// How long a drain may be blocked before pods are deleted; `None` = wait indefinitely.
    pub termination_grace_period: Option<Duration>,
    /// Reaction to rebalance recommendations.
    pub rebalance: RebalanceAction,
    /// A paused pool starts no voluntary rotation.
    pub paused: bool,
    /// Staged promotion (nodecycle extension); `None` = the pool follows its terms directly.
    pub promotion: Option<Promotion>,
    /// `disruption.surgeAboveMaxSize` (nodecycle extension, default false): a self-managed
    /// group at `MaxSize` has its `MaxSize` raised by one per surge (and put back after)
    /// instead of rotating without a surge. Needs the stack's `AutoScalingGroupUpdates`.
    pub surge_above_max_size: bool,
    /// `disruption.order` (default `emptiestFirst`): the order in which candidates start.
    pub candidate_order: CandidateOrder,
    /// `rollout.strategy` (default `auto`): surge where possible, or always terminate first.
    pub rollout: RolloutStrategy,
    /// `health` (defaults when absent): how a release is judged by its nodes and pods
    /// ([`crate::promotion::health`]).
    pub health: HealthPolicy,
    /// `repair` (defaults when absent): which unhealthy nodes are replaced, and how many at
    /// once ([`RepairPolicy`]).
    pub repair: RepairPolicy,
    /// `metrics.perPool` (default false): the pool's metrics also carry its `Pool` dimension
    /// ([`crate::metrics`]; about 12 more CloudWatch series, billed each month), beside the
    /// cell's counts every pool is in.
    pub metrics_per_pool: bool,
}

impl Policy {
    /// `<cluster>/<name>` (the cell's own) or `<account>/<region>/<cluster>/<name>`
    /// ([`place::pool_id`]), the pool's identity everywhere (state keys, logs, CLI output).
    pub fn pool_id(&self) -> String {
        place::pool_id(self.place.as_ref(), &self.cluster, &self.name)
    }
}

/// What the interruption handler needs of a policy: the pool, its node group and how its nodes
/// react to interruptions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolRef {
    /// EKS cluster name.
    pub cluster: String,
    /// The cluster's account and region; `None` = the cell's own.
    pub place: Option<Place>,
    /// Pool name.
    pub name: String,
    /// The node group.
    pub node_group: NodeGroup,
    /// `interruption.rebalance`.
    pub rebalance: RebalanceAction,
    /// `terminationGracePeriod`.
    pub termination_grace_period: Option<Duration>,
    /// `metrics.perPool` ([`Policy::metrics_per_pool`]; false when the field is invalid).
    pub metrics_per_pool: bool,
}

impl PoolRef {
    /// The pool id ([`Policy::pool_id`]).
    pub fn pool_id(&self) -> String {
        place::pool_id(self.place.as_ref(), &self.cluster, &self.name)
    }
}

impl From<&Policy> for PoolRef {
    fn from(p: &Policy) -> Self {
        PoolRef {
            cluster: p.cluster.clone(),
            place: p.place.clone(),
            name: p.name.clone(),
            node_group: p.node_group.clone(),
            rebalance: p.rebalance,
            termination_grace_period: p.termination_grace_period,
            metrics_per_pool: p.metrics_per_pool,
        }
    }
}

/// The [`PoolRef`] of a document: within the bounds of [`limits`], only `cluster`, `name` (with
/// the path's ownership), `nodeGroup`, `interruption` and `terminationGracePeriod` are read and
/// validated, so that a mistake in any other field (a budget, a term) never stops an
/// interruption drain of the pool. `Err` with the problems of those fields.
pub fn locate(doc: &PolicyDocument) -> Result<PoolRef, Problems> {
    let mut problems = Problems::new();
    let value = match read(&doc.text) {
        Ok(v) => v,
        Err((path, message)) => {
            problems.error(path, message);
            return Err(problems);
        }
    };
    if let Owner::NoPool(why) = &doc.owner {
        problems.error("", why.clone());
        return Err(problems);
    }
    let Value::Object(map) = &value else {
        problems.error("", format!("expected an object, got {}", describe(&value)));
        return Err(problems);
    };
    let field = |k: &str| map.get(k);
    let cluster = field("cluster").and_then(|v| {
        fields::name(
            v,
            "cluster",
            &eks_name("the EKS cluster name", pool_id::MAX_CLUSTER),
            &mut problems,
        )
    });
    let name = field("name").and_then(|v| {
        fields::name(
            v,
            "name",
            &eks_name("the pool name", pool_id::MAX_NAME),
            &mut problems,
        )
    });
    let (cluster, name) = identity(map, &doc.owner, cluster, name, &mut problems);
    let place = owned_place(map, &doc.owner, &mut problems);
    let node_group = match field("nodeGroup") {
        Some(v) => validate_node_group(v, &mut problems),
        None => {
            problems.error("nodeGroup", "required field is missing");
            None
        }
    };
    let rebalance = field("interruption")
        .map(|v| validate_interruption(v, &mut problems))
        .unwrap_or_default();
    let termination_grace_period =
        field("terminationGracePeriod").and_then(|v| validate_grace_period(v, &mut problems));
    // Read leniently: a mistake in the metrics field never stops a drain.
    let metrics_per_pool = field("metrics")
        .map(|v| validate_metrics(v, &mut Problems::new()))
        .unwrap_or_default();
    match (cluster, name, node_group) {
        (Some(cluster), Some(name), Some(node_group)) if !problems.has_errors() => Ok(PoolRef {
            cluster,
            place: place.unwrap_or_default(),
            name,
            node_group,
            rebalance,
            termination_grace_period,
            metrics_per_pool,
        }),
        _ => Err(problems),
    }
}

/// Result of parsing a document: the policy when there is no error, and every problem found
/// (warnings may accompany a valid policy).
#[derive(Debug, Clone)]
pub struct Parsed {
    /// `Some` exactly when `problems` has no error.
    pub policy: Option<Policy>,
    /// The pool the document is for, also when it is invalid: the one its parameter path
    /// names, else (a file) the one it names when both names are valid. `None` when neither
    /// is known: nothing may be recorded for it.
    pub pool: Option<PoolId>,
    /// Every error and warning, in document order.
    pub problems: Problems,
}

/// The top-level fields of a policy document, in the order error messages list them.
pub const FIELDS: [&str; 16] = [
    "cluster",
    "name",
    "nodeGroup",
    "architecture",
    "variant",
    "amiSelectorTerms",
    "disruption",
    "expireAfter",
    "terminationGracePeriod",
    "interruption",
    "paused",
    "promotion",
    "health",
    "repair",
    "rollout",
    "metrics",
];
/// The place fields ([`place`]): accepted at the top level beside [`FIELDS`] (whose list the
/// unknown-field message shows, unchanged since before accounts and regions).
pub const PLACE_FIELDS: [&str; 2] = ["account", "region"];
const NODE_GROUP_FIELDS: [&str; 2] = ["autoScalingGroup", "managedNodeGroup"];
const DISRUPTION_FIELDS: [&str; 3] = ["budgets", "order", "surgeAboveMaxSize"];
const INTERRUPTION_FIELDS: [&str; 1] = ["rebalance"];
const ROLLOUT_FIELDS: [&str; 1] = ["strategy"];
const METRICS_FIELDS: [&str; 1] = ["perPool"];
const HEALTH_FIELDS: [&str; 4] = ["window", "maxRatio", "minSamples", "minFailureRate"];
/// Path passed to [`crate::budget::parse_budgets`].
const BUDGETS_PATH: &str = "disruption.budgets";

/// Every field path a policy document may hold, each parent before its fields: `nodeGroup`,
/// `nodeGroup.autoScalingGroup`, ..., the fields of list items with `[]`
/// (`amiSelectorTerms[].alias`, `disruption.budgets[].nodes`). Built from the lists the parser
/// names in its "unknown field; expected one of" errors, so a field it accepts is listed here
/// (docs/policy-reference.md is checked against this list by `tests/tests/docs.rs`). The keys
/// of `amiSelectorTerms[].tags` are the user's tag keys, not fields.
pub fn field_paths() -> Vec<String> {
    let mut out: Vec<String> = PLACE_FIELDS.iter().map(ToString::to_string).collect();
    for top in FIELDS {
        out.push(top.to_string());
        let (prefix, children): (String, &[&str]) = match top {
            "nodeGroup" => (format!("{top}."), &NODE_GROUP_FIELDS),
            "amiSelectorTerms" => (format!("{top}[]."), &terms::TERM_FIELDS),
            "disruption" => (format!("{top}."), &DISRUPTION_FIELDS),
            "interruption" => (format!("{top}."), &INTERRUPTION_FIELDS),
            "rollout" => (format!("{top}."), &ROLLOUT_FIELDS),
            "metrics" => (format!("{top}."), &METRICS_FIELDS),
            "promotion" => (format!("{top}."), &PROMOTION_FIELDS),
            "health" => (format!("{top}."), &HEALTH_FIELDS),
            "repair" => (format!("{top}."), &repair::REPAIR_FIELDS),
            _ => (String::new(), &[]),
        };
        for child in children {
            let path = format!("{prefix}{child}");
            out.push(path.clone());
            if path == BUDGETS_PATH {
                out.extend(
                    crate::budget::BUDGET_FIELDS
                        .iter()
                        .map(|f| format!("{BUDGETS_PATH}[].{f}")),
                );
            }
        }
    }
    out
}

/// Parses a YAML or JSON policy document (JSON is YAML) and validates it completely.
///
/// A document that is not YAML, holds several YAML documents, or repeats a key in one
/// mapping gives one problem at the document path (displayed as `(document)`), with the
/// parser's line and column; so does a document beyond the bounds of [`limits`] (bytes,
/// values after alias expansion, depth), at the path where the bound was passed. Otherwise the
/// problems are those of [`validate`]. Never panics; memory is bounded by [`limits`].
pub fn parse(text: &str) -> Parsed {
    parse_owned(text, &Owner::Document)
}

/// [`parse`] for a document read from a source: a parameter path owns its pool
/// ([`source::Owner`]), so the document may leave out `cluster` and `name` and may not name
/// another pool.
pub fn parse_document(doc: &PolicyDocument) -> Parsed {
    parse_owned(&doc.text, &doc.owner)
}

fn parse_owned(text: &str, owner: &Owner) -> Parsed {
    let mut problems = Problems::new();
    let path_pool = match owner {
        Owner::Path(id) => Some(id.clone()),
        Owner::Document | Owner::NoPool(_) => None,
    };
    let value = match read(text) {
        Ok(value) => value,
        Err((path, message)) => {
            problems.error(path, message);
            return Parsed {
                policy: None,
                pool: path_pool,
                problems,
            };
        }
    };
    let policy = validate_owned(&value, owner, &mut problems);
    let pool = path_pool.or_else(|| {
        let (cluster, name) = (
            value.get("cluster")?.as_str()?,
            value.get("name")?.as_str()?,
        );
        let place = match (value.get("account"), value.get("region")) {
            (None, None) => None,
            (Some(a), Some(r)) => Some(Place::new(a.as_str()?, r.as_str()?).ok()?),
            _ => return None,
        };
        Some(PoolId {
            place,
            ..PoolId::new(cluster, name).ok()?
        })
    });
    Parsed {
        policy: if problems.has_errors() { None } else { policy },
        pool: if matches!(owner, Owner::NoPool(_)) {
            None
        } else {
            pool
        },
        problems,
    }
}

/// The document as a JSON value, within [`limits`]: `Err((path, message))` when it is beyond
/// them or not one YAML/JSON document (repeated keys included). A UTF-8 byte order mark at
/// the start (editors on Windows write one) is skipped.
pub(crate) fn read(text: &str) -> Result<Value, (String, String)> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    limits::check(text).map_err(|e| (e.path, e.message))?;
    // `serde_json::Value` silently keeps the last of repeated keys; `serde_norway::Value`
    // reports them, so the text is read with it first.
    let value = serde_norway::from_str::<serde_norway::Value>(text)
        .and_then(|_| serde_norway::from_str::<Value>(text));
    value.map_err(|e| {
        let e = e.to_string();
        let hint = if e.contains("duplicate entry with key") {
            "; expected each key at most once per mapping"
        } else {
            ""
        };
        (
            String::new(),
            format!("not a valid YAML or JSON document: {e}{hint}"),
        )
    })
}

/// Validates a parsed document and pushes every problem found, never stopping at the first.
///
/// Each problem names the field path (`amiSelectorTerms[0].alias`), what is wrong and what is
/// expected. Problems come in document order: a field's problems where the field appears
/// (`disruption.budgets` problems come from [`crate::budget::parse_budgets`]); rules about a
/// whole object or list (a missing required field, fields that may not be combined, the number
/// of terms) after that object's or list's contents; rules across fields last.
///
/// Returns `Some` exactly when this call pushed no error (warnings allowed), with defaults
/// applied: `variant` standard, `expireAfter` 720h, `interruption.rebalance` ignore, `paused`
/// false, and the default budgets when `disruption.budgets` is absent. Version gates that
/// depend on the cluster's Kubernetes version are not checked here (resolution does).
pub fn validate(value: &Value, problems: &mut Problems) -> Option<Policy> {
    validate_owned(value, &Owner::Document, problems)
}

/// [`validate`] for a document owned by `owner`: with [`Owner::Path`], `cluster` and `name`
/// default to the path's and must equal them when given; with [`Owner::NoPool`], the document is
/// invalid whatever it holds.
pub fn validate_owned(value: &Value, owner: &Owner, problems: &mut Problems) -> Option<Policy> {
    let errors_before = problems.errors().count();
    if let Owner::NoPool(why) = owner {
        problems.error("", why.clone());
    }
    let Value::Object(doc) = value else {
        let shape = format!("an object with the fields {}", FIELDS.join(", "));
        let message = match value {
            Value::Null => format!("empty document; expected {shape}"),
            _ => format!("expected {shape}, got {}", describe(value)),
        };
        problems.error("", message);
        return None;
    };

    let mut cluster = None;
    let mut name = None;
    let mut node_group = None;
    let mut architecture = None;
    let mut variant = None;
    let mut terms = None;
    let mut budgets = None;
    let mut surge_above_max_size = false;
    let mut candidate_order = CandidateOrder::default();
    let mut rollout = RolloutStrategy::default();
    let mut metrics_per_pool = false;
    let mut health = HealthPolicy::default();
    let mut repair = RepairPolicy::default();
    let mut window_given = false;
    let mut expire_after = Some(DEFAULT_EXPIRE_AFTER);
    let mut termination_grace_period = None;
    let mut rebalance = RebalanceAction::default();
    let mut paused = false;
    let mut promotion = None;
    for (key, field) in doc {
        match key.as_str() {
            "cluster" | "name" => {
                let (slot, what, max) = match key.as_str() {
                    "cluster" => (&mut cluster, "the EKS cluster name", pool_id::MAX_CLUSTER),
                    _ => (&mut name, "the pool name", pool_id::MAX_NAME),
                };
                *slot = fields::name(field, key, &eks_name(what, max), problems);
            }
            // Validated together after the loop (both or neither).
            "account" | "region" => {}
            "nodeGroup" => node_group = validate_node_group(field, problems),
            "architecture" => {
                architecture = fields::choice(
                    field,
                    "architecture",
                    "architecture",
                    &ARCHITECTURES,
                    problems,
                )
            }
            "variant" => variant = fields::choice(field, "variant", "variant", &VARIANTS, problems),
            "amiSelectorTerms" => terms = terms::validate(field, "amiSelectorTerms", problems),
            "disruption" => {
                let d = validate_disruption(field, problems);
                budgets = Some(d.budgets);
                surge_above_max_size = d.surge_above_max_size;
                candidate_order = d.order;
            }
            "expireAfter" => {
                if let Some(d) = validate_expire_after(field, problems) {
                    expire_after = d;
                }
            }
            "terminationGracePeriod" => {
                termination_grace_period = validate_grace_period(field, problems)
            }
            "interruption" => rebalance = validate_interruption(field, problems),
            "paused" => match field {
                Value::Bool(b) => paused = *b,
                _ => wrong_type("paused", "a boolean (true or false)", field, problems),
            },
            "promotion" => promotion = validate_promotion(field, problems),
            "health" => {
                health = validate_health(field, problems);
                window_given = field.get("window").is_some();
            }
            "repair" => repair = repair::validate(field, problems),
            "rollout" => rollout = validate_rollout(field, problems),
            "metrics" => metrics_per_pool = validate_metrics(field, problems),
            _ => unknown_field("", key, &FIELDS, problems),
        }
    }

    let (cluster, name) = identity(doc, owner, cluster, name, problems);
    let place = owned_place(doc, owner, problems);
    let required = [
        (
            "nodeGroup",
            "an object with exactly one of autoScalingGroup, managedNodeGroup, e.g. { autoScalingGroup: my-asg }",
        ),
        (
            "amiSelectorTerms",
            "a list of 1 to 30 terms, e.g. [{ alias: al2023@latest }]",
        ),
    ];
    require(doc, &required, problems);
    let budgets =
        budgets.unwrap_or_else(|| crate::budget::parse_budgets(None, BUDGETS_PATH, problems));
    check_across_fields(terms.as_deref(), architecture, variant, problems);
    // The window is at least the soak: by default max(24h, soak); given shorter, an error.
    let soak = promotion.as_ref().and_then(|p| p.soak);
    if let Some(soak) = soak
        && !window_given
    {
        health.window = health.window.max(soak);
    }
    if let Some(soak) = soak
        && health.window < soak
    {
        problems.error(
            "health.window",
            format!(
                "{} is shorter than promotion.soak {}: a node that turns unhealthy during the soak must still count against its release; expected at least {}",
                duration::format(health.window),
                duration::format(soak),
                duration::format(soak)
            ),
        );
    }

    if problems.errors().count() != errors_before {
        return None;
    }
    Some(Policy {
        cluster: cluster?,
        place: place.ok()?,
        name: name?,
        node_group: node_group?,
        architecture,
        variant: variant.unwrap_or_default(),
        ami_selector_terms: terms?,
        budgets,
        expire_after,
        termination_grace_period,
        rebalance,
        paused,
        promotion,
        surge_above_max_size,
        candidate_order,
        rollout,
        health,
        repair,
        metrics_per_pool,
    })
}

/// The pool's `cluster` and `name` after ownership: a file's document must name both; a
/// parameter's may leave them out (the path's are taken) and may not name another pool (an
/// error at the field naming both pools). `cluster`/`name` are the fields' valid values.
fn identity(
    doc: &serde_json::Map<String, Value>,
    owner: &Owner,
    cluster: Option<String>,
    name: Option<String>,
    problems: &mut Problems,
) -> (Option<String>, Option<String>) {
    match owner {
        Owner::Path(id) => {
            let mut own = |field: &str, given: Option<String>, path_part: &str, what: &str| {
                match given {
                    Some(g) if g != path_part => {
                        problems.error(
                            field,
                            format!(
                                "{} names pool {}, but its parameter path is that of pool {id}; expected {field}: {path_part} (or no {field}: the path names the {what})",
                                quote(&g),
                                if field == "cluster" {
                                    format!("{g}/{}", id.name)
                                } else {
                                    format!("{}/{g}", id.cluster)
                                },
                            ),
                        );
                        None
                    }
                    Some(g) => Some(g),
                    // Invalid when given (already reported), the path's when left out.
                    None if doc.contains_key(field) => None,
                    None => Some(path_part.to_string()),
                }
            };
            let cluster = own("cluster", cluster, &id.cluster, "cluster");
            let name = own("name", name, &id.name, "pool");
            (cluster, name)
        }
        Owner::Document | Owner::NoPool(_) => {
            let required = [
                ("cluster", "the EKS cluster name"),
                (
                    "name",
                    "the pool name (letters, digits, '-' and '_', at most 63 characters)",
                ),
            ];
            require(doc, &required, problems);
            (cluster, name)
        }
    }
}

/// Pushes `<field>: required field is missing; expected <expected>` for each `(field, expected)`
/// the document lacks.
fn require(
    doc: &serde_json::Map<String, Value>,
    required: &[(&str, &str)],
    problems: &mut Problems,
) {
    for &(field, expected) in required {
        if !doc.contains_key(field) {
            problems.error(
                field,
                format!("required field is missing; expected {expected}"),
            );
        }
    }
}

/// The pool's place after ownership ([`place::validate`]): a parameter path that names a
/// place ([`source::owner_of`]) gives it to a document that names none, and a document may not
/// name another; otherwise the document's own. `Err(())` after pushing the problems.
fn owned_place(
    doc: &serde_json::Map<String, Value>,
    owner: &Owner,
    problems: &mut Problems,
) -> Result<Option<Place>, ()> {
    let named = place::validate(doc.get("account"), doc.get("region"), problems)?;
    match (owner, named) {
        (Owner::Path(id), None) if id.place.is_some() => Ok(id.place.clone()),
        (Owner::Path(id), Some(named)) if id.place.as_ref().is_some_and(|p| *p != named) => {
            let path = id
                .place
                .as_ref()
                .map(ToString::to_string)
                .unwrap_or_default();
            problems.error(
                "account",
                format!(
                    "account and region name {named}, but its parameter path is that of pool {id}; expected account and region of {path} (or none: the path names them)"
                ),
            );
            Err(())
        }
        (_, named) => Ok(named),
    }
}

/// Staged promotion (`promotion`, a nodecycle extension): which upstream pool proves releases
/// for this one, for how long, watched by which alarms, and how old an image must be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Promotion {
    /// The upstream pool (`cluster/name`, any cluster) whose proven releases this pool takes.
    pub from: Option<String>,
    /// How long the upstream must have run a release on all its nodes, healthy (with `from`).
    pub soak: Option<Duration>,
    /// CloudWatch alarms (names or ARNs): in ALARM during the soak = not proven; in ALARM while
    /// this pool rolls to a release = the release is quarantined.
    pub alarms: Vec<String>,
    /// Only images created at least this long ago (also without `from`).
    pub min_age: Option<Duration>,
    /// `soakNodes`: how many of the upstream's nodes must have stayed healthy for `soak` (default:
    /// 3, or all of the pool's when it has fewer; [`crate::promotion::health::soaked`]).
    pub soak_nodes: Option<u32>,
}

const PROMOTION_FIELDS: [&str; 5] = ["from", "soak", "alarms", "minAge", "soakNodes"];

fn validate_promotion(value: &Value, problems: &mut Problems) -> Option<Promotion> {
    const PATH: &str = "promotion";
    let expected = "an object with from (cluster/name) and soak, optional alarms and minAge";
    let map = fields::object(value, PATH, expected, problems)?;
    let errors_before = problems.errors().count();
    let mut promotion = Promotion {
        from: None,
        soak: None,
        alarms: Vec::new(),
        soak_nodes: None,
        min_age: None,
    };
    let duration_of = |field: &Value, path: &str, problems: &mut Problems| {
        let text = fields::string(field, path, "a duration such as \"72h\"", problems)?;
        match duration::parse(text) {
            Ok(d) if !d.is_zero() => Some(d),
            _ => {
                problems.error(
                    path,
                    format!(
                        "invalid duration {}; expected a duration longer than 0s such as \"72h\", \"24h\" or \"30m\"{}",
                        quote(text),
                        days_hint(text)
                    ),
                );
                None
            }
        }
    };
    for (key, field) in map {
        let path = join(PATH, key);
        match key.as_str() {
            "from" => {
                let Some(text) = fields::string(field, &path, "a pool as cluster/name", problems)
                else {
                    continue;
                };
                let parts: Vec<&str> = text.split('/').collect();
                let name_like = |p: &&str| {
                    !p.is_empty()
                        && p.len() <= 100
                        && p.chars()
                            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
                };
                let valid = match parts.as_slice() {
                    [_, _] => parts.iter().all(name_like),
                    [account, region, cluster, name] => {
                        place::is_account(account)
                            && place::is_region(region)
                            && [cluster, name].iter().all(|p| name_like(p))
                    }
                    _ => false,
                };
                if valid {
                    promotion.from = Some(text.to_string());
                } else {
                    problems.error(
                        &path,
                        format!(
                            "invalid pool {}; expected the upstream pool as cluster/name (the cell's own account and region), e.g. test/general, or as account/region/cluster/name, e.g. 111122223333/us-east-1/test/general",
                            quote(text)
                        ),
                    );
                }
            }
            "soak" => promotion.soak = duration_of(field, &path, problems),
            "minAge" => promotion.min_age = duration_of(field, &path, problems),
            "soakNodes" => match field.as_u64() {
                Some(n @ 1..=10_000) => promotion.soak_nodes = u32::try_from(n).ok(),
                _ => problems.error(
                    &path,
                    format!(
                        "expected a whole number of nodes from 1 to 10000, got {}",
                        fields::describe(field)
                    ),
                ),
            },
            "alarms" => {
                let Value::Array(items) = field else {
                    wrong_type(
                        &path,
                        "a list of CloudWatch alarm names or ARNs",
                        field,
                        problems,
                    );
                    continue;
                };
                for (i, item) in items.iter().enumerate() {
                    let item_path = format!("{path}[{i}]");
                    let Some(text) = fields::string(
                        item,
                        &item_path,
                        "a CloudWatch alarm name or ARN",
                        problems,
                    ) else {
                        continue;
                    };
                    let name = alarm_name(text);
                    if name.is_empty() || name.len() > 255 {
                        problems.error(
                            &item_path,
                            format!(
                                "invalid alarm {}; expected an alarm name (1 to 255 characters) or arn:<partition>:cloudwatch:<region>:<account>:alarm:<name>",
                                quote(text)
                            ),
                        );
                    } else {
                        promotion.alarms.push(text.to_string());
                    }
                }
            }
            _ => unknown_field(PATH, key, &PROMOTION_FIELDS, problems),
        }
    }
    let has = |k: &str| map.contains_key(k);
    if has("from") && !has("soak") {
        problems.error(
            PATH,
            "from is set without soak; expected how long the upstream must run a release, e.g. soak: 72h",
        );
    } else if !has("from") && (has("soak") || has("alarms")) {
        problems.error(
            PATH,
            "soak and alarms need from (the upstream pool that proves releases); expected from: cluster/name",
        );
    } else if !has("from") && !has("minAge") {
        problems.error(
            PATH,
            "empty promotion; expected from (cluster/name) with soak, or minAge",
        );
    }
    (problems.errors().count() == errors_before).then_some(promotion)
}

/// The alarm name of a name or an alarm ARN (`arn:...:alarm:<name>`).
pub fn alarm_name(text: &str) -> &str {
    match text.split_once(":alarm:") {
        Some((prefix, name)) if prefix.starts_with("arn:") => name,
        _ => text,
    }
}

fn validate_node_group(value: &Value, problems: &mut Problems) -> Option<NodeGroup> {
    const PATH: &str = "nodeGroup";
    let expected = "an object with exactly one of autoScalingGroup, managedNodeGroup, e.g. { autoScalingGroup: my-asg }";
    let map = fields::object(value, PATH, expected, problems)?;
    let asg_rule = NameRule {
        what: "the Auto Scaling group name",
        max: 255,
        allowed: |c| c.is_ascii_graphic() && c != ':',
        first: |_| true,
        allowed_text: "printable ASCII characters other than ':' (no spaces)",
        first_text: "",
    };
    let mut found = None;
    for (key, field) in map {
        let path = join(PATH, key);
        match key.as_str() {
            "autoScalingGroup" => {
                found =
                    fields::name(field, &path, &asg_rule, problems).map(NodeGroup::AutoScalingGroup)
            }
            "managedNodeGroup" => {
                found = fields::name(
                    field,
                    &path,
                    &eks_name("the EKS managed node group name", 63),
                    problems,
                )
                .map(NodeGroup::ManagedNodeGroup)
            }
            _ => unknown_field(PATH, key, &NODE_GROUP_FIELDS, problems),
        }
    }
    let given = NODE_GROUP_FIELDS
        .iter()
        .filter(|f| map.contains_key(**f))
        .count();
    match given {
        0 => {
            problems.error(
                PATH,
                "no node group given; expected exactly one of autoScalingGroup, managedNodeGroup",
            );
            None
        }
        1 => found,
        _ => {
            problems.error(
                PATH,
                "both autoScalingGroup and managedNodeGroup are set; expected exactly one (a pool manages one node group)",
            );
            None
        }
    }
}

/// The architectures a policy names, each with the other spellings users write for it.
const ARCHITECTURES: [(Architecture, &[&str]); 2] = [
    (Architecture::X86_64, &["amd64", "x86-64", "x86", "x64"]),
    (Architecture::Arm64, &["aarch64", "arm"]),
];

/// The variants a policy names, each with the other spellings users write for it.
const VARIANTS: [(Variant, &[&str]); 3] = [
    (Variant::Standard, &[]),
    (Variant::Nvidia, &["gpu", "cuda", "accelerated"]),
    (Variant::Neuron, &["inferentia", "trainium"]),
];

/// What `disruption` says.
struct Disruption {
    /// Its budgets (the defaults when `budgets` is absent or `disruption` is not an object; the
    /// latter is an error anyway).
    budgets: Vec<Budget>,
    /// `surgeAboveMaxSize` (false when absent).
    surge_above_max_size: bool,
    /// `order` (`emptiestFirst` when absent).
    order: CandidateOrder,
}

/// Validates `disruption`.
fn validate_disruption(value: &Value, problems: &mut Problems) -> Disruption {
    const PATH: &str = "disruption";
    let mut d = Disruption {
        budgets: Vec::new(),
        surge_above_max_size: false,
        order: CandidateOrder::default(),
    };
    let Some(map) = fields::object(value, PATH, "an object with the field budgets", problems)
    else {
        d.budgets = crate::budget::parse_budgets(None, BUDGETS_PATH, problems);
        return d;
    };
    let mut budgets = None;
    for (key, field) in map {
        match key.as_str() {
            "budgets" => {
                budgets = Some(crate::budget::parse_budgets(
                    Some(field),
                    BUDGETS_PATH,
                    problems,
                ))
            }
            "surgeAboveMaxSize" => match field {
                Value::Bool(b) => d.surge_above_max_size = *b,
                _ => wrong_type(
                    "disruption.surgeAboveMaxSize",
                    "a boolean (true or false)",
                    field,
                    problems,
                ),
            },
            "order" => {
                let options: [(_, &[&str]); 2] = [
                    (
                        CandidateOrder::EmptiestFirst,
                        &["emptiest", "leastpodsfirst", "emptyfirst"],
                    ),
                    (CandidateOrder::OldestFirst, &["oldest", "agefirst", "fifo"]),
                ];
                if let Some(o) =
                    fields::choice(field, "disruption.order", "order", &options, problems)
                {
                    d.order = o;
                }
            }
            _ => unknown_field(PATH, key, &DISRUPTION_FIELDS, problems),
        }
    }
    d.budgets =
        budgets.unwrap_or_else(|| crate::budget::parse_budgets(None, BUDGETS_PATH, problems));
    d
}

/// `Some(None)` for `Never`, `Some(Some(d))` for a positive duration, `None` on error.
fn validate_expire_after(value: &Value, problems: &mut Problems) -> Option<Option<Duration>> {
    const PATH: &str = "expireAfter";
    const EXPECTED: &str = "a number and unit such as \"720h\", \"1h30m\" or \"90s\", or \"Never\"";
    const TYPE: &str = "a string (a duration such as \"720h\", or \"Never\")";
    let text = fields::string(value, PATH, TYPE, problems)?;
    if text == "Never" {
        return Some(None);
    }
    match duration::parse(text) {
        Ok(d) if d.is_zero() => {
            problems.error(
                PATH,
                "0s would expire every node at once; expected a duration longer than 0s, such as \"720h\", or \"Never\"",
            );
            None
        }
        Ok(d) => {
            if d < MIN_SENSIBLE_EXPIRE_AFTER {
                problems.warning(
                    PATH,
                    format!(
                        "{} is shorter than 1h: every node would be replaced once it is that old, so the pool would replace nodes continuously; expected a node lifetime such as \"720h\" (the default; at least 1h), or \"Never\"",
                        quote(text)
                    ),
                );
            }
            Some(Some(d))
        }
        Err(_) => {
            let hint = if text.eq_ignore_ascii_case("never") {
                " (\"Never\" is capitalized)".to_string()
            } else {
                days_hint(text)
            };
            problems.error(
                PATH,
                format!(
                    "invalid duration {}; expected {EXPECTED}{hint}",
                    quote(text)
                ),
            );
            None
        }
    }
}

fn validate_grace_period(value: &Value, problems: &mut Problems) -> Option<Duration> {
    const PATH: &str = "terminationGracePeriod";
    const TYPE: &str = "a string (a duration such as \"2h\")";
    let text = fields::string(value, PATH, TYPE, problems)?;
    match duration::parse(text) {
        Ok(d) => Some(d),
        Err(_) if text.eq_ignore_ascii_case("never") => {
            problems.error(
                PATH,
                format!("{} is not allowed here; expected a duration such as \"2h\" (omit terminationGracePeriod to let drains wait indefinitely)", quote(text)),
            );
            None
        }
        Err(_) => {
            problems.error(
                PATH,
                format!(
                    "invalid duration {}; expected a number and unit such as \"2h\", \"1h30m\" or \"90s\"{}",
                    quote(text),
                    days_hint(text)
                ),
            );
            None
        }
    }
}

/// ` (days are not a unit: 30d is "720h")` when `text` is a whole number of days.
fn days_hint(text: &str) -> String {
    let days = text.strip_suffix('d').and_then(|n| n.parse::<u64>().ok());
    match days.and_then(|d| d.checked_mul(24)) {
        Some(hours) => format!(" (days are not a unit: {text} is \"{hours}h\")"),
        None => String::new(),
    }
}

/// Validates `health` (every field optional; the defaults of [`HealthPolicy`]).
fn validate_health(value: &Value, problems: &mut Problems) -> HealthPolicy {
    const PATH: &str = "health";
    let mut h = HealthPolicy::default();
    let Some(map) = fields::object(
        value,
        PATH,
        "an object with window, maxRatio, minSamples and minFailureRate",
        problems,
    ) else {
        return h;
    };
    for (key, field) in map {
        let path = join(PATH, key);
        match key.as_str() {
            "window" => {
                if let Some(d) = fields::positive_duration(field, &path, "24h", problems) {
                    h.window = d;
                }
            }
            "maxRatio" => match field.as_f64() {
                Some(r) if (1.0..=1000.0).contains(&r) => h.max_ratio = r,
                _ => problems.error(
                    &path,
                    format!(
                        "expected a number from 1 to 1000 (how many times the previous release's rate indicts), got {}",
                        fields::describe(field)
                    ),
                ),
            },
            "minSamples" => match field.as_u64() {
                Some(n @ 1..=1_000_000) => h.min_samples = u32::try_from(n).unwrap_or(u32::MAX),
                _ => problems.error(
                    &path,
                    format!(
                        "expected a whole number of pod starts from 1 to 1000000, got {}",
                        fields::describe(field)
                    ),
                ),
            },
            "minFailureRate" => match field.as_f64() {
                Some(r) if r > 0.0 && r <= 1.0 => h.min_failure_rate = r,
                _ => problems.error(
                    &path,
                    format!(
                        "expected a fraction of pod starts above 0 and at most 1 (0.1 = 10%), got {}",
                        fields::describe(field)
                    ),
                ),
            },
            _ => unknown_field(PATH, key, &HEALTH_FIELDS, problems),
        }
    }
    h
}

fn validate_interruption(value: &Value, problems: &mut Problems) -> RebalanceAction {
    const PATH: &str = "interruption";
    let Some(map) = fields::object(value, PATH, "an object with the field rebalance", problems)
    else {
        return RebalanceAction::default();
    };
    let mut action = RebalanceAction::default();
    for (key, field) in map {
        match key.as_str() {
            "rebalance" => {
                let path = join(PATH, key);
                let options: [(_, &[&str]); 3] = [
                    (RebalanceAction::Ignore, &[]),
                    (RebalanceAction::Cordon, &[]),
                    (RebalanceAction::Replace, &[]),
                ];
                if let Some(chosen) = fields::choice(field, &path, "action", &options, problems) {
                    action = chosen;
                }
            }
            _ => unknown_field(PATH, key, &INTERRUPTION_FIELDS, problems),
        }
    }
    action
}

fn validate_rollout(value: &Value, problems: &mut Problems) -> RolloutStrategy {
    const PATH: &str = "rollout";
    let Some(map) = fields::object(value, PATH, "an object with the field strategy", problems)
    else {
        return RolloutStrategy::default();
    };
    let mut strategy = RolloutStrategy::default();
    for (key, field) in map {
        match key.as_str() {
            "strategy" => {
                let path = join(PATH, key);
                let options: [(_, &[&str]); 2] = [
                    (RolloutStrategy::Auto, &[]),
                    (RolloutStrategy::TerminateFirst, &[]),
                ];
                if let Some(chosen) = fields::choice(field, &path, "strategy", &options, problems) {
                    strategy = chosen;
                }
            }
            _ => unknown_field(PATH, key, &ROLLOUT_FIELDS, problems),
        }
    }
    strategy
}

/// `metrics`: `perPool` (default false), whether the pool's metrics carry its `Pool` dimension.
fn validate_metrics(value: &Value, problems: &mut Problems) -> bool {
    const PATH: &str = "metrics";
    let Some(map) = fields::object(value, PATH, "an object with the field perPool", problems)
    else {
        return false;
    };
    let mut per_pool = false;
    for (key, field) in map {
        match key.as_str() {
            "perPool" => match field {
                Value::Bool(b) => per_pool = *b,
                _ => wrong_type(
                    &join(PATH, key),
                    "a boolean (true or false)",
                    field,
                    problems,
                ),
            },
            _ => unknown_field(PATH, key, &METRICS_FIELDS, problems),
        }
    }
    per_pool
}

/// Rules that join fields: Windows aliases resolve to one x86_64 image without variants, and a
/// variant other than standard does nothing without an alias term.
fn check_across_fields(
    terms: Option<&[SelectorTerm]>,
    architecture: Option<Architecture>,
    variant: Option<Variant>,
    problems: &mut Problems,
) {
    let Some(terms) = terms else { return };
    let alias = terms.iter().find_map(|t| t.alias.as_ref());
    match alias {
        Some(alias) if alias.family.is_windows() => {
            let family = alias.family;
            if architecture == Some(Architecture::Arm64) {
                problems.error(
                    "architecture",
                    format!("{family} AMIs are x86_64 only, got arm64; expected x86_64 or no architecture"),
                );
            }
            if let Some(v) = variant.filter(|v| *v != Variant::Standard) {
                problems.error(
                    "variant",
                    format!("{family} AMIs have no {v} variant; expected standard or no variant"),
                );
            }
        }
        Some(alias) => {
            let variant = variant.unwrap_or_default();
            if let Some(arch) = architecture
                && let Some((why, instead)) = alias.family.missing_image(arch, variant)
            {
                let path = terms
                    .iter()
                    .position(|t| t.alias.is_some())
                    .map(|i| format!("amiSelectorTerms[{i}].alias"))
                    .unwrap_or_default();
                problems.warning(
                    "variant",
                    format!(
                        "{} has no {arch} {variant} AMI ({why}), so {path} \"{alias}\" would resolve to no image; expected {instead}",
                        alias.family,
                    ),
                );
            }
        }
        None => {
            if let Some(v) = variant.filter(|v| *v != Variant::Standard) {
                problems.warning(
                    "variant",
                    format!("{v} has no effect: only alias terms use the variant, and amiSelectorTerms has no alias; expected variant only with an alias term"),
                );
            }
        }
    }
}
