//! The rotator's pass over an EKS managed node group pool: follow the recorded node group update
//! (`DescribeUpdate`), plan ([`plan_managed`]), start an update when the plan says so (record the
//! intent with a client request token first, then `UpdateNodegroupConfig` + `UpdateNodegroupVersion`),
//! and carry out the node-level part of the plan on the group's Auto Scaling group.

use std::time::Instant;

use chrono::{DateTime, Utc};

use super::{Planner, PoolCtx, PoolReport, RotatorHandler, log_decisions};
use crate::managed::{self, ManagedGroup, ManagedUpdate, Phase, UpdateTarget};
use crate::plan::Snapshot;
use crate::plan::managed_update::{ManagedPlan, NodeGroupState, UpdateAction, plan_managed};
use crate::policy::Policy;
use crate::port::{ErrorKind, PortError};
use crate::state::Versioned;

impl Planner<'_> {
    /// The pool's update record (`read`: as the cluster's batched read found it; else read
    /// now) and, for one in progress, the record as `DescribeUpdate` reports it now (`None`:
    /// unchanged). Reads only.
    async fn observed_update(
        &self,
        (cluster, name, pool): (&str, &str, &str),
        read: Option<super::observe::UpdateRead>,
        now: DateTime<Utc>,
    ) -> Result<Option<(Versioned<ManagedUpdate>, Option<ManagedUpdate>)>, PortError> {
        let read = match read {
            Some(read) => read?,
            None => self.state.managed_update(pool).await?,
        };
        let Some(v) = read else {
            return Ok(None);
        };
        let (Phase::InProgress, Some(id)) = (v.value.phase, v.value.update_id.clone()) else {
            return Ok(Some((v, None)));
        };
        let status = match self.managed.describe_update(cluster, name, &id).await {
            Ok(s) => s,
            // EKS no longer knows it: never wait forever on it; halt and let an operator look.
            Err(e) if e.is_not_found() => managed::UpdateStatus {
                id: id.clone(),
                state: managed::UpdateState::Cancelled,
                errors: vec![format!("EKS no longer reports update {id}: {e}")],
            },
            Err(e) => return Err(e),
        };
        let next = v.value.observe(&status, now);
        let changed = (next != v.value).then_some(next);
        Ok(Some((v, changed)))
    }

    /// The plan for a managed node group pool (`group` as the snapshot described it), with the
    /// update as `DescribeUpdate` reports it (a failed or cancelled one halts the pool in
    /// `snapshot.gates`). Writes nothing (`plan`, `status`).
    pub(super) async fn plan_managed_pool(
        &self,
        group: &ManagedGroup,
        snapshot: &mut Snapshot,
        read: Option<super::observe::UpdateRead>,
        now: DateTime<Utc>,
    ) -> Result<(ManagedPlan, Option<Versioned<ManagedUpdate>>), PortError> {
        let pool = snapshot.policy.pool_id();
        let cluster = snapshot.policy.cluster.clone();
        let update = match self
            .observed_update((&cluster, &group.name, &pool), read, now)
            .await?
        {
            None => None,
            Some((v, None)) => Some(v),
            Some((v, Some(next))) => {
                if let Some(why) = next.halt_reason() {
                    snapshot.gates.halted = Some(why);
                }
                Some(Versioned {
                    value: next,
                    version: v.version,
                })
            }
        };
        let plan = self.plan_with(group, snapshot, update.as_ref(), now);
        Ok((plan, update))
    }

    /// The plan over `update` as followed. Described before the update was followed: an
    /// update that just ended may still show UPDATING, which only delays the next start by a
    /// pass.
    fn plan_with(
        &self,
        group: &ManagedGroup,
        snapshot: &Snapshot,
        update: Option<&Versioned<ManagedUpdate>>,
        now: DateTime<Utc>,
    ) -> ManagedPlan {
        let group = NodeGroupState {
            update: update.map(|v| &v.value),
            status: &group.status,
            wave: self.node_group_wave,
        };
        plan_managed(snapshot, &group, now)
    }
}

impl RotatorHandler {
    /// Follows the recorded update with `DescribeUpdate` and records what it says; a failed or
    /// cancelled one halts the pool (also set in `snapshot.gates`); a finished one gets the
    /// group's `updateConfig` put back.
    async fn follow_update(
        &self,
        (cluster, name): (&str, &str),
        snapshot: &mut Snapshot,
        read: Option<super::observe::UpdateRead>,
        now: DateTime<Utc>,
    ) -> Result<Option<Versioned<ManagedUpdate>>, PortError> {
        let pool = snapshot.policy.pool_id();
        let Some((mut v, next)) = self
            .planner()
            .observed_update((cluster, name, &pool), read, now)
            .await?
        else {
            return Ok(None);
        };
        if let Some(config) = v.value.config_to_restore() {
            return self
                .restore_config(cluster, name, v, config)
                .await
                .map(Some);
        }
        let Some(next) = next else {
            return Ok(Some(v));
        };
        let Some(version) = self
            .cell
            .state
            .put_managed_update(&next, Some(v.version))
            .await?
        else {
            // Another rotator recorded it first; its view wins this pass.
            return self.cell.state.managed_update(&pool).await;
        };
        let id = next.update_id.clone().unwrap_or_default();
        tracing::info!(pool = %pool, update = %id, phase = ?next.phase, errors = %crate::log_field::json(&next.errors), decision = "node group update observed");
        if let Some(why) = next.halt_reason() {
            self.halt(&pool, &why, now).await?;
            snapshot.gates.halted = Some(why);
        }
        v = Versioned {
            value: next,
            version,
        };
        if let Some(config) = v.value.config_to_restore() {
            return self
                .restore_config(cluster, name, v, config)
                .await
                .map(Some);
        }
        Ok(Some(v))
    }

    /// Puts the group's `updateConfig` back as it was before the update (level-triggered: a
    /// failure is retried next pass; the record says when it is done).
    async fn restore_config(
        &self,
        cluster: &str,
        name: &str,
        v: Versioned<ManagedUpdate>,
        config: managed::UpdateConfig,
    ) -> Result<Versioned<ManagedUpdate>, PortError> {
        if let Err(e) = self
            .ports
            .managed
            .set_update_config(cluster, name, config)
            .await
        {
            tracing::warn!(pool = %v.value.pool, error = %e, decision = "retry", "cannot restore the node group's updateConfig yet");
            return Ok(v);
        }
        let restored = ManagedUpdate {
            config_restored: true,
            ..v.value.clone()
        };
        tracing::info!(pool = %v.value.pool, config = %crate::log_field::json(&config), decision = "updateConfig restored", "the node group's updateConfig is back as before the update");
        match self
            .cell
            .state
            .put_managed_update(&restored, Some(v.version))
            .await?
        {
            Some(version) => Ok(Versioned {
                value: restored,
                version,
            }),
            None => Ok(v),
        }
    }

    pub(super) async fn managed_pass(
        &self,
        policy: &Policy,
        group: &ManagedGroup,
        ctx: &mut PoolCtx<'_>,
        deadline: Instant,
        report: &mut PoolReport,
    ) -> Result<(), PortError> {
        let now = ctx.clock.start();
        let read = ctx.managed_update.take();
        // The plan after following and recording the update.
        let cluster = ctx.snapshot.policy.cluster.clone();
        let update = self
            .follow_update((&cluster, &group.name), &mut ctx.snapshot, read, now)
            .await?;
        let mplan = self
            .planner()
            .plan_with(group, &ctx.snapshot, update.as_ref(), now);
        log_decisions(&mplan.plan);
        self.record_repair_breaker(ctx, &mplan.plan.repair, now, report)
            .await;
        report.allowed = Some(mplan.plan.allowed);
        report.blocked = mplan.plan.blocked.clone();
        match &mplan.update {
            UpdateAction::None => {}
            UpdateAction::Continue => {
                if let Some(v) = update.filter(|v| v.value.phase == Phase::Starting) {
                    self.issue_update(policy, group, v, now, report).await?;
                }
            }
            UpdateAction::Start {
                image,
                max_unavailable,
            } => {
                let pool = policy.pool_id();
                if let Some(why) = self.image_misfit(policy, ctx.record.as_ref(), image).await {
                    // No node group update launches the image.
                    tracing::error!(pool = %pool, image = %image, decision = "blocked", reason = %why);
                    report.blocked = Some(why);
                    return Ok(());
                }
                let mut fresh = ManagedUpdate::starting(&pool, image, *max_unavailable, now);
                // The previous update's config was never restored: it is still the original.
                fresh.original_config = update.as_ref().and_then(|v| {
                    if v.value.phase.is_finished() {
                        v.value.config_to_restore()
                    } else {
                        // A superseded start: what it recorded is still the original.
                        v.value.original_config
                    }
                });
                // Replaces a finished record, or creates the first: conditional, so two rotators
                // never start two updates.
                let expected = update.as_ref().map(|v| v.version);
                if let Some(version) = self.cell.state.put_managed_update(&fresh, expected).await? {
                    tracing::info!(pool = %pool, image = %image, max_unavailable, decision = "node group update recorded", "starting the node group update");
                    let v = Versioned {
                        value: fresh,
                        version,
                    };
                    self.issue_update(policy, group, v, now, report).await?;
                }
            }
        }
        self.execute(&mplan.plan, ctx, deadline, report).await
    }

    /// Moves a `Starting` record on: decide the target (once), set `maxUnavailable`, call
    /// `UpdateNodegroupVersion` with the record's token, record the update id. A rejected start
    /// fails the record and halts the pool; another update in progress or a transient error
    /// leaves it `Starting` for the next pass.
    async fn issue_update(
        &self,
        policy: &Policy,
        group: &ManagedGroup,
        v: Versioned<ManagedUpdate>,
        now: DateTime<Utc>,
        report: &mut PoolReport,
    ) -> Result<(), PortError> {
        let cluster = policy.cluster.as_str();
        let name = group.name.as_str();
        let pool = policy.pool_id();
        let (mut u, mut version) = (v.value, v.version);
        let target = match &u.target {
            Some(t) => t.clone(),
            None => {
                let target = match self.update_target(group, &pool, &u.image).await {
                    Ok(t) => t,
                    Err(Rejected(why)) => return self.reject(u, version, why, now, report).await,
                    Err(Retry(why)) => {
                        report.blocked = Some(why);
                        return Ok(());
                    }
                };
                u.target = Some(target.clone());
                if u.original_config.is_none() {
                    let mut original = group.update_config;
                    if policy.rollout == crate::policy::RolloutStrategy::TerminateFirst {
                        // Put back after MINIMAL: an unset strategy is EKS's DEFAULT.
                        original.update_strategy = original
                            .update_strategy
                            .or(Some(managed::UpdateStrategy::Default));
                    }
                    u.original_config = Some(original);
                }
                let Some(next) = self
                    .cell
                    .state
                    .put_managed_update(&u, Some(version))
                    .await?
                else {
                    return Ok(());
                };
                version = next;
                target
            }
        };
        // Terminate-first maps to EKS's MINIMAL strategy; otherwise the group's own stays.
        // (A group at MaxSize needs no MINIMAL: EKS raises MaxSize for its update itself.)
        let minimal = policy.rollout == crate::policy::RolloutStrategy::TerminateFirst;
        let ours = managed::UpdateConfig {
            max_unavailable: Some(u.max_unavailable),
            max_unavailable_percentage: None,
            update_strategy: if minimal {
                Some(managed::UpdateStrategy::Minimal)
            } else {
                group.update_config.update_strategy
            },
        };
        let started = async {
            self.ports
                .managed
                .set_update_config(cluster, name, ours)
                .await?;
            self.ports
                .managed
                .start_update(cluster, name, &target, &u.token)
                .await
        }
        .await;
        match started {
            Ok(id) => {
                tracing::info!(pool = %pool, update = %id, target = %target, max_unavailable = u.max_unavailable, update_strategy = ours.update_strategy.map_or("DEFAULT", managed::UpdateStrategy::as_str), decision = "node group update started");
                report
                    .started
                    .push(format!("node group update {id} ({target})"));
                u.update_id = Some(id);
                u.phase = Phase::InProgress;
                u.phase_at = now;
                self.cell
                    .state
                    .put_managed_update(&u, Some(version))
                    .await?;
                Ok(())
            }
            Err(e) if e.kind == ErrorKind::Conflict || e.kind.is_retryable() => {
                let why = format!(
                    "node group update to {} not started yet: {e}; retried next pass",
                    u.image
                );
                tracing::warn!(pool = %pool, decision = "waiting", reason = %why);
                report.blocked = Some(why);
                Ok(())
            }
            Err(e) => self.reject(u, version, e.to_string(), now, report).await,
        }
    }

    async fn reject(
        &self,
        mut u: ManagedUpdate,
        version: u64,
        why: String,
        now: DateTime<Utc>,
        report: &mut PoolReport,
    ) -> Result<(), PortError> {
        u.phase = Phase::Failed;
        u.phase_at = now;
        u.errors = vec![why];
        if self
            .cell
            .state
            .put_managed_update(&u, Some(version))
            .await?
            .is_some()
            && let Some(halt) = u.halt_reason()
        {
            self.halt(&u.pool, &halt, now).await?;
            report.errors.push(halt);
        }
        Ok(())
    }

    /// What `UpdateNodegroupVersion` asks for to roll out `image`: a launch template version
    /// when the group's template names an image, else the EKS release `image` belongs to.
    async fn update_target(
        &self,
        group: &ManagedGroup,
        pool: &str,
        image: &str,
    ) -> Result<UpdateTarget, TargetError> {
        let retry = |e: crate::port::PortError| {
            if e.kind == ErrorKind::Conflict || e.kind.is_retryable() {
                Retry(e.to_string())
            } else {
                Rejected(e.to_string())
            }
        };
        if let Some(t) = &group.launch_template
            && self
                .ports
                .managed
                .template_image(t)
                .await
                .map_err(retry)?
                .is_some()
        {
            let (id, version) = self
                .ports
                .managed
                .template_with_image(t, image)
                .await
                .map_err(retry)?;
            return Ok(UpdateTarget::LaunchTemplate { id, version });
        }
        let record = self
            .cell
            .state
            .pool(pool)
            .await
            .map_err(|e| Retry(e.to_string()))?
            .unwrap_or_default();
        let lookup =
            managed::release_parameters(record.desired.as_ref(), record.known_amis(), image)
                .map_err(Rejected)?;
        let values = self
            .ports
            .parameters
            .get_parameters(&lookup.parameters())
            .await
            .map_err(retry)?
            .into_iter()
            .map(|(name, p)| (name, p.value))
            .collect();
        let version = managed::release_version(&values, &lookup).map_err(|e| {
            if e.retry {
                Retry(e.message)
            } else {
                Rejected(e.message)
            }
        })?;
        Ok(UpdateTarget::ReleaseVersion { version })
    }
}

/// Why no target: worth retrying, or a configuration problem that fails the update.
enum TargetError {
    Retry(String),
    Rejected(String),
}
use TargetError::{Rejected, Retry};
