//! Release health in a pass: the pool's desired release judged by what its nodes and pods do
//! ([`crate::promotion::health`]), and quarantined when the evidence indicts it. The
//! quarantine is the one path every piece of evidence takes: the pool rolls back at its
//! budgets in the same pass, every other pool on the release rolls back at its next pass,
//! and no downstream pool takes it (a quarantined release is never proven).

use std::collections::HashMap;

use chrono::{DateTime, Utc};

use super::observe::Observed;
use super::{PoolVisit, RotatorHandler};
use crate::promotion::health::{self, PodTally, Verdict};
use crate::promotion::{Cause, Quarantine, Quarantined, Release, Target, release_of};

impl RotatorHandler {
    /// Judges the pool's desired release (not a pinned pool's: an operator chose that image)
    /// on the cluster's nodes (those of every pool of the pass whose instance runs an image of
    /// the release, against all the others: an image the pool's record does not know is a
    /// release of its own) from their conditions (always: the node list is read anyway) and,
    /// while the desired AMI changed from a previous one within `health.window` (the release
    /// is under watch), its pods' start failures (the cluster's
    /// pods and sandbox failures, read once a pass for all its pools). When indicted, records
    /// the quarantine (cause `Unhealthy` or `WorkloadFailures`, with the evidence) and returns
    /// it; `None` when healthy, already quarantined, or not judged. A release under watch has
    /// its [`health::Summary`] put in `metrics`.
    pub(super) async fn judge_release(
        &self,
        visit: &PoolVisit<'_>,
        observed: &Observed,
        quarantined: &Quarantined,
        metrics: &mut crate::metrics::PoolPass,
        now: DateTime<Utc>,
    ) -> Option<Quarantine> {
        let (policy, kube, view) = (visit.policy, visit.kube.as_ref(), visit.view);
        let record = observed.record.as_ref()?;
        if record.pin.is_some() {
            return None;
        }
        let desired = record.desired.as_ref()?;
        let release = release_of(desired);
        if quarantined.covers(&desired.id, &release).is_some() {
            return None;
        }
        let watched = health::under_watch(
            record.previous_desired.is_some(),
            record.desired_changed_at,
            policy.health.window,
            now,
        );
        let pods: Option<&HashMap<String, PodTally>> = if watched {
            view.pod_health(kube, now).await
        } else {
            None
        };
        let releases: HashMap<&str, Release> = record
            .desired
            .iter()
            .chain(record.previous_desired.iter())
            .chain(record.history.iter().map(|h| &h.ami))
            .map(|a| (a.id.as_str(), release_of(a)))
            .collect();
        let nodes: Vec<health::Observed<'_>> = view
            .nodes_with_images()
            .map(|(instance, image, node)| health::Observed {
                release: releases
                    .get(image)
                    .map_or_else(|| image.to_string(), ToString::to_string),
                node: node
                    .created
                    .and_then(|c| health::node_facts(instance, c, &node.conditions)),
                pods: pods.and_then(|p| p.get(&node.name)),
            })
            .collect();
        if watched {
            metrics.health = Some(health::summarize(release.as_str(), &nodes, &policy.health));
        }
        let Verdict::Indicted(evidence) = health::assess(release.as_str(), &nodes, &policy.health)
        else {
            return None;
        };
        let pool = policy.pool_id();
        let q = Quarantine {
            target: Target::Release(release),
            reason: evidence.message.clone(),
            by: "nodecycle".to_string(),
            at: now,
            cause: Cause::of_indictment(&pool, evidence),
            outbox: Vec::new(),
        };
        match self.cell.announce.put_quarantine(&q).await {
            Ok(new) => {
                if new {
                    tracing::error!(pool = %pool, target = %q.target, decision = "release indicted", reason = %q.reason, "quarantined: this pool rolls back, no pool takes it");
                }
                Some(q)
            }
            Err(e) => {
                tracing::error!(pool = %pool, target = %q.target, error = %e, reason = %q.reason, "release indicted but the quarantine could not be recorded; judged again next pass");
                None
            }
        }
    }
}
