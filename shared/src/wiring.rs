//! Wiring, the top layer: each function's configuration, read from its environment once in its
//! `main` (and by `nodecycle run`) and checked there, every bad value an error naming its
//! variable; then the [`Ports`] over the AWS SDK and Kubernetes adapters, and each function's
//! handler over them. Nothing else in the crate uses this module: handlers take their ports
//! and settings as values.
//!
//! | variable | functions | value (default) |
//! |---|---|---|
//! | `NODECYCLE_TABLE` | all | the DynamoDB table name (required) |
//! | `NODECYCLE_POLICY_PREFIX` | all | SSM path of the policies (`/nodecycle/pools/`) |
//! | `NODECYCLE_AUTOSCALING_GROUP_UPDATES` | all | `Enabled` or `Disabled` (`Disabled`) |
//! | `NODECYCLE_SERVED_ACCOUNTS` / `NODECYCLE_SERVED_REGIONS` | all | more accounts / regions served, comma-separated (none) |
//! | `NODECYCLE_REPLACEMENT_TIMEOUT`, `NODECYCLE_DRAIN_STEP`, `NODECYCLE_LEASE`, `NODECYCLE_NODEGROUP_WAVE` | rotator, ops | durations (`15m`, `20s`, `5m`, `10m`) |
//! | `NODECYCLE_POOL_CONCURRENCY` | rotator, ops | 1 to 256 (16) |
//! | `NODECYCLE_STATUS_WRITES` | rotator | rollout statuses written per cluster and pass, 1 to 1,000 (50) |
//! | `NODECYCLE_DEPRECATION_WARNING` | ami-watcher | a duration (`720h`): AMIs deprecating within it are warned about |
//! | `NODECYCLE_WORK_QUEUE_URL`, `NODECYCLE_WORK_ITEM_MAX_AGE` | rotator | the fan-out's SQS queue (none), a duration (`5m`) |
//! | `NODECYCLE_FORCE_AFTER`, `NODECYCLE_HEARTBEAT`, `NODECYCLE_DRAIN_POLL`, `NODECYCLE_MAX_EVENT_AGE` | interruption-handler | durations (`90s`, `60s`, `2s`, `4m`) |
//! | `NODECYCLE_LIFECYCLE_HOOK` | interruption-handler | the lifecycle hook answered (`nodecycle-drain`) |
//! | `NODECYCLE_HOOK_HEARTBEAT_TIMEOUT` | interruption-handler | the hook's heartbeat timeout, a duration (`300s`): a hand-over still draining is abandoned before the hook's global timeout ([`crate::retain::hand_over_limit`]) |
//! | `NODECYCLE_MEMBER_ROLE`, `NODECYCLE_MEMBER_EXTERNAL_ID` | all | the members' spoke role ARN pattern (`arn:{partition}:iam::{account}:role/nodecycle-spoke`), the external id (none) |

use std::sync::Arc;
use std::time::Duration;

use crate::aws::{
    Clients,
    autoscaling::{AutoScaling, GROUP_UPDATES_ENV},
    dynamodb::Table,
    ec2::Ec2,
    eks::Eks,
    eks_nodegroups::ManagedNodeGroups,
    instances::{Ec2Instances, LifecycleActions},
    nodegroup::NodeGroups,
    ssm::{Ssm, SsmPolicies},
};
use crate::event::served::{ACCOUNTS_ENV, REGIONS_ENV, Served};
use crate::handlers::HandlerError;
use crate::policy::source::{DEFAULT_PREFIX, PREFIX_ENV};
use crate::ports::Ports;
use crate::state::TABLE_ENV;

/// What the running process gives the adapters: the AWS SDK configuration and where the
/// handlers' metrics go.
#[derive(Clone)]
pub struct Runtime {
    /// Region, credentials, endpoint and retries ([`crate::aws::load_config`]).
    pub sdk: aws_config::SdkConfig,
    /// The handlers' metrics (the [`Ports`] field).
    pub metrics: Arc<dyn crate::metrics::MetricSink>,
}

impl Runtime {
    /// A Lambda function's: metrics as CloudWatch embedded metric format lines on stdout (the
    /// function's log).
    pub async fn lambda() -> Self {
        Self::with(Arc::new(crate::metrics::EmfStdout)).await
    }

    /// The CLI's (`nodecycle run`, `plan`, `simulate`, `ops`): no metrics, its stdout is its
    /// answer.
    pub async fn local() -> Self {
        Self::with(Arc::new(crate::metrics::NoMetrics)).await
    }

    async fn with(metrics: Arc<dyn crate::metrics::MetricSink>) -> Self {
        Runtime {
            sdk: crate::aws::load_config().await,
            metrics,
        }
    }
}

/// Serves `function` as a Lambda function until the runtime stops it: each event with its
/// [`Invocation`](crate::handlers::Invocation) from the invocation's context (the time it is
/// taken, the deadline, the request id) and the caller (see [`serve_ops`] for the ops function;
/// here the caller a client context claims, `--client-context` with
/// `{"custom": {"caller": "..."}}`, or a Cognito identity, marked `unverified:`).
#[cfg(feature = "lambda")]
pub async fn serve(function: impl crate::handlers::Function) -> Result<(), lambda_runtime::Error> {
    serve_with(function, None).await
}

/// [`serve`] for the ops function, whose audit names who asked: a request carrying a caller
/// proof ([`crate::aws::caller`], what the `nodecycle` CLI sends) is served with the IAM
/// identity STS reports for it as the caller, and refused (`Unauthenticated`, nothing done)
/// when the proof does not verify; the proof is taken out of the request first, so no record
/// or log holds it. A request without one is served with the claimed caller marked
/// `unverified:` (Lambda does not tell a function which principal invoked it; CloudTrail
/// data events do, by request id).
#[cfg(feature = "lambda")]
pub async fn serve_ops(
    function: impl crate::handlers::Function,
    callers: crate::aws::caller::StsCallers,
) -> Result<(), lambda_runtime::Error> {
    serve_with(function, Some(callers)).await
}

#[cfg(feature = "lambda")]
async fn serve_with(
    function: impl crate::handlers::Function,
    callers: Option<crate::aws::caller::StsCallers>,
) -> Result<(), lambda_runtime::Error> {
    use crate::aws::caller::PROOF_FIELD;
    let function = &function;
    let callers = &callers;
    lambda_runtime::run(lambda_runtime::service_fn(
        move |event: lambda_runtime::LambdaEvent<serde_json::Value>| async move {
            let ctx = &event.context;
            let mut payload = event.payload;
            let proof = payload
                .as_object_mut()
                .and_then(|o| o.remove(PROOF_FIELD));
            let caller = match (proof, callers) {
                (Some(proof), Some(callers)) => {
                    let verified = match proof.as_str() {
                        Some(p) => callers.verify(p, std::time::SystemTime::now()).await,
                        None => Err(format!("{PROOF_FIELD} is not a string")),
                    };
                    match verified {
                        Ok(c) => Some(c.arn),
                        Err(why) => {
                            tracing::warn!(request_id = %ctx.request_id, decision = "refused", reason = %why, "caller proof not verified; nothing done");
                            return Err(crate::handlers::HandlerError {
                                error_type: "Unauthenticated".into(),
                                message: format!(
                                    "the caller could not be verified, so nothing was done: {why}"
                                ),
                            });
                        }
                    }
                }
                _ => ctx
                    .client_context
                    .as_ref()
                    .and_then(|c| c.custom.get("caller").cloned())
                    .or_else(|| {
                        ctx.identity
                            .as_ref()
                            .map(|i| format!("cognito:{}", i.identity_id))
                    })
                    .map(|claim| format!("unverified:{claim}")),
            };
            let inv = crate::handlers::Invocation {
                now: chrono::Utc::now(),
                deadline: crate::handlers::deadline_from_epoch_ms(ctx.deadline),
                request_id: Some(&ctx.request_id),
                caller: caller.as_deref(),
            };
            function.invoke(&payload, inv).await
        },
    ))
    .await
}

/// Installs the JSON log subscriber (once per process) with the level the process environment
/// asks for (`NODECYCLE_LOG`, `AWS_LAMBDA_LOG_LEVEL`: [`crate::logging::filter_from`]).
pub fn init_logging() {
    crate::logging::init(&crate::logging::filter_from(process_env));
}

/// Where variables are read from: the process environment, or a map in tests.
pub type Lookup<'a> = &'a dyn Fn(&str) -> Option<String>;

/// The process environment as a [`Lookup`] (an unset or non-UTF-8 variable is `None`).
pub fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

fn invalid(var: &str, message: impl std::fmt::Display) -> HandlerError {
    HandlerError {
        error_type: "Configuration".into(),
        message: format!("{var}: {message}"),
    }
}

/// What every function reads: the state table, the policies, whether group updates are
/// granted, and the accounts and regions served beside the deployment's own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Common {
    /// `NODECYCLE_TABLE`.
    pub table: String,
    /// `NODECYCLE_POLICY_PREFIX`.
    pub policy_prefix: String,
    /// `NODECYCLE_AUTOSCALING_GROUP_UPDATES` is `Enabled`.
    pub group_updates: bool,
    /// `NODECYCLE_SERVED_ACCOUNTS` (comma-separated 12-digit ids, checked).
    pub served_accounts: String,
    /// `NODECYCLE_SERVED_REGIONS` (comma-separated region names, checked).
    pub served_regions: String,
    /// `NODECYCLE_MEMBER_ROLE` and `NODECYCLE_MEMBER_EXTERNAL_ID`: how the members' spoke roles
    /// are assumed.
    pub members: crate::members::MemberConfig,
    /// `NODECYCLE_KUBE_ENDPOINT`, `NODECYCLE_KUBE_CA_FILE`, `NODECYCLE_KUBE_INSECURE`: how the
    /// clusters' API servers are reached instead of DescribeCluster's answer (local use).
    pub kube: crate::kube::KubeOverrides,
}

/// The `NODECYCLE_KUBE_*` overrides through `env` (also for the CLI commands that reach a
/// cluster without a function's configuration: `nodecycle drain`, `nodecycle doctor`). The
/// error names the variable.
pub fn kube_overrides(env: Lookup<'_>) -> Result<crate::kube::KubeOverrides, HandlerError> {
    crate::kube::KubeOverrides::from_lookup(env).map_err(|e| HandlerError {
        error_type: "Configuration".into(),
        message: match e {
            crate::kube::KubeError::Config(m) => m,
            other => other.to_string(),
        },
    })
}

impl Common {
    /// Reads and checks the variables through `env`.
    pub fn from_lookup(env: Lookup<'_>) -> Result<Common, HandlerError> {
        let table = env(TABLE_ENV)
            .ok_or_else(|| invalid(TABLE_ENV, "is not set; expected the DynamoDB table name"))?;
        let table_like = (3..=255).contains(&table.len())
            && table
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
        if !table_like {
            return Err(invalid(
                TABLE_ENV,
                format!(
                    "{table:?} is not a DynamoDB table name; expected 3 to 255 letters, digits, `_`, `-` or `.`"
                ),
            ));
        }
        let policy_prefix = env(PREFIX_ENV).unwrap_or_else(|| DEFAULT_PREFIX.to_string());
        let prefix_like = policy_prefix.starts_with('/')
            && policy_prefix.len() <= 1011
            && policy_prefix
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b'/'));
        if !prefix_like {
            return Err(invalid(
                PREFIX_ENV,
                format!(
                    "{policy_prefix:?} is not an SSM parameter path; expected one like {DEFAULT_PREFIX} (a leading `/`, letters, digits, `_`, `-`, `.`, `/`)"
                ),
            ));
        }
        let group_updates = match env(GROUP_UPDATES_ENV).as_deref().map(str::trim) {
            None | Some("" | "Disabled") => false,
            Some("Enabled") => true,
            Some(other) => {
                return Err(invalid(
                    GROUP_UPDATES_ENV,
                    format!(
                        "{other:?} is neither Enabled nor Disabled (the stack parameter AutoScalingGroupUpdates)"
                    ),
                ));
            }
        };
        let served_accounts = env(ACCOUNTS_ENV).unwrap_or_default();
        let served_regions = env(REGIONS_ENV).unwrap_or_default();
        // The messages name the variable.
        Served {
            accounts: Vec::new(),
            regions: Vec::new(),
        }
        .with_extra(&served_accounts, &served_regions)
        .map_err(|message| HandlerError {
            error_type: "Configuration".into(),
            message,
        })?;
        let members = crate::members::MemberConfig::parse(
            env(crate::members::ROLE_ENV).as_deref(),
            env(crate::members::EXTERNAL_ID_ENV).as_deref(),
        )
        .map_err(|message| HandlerError {
            error_type: "Configuration".into(),
            message,
        })?;
        Ok(Common {
            table,
            policy_prefix,
            group_updates,
            served_accounts,
            served_regions,
            members,
            kube: kube_overrides(env)?,
        })
    }

    /// [`Common::from_lookup`] for `nodecycle doctor`, which reads no state items: the table
    /// is not asked for (and left empty).
    pub fn without_table(env: Lookup<'_>) -> Result<Common, HandlerError> {
        let env = |name: &str| {
            if name == TABLE_ENV {
                Some("not-read".to_string())
            } else {
                env(name)
            }
        };
        let mut common = Common::from_lookup(&env)?;
        common.table = String::new();
        Ok(common)
    }

    /// The AWS and Kubernetes adapters over `sdk` for this configuration, pools of other
    /// accounts and regions served through their members' spoke roles.
    pub fn ports(&self, sdk: &aws_config::SdkConfig) -> Ports {
        let mut ports = self.adapters(sdk);
        ports.members = Arc::new(crate::aws::members::AwsMembers::new(
            sdk,
            ports.clone(),
            Ok(self.members.clone()),
            self.adapters_fn(),
        ));
        ports
    }

    /// [`Common::ports`] over the runtime's SDK configuration, with its metrics.
    pub fn ports_in(&self, runtime: &Runtime) -> Ports {
        let mut ports = self.ports(&runtime.sdk);
        ports.metrics = runtime.metrics.clone();
        ports
    }

    /// [`Common::adapters`] as a value (what [`crate::aws::members::AwsMembers`] builds each
    /// member's adapters with).
    pub fn adapters_fn(&self) -> crate::aws::members::Adapters {
        let common = self.clone();
        Arc::new(move |sdk: &aws_config::SdkConfig| common.adapters(sdk))
    }

    /// The adapters over `sdk` alone (no members: [`crate::members::OwnOnly`]).
    pub fn adapters(&self, sdk: &aws_config::SdkConfig) -> Ports {
        let c = Clients::new(sdk);
        let ssm = Ssm::new(c.ssm.clone());
        // The rotator's reads of its groups serve its architecture checks too.
        let seen = crate::aws::autoscaling::SeenGroups::default();
        Ports {
            policies: Arc::new(SsmPolicies::new(ssm.clone(), &self.policy_prefix)),
            parameters: Arc::new(ssm.clone()),
            status: Arc::new(ssm),
            images: Arc::new(Ec2::new(c.ec2.clone())),
            clusters: Arc::new(Eks::new(c.eks.clone())),
            node_groups: Arc::new(
                NodeGroups::new(c.autoscaling.clone(), c.ec2.clone(), c.eks.clone())
                    .with_seen(seen.clone()),
            ),
            groups: Arc::new(
                AutoScaling::new(c.autoscaling.clone(), c.ec2.clone())
                    .with_seen(seen)
                    .with_group_updates(self.group_updates),
            ),
            managed: Arc::new(ManagedNodeGroups::new(c.eks.clone(), c.ec2.clone())),
            store: Arc::new(Table::new(c.dynamodb.clone(), &self.table)),
            instances: Arc::new(Ec2Instances::new(c.ec2.clone())),
            lifecycle: Arc::new(LifecycleActions::new(c.autoscaling.clone())),
            deployment: Arc::new(
                crate::aws::identity::OwnAccount::new(sdk)
                    .with_extra(&self.served_accounts, &self.served_regions),
            ),
            alarms: Arc::new(crate::aws::cloudwatch::CloudWatch::new(
                c.cloudwatch.clone(),
            )),
            events: Arc::new(crate::aws::events_out::EventBridge::new(c.events.clone())),
            metrics: Arc::new(crate::metrics::NoMetrics),
            members: Arc::new(crate::members::OwnOnly),
            kube: Arc::new(
                crate::kube::EksConnector::new(sdk.clone()).with_overrides(self.kube.clone()),
            ),
        }
    }
}

/// Overrides each duration whose variable is set (`15m`, `20s`, ...); a malformed value is an
/// error naming the variable.
fn durations(env: Lookup<'_>, fields: &mut [(&str, &mut Duration)]) -> Result<(), HandlerError> {
    for (var, field) in fields.iter_mut() {
        if let Some(text) = env(var) {
            **field = crate::duration::parse(&text).map_err(|e| invalid(var, e))?;
        }
    }
    Ok(())
}

/// The ami-watcher's configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatcherConfig {
    /// Table, policies, ...
    pub common: Common,
    /// `NODECYCLE_DEPRECATION_WARNING` (a duration, default `720h`), in whole days: AMIs
    /// deprecating within it are warned about.
    pub deprecation_horizon_days: i64,
}

impl WatcherConfig {
    /// From the process environment.
    pub fn from_env() -> Result<Self, HandlerError> {
        Self::from_lookup(&process_env)
    }

    /// Through `env`.
    pub fn from_lookup(env: Lookup<'_>) -> Result<Self, HandlerError> {
        let mut horizon = Duration::from_secs(
            u64::try_from(crate::deprecation::DEFAULT_HORIZON_DAYS).unwrap_or(30) * 86_400,
        );
        durations(env, &mut [("NODECYCLE_DEPRECATION_WARNING", &mut horizon)])?;
        Ok(WatcherConfig {
            common: Common::from_lookup(env)?,
            deprecation_horizon_days: i64::try_from(horizon.as_secs() / 86_400).unwrap_or(i64::MAX),
        })
    }

    /// The watcher over the adapters of `runtime`.
    pub fn watcher(&self, runtime: &Runtime) -> crate::handlers::ami_watcher::AmiWatcher {
        crate::handlers::ami_watcher::AmiWatcher {
            deprecation_horizon_days: self.deprecation_horizon_days,
            ..crate::handlers::ami_watcher::AmiWatcher::new(&self.common.ports_in(runtime))
        }
    }
}

/// The rotator's configuration (also the ops function's: its actions run the rotator's code).
#[derive(Debug, Clone)]
pub struct RotatorConfig {
    /// Table, policies, ...
    pub common: Common,
    /// Tunables.
    pub settings: crate::handlers::rotator::Settings,
    /// `NODECYCLE_WORK_QUEUE_URL`: the fan-out's work queue (`None` when unset or empty: the
    /// schedule runs the pass itself).
    pub work_queue: Option<String>,
    /// `NODECYCLE_WORK_ITEM_MAX_AGE`: how old a work item may be and still be served.
    pub work_item_max_age: Duration,
}

impl RotatorConfig {
    /// From the process environment.
    pub fn from_env() -> Result<Self, HandlerError> {
        Self::from_lookup(&process_env)
    }

    /// Through `env`.
    pub fn from_lookup(env: Lookup<'_>) -> Result<Self, HandlerError> {
        use crate::handlers::dispatch::{DEFAULT_MAX_AGE, MAX_AGE_ENV};
        let mut work_item_max_age = DEFAULT_MAX_AGE;
        durations(env, &mut [(MAX_AGE_ENV, &mut work_item_max_age)])?;
        Ok(RotatorConfig {
            common: Common::from_lookup(env)?,
            settings: Self::settings(env)?,
            work_queue: env(crate::aws::queue::QUEUE_URL_ENV)
                .map(|url| url.trim().to_string())
                .filter(|url| !url.is_empty()),
            work_item_max_age,
        })
    }

    /// The rotator's tunables alone (`nodecycle validate`, which has no table).
    pub fn settings(env: Lookup<'_>) -> Result<crate::handlers::rotator::Settings, HandlerError> {
        let mut s = crate::handlers::rotator::Settings::default();
        durations(
            env,
            &mut [
                ("NODECYCLE_REPLACEMENT_TIMEOUT", &mut s.replacement_timeout),
                ("NODECYCLE_DRAIN_STEP", &mut s.drain_step),
                ("NODECYCLE_LEASE", &mut s.lease),
                ("NODECYCLE_NODEGROUP_WAVE", &mut s.node_group_wave),
            ],
        )?;
        if let Some(text) = env("NODECYCLE_STATUS_WRITES") {
            use crate::handlers::rotator::MAX_STATUS_WRITES;
            s.status_writes = match text.trim().parse::<usize>() {
                Ok(n) if (1..=MAX_STATUS_WRITES).contains(&n) => n,
                _ => {
                    return Err(invalid(
                        "NODECYCLE_STATUS_WRITES",
                        format!(
                            "{text:?} is not a whole number from 1 to {MAX_STATUS_WRITES} (rollout statuses written per cluster and pass)"
                        ),
                    ));
                }
            };
        }
        if let Some(text) = env("NODECYCLE_POOL_CONCURRENCY") {
            use crate::handlers::rotator::MAX_POOL_CONCURRENCY;
            s.pool_concurrency = match text.trim().parse::<usize>() {
                Ok(n) if (1..=MAX_POOL_CONCURRENCY).contains(&n) => n,
                _ => {
                    return Err(invalid(
                        "NODECYCLE_POOL_CONCURRENCY",
                        format!(
                            "{text:?} is not a whole number from 1 to {MAX_POOL_CONCURRENCY} (pools worked on at once)"
                        ),
                    ));
                }
            };
        }
        Ok(s)
    }

    /// The rotator over the adapters of `runtime`.
    pub fn rotator(&self, runtime: &Runtime) -> crate::handlers::rotator::RotatorHandler {
        crate::handlers::rotator::RotatorHandler::new(
            &self.common.ports_in(runtime),
            self.settings.clone(),
        )
    }

    /// The rotator function (its pass and the fan-out's dispatcher and worker) over the
    /// adapters of `runtime`.
    pub fn function(&self, runtime: &Runtime) -> crate::handlers::dispatch::RotatorFunction {
        let ports = self.common.ports_in(runtime);
        let fan_out = crate::handlers::dispatch::FanOut {
            policies: ports.policies.clone(),
            deployment: ports.deployment.clone(),
            queue: self.work_queue.as_deref().map(|url| {
                Arc::new(crate::aws::queue::SqsQueue::new(
                    aws_sdk_sqs::Client::new(&runtime.sdk),
                    url,
                )) as Arc<dyn crate::dispatch::WorkQueue>
            }),
            max_age: self.work_item_max_age,
        };
        crate::handlers::dispatch::RotatorFunction {
            rotator: crate::handlers::rotator::RotatorHandler::new(&ports, self.settings.clone()),
            fan_out,
        }
    }

    /// The ops handler over the adapters of `runtime`.
    pub fn ops(&self, runtime: &Runtime) -> crate::handlers::ops::OpsHandler {
        crate::handlers::ops::OpsHandler::new(&self.common.ports_in(runtime), self.settings.clone())
    }

    /// The ops function's caller verification ([`serve_ops`]): proofs for `function` (its
    /// name, `AWS_LAMBDA_FUNCTION_NAME`) replayed to the STS endpoint of `runtime`.
    #[cfg(feature = "lambda")]
    pub fn callers(
        runtime: &Runtime,
        function: &str,
    ) -> Result<crate::aws::caller::StsCallers, HandlerError> {
        crate::aws::caller::StsCallers::new(&runtime.sdk, function).map_err(|m| HandlerError {
            error_type: "Configuration".into(),
            message: m,
        })
    }
}

/// The ops function's configuration: the rotator's.
pub type OpsConfig = RotatorConfig;

/// The interruption handler's configuration.
#[derive(Debug, Clone)]
pub struct InterruptionConfig {
    /// Table, policies, ...
    pub common: Common,
    /// Tunables.
    pub settings: crate::handlers::interruption::Settings,
}

impl InterruptionConfig {
    /// From the process environment.
    pub fn from_env() -> Result<Self, HandlerError> {
        Self::from_lookup(&process_env)
    }

    /// Through `env`.
    pub fn from_lookup(env: Lookup<'_>) -> Result<Self, HandlerError> {
        let mut s = crate::handlers::interruption::Settings::default();
        let mut hook_heartbeat_timeout = Duration::from_secs(300);
        durations(
            env,
            &mut [
                ("NODECYCLE_FORCE_AFTER", &mut s.force_after),
                ("NODECYCLE_HEARTBEAT", &mut s.heartbeat_every),
                ("NODECYCLE_DRAIN_POLL", &mut s.poll),
                ("NODECYCLE_MAX_EVENT_AGE", &mut s.max_event_age),
                (
                    "NODECYCLE_HOOK_HEARTBEAT_TIMEOUT",
                    &mut hook_heartbeat_timeout,
                ),
            ],
        )?;
        s.hand_over_limit = crate::retain::hand_over_limit(hook_heartbeat_timeout);
        if let Some(hook) = env("NODECYCLE_LIFECYCLE_HOOK")
            && !hook.is_empty()
        {
            // Auto Scaling's LifecycleHookName: 1 to 255 of [A-Za-z0-9-_/].
            let hook_like = hook.len() <= 255
                && hook
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'/'));
            if !hook_like {
                return Err(invalid(
                    "NODECYCLE_LIFECYCLE_HOOK",
                    format!(
                        "{hook:?} is not a lifecycle hook name; expected up to 255 letters, digits, `-`, `_` or `/`"
                    ),
                ));
            }
            s.lifecycle_hook = hook;
        }
        Ok(InterruptionConfig {
            common: Common::from_lookup(env)?,
            settings: s,
        })
    }

    /// The interruption handler over the adapters of `runtime`.
    pub fn handler(&self, runtime: &Runtime) -> crate::handlers::interruption::InterruptionHandler {
        crate::handlers::interruption::InterruptionHandler::new(
            &self.common.ports_in(runtime),
            self.settings.clone(),
        )
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn lookup(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: BTreeMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |name: &str| map.get(name).cloned()
    }

    #[test]
    fn defaults_need_only_the_table() {
        let env = lookup(&[(TABLE_ENV, "nodecycle-state")]);
        let c = Common::from_lookup(&env).unwrap();
        assert_eq!(c.table, "nodecycle-state");
        assert_eq!(c.policy_prefix, DEFAULT_PREFIX);
        assert!(!c.group_updates);
        let r = RotatorConfig::from_lookup(&env).unwrap();
        assert_eq!(r.settings.lease, Duration::from_secs(300));
        assert_eq!(r.settings.pool_concurrency, 16);
        assert_eq!(r.settings.status_writes, 50);
        assert_eq!(
            WatcherConfig::from_lookup(&env)
                .unwrap()
                .deprecation_horizon_days,
            30
        );
        let i = InterruptionConfig::from_lookup(&env).unwrap();
        assert_eq!(i.settings.lifecycle_hook, "nodecycle-drain");
    }

    #[test]
    fn every_value_is_read() {
        let env = lookup(&[
            (TABLE_ENV, "t_1"),
            (PREFIX_ENV, "/team/pools/"),
            (GROUP_UPDATES_ENV, "Enabled"),
            (ACCOUNTS_ENV, "111122223333"),
            (REGIONS_ENV, "eu-west-1"),
            ("NODECYCLE_REPLACEMENT_TIMEOUT", "20m"),
            ("NODECYCLE_DRAIN_STEP", "30s"),
            ("NODECYCLE_LEASE", "4m"),
            ("NODECYCLE_NODEGROUP_WAVE", "12m"),
            ("NODECYCLE_POOL_CONCURRENCY", "3"),
            ("NODECYCLE_STATUS_WRITES", "7"),
            ("NODECYCLE_DEPRECATION_WARNING", "1440h"),
            ("NODECYCLE_FORCE_AFTER", "60s"),
            ("NODECYCLE_HEARTBEAT", "30s"),
            ("NODECYCLE_DRAIN_POLL", "1s"),
            ("NODECYCLE_MAX_EVENT_AGE", "5m"),
            ("NODECYCLE_LIFECYCLE_HOOK", "team-drain"),
            ("NODECYCLE_HOOK_HEARTBEAT_TIMEOUT", "30s"),
            ("NODECYCLE_KUBE_ENDPOINT", "https://127.0.0.1:6443"),
            ("NODECYCLE_KUBE_CA_FILE", "/tmp/ca.pem"),
            ("NODECYCLE_KUBE_INSECURE", "true"),
        ]);
        let r = RotatorConfig::from_lookup(&env).unwrap();
        assert_eq!(
            r.common.kube,
            crate::kube::KubeOverrides {
                endpoint: Some("https://127.0.0.1:6443".into()),
                ca_file: Some("/tmp/ca.pem".into()),
                insecure: true,
            }
        );
        assert_eq!(r.common.table, "t_1");
        assert_eq!(r.common.policy_prefix, "/team/pools/");
        assert!(r.common.group_updates);
        assert_eq!(r.common.served_accounts, "111122223333");
        assert_eq!(r.settings.replacement_timeout, Duration::from_secs(1200));
        assert_eq!(r.settings.drain_step, Duration::from_secs(30));
        assert_eq!(r.settings.lease, Duration::from_secs(240));
        assert_eq!(r.settings.node_group_wave, Duration::from_secs(720));
        assert_eq!(r.settings.pool_concurrency, 3);
        assert_eq!(r.settings.status_writes, 7);
        assert_eq!(
            WatcherConfig::from_lookup(&env)
                .unwrap()
                .deprecation_horizon_days,
            60
        );
        let i = InterruptionConfig::from_lookup(&env).unwrap();
        assert_eq!(i.settings.force_after, Duration::from_secs(60));
        assert_eq!(i.settings.heartbeat_every, Duration::from_secs(30));
        assert_eq!(i.settings.poll, Duration::from_secs(1));
        assert_eq!(i.settings.max_event_age, Duration::from_secs(300));
        assert_eq!(i.settings.lifecycle_hook, "team-drain");
        // 100 x 30 s, less 5 minutes.
        assert_eq!(i.settings.hand_over_limit, Duration::from_secs(2_700));
    }

    #[test]
    fn a_bad_value_is_refused_naming_its_variable() {
        let cases: &[(&str, &str)] = &[
            (PREFIX_ENV, "nodecycle/pools"),
            (GROUP_UPDATES_ENV, "yes"),
            (ACCOUNTS_ENV, "12345"),
            (REGIONS_ENV, "Europe"),
            ("NODECYCLE_REPLACEMENT_TIMEOUT", "soon"),
            ("NODECYCLE_DRAIN_STEP", "-1s"),
            ("NODECYCLE_LEASE", "5 parsecs"),
            ("NODECYCLE_NODEGROUP_WAVE", ""),
            ("NODECYCLE_POOL_CONCURRENCY", "0"),
            ("NODECYCLE_POOL_CONCURRENCY", "257"),
            ("NODECYCLE_STATUS_WRITES", "0"),
            ("NODECYCLE_STATUS_WRITES", "1001"),
            ("NODECYCLE_DEPRECATION_WARNING", "a month"),
            ("NODECYCLE_FORCE_AFTER", "x"),
            ("NODECYCLE_HEARTBEAT", "1y"),
            ("NODECYCLE_DRAIN_POLL", "fast"),
            ("NODECYCLE_MAX_EVENT_AGE", "old"),
            ("NODECYCLE_LIFECYCLE_HOOK", "a hook"),
            ("NODECYCLE_HOOK_HEARTBEAT_TIMEOUT", "long"),
            (crate::kube::client::ENV_INSECURE, "maybe"),
            (TABLE_ENV, "t"),
        ];
        for (var, value) in cases {
            let mut vars = vec![(TABLE_ENV, "nodecycle-state")];
            vars.retain(|(k, _)| k != var);
            vars.push((var, value));
            let env = lookup(&vars);
            let errors = [
                RotatorConfig::from_lookup(&env).err(),
                InterruptionConfig::from_lookup(&env).err(),
                WatcherConfig::from_lookup(&env).err(),
            ];
            let e = errors
                .into_iter()
                .flatten()
                .next()
                .unwrap_or_else(|| panic!("{var}={value:?} was accepted"));
            assert_eq!(e.error_type, "Configuration");
            assert!(e.message.starts_with(&format!("{var}: ")), "{var}: {e}");
        }
        let e = WatcherConfig::from_lookup(&lookup(&[])).unwrap_err();
        assert!(e.message.starts_with("NODECYCLE_TABLE: is not set"), "{e}");
    }
}
