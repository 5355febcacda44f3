//! Adapters for the interruption handler's ports: EC2 DescribeInstances,
//! DescribeInstanceStatus and DescribeSpotInstanceRequests ([`InstanceLookup`])
//! and Auto Scaling lifecycle actions ([`LifecycleOps`]).

use async_trait::async_trait;
use aws_sdk_autoscaling::operation::complete_lifecycle_action::builders::CompleteLifecycleActionFluentBuilder as CompleteRequest;
use aws_sdk_autoscaling::operation::record_lifecycle_action_heartbeat::builders::RecordLifecycleActionHeartbeatFluentBuilder as HeartbeatRequest;

use super::port_error;
use crate::interruption::{InstanceInfo, InstanceLookup, LifecycleAction, LifecycleOps};
use crate::port::PortError;

/// EC2 instances through the SDK.
#[derive(Clone, Debug)]
pub struct Ec2Instances {
    client: aws_sdk_ec2::Client,
}

impl Ec2Instances {
    /// Wraps a client.
    pub fn new(client: aws_sdk_ec2::Client) -> Self {
        Self { client }
    }
}

/// Instance statuses per DescribeInstanceStatus page (the API's limit without instance ids).
const STATUSES_PER_PAGE: i32 = 1000;

fn chrono_of(t: &aws_sdk_ec2::primitives::DateTime) -> Option<chrono::DateTime<chrono::Utc>> {
    chrono::DateTime::from_timestamp(t.secs(), t.subsec_nanos())
}

/// What nodecycle keeps of one `DescribeInstanceStatus` entry: the impaired checks and the
/// events still to come (EC2 marks completed and cancelled ones in their description).
fn status_of(s: &aws_sdk_ec2::types::InstanceStatus) -> Option<crate::fleet::InstanceStatus> {
    use aws_sdk_ec2::types::{StatusType, SummaryStatus};
    let id = s.instance_id()?;
    let mut impaired = Vec::new();
    for (check, summary) in [
        ("instance", s.instance_status()),
        ("system", s.system_status()),
    ] {
        let Some(summary) = summary.filter(|x| x.status() == Some(&SummaryStatus::Impaired)) else {
            continue;
        };
        let since = summary
            .details()
            .iter()
            .filter(|d| d.status() == Some(&StatusType::Failed))
            .filter_map(|d| d.impaired_since().and_then(chrono_of))
            .min();
        impaired.push((check.to_string(), since));
    }
    let events: Vec<crate::fleet::ScheduledEvent> = s
        .events()
        .iter()
        .filter(|e| {
            let d = e.description().unwrap_or_default();
            !d.starts_with("[Completed]") && !d.starts_with("[Canceled]")
        })
        .filter_map(|e| {
            Some(crate::fleet::ScheduledEvent {
                code: e.code()?.as_str().to_string(),
                not_before: e.not_before().and_then(chrono_of),
            })
        })
        .collect();
    (!impaired.is_empty() || !events.is_empty()).then(|| crate::fleet::InstanceStatus {
        instance_id: id.to_string(),
        impaired,
        events,
    })
}

#[async_trait]
impl InstanceLookup for Ec2Instances {
    async fn troubled(&self) -> Result<Vec<crate::fleet::InstanceStatus>, PortError> {
        let statuses: Vec<aws_sdk_ec2::types::InstanceStatus> = self
            .client
            .describe_instance_status()
            .max_results(STATUSES_PER_PAGE)
            .into_paginator()
            .items()
            .send()
            .try_collect()
            .await
            .map_err(|e| port_error("ec2:DescribeInstanceStatus", e))?;
        Ok(statuses.iter().filter_map(status_of).collect())
    }

    async fn spot_request_status(&self, instance_id: &str) -> Result<Option<String>, PortError> {
        use aws_sdk_ec2::types::Filter;
        let out = self
            .client
            .describe_spot_instance_requests()
            .filters(
                Filter::builder()
                    .name("instance-id")
                    .values(instance_id)
                    .build(),
            )
            .send()
            .await
            .map_err(|e| port_error("ec2:DescribeSpotInstanceRequests", e))?;
        // One request launched the instance; a persistent request that relaunched keeps its id
        // but names the new instance, so the filter finds at most the one that names this one.
        Ok(out
            .spot_instance_requests()
            .iter()
            .find(|r| r.instance_id() == Some(instance_id))
            .map(|r| {
                r.status()
                    .and_then(|s| s.code())
                    .unwrap_or_default()
                    .to_string()
            }))
    }

    async fn instance(&self, instance_id: &str) -> Result<Option<InstanceInfo>, PortError> {
        let out = match self
            .client
            .describe_instances()
            .instance_ids(instance_id)
            .send()
            .await
        {
            Ok(out) => out,
            Err(e) => {
                let e = port_error("ec2:DescribeInstances", e);
                return if e.is_not_found() { Ok(None) } else { Err(e) };
            }
        };
        let found = out
            .reservations()
            .iter()
            .flat_map(|r| r.instances())
            .find(|i| i.instance_id() == Some(instance_id));
        Ok(found.map(|i| InstanceInfo {
            instance_id: instance_id.to_string(),
            state: i
                .state()
                .and_then(|s| s.name())
                .map(|n| n.as_str().to_string())
                .unwrap_or_default(),
            availability_zone: i
                .placement()
                .and_then(|p| p.availability_zone())
                .unwrap_or_default()
                .to_string(),
            tags: i
                .tags()
                .iter()
                .filter_map(|t| Some((t.key()?.to_string(), t.value()?.to_string())))
                .collect(),
        }))
    }
}

/// Auto Scaling lifecycle actions through the SDK.
#[derive(Clone, Debug)]
pub struct LifecycleActions {
    client: aws_sdk_autoscaling::Client,
}

impl LifecycleActions {
    /// Wraps a client.
    pub fn new(client: aws_sdk_autoscaling::Client) -> Self {
        Self { client }
    }
}

/// Whether the lifecycle action was still there to answer: Auto Scaling answers
/// `ValidationError: No active Lifecycle Action found with instance ID ...` (or `... with token
/// ...`) once the action was completed or timed out, which is no error for us.
fn answered<T>(sent: Result<T, PortError>) -> Result<bool, PortError> {
    match sent {
        Ok(_) => Ok(true),
        Err(e) if e.message.contains("No active Lifecycle Action") => Ok(false),
        Err(e) => Err(e),
    }
}

/// A request about one lifecycle action: sets the group, hook, instance and token that name it.
/// The SDK's two requests that answer an action share these setters but no trait.
trait ForAction {
    fn for_action(self, a: &LifecycleAction) -> Self;
}

macro_rules! impl_for_action {
    ($($builder:ty),+) => {$(
        impl ForAction for $builder {
            fn for_action(self, a: &LifecycleAction) -> Self {
                self.auto_scaling_group_name(&a.group)
                    .lifecycle_hook_name(&a.hook)
                    .instance_id(&a.instance_id)
                    .set_lifecycle_action_token(a.token.clone())
            }
        }
    )+};
}

impl_for_action!(HeartbeatRequest, CompleteRequest);

#[async_trait]
impl LifecycleOps for LifecycleActions {
    async fn heartbeat(&self, a: &LifecycleAction) -> Result<bool, PortError> {
        let sent = self
            .client
            .record_lifecycle_action_heartbeat()
            .for_action(a)
            .send()
            .await;
        answered(sent.map_err(|e| port_error("autoscaling:RecordLifecycleActionHeartbeat", e)))
    }

    async fn complete_continue(&self, a: &LifecycleAction) -> Result<bool, PortError> {
        let sent = self
            .client
            .complete_lifecycle_action()
            .lifecycle_action_result("CONTINUE")
            .for_action(a)
            .send()
            .await;
        answered(sent.map_err(|e| port_error("autoscaling:CompleteLifecycleAction", e)))
    }

    async fn complete_abandon(&self, a: &LifecycleAction) -> Result<bool, PortError> {
        let sent = self
            .client
            .complete_lifecycle_action()
            .lifecycle_action_result("ABANDON")
            .for_action(a)
            .send()
            .await;
        answered(sent.map_err(|e| port_error("autoscaling:CompleteLifecycleAction", e)))
    }
}
