//! A member's forwarding rules: each event class the cell's interruption rules match is
//! forwarded, by an ENABLED rule of the member's default bus in the place's region, to the
//! cell's bus in that same region (deploy/spoke.yaml's `Forward*` rules). Pure: the facts are
//! the member's rules ([`RuleFacts`], `events:ListRules`) and the targets of the rules that
//! name a forwarded class (`events:ListTargetsByRule`).

use super::port::RuleFacts;
use super::{Check, CheckKind};
use crate::policy::Place;
use crate::port::{ErrorKind, PortError};

/// The event classes (source, detail type) a spoke forwards to the cell: those the cell's
/// interruption rules match.
pub const FORWARDED: [(&str, &str); 6] = [
    ("aws.ec2", "EC2 Spot Instance Interruption Warning"),
    (
        "aws.ec2",
        "EC2 Capacity Reservation Instance Interruption Warning",
    ),
    ("aws.ec2", "EC2 Instance Rebalance Recommendation"),
    ("aws.ec2", "EC2 Instance State-change Notification"),
    ("aws.health", "AWS Health Event"),
    ("aws.autoscaling", "EC2 Instance-terminate Lifecycle Action"),
];

/// The longest event pattern read (EventBridge allows 4096 characters; anything longer is not
/// a rule of the spoke's).
const MAX_PATTERN: usize = 8192;

/// One rule with its targets, as the check sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Forwarder {
    /// The rule.
    pub rule: RuleFacts,
    /// Its target ARNs.
    pub targets: Vec<String>,
}

/// The cell's bus in `place`'s region: where a spoke at `place` forwards (each cell handles
/// the events of its own region; its rules are on its default bus).
pub fn cell_bus(place: &Place, cell_account: &str) -> String {
    format!(
        "arn:{}:events:{}:{cell_account}:event-bus/default",
        crate::members::partition_of(&place.region),
        place.region
    )
}

/// Whether `pattern` (an event pattern's JSON text) matches events of `source` and
/// `detail_type` by naming both (a pattern that does not name them is not the spoke's).
fn names(pattern: &str, source: &str, detail_type: &str) -> bool {
    if pattern.len() > MAX_PATTERN {
        return false;
    }
    let Ok(v) = serde_json::from_str::<serde_json::Value>(pattern) else {
        return false;
    };
    let lists = |field: &str, want: &str| {
        v.get(field)
            .and_then(serde_json::Value::as_array)
            .is_some_and(|a| a.iter().any(|x| x.as_str() == Some(want)))
    };
    lists("source", source) && lists("detail-type", detail_type)
}

/// The rules whose targets are worth reading: those naming a forwarded class.
pub fn candidates(rules: &[RuleFacts]) -> Vec<&RuleFacts> {
    rules
        .iter()
        .filter(|r| {
            r.pattern
                .as_deref()
                .is_some_and(|p| FORWARDED.iter().any(|(s, d)| names(p, s, d)))
        })
        .collect()
}

/// Whether a rule state lets events through.
fn enabled(state: &str) -> bool {
    state == "ENABLED" || state == "ENABLED_WITH_ALL_CLOUDTRAIL_MANAGEMENT_EVENTS"
}

/// One `forwarding` check per class of [`FORWARDED`] at `place` (member account, region),
/// from the member's rules naming forwarded classes with their targets (or the error reading
/// them), against the cell's bus `bus` ([`cell_bus`]). `role` is the spoke role the rules were
/// read through. Each failure names the member, the rule and what to do.
pub fn check(
    place: &Place,
    role: &str,
    bus: &str,
    forwarders: Result<Vec<Forwarder>, PortError>,
) -> Vec<Check> {
    let forwarders = match forwarders {
        Ok(f) => f,
        Err(e) => {
            let fix = match e.kind {
                ErrorKind::AccessDenied => format!(
                    "grant the spoke role {role} {} on this account's rules (deploy/spoke.yaml's ops role has it: update the spoke stack instance of account {} in {})",
                    e.operation, place.account, place.region
                ),
                ErrorKind::Transient => "retry; EventBridge was unavailable or throttled".into(),
                _ => format!("{} needs read access through {role}", e.operation),
            };
            return vec![Check::fail(
                CheckKind::Forwarding,
                place.to_string(),
                format!("cannot read the forwarding rules: {e}"),
                fix,
            )];
        }
    };
    let at = format!("account {} in {}", place.account, place.region);
    FORWARDED
        .iter()
        .map(|(source, detail_type)| {
            let subject = format!("{place}: {detail_type}");
            let naming: Vec<&Forwarder> = forwarders
                .iter()
                .filter(|f| {
                    f.rule
                        .pattern
                        .as_deref()
                        .is_some_and(|p| names(p, source, detail_type))
                })
                .collect();
            let to_bus: Vec<&&Forwarder> = naming
                .iter()
                .filter(|f| f.targets.iter().any(|t| t == bus))
                .collect();
            if let Some(f) = to_bus.iter().find(|f| enabled(&f.rule.state)) {
                return Check::ok(
                    CheckKind::Forwarding,
                    subject,
                    format!("rule {} ({}) forwards it to {bus}", f.rule.name, f.rule.state),
                );
            }
            if let Some(f) = to_bus.first() {
                return Check::fail(
                    CheckKind::Forwarding,
                    subject,
                    format!(
                        "rule {} of {at} forwards it to the cell's bus but is {}: these events never reach the cell",
                        f.rule.name, f.rule.state
                    ),
                    format!(
                        "aws events enable-rule --name {} --region {} (in account {}), or update the spoke stack instance there",
                        f.rule.name, place.region, place.account
                    ),
                );
            }
            if let Some(f) = naming.first() {
                let targets = if f.targets.is_empty() {
                    "no target".to_string()
                } else {
                    f.targets.join(", ")
                };
                return Check::fail(
                    CheckKind::Forwarding,
                    subject,
                    format!(
                        "rule {} of {at} matches it but targets {targets}, not the cell's bus {bus} (the cell of {} handles this region's events)",
                        f.rule.name, place.region
                    ),
                    format!(
                        "update the spoke stack instance of account {} in {} with this cell's account as CellAccountId (its rules target the cell's bus in their own region)",
                        place.account, place.region
                    ),
                );
            }
            Check::fail(
                CheckKind::Forwarding,
                subject,
                format!("no rule of {at} forwards it to the cell's bus {bus}: the cell never sees these events"),
                format!(
                    "deploy the spoke (deploy/spoke.yaml, the StackSet of docs/organisation.md) to account {} in {}",
                    place.account, place.region
                ),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::Status;

    fn place() -> Place {
        Place::new("222222222222", "eu-west-1").unwrap()
    }

    const BUS: &str = "arn:aws:events:eu-west-1:111111111111:event-bus/default";

    /// The spoke's four rules, as deploy/spoke.yaml makes them.
    fn spoke(state: &str, target: &str) -> Vec<Forwarder> {
        let rule = |name: &str, pattern: serde_json::Value| Forwarder {
            rule: RuleFacts {
                name: name.into(),
                state: state.into(),
                pattern: Some(pattern.to_string()),
            },
            targets: vec![target.into()],
        };
        vec![
            rule(
                "spoke-ForwardInterruptionWarnings-1",
                serde_json::json!({"source": ["aws.ec2"], "detail-type": [
                    "EC2 Spot Instance Interruption Warning",
                    "EC2 Capacity Reservation Instance Interruption Warning",
                    "EC2 Instance Rebalance Recommendation"]}),
            ),
            rule(
                "spoke-ForwardInstanceStateChanges-1",
                serde_json::json!({"source": ["aws.ec2"], "detail-type": ["EC2 Instance State-change Notification"], "detail": {"state": ["stopping"]}}),
            ),
            rule(
                "spoke-ForwardScheduledMaintenance-1",
                serde_json::json!({"source": ["aws.health"], "detail-type": ["AWS Health Event"]}),
            ),
            rule(
                "spoke-ForwardTerminateLifecycleActions-1",
                serde_json::json!({"source": ["aws.autoscaling"], "detail-type": ["EC2 Instance-terminate Lifecycle Action"]}),
            ),
        ]
    }

    fn statuses(checks: &[Check]) -> Vec<Status> {
        checks.iter().map(|c| c.status).collect()
    }

    #[test]
    fn the_spokes_rules_forward_every_class_to_the_cells_bus_in_the_same_region() {
        assert_eq!(cell_bus(&place(), "111111111111"), BUS);
        let checks = check(&place(), "r", BUS, Ok(spoke("ENABLED", BUS)));
        assert_eq!(checks.len(), FORWARDED.len());
        assert!(checks.iter().all(|c| c.status == Status::Ok), "{checks:#?}");
        assert!(
            checks[0]
                .detail
                .contains("spoke-ForwardInterruptionWarnings-1")
        );
        assert_eq!(
            checks[5].subject,
            "222222222222/eu-west-1: EC2 Instance-terminate Lifecycle Action"
        );
    }

    #[test]
    fn each_fault_names_the_member_the_rule_and_the_fix() {
        // Disabled: enable it.
        let checks = check(&place(), "r", BUS, Ok(spoke("DISABLED", BUS)));
        assert_eq!(statuses(&checks), vec![Status::Fail; 6]);
        assert!(
            checks[3]
                .detail
                .contains("spoke-ForwardInstanceStateChanges-1")
        );
        assert!(checks[3].detail.contains("DISABLED"));
        assert!(
            checks[3]
                .fix
                .contains("enable-rule --name spoke-ForwardInstanceStateChanges-1 --region eu-west-1 (in account 222222222222)"),
            "{:?}",
            checks[3]
        );
        // The cell's bus of another region (or another account): redeploy with this cell.
        let east = "arn:aws:events:us-east-1:111111111111:event-bus/default";
        let checks = check(&place(), "r", BUS, Ok(spoke("ENABLED", east)));
        assert_eq!(statuses(&checks), vec![Status::Fail; 6]);
        assert!(checks[4].detail.contains(east), "{:?}", checks[4]);
        assert!(checks[4].fix.contains("CellAccountId"), "{:?}", checks[4]);
        // One rule missing: only its classes fail, saying to deploy the spoke.
        let mut rules = spoke("ENABLED", BUS);
        rules.remove(3);
        let checks = check(&place(), "r", BUS, Ok(rules));
        assert_eq!(
            statuses(&checks),
            vec![
                Status::Ok,
                Status::Ok,
                Status::Ok,
                Status::Ok,
                Status::Ok,
                Status::Fail
            ]
        );
        assert!(
            checks[5].fix.contains("deploy the spoke"),
            "{:?}",
            checks[5]
        );
        assert!(checks[5].fix.contains("account 222222222222 in eu-west-1"));
        // An enabled rule to the bus wins over a disabled duplicate.
        let mut rules = spoke("DISABLED", BUS);
        rules.extend(spoke("ENABLED", BUS));
        assert!(
            check(&place(), "r", BUS, Ok(rules))
                .iter()
                .all(|c| c.status == Status::Ok)
        );
        // Unreadable: one line naming the permission and the role.
        let denied = PortError::new("events:ListRules", ErrorKind::AccessDenied, "AccessDenied");
        let checks = check(
            &place(),
            "arn:aws:iam::222222222222:role/ops",
            BUS,
            Err(denied),
        );
        assert_eq!(checks.len(), 1);
        assert_eq!(checks[0].status, Status::Fail);
        assert!(checks[0].fix.contains("events:ListRules"));
        assert!(checks[0].fix.contains("arn:aws:iam::222222222222:role/ops"));
    }

    #[test]
    fn only_rules_naming_a_forwarded_class_are_candidates() {
        let rules = vec![
            RuleFacts {
                name: "schedule".into(),
                state: "ENABLED".into(),
                pattern: None,
            },
            RuleFacts {
                name: "other".into(),
                state: "ENABLED".into(),
                pattern: Some(r#"{"source":["aws.s3"]}"#.into()),
            },
            RuleFacts {
                name: "broken".into(),
                state: "ENABLED".into(),
                pattern: Some("{not json".into()),
            },
            spoke("ENABLED", BUS)[2].rule.clone(),
        ];
        let c = candidates(&rules);
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].name, "spoke-ForwardScheduledMaintenance-1");
    }
}
