//! The policy's `repair:` (node repair, nodecycle extension): which node conditions, bad for
//! how long, make a node `Unhealthy`, and how much repair may do at once. Every field is
//! optional; a pool that sets nothing repairs with the defaults of [`RepairPolicy`].

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;

use super::fields;
use crate::duration;
use crate::problem::{Problems, join};

/// The fields of `repair`.
pub const REPAIR_FIELDS: [&str; 5] = [
    "enabled",
    "conditions",
    "drainTimeout",
    "maxParallel",
    "maxUnhealthy",
];

/// The conditions repair watches and how long each must stay bad by default: `Ready` not
/// `True` 30 minutes, the EKS node monitoring agent's conditions `False` 30 minutes
/// (`AcceleratedHardwareReady` 10: a GPU with double-bit errors does not heal).
pub const DEFAULT_CONDITIONS: [(&str, u64); 7] = [
    ("Ready", 30),
    ("KernelReady", 30),
    ("NetworkingReady", 30),
    ("StorageReady", 30),
    ("ContainerRuntimeReady", 30),
    ("AcceleratedHardwareReady", 10),
    // An EC2 status check that failed: replaced at the next pass.
    ("EC2StatusCheck", 1),
];

/// `repair` as validated.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RepairPolicy {
    /// `repair.enabled` (default true).
    pub enabled: bool,
    /// How long each condition must stay bad (`repair.conditions` over
    /// [`DEFAULT_CONDITIONS`]).
    #[serde(serialize_with = "serialize_conditions")]
    pub conditions: BTreeMap<String, Duration>,
    /// `repair.drainTimeout` (default 10m): how long the drain honours PDBs before it forces.
    #[serde(serialize_with = "crate::duration::serialize")]
    pub drain_timeout: Duration,
    /// `repair.maxParallel` (default 1): repairs at once when no budget names `Unhealthy`.
    pub max_parallel: u32,
    /// `repair.maxUnhealthy` (default 20, a percentage): above this share of a pool, or of one
    /// of its zones, unhealthy, nothing is repaired (an outage, not a node).
    pub max_unhealthy_percent: u32,
}

fn serialize_conditions<S: serde::Serializer>(
    c: &BTreeMap<String, Duration>,
    s: S,
) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeMap;
    let mut m = s.serialize_map(Some(c.len()))?;
    for (k, v) in c {
        m.serialize_entry(k, &duration::format(*v))?;
    }
    m.end()
}

impl Default for RepairPolicy {
    fn default() -> Self {
        RepairPolicy {
            enabled: true,
            conditions: DEFAULT_CONDITIONS
                .iter()
                .map(|(k, m)| ((*k).to_string(), Duration::from_secs(m * 60)))
                .collect(),
            drain_timeout: Duration::from_secs(10 * 60),
            max_parallel: 1,
            max_unhealthy_percent: 20,
        }
    }
}

/// Validates `repair` (every field optional; the defaults of [`RepairPolicy`]).
pub(super) fn validate(value: &Value, problems: &mut Problems) -> RepairPolicy {
    const PATH: &str = "repair";
    let mut r = RepairPolicy::default();
    let Some(map) = fields::object(
        value,
        PATH,
        "an object with enabled, conditions, drainTimeout, maxParallel and maxUnhealthy",
        problems,
    ) else {
        return r;
    };
    for (key, field) in map {
        let path = join(PATH, key);
        match key.as_str() {
            "enabled" => match field {
                Value::Bool(b) => r.enabled = *b,
                _ => fields::wrong_type(&path, "a boolean (true or false)", field, problems),
            },
            "conditions" => conditions(field, &path, &mut r.conditions, problems),
            "drainTimeout" => {
                if let Some(d) = fields::positive_duration(field, &path, "10m", problems) {
                    r.drain_timeout = d;
                }
            }
            "maxParallel" => match field.as_u64() {
                Some(n @ 1..=1000) => r.max_parallel = u32::try_from(n).unwrap_or(u32::MAX),
                _ => problems.error(
                    &path,
                    format!(
                        "expected a whole number of nodes repaired at once from 1 to 1000, got {}",
                        fields::describe(field)
                    ),
                ),
            },
            "maxUnhealthy" => {
                let percent = field
                    .as_str()
                    .and_then(|t| t.strip_suffix('%'))
                    .and_then(|n| n.parse::<u32>().ok())
                    .filter(|n| (1..=100).contains(n));
                match percent {
                    Some(p) => r.max_unhealthy_percent = p,
                    None => problems.error(
                        &path,
                        format!(
                            "expected a percentage from 1% to 100% such as \"20%\", got {}",
                            fields::describe(field)
                        ),
                    ),
                }
            }
            _ => fields::unknown_field(PATH, key, &REPAIR_FIELDS, problems),
        }
    }
    r
}

/// `repair.conditions`: `{<condition>: <duration>}` over the defaults; a condition repair does
/// not know is an error naming the ones it does.
fn conditions(
    field: &Value,
    path: &str,
    into: &mut BTreeMap<String, Duration>,
    problems: &mut Problems,
) {
    let known: Vec<&str> = DEFAULT_CONDITIONS.iter().map(|(k, _)| *k).collect();
    let Some(map) = fields::object(
        field,
        path,
        "an object of condition: duration, e.g. { Ready: 15m }",
        problems,
    ) else {
        return;
    };
    for (condition, value) in map {
        let at = join(path, condition);
        if !known.contains(&condition.as_str()) {
            fields::unknown_field(path, condition, &known, problems);
            continue;
        }
        if let Some(d) = fields::positive_duration(value, &at, "30m", problems) {
            into.insert(condition.clone(), d);
        }
    }
}
