//! The forecast of one pool: passes of the real planner over a virtual fleet, jumping from one
//! instant where the planner's answer can change to the next (see the module documentation).

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, TimeDelta, Utc};

use super::blocked::{self, Wait};
use super::{
    Blocked, Closed, ManagedStart, PoolForecast, PoolStart, RotationSpan, Settings, ceil_minute,
    ready_member,
};
use crate::budget::{self, Reason};
use crate::fleet::{Lifecycle, NodeStatus, Snapshot};
use crate::managed::{ManagedUpdate, Phase};
use crate::plan::managed::{NodeGroupState, UpdateAction, plan_managed};
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
struct Running {
    instance: String,
    start: DateTime<Utc>,
    end: DateTime<Utc>,
    /// The image its replacement comes up on (what the group launched at the start).
    image: Option<String>,
    /// A real replacement already in the group (live forecasts): its id, or the surge baseline
    /// it is missing from.
    replacement: Option<String>,
    baseline: Option<Vec<String>>,
    /// Its entry in the forecast's rotations.
    out: usize,
}

/// The running wave of a managed node group update.
struct Wave {
    nodes: Vec<String>,
    /// Their entries in the forecast's rotations.
    out: Vec<usize>,
    start: DateTime<Utc>,
    end: DateTime<Utc>,
}

struct Managed {
    status: String,
    update: Option<ManagedUpdate>,
    wave: Option<Wave>,
    updates: u32,
}

struct Pool {
    snap: Snapshot,
    managed: Option<Managed>,
    running: Vec<Running>,
    desired_change: Option<(DateTime<Utc>, String)>,
    final_desired: Option<String>,
    /// Instants (on whole minutes) where a budget of Drifted or Expired changes.
    budget_changes: Vec<DateTime<Utc>>,
    serial: u64,
    rotation: TimeDelta,
    out: PoolForecast,
    all_desired_since: Option<DateTime<Utc>>,
    last_block: BTreeMap<RotationReason, usize>,
}

/// Forecasts one pool.
pub(super) fn run(start: PoolStart, settings: &Settings, stepping: Stepping) -> PoolForecast {
    let (from, to) = (settings.from, settings.to());
    let mut pool = Pool::new(start, settings);
    pool.adopt_in_flight(from);
    let mut t = from;
    loop {
        pool.finish(t);
        pool.apply_desired(t);
        let (acted, waits) = pool.pass(t);
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
    pool.out.done = pool.all_desired_since;
    pool.out.closed = closed_windows(&pool.snap, pool.out.nodes, from, to);
    pool.out
        .rotations
        .sort_by(|a, b| (a.start, &a.instance).cmp(&(b.start, &b.instance)));
    pool.out
}

impl Pool {
    fn new(start: PoolStart, settings: &Settings) -> Pool {
        let PoolStart {
            snapshot,
            managed,
            desired_change,
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
            desired_change: desired_change.as_ref().map(|(at, _)| *at),
            closed: Vec::new(),
            managed: managed.is_some(),
        };
        let mut pool = Pool {
            budget_changes: budget_changes(&snapshot.policy.budgets, from, to)
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
        for r in adopted {
            let end = (r.created_at + self.rotation).max(from + TimeDelta::minutes(1));
            let out = self.push_span(&r.instance_id, r.reason, r.forced, r.created_at, end, false);
            self.running.push(Running {
                out,
                instance: r.instance_id.clone(),
                start: r.created_at,
                end,
                image: self.snap.group.launch_template_image.clone(),
                replacement: r.replacement.clone(),
                baseline: r.surge.as_ref().map(|s| s.baseline.clone()),
            });
        }
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
        let claimed: BTreeSet<String> = self
            .running
            .iter()
            .filter_map(|o| o.replacement.clone())
            .collect();
        let real = match (&r.replacement, &r.baseline) {
            (Some(rep), _) => self.snap.members.iter().position(|m| &m.instance_id == rep),
            (None, Some(baseline)) => self.snap.members.iter().position(|m| {
                !baseline.contains(&m.instance_id)
                    && !m.is_ready()
                    && !claimed.contains(&m.instance_id)
            }),
            (None, None) => None,
        };
        let mut replaced_by = None;
        if let Some(i) = real {
            let m = &mut self.snap.members[i];
            replaced_by = Some(m.instance_id.clone());
            m.lifecycle = Lifecycle::InService;
            let name = format!("node-{}", m.instance_id);
            let node = m.node.get_or_insert(NodeStatus {
                name,
                ready: true,
                unschedulable: false,
                disrupted: None,
                evictable_pods: 1,
            });
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
        if let Some(span) = self.out.rotations.get_mut(r.out) {
            span.replacement = replaced_by;
        }
    }

    fn push_span(
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

    fn fresh_id(&mut self) -> String {
        loop {
            let id = instance_id(self.serial);
            self.serial += 1;
            if !self.snap.members.iter().any(|m| m.instance_id == id) {
                return id;
            }
        }
    }

    /// The running wave is done at `t`: its nodes are replaced; the next wave starts, or the
    /// update is successful.
    fn complete_wave(&mut self, t: DateTime<Utc>) {
        let Some(m) = self.managed.as_mut() else {
            return;
        };
        let (Some(wave), Some(update)) = (m.wave.take(), m.update.as_ref()) else {
            return;
        };
        let image = update.image.clone();
        for (id, out) in wave.nodes.iter().zip(&wave.out) {
            self.snap.members.retain(|m| &m.instance_id != id);
            let fresh = self.fresh_id();
            self.snap
                .members
                .push(ready_member(&fresh, &image, wave.start));
            if let Some(span) = self.out.rotations.get_mut(*out) {
                span.replacement = Some(fresh);
            }
        }
        if self.wave_nodes(&image).is_empty() {
            if let Some(u) = self.managed.as_mut().and_then(|m| m.update.as_mut()) {
                u.phase = Phase::Successful;
                u.phase_at = t;
            }
        } else {
            self.start_wave(t);
        }
    }

    /// In-service nodes an update to `image` still replaces, oldest first.
    fn wave_nodes(&self, image: &str) -> Vec<String> {
        let mut nodes: Vec<_> = self
            .snap
            .members
            .iter()
            .filter(|m| m.lifecycle == Lifecycle::InService)
            .filter(|m| m.image_id.as_deref() != Some(image))
            .filter(|m| !self.running.iter().any(|r| r.instance == m.instance_id))
            .map(|m| (m.launch_time, m.instance_id.clone()))
            .collect();
        nodes.sort();
        nodes.into_iter().map(|(_, id)| id).collect()
    }

    /// Starts the next wave of the recorded update at `t` (an update with nothing to replace
    /// still takes one wave).
    fn start_wave(&mut self, t: DateTime<Utc>) {
        let Some((image, width)) = self
            .managed
            .as_ref()
            .and_then(|m| m.update.as_ref())
            .map(|u| (u.image.clone(), u.max_unavailable.max(1)))
        else {
            return;
        };
        let mut nodes = self.wave_nodes(&image);
        nodes.truncate(usize::try_from(width).unwrap_or(usize::MAX));
        let end = t + self.rotation;
        let mut out = Vec::new();
        for id in &nodes {
            if let Some(node) = self
                .snap
                .members
                .iter_mut()
                .find(|m| &m.instance_id == id)
                .and_then(|m| m.node.as_mut())
            {
                node.unschedulable = true;
            }
            out.push(self.push_span(id, RotationReason::Drifted, false, t, end, true));
        }
        if let Some(m) = self.managed.as_mut() {
            m.wave = Some(Wave {
                nodes,
                out,
                start: t,
                end,
            });
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
            baseline: None,
        });
    }

    /// In-flight high-water mark and the `done` stretch, after the pass at `t`.
    fn track(&mut self, t: DateTime<Utc>) {
        let wave = self
            .managed
            .as_ref()
            .and_then(|m| m.wave.as_ref())
            .map_or(0, |w| w.nodes.len());
        let in_flight = u32::try_from(self.running.len() + wave).unwrap_or(u32::MAX);
        self.out.max_in_flight = self.out.max_in_flight.max(in_flight);
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
        let policy = &self.snap.policy;
        if let Some(expire) = policy
            .expire_after
            .and_then(|e| TimeDelta::from_std(e).ok())
        {
            let grace = policy
                .termination_grace_period
                .and_then(|g| TimeDelta::from_std(g).ok());
            for m in &self.snap.members {
                let expiry = m.launch_time + expire;
                consider(expiry);
                if let Some(g) = grace {
                    consider(expiry + g);
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
            });
        }
    }
}

/// Every instant in `(from, to]` at which a budget applying to Drifted or Expired becomes
/// active or inactive, in order.
fn budget_changes(
    budgets: &[budget::Budget],
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Vec<DateTime<Utc>> {
    let mut out = Vec::new();
    for reason in [Reason::Drifted, Reason::Expired] {
        out.extend(changes(budgets, reason, from, to));
    }
    out.sort();
    out.dedup();
    out
}

fn changes(
    budgets: &[budget::Budget],
    reason: Reason,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Vec<DateTime<Utc>> {
    let mut out = Vec::new();
    let mut t = from;
    while let Some(c) = budget::evaluate(budgets, reason, 0, 0, t).next_change {
        if c > to {
            break;
        }
        out.push(c);
        t = c;
    }
    out
}

/// The stretches of `[from, to)` in which Drifted or Expired may disrupt no node of a pool of
/// `total` nodes, merged per reason and limiting budget.
fn closed_windows(
    snap: &Snapshot,
    total: u32,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Vec<Closed> {
    let budgets = &snap.policy.budgets;
    let mut out: Vec<Closed> = Vec::new();
    for reason in [Reason::Drifted, Reason::Expired] {
        let mut edges = vec![from];
        edges.extend(changes(budgets, reason, from, to));
        edges.push(to);
        for pair in edges.windows(2) {
            let (a, b) = (pair[0], pair[1]);
            if a >= b {
                continue;
            }
            let e = budget::evaluate(budgets, reason, total, 0, a);
            if e.allowed > 0 {
                continue;
            }
            match out.last_mut() {
                Some(c) if c.reason == reason && c.to == a && c.budget == e.limited_by => {
                    c.to = b;
                }
                _ => out.push(Closed {
                    from: a,
                    to: b,
                    reason,
                    budget: e.limited_by,
                }),
            }
        }
    }
    out
}
