//! What a pool's desired AMI becomes this pass: what its terms resolve to, unless that is
//! quarantined (the previous one is kept), too young for `promotion.minAge`, or — for a pool
//! with `promotion.from` — not yet proven upstream (the pool keeps its desired AMI and says what
//! it waits for). A pool with promotion alarms that fire while it rolls to a release quarantines
//! that release.

use chrono::{DateTime, TimeDelta, Utc};

use super::AmiWatcher;
use crate::ami::alias::{Alias, AliasVersion};
use crate::ami::resolve::{Ami, GroupImage, Resolver};
use crate::policy::{Policy, SelectorTerm};
use crate::promotion::{self, Proof, Quarantined, Release, release_of};
use crate::state::{PoolRecord, ReleaseHow};

/// The outcome for one pool.
pub(super) enum Choice {
    /// Desired becomes (or stays) `ami`.
    Take {
        ami: Box<Ami>,
        kubernetes_version: String,
        /// Set when the AMI comes from a release proven upstream.
        promoted: Option<ReleaseHow>,
    },
    /// Keep the current desired AMI, for this reason.
    Keep { why: String },
    /// Resolution failed (keep the current desired AMI, record the error).
    Failed { message: String },
}

fn to_delta(d: std::time::Duration) -> TimeDelta {
    TimeDelta::from_std(d).unwrap_or(TimeDelta::MAX)
}

impl AmiWatcher {
    pub(super) async fn choose(
        &self,
        resolver: &Resolver<'_>,
        policy: &Policy,
        record: Option<&PoolRecord>,
        quarantined: &Quarantined,
        now: DateTime<Utc>,
    ) -> Choice {
        // The rotator rolls a pool off a quarantined desired AMI (launch template first, with
        // a rolled-back event); the watcher leaves that to it.
        if let Some(d) = record.and_then(|r| r.desired.as_ref())
            && let Some(q) = quarantined.covers(&d.id, &release_of(d))
        {
            return Choice::Keep {
                why: format!(
                    "the desired AMI {} ({}) is quarantined ({}); the rotator rolls the pool back",
                    d.id,
                    release_of(d),
                    q.reason
                ),
            };
        }
        let min_age = policy
            .promotion
            .as_ref()
            .and_then(|p| p.min_age)
            .map(to_delta);
        let choice = match policy.promotion.as_ref().and_then(|p| p.from.clone()) {
            Some(upstream) => {
                self.promote(resolver, policy, &upstream, record, quarantined, now)
                    .await
            }
            None => {
                self.follow(resolver, policy, record, quarantined, min_age, now)
                    .await
            }
        };
        let choice = match choice {
            Choice::Take { ami, .. }
                if min_age.is_some_and(|m| !promotion::old_enough(&ami, m, now))
                    && record.and_then(|r| r.desired.as_ref()).map(|d| &d.id) != Some(&ami.id) =>
            {
                Choice::Keep {
                    why: format!(
                        "{} ({}) was created at {}: younger than promotion.minAge",
                        ami.id,
                        release_of(&ami),
                        ami.creation_date
                    ),
                }
            }
            other => other,
        };
        // A pool with no desired AMI yet starts from what its group launches today.
        match choice {
            Choice::Keep { why } if record.and_then(|r| r.desired.as_ref()).is_none() => {
                match self.group_start(resolver, policy, quarantined, now).await {
                    Some(Choice::Take {
                        ami,
                        kubernetes_version,
                        ..
                    }) => Choice::Take {
                        ami,
                        kubernetes_version,
                        promoted: None,
                    },
                    _ => Choice::Keep { why },
                }
            }
            other => other,
        }
    }

    /// A pool without `promotion.from`: what its terms resolve to, unless quarantined or
    /// younger than `min_age` (`promotion.minAge`); then the best candidate of the same
    /// architecture and variant that is neither (the newest one old enough), unless the
    /// current desired AMI ranks above it (a pool never moves back).
    async fn follow(
        &self,
        resolver: &Resolver<'_>,
        policy: &Policy,
        record: Option<&PoolRecord>,
        quarantined: &Quarantined,
        min_age: Option<TimeDelta>,
        now: DateTime<Utc>,
    ) -> Choice {
        let r = match resolver.resolve(policy, now).await {
            Ok(r) => r,
            Err(e) => {
                return Choice::Failed {
                    message: e.to_string(),
                };
            }
        };
        let young = |a: &Ami| min_age.is_some_and(|m| !promotion::old_enough(a, m, now));
        let quarantine = quarantined.covers(&r.desired.id, &release_of(&r.desired));
        if quarantine.is_none() && !young(&r.desired) {
            return Choice::Take {
                ami: Box::new(r.desired),
                kubernetes_version: r.kubernetes_version,
                promoted: None,
            };
        }
        // The terms' best is quarantined or too young: the best candidate that is neither
        // (quarantined images are no candidates), else the pool keeps what it has (a pool
        // without a desired AMI yet starts from what its group launches).
        let why = match quarantine {
            Some(q) => format!(
                "the terms resolve to {} ({}), which is quarantined: {}",
                r.desired.id,
                release_of(&r.desired),
                q.reason
            ),
            None => format!(
                "{} ({}) was created at {}: younger than promotion.minAge",
                r.desired.id,
                release_of(&r.desired),
                r.desired.creation_date
            ),
        };
        let current = record
            .and_then(|rec| rec.desired.as_ref())
            .map(|d| d.id.clone());
        let (architecture, variant) = (r.desired.architecture, r.desired.variant);
        let usable = |c: &Ami| {
            c.architecture == architecture
                && c.variant == variant
                && quarantined.covers(&c.id, &release_of(c)).is_none()
                && !young(c)
        };
        let best = r.candidates.iter().position(usable);
        let current_rank = current
            .as_ref()
            .and_then(|id| r.candidates.iter().position(|c| &c.id == id));
        if let (Some(b), Some(c)) = (best, current_rank)
            && c < b
        {
            return Choice::Keep { why };
        }
        match best.and_then(|b| r.candidates.into_iter().nth(b)) {
            Some(best) if Some(&best.id) != current.as_ref() => {
                tracing::info!(pool = %policy.pool_id(), image = %best.id, decision = "candidate taken", reason = %why, "the best candidate neither quarantined nor younger than promotion.minAge");
                Choice::Take {
                    ami: Box::new(best),
                    kubernetes_version: r.kubernetes_version,
                    promoted: None,
                }
            }
            _ => Choice::Keep { why },
        }
    }

    /// A pool with `promotion.from`: the newest release proven upstream, resolved for this pool.
    async fn promote(
        &self,
        resolver: &Resolver<'_>,
        policy: &Policy,
        upstream: &str,
        record: Option<&PoolRecord>,
        quarantined: &Quarantined,
        now: DateTime<Utc>,
    ) -> Choice {
        let Some(promo) = &policy.promotion else {
            return Choice::Keep {
                why: "no promotion".into(),
            };
        };
        let pool = policy.pool_id();
        let up = match self.state.pool(upstream).await {
            Ok(Some(up)) => up,
            Ok(None) => {
                return Choice::Keep {
                    why: format!("upstream pool {upstream} has no state yet"),
                };
            }
            Err(e) => {
                return Choice::Failed {
                    message: format!("cannot read upstream pool {upstream}: {e}"),
                };
            }
        };
        let alarms = if promo.alarms.is_empty() {
            promotion::Alarms::default()
        } else {
            let names: Vec<String> = promo
                .alarms
                .iter()
                .map(|a| crate::policy::alarm_name(a).to_string())
                .collect();
            match self.alarms.states(&names).await {
                Ok(states) => promotion::alarms_view(&promo.alarms, &states),
                Err(e) => {
                    return Choice::Failed {
                        message: format!(
                            "cannot read promotion alarms ({e}); promotion waits (grant cloudwatch:DescribeAlarms)"
                        ),
                    };
                }
            }
        };
        // Alarms firing while this pool rolls to a release: that release is quarantined.
        if let (Some(rec), Some(alarm)) = (record, alarms.firing.first())
            && let Some(desired) = &rec.desired
        {
            let release = release_of(desired);
            let settled = rec
                .ledger
                .iter()
                .any(|p| p.until.is_none() && p.release == release);
            let promoted_here = rec.releases.last().is_some_and(|e| {
                e.release == release && matches!(e.how, ReleaseHow::Promoted { .. })
            });
            if !settled && promoted_here && quarantined.covers(&desired.id, &release).is_none() {
                let q = promotion::Quarantine {
                    target: promotion::Target::Release(release.clone()),
                    reason: format!(
                        "promotion alarm {alarm} in ALARM while {pool} rolled to {release}"
                    ),
                    by: "nodecycle".into(),
                    at: now,
                    cause: promotion::Cause::Alarm {
                        pool: pool.clone(),
                        alarm: alarm.clone(),
                    },
                    outbox: Vec::new(),
                };
                return match self.announce.put_quarantine(&q).await {
                    Ok(_) => {
                        tracing::error!(pool = %pool, release = %release, alarm = %alarm, decision = "quarantined", "promotion alarm fired during the rollout; the rotator rolls back");
                        Choice::Keep {
                            why: q.reason.clone(),
                        }
                    }
                    Err(e) => Choice::Failed {
                        message: format!("cannot quarantine {release}: {e}"),
                    },
                };
            }
        }
        let soak = to_delta(promo.soak.unwrap_or_default());
        let proof = promotion::ledger::best_proven(
            &up.ledger,
            soak,
            &alarms,
            quarantined,
            up.halted.is_some(),
            now,
        );
        let (release, image, proven_at) = match proof {
            Proof::Proven {
                release, image, at, ..
            } => (release, image, at),
            Proof::Soaking { release, at, .. } => {
                return Choice::Keep {
                    why: format!(
                        "release {release} soaking in {upstream}: proven at {} if nothing breaks it",
                        at.to_rfc3339()
                    ),
                };
            }
            Proof::Waiting { why } => {
                return Choice::Keep {
                    why: format!("waiting for {upstream}: {why}"),
                };
            }
        };
        let current = record.and_then(|r| r.desired.as_ref());
        if current.is_some_and(|d| release_of(d) == release) {
            return Choice::Keep { why: String::new() };
        }
        let resolved = self
            .resolve_release(resolver, policy, &release, &image, now)
            .await;
        match resolved {
            Ok((ami, kubernetes_version)) => {
                if let Some(q) = quarantined.covers(&ami.id, &release) {
                    return Choice::Keep {
                        why: format!("{} is quarantined: {}", ami.id, q.reason),
                    };
                }
                Choice::Take {
                    ami: Box::new(ami),
                    kubernetes_version,
                    promoted: Some(ReleaseHow::Promoted {
                        from: upstream.to_string(),
                        proven_at,
                    }),
                }
            }
            Err(why) => Choice::Keep {
                why: format!("release {release} is proven in {upstream} but {why}"),
            },
        }
    }

    /// This pool's AMI of `release`: the pinned alias for alias terms (so other Kubernetes
    /// versions and architectures get their own image of the release), else the candidate of
    /// its own terms with that image id.
    async fn resolve_release(
        &self,
        resolver: &Resolver<'_>,
        policy: &Policy,
        release: &Release,
        image: &str,
        now: DateTime<Utc>,
    ) -> Result<(Ami, String), String> {
        let alias = policy
            .ami_selector_terms
            .iter()
            .find_map(|t| t.alias.clone());
        match (alias, promotion::release::pinned_version(release)) {
            (Some(alias), Some(version)) => {
                let pinned = Policy {
                    ami_selector_terms: vec![SelectorTerm {
                        alias: Some(Alias {
                            family: alias.family,
                            version: AliasVersion::Pinned(version.to_string()),
                        }),
                        ..SelectorTerm::default()
                    }],
                    ..policy.clone()
                };
                resolver
                    .resolve(&pinned, now)
                    .await
                    .map(|r| (r.desired, r.kubernetes_version))
                    .map_err(|e| format!("it does not resolve for this pool: {e}"))
            }
            _ => {
                let r = resolver
                    .resolve(policy, now)
                    .await
                    .map_err(|e| format!("this pool's terms do not resolve: {e}"))?;
                let wanted = if release.is_image() {
                    release.as_str()
                } else {
                    image
                };
                r.candidates
                    .into_iter()
                    .find(|a| a.id == wanted)
                    .map(|a| (a, r.kubernetes_version))
                    .ok_or_else(|| format!("{wanted} is not among this pool's candidates"))
            }
        }
    }

    /// What the pool's group launches today, as its first desired AMI.
    async fn group_start(
        &self,
        resolver: &Resolver<'_>,
        policy: &Policy,
        quarantined: &Quarantined,
        now: DateTime<Utc>,
    ) -> Option<Choice> {
        let image = match self
            .groups
            .current_image(&policy.cluster, &policy.node_group)
            .await
        {
            Ok(GroupImage::Image(id)) => id,
            _ => return None,
        };
        let by_id = Policy {
            ami_selector_terms: vec![SelectorTerm {
                id: Some(image),
                ..SelectorTerm::default()
            }],
            ..policy.clone()
        };
        let r = resolver.resolve(&by_id, now).await.ok()?;
        if quarantined
            .covers(&r.desired.id, &release_of(&r.desired))
            .is_some()
        {
            return None;
        }
        // An EKS-published image the pool's alias names: take it through the alias pinned to
        // its version, so its release is that version (promotion matches pools by release).
        if policy.ami_selector_terms.iter().any(|t| t.alias.is_some())
            && let Some(release) = promotion::release::version_in_name(&r.desired.name)
            && let Ok((ami, kubernetes_version)) = self
                .resolve_release(resolver, policy, &release, &r.desired.id, now)
                .await
            && ami.id == r.desired.id
        {
            return Some(Choice::Take {
                ami: Box::new(ami),
                kubernetes_version,
                promoted: None,
            });
        }
        Some(Choice::Take {
            ami: Box::new(r.desired),
            kubernetes_version: r.kubernetes_version,
            promoted: None,
        })
    }
}
