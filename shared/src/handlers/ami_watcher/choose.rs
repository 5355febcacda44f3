//! What a pool's desired AMI becomes this pass, decided without I/O: what its terms resolve
//! to, unless that is quarantined (the previous one is kept), too young for
//! `promotion.minAge`, or — for a pool with `promotion.from` — not yet proven upstream (the pool
//! keeps its desired AMI and says what it waits for). A pool with promotion alarms that fire
//! while it rolls to a release quarantines that release: the quarantine is an output, written
//! by the caller.
//!
//! [`choose`] is a plain function of the [`Facts`] read so far and `now`. The facts a pool
//! needs depend on what was read (an upstream's proven release decides which release to
//! resolve), so when one is missing the answer is [`Choice::Read`]: the caller reads it, adds it
//! to the facts and asks again. Every read is asked for exactly when the decision needs it, so
//! a pass makes the same calls, in the same order, as reading them inline would.

use std::collections::BTreeMap;

use chrono::{DateTime, TimeDelta, Utc};

use crate::ami::alias::{Alias, AliasVersion};
use crate::ami::resolve::{Ami, Resolution};
use crate::policy::{Policy, SelectorTerm};
use crate::promotion::{self, AlarmState, Proof, Quarantine, Quarantined, Release, release_of};
use crate::state::{PoolRecord, ReleaseHow};

/// What the watcher knows about one pool: given up front (its policy, record, the quarantine)
/// or read on [`Choice::Read`] (`None`: not read yet).
#[derive(Debug, Clone)]
pub struct Facts<'a> {
    /// The pool's policy.
    pub policy: &'a Policy,
    /// Its record, `None` before its first pass.
    pub record: Option<&'a PoolRecord>,
    /// Every quarantine entry in force.
    pub quarantined: &'a Quarantined,
    /// [`Need::Terms`]: what the pool's own terms resolve to (an error as its message).
    pub terms: Option<Result<Resolution, String>>,
    /// [`Need::Upstream`]: the upstream pool's record (`promotion.from`).
    pub upstream: Option<Result<Option<PoolRecord>, String>>,
    /// [`Need::Alarms`]: the states of `promotion.alarms`.
    pub alarms: Option<Result<Vec<AlarmState>, String>>,
    /// [`Need::Pinned`]: the pool's terms with its alias pinned to a version, by version.
    pub pinned: BTreeMap<String, Result<Resolution, String>>,
    /// [`Need::GroupImage`]: the image the pool's group launches today (`None`: none known).
    pub group_image: Option<Option<String>>,
    /// [`Need::ById`]: that image resolved as an `id` term.
    pub by_id: Option<Result<Resolution, String>>,
}

impl<'a> Facts<'a> {
    /// The facts every pool starts with; the rest is read on demand.
    pub fn new(
        policy: &'a Policy,
        record: Option<&'a PoolRecord>,
        quarantined: &'a Quarantined,
    ) -> Self {
        Facts {
            policy,
            record,
            quarantined,
            terms: None,
            upstream: None,
            alarms: None,
            pinned: BTreeMap::new(),
            group_image: None,
            by_id: None,
        }
    }

    fn desired(&self) -> Option<&'a Ami> {
        self.record.and_then(|r| r.desired.as_ref())
    }
}

/// A fact the decision needs next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Need {
    /// Resolve the pool's terms.
    Terms,
    /// Read the record of this upstream pool.
    Upstream(String),
    /// Read the states of these alarms (names).
    Alarms(Vec<String>),
    /// Resolve the pool's policy with its alias pinned to this version ([`pinned`]).
    Pinned(String),
    /// Read the image the pool's group launches.
    GroupImage,
    /// Resolve this image as the pool's only term ([`by_id`]).
    ById(String),
}

/// What the pool's desired AMI becomes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Desired becomes (or stays) `ami`.
    Take {
        /// The AMI.
        ami: Box<Ami>,
        /// The cluster's version it was resolved for.
        kubernetes_version: String,
        /// Set when the AMI comes from a release proven upstream.
        promoted: Option<ReleaseHow>,
        /// Why a candidate was taken rather than the terms' best (quarantined or too young).
        instead: Option<String>,
    },
    /// Keep the current desired AMI, for this reason (empty: nothing to wait for).
    Keep {
        /// Why.
        why: String,
    },
    /// Resolution failed (keep the current desired AMI, record the error).
    Failed {
        /// What failed.
        message: String,
    },
}

/// The answer of [`choose`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Choice {
    /// Decided.
    Is(Verdict),
    /// Quarantine this release (a promotion alarm fired while the pool rolled to it), then
    /// keep the desired AMI for `why`: the rotator rolls the pool back. The caller writes the
    /// entry; a failed write is a failed pass of the pool.
    Quarantine {
        /// The entry to write.
        quarantine: Box<Quarantine>,
        /// Why the pool keeps its desired AMI once it is written.
        why: String,
    },
    /// Read this, add it to the facts, ask again.
    Read(Need),
}

fn to_delta(d: std::time::Duration) -> TimeDelta {
    TimeDelta::from_std(d).unwrap_or(TimeDelta::MAX)
}

fn take(r: &Resolution, ami: &Ami, promoted: Option<ReleaseHow>) -> Verdict {
    Verdict::Take {
        ami: Box::new(ami.clone()),
        kubernetes_version: r.kubernetes_version.clone(),
        promoted,
        instead: None,
    }
}

fn keep(why: impl Into<String>) -> Verdict {
    Verdict::Keep { why: why.into() }
}

/// Decides what the pool's desired AMI becomes from `facts` at `now`, or names the fact it
/// needs first.
pub fn choose(facts: &Facts<'_>, now: DateTime<Utc>) -> Choice {
    match decide(facts, now) {
        Ok(Step::Verdict(v)) => Choice::Is(v),
        Ok(Step::Quarantine(quarantine, why)) => Choice::Quarantine { quarantine, why },
        Err(need) => Choice::Read(need),
    }
}

/// A decision, or the quarantine that precedes one.
enum Step {
    Verdict(Verdict),
    Quarantine(Box<Quarantine>, String),
}

fn decide(facts: &Facts<'_>, now: DateTime<Utc>) -> Result<Step, Need> {
    let policy = facts.policy;
    // The rotator rolls a pool off a quarantined desired AMI (launch template first, with a
    // rolled-back event); the watcher leaves that to it.
    if let Some(d) = facts.desired()
        && let Some(q) = facts.quarantined.covers(&d.id, &release_of(d))
    {
        return Ok(Step::Verdict(keep(format!(
            "the desired AMI {} ({}) is quarantined ({}); the rotator rolls the pool back",
            d.id,
            release_of(d),
            q.reason
        ))));
    }
    let min_age = policy
        .promotion
        .as_ref()
        .and_then(|p| p.min_age)
        .map(to_delta);
    let verdict = match policy.promotion.as_ref().and_then(|p| p.from.clone()) {
        Some(upstream) => match promote(facts, &upstream, now)? {
            Step::Verdict(v) => v,
            quarantine => return Ok(quarantine),
        },
        None => follow(facts, min_age, now)?,
    };
    let verdict = match verdict {
        Verdict::Take { ami, .. }
            if min_age.is_some_and(|m| !promotion::old_enough(&ami, m, now))
                && facts.desired().map(|d| &d.id) != Some(&ami.id) =>
        {
            keep(format!(
                "{} ({}) was created at {}: younger than promotion.minAge",
                ami.id,
                release_of(&ami),
                ami.creation_date
            ))
        }
        other => other,
    };
    // A pool with no desired AMI yet starts from what its group launches today.
    Ok(Step::Verdict(match verdict {
        Verdict::Keep { why } if facts.desired().is_none() => match group_start(facts)? {
            Some(Verdict::Take {
                ami,
                kubernetes_version,
                ..
            }) => Verdict::Take {
                ami,
                kubernetes_version,
                promoted: None,
                instead: None,
            },
            _ => Verdict::Keep { why },
        },
        other => other,
    }))
}

fn terms<'f>(facts: &'f Facts<'_>) -> Result<&'f Result<Resolution, String>, Need> {
    facts.terms.as_ref().ok_or(Need::Terms)
}

/// A pool without `promotion.from`: what its terms resolve to, unless quarantined or
/// younger than `min_age` (`promotion.minAge`); then the best candidate of the same
/// architecture and variant that is neither (the newest one old enough), unless the
/// current desired AMI ranks above it (a pool never moves back).
fn follow(
    facts: &Facts<'_>,
    min_age: Option<TimeDelta>,
    now: DateTime<Utc>,
) -> Result<Verdict, Need> {
    let r = match terms(facts)? {
        Ok(r) => r,
        Err(message) => {
            return Ok(Verdict::Failed {
                message: message.clone(),
            });
        }
    };
    let quarantined = facts.quarantined;
    let young = |a: &Ami| min_age.is_some_and(|m| !promotion::old_enough(a, m, now));
    let quarantine = quarantined.covers(&r.desired.id, &release_of(&r.desired));
    if quarantine.is_none() && !young(&r.desired) {
        return Ok(take(r, &r.desired, None));
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
    let current = facts.desired().map(|d| d.id.clone());
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
        return Ok(keep(why));
    }
    Ok(match best.and_then(|b| r.candidates.get(b)) {
        Some(best) if Some(&best.id) != current.as_ref() => Verdict::Take {
            ami: Box::new(best.clone()),
            kubernetes_version: r.kubernetes_version.clone(),
            promoted: None,
            instead: Some(why),
        },
        _ => keep(why),
    })
}

/// A pool with `promotion.from`: the newest release proven upstream, resolved for this pool.
fn promote(facts: &Facts<'_>, upstream: &str, now: DateTime<Utc>) -> Result<Step, Need> {
    let policy = facts.policy;
    let Some(promo) = &policy.promotion else {
        return Ok(Step::Verdict(keep("no promotion")));
    };
    let pool = policy.pool_id();
    let up = match facts
        .upstream
        .as_ref()
        .ok_or_else(|| Need::Upstream(upstream.to_string()))?
    {
        Ok(Some(up)) => up,
        Ok(None) => {
            return Ok(Step::Verdict(keep(format!(
                "upstream pool {upstream} has no state yet"
            ))));
        }
        Err(e) => {
            return Ok(Step::Verdict(Verdict::Failed {
                message: format!("cannot read upstream pool {upstream}: {e}"),
            }));
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
        match facts.alarms.as_ref().ok_or(Need::Alarms(names))? {
            Ok(states) => promotion::alarms_view(&promo.alarms, states),
            Err(e) => {
                return Ok(Step::Verdict(Verdict::Failed {
                    message: format!(
                        "cannot read promotion alarms ({e}); promotion waits (grant cloudwatch:DescribeAlarms)"
                    ),
                }));
            }
        }
    };
    let quarantined = facts.quarantined;
    // Alarms firing while this pool rolls to a release: that release is quarantined.
    if let (Some(rec), Some(alarm)) = (facts.record, alarms.firing.first())
        && let Some(desired) = &rec.desired
    {
        let release = release_of(desired);
        let settled = rec
            .ledger
            .iter()
            .any(|p| p.until.is_none() && p.release == release);
        let promoted_here = rec
            .releases
            .last()
            .is_some_and(|e| e.release == release && matches!(e.how, ReleaseHow::Promoted { .. }));
        if !settled && promoted_here && quarantined.covers(&desired.id, &release).is_none() {
            let q = Quarantine {
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
            let why = q.reason.clone();
            return Ok(Step::Quarantine(Box::new(q), why));
        }
    }
    let soak = to_delta(promo.soak.unwrap_or_default());
    let proof = promotion::ledger::best_proven(
        &up.ledger,
        soak,
        promo.soak_nodes,
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
            return Ok(Step::Verdict(keep(format!(
                "release {release} soaking in {upstream}: proven at {} if nothing breaks it",
                at.to_rfc3339()
            ))));
        }
        Proof::Waiting { why } => {
            return Ok(Step::Verdict(keep(format!(
                "waiting for {upstream}: {why}"
            ))));
        }
    };
    if facts.desired().is_some_and(|d| release_of(d) == release) {
        return Ok(Step::Verdict(keep("")));
    }
    Ok(Step::Verdict(
        match resolve_release(facts, &release, &image)? {
            Ok((r, ami)) => {
                if let Some(q) = quarantined.covers(&ami.id, &release) {
                    keep(format!("{} is quarantined: {}", ami.id, q.reason))
                } else {
                    take(
                        r,
                        ami,
                        Some(ReleaseHow::Promoted {
                            from: upstream.to_string(),
                            proven_at,
                        }),
                    )
                }
            }
            Err(why) => keep(format!(
                "release {release} is proven in {upstream} but {why}"
            )),
        },
    ))
}

/// The pool's policy with its alias `alias` pinned to `version`: what [`Need::Pinned`] resolves.
pub fn pinned(policy: &Policy, alias: &Alias, version: &str) -> Policy {
    Policy {
        ami_selector_terms: vec![SelectorTerm {
            alias: Some(Alias {
                family: alias.family,
                version: AliasVersion::Pinned(version.to_string()),
            }),
            ..SelectorTerm::default()
        }],
        ..policy.clone()
    }
}

/// The pool's policy with image `image` as its only term: what [`Need::ById`] resolves.
pub fn by_id(policy: &Policy, image: &str) -> Policy {
    Policy {
        ami_selector_terms: vec![SelectorTerm {
            id: Some(image.to_string()),
            ..SelectorTerm::default()
        }],
        ..policy.clone()
    }
}

/// The alias of the pool's terms, if one is an alias term.
pub fn alias_of(policy: &Policy) -> Option<&Alias> {
    policy
        .ami_selector_terms
        .iter()
        .find_map(|t| t.alias.as_ref())
}

/// This pool's AMI of `release` (with the resolution it is from): the pinned alias for alias
/// terms (so other Kubernetes versions and architectures get their own image of the release),
/// else the candidate of its own terms with that image id.
fn resolve_release<'f>(
    facts: &'f Facts<'_>,
    release: &Release,
    image: &str,
) -> Result<Result<(&'f Resolution, &'f Ami), String>, Need> {
    match (
        alias_of(facts.policy),
        promotion::release::pinned_version(release),
    ) {
        (Some(_), Some(version)) => {
            let resolved = facts
                .pinned
                .get(version)
                .ok_or_else(|| Need::Pinned(version.to_string()))?;
            Ok(match resolved {
                Ok(r) => Ok((r, &r.desired)),
                Err(e) => Err(format!("it does not resolve for this pool: {e}")),
            })
        }
        _ => {
            let r = match terms(facts)? {
                Ok(r) => r,
                Err(e) => return Ok(Err(format!("this pool's terms do not resolve: {e}"))),
            };
            let wanted = if release.is_image() {
                release.as_str()
            } else {
                image
            };
            Ok(r.candidates
                .iter()
                .find(|a| a.id == wanted)
                .map(|a| (r, a))
                .ok_or_else(|| format!("{wanted} is not among this pool's candidates")))
        }
    }
}

/// What the pool's group launches today, as its first desired AMI.
fn group_start(facts: &Facts<'_>) -> Result<Option<Verdict>, Need> {
    let Some(image) = facts.group_image.as_ref().ok_or(Need::GroupImage)? else {
        return Ok(None);
    };
    let r = match facts
        .by_id
        .as_ref()
        .ok_or_else(|| Need::ById(image.clone()))?
    {
        Ok(r) => r,
        Err(_) => return Ok(None),
    };
    if facts
        .quarantined
        .covers(&r.desired.id, &release_of(&r.desired))
        .is_some()
    {
        return Ok(None);
    }
    // An EKS-published image the pool's alias names: take it through the alias pinned to
    // its version, so its release is that version (promotion matches pools by release).
    if alias_of(facts.policy).is_some()
        && let Some(release) = promotion::release::version_in_name(&r.desired.name)
        && let Ok((pinned, ami)) = resolve_release(facts, &release, &r.desired.id)?
        && ami.id == r.desired.id
    {
        return Ok(Some(take(pinned, ami, None)));
    }
    Ok(Some(take(r, &r.desired, None)))
}

#[cfg(test)]
#[path = "choose_tests.rs"]
mod tests;
