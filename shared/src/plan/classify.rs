//! Classify: the pool's rotation records and members as the planner needs them: in flight,
//! finished, queued (operator rotations not released yet), foreign (recorded for another
//! pool), launching replacements, and instances listed twice.

use std::collections::{BTreeMap, BTreeSet};

use super::Snapshot;
use super::{Decision, DecisionKind};
use crate::fleet::Member;
use crate::rotation::Rotation;

/// The snapshot, classified.
pub(super) struct Classified<'a> {
    /// In-flight rotations of this pool (not queued), by instance; the latest record wins.
    pub in_flight: BTreeMap<&'a str, &'a Rotation>,
    /// Instances with an in-flight rotation recorded for another pool.
    pub foreign: BTreeSet<&'a str>,
    /// Finished rotations of this pool, by instance.
    pub finished: BTreeMap<&'a str, &'a Rotation>,
    /// Queued operator rotations of this pool still waiting for release, by instance.
    pub queued: BTreeMap<&'a str, &'a Rotation>,
    /// Launching replacements of in-flight rotations (recorded, or absent from a surge baseline).
    pub replacements: BTreeSet<&'a str>,
    /// Members sorted by instance id.
    pub members: Vec<&'a Member>,
    /// Instance ids listed more than once.
    pub duplicates: Vec<&'a str>,
}

/// Classifies `snapshot` for pool `pool`, adding a decision for each anomaly.
pub(super) fn classify<'a>(
    snapshot: &'a Snapshot,
    pool: &str,
    decisions: &mut Vec<Decision>,
) -> Classified<'a> {
    // Rotations, oldest first per instance so the latest record wins below.
    let mut rotations: Vec<&Rotation> = snapshot.rotations.iter().collect();
    rotations.sort_by(|a, b| {
        (
            a.instance_id.as_str(),
            a.created_at,
            a.step_at,
            a.pool.as_str(),
        )
            .cmp(&(
                b.instance_id.as_str(),
                b.created_at,
                b.step_at,
                b.pool.as_str(),
            ))
    });
    let mut c = Classified {
        in_flight: BTreeMap::new(),
        foreign: BTreeSet::new(),
        finished: BTreeMap::new(),
        queued: BTreeMap::new(),
        replacements: BTreeSet::new(),
        members: snapshot.members.iter().collect(),
        duplicates: Vec::new(),
    };
    for r in rotations {
        let id = r.instance_id.as_str();
        if r.waiting() {
            // Queued operator rotations are not disrupting until released.
            if r.pool == pool {
                c.queued.insert(id, r);
            }
            continue;
        }
        if r.pool != pool {
            if r.in_flight() && c.foreign.insert(id) {
                decisions.push(Decision::instance(
                    DecisionKind::Anomaly,
                    id,
                    format!(
                        "{id} has an in-flight rotation recorded for pool {} in this pool's \
                         snapshot: counted as disrupting and not started, but not advanced here",
                        r.pool
                    ),
                ));
            }
        } else if r.in_flight() {
            if c.in_flight.insert(id, r).is_some() {
                decisions.push(Decision::instance(
                    DecisionKind::Anomaly,
                    id,
                    format!("{id} has several in-flight rotation records: advancing the latest"),
                ));
            }
        } else {
            c.finished.insert(id, r);
        }
    }
    for r in c.in_flight.values() {
        if let Some(rep) = &r.replacement {
            c.replacements.insert(rep.as_str());
        } else if let Some(surge) = &r.surge {
            for m in &snapshot.members {
                if !surge.baseline.contains(&m.instance_id) {
                    c.replacements.insert(m.instance_id.as_str());
                }
            }
        }
    }
    c.members.sort_by(|a, b| a.instance_id.cmp(&b.instance_id));
    c.duplicates = c
        .members
        .windows(2)
        .filter(|w| w[0].instance_id == w[1].instance_id)
        .map(|w| w[0].instance_id.as_str())
        .collect();
    c.duplicates.dedup();
    c
}
