//! Classification of incoming invocation payloads (pure). Functions accept either an EventBridge
//! envelope (rules, including schedule rules) or a custom input (EventBridge Scheduler, manual
//! `aws lambda invoke`). Unknown detail-types are a no-op; malformed known events are rejected
//! with [`InvalidEvent`] naming the bad field.

use serde_json::Value;

pub mod instance_events;
pub mod served;
pub mod verify;

/// An EventBridge envelope with an untyped `detail`.
pub type Envelope = aws_lambda_events::eventbridge::EventBridgeEvent<Value>;

/// A payload that cannot be handled: names the field and what was expected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct InvalidEvent {
    /// Field path inside the payload (`detail.name`, `detail-type`, ...).
    pub field: String,
    /// What is wrong and what is expected.
    pub message: String,
}

impl InvalidEvent {
    /// Builds an error for `field`.
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }

    /// Lambda error type for this error.
    pub const ERROR_TYPE: &'static str = "InvalidEvent";
}

/// What arrived.
#[derive(Debug, Clone, PartialEq)]
pub enum Input {
    /// An EventBridge envelope.
    Envelope(Box<Envelope>),
    /// Anything else: `null`, `{}` or a custom object.
    Custom(Value),
}

/// Splits a payload into an envelope or a custom input. An object with a `detail-type` key is
/// an envelope and must be a well-formed one.
pub fn parse_input(payload: &Value) -> Result<Input, InvalidEvent> {
    let Some(obj) = payload.as_object() else {
        return match payload {
            Value::Null => Ok(Input::Custom(Value::Null)),
            other => Err(InvalidEvent::new(
                "(payload)",
                format!(
                    "expected a JSON object (an EventBridge event or a custom input), got {}",
                    crate::problem::shorten(&other.to_string())
                ),
            )),
        };
    };
    if !obj.contains_key("detail-type") {
        return Ok(Input::Custom(payload.clone()));
    }
    for field in ["detail-type", "source"] {
        if !obj.get(field).is_some_and(Value::is_string) {
            return Err(InvalidEvent::new(
                field,
                "missing or not a string; expected an EventBridge event",
            ));
        }
    }
    if !obj.contains_key("detail") {
        return Err(InvalidEvent::new("detail", "missing; expected an object"));
    }
    serde_json::from_value::<Envelope>(payload.clone())
        .map(|e| Input::Envelope(Box::new(e)))
        .map_err(|e| InvalidEvent::new("(envelope)", format!("not a valid EventBridge event: {e}")))
}

/// Why the ami-watcher was invoked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatcherTrigger {
    /// Resolve every pool (schedule, manual invoke), or only the listed `<cluster>/<name>` pools.
    Pass {
        /// `None` = every pool.
        only: Option<Vec<String>>,
    },
    /// A `Parameter Store Change` event.
    ParameterChanged {
        /// Parameter name.
        name: String,
        /// `Create`, `Update`, `Delete`, `LabelParameterVersion`, ...
        operation: String,
    },
    /// Anything else: nothing to do.
    Ignored {
        /// What it was, for the log line.
        what: String,
    },
}

/// Longest parameter name a Parameter Store Change may carry (SSM's own limit is 1011
/// characters with the path; a longer one is no parameter's).
pub const MAX_PARAMETER_NAME: usize = 2048;

/// Classifies an ami-watcher payload.
pub fn watcher_trigger(payload: &Value) -> Result<WatcherTrigger, InvalidEvent> {
    match parse_input(payload)? {
        Input::Envelope(e) => Ok(match (e.source.as_str(), e.detail_type.as_str()) {
            (_, "Scheduled Event") => WatcherTrigger::Pass { only: None },
            ("aws.ssm", "Parameter Store Change") => {
                let name = e
                    .detail
                    .get("name")
                    .and_then(Value::as_str)
                    .ok_or_else(|| {
                        InvalidEvent::new(
                            "detail.name",
                            "missing or not a string; expected the parameter name",
                        )
                    })?;
                if name.chars().count() > MAX_PARAMETER_NAME {
                    return Err(InvalidEvent::new(
                        "detail.name",
                        format!(
                            "{} characters long; expected a parameter name of at most {MAX_PARAMETER_NAME}",
                            name.chars().count()
                        ),
                    ));
                }
                let operation = crate::problem::shorten(
                    e.detail
                        .get("operation")
                        .and_then(Value::as_str)
                        .unwrap_or("Update"),
                )
                .into_owned();
                WatcherTrigger::ParameterChanged {
                    name: name.to_string(),
                    operation,
                }
            }
            (source, detail_type) => WatcherTrigger::Ignored {
                what: format!(
                    "{} / {}",
                    crate::problem::shorten(source),
                    crate::problem::shorten(detail_type)
                ),
            },
        }),
        Input::Custom(Value::Null) => Ok(WatcherTrigger::Pass { only: None }),
        Input::Custom(Value::Object(obj)) => {
            let mut only = None;
            for (k, v) in &obj {
                match k.as_str() {
                    "pools" => {
                        let list = v.as_array().ok_or_else(|| {
                            InvalidEvent::new(
                                "pools",
                                "expected a list of \"<cluster>/<name>\" strings",
                            )
                        })?;
                        let mut pools = Vec::new();
                        for (i, p) in list.iter().enumerate() {
                            match p.as_str() {
                                Some(s) if s.contains('/') => pools.push(s.to_string()),
                                _ => {
                                    return Err(InvalidEvent::new(
                                        format!("pools[{i}]"),
                                        format!(
                                            "expected \"<cluster>/<name>\", got {}",
                                            crate::problem::shorten(&p.to_string())
                                        ),
                                    ));
                                }
                            }
                        }
                        only = Some(pools);
                    }
                    other => {
                        return Err(InvalidEvent::new(
                            other,
                            "unknown field; expected an EventBridge event, {} or {\"pools\": [\"<cluster>/<name>\", ...]}",
                        ));
                    }
                }
            }
            Ok(WatcherTrigger::Pass { only })
        }
        Input::Custom(other) => Err(InvalidEvent::new(
            "(payload)",
            format!(
                "unexpected input {}",
                crate::problem::shorten(&other.to_string())
            ),
        )),
    }
}

/// Which pools a rotator pass works on, from its custom input (an EventBridge schedule
/// target's `Input`): every pool (`{}`, `null`, or a `Scheduled Event`), the pools named in
/// `pools` (`"<cluster>/<name>"`), the pools of the clusters named in `clusters`, or, with
/// both, the named pools of those clusters. One schedule target per group of clusters is how
/// passes fan out past what one invocation serves (docs/operations.md, *Scaling out*).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selection {
    /// Only these pools (`<cluster>/<name>`).
    pub pools: Option<Vec<String>>,
    /// Only pools of these clusters.
    pub clusters: Option<Vec<String>>,
    /// Only pools that name this account and region (`account` and `region` of a fan-out work
    /// item for a member; unset: pools of any place).
    pub place: Option<crate::policy::Place>,
}

impl Selection {
    /// Whether the pool `pool_id` of `cluster` at `place` (the policy's `account` and
    /// `region`, `None` for the cell's own) is selected.
    pub fn includes_at(
        &self,
        cluster: &str,
        pool_id: &str,
        place: Option<&crate::policy::Place>,
    ) -> bool {
        self.place.as_ref().is_none_or(|want| place == Some(want))
            && self.includes(cluster, pool_id)
    }

    /// Whether the pool `pool_id` (`<cluster>/<name>`) of `cluster` is selected.
    pub fn includes(&self, cluster: &str, pool_id: &str) -> bool {
        self.pools
            .as_ref()
            .is_none_or(|p| p.iter().any(|p| p == pool_id))
            && self
                .clusters
                .as_ref()
                .is_none_or(|c| c.iter().any(|c| c == cluster))
    }
}

/// A list of non-empty strings in field `field`, each passing `check` (else its message).
fn string_list(
    field: &str,
    value: &Value,
    what: &str,
    check: impl Fn(&str) -> bool,
) -> Result<Vec<String>, InvalidEvent> {
    let list = value
        .as_array()
        .ok_or_else(|| InvalidEvent::new(field, format!("expected a list of {what}")))?;
    list.iter()
        .enumerate()
        .map(|(i, v)| match v.as_str() {
            Some(s) if !s.is_empty() && check(s) => Ok(s.to_string()),
            _ => Err(InvalidEvent::new(
                format!("{field}[{i}]"),
                format!(
                    "expected {what}, got {}",
                    crate::problem::shorten(&v.to_string())
                ),
            )),
        })
        .collect()
}

/// Parses the rotator's custom input (see [`Selection`]); anything else is an error naming the
/// field.
pub fn rotator_selection(payload: &Value) -> Result<Selection, InvalidEvent> {
    let obj = match payload {
        Value::Null => return Ok(Selection::default()),
        Value::Object(obj) => obj,
        other => {
            return Err(InvalidEvent::new(
                "(payload)",
                format!(
                    "unexpected input {}",
                    crate::problem::shorten(&other.to_string())
                ),
            ));
        }
    };
    let mut selection = Selection::default();
    let text = |k: &str| {
        obj.get(k)
            .map(|v| v.as_str().map(str::to_string).ok_or(k.to_string()))
    };
    match (text("account"), text("region")) {
        (None, None) => {}
        (Some(Ok(account)), Some(Ok(region)))
            if account.len() == 12
                && account.bytes().all(|b| b.is_ascii_digit())
                && !region.is_empty()
                && region.len() <= 32
                && region
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-') =>
        {
            selection.place = Some(crate::policy::Place { account, region });
        }
        _ => {
            return Err(InvalidEvent::new(
                "account",
                "expected \"account\" (12 digits) and \"region\" (a region name) together",
            ));
        }
    }
    for (k, v) in obj {
        match k.as_str() {
            "account" | "region" => {}
            "pools" => {
                selection.pools = Some(string_list(k, v, "\"<cluster>/<name>\"", |s| {
                    s.contains('/')
                })?)
            }
            "clusters" => {
                selection.clusters = Some(string_list(k, v, "cluster names", |s| !s.contains('/'))?)
            }
            other => {
                return Err(InvalidEvent::new(
                    other,
                    "unknown field; expected an EventBridge event, {}, {\"pools\": [\"<cluster>/<name>\", ...]} or {\"clusters\": [\"<cluster>\", ...]}",
                ));
            }
        }
    }
    Ok(selection)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sample(name: &str) -> Value {
        let path = format!(
            "{}/../events/{name}",
            // At run time: a shared build cache may hand out a binary built in another checkout.
            std::env::var("CARGO_MANIFEST_DIR")
                .unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").into())
        );
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
    }

    #[test]
    fn samples_classify() {
        assert_eq!(
            watcher_trigger(&sample("scheduled-tick.json")).unwrap(),
            WatcherTrigger::Pass { only: None }
        );
        assert_eq!(
            watcher_trigger(&sample("parameter-store-change.json")).unwrap(),
            WatcherTrigger::ParameterChanged {
                name: "/golden/eks/al2023/x86_64".into(),
                operation: "Update".into()
            }
        );
        assert!(matches!(
            watcher_trigger(&sample("spot-interruption-warning.json")).unwrap(),
            WatcherTrigger::Ignored { .. }
        ));
    }

    #[test]
    fn custom_inputs() {
        assert_eq!(
            watcher_trigger(&json!({})).unwrap(),
            WatcherTrigger::Pass { only: None }
        );
        assert_eq!(
            watcher_trigger(&Value::Null).unwrap(),
            WatcherTrigger::Pass { only: None }
        );
        assert_eq!(
            watcher_trigger(&json!({"pools": ["prod/general"]})).unwrap(),
            WatcherTrigger::Pass {
                only: Some(vec!["prod/general".into()])
            }
        );
        assert_eq!(
            watcher_trigger(&json!({"pools": ["x"]})).unwrap_err().field,
            "pools[0]"
        );
        assert_eq!(
            watcher_trigger(&json!({"pool": "a/b"})).unwrap_err().field,
            "pool"
        );
        assert!(watcher_trigger(&json!(3)).is_err());
    }

    #[test]
    fn rotator_selections() {
        assert_eq!(rotator_selection(&json!({})).unwrap(), Selection::default());
        assert_eq!(
            rotator_selection(&Value::Null).unwrap(),
            Selection::default()
        );
        let s = rotator_selection(&json!({"clusters": ["prod", "stage"]})).unwrap();
        assert!(s.includes("prod", "prod/general"));
        assert!(!s.includes("test", "test/general"));
        let s = rotator_selection(&json!({"clusters": ["prod"], "pools": ["prod/a", "test/b"]}))
            .unwrap();
        assert!(s.includes("prod", "prod/a"));
        assert!(!s.includes("prod", "prod/b"));
        assert!(!s.includes("test", "test/b"));
        assert!(Selection::default().includes("any", "any/pool"));
        // A member's work item: only the pools that name its account and region.
        let s = rotator_selection(
            &json!({"clusters": ["prod"], "account": "210987654321", "region": "eu-west-1"}),
        )
        .unwrap();
        let there = crate::policy::Place {
            account: "210987654321".into(),
            region: "eu-west-1".into(),
        };
        let elsewhere = crate::policy::Place {
            account: "210987654321".into(),
            region: "us-east-1".into(),
        };
        let id = "210987654321/eu-west-1/prod/general";
        assert!(s.includes_at("prod", id, Some(&there)));
        assert!(!s.includes_at("prod", id, Some(&elsewhere)));
        assert!(!s.includes_at("prod", "prod/general", None));
        assert!(Selection::default().includes_at("prod", "prod/general", None));
        for half in [
            json!({"account": "210987654321"}),
            json!({"region": "eu-west-1"}),
            json!({"account": "2109", "region": "eu-west-1"}),
            json!({"account": 210987654321u64, "region": "eu-west-1"}),
        ] {
            assert_eq!(
                rotator_selection(&half).unwrap_err().field,
                "account",
                "{half}"
            );
        }
        assert_eq!(
            rotator_selection(&json!({"clusters": "prod"}))
                .unwrap_err()
                .field,
            "clusters"
        );
        assert_eq!(
            rotator_selection(&json!({"clusters": ["prod", "a/b"]}))
                .unwrap_err()
                .field,
            "clusters[1]"
        );
        assert_eq!(
            rotator_selection(&json!({"clusters": [""]}))
                .unwrap_err()
                .field,
            "clusters[0]"
        );
        assert_eq!(
            rotator_selection(&json!({"pools": ["x"]}))
                .unwrap_err()
                .field,
            "pools[0]"
        );
        assert_eq!(
            rotator_selection(&json!({"cluster": "prod"}))
                .unwrap_err()
                .field,
            "cluster"
        );
        assert!(rotator_selection(&json!([1])).is_err());
    }

    #[test]
    fn parameter_names_are_bounded() {
        let mut e = sample("parameter-store-change.json");
        e["detail"]["name"] = json!(format!("/{}", "p".repeat(1 << 20)));
        let err = watcher_trigger(&e).unwrap_err();
        assert_eq!(err.field, "detail.name");
        assert!(err.message.len() < 200, "{err}");
        e["detail"]["name"] = json!("/nodecycle/pools/prod/general");
        e["detail"]["operation"] = json!("o".repeat(1 << 20));
        match watcher_trigger(&e).unwrap() {
            WatcherTrigger::ParameterChanged { operation, .. } => {
                assert!(operation.len() < 100, "{}", operation.len())
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn malformed_known_events_name_the_field() {
        let mut e = sample("parameter-store-change.json");
        e["detail"].as_object_mut().unwrap().remove("name");
        assert_eq!(watcher_trigger(&e).unwrap_err().field, "detail.name");
        let mut e = sample("scheduled-tick.json");
        e.as_object_mut().unwrap().remove("source");
        assert_eq!(watcher_trigger(&e).unwrap_err().field, "source");
    }
}
