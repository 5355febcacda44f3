//! Classification of the interruption handler's events (pure): EC2 Spot and Capacity
//! Reservation interruption warnings, rebalance recommendations, instance state changes, AWS
//! Health scheduled changes for EC2, and Auto Scaling instance-terminate lifecycle actions.
//!
//! Unknown detail-types (and known ones that carry nothing to act on, such as Health events of
//! other services) are [`Interruption::Ignored`]; a known event missing what it needs is an
//! [`InvalidEvent`] naming the field.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{Input, InvalidEvent, parse_input};
use crate::problem::{quote, shorten};

/// Longest event id accepted (EventBridge ids are 36-character UUIDs; the id is part of the
/// deduplication key, which DynamoDB bounds).
pub const MAX_EVENT_ID: usize = 128;
/// Longest Auto Scaling group or lifecycle hook name (Auto Scaling's own limit).
pub const MAX_AWS_NAME: usize = 255;
/// Longest lifecycle action token (Auto Scaling's are 36-character UUIDs).
pub const MAX_TOKEN: usize = 128;

/// EC2 instance states of a state-change notification.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum InstanceState {
    /// `pending`.
    Pending,
    /// `running`.
    Running,
    /// `stopping`.
    Stopping,
    /// `stopped`.
    Stopped,
    /// `shutting-down`.
    ShuttingDown,
    /// `terminated`.
    Terminated,
    /// Anything else.
    Other(String),
}

impl InstanceState {
    /// Parses the EC2 state name.
    pub fn parse(s: &str) -> InstanceState {
        match s {
            "pending" => InstanceState::Pending,
            "running" => InstanceState::Running,
            "stopping" => InstanceState::Stopping,
            "stopped" => InstanceState::Stopped,
            "shutting-down" => InstanceState::ShuttingDown,
            "terminated" => InstanceState::Terminated,
            other => InstanceState::Other(other.to_string()),
        }
    }

    /// The instance is going away for good (`shutting-down`, `terminated`).
    pub fn is_gone(&self) -> bool {
        matches!(
            self,
            InstanceState::ShuttingDown | InstanceState::Terminated
        )
    }

    /// The instance is stopping or stopped: its pods must move.
    pub fn is_stopping(&self) -> bool {
        matches!(self, InstanceState::Stopping | InstanceState::Stopped)
    }
}

/// An Auto Scaling lifecycle action to answer (`crate::interruption::LifecycleOps` answers it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LifecycleAction {
    /// Auto Scaling group.
    pub group: String,
    /// Lifecycle hook name.
    pub hook: String,
    /// Token of this action (`None` when the event carried none: the instance id identifies it).
    pub token: Option<String>,
    /// The instance.
    pub instance_id: String,
}

/// An EC2 instance as the interruption handler needs it (`crate::interruption::InstanceLookup`
/// finds it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InstanceInfo {
    /// `i-...`.
    pub instance_id: String,
    /// EC2 state name (`running`, `shutting-down`, ...).
    pub state: String,
    /// Availability zone.
    pub availability_zone: String,
    /// Tags.
    pub tags: BTreeMap<String, String>,
}

impl InstanceInfo {
    /// The EKS cluster from `eks:cluster-name`, else from a `kubernetes.io/cluster/<name>` tag.
    pub fn cluster(&self) -> Option<&str> {
        if let Some(c) = self
            .tags
            .get(crate::tags::CLUSTER)
            .filter(|c| !c.is_empty())
        {
            return Some(c);
        }
        self.tags
            .iter()
            .filter(|(_, v)| matches!(v.as_str(), "owned" | "shared"))
            .find_map(|(k, _)| k.strip_prefix(crate::tags::KUBERNETES_CLUSTER_PREFIX))
            .filter(|c| !c.is_empty())
    }

    /// The Auto Scaling group (`aws:autoscaling:groupName`).
    pub fn group(&self) -> Option<&str> {
        self.tags
            .get(crate::tags::AUTO_SCALING_GROUP)
            .map(String::as_str)
    }

    /// The EKS managed node group (`eks:nodegroup-name`).
    pub fn nodegroup(&self) -> Option<&str> {
        self.tags.get(crate::tags::NODEGROUP).map(String::as_str)
    }
}

/// What an interruption-handler event asks for.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum Interruption {
    /// Spot or Capacity Reservation interruption warning: about two minutes left.
    InterruptionWarning {
        /// The instance.
        instance_id: String,
        /// `terminate`, `stop` or `hibernate` (informational).
        instance_action: Option<String>,
        /// `spot` or `capacity-reservation`.
        market: &'static str,
    },
    /// EC2 Instance Rebalance Recommendation.
    Rebalance {
        /// The instance.
        instance_id: String,
    },
    /// EC2 Instance State-change Notification.
    StateChange {
        /// The instance.
        instance_id: String,
        /// Its new state.
        state: InstanceState,
    },
    /// AWS Health scheduled change for EC2 instances (retirement, maintenance, reboot).
    Maintenance {
        /// Affected instances.
        instance_ids: Vec<String>,
        /// Start of the scheduled change: replace before it.
        deadline: DateTime<Utc>,
        /// e.g. `AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED`.
        event_type_code: String,
    },
    /// Auto Scaling EC2 Instance-terminate Lifecycle Action.
    LifecycleTerminate(LifecycleAction),
    /// A schedule tick: continue open lifecycle actions.
    Tick,
    /// Nothing to do.
    Ignored {
        /// What it was, for the log line.
        what: String,
    },
}

impl Interruption {
    /// Short kind name for records and logs.
    pub fn kind(&self) -> &'static str {
        match self {
            Interruption::InterruptionWarning { market: "spot", .. } => "SpotInterruptionWarning",
            Interruption::InterruptionWarning { .. } => "CapacityReservationInterruptionWarning",
            Interruption::Rebalance { .. } => "RebalanceRecommendation",
            Interruption::StateChange { .. } => "StateChange",
            Interruption::Maintenance { .. } => "ScheduledMaintenance",
            Interruption::LifecycleTerminate(_) => "TerminateLifecycleAction",
            Interruption::Tick => "Tick",
            Interruption::Ignored { .. } => "Ignored",
        }
    }
}

/// A classified event: its id and time (for deduplication and records) and what it asks.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClassifiedEvent {
    /// EventBridge event id (`None` for custom inputs), at most [`MAX_EVENT_ID`] characters.
    pub id: Option<String>,
    /// The account the event says it is about (`None` for custom inputs).
    pub account: Option<String>,
    /// The region the event says it is about (`None` for custom inputs).
    pub region: Option<String>,
    /// Event time (`None` when absent).
    pub time: Option<DateTime<Utc>>,
    /// What to do.
    pub event: Interruption,
}

/// EC2 instance ids look like `i-` followed by 8 or 17 hex digits.
pub fn is_instance_id(s: &str) -> bool {
    s.strip_prefix("i-").is_some_and(|h| {
        (h.len() == 8 || h.len() == 17) && h.chars().all(|c| c.is_ascii_hexdigit())
    })
}

fn detail_str<'a>(detail: &'a Value, key: &str, what: &str) -> Result<&'a str, InvalidEvent> {
    detail
        .get(key)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| {
            InvalidEvent::new(
                format!("detail.{key}"),
                format!("missing or not a string; expected {what}"),
            )
        })
}

/// [`detail_str`] of at most `max` characters.
fn bounded_str<'a>(
    detail: &'a Value,
    key: &str,
    what: &str,
    max: usize,
) -> Result<&'a str, InvalidEvent> {
    let s = detail_str(detail, key, what)?;
    if s.chars().count() > max {
        return Err(InvalidEvent::new(
            format!("detail.{key}"),
            format!(
                "{} is {} characters long; expected {what} of at most {max}",
                quote(s),
                s.chars().count()
            ),
        ));
    }
    Ok(s)
}

fn instance_at(detail: &Value, key: &str) -> Result<String, InvalidEvent> {
    let id = detail_str(detail, key, "an EC2 instance id (i-...)")?;
    if is_instance_id(id) {
        Ok(id.to_string())
    } else {
        Err(InvalidEvent::new(
            format!("detail.{key}"),
            format!(
                "{} is not an EC2 instance id; expected i- and 8 or 17 hex digits",
                quote(id)
            ),
        ))
    }
}

/// Parses an AWS Health time: RFC 2822 style (`Sat, 05 Dec 2026 15:10:09 GMT`), or RFC 3339.
/// The day of the week is ignored: AWS's own documented sample (`Sat, 05 Jun 2016`) has a
/// wrong one, and the date is what counts.
pub fn parse_health_time(text: &str) -> Option<DateTime<Utc>> {
    let text = text.trim();
    let without_weekday = match text.split_once(',') {
        Some((day, rest)) if day.len() <= 9 && day.chars().all(|c| c.is_ascii_alphabetic()) => {
            rest.trim_start()
        }
        _ => text,
    };
    DateTime::parse_from_rfc2822(without_weekday)
        .or_else(|_| DateTime::parse_from_rfc3339(text))
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

fn health(detail: &Value, resources: Option<&[String]>) -> Result<Interruption, InvalidEvent> {
    let service = detail.get("service").and_then(Value::as_str).unwrap_or("");
    let category = detail
        .get("eventTypeCategory")
        .and_then(Value::as_str)
        .unwrap_or("");
    if service != "EC2" || category != "scheduledChange" {
        return Ok(Interruption::Ignored {
            what: format!(
                "AWS Health Event service {} category {}",
                quote(service),
                quote(category)
            ),
        });
    }
    let start = detail_str(
        detail,
        "startTime",
        "the start of the scheduled change (\"Sat, 05 Dec 2026 15:10:09 GMT\")",
    )?;
    let deadline = parse_health_time(start).ok_or_else(|| {
        InvalidEvent::new(
            "detail.startTime",
            format!(
                "{} is not a time; expected RFC 2822 like \"Sat, 05 Dec 2026 15:10:09 GMT\"",
                quote(start)
            ),
        )
    })?;
    let mut instance_ids: Vec<String> = Vec::new();
    match detail.get("affectedEntities") {
        None | Some(Value::Null) => {}
        Some(Value::Array(list)) => {
            for (i, e) in list.iter().enumerate() {
                let v = e
                    .get("entityValue")
                    .and_then(Value::as_str)
                    .ok_or_else(|| {
                        InvalidEvent::new(
                            format!("detail.affectedEntities[{i}].entityValue"),
                            "missing or not a string; expected an EC2 instance id",
                        )
                    })?;
                // Health also lists non-instance entities (volumes, hosts): not ours.
                if is_instance_id(v) && !instance_ids.iter().any(|x| x == v) {
                    instance_ids.push(v.to_string());
                }
            }
        }
        Some(_) => {
            return Err(InvalidEvent::new(
                "detail.affectedEntities",
                "expected a list of {\"entityValue\": \"i-...\"}",
            ));
        }
    }
    if instance_ids.is_empty() {
        for r in resources.unwrap_or_default() {
            let id = r.rsplit('/').next().unwrap_or(r);
            if is_instance_id(id) && !instance_ids.iter().any(|x| x == id) {
                instance_ids.push(id.to_string());
            }
        }
    }
    let event_type_code: String = detail
        .get("eventTypeCode")
        .and_then(Value::as_str)
        .unwrap_or("")
        .chars()
        .take(MAX_AWS_NAME)
        .collect();
    if instance_ids.is_empty() {
        return Ok(Interruption::Ignored {
            what: format!("AWS Health Event {event_type_code} without EC2 instances"),
        });
    }
    Ok(Interruption::Maintenance {
        instance_ids,
        deadline,
        event_type_code,
    })
}

fn lifecycle(detail: &Value) -> Result<Interruption, InvalidEvent> {
    let transition = detail
        .get("LifecycleTransition")
        .and_then(Value::as_str)
        .unwrap_or("");
    if transition != "autoscaling:EC2_INSTANCE_TERMINATING" {
        return Ok(Interruption::Ignored {
            what: format!("lifecycle transition {}", quote(transition)),
        });
    }
    let token = match detail.get("LifecycleActionToken") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if !s.is_empty() && s.chars().count() <= MAX_TOKEN => {
            Some(s.clone())
        }
        Some(Value::String(s)) if !s.is_empty() => {
            return Err(InvalidEvent::new(
                "detail.LifecycleActionToken",
                format!(
                    "{} characters long; expected a lifecycle action token of at most {MAX_TOKEN}",
                    s.chars().count()
                ),
            ));
        }
        Some(_) => {
            return Err(InvalidEvent::new(
                "detail.LifecycleActionToken",
                "expected a string",
            ));
        }
    };
    Ok(Interruption::LifecycleTerminate(LifecycleAction {
        group: bounded_str(
            detail,
            "AutoScalingGroupName",
            "the Auto Scaling group name",
            MAX_AWS_NAME,
        )?
        .to_string(),
        hook: bounded_str(
            detail,
            "LifecycleHookName",
            "the lifecycle hook name",
            MAX_AWS_NAME,
        )?
        .to_string(),
        token,
        instance_id: instance_at(detail, "EC2InstanceId")?,
    }))
}

/// An interruption warning (spot or capacity reservation, per `market`) from its detail.
fn warning(d: &Value, market: &'static str) -> Result<Interruption, InvalidEvent> {
    Ok(Interruption::InterruptionWarning {
        instance_id: instance_at(d, "instance-id")?,
        instance_action: d
            .get("instance-action")
            .and_then(Value::as_str)
            .map(str::to_string),
        market,
    })
}

/// Classifies an interruption-handler payload. A custom input (`{}`, `null`) is a tick.
pub fn interruption_event(payload: &Value) -> Result<ClassifiedEvent, InvalidEvent> {
    // Name the field for envelope-level problems the generic parser would only summarize.
    if let Some(obj) = payload
        .as_object()
        .filter(|o| o.contains_key("detail-type"))
    {
        match obj.get("time") {
            None | Some(Value::Null) => {}
            Some(Value::String(s)) if DateTime::parse_from_rfc3339(s).is_ok() => {}
            Some(other) => {
                return Err(InvalidEvent::new(
                    "time",
                    format!("{} is not an RFC 3339 time", shorten(&other.to_string())),
                ));
            }
        }
        match obj.get("id") {
            None | Some(Value::Null) => {}
            Some(Value::String(id)) if id.chars().count() > MAX_EVENT_ID => {
                return Err(InvalidEvent::new(
                    "id",
                    format!(
                        "{} characters long; expected an EventBridge event id of at most {MAX_EVENT_ID} characters (a UUID)",
                        id.chars().count()
                    ),
                ));
            }
            Some(Value::String(_)) => {}
            Some(_) => return Err(InvalidEvent::new("id", "expected a string")),
        }
        if obj.get("detail").is_some_and(|d| !d.is_object()) {
            return Err(InvalidEvent::new("detail", "expected an object"));
        }
    }
    let e = match parse_input(payload)? {
        Input::Envelope(e) => e,
        Input::Custom(c) if c.is_null() || c.as_object().is_some_and(|o| o.is_empty()) => {
            return Ok(ClassifiedEvent {
                id: None,
                account: None,
                region: None,
                time: None,
                event: Interruption::Tick,
            });
        }
        Input::Custom(other) => {
            return Err(InvalidEvent::new(
                "(payload)",
                format!(
                    "expected an EventBridge event or {{}}, got {}",
                    shorten(&other.to_string())
                ),
            ));
        }
    };
    let d = &e.detail;
    let event = match (e.source.as_str(), e.detail_type.as_str()) {
        ("aws.ec2", "EC2 Spot Instance Interruption Warning") => warning(d, "spot")?,
        ("aws.ec2", "EC2 Capacity Reservation Instance Interruption Warning") => {
            warning(d, "capacity-reservation")?
        }
        ("aws.ec2", "EC2 Instance Rebalance Recommendation") => Interruption::Rebalance {
            instance_id: instance_at(d, "instance-id")?,
        },
        ("aws.ec2", "EC2 Instance State-change Notification") => Interruption::StateChange {
            instance_id: instance_at(d, "instance-id")?,
            state: InstanceState::parse(detail_str(
                d,
                "state",
                "the instance state (pending, running, stopping, stopped, shutting-down, terminated)",
            )?),
        },
        ("aws.health", "AWS Health Event") => health(d, e.resources.as_deref())?,
        ("aws.autoscaling", "EC2 Instance-terminate Lifecycle Action") => lifecycle(d)?,
        (_, "Scheduled Event") => Interruption::Tick,
        (source, detail_type) => Interruption::Ignored {
            what: format!("{} / {}", shorten(source), shorten(detail_type)),
        },
    };
    Ok(ClassifiedEvent {
        id: e.id.clone().filter(|s| !s.is_empty()),
        account: e.account.clone(),
        region: e.region.clone(),
        time: e.time,
        event,
    })
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

    fn t(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    #[test]
    fn strings_are_bounded() {
        let mut e = sample("spot-interruption-warning.json");
        e["id"] = json!("x".repeat(4096));
        let err = interruption_event(&e).unwrap_err();
        assert_eq!(err.field, "id");
        assert!(err.message.len() < 200, "{err}");
        e["id"] = json!("7bf73129-1428-4cd3-a780-95db273d1602");
        e["detail"]["instance-id"] = json!("y".repeat(1 << 20));
        let err = interruption_event(&e).unwrap_err();
        assert_eq!(err.field, "detail.instance-id");
        assert!(err.message.len() < 300, "{}", err.message.len());
        let mut e = sample("asg-terminate-lifecycle-action.json");
        e["detail"]["LifecycleHookName"] = json!("h".repeat(300));
        assert_eq!(
            interruption_event(&e).unwrap_err().field,
            "detail.LifecycleHookName"
        );
        let mut e = sample("spot-interruption-warning.json");
        e["detail-type"] = json!("d".repeat(1 << 20));
        match interruption_event(&e).unwrap().event {
            Interruption::Ignored { what } => assert!(what.len() < 300, "{}", what.len()),
            other => panic!("{other:?}"),
        }
        let c = interruption_event(&sample("spot-interruption-warning.json")).unwrap();
        assert_eq!(c.account.as_deref(), Some("123456789012"));
        assert_eq!(c.region.as_deref(), Some("us-east-2"));
    }

    #[test]
    fn samples_classify() {
        let cases: Vec<(&str, Interruption)> = vec![
            (
                "spot-interruption-warning.json",
                Interruption::InterruptionWarning {
                    instance_id: "i-0a1b2c3d4e5f60718".into(),
                    instance_action: Some("terminate".into()),
                    market: "spot",
                },
            ),
            (
                "rebalance-recommendation.json",
                Interruption::Rebalance {
                    instance_id: "i-0a1b2c3d4e5f60718".into(),
                },
            ),
            (
                "instance-state-change.json",
                Interruption::StateChange {
                    instance_id: "i-0a1b2c3d4e5f60718".into(),
                    state: InstanceState::ShuttingDown,
                },
            ),
            (
                "health-scheduled-change.json",
                Interruption::Maintenance {
                    instance_ids: vec!["i-0f9e8d7c6b5a40312".into()],
                    deadline: t("2026-12-05T15:10:09Z"),
                    event_type_code: "AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED".into(),
                },
            ),
            (
                "asg-terminate-lifecycle-action.json",
                Interruption::LifecycleTerminate(LifecycleAction {
                    group: "prod-general".into(),
                    hook: "nodecycle-drain".into(),
                    token: Some("87654321-4321-4321-4321-210987654321".into()),
                    instance_id: "i-0c3d2b1a09f8e7d65".into(),
                }),
            ),
            ("scheduled-tick.json", Interruption::Tick),
        ];
        for (file, want) in cases {
            let c = interruption_event(&sample(file)).unwrap();
            assert_eq!(c.event, want, "{file}");
            assert!(c.id.is_some() && c.time.is_some(), "{file}");
        }
        assert!(matches!(
            interruption_event(&sample("parameter-store-change.json"))
                .unwrap()
                .event,
            Interruption::Ignored { .. }
        ));
    }

    fn with(file: &str, change: impl Fn(&mut Value)) -> Value {
        let mut v = sample(file);
        change(&mut v);
        v
    }

    #[test]
    fn table() {
        type Check = fn(&Interruption) -> bool;
        let cases: Vec<(&str, Value, Check)> = vec![
            (
                "capacity reservation warning",
                with("spot-interruption-warning.json", |v| {
                    v["detail-type"] =
                        json!("EC2 Capacity Reservation Instance Interruption Warning")
                }),
                |e| {
                    matches!(
                        e,
                        Interruption::InterruptionWarning {
                            market: "capacity-reservation",
                            ..
                        }
                    ) && e.kind() == "CapacityReservationInterruptionWarning"
                },
            ),
            (
                "stopping",
                with("instance-state-change.json", |v| {
                    v["detail"]["state"] = json!("stopping")
                }),
                |e| matches!(e, Interruption::StateChange { state, .. } if state.is_stopping()),
            ),
            (
                "running is classified, acted on by nobody",
                with("instance-state-change.json", |v| {
                    v["detail"]["state"] = json!("running")
                }),
                |e| {
                    matches!(
                        e,
                        Interruption::StateChange {
                            state: InstanceState::Running,
                            ..
                        }
                    )
                },
            ),
            (
                "health issue category ignored",
                with("health-scheduled-change.json", |v| {
                    v["detail"]["eventTypeCategory"] = json!("issue")
                }),
                |e| matches!(e, Interruption::Ignored { .. }),
            ),
            (
                "health other service ignored",
                with("health-scheduled-change.json", |v| {
                    v["detail"]["service"] = json!("RDS")
                }),
                |e| matches!(e, Interruption::Ignored { .. }),
            ),
            (
                "health entities fall back to resources",
                with("health-scheduled-change.json", |v| {
                    v["detail"]
                        .as_object_mut()
                        .unwrap()
                        .remove("affectedEntities");
                }),
                |e| matches!(e, Interruption::Maintenance { instance_ids, .. } if instance_ids == &["i-0f9e8d7c6b5a40312"]),
            ),
            (
                "health volume entities are not instances",
                with("health-scheduled-change.json", |v| {
                    v["detail"]["affectedEntities"] = json!([{"entityValue": "vol-0123"}]);
                    v["resources"] = json!(["vol-0123"]);
                }),
                |e| matches!(e, Interruption::Ignored { .. }),
            ),
            (
                "launch lifecycle transition ignored",
                with("asg-terminate-lifecycle-action.json", |v| {
                    v["detail"]["LifecycleTransition"] = json!("autoscaling:EC2_INSTANCE_LAUNCHING")
                }),
                |e| matches!(e, Interruption::Ignored { .. }),
            ),
            (
                "unknown detail-type",
                with("spot-interruption-warning.json", |v| {
                    v["detail-type"] = json!("EC2 Fleet Error")
                }),
                |e| matches!(e, Interruption::Ignored { .. }),
            ),
            (
                "unknown source",
                with("spot-interruption-warning.json", |v| {
                    v["source"] = json!("custom.app")
                }),
                |e| matches!(e, Interruption::Ignored { .. }),
            ),
            ("empty custom input", json!({}), |e| {
                matches!(e, Interruption::Tick)
            }),
            ("null", Value::Null, |e| matches!(e, Interruption::Tick)),
        ];
        for (name, payload, check) in cases {
            let c = interruption_event(&payload).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(check(&c.event), "{name}: {:?}", c.event);
        }
    }

    #[test]
    fn malformed_events_name_the_field() {
        let cases: Vec<(&str, Value, &str)> = vec![
            (
                "no instance id",
                with("spot-interruption-warning.json", |v| {
                    v["detail"].as_object_mut().unwrap().remove("instance-id");
                }),
                "detail.instance-id",
            ),
            (
                "instance id not an id",
                with("rebalance-recommendation.json", |v| {
                    v["detail"]["instance-id"] = json!("web-1")
                }),
                "detail.instance-id",
            ),
            (
                "instance id a number",
                with("instance-state-change.json", |v| {
                    v["detail"]["instance-id"] = json!(7)
                }),
                "detail.instance-id",
            ),
            (
                "no state",
                with("instance-state-change.json", |v| {
                    v["detail"].as_object_mut().unwrap().remove("state");
                }),
                "detail.state",
            ),
            (
                "health bad start time",
                with("health-scheduled-change.json", |v| {
                    v["detail"]["startTime"] = json!("next tuesday")
                }),
                "detail.startTime",
            ),
            (
                "health entity without value",
                with("health-scheduled-change.json", |v| {
                    v["detail"]["affectedEntities"] = json!([{"tags": {}}])
                }),
                "detail.affectedEntities[0].entityValue",
            ),
            (
                "lifecycle no group",
                with("asg-terminate-lifecycle-action.json", |v| {
                    v["detail"]
                        .as_object_mut()
                        .unwrap()
                        .remove("AutoScalingGroupName");
                }),
                "detail.AutoScalingGroupName",
            ),
            (
                "lifecycle no instance",
                with("asg-terminate-lifecycle-action.json", |v| {
                    v["detail"]["EC2InstanceId"] = json!("")
                }),
                "detail.EC2InstanceId",
            ),
            (
                "bad time",
                with("spot-interruption-warning.json", |v| {
                    v["time"] = json!("yyyy-mm-ddThh:mm:ssZ")
                }),
                "time",
            ),
            (
                "detail not an object",
                with("spot-interruption-warning.json", |v| {
                    v["detail"] = json!("x")
                }),
                "detail",
            ),
            (
                "no detail",
                with("spot-interruption-warning.json", |v| {
                    v.as_object_mut().unwrap().remove("detail");
                }),
                "detail",
            ),
            (
                "no source",
                with("spot-interruption-warning.json", |v| {
                    v.as_object_mut().unwrap().remove("source");
                }),
                "source",
            ),
            (
                "custom object",
                json!({"instance": "i-0123abcd"}),
                "(payload)",
            ),
            ("a number", json!(3), "(payload)"),
        ];
        for (name, payload, field) in cases {
            let err = interruption_event(&payload).expect_err(name);
            assert_eq!(err.field, field, "{name}: {err}");
        }
    }

    #[test]
    fn health_times() {
        assert_eq!(
            parse_health_time("Sat, 05 Jun 2016 15:10:09 GMT"),
            Some(t("2016-06-05T15:10:09Z"))
        );
        assert_eq!(
            parse_health_time("2026-12-05T15:10:09Z"),
            Some(t("2026-12-05T15:10:09Z"))
        );
        assert_eq!(parse_health_time("05/12/2026"), None);
    }

    #[test]
    fn instance_ids() {
        assert!(is_instance_id("i-0a1b2c3d4e5f60718"));
        assert!(is_instance_id("i-12345678"));
        assert!(!is_instance_id("i-0a1b2c3d4e5f6071"));
        assert!(!is_instance_id("i-zzzzzzzz"));
        assert!(!is_instance_id("vol-12345678"));
    }
}
