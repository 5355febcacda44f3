//! Bad releases in the forecast ([`super::Failure`]): nodes that turn unhealthy some time after
//! joining, the release judged each pass by the product's own rule
//! ([`crate::promotion::health::assess`]), and the quarantine that follows: the pool rolls back
//! (or halts), every other pool on the release rolls back from the same minute, and no pool
//! takes it afterwards (see [`super::Indicted`]).

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

use super::engine::Pool;
use super::{Failure, Indicted, PoolForecast, ceil_minute, format_instant};
use crate::fleet::Lifecycle;
use crate::promotion::health::{self, NodeFacts, Observed, Verdict};

/// A release quarantined during the forecast: from when, on which pool's evidence, why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Quarantine {
    pub(super) at: DateTime<Utc>,
    pub(super) by: String,
    pub(super) why: String,
}

/// Quarantined releases by AMI.
pub(super) type Quarantines = BTreeMap<String, Quarantine>;

/// The earliest indictment of each AMI among the pools' own (the evidence of their own nodes),
/// the first pool in order on a tie: the quarantines every pool sees in the next round.
pub(super) fn quarantines(pools: &[PoolForecast]) -> Quarantines {
    let mut out = Quarantines::new();
    for p in pools {
        let Some(i) = p.indicted.as_ref().filter(|i| i.by == p.pool) else {
            continue;
        };
        if out.get(&i.ami).is_none_or(|q| i.at < q.at) {
            out.insert(
                i.ami.clone(),
                Quarantine {
                    at: i.at,
                    by: i.by.clone(),
                    why: i.why.clone(),
                },
            );
        }
    }
    out
}

/// What one pool's forecast knows of failures.
#[derive(Debug, Default)]
pub(super) struct Health {
    /// The releases that fail.
    failures: Vec<Failure>,
    /// Releases quarantined by other pools' evidence (a previous round's answer).
    known: Quarantines,
    /// The desired AMI before the pool's change (what a rollback goes back to).
    previous: Option<String>,
    /// When nodes that joined during the forecast did.
    joined: BTreeMap<String, DateTime<Utc>>,
    /// Nodes that joined on each failing AMI and will fail.
    failing: BTreeMap<String, u32>,
    /// `(when, instance)` a node turns unhealthy, in order of scheduling.
    scheduled: Vec<(DateTime<Utc>, String)>,
    /// Nodes unhealthy, since when.
    unhealthy: BTreeMap<String, DateTime<Utc>>,
    /// When the desired AMI last changed from another (the change, or a rollback): its release
    /// is under watch for `health.window` from then (repair holds its nodes).
    changed_at: Option<DateTime<Utc>>,
}

impl Health {
    /// For a pool whose desired AMI is `desired` and changes as `change` says.
    pub(super) fn new(
        failures: &[Failure],
        known: &Quarantines,
        desired: Option<&str>,
        change: Option<&(DateTime<Utc>, String)>,
    ) -> Health {
        Health {
            failures: failures.to_vec(),
            known: known.clone(),
            previous: change
                .and_then(|_| desired.map(str::to_string))
                .filter(|d| change.is_none_or(|(_, to)| to != d)),
            ..Health::default()
        }
    }

    fn failure(&self, ami: &str) -> Option<&Failure> {
        self.failures.iter().find(|f| f.ami == ami)
    }

    /// Instants after `t` at which the answer can change: a node turns unhealthy, its repair
    /// is due (`repair_after` later), another pool's quarantine begins.
    pub(super) fn events(
        &self,
        repair_after: Option<chrono::TimeDelta>,
    ) -> impl Iterator<Item = DateTime<Utc>> + '_ {
        let due = self
            .unhealthy
            .values()
            .filter_map(move |at| repair_after.and_then(|d| at.checked_add_signed(d)))
            .map(ceil_minute);
        self.scheduled
            .iter()
            .map(|(at, _)| ceil_minute(*at))
            .chain(self.known.values().map(|q| q.at))
            .chain(due)
    }
}

impl Pool {
    /// A node joined at `t` (a replacement now Ready): one of the first [`Failure::nodes`] on a
    /// failing AMI turns unhealthy [`Failure::after`] later.
    pub(super) fn joined(&mut self, instance: &str, t: DateTime<Utc>) {
        if self.health.failures.is_empty() {
            return;
        }
        self.health.joined.insert(instance.to_string(), t);
        let Some(ami) = self
            .snap
            .members
            .iter()
            .find(|m| m.instance_id == instance)
            .and_then(|m| m.image_id.clone())
        else {
            return;
        };
        let Some(f) = self.health.failure(&ami).cloned() else {
            return;
        };
        let count = self.health.failing.entry(ami).or_default();
        if *count < f.nodes {
            *count += 1;
            let at = t
                .checked_add_signed(f.after)
                .unwrap_or(DateTime::<Utc>::MAX_UTC);
            self.health.scheduled.push((at, instance.to_string()));
        }
    }

    /// What repair needs of the pass at `t`: the desired release is under watch (it changed
    /// from another within `health.window`): its nodes are evidence, not nodes to repair.
    pub(super) fn watch(&mut self, t: DateTime<Utc>) {
        if self.health.changed_at.is_none()
            && let Some((at, _)) = &self.desired_change
            && t >= *at
            && self.health.previous.is_some()
        {
            self.health.changed_at = Some(*at);
        }
        let watched = health::under_watch(
            true,
            self.health.changed_at,
            self.snap.policy.health.window,
            t,
        );
        self.snap.repair.watched_images = match (&self.snap.gates.desired_ami, watched) {
            (Some(d), true) => vec![d.clone()],
            _ => Vec::new(),
        };
    }

    /// A pending desired change to a release another pool already quarantined before the
    /// change is dropped: the pool never takes it.
    pub(super) fn drop_quarantined_change(&mut self) {
        let Some((at, ami)) = self.desired_change.clone() else {
            return;
        };
        let Some(q) = self.health.known.get(&ami).filter(|q| q.at <= at) else {
            return;
        };
        self.out.notes.push(format!(
            "never takes {ami}: indicted in {} at {} before this pool's desired AMI changes",
            q.by,
            format_instant(q.at)
        ));
        // Never within the forecast (as a promotion that never comes): not done.
        self.desired_change = Some((DateTime::<Utc>::MAX_UTC, ami));
        self.out.desired_change = None;
    }

    /// Health at the pass at `t`, before the planner: nodes due turn unhealthy (not Ready), the
    /// desired release is judged on the pool's nodes, and an indicted or quarantined desired
    /// release is rolled back. Returns whether anything changed.
    pub(super) fn health_pass(&mut self, t: DateTime<Utc>) -> bool {
        if self.health.failures.is_empty() {
            return false;
        }
        let mut acted = false;
        let due: Vec<(DateTime<Utc>, String)> = self
            .health
            .scheduled
            .iter()
            .filter(|(at, id)| *at <= t && !self.health.unhealthy.contains_key(id))
            .cloned()
            .collect();
        for (at, id) in due {
            if let Some(node) = self
                .snap
                .members
                .iter_mut()
                .find(|m| m.instance_id == id)
                .and_then(|m| m.node.as_mut())
            {
                // As a kubelet that stopped posting status: release health's evidence while
                // the release is under watch, repair's after its duration.
                node.ready = false;
                node.conditions = vec![crate::fleet::Condition {
                    kind: "Ready".into(),
                    status: "Unknown".into(),
                    reason: Some("NodeStatusUnknown".into()),
                    since: Some(at),
                }];
                acted = true;
            }
            self.health.unhealthy.insert(id, at);
        }
        let Some(desired) = self.snap.gates.desired_ami.clone() else {
            return acted;
        };
        if self.out.indicted.as_ref().is_some_and(|i| i.ami == desired) {
            return acted;
        }
        if let Some((why, label)) = self.judge(&desired) {
            let pool = self.out.pool.clone();
            self.roll_back(t, &desired, pool, why, label);
            return true;
        }
        if let Some(q) = self
            .health
            .known
            .get(&desired)
            .filter(|q| q.at <= t)
            .cloned()
        {
            let label = format!("indicted in {}", q.by);
            self.roll_back(t, &desired, q.by, q.why, label);
            return true;
        }
        acted
    }

    /// The product's verdict on `desired` from the pool's nodes now: the evidence and a label
    /// when indicted.
    fn judge(&self, desired: &str) -> Option<(String, String)> {
        let f = self.health.failure(desired)?;
        if !self.health.unhealthy.keys().any(|id| {
            self.snap
                .members
                .iter()
                .any(|m| &m.instance_id == id && m.image_id.as_deref() == Some(desired))
        }) {
            return None;
        }
        let nodes: Vec<Observed<'_>> = self
            .snap
            .members
            .iter()
            .filter(|m| m.lifecycle == Lifecycle::InService && m.node.is_some())
            .filter_map(|m| {
                let release = m.image_id.clone()?;
                let since = self.health.unhealthy.get(&m.instance_id).copied();
                Some(Observed {
                    release,
                    node: Some(NodeFacts {
                        instance_id: m.instance_id.clone(),
                        joined: self
                            .health
                            .joined
                            .get(&m.instance_id)
                            .copied()
                            .unwrap_or(m.launch_time),
                        unhealthy_since: since,
                        failing: since.map(|_| vec!["Ready".to_string()]).unwrap_or_default(),
                    }),
                    pods: None,
                })
            })
            .collect();
        let policy = &self.snap.policy.health;
        let Verdict::Indicted(evidence) = health::assess(desired, &nodes, policy) else {
            return None;
        };
        let after = crate::duration::format(f.after.to_std().unwrap_or_default());
        let label = format!(
            "indicted: {} nodes unhealthy after {after}",
            evidence.new.count
        );
        Some((evidence.message, label))
    }

    /// The release `ami` is indicted at `t`: back to the previous desired AMI, or halted when
    /// there is none.
    fn roll_back(&mut self, t: DateTime<Utc>, ami: &str, by: String, why: String, label: String) {
        let back = self.health.previous.clone().filter(|p| p != ami);
        let label = match &back {
            Some(p) => {
                self.snap.gates.desired_ami = Some(p.clone());
                self.desired_change = None;
                self.health.changed_at = Some(t);
                self.final_desired = Some(p.clone());
                format!("{label}; rolled back to {p}")
            }
            None => {
                self.snap.gates.halted =
                    Some(format!("release {ami} indicted: nothing to go back to"));
                format!("{label}; halted (nothing to go back to)")
            }
        };
        self.out.indicted = Some(Indicted {
            ami: ami.to_string(),
            at: t,
            by,
            why,
            rolled_back_to: back,
            unhealthy_left: 0,
            label,
            done_before: self.all_desired_since,
        });
        self.all_desired_since = None;
    }

    /// At the end: how many unhealthy nodes are left on the indicted AMI.
    pub(super) fn count_unhealthy_left(&mut self) {
        let Some(i) = self.out.indicted.as_mut() else {
            return;
        };
        let left = self
            .snap
            .members
            .iter()
            .filter(|m| m.image_id.as_deref() == Some(i.ami.as_str()))
            .filter(|m| self.health.unhealthy.contains_key(&m.instance_id))
            .count();
        i.unhealthy_left = u32::try_from(left).unwrap_or(u32::MAX);
    }
}
