//! Staged promotion of AMI releases across pools (test -> preprod -> prod): releases, the soak
//! ledger that proves a release upstream, quarantine of bad images and releases, and rollback
//! of a pool whose desired AMI is quarantined. Pure: state and time are passed in.
//!
//! - A pool with `promotion.from` moves its desired AMI only to a release proven upstream
//!   ([`ledger::best_proven`]): every node of the upstream pool Ready on it continuously for
//!   `soak`, the upstream not halted, the release not quarantined, no promotion alarm firing and
//!   none changing state during the soak.
//! - `promotion.minAge` (with or without `from`): only images created at least that long ago.
//! - A quarantined image or release is never a candidate, in any pool; a pool whose desired AMI
//!   is quarantined rolls back to [`crate::state::PoolRecord::rollback_target`] (normally the previous desired AMI).

pub mod health;
pub mod ledger;
pub mod quarantine;
pub mod release;
pub mod withdrawal;

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Utc};

use crate::ami::resolve::Ami;
pub use ledger::{Alarms, Proof, SoakPeriod};
pub use quarantine::{Cause, Quarantine, Quarantined, Target};
pub use release::{Release, release_of};

/// True when `ami` was created at least `min_age` before `now` (an unreadable creation date
/// counts as too young: fail closed).
pub fn old_enough(ami: &Ami, min_age: chrono::TimeDelta, now: DateTime<Utc>) -> bool {
    DateTime::parse_from_rfc3339(&ami.creation_date)
        .map(|c| now - c.with_timezone(&Utc) >= min_age)
        .unwrap_or(false)
}

/// What is wrong with a pool's promotion chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChainProblem {
    /// `promotion.from` names the pool itself.
    ItsOwnUpstream {
        /// The pool.
        pool: String,
    },
    /// `promotion.from` names no pool of the set.
    UnknownUpstream {
        /// The upstream named.
        upstream: String,
        /// The pools of the set.
        known: Vec<String>,
    },
    /// Following `promotion.from` comes back to a pool already seen.
    Cycle {
        /// The pools along the way, the repeated one last.
        path: Vec<String>,
    },
}

impl std::fmt::Display for ChainProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ChainProblem::ItsOwnUpstream { pool } => write!(
                f,
                "promotion.from: {pool} promotes from itself; expected another pool (cluster/name)"
            ),
            ChainProblem::UnknownUpstream { upstream, known } => write!(
                f,
                "promotion.from: unknown upstream pool {upstream:?}; expected one of {}",
                known.join(", ")
            ),
            ChainProblem::Cycle { path } => write!(
                f,
                "promotion.from: the promotion chain is a cycle ({}); expected a chain that ends at a pool without promotion.from",
                path.join(" -> ")
            ),
        }
    }
}

/// Problems of the promotion chains of a set of pools (`pool id -> promotion.from`), each on
/// the pool it is reported for: an upstream that is no pool of the set, a pool promoting from
/// itself, cycles.
pub fn chain_problems(from: &BTreeMap<String, Option<String>>) -> Vec<(String, ChainProblem)> {
    let mut out = Vec::new();
    for (pool, upstream) in from {
        let Some(up) = upstream else { continue };
        if up == pool {
            out.push((
                pool.clone(),
                ChainProblem::ItsOwnUpstream { pool: pool.clone() },
            ));
            continue;
        }
        if !from.contains_key(up) {
            out.push((
                pool.clone(),
                ChainProblem::UnknownUpstream {
                    upstream: up.clone(),
                    known: from.keys().cloned().collect(),
                },
            ));
            continue;
        }
        // Follow the chain; a pool seen twice is a cycle.
        let mut seen = BTreeSet::from([pool.as_str()]);
        let mut path = vec![pool.as_str()];
        let mut at = up.as_str();
        loop {
            path.push(at);
            if !seen.insert(at) {
                out.push((
                    pool.clone(),
                    ChainProblem::Cycle {
                        path: path.iter().map(|p| p.to_string()).collect(),
                    },
                ));
                break;
            }
            match from.get(at).and_then(Option::as_ref) {
                Some(next) if from.contains_key(next) => at = next,
                _ => break,
            }
        }
    }
    out
}

/// The image every node of the pool runs, Ready, when the pool is fully on its desired AMI:
/// every member in service with a Ready node on the desired AMI, at least as many as the
/// group's desired capacity, no rotation of the pool in flight, the pool not halted.
pub fn fully_on(snapshot: &crate::plan::Snapshot) -> Option<&str> {
    let desired = snapshot.gates.desired_ami.as_deref()?;
    if snapshot.gates.halted.is_some() || snapshot.members.is_empty() {
        return None;
    }
    let pool = snapshot.policy.pool_id();
    if snapshot
        .rotations
        .iter()
        .any(|r| r.pool == pool && r.in_flight() && !r.waiting())
    {
        return None;
    }
    let all_on = snapshot
        .members
        .iter()
        .all(|m| m.is_ready() && m.image_id.as_deref() == Some(desired));
    let enough = i32::try_from(snapshot.members.len()).unwrap_or(i32::MAX)
        >= snapshot.group.desired_capacity;
    (all_on && enough).then_some(desired)
}

/// What a pool whose desired AMI (or pin) is quarantined does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rollback {
    /// Its desired AMI becomes `target`; the halt is lifted when the quarantine came from this
    /// pool (its failed rotation or its alarm): the rollback is what the halt waited for.
    To {
        /// The AMI to go back to.
        target: Ami,
        /// The quarantine's reason.
        reason: String,
        /// Lift the pool's halt.
        lift_halt: bool,
    },
    /// The pin is quarantined: drop it (the terms' desired AMI applies again).
    Unpin {
        /// The quarantine's reason.
        reason: String,
    },
    /// Quarantined, and nothing to go back to: the pool halts and says what to do.
    Nowhere {
        /// What to do.
        reason: String,
    },
}

/// One CloudWatch alarm's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlarmState {
    /// Alarm name.
    pub name: String,
    /// In ALARM now.
    pub firing: bool,
    /// When its state last changed.
    pub updated: Option<DateTime<Utc>>,
}

/// CloudWatch alarm reads (the promotion alarms of a pool).
#[async_trait::async_trait]
pub trait AlarmStates: Send + Sync {
    /// The states of the alarms named (names, not ARNs). An alarm that does not exist is
    /// missing from the answer.
    async fn states(&self, names: &[String]) -> Result<Vec<AlarmState>, crate::port::PortError>;
}

/// The [`Alarms`] view of a pool's promotion alarms (`wanted`, names or ARNs) from their
/// states: an alarm that does not exist counts as firing (fail closed: a typo must not let a
/// release through).
pub fn alarms_view(wanted: &[String], states: &[AlarmState]) -> Alarms {
    let mut view = Alarms::default();
    for w in wanted {
        let name = crate::policy::alarm_name(w);
        match states.iter().find(|s| s.name == name) {
            Some(s) if s.firing => view.firing.push(name.to_string()),
            Some(s) => view.last_change = view.last_change.max(s.updated),
            None => view.firing.push(format!("{name} (no such alarm)")),
        }
    }
    view
}

#[cfg(test)]
mod tests;
