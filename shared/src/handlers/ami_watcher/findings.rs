//! Warnings ahead of time for each pool ([`crate::deprecation`], [`crate::upgrade`]): after a
//! pool's resolution, the deprecation times of every AMI it uses (desired, pinned, running on its
//! nodes as its last rollout status counted them) and, for a pool pinned to an EKS release,
//! whether that release has builds for the cluster's next Kubernetes minor. Recorded in the pool
//! record when they changed; the write announces each AMI that entered the horizon (*AMI
//! Deprecating*, once per pool, AMI and horizon).

use chrono::{DateTime, Utc};

use super::AmiWatcher;
use crate::ami::resolve::Resolver;
use crate::deprecation::{self, Findings, Use};
use crate::image::alias::{Alias, AliasVersion};
use crate::policy::Policy;
use crate::state::PoolRecord;
use crate::upgrade::{self, NextMinor};

/// Keys of *AMI Deprecating* announcements kept per pool (oldest dropped first).
pub const WARNED_LIMIT: usize = 50;

impl AmiWatcher {
    /// Computes `record`'s pool's findings and records them when they changed; the whole days
    /// to the nearest deprecation they found (the `DaysToDeprecation` metric). Best effort: an
    /// image read that fails leaves the recorded findings as they were (next run).
    pub(super) async fn record_findings(
        &self,
        resolver: &Resolver<'_>,
        policy: &Policy,
        record: &PoolRecord,
        now: DateTime<Utc>,
    ) -> Option<i64> {
        let pool = policy.pool_id();
        let findings = match self.findings(resolver, policy, record, now).await {
            Ok(f) => f,
            Err(e) => {
                tracing::warn!(pool = %pool, error = %e, "cannot read the pool's AMIs for deprecation warnings; next run");
                return None;
            }
        };
        let days = findings.nearest.map(|t| deprecation::days_to(t, now));
        if record.findings.as_ref() == Some(&findings) {
            return days;
        }
        let horizon = findings.horizon_days;
        let keys: Vec<String> = findings
            .deprecating
            .iter()
            .map(|d| deprecation::announce_key(&d.ami, horizon))
            .collect();
        let result = self
            .cell
            .announce
            .update_pool(&pool, now, |r| {
                let mut next = r.clone();
                next.findings = Some(findings.clone());
                for k in &keys {
                    if !next.deprecation_warned.contains(k) {
                        next.deprecation_warned.push(k.clone());
                    }
                }
                let excess = next.deprecation_warned.len().saturating_sub(WARNED_LIMIT);
                next.deprecation_warned.drain(..excess);
                next
            })
            .await;
        match result {
            Ok(_) => {
                for w in findings.warnings(now) {
                    tracing::warn!(pool = %pool, decision = "warning", reason = %w);
                }
            }
            Err(e) => {
                tracing::warn!(pool = %pool, error = %e, "cannot record the deprecation warnings; next run")
            }
        }
        days
    }

    async fn findings(
        &self,
        resolver: &Resolver<'_>,
        policy: &Policy,
        record: &PoolRecord,
        now: DateTime<Utc>,
    ) -> Result<Findings, crate::port::PortError> {
        let mut uses: Vec<(Use, String)> = Vec::new();
        if let Some(d) = &record.desired {
            uses.push((Use::Desired, d.id.clone()));
        }
        if let Some(p) = &record.pin {
            uses.push((Use::Pinned, p.ami.clone()));
        }
        for image in record.rollout.iter().flat_map(|r| &r.images) {
            if image.ami.starts_with("ami-") {
                uses.push((Use::Running, image.ami.clone()));
            }
        }
        let horizon_days = self.deprecation_horizon_days;
        if uses.is_empty() {
            return Ok(Findings {
                horizon_days,
                ..Findings::default()
            });
        }
        let ids: Vec<String> = uses.iter().map(|(_, id)| id.clone()).collect();
        let images = resolver.images_with_ids(&ids).await?;
        let pairs: Vec<(Use, crate::ami::select::Image)> = uses
            .iter()
            .filter_map(|(u, id)| Some((*u, images.iter().find(|i| &i.id == id)?.clone())))
            .collect();
        let (deprecating, nearest) = deprecation::deprecating(&pairs, horizon_days, now);
        Ok(Findings {
            horizon_days,
            nearest,
            deprecating,
            next_minor: self.next_minor(resolver, policy, record).await,
        })
    }

    /// Whether the EKS release the pool is pinned to has builds for the next minor: `None`
    /// when the pool follows releases (an `@latest` alias, a wildcard name, an SSM parameter),
    /// its image is no EKS release, or the facts cannot be read (logged).
    async fn next_minor(
        &self,
        resolver: &Resolver<'_>,
        policy: &Policy,
        record: &PoolRecord,
    ) -> Option<NextMinor> {
        let pinned_name = match (&record.pin, &record.desired) {
            (Some(p), _) => p.name.clone()?,
            (None, Some(d)) if pinned_by_terms(&d.source) => d.name.clone(),
            _ => return None,
        };
        let alias = upgrade::pinned_release(&pinned_name)?;
        let current = record.kubernetes_version.clone()?;
        let next = upgrade::next_minor(&current)?;
        let architecture = policy
            .architecture
            .or(record.desired.as_ref().map(|d| d.architecture))?;
        let latest = Alias {
            family: alias.family,
            version: AliasVersion::Latest,
        };
        let recommended =
            upgrade::builds(&latest, &next, architecture, policy.variant).unwrap_or_default();
        let needed = upgrade::builds(&alias, &next, architecture, policy.variant);
        let names: Vec<String> = needed
            .iter()
            .flatten()
            .chain(recommended.iter())
            .cloned()
            .collect();
        let values = match resolver.parameters(&names).await {
            Ok(v) => v,
            Err(e) => {
                tracing::warn!(pool = %policy.pool_id(), error = %e, "cannot read the next minor's parameters; next run");
                return None;
            }
        };
        let found = |p: &String| values.get(p).is_some_and(Option::is_some);
        let missing = match &needed {
            Ok(paths) => paths.iter().filter(|p| !found(p)).cloned().collect(),
            Err(why) => vec![why.clone()],
        };
        let latest_ids: Vec<String> = recommended
            .iter()
            .filter_map(|p| values.get(p).cloned().flatten())
            .collect();
        let nearest = if latest_ids.is_empty() {
            None
        } else {
            resolver
                .images_with_ids(&latest_ids)
                .await
                .ok()?
                .iter()
                .find_map(|i| crate::promotion::release::version_in_name(&i.name))
                .map(|r| format!("{}@{}", alias.family, r.0))
        };
        Some(NextMinor {
            pinned: alias.to_string(),
            current,
            next,
            missing,
            nearest,
        })
    }
}

/// Whether the terms pin the image they resolved to: a pinned alias, an image id, or a name
/// without wildcards.
fn pinned_by_terms(source: &crate::ami::select::Provenance) -> bool {
    match source.field.as_str() {
        "alias" => !source.value.ends_with("@latest"),
        "id" => true,
        "query" => !source.value.contains(['*', '?']),
        _ => false,
    }
}
