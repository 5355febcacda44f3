//! The ami-watcher: resolves pools' amiSelectorTerms and records each pool's desired AMI.
//!
//! A schedule (or manual invoke) resolves every pool; a change to a policy parameter resolves
//! that pool; a change to a parameter referenced by an `ssmParameter` term resolves the pools
//! using it; anything else is a no-op. A pool that fails keeps its desired AMI and records the
//! error; the other pools proceed. What the desired AMI becomes, with promotion, quarantine and
//! minAge, is decided by the pure [`choose::choose`]; the watcher reads the facts it asks for,
//! writes the quarantine it decides, and records the outcome.

pub mod choose;
mod findings;
mod withdrawals;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;

use super::{Function, HandlerError, Invocation};
use crate::ami::resolve::{GroupImage, Resolver};
use crate::event::{WatcherTrigger, watcher_trigger};
use crate::policy::source::PolicyDocument;
use crate::policy::{self, Policy};
use crate::port::PortError;
use crate::state::{self, Observation, PoolRecord};
use choose::{Choice, Facts, Need, Verdict};

/// The handler and its ports.
#[derive(Clone)]
pub struct AmiWatcher {
    /// Policies, the state table, the bus and the members.
    pub cell: super::CellPorts,
    /// The ports of the place it resolves pools at.
    pub ports: WatcherPorts,
    /// Where `ResolutionFailures` per pool goes (EMF on stdout in the Lambda).
    pub metrics: Arc<dyn crate::metrics::MetricSink>,
    /// AMIs deprecating within this many days are warned about
    /// (`NODECYCLE_DEPRECATION_WARNING`, default [`crate::deprecation::DEFAULT_HORIZON_DAYS`]).
    pub deprecation_horizon_days: i64,
}

place_ports! {
    /// The ami-watcher's ports of the place it resolves pools at (the cell's, or a pool's
    /// member's).
    ///
    /// * `parameters`: SSM reads for aliases and `ssmParameter` terms.
    /// * `images`: DescribeImages.
    /// * `clusters`: Cluster versions.
    /// * `node_groups`: Node group images (for pools without `architecture`).
    /// * `alarms`: CloudWatch alarm states (`promotion.alarms`).
    pub struct WatcherPorts { parameters, images, clusters, node_groups, alarms }
}

impl WatcherPorts {
    /// A resolver over these ports (it counts the calls it makes).
    fn resolver(&self) -> Resolver<'_> {
        Resolver::new(
            self.parameters.as_ref(),
            self.images.as_ref(),
            self.clusters.as_ref(),
            self.node_groups.as_ref(),
        )
    }
}

/// What happened to one pool in a pass.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolOutcome {
    /// `<cluster>/<name>` when known.
    pub pool: Option<String>,
    /// Where the policy came from.
    pub source: String,
    /// `changed`, `unchanged`, `waiting` (promotion or minAge holds the desired AMI), `failed`
    /// or `invalid`.
    pub status: &'static str,
    /// Desired AMI id after the pass.
    pub desired: Option<String>,
    /// Desired AMI id before the pass.
    pub previous: Option<String>,
    /// Why it failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// What a pool with promotion (or minAge) waits for, when it keeps its desired AMI.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waiting: Option<String>,
    /// Whole days to the nearest EC2 deprecation of an AMI the pool uses, when one has a
    /// deprecation time ([`crate::deprecation::Findings::nearest`]; the `DaysToDeprecation`
    /// metric).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub days_to_deprecation: Option<i64>,
}

/// The handler's response.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// What triggered the pass.
    pub trigger: String,
    /// One entry per pool considered.
    pub pools: Vec<PoolOutcome>,
    /// AWS calls the resolution made, by operation (state reads/writes not included).
    pub aws_calls: BTreeMap<&'static str, u32>,
}

/// Whether [`AmiWatcher::record_invalid`] may create the pool's record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Record {
    /// Only an existing record gets the error (an invalid document: it creates nothing).
    Existing,
    /// A valid policy that cannot be resolved (a promotion cycle, an architecture its group
    /// does not run): the error is recorded as any failed resolution is.
    Always,
}

/// True when an `ssmParameter` term value (name or ARN) refers to parameter `name`.
fn references(term_value: &str, name: &str) -> bool {
    if term_value == name {
        return true;
    }
    let normalised = if name.starts_with('/') {
        name.to_string()
    } else {
        format!("/{name}")
    };
    term_value.starts_with("arn:") && term_value.ends_with(&format!(":parameter{normalised}"))
}

#[async_trait::async_trait]
impl Function for AmiWatcher {
    async fn invoke(&self, payload: &Value, inv: Invocation<'_>) -> Result<Value, HandlerError> {
        self.handle(payload, inv.now).await
    }
}

impl AmiWatcher {
    /// Handles one invocation at `now`.
    pub async fn handle(&self, payload: &Value, now: DateTime<Utc>) -> Result<Value, HandlerError> {
        let trigger = watcher_trigger(payload)?;
        let (label, docs, only) = match &trigger {
            WatcherTrigger::Ignored { what } => {
                tracing::info!(event = %what, decision = "ignored", "not a schedule or parameter change; nothing to do");
                return Ok(serde_json::json!({"trigger": "ignored", "event": what, "pools": []}));
            }
            WatcherTrigger::Pass { only } => {
                ("schedule".to_string(), self.load_all().await?, only.clone())
            }
            WatcherTrigger::ParameterChanged { name, operation }
                if self.cell.policies.contains(name) =>
            {
                let label = format!("policy {operation}: {name}");
                if operation == "Delete" {
                    tracing::info!(parameter = %name, decision = "ignored", "policy parameter deleted; its pool is no longer managed, state kept");
                    return Ok(serde_json::json!({"trigger": label, "pools": []}));
                }
                let doc = self
                    .cell
                    .policies
                    .one(name)
                    .await
                    .map_err(|e| HandlerError::internal(e.to_string()))?;
                (label, doc.into_iter().collect(), None)
            }
            WatcherTrigger::ParameterChanged { name, operation } => {
                let all = self.load_all().await?;
                let using: Vec<PolicyDocument> = all
                    .into_iter()
                    .filter(|d| {
                        policy::parse_document(d).policy.is_some_and(|p| {
                            p.ami_selector_terms.iter().any(|t| {
                                t.ssm_parameter
                                    .as_deref()
                                    .is_some_and(|v| references(v, name))
                            })
                        })
                    })
                    .collect();
                if using.is_empty() {
                    tracing::info!(parameter = %name, decision = "ignored", "changed parameter is neither a policy nor used by any ssmParameter term");
                    return Ok(
                        serde_json::json!({"trigger": format!("parameter {operation}: {name}"), "pools": []}),
                    );
                }
                (format!("parameter {operation}: {name}"), using, None)
            }
        };

        // Fail closed: without the quarantine nothing is resolved (a quarantined AMI could
        // come back).
        let quarantined = self.cell.state.quarantine().await.map_err(|e| {
            HandlerError::internal(format!(
                "cannot read the quarantine: {e}; nothing was resolved"
            ))
        })?;
        let resolver = self.ports.resolver();
        let (quarantined, known_parameters) =
            self.follow_withdrawals(&resolver, quarantined, now).await;
        // Promotion chains are checked across every policy of the pass.
        let mut chains: BTreeMap<String, Option<String>> = docs
            .iter()
            .filter_map(|d| policy::parse_document(d).policy)
            .map(|p| {
                let from = p.promotion.as_ref().and_then(|x| x.from.clone());
                (p.pool_id(), from)
            })
            .collect();
        // An upstream in another account or region may be another cell's pool: its soak ledger
        // is read from the shared table like any other (a chain ends there for this cell).
        let elsewhere: Vec<String> = chains
            .values()
            .flatten()
            .filter(|up| crate::policy::place::place_of(up).is_some() && !chains.contains_key(*up))
            .cloned()
            .collect();
        chains.extend(elsewhere.into_iter().map(|up| (up, None)));
        let chain_problems: BTreeMap<String, String> =
            if matches!(trigger, WatcherTrigger::Pass { .. }) {
                crate::promotion::chain_problems(&chains)
                    .into_iter()
                    .map(|(pool, problem)| (pool, problem.to_string()))
                    .collect()
            } else {
                BTreeMap::new()
            };
        let mut outcomes = Vec::new();
        let mut member_calls: BTreeMap<&'static str, u32> = BTreeMap::new();
        let mut seen: BTreeMap<String, String> = BTreeMap::new();
        // Pools with `metrics.perPool: true`.
        let mut per_pool: BTreeSet<String> = BTreeSet::new();
        for doc in docs {
            let parsed = policy::parse_document(&doc);
            let Some(policy) = parsed.policy else {
                let message = format!(
                    "policy {} is invalid: {}",
                    doc.source,
                    parsed.problems.error_summary()
                );
                // An invalid document never creates a record: the error goes on the record of
                // the pool its path owns only when that pool is already managed.
                let pool = parsed.pool.map(|p| p.to_string());
                outcomes.push(
                    self.record_invalid(&doc.source, pool, &message, Record::Existing, now)
                        .await,
                );
                continue;
            };
            let pool = policy.pool_id();
            if only.as_ref().is_some_and(|o| !o.contains(&pool)) {
                continue;
            }
            if let Some(first) = seen.get(&pool) {
                let message = format!(
                    "pool {pool} is defined twice ({first} and {}); the second is ignored until one is removed",
                    doc.source
                );
                tracing::error!(pool = %pool, source = %doc.source, decision = "invalid", reason = %message);
                outcomes.push(PoolOutcome {
                    pool: Some(pool),
                    source: doc.source,
                    status: "invalid",
                    desired: None,
                    previous: None,
                    error: Some(message),
                    waiting: None,
                    days_to_deprecation: None,
                });
                continue;
            }
            seen.insert(pool.clone(), doc.source.clone());
            if policy.metrics_per_pool {
                per_pool.insert(pool.clone());
            }
            if let Some(problem) = chain_problems.get(&pool) {
                let message = format!("policy {} is invalid: {problem}", doc.source);
                outcomes.push(
                    self.record_invalid(&doc.source, Some(pool), &message, Record::Always, now)
                        .await,
                );
                continue;
            }
            // Every AWS call for the pool through its member's ports, in the pool's region.
            let outcome = match self.at(policy.place.as_ref()).await {
                Ok(None) => {
                    self.resolve_pool(&resolver, &policy, &doc.source, &quarantined, now)
                        .await
                }
                Ok(Some(member)) => {
                    let there = member.ports.resolver();
                    let outcome = member
                        .resolve_pool(&there, &policy, &doc.source, &quarantined, now)
                        .await;
                    for (op, n) in there.calls() {
                        *member_calls.entry(op).or_default() += n;
                    }
                    outcome
                }
                Err(e) => self.unserved(&policy, &doc.source, &e, now).await,
            };
            outcomes.push(outcome);
        }
        self.remember_parameters(&resolver, &known_parameters, now)
            .await;
        let watched: Vec<crate::metrics::WatchedPool<'_>> = outcomes
            .iter()
            .filter_map(|o| {
                let pool = o.pool.as_deref()?;
                Some(crate::metrics::WatchedPool {
                    pool,
                    failed: matches!(o.status, "failed" | "invalid"),
                    per_pool: per_pool.contains(pool),
                    days_to_deprecation: o.days_to_deprecation,
                })
            })
            .collect();
        self.metrics
            .emit(&crate::metrics::watcher_pass(&watched), now);
        let mut aws_calls = resolver.calls();
        for (op, n) in member_calls {
            *aws_calls.entry(op).or_default() += n;
        }
        let report = Report {
            trigger: label,
            pools: outcomes,
            aws_calls,
        };
        tracing::info!(trigger = %report.trigger, pools = report.pools.len(), calls = %crate::log_field::json(&report.aws_calls), "pass complete");
        serde_json::to_value(&report).map_err(|e| HandlerError::internal(e.to_string()))
    }

    async fn load_all(&self) -> Result<Vec<PolicyDocument>, HandlerError> {
        self.cell.policies.all().await.map_err(|e| {
            HandlerError::internal(format!("cannot list policies: {e}; nothing was resolved"))
        })
    }

    async fn resolve_pool(
        &self,
        resolver: &Resolver<'_>,
        policy: &Policy,
        source: &str,
        quarantined: &crate::promotion::Quarantined,
        now: DateTime<Utc>,
    ) -> PoolOutcome {
        let pool = policy.pool_id();
        let outcome = |status, desired, previous, error, waiting| PoolOutcome {
            pool: Some(pool.clone()),
            source: source.to_string(),
            status,
            desired,
            previous,
            error,
            waiting,
            days_to_deprecation: None,
        };
        let record = match self.cell.state.pool(&pool).await {
            Ok(r) => r,
            Err(e) => {
                return outcome(
                    "failed",
                    None,
                    None,
                    Some(format!("cannot read state: {e}")),
                    None,
                );
            }
        };
        let choice = self
            .decide(resolver, policy, record.as_ref(), quarantined, now)
            .await;
        // A new desired AMI must run on the group's instance types, else the pool is invalid
        // (its desired AMI stays, so the rotator never writes the image into a template).
        if let Verdict::Take { ami, .. } = &choice
            && record
                .as_ref()
                .and_then(|r| r.desired.as_ref())
                .map(|d| &d.id)
                != Some(&ami.id)
        {
            match self.misfit(policy, ami).await {
                Ok(None) => {}
                Ok(Some(why)) => {
                    let message = format!("policy {source} is invalid: {why}");
                    return self
                        .record_invalid(source, Some(pool.clone()), &message, Record::Always, now)
                        .await;
                }
                Err(e) => {
                    let message = format!(
                        "cannot read the instance types of the node group to check {} ({}) against them: {e}",
                        ami.id, ami.architecture
                    );
                    tracing::warn!(pool = %pool, source = %source, decision = "kept", reason = %message);
                    return outcome("failed", None, None, Some(message), None);
                }
            }
        }
        let written = self
            .cell
            .announce
            .update_pool(&pool, now, |rec| match &choice {
                Verdict::Take {
                    ami,
                    kubernetes_version,
                    promoted,
                    ..
                } => {
                    let mut next = rec.apply(&Observation::Resolved {
                        at: now,
                        kubernetes_version: kubernetes_version.clone(),
                        desired: (**ami).clone(),
                    });
                    next.promotion_wait = None;
                    let changed = rec.desired.as_ref().map(|d| &d.id) != Some(&ami.id)
                        && next.desired.as_ref().map(|d| &d.id) == Some(&ami.id);
                    if let (true, Some(how)) = (changed, promoted) {
                        next.push_release(state::ReleaseEvent {
                            release: crate::promotion::release_of(ami),
                            image: ami.id.clone(),
                            at: now,
                            how: how.clone(),
                        });
                    }
                    next
                }
                Verdict::Keep { why } => PoolRecord {
                    promotion_wait: (!why.is_empty()).then(|| why.clone()),
                    ..rec.clone()
                },
                Verdict::Failed { message } => rec.apply(&Observation::Failed {
                    at: now,
                    message: message.clone(),
                }),
            })
            .await;
        let (before, after) = match written {
            Ok(pair) => pair,
            Err(e) => {
                tracing::error!(pool = %pool, decision = "failed", reason = %e, "cannot record pool state");
                return outcome(
                    "failed",
                    None,
                    None,
                    Some(format!("cannot record state: {e}")),
                    None,
                );
            }
        };
        let days_to_deprecation = self.record_findings(resolver, policy, &after, now).await;
        let desired = after.desired.as_ref().map(|a| a.id.clone());
        let previous = before.desired.as_ref().map(|a| a.id.clone());
        let mut done = match &choice {
            Verdict::Failed { message } => {
                tracing::warn!(pool = %pool, source = %source, decision = "kept", desired = desired.as_deref(), reason = %message, "resolution failed; keeping the last desired AMI");
                outcome("failed", desired, previous, Some(message.clone()), None)
            }
            Verdict::Keep { why } => {
                let why = (!why.is_empty()).then(|| why.clone());
                tracing::info!(pool = %pool, source = %source, decision = "kept", desired = desired.as_deref(), reason = why.as_deref(), "desired AMI kept");
                let status = if why.is_some() {
                    "waiting"
                } else {
                    "unchanged"
                };
                outcome(status, desired, previous, None, why)
            }
            Verdict::Take { ami, promoted, .. } => {
                let changed = desired != previous;
                let status = if changed { "changed" } else { "unchanged" };
                tracing::info!(
                    pool = %pool,
                    source = %source,
                    decision = status,
                    desired = ?desired,
                    previous = ?previous,
                    name = %ami.name,
                    release = %crate::promotion::release_of(ami),
                    promoted = promoted.is_some(),
                    term = ami.source.term,
                    via = %ami.source.value,
                    parameter = ?ami.source.parameter,
                    "desired AMI {}", if changed { "changed" } else { "unchanged" }
                );
                outcome(status, desired, previous, None, None)
            }
        };
        done.days_to_deprecation = days_to_deprecation;
        done
    }

    /// What the pool's desired AMI becomes: asks [`choose::choose`], reads each fact it needs
    /// and writes the quarantine it decides.
    async fn decide(
        &self,
        resolver: &Resolver<'_>,
        policy: &Policy,
        record: Option<&PoolRecord>,
        quarantined: &crate::promotion::Quarantined,
        now: DateTime<Utc>,
    ) -> Verdict {
        let mut facts = Facts::new(policy, record, quarantined);
        // Each read fills one fact, and there are fewer kinds than this.
        for _ in 0..16 {
            match choose::choose(&facts, now) {
                Choice::Is(verdict) => {
                    if let Verdict::Take {
                        ami,
                        instead: Some(why),
                        ..
                    } = &verdict
                    {
                        tracing::info!(pool = %policy.pool_id(), image = %ami.id, decision = "candidate taken", reason = %why, "the best candidate neither quarantined nor younger than promotion.minAge");
                    }
                    return verdict;
                }
                Choice::Quarantine { quarantine, why } => {
                    let release = match &quarantine.target {
                        crate::promotion::Target::Release(r) => r.to_string(),
                        other => other.to_string(),
                    };
                    return match self.cell.announce.put_quarantine(&quarantine).await {
                        Ok(_) => {
                            let alarm = match &quarantine.cause {
                                crate::promotion::Cause::Alarm { alarm, .. } => alarm.as_str(),
                                _ => "",
                            };
                            tracing::error!(pool = %policy.pool_id(), release = %release, alarm = %alarm, decision = "quarantined", "promotion alarm fired during the rollout; the rotator rolls back");
                            Verdict::Keep { why }
                        }
                        Err(e) => Verdict::Failed {
                            message: format!("cannot quarantine {release}: {e}"),
                        },
                    };
                }
                Choice::Read(need) => self.read(resolver, &mut facts, need, now).await,
            }
        }
        Verdict::Failed {
            message: "the decision kept asking for facts (a bug: report it)".into(),
        }
    }

    /// Reads what `need` names into `facts` (a failed read is recorded as its message).
    async fn read(
        &self,
        resolver: &Resolver<'_>,
        facts: &mut Facts<'_>,
        need: Need,
        now: DateTime<Utc>,
    ) {
        let policy = facts.policy;
        match need {
            Need::Terms => {
                facts.terms = Some(
                    resolver
                        .resolve(policy, now)
                        .await
                        .map_err(|e| e.to_string()),
                );
            }
            Need::Upstream(pool) => {
                facts.upstream = Some(self.cell.state.pool(&pool).await.map_err(|e| e.to_string()));
            }
            Need::Alarms(names) => {
                facts.alarms = Some(
                    self.ports
                        .alarms
                        .states(&names)
                        .await
                        .map_err(|e| e.to_string()),
                );
            }
            Need::Pinned(version) => {
                let resolved = match choose::alias_of(policy) {
                    Some(alias) => resolver
                        .resolve(&choose::pinned(policy, alias, &version), now)
                        .await
                        .map_err(|e| e.to_string()),
                    None => Err("the pool has no alias term".to_string()),
                };
                facts.pinned.insert(version, resolved);
            }
            Need::GroupImage => {
                facts.group_image = Some(
                    match self
                        .ports
                        .node_groups
                        .current_image(&policy.cluster, &policy.node_group)
                        .await
                    {
                        Ok(GroupImage::Image(id)) => Some(id),
                        _ => None,
                    },
                );
            }
            Need::ById(image) => {
                facts.by_id = Some(
                    resolver
                        .resolve(&choose::by_id(policy, &image), now)
                        .await
                        .map_err(|e| e.to_string()),
                );
            }
        }
    }

    /// Records `message` as the last error of `pool` (the pool the document is for, known only
    /// from valid names: the path's, or a file's own) and reports the document `invalid`. With
    /// no pool nothing is written, nor with [`Record::Existing`] when the pool has no record.
    async fn record_invalid(
        &self,
        source: &str,
        pool: Option<String>,
        message: &str,
        when: Record,
        now: DateTime<Utc>,
    ) -> PoolOutcome {
        tracing::error!(source = %source, pool = pool.as_deref(), decision = "invalid", reason = %message, "policy rejected; the pool keeps its last desired AMI");
        let mut outcome = PoolOutcome {
            pool: pool.clone(),
            source: source.to_string(),
            status: "invalid",
            desired: None,
            previous: None,
            error: Some(message.to_string()),
            waiting: None,
            days_to_deprecation: None,
        };
        if let Some(pool) = pool {
            if when == Record::Existing {
                match self.cell.state.pool(&pool).await {
                    Ok(Some(_)) => {}
                    Ok(None) => {
                        tracing::info!(source = %source, pool = %pool, decision = "not recorded", "the pool has no record; an invalid document creates none");
                        return outcome;
                    }
                    Err(e) => {
                        tracing::warn!(source = %source, pool = %pool, error = %e, "cannot read the pool record; the error is not recorded");
                        return outcome;
                    }
                }
            }
            let obs = Observation::Failed {
                at: now,
                message: message.to_string(),
            };
            if let Ok((before, _)) = self.record(&pool, &obs).await {
                outcome.desired = before.desired.map(|a| a.id);
                outcome.previous = outcome.desired.clone();
            }
        }
        outcome
    }

    /// Why images of `ami`'s architecture cannot run on the pool's node group, if they cannot
    /// ([`crate::ami::instance_types::check`], its problems joined).
    async fn misfit(
        &self,
        policy: &Policy,
        ami: &crate::ami::resolve::Ami,
    ) -> Result<Option<String>, PortError> {
        let facts = self
            .ports
            .node_groups
            .instance_types(&policy.cluster, &policy.node_group)
            .await?;
        let problems = crate::ami::instance_types::check(
            ami.architecture,
            policy.architecture.is_some(),
            &policy.node_group,
            &facts,
        );
        let errors: Vec<String> = problems.errors().map(ToString::to_string).collect();
        Ok((!errors.is_empty())
            .then(|| format!("{} ({}): {}", ami.id, ami.name, errors.join("; "))))
    }

    /// Applies `obs` to the pool record with a conditional write, re-reading on conflict.
    /// Returns the record before and after.
    pub async fn record(
        &self,
        pool: &str,
        obs: &Observation,
    ) -> Result<(PoolRecord, PoolRecord), PortError> {
        let at = match obs {
            Observation::Resolved { at, .. } | Observation::Failed { at, .. } => *at,
        };
        self.cell
            .announce
            .update_pool(pool, at, |rec| rec.apply(obs))
            .await
    }
}

impl AmiWatcher {
    /// This watcher for a pool at `place`, its AWS ports those of the place's member:
    /// `Ok(None)` for the cell's own place (this watcher).
    async fn at(
        &self,
        place: Option<&crate::policy::Place>,
    ) -> Result<Option<Self>, crate::members::MemberError> {
        let Some(place) = place else { return Ok(None) };
        use super::PlacePorts;
        Ok(self.cell.members.ports(place).await?.map(|p| AmiWatcher {
            ports: WatcherPorts::of(&p),
            ..self.clone()
        }))
    }

    /// A pool whose member is not served (or whose spoke role cannot be assumed): the error
    /// on its record (its desired AMI kept) and in the report.
    async fn unserved(
        &self,
        policy: &Policy,
        source: &str,
        e: &crate::members::MemberError,
        now: DateTime<Utc>,
    ) -> PoolOutcome {
        let pool = policy.pool_id();
        let message = e.to_string();
        tracing::error!(pool = %pool, source = %source, decision = "failed", reason = %message, "member not served; the pool keeps its desired AMI");
        let obs = Observation::Failed {
            at: now,
            message: message.clone(),
        };
        let desired = match self.record(&pool, &obs).await {
            Ok((before, _)) => before.desired.map(|a| a.id),
            Err(_) => None,
        };
        PoolOutcome {
            pool: Some(pool),
            source: source.to_string(),
            status: "failed",
            previous: desired.clone(),
            desired,
            error: Some(message),
            waiting: None,
            days_to_deprecation: None,
        }
    }

    /// The watcher over `ports`.
    pub fn new(ports: &crate::ports::Ports) -> Self {
        use super::PlacePorts;
        AmiWatcher {
            cell: super::CellPorts::new(ports),
            ports: WatcherPorts::of(ports),
            metrics: ports.metrics.clone(),
            deprecation_horizon_days: crate::deprecation::DEFAULT_HORIZON_DAYS,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::references;

    #[test]
    fn ssm_references_by_name_or_arn() {
        assert!(references("/golden/x", "/golden/x"));
        assert!(references(
            "arn:aws:ssm:us-east-2:123456789012:parameter/golden/x",
            "/golden/x"
        ));
        assert!(!references(
            "arn:aws:ssm:us-east-2:123456789012:parameter/golden/xy",
            "/golden/x"
        ));
        assert!(!references("/golden/x", "/golden/y"));
    }
}
