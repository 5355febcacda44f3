//! The forecast of one pool: passes of the real planner over a virtual fleet, jumping from one
//! instant where the planner's answer can change to the next (see the module documentation).

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, TimeDelta, Utc};

use super::blocked::{self, Wait};
use super::failures::{Health, Quarantines};
use super::windows;
use super::{
    Blocked, ManagedStart, PoolForecast, PoolStart, RotationSpan, Settings, ceil_minute,
    ready_member,
};
use crate::fleet::Lifecycle;
use crate::managed::{ManagedUpdate, Phase};
use crate::plan::Snapshot;
use crate::plan::managed_update::{NodeGroupState, UpdateAction, plan_managed};
use crate::plan::{self, Action, maintenance};
use crate::rotation::{Rotation, RotationReason, Step};

/// How passes are spaced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Stepping {
    /// From one instant where something can change to the next.
    Events,
    /// Every minute (the reference the tests compare [`Stepping::Events`] with).
    #[cfg(test)]
    EveryMinute,
}

/// The id of the `serial`-th synthetic instance (`i-` and 17 hex digits, as EC2's).
pub(super) fn instance_id(serial: u64) -> String {
    format!("i-{serial:017x}")
}

/// A node-level rotation in flight.
pub(super) struct Running {
    pub(super) instance: String,
    pub(super) start: DateTime<Utc>,
    pub(super) end: DateTime<Utc>,
    /// The image its replacement comes up on (what the group launched at the start).
    pub(super) image: Option<String>,
    /// Its replacement already in the group (live forecasts), made Ready at done.
    pub(super) replacement: Option<String>,
    /// Its entry in the forecast's rotations.
    pub(super) out: usize,
}

/// The running wave of a managed node group update.
pub(super) struct Wave {
    pub(super) nodes: Vec<String>,
    /// Their entries in the forecast's rotations.
    pub(super) out: Vec<usize>,
    pub(super) start: DateTime<Utc>,
    pub(super) end: DateTime<Utc>,
}

pub(super) struct Managed {
    pub(super) status: String,
    pub(super) update: Option<ManagedUpdate>,
    pub(super) wave: Option<Wave>,
    pub(super) updates: u32,
}

pub(super) struct Pool {
    pub(super) snap: Snapshot,
    pub(super) managed: Option<Managed>,
    pub(super) running: Vec<Running>,
    pub(super) desired_change: Option<(DateTime<Utc>, String)>,
    pub(super) final_desired: Option<String>,
    /// Instants (on whole minutes) where a budget of Drifted or Expired changes.
    pub(super) budget_changes: Vec<DateTime<Utc>>,
    pub(super) serial: u64,
    pub(super) rotation: TimeDelta,
    pub(super) out: PoolForecast,
    pub(super) all_desired_since: Option<DateTime<Utc>>,
    pub(super) last_block: BTreeMap<RotationReason, usize>,
    /// Failures and quarantines ([`super::Failure`]).
    pub(super) health: Health,
}

/// Forecasts one pool, no release quarantined by another pool.
#[cfg(test)]
pub(super) fn run(start: PoolStart, settings: &Settings, stepping: Stepping) -> PoolForecast {
    run_with(start, settings, stepping, &Quarantines::new())
}

/// Forecasts one pool, the releases of `known` quarantined from their instant (by other
/// pools' evidence).
pub(super) fn run_with(
    start: PoolStart,
    settings: &Settings,
    stepping: Stepping,
    known: &Quarantines,
) -> PoolForecast {
    let (from, to) = (settings.from, settings.to());
    let mut pool = Pool::new(start, settings, known);
    pool.adopt_in_flight(from);
    pool.drop_quarantined_change();
    let mut t = from;
    loop {
        pool.finish(t);
        pool.apply_desired(t);
        pool.watch(t);
        let health = pool.health_pass(t);
        let (acted, waits) = pool.pass(t);
        let acted = acted || health;
        pool.track(t);
        let next = match stepping {
            Stepping::Events if !acted => pool.next_event(t, to),
            _ => t + TimeDelta::minutes(1),
        }
        .min(to);
        pool.record(waits, t, next);
        if next >= to {
            break;
        }
        t = next;
    }
    pool.finish(to);
    pool.track(to);
    pool.count_unhealthy_left();
    pool.out.done = pool.all_desired_since;
    pool.out.closed = windows::closed_windows(&pool.snap, pool.out.nodes, from, to);
    pool.out
        .rotations
        .sort_by(|a, b| (a.start, &a.instance).cmp(&(b.start, &b.instance)));
    pool.out
}

impl Pool {
    fn new(start: PoolStart, settings: &Settings, known: &Quarantines) -> Pool {
        let PoolStart {
            snapshot,
            managed,
            desired_change,
            notes,
            release: _,
        } = start;
        let from = settings.from;
        let to = settings.to();
        let final_desired = desired_change
            .as_ref()
            .map(|(_, ami)| ami.clone())
            .or_else(|| snapshot.gates.desired_ami.clone());
        let nodes = snapshot
            .members
            .iter()
            .filter(|m| m.lifecycle == Lifecycle::InService)
            .count();
        let serial = u64::try_from(snapshot.members.len()).unwrap_or(0) + 1;
        let out = PoolForecast {
            pool: snapshot.policy.pool_id(),
            nodes: u32::try_from(nodes).unwrap_or(u32::MAX),
            rotations: Vec::new(),
            blocked: Vec::new(),
            done: None,
            max_in_flight: 0,
            max_in_flight_at: None,
            max_in_flight_why: None,
            promotion: None,
            desired_change: desired_change.as_ref().map(|(at, _)| *at),
            closed: Vec::new(),
            managed: managed.is_some(),
            notes,
            indicted: None,
        };
        let health = Health::new(
            &settings.failures,
            known,
            snapshot.gates.desired_ami.as_deref(),
            desired_change.as_ref(),
        );
        let mut pool = Pool {
            budget_changes: windows::budget_changes(&snapshot.policy.budgets, from, to)
                .into_iter()
                .map(ceil_minute)
                .collect(),
            snap: snapshot,
            managed: None,
            running: Vec::new(),
            desired_change,
            final_desired,
            serial,
            rotation: settings.rotation,
            out,
            all_desired_since: None,
            last_block: BTreeMap::new(),
            health,
        };
        pool.budget_changes.dedup();
        if let Some(ManagedStart { status, update }) = managed {
            pool.managed = Some(Managed {
                status,
                update,
                wave: None,
                updates: 0,
            });
        }
        pool
    }

    /// Rotations in flight at the start (live forecasts) run from their record; an unfinished
    /// node group update runs its waves from the start.
    fn adopt_in_flight(&mut self, from: DateTime<Utc>) {
        let pool = self.out.pool.clone();
        let adopted: Vec<Rotation> = self
            .snap
            .rotations
            .iter()
            .filter(|r| r.pool == pool && r.in_flight() && !r.waiting())
            .filter(|r| !maintenance::waits(r, from))
            .cloned()
            .collect();
        // Their replacements already in the group: the recorded one, else a member missing from
        // the surge baseline (oldest first) that no other rotation claims.
        let subjects: BTreeSet<String> = adopted.iter().map(|r| r.instance_id.clone()).collect();
        let mut claimed: BTreeSet<String> = adopted
            .iter()
            .filter_map(|r| r.replacement.clone())
            .filter(|id| self.snap.members.iter().any(|m| &m.instance_id == id))
            .collect();
        let mut members: Vec<(DateTime<Utc>, String)> = self
            .snap
            .members
            .iter()
            .map(|m| (m.launch_time, m.instance_id.clone()))
            .collect();
        members.sort();
        for r in adopted {
            let replacement = match (&r.replacement, &r.surge) {
                (Some(id), _) => claimed.contains(id).then(|| id.clone()),
                (None, Some(surge)) => members
                    .iter()
                    .map(|(_, id)| id)
                    .find(|id| {
                        !surge.baseline.contains(id)
                            && !claimed.contains(*id)
                            && !subjects.contains(*id)
                    })
                    .cloned(),
                (None, None) => None,
            };
            if let Some(id) = &replacement {
                claimed.insert(id.clone());
            }
            let end = (r.created_at + self.rotation).max(from + TimeDelta::minutes(1));
            let out = self.push_span(&r.instance_id, r.reason, r.forced, r.created_at, end, false);
            self.running.push(Running {
                out,
                instance: r.instance_id.clone(),
                start: r.created_at,
                end,
                image: self.snap.group.launch_template_image.clone(),
                replacement,
            });
        }
        // The pool's size: members in service, not counting replacements already surged.
        let nodes = self
            .snap
            .members
            .iter()
            .filter(|m| m.lifecycle == Lifecycle::InService && !claimed.contains(&m.instance_id))
            .count();
        self.out.nodes = u32::try_from(nodes).unwrap_or(u32::MAX);
        let unfinished = self
            .managed
            .as_ref()
            .and_then(|m| m.update.as_ref())
            .is_some_and(|u| !u.phase.is_finished());
        if unfinished {
            if let Some(u) = self.managed.as_mut().and_then(|m| m.update.as_mut()) {
                u.phase = Phase::InProgress;
                u.phase_at = from;
                self.snap.group.launch_template_image = Some(u.image.clone());
            }
            self.start_wave(from);
        }
    }

    /// Completes the rotations and the wave that are done at `t`.
    fn finish(&mut self, t: DateTime<Utc>) {
        self.running
            .sort_by(|a, b| (a.end, &a.instance).cmp(&(b.end, &b.instance)));
        let done = self.running.partition_point(|r| r.end <= t);
        let finished: Vec<Running> = self.running.drain(..done).collect();
        for r in finished {
            self.complete(r);
        }
        let wave_done = self
            .managed
            .as_ref()
            .and_then(|m| m.wave.as_ref())
            .is_some_and(|w| w.end <= t);
        if wave_done {
            self.complete_wave(t);
        }
    }

    fn complete(&mut self, r: Running) {
        let id = r.instance.as_str();
        self.snap
            .rotations
            .retain(|x| x.instance_id != id || !x.in_flight());
        let before = self.snap.members.len();
        self.snap.members.retain(|m| m.instance_id != id);
        let was_member = self.snap.members.len() < before;
        let real = r
            .replacement
            .as_ref()
            .and_then(|rep| self.snap.members.iter().position(|m| &m.instance_id == rep));
        let mut replaced_by = None;
        if let Some(i) = real {
            let m = &mut self.snap.members[i];
            replaced_by = Some(m.instance_id.clone());
            m.lifecycle = Lifecycle::InService;
            let name = format!("node-{}", m.instance_id);
            let node = m
                .node
                .get_or_insert_with(|| crate::fleet::NodeStatus::ready(name));
            node.ready = true;
        } else if was_member {
            let image = r
                .image
                .or_else(|| self.snap.gates.desired_ami.clone())
                .unwrap_or_default();
            let id = self.fresh_id();
            self.snap.members.push(ready_member(&id, &image, r.start));
            replaced_by = Some(id);
        }
        if let Some(id) = &replaced_by {
            self.joined(id, r.end);
        }
        if let Some(span) = self.out.rotations.get_mut(r.out) {
            span.replacement = replaced_by;
        }
    }

    pub(super) fn push_span(
        &mut self,
        instance: &str,
        reason: RotationReason,
        forced: bool,
        start: DateTime<Utc>,
        end: DateTime<Utc>,
        wave: bool,
    ) -> usize {
        self.out.rotations.push(RotationSpan {
            instance: instance.to_string(),
            reason,
            start,
            end,
            forced,
            wave,
            replacement: None,
        });
        self.out.rotations.len() - 1
    }

    pub(super) fn fresh_id(&mut self) -> String {
        loop {
            let id = instance_id(self.serial);
            self.serial += 1;
            if !self.snap.members.iter().any(|m| m.instance_id == id) {
                return id;
            }
        }
    }

    fn apply_desired(&mut self, t: DateTime<Utc>) {
        if let Some((at, ami)) = &self.desired_change
            && t >= *at
        {
            self.snap.gates.desired_ami = Some(ami.clone());
        }
    }

    /// One planner pass at `t`, applied. Returns whether it changed anything, and what waits.
    fn pass(&mut self, t: DateTime<Utc>) -> (bool, Vec<Wait>) {
        let Some(m) = &self.managed else {
            let p = plan::plan(&self.snap, t);
            let (acted, started) = self.apply(&p.actions, t);
            let waits = blocked::waits(&self.snap, &p, &started, None, t);
            return (acted, waits);
        };
        let group = NodeGroupState {
            update: m.update.as_ref(),
            status: &m.status,
            wave: self.rotation.to_std().unwrap_or_default(),
        };
        let mp = plan_managed(&self.snap, &group, t);
        let status_active = m.status == "ACTIVE";
        let in_flight = self
            .snap
            .rotations
            .iter()
            .filter(|r| r.in_flight() && !r.waiting())
            .count();
        let (mut acted, started) = self.apply(&mp.plan.actions, t);
        let waits = blocked::waits(
            &self.snap,
            &mp.plan,
            &started,
            Some(blocked::ManagedView {
                update: &mp.update,
                drifted: mp.drifted,
                active: status_active,
                node_level_in_flight: in_flight,
            }),
            t,
        );
        if let UpdateAction::Start {
            image,
            max_unavailable,
        } = &mp.update
            && let Some(m) = self.managed.as_mut()
        {
            m.updates += 1;
            let mut u = ManagedUpdate::starting(&self.out.pool, image, *max_unavailable, t);
            u.update_id = Some(format!("simulated-{}", m.updates));
            u.phase = Phase::InProgress;
            m.update = Some(u);
            self.snap.group.launch_template_image = Some(image.clone());
            self.start_wave(t);
            acted = true;
        }
        (acted, waits)
    }

    /// Applies a node-level plan's actions at `t`; returns whether anything changed and the
    /// instances started (or released) this pass.
    fn apply(&mut self, actions: &[Action], t: DateTime<Utc>) -> (bool, BTreeSet<String>) {
        let mut acted = false;
        let mut started = BTreeSet::new();
        for a in actions {
            match a {
                Action::UpdateLaunchTemplate { image } => {
                    if self.snap.group.launch_template_image.as_deref() != Some(image) {
                        self.snap.group.launch_template_image = Some(image.clone());
                        acted = true;
                    }
                }
                Action::StartRotation {
                    instance_id,
                    reason,
                    forced,
                } => {
                    let mut r = Rotation::new(&self.out.pool, instance_id, *reason, *forced, t);
                    r.step = Step::Surging;
                    self.snap.rotations.push(r);
                    self.begin(instance_id, *reason, *forced, t);
                    started.insert(instance_id.clone());
                    acted = true;
                }
                Action::Advance { instance_id, step } => {
                    // A waiting rotation (queued operator or maintenance) released this pass;
                    // others advance with time.
                    let running = self.running.iter().any(|r| &r.instance == instance_id);
                    if *step != Step::Pending || running {
                        continue;
                    }
                    let Some(r) = self
                        .snap
                        .rotations
                        .iter_mut()
                        .find(|r| &r.instance_id == instance_id && r.in_flight())
                    else {
                        continue;
                    };
                    r.step = Step::Surging;
                    r.step_at = t;
                    let (reason, forced) = (r.reason, r.forced);
                    acted = true;
                    if self
                        .snap
                        .members
                        .iter()
                        .any(|m| &m.instance_id == instance_id)
                    {
                        self.begin(instance_id, reason, forced, t);
                        started.insert(instance_id.clone());
                    } else {
                        // The instance left the group: the rotation just finishes.
                        self.snap
                            .rotations
                            .retain(|r| &r.instance_id != instance_id || !r.in_flight());
                    }
                }
            }
        }
        (acted, started)
    }

    fn begin(&mut self, instance: &str, reason: RotationReason, forced: bool, t: DateTime<Utc>) {
        let end = t + self.rotation;
        let out = self.push_span(instance, reason, forced, t, end, false);
        self.running.push(Running {
            out,
            instance: instance.to_string(),
            start: t,
            end,
            image: self.snap.group.launch_template_image.clone(),
            replacement: None,
        });
    }

    /// What the rotations in flight now are: forced ones (no budget wait), budgeted ones by
    /// reason, and the nodes of a node group update wave.
    fn in_flight_why(&self, wave: usize) -> String {
        let mut forced = 0;
        let mut by_reason: std::collections::BTreeMap<String, usize> = Default::default();
        for r in &self.running {
            match self.out.rotations.get(r.out) {
                Some(span) if span.forced => forced += 1,
                Some(span) => *by_reason.entry(format!("{:?}", span.reason)).or_default() += 1,
                None => {}
            }
        }
        let mut parts = Vec::new();
        if forced > 0 {
            parts.push(format!(
                "{forced} forced (past expireAfter + terminationGracePeriod, an interruption or an emergency rotation: no budget wait)"
            ));
        }
        for (reason, n) in by_reason {
            parts.push(format!("{n} {reason} within its budget"));
        }
        if wave > 0 {
            parts.push(format!(
                "{wave} in a node group update wave (maxUnavailable: the Drifted allowance when the update started)"
            ));
        }
        parts.join(", ")
    }

    /// In-flight high-water mark and the `done` stretch, after the pass at `t`.
    fn track(&mut self, t: DateTime<Utc>) {
        let wave = self
            .managed
            .as_ref()
            .and_then(|m| m.wave.as_ref())
            .map_or(0, |w| w.nodes.len());
        let in_flight = u32::try_from(self.running.len() + wave).unwrap_or(u32::MAX);
        if in_flight > self.out.max_in_flight {
            self.out.max_in_flight = in_flight;
            self.out.max_in_flight_at = Some(t);
            self.out.max_in_flight_why = Some(self.in_flight_why(wave));
        }
        let changed = self.desired_change.as_ref().is_none_or(|(at, _)| t >= *at);
        let all = changed
            && self.final_desired.as_deref().is_some_and(|d| {
                self.snap
                    .members
                    .iter()
                    .filter(|m| m.lifecycle != Lifecycle::Leaving)
                    .all(|m| m.image_id.as_deref() == Some(d))
            });
        if !all {
            self.all_desired_since = None;
        } else if self.all_desired_since.is_none() {
            self.all_desired_since = Some(t);
        }
    }

    /// The first instant after `t` at which the planner's answer can change (on a whole
    /// minute, at most `to`).
    fn next_event(&self, t: DateTime<Utc>, to: DateTime<Utc>) -> DateTime<Utc> {
        let mut next = to;
        let mut consider = |x: DateTime<Utc>| {
            if x > t && x < next {
                next = x;
            }
        };
        self.running.iter().for_each(|r| consider(r.end));
        if let Some(w) = self.managed.as_ref().and_then(|m| m.wave.as_ref()) {
            consider(w.end);
        }
        let i = self.budget_changes.partition_point(|c| *c <= t);
        if let Some(c) = self.budget_changes.get(i) {
            consider(*c);
        }
        if let Some((at, _)) = &self.desired_change {
            consider(*at);
        }
        let repair_after = self
            .snap
            .policy
            .repair
            .enabled
            .then(|| self.snap.policy.repair.conditions.get("Ready"))
            .flatten()
            .and_then(|d| TimeDelta::from_std(*d).ok());
        self.health.events(repair_after).for_each(&mut consider);
        let expiration = self.snap.expiration();
        if let Some(expire) = expiration.after.and_then(|e| TimeDelta::from_std(e).ok()) {
            for m in &self.snap.members {
                consider(m.launch_time + expire);
                if let Some(forced) = expiration.forced_at(m.launch_time) {
                    consider(forced);
                }
            }
        }
        for r in &self.snap.rotations {
            if maintenance::waits(r, t)
                && let Some(d) = r.deadline
            {
                consider(d - maintenance::FORCE_BEFORE);
            }
        }
        ceil_minute(next).max(t + TimeDelta::minutes(1))
    }

    /// Records what waits over `[t, next)`, merging with the stretch before it.
    fn record(&mut self, waits: Vec<Wait>, t: DateTime<Utc>, next: DateTime<Utc>) {
        for w in waits {
            if let Some(&i) = self.last_block.get(&w.reason)
                && let Some(b) = self.out.blocked.get_mut(i)
                && b.to == t
                && b.why == w.why
            {
                b.to = next;
                continue;
            }
            self.last_block.insert(w.reason, self.out.blocked.len());
            self.out.blocked.push(Blocked {
                from: t,
                to: next,
                reason: w.reason,
                why: w.why,
                kind: w.kind,
                gate: w.gate,
            });
        }
    }
}
