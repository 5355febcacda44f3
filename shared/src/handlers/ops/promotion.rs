//! Promotion as operators see it: each candidate release's soak progress in a pool's upstream
//! (by the same rules the ami-watcher proves releases with, [`promotion::ledger::best_proven`]),
//! the promotion chains in order, and a release's journey through them
//! (`{"action": "promotion", "release"}`). The views are pure functions of records, alarm
//! states, quarantine and time; the async parts only read.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, TimeDelta, Utc};
use serde::Serialize;
use serde_json::{Value, json};

use super::{instant, internal};
use crate::handlers::HandlerError;
use crate::policy::{Policy, Promotion};
use crate::promotion::AlarmStates;
use crate::promotion::{self, Alarms, Quarantine, Quarantined, Release, SoakPeriod, Target};
use crate::rotation::Step;
use crate::state::Repository;
use crate::state::{PoolRecord, ReleaseHow};

/// Where a candidate release stands in the upstream pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum SoakState {
    /// Ran on every upstream node, healthy, for the whole soak: downstream pools may take it.
    Proven,
    /// The upstream runs it, clean so far: proven at `provenAt` if nothing breaks it.
    Soaking,
    /// The upstream stopped running it on all its nodes before the soak completed.
    Ended,
    /// Held back (`blockedBy`): quarantined, upstream halted, promotion alarm.
    Blocked,
}

/// One candidate release's soak progress in the upstream pool (its latest period there).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Candidate {
    /// The release.
    pub release: Release,
    /// The image the upstream ran it as.
    pub image: String,
    /// When the upstream's last node became Ready on it.
    pub upstream_on_since: DateTime<Utc>,
    /// When the upstream stopped running it on all its nodes; `None` while it does.
    pub until: Option<DateTime<Utc>>,
    /// Where the soak counts from: `upstreamOnSince`, or a later promotion alarm state change.
    pub soak_from: DateTime<Utc>,
    /// Where it stands.
    pub state: SoakState,
    /// Proven: when the soak completed; soaking: when it will if nothing breaks it.
    pub proven_at: Option<DateTime<Utc>>,
    /// Soaking: how much of the soak is left.
    pub soak_remaining: Option<String>,
    /// Why it is not proven (blocked or ended).
    pub blocked_by: Vec<String>,
    /// Rotations of the upstream towards this image that failed (recorded ones).
    pub failed_rotations: usize,
}

/// The upstream pool as the soak view needs it.
#[derive(Debug, Clone, Default)]
pub struct Upstream<'a> {
    /// Its soak ledger.
    pub ledger: &'a [SoakPeriod],
    /// Its halt message, if halted.
    pub halted: Option<&'a str>,
    /// Failed rotations by target image.
    pub failed: BTreeMap<String, usize>,
}

/// What gates a proof for the downstream pool.
#[derive(Debug, Clone)]
pub struct Gates<'a> {
    /// The downstream's `promotion.soak`.
    pub soak: TimeDelta,
    /// Its promotion alarms.
    pub alarms: &'a Alarms,
    /// Set when the alarms could not be read (nothing is proven then).
    pub alarm_error: Option<&'a str>,
    /// Quarantine in force.
    pub quarantined: &'a Quarantined,
}

fn remaining(d: TimeDelta) -> String {
    crate::duration::format(d.to_std().unwrap_or_default())
}

/// Each release of the upstream's ledger, newest (latest period) first, with its soak progress:
/// the rules of [`promotion::ledger::best_proven`] per period (quarantined, open while halted
/// and any alarm firing block; the soak counts from the later of the period's start and the
/// last alarm state change). A release is shown by its newest period that proves it, else by
/// its latest period.
pub fn candidates(up: &Upstream<'_>, gates: &Gates<'_>, now: DateTime<Utc>) -> Vec<Candidate> {
    let mut order: Vec<&Release> = Vec::new();
    for p in up.ledger.iter().rev() {
        if !order.contains(&&p.release) {
            order.push(&p.release);
        }
    }
    order
        .into_iter()
        .filter_map(|release| {
            let mut periods = up.ledger.iter().rev().filter(|p| p.release == *release);
            let latest = periods.next()?;
            let first = period(up, gates, latest, now);
            if first.state == SoakState::Proven {
                return Some(first);
            }
            Some(
                periods
                    .map(|p| period(up, gates, p, now))
                    .find(|c| c.state == SoakState::Proven)
                    .unwrap_or(first),
            )
        })
        .collect()
}

/// The soak progress of one period.
fn period(up: &Upstream<'_>, gates: &Gates<'_>, p: &SoakPeriod, now: DateTime<Utc>) -> Candidate {
    let open = p.until.is_none();
    let soak_from = match gates.alarms.last_change {
        Some(c) if c > p.since => c,
        _ => p.since,
    };
    let end = p.until.unwrap_or(now);
    let mut blocked_by = Vec::new();
    if let Some(q) = gates.quarantined.covers(&p.image, &p.release) {
        blocked_by.push(format!("quarantined ({}): {}", q.target, q.reason));
    }
    if let (true, Some(h)) = (open, up.halted) {
        blocked_by.push(format!("the upstream pool is halted: {h}"));
    }
    if !gates.alarms.firing.is_empty() {
        blocked_by.push(format!(
            "promotion alarm(s) in ALARM: {}",
            gates.alarms.firing.join(", ")
        ));
    }
    if let Some(e) = gates.alarm_error {
        blocked_by.push(format!("promotion alarms cannot be read: {e}"));
    }
    let complete = end - soak_from >= gates.soak;
    let (state, proven_at, soak_remaining) = if !blocked_by.is_empty() {
        (SoakState::Blocked, None, None)
    } else if complete {
        (SoakState::Proven, Some(soak_from + gates.soak), None)
    } else if open {
        let at = soak_from + gates.soak;
        (SoakState::Soaking, Some(at), Some(remaining(at - now)))
    } else {
        blocked_by.push(format!(
            "the upstream ran it on all its nodes for {} (until {}), less than the soak of {}",
            remaining(end - soak_from),
            instant(end),
            remaining(gates.soak)
        ));
        (SoakState::Ended, None, None)
    };
    Candidate {
        release: p.release.clone(),
        image: p.image.clone(),
        upstream_on_since: p.since,
        until: p.until,
        soak_from,
        state,
        proven_at,
        soak_remaining,
        blocked_by,
        failed_rotations: up.failed.get(&p.image).copied().unwrap_or(0),
    }
}

/// Pools in chain order (`pool -> promotion.from`): each chain from its first pool (no
/// upstream, or an upstream that is no pool) down, downstream pools in name order, with their
/// depth (0 for the first). Pools on a cycle (an invalid policy) come last, at depth 0.
pub fn chain_order(from: &BTreeMap<String, Option<String>>) -> Vec<(String, usize)> {
    let mut children: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    let mut roots = Vec::new();
    for (pool, up) in from {
        match up
            .as_deref()
            .filter(|u| from.contains_key(*u) && *u != pool)
        {
            Some(u) => children.entry(u).or_default().push(pool),
            None => roots.push(pool.as_str()),
        }
    }
    let mut out = Vec::new();
    let mut seen = BTreeSet::new();
    let mut stack: Vec<(&str, usize)> = roots.into_iter().rev().map(|r| (r, 0)).collect();
    while let Some((pool, depth)) = stack.pop() {
        if !seen.insert(pool) {
            continue;
        }
        out.push((pool.to_string(), depth));
        if let Some(kids) = children.get(pool) {
            stack.extend(kids.iter().rev().map(|k| (*k, depth + 1)));
        }
    }
    for pool in from.keys() {
        if !seen.contains(pool.as_str()) {
            out.push((pool.clone(), 0));
        }
    }
    out
}

/// One pool's part of a release's journey.
pub fn stage(
    record: Option<&PoolRecord>,
    release: &Release,
    upstream: Option<&Candidate>,
) -> Value {
    let empty = PoolRecord::default();
    let r = record.unwrap_or(&empty);
    let desired = r
        .desired
        .as_ref()
        .is_some_and(|a| promotion::release_of(a) == *release);
    let periods: Vec<&SoakPeriod> = r.ledger.iter().filter(|p| p.release == *release).collect();
    let mut images: Vec<String> = r
        .history
        .iter()
        .filter(|h| promotion::release_of(&h.ami) == *release)
        .map(|h| h.ami.id.clone())
        .collect();
    images.dedup();
    let mut promoted = Vec::new();
    let mut rolled_back = Vec::new();
    let mut last_left = false;
    for e in &r.releases {
        match &e.how {
            ReleaseHow::Promoted { from, proven_at } if e.release == *release => {
                promoted.push(json!({"at": instant(e.at), "image": e.image, "from": from, "provenAt": instant(*proven_at)}));
                last_left = false;
            }
            ReleaseHow::RolledBack {
                from_release,
                reason,
            } if from_release == release => {
                rolled_back.push(json!({"at": instant(e.at), "to": e.image, "toRelease": e.release, "reason": reason}));
                last_left = true;
            }
            _ if e.release == *release => last_left = false,
            _ => {}
        }
    }
    let state = if desired {
        if periods.last().is_some_and(|p| p.until.is_none()) {
            "running"
        } else {
            "rollingOut"
        }
    } else if last_left {
        "rolledBack"
    } else if !periods.is_empty() || !images.is_empty() {
        "superseded"
    } else {
        match upstream.map(|c| c.state) {
            Some(SoakState::Proven) => "provenUpstream",
            Some(SoakState::Soaking) => "soakingUpstream",
            Some(SoakState::Blocked) => "blockedUpstream",
            Some(SoakState::Ended) => "notProvenUpstream",
            None => "notReached",
        }
    };
    json!({
        "state": state,
        "desired": desired,
        "desiredSince": if desired { r.desired_changed_at.map(instant) } else { None },
        "images": images,
        "fullyOn": periods.iter().map(|p| json!({"image": p.image, "since": instant(p.since), "until": p.until.map(instant)})).collect::<Vec<_>>(),
        "promoted": promoted,
        "rolledBack": rolled_back,
        "upstream": upstream,
        "wait": if desired { None } else { r.promotion_wait.clone() },
    })
}

/// Quarantine entries that concern `release`: the release itself, or an image of it any pool
/// knows (`images`).
pub fn concerning<'a>(
    quarantined: &'a Quarantined,
    release: &Release,
    images: &BTreeSet<String>,
) -> Vec<&'a Quarantine> {
    quarantined
        .0
        .iter()
        .filter(|q| match &q.target {
            Target::Release(r) => r == release,
            Target::Ami(a) => images.contains(a) || a == release.as_str(),
        })
        .collect()
}

/// Where releases stand in the pools' promotion chains (read only): the pools' records and
/// rotations, and the promotion alarms.
#[derive(Clone, Copy)]
pub(super) struct Promotions<'a> {
    /// The state table.
    pub state: &'a Repository,
    /// CloudWatch alarm states of the promotion alarms (the cell's own place).
    pub alarms: &'a dyn AlarmStates,
    /// The members' ports: a pool of another place reads its alarms in its account.
    pub members: &'a dyn crate::ports::Members,
}

/// The port a pool's promotion alarms are read through (its place's), or why it cannot be had.
pub(super) type AlarmPort<'a> = Result<&'a dyn AlarmStates, String>;

impl Promotions<'_> {
    /// The alarm view of a pool's promotion alarms, or why it cannot be read: read through
    /// `alarms`, the port of the pool's place.
    async fn alarm_view(promo: &Promotion, alarms: AlarmPort<'_>) -> (Alarms, Option<String>) {
        if promo.alarms.is_empty() {
            return (Alarms::default(), None);
        }
        let alarms = match alarms {
            Ok(a) => a,
            Err(e) => return (Alarms::default(), Some(e)),
        };
        let names: Vec<String> = promo
            .alarms
            .iter()
            .map(|a| crate::policy::alarm_name(a).to_string())
            .collect();
        match alarms.states(&names).await {
            Ok(states) => (promotion::alarms_view(&promo.alarms, &states), None),
            Err(e) => (Alarms::default(), Some(e.to_string())),
        }
    }

    /// The ports of `policy`'s place when its upstream view reads promotion alarms there:
    /// `Ok(None)` for the cell's own place (the cell's alarms) or a pool whose view reads none,
    /// `Err` why the member's ports cannot be had.
    async fn member_for_alarms(
        &self,
        policy: &Policy,
    ) -> Result<Option<crate::ports::Ports>, String> {
        let reads =
            (policy.promotion.as_ref()).is_some_and(|p| p.from.is_some() && !p.alarms.is_empty());
        match policy.place.as_ref().filter(|_| reads) {
            None => Ok(None),
            Some(place) => self.members.ports(place).await.map_err(|e| e.to_string()),
        }
    }

    /// Failed rotations of `pool` by target image.
    async fn failed_rotations(&self, pool: &str) -> Result<BTreeMap<String, usize>, String> {
        let rotations = (self.state)
            .rotations(pool)
            .await
            .map_err(|e| format!("cannot read the rotations of {pool}: {e}"))?;
        let mut out = BTreeMap::new();
        for v in rotations {
            let r = v.value;
            if let (Step::Failed, Some(target)) = (r.step, r.target) {
                *out.entry(target).or_default() += 1;
            }
        }
        Ok(out)
    }

    /// The soak progress of every candidate release of `policy`'s upstream, and what the
    /// watcher would take now. `None` without `promotion.from`.
    pub(super) async fn upstream_view(
        &self,
        policy: &Policy,
        alarms: AlarmPort<'_>,
        quarantined: &Quarantined,
        now: DateTime<Utc>,
        problems: &mut Vec<String>,
    ) -> Option<(String, Option<PoolRecord>, Vec<Candidate>, promotion::Proof)> {
        let promo = policy.promotion.as_ref()?;
        let upstream = promo.from.clone()?;
        let store = &self.state;
        let record = match store.pool(&upstream).await {
            Ok(r) => r,
            Err(e) => {
                problems.push(format!("cannot read upstream pool {upstream}: {e}"));
                None
            }
        };
        // The pool's alarms are its account's: read through its place's port.
        let (alarms, alarm_error) = Self::alarm_view(promo, alarms).await;
        let failed = self.failed_rotations(&upstream).await.unwrap_or_else(|e| {
            problems.push(e);
            BTreeMap::new()
        });
        let empty = PoolRecord::default();
        let r = record.as_ref().unwrap_or(&empty);
        let up = Upstream {
            ledger: &r.ledger,
            halted: r.halted.as_ref().map(|h| h.message.as_str()),
            failed,
        };
        let gates = Gates {
            soak: TimeDelta::from_std(promo.soak.unwrap_or_default()).unwrap_or(TimeDelta::MAX),
            alarms: &alarms,
            alarm_error: alarm_error.as_deref(),
            quarantined,
        };
        let list = candidates(&up, &gates, now);
        let proof = match &alarm_error {
            Some(e) => promotion::Proof::Waiting {
                why: format!("promotion alarms cannot be read: {e}"),
            },
            None => promotion::ledger::best_proven(
                &r.ledger,
                gates.soak,
                promo.soak_nodes,
                &alarms,
                quarantined,
                r.halted.is_some(),
                now,
            ),
        };
        Some((upstream, record, list, proof))
    }

    /// The `promotion` section of a pool's status: its upstream, each candidate release's soak
    /// progress there and what the watcher would take (`next`); `null` without `promotion`.
    /// For a pool with `minAge` and no `from`, `next` is `{"state": "waiting", "why"}` while
    /// the watcher holds a newer image back (`wait`, the record's `promotionWait`), else
    /// `{"state": "current"}`.
    pub(super) async fn promotion_status(
        &self,
        policy: &Policy,
        alarms: AlarmPort<'_>,
        quarantined: &Quarantined,
        wait: Option<&str>,
        now: DateTime<Utc>,
        problems: &mut Vec<String>,
    ) -> Value {
        let Some(promo) = &policy.promotion else {
            return Value::Null;
        };
        let fmt = |d: Option<std::time::Duration>| d.map(crate::duration::format);
        let mut out = json!({
            "from": promo.from,
            "soak": fmt(promo.soak),
            "alarms": promo.alarms,
            "minAge": fmt(promo.min_age),
            "upstream": null,
            "candidates": [],
            "next": null,
        });
        if promo.from.is_none() {
            out["next"] = match wait {
                Some(why) => json!({"state": "waiting", "why": why}),
                None => json!({"state": "current"}),
            };
        }
        if let Some((upstream, record, list, proof)) = self
            .upstream_view(policy, alarms, quarantined, now, problems)
            .await
        {
            let fully_on = record
                .as_ref()
                .and_then(|r| r.ledger.iter().rev().find(|p| p.until.is_none()))
                .map(
                    |p| json!({"release": p.release, "image": p.image, "since": instant(p.since)}),
                );
            out["upstream"] = json!({
                "pool": upstream,
                "known": record.is_some(),
                "halted": record.as_ref().and_then(|r| r.halted.clone()),
                "fullyOn": fully_on,
            });
            out["candidates"] = json!(list);
            out["next"] = json!(proof);
        }
        out
    }
}

/// `promotion`: for every pool in chain order, where `release` stands.
pub(super) async fn journey(
    ops: Promotions<'_>,
    policies: &BTreeMap<String, Policy>,
    release: &Release,
    now: DateTime<Utc>,
) -> Result<Value, HandlerError> {
    let quarantined = ops
        .state
        .quarantine()
        .await
        .map_err(|e| internal(format!("cannot read the quarantine: {e}")))?;
    let records = super::records(ops.state, policies).await?;
    let from: BTreeMap<String, Option<String>> = policies
        .iter()
        .map(|(id, p)| {
            (
                id.clone(),
                p.promotion.as_ref().and_then(|x| x.from.clone()),
            )
        })
        .collect();
    let mut problems = Vec::new();
    let mut pools = Vec::new();
    let mut images = BTreeSet::new();
    for (pool, depth) in chain_order(&from) {
        let Some(policy) = policies.get(&pool) else {
            continue;
        };
        let record = records.get(&pool).and_then(Option::as_ref);
        // Each pool's alarms through its own place's ports.
        let member = ops.member_for_alarms(policy).await;
        let alarms = match &member {
            Ok(m) => Ok(m.as_ref().map_or(ops.alarms, |p| p.alarms.as_ref())),
            Err(e) => Err(e.clone()),
        };
        let upstream = ops
            .upstream_view(policy, alarms, &quarantined, now, &mut problems)
            .await
            .and_then(|(_, _, list, _)| list.into_iter().find(|c| c.release == *release));
        images.extend(upstream.iter().map(|c| c.image.clone()));
        let mut v = stage(record, release, upstream.as_ref());
        images.extend(
            v["images"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(str::to_string),
        );
        if let Some(o) = v.as_object_mut() {
            o.insert("pool".into(), json!(pool));
            o.insert("from".into(), json!(from.get(&pool).cloned().flatten()));
            o.insert("depth".into(), json!(depth));
        }
        pools.push(v);
    }
    let quarantine = concerning(&quarantined, release, &images);
    Ok(json!({
        "release": release,
        "at": instant(now),
        "quarantined": quarantine,
        "pools": pools,
        "problems": problems,
    }))
}

#[cfg(test)]
mod tests;
