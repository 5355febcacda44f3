//! A forecast of the rollout (pure, no I/O): days of rotator passes over virtual fleets, run
//! through the real planner ([`crate::plan::plan`], [`crate::plan::managed_update::plan_managed`]) and
//! budget engine ([`crate::budget::evaluate`]), as `nodecycle simulate` prints and draws it.
//!
//! # Model
//! - Each pool starts at `from` ([`Settings::from`], on a whole minute) as a [`PoolStart`]:
//!   a [`Snapshot`] (members, rotation records, gates, the group's launch template image) and,
//!   for a managed node group, its status and update record. [`PoolStart::synthetic`] builds
//!   the usual start: `nodes` Ready nodes on [`CURRENT_AMI`] launched `age` ago, the desired AMI
//!   changing to [`NEW_AMI`] at `new_ami_at`.
//! - A planner pass runs every minute. What it decides is applied at once: the launch template
//!   launches the desired AMI; a started rotation is in flight for [`Settings::rotation`]
//!   (start to done; the old node stays a Ready member, the rotation record makes it
//!   disrupting); at done the old node is gone and its replacement (launched at the start, on the
//!   image the group launched then) is a Ready member. So for the budgets `total` is the pool's
//!   node count (a replacement is never counted twice) and `disrupting` the rotations in flight.
//! - A managed node group's update (started when `plan_managed` says `start`) replaces the nodes
//!   not on its image in waves of `maxUnavailable` nodes, oldest first, each wave taking
//!   [`Settings::rotation`]; the nodes of the running wave are cordoned; the next wave starts when
//!   one ends; after the last one the update is `Successful`. Node-level rotations of such a pool
//!   (expiry) go as for self-managed pools.
//! - Budget windows that close do not stop rotations already in flight (as in the rotator:
//!   budgets gate starts), so a rotation started just before a window closes runs into it.
//!
//! # Skipping minutes
//! The planner's answer for an unchanged fleet only changes at known instants: a rotation or
//! wave ends, a budget becomes active or inactive (`next_window_edge` of [`crate::budget::evaluate`]),
//! a node reaches `expireAfter` or `expireAfter + terminationGracePeriod`, the desired AMI
//! changes, a waiting maintenance rotation reaches its forced line. A pass that changes nothing
//! is therefore followed by the pass at the first such instant (rounded up to the minute, as the
//! rotator runs on whole minutes); a pass that changes something by the pass one minute later.
//! The tests compare this against a pass at every minute.

mod blocked;
mod engine;
mod failures;
pub mod picture;
mod waves;
mod windows;

#[cfg(test)]
mod tests;

use chrono::{DateTime, SecondsFormat, TimeDelta, Utc};
use chrono_tz::Tz;
use serde::{Serialize, Serializer};

use crate::fleet::{Gates, Group, Lifecycle, Member, NodeStatus};
use crate::managed::ManagedUpdate;
use crate::plan::Snapshot;
use crate::policy::{NodeGroup, Policy};
use crate::rotation::RotationReason;

/// The AMI the nodes of a synthetic pool run at the start.
pub const CURRENT_AMI: &str = "ami-current";
/// The AMI a synthetic pool's desired AMI changes to.
pub const NEW_AMI: &str = "ami-new";
/// The most days one forecast covers.
pub const MAX_DAYS: u32 = 31;

/// How the forecast runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// First pass (rounded down to the minute by [`simulate`]).
    pub from: DateTime<Utc>,
    /// Days forecast (1 to [`MAX_DAYS`]).
    pub days: u32,
    /// Time from a rotation's start to its done (and of one node group update wave); a whole
    /// number of minutes, at least one.
    pub rotation: TimeDelta,
    /// Releases that fail in the forecast (none: every release is healthy, the forecast of
    /// before failures existed); at most one per AMI.
    pub failures: Vec<Failure>,
}

/// A release that turns out bad in the forecast, as `nodecycle simulate --failures` gives it:
/// in each pool, the first `nodes` nodes that join on `ami` during the forecast (a
/// replacement whose rotation or update wave is done; nodes running it at the start are taken
/// as healthy) turn unhealthy (`Ready` lost) `after` joining. What follows is the product's
/// ([`crate::promotion::health::assess`] on the pool's nodes, each pass): the release is
/// indicted once enough of its nodes turned unhealthy within `health.window` of joining (3, or
/// all of them when it has fewer, and at least `health.minFailureRate` of them), and then
/// quarantined everywhere: see [`PoolForecast::indicted`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The AMI that fails ([`NEW_AMI`] for the synthetic new AMI).
    pub ami: String,
    /// How many of its nodes (per pool) turn unhealthy; at least 1.
    pub nodes: u32,
    /// How long after joining each of them turns unhealthy; not negative.
    pub after: TimeDelta,
}

impl Settings {
    /// Checks the contract of each field; the message names the field and what is expected.
    pub fn check(&self) -> Result<(), String> {
        if self.days == 0 || self.days > MAX_DAYS {
            return Err(format!(
                "days: {} is out of range; expected 1 to {MAX_DAYS}",
                self.days
            ));
        }
        if self.rotation < TimeDelta::minutes(1) || self.rotation.num_seconds() % 60 != 0 {
            return Err(format!(
                "rotation: {} is not a whole number of minutes (at least 1m)",
                crate::duration::format(self.rotation.to_std().unwrap_or_default())
            ));
        }
        for (i, f) in self.failures.iter().enumerate() {
            if f.ami.trim().is_empty() {
                return Err(format!(
                    "failures[{i}].ami: {:?} is empty; expected an AMI id (or the synthetic {NEW_AMI})",
                    f.ami
                ));
            }
            if f.nodes == 0 {
                return Err(format!(
                    "failures[{i}].nodes: 0 is out of range; expected at least 1 node"
                ));
            }
            if f.after < TimeDelta::zero() {
                return Err(format!(
                    "failures[{i}].after: {}s is negative; expected a duration of 0s or more",
                    f.after.num_seconds()
                ));
            }
            if let Some(j) = self.failures[..i].iter().position(|g| g.ami == f.ami) {
                return Err(format!(
                    "failures[{i}].ami: {} is also failures[{j}]; expected each AMI once",
                    f.ami
                ));
            }
        }
        Ok(())
    }

    /// End of the forecast: `from` (to the minute) plus `days`.
    pub fn to(&self) -> DateTime<Utc> {
        floor_minute(self.from) + TimeDelta::days(i64::from(self.days))
    }
}

/// A managed node group's state at the start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManagedStart {
    /// `DescribeNodegroup` status (`ACTIVE`, ...); kept for the whole forecast while no update
    /// of nodecycle's runs.
    pub status: String,
    /// The pool's update record; an unfinished one (`Starting`, `InProgress`) runs its waves
    /// from the first pass over the nodes not on its image.
    pub update: Option<ManagedUpdate>,
}

/// One pool at the start of the forecast.
#[derive(Debug, Clone, PartialEq)]
pub struct PoolStart {
    /// Policy, gates, group, members and rotation records as the rotator would see them.
    pub snapshot: Snapshot,
    /// `Some` for a managed node group pool.
    pub managed: Option<ManagedStart>,
    /// The desired AMI changes to this AMI at this instant (none: it stays).
    pub desired_change: Option<(DateTime<Utc>, String)>,
    /// What the forecast assumes that the reader should know (copied to
    /// [`PoolForecast::notes`]): a paused pool forecast as if resumed, an age left at 0.
    pub notes: Vec<String>,
    /// What the pool's record says of its release (live); empty for a synthetic pool.
    pub release: ReleaseState,
}

/// What a live pool's record says of the release it runs, so that a promotion compares
/// releases (one release may be a different image per region or architecture) and counts a
/// soak already under way. Empty ([`Default`]) for synthetic pools: images are compared.
/// A live pool's is its record's (`PoolRecord::release_state` in the state module).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReleaseState {
    /// The release of the pool's desired AMI ([`crate::promotion::release_of`]); `None` when
    /// not known (no record, or a pin).
    pub release: Option<String>,
    /// Start of the pool's open soak period (its ledger's: every node Ready on the desired AMI
    /// since then, nothing in flight), if one is open.
    pub soaking_since: Option<DateTime<Utc>>,
}

impl PoolStart {
    /// The synthetic start: `nodes` Ready nodes running [`CURRENT_AMI`], launched `age` before
    /// `from`, the group launching [`CURRENT_AMI`] (the desired AMI until `new_ami_at`, then
    /// [`NEW_AMI`]); a managed node group is `ACTIVE` with no update. Gates: only the policy's
    /// `paused`. The pool is adopted at `from` (nodes older than `expireAfter` are expired but
    /// not forced until `from + expireAfter + terminationGracePeriod`).
    pub fn synthetic(
        policy: Policy,
        nodes: u32,
        from: DateTime<Utc>,
        age: TimeDelta,
        new_ami_at: DateTime<Utc>,
    ) -> PoolStart {
        let launch = floor_minute(from) - age;
        let members = (1..=nodes)
            .map(|n| ready_member(&engine::instance_id(u64::from(n)), CURRENT_AMI, launch))
            .collect();
        let managed =
            matches!(policy.node_group, NodeGroup::ManagedNodeGroup(_)).then(|| ManagedStart {
                status: "ACTIVE".to_string(),
                update: None,
            });
        let group_name = match &policy.node_group {
            NodeGroup::AutoScalingGroup(g) | NodeGroup::ManagedNodeGroup(g) => g.clone(),
        };
        let size = i32::try_from(nodes).unwrap_or(i32::MAX);
        PoolStart {
            snapshot: Snapshot {
                policy,
                gates: Gates {
                    desired_ami: Some(CURRENT_AMI.to_string()),
                    paused: None,
                    halted: None,
                    stopped: None,
                },
                group: Group {
                    name: group_name,
                    min_size: 0,
                    max_size: size.saturating_mul(2),
                    desired_capacity: size,
                    launch_template_image: Some(CURRENT_AMI.to_string()),
                    suspended_processes: Vec::new(),
                    do_not_repair: false,
                    retained: Vec::new(),
                },
                members,
                rotations: Vec::new(),
                adopted_at: Some(floor_minute(from)),
                repair: Default::default(),
            },
            managed,
            desired_change: Some((new_ami_at, NEW_AMI.to_string())),
            notes: Vec::new(),
            release: ReleaseState::default(),
        }
    }
}

/// An in-service member with a Ready node running `image`.
fn ready_member(id: &str, image: &str, launch_time: DateTime<Utc>) -> Member {
    Member {
        instance_id: id.to_string(),
        availability_zone: "sim-1a".to_string(),
        image_id: Some(image.to_string()),
        launch_time,
        lifecycle: Lifecycle::InService,
        node: Some(NodeStatus::ready(format!("node-{id}"))),
    }
}

/// The forecast. Serializes as `nodecycle simulate` prints it:
/// `{"from", "to", "pools": [...]}` (instants RFC 3339 UTC, seconds, `Z`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Forecast {
    /// First pass.
    #[serde(serialize_with = "instant")]
    pub from: DateTime<Utc>,
    /// End of the forecast.
    #[serde(serialize_with = "instant")]
    pub to: DateTime<Utc>,
    /// One per pool, in the order given.
    pub pools: Vec<PoolForecast>,
    /// The zone days and hours are drawn in: the one time zone every scheduled budget uses,
    /// else UTC.
    #[serde(skip)]
    pub time_zone: Tz,
}

/// One pool's forecast. Serializes as
/// `{"pool", "nodes", "rotations", "blocked", "done", "maxInFlight", "maxInFlightAt",
/// "maxInFlightWhy"}`, plus `promotion` for a pool with `promotion`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolForecast {
    /// `<cluster>/<name>`.
    pub pool: String,
    /// Nodes at the start: members in service, not counting replacements already launched for
    /// rotations in flight (live).
    pub nodes: u32,
    /// Every rotation in flight during the forecast, by start then instance (a managed node
    /// group update's waves: one per replaced node).
    pub rotations: Vec<RotationSpan>,
    /// Stretches in which nodes needing a rotation wait, by start then reason; consecutive
    /// minutes with the same reason and `why` are merged.
    pub blocked: Vec<Blocked>,
    /// From when every node runs the desired AMI until the end (after the desired AMI changed);
    /// `None` if not by the end.
    #[serde(serialize_with = "optional_instant")]
    pub done: Option<DateTime<Utc>>,
    /// The most rotations in flight at once.
    pub max_in_flight: u32,
    /// When that many were first in flight (null: none ever was).
    #[serde(serialize_with = "optional_instant")]
    pub max_in_flight_at: Option<DateTime<Utc>>,
    /// What they were then: forced ones (no budget wait), budgeted ones per reason, the nodes
    /// of a node group update wave; so a count above a budget says why.
    pub max_in_flight_why: Option<String>,
    /// For a pool with `promotion`: when its upstream was done and its desired AMI changes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub promotion: Option<PromotionForecast>,
    /// What the forecast assumed ([`PoolStart::notes`]); omitted when empty.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// When the release of the pool's desired AMI was indicted (a [`Failure`]) and the pool
    /// rolled back; omitted when it never was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub indicted: Option<Indicted>,
    /// When the desired AMI changes, if it does (for the picture).
    #[serde(skip)]
    pub desired_change: Option<DateTime<Utc>>,
    /// Stretches in which a budgeted reason may disrupt no node (cap 0), for the picture.
    #[serde(skip)]
    pub closed: Vec<Closed>,
    /// A managed node group pool.
    #[serde(skip)]
    pub managed: bool,
}

/// A pool's desired AMI indicted during the forecast. Serializes as
/// `{"ami", "at", "by", "why", "rolledBackTo", "unhealthyLeft"}`.
///
/// At `at` (the first pass at which the evidence holds, in the pool `by`, or the pool's own
/// pass after another pool indicted it: a quarantine holds everywhere) the pool's desired AMI
/// goes back to the one it had before its change (`rolledBackTo`), so its nodes on `ami` are
/// `Drifted` rotations within its budgets from then on; with nothing to go back to (its
/// desired AMI did not change in the forecast) the pool is halted (`rolledBackTo` null). Nodes
/// that turned unhealthy are not Ready: counted as disrupting and never drain candidates (as
/// in the rotator: repair's), so they stay on `ami` and the pool is not `done`. A pool with
/// `promotion.from` never takes a release indicted before its promotion; one that took it
/// earlier rolls back at `at`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Indicted {
    /// The AMI indicted.
    pub ami: String,
    /// When (the pass that acted).
    #[serde(serialize_with = "instant")]
    pub at: DateTime<Utc>,
    /// The pool whose nodes were the evidence (this pool's id when its own).
    pub by: String,
    /// The evidence, as the rotator's quarantine record says it.
    pub why: String,
    /// The desired AMI the pool went back to; null when it was halted instead.
    pub rolled_back_to: Option<String>,
    /// The pool's nodes still on `ami` and unhealthy at the end of the forecast.
    pub unhealthy_left: u32,
    /// A few words for the picture (`indicted: 3 nodes unhealthy after 2h; rolled back`).
    #[serde(skip)]
    pub label: String,
    /// From when the pool had run `ami` on every node before it was indicted, if it had (what
    /// a downstream pool's soak counts from).
    #[serde(skip)]
    pub done_before: Option<DateTime<Utc>>,
}

/// One rotation. Serializes as `{"instance", "reason", "start", "end", "forced", "wave"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RotationSpan {
    /// The instance replaced.
    pub instance: String,
    /// Why.
    pub reason: RotationReason,
    /// When it started (for a rotation in flight at the start of a live forecast: when it was
    /// recorded).
    #[serde(serialize_with = "instant")]
    pub start: DateTime<Utc>,
    /// When it is done (may lie after the end of the forecast).
    #[serde(serialize_with = "instant")]
    pub end: DateTime<Utc>,
    /// Started without budget (forced expiry, interruption, emergency).
    pub forced: bool,
    /// Part of a managed node group update.
    pub wave: bool,
    /// The instance that replaced it, once done within the forecast.
    #[serde(skip)]
    pub replacement: Option<String>,
}

/// What a block is, for the picture.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockKind {
    /// A budget allows no node at all (a closed window, or `nodes: "0"`).
    Closed,
    /// A budget's nodes are all taken by rotations in flight.
    Full,
    /// A gate: paused, halted, unresolved AMI, a managed node group waiting for an update or a
    /// window long enough, a queue limit.
    Gate,
}

/// A stretch in which nodes wait. Serializes as `{"from", "to", "reason", "why"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Blocked {
    /// First minute.
    #[serde(serialize_with = "instant")]
    pub from: DateTime<Utc>,
    /// End (exclusive).
    #[serde(serialize_with = "instant")]
    pub to: DateTime<Utc>,
    /// The reason of the waiting rotations.
    pub reason: RotationReason,
    /// The budget limiting it (`disruption.budgets[i]`, its nodes and window) or the gate.
    pub why: String,
    /// For the picture.
    #[serde(skip)]
    pub kind: BlockKind,
    /// For a [`BlockKind::Gate`] wait, the gate in a few words, as the picture names its band
    /// (`paused by alice at ...: CVE triage`, `halted: ...`, `deployment stopped`, `window
    /// wait: ...`, `node group update in progress`); `None` for a budget.
    #[serde(skip)]
    pub gate: Option<String>,
}

/// A stretch in which a reason's budgets allow no disruption.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Closed {
    /// Start.
    pub from: DateTime<Utc>,
    /// End (exclusive).
    pub to: DateTime<Utc>,
    /// `Drifted` or `Expired`.
    pub reason: crate::budget::Reason,
    /// The budget giving the cap of 0.
    pub budget: Option<usize>,
}

/// Runs the forecast of every pool from `settings.from` for `settings.days`, upstream pools
/// before the pools that promote from them (see [`promote`]); pools are returned in the order
/// given. The caller checks `settings` ([`Settings::check`]).
///
/// With [`Settings::failures`], a release indicted in one pool is quarantined in all from that
/// minute ([`Indicted`]): the pools are forecast again with the earliest indictment of each
/// release known to all of them, until no earlier one appears (at most once per pool more).
pub fn simulate(pools: Vec<PoolStart>, settings: &Settings) -> Forecast {
    let settings = Settings {
        from: floor_minute(settings.from),
        ..settings.clone()
    };
    let time_zone = axis_zone(pools.iter().map(|p| &p.snapshot.policy));
    let mut known = failures::Quarantines::new();
    let rounds = if settings.failures.is_empty() {
        0
    } else {
        pools.len() + 1
    };
    for _ in 0..rounds {
        let out = forecast_all(pools.clone(), &settings, &known);
        let found = failures::quarantines(&out);
        if found == known {
            return forecast(out, &settings, time_zone);
        }
        known = found;
    }
    let out = forecast_all(pools, &settings, &known);
    forecast(out, &settings, time_zone)
}

fn forecast(pools: Vec<PoolForecast>, settings: &Settings, time_zone: Tz) -> Forecast {
    Forecast {
        from: settings.from,
        to: settings.to(),
        pools,
        time_zone,
    }
}

/// One forecast of every pool (see [`simulate`]), the releases of `known` quarantined.
fn forecast_all(
    pools: Vec<PoolStart>,
    settings: &Settings,
    known: &failures::Quarantines,
) -> Vec<PoolForecast> {
    let ids: Vec<String> = pools.iter().map(|p| p.snapshot.policy.pool_id()).collect();
    let upstream_of = |p: &PoolStart| {
        let from = p.snapshot.policy.promotion.as_ref()?.from.as_ref()?;
        ids.iter().position(|id| id == from)
    };
    let mut pending: Vec<Option<PoolStart>> = pools.into_iter().map(Some).collect();
    let mut out: Vec<Option<PoolForecast>> = vec![None; pending.len()];
    // What each forecast pool ends on (its final desired AMI and release), for its downstream.
    let mut ends_on: Vec<(Option<String>, ReleaseState)> =
        vec![(None, ReleaseState::default()); pending.len()];
    let run = |start: PoolStart| engine::run_with(start, settings, engine::Stepping::Events, known);
    // A pool is forecast once the pool it promotes from is; what is left is a cycle.
    loop {
        let mut progressed = false;
        for i in 0..pending.len() {
            let Some(start) = pending[i].as_ref() else {
                continue;
            };
            let upstream = upstream_of(start);
            if upstream.is_some_and(|j| out[j].is_none()) {
                continue;
            }
            let Some(mut start) = pending[i].take() else {
                continue;
            };
            let up = upstream.and_then(|j| {
                Some(Upstream {
                    forecast: out[j].as_ref()?,
                    ami: ends_on[j].0.as_deref(),
                    release: &ends_on[j].1,
                })
            });
            let note = promote(&mut start, up, settings.from);
            ends_on[i] = (
                start
                    .desired_change
                    .as_ref()
                    .map(|(_, ami)| ami.clone())
                    .or_else(|| start.snapshot.gates.desired_ami.clone()),
                start.release.clone(),
            );
            let mut forecast = run(start);
            forecast.promotion = note;
            out[i] = Some(forecast);
            progressed = true;
        }
        if !progressed {
            break;
        }
    }
    for (i, start) in pending.iter_mut().enumerate() {
        if let Some(mut start) = start.take() {
            // A promotion cycle (validation refuses it): nothing is ever proven.
            if let Some((at, _)) = start.desired_change.as_mut() {
                *at = DateTime::<Utc>::MAX_UTC;
            }
            out[i] = Some(run(start));
        }
    }
    out.into_iter().flatten().collect()
}

/// The pool a pool with `promotion.from` promotes from, as [`promote`] needs it.
#[derive(Debug, Clone, Copy)]
pub struct Upstream<'a> {
    /// Its forecast (`done`: when it runs its desired AMI on every node).
    pub forecast: &'a PoolForecast,
    /// The desired AMI it ends on (after its own change, if any).
    pub ami: Option<&'a str>,
    /// What its record says of that AMI's release (live).
    pub release: &'a ReleaseState,
}

/// When a pool with `promotion` takes the new AMI, as nodecycle would: with `promotion.from`,
/// once the upstream pool has run it on all its nodes for `soak` (its forecast `done` plus
/// `soak`; never within the forecast when the upstream is not done in time or is not among the
/// pools simulated, since nothing proves the release then); with `minAge`, no earlier than
/// `minAge` after the new AMI appears (it is created at its desired-change instant). Alarms
/// are not modelled (assumed quiet). Pools without `promotion` are left as they are.
///
/// A live pool (no desired change given) with `promotion.from` whose upstream is simulated
/// and ends on another release than the pool's (releases compared when both are known, else
/// the AMIs) is given the change the promotion will bring: to the upstream's AMI (standing for
/// its release) at the end of the upstream's soak, which counts from the upstream's `done`, or
/// from its open soak period ([`ReleaseState::soaking_since`]) when it is done at `from`;
/// never within the forecast when the upstream is not done in time. `minAge` is not applied
/// to a live pool (the image's creation date is not read). Its release becomes the
/// upstream's, for the pools downstream of it.
///
/// An upstream that indicted the release ([`PoolForecast::indicted`]) proves it from the
/// instant it ran it on every node before that ([`Indicted::done_before`]), and only until the
/// indictment: a change that would come at or after it never does
/// ([`PromotionForecast::indicted`] says why). Soaks are not cut short by a node turning
/// unhealthy before the indictment (a simplification).
pub fn promote(
    start: &mut PoolStart,
    upstream: Option<Upstream<'_>>,
    from: DateTime<Utc>,
) -> Option<PromotionForecast> {
    let promo = start.snapshot.policy.promotion.clone()?;
    let delta = |d: std::time::Duration| TimeDelta::from_std(d).unwrap_or(TimeDelta::MAX);
    let soak = promo.soak.map(delta).unwrap_or_default();
    let Some((at, ami)) = start.desired_change.clone() else {
        return promote_live(start, upstream, from, promo.from, soak);
    };
    // An upstream that ran the release and then indicted it (or rolled back from it): done on
    // it until then, and the release never taken from then on.
    let indicted = upstream
        .and_then(|u| u.forecast.indicted.as_ref())
        .filter(|i| i.ami == ami);
    let upstream_done = match indicted {
        Some(i) => i.done_before,
        None => upstream.and_then(|u| u.forecast.done),
    };
    let mut when = Some(promo.min_age.map_or(at, |m| {
        at.checked_add_signed(delta(m))
            .unwrap_or(DateTime::<Utc>::MAX_UTC)
    }));
    if promo.from.is_some() {
        when = match (when, upstream_done) {
            (Some(w), Some(done)) => Some(
                w.max(
                    done.checked_add_signed(soak)
                        .unwrap_or(DateTime::<Utc>::MAX_UTC),
                ),
            ),
            _ => None,
        };
    }
    let when = when
        .map(ceil_minute)
        .filter(|w| indicted.is_none_or(|i| *w < i.at));
    // Never within the forecast: the change lies past its end (so `done` stays null).
    start.desired_change = Some((when.unwrap_or(DateTime::<Utc>::MAX_UTC), ami));
    Some(PromotionForecast {
        from: promo.from,
        upstream_done,
        desired_at: when,
        waits_from: (at < DateTime::<Utc>::MAX_UTC).then_some(at.max(from)),
        soak: promo.soak,
        min_age: promo.min_age,
        indicted: indicted
            .filter(|_| when.is_none())
            .map(|i| (i.at, i.ami.clone())),
    })
}

/// [`promote`] for a live pool (see there).
fn promote_live(
    start: &mut PoolStart,
    upstream: Option<Upstream<'_>>,
    from: DateTime<Utc>,
    upstream_id: Option<String>,
    soak: TimeDelta,
) -> Option<PromotionForecast> {
    upstream_id.as_ref()?;
    let up = upstream?;
    let up_ami = up.ami?;
    let same = match (&start.release.release, &up.release.release) {
        (Some(mine), Some(theirs)) => mine == theirs,
        _ => start.snapshot.gates.desired_ami.as_deref() == Some(up_ami),
    };
    if same {
        return None;
    }
    let upstream_done = up.forecast.done;
    let soak_from = match (upstream_done, up.release.soaking_since) {
        (Some(done), Some(since)) if done <= from && since <= done => Some(since),
        (done, _) => done,
    };
    let when = soak_from.map(|s| {
        ceil_minute(
            s.checked_add_signed(soak)
                .unwrap_or(DateTime::<Utc>::MAX_UTC)
                .max(from),
        )
    });
    start.desired_change = Some((when.unwrap_or(DateTime::<Utc>::MAX_UTC), up_ami.to_string()));
    start.release = ReleaseState {
        release: up.release.release.clone(),
        soaking_since: None,
    };
    Some(PromotionForecast {
        from: upstream_id,
        upstream_done,
        desired_at: when,
        waits_from: Some(from),
        soak: start
            .snapshot
            .policy
            .promotion
            .as_ref()
            .and_then(|p| p.soak),
        min_age: None,
        indicted: None,
    })
}

/// How promotion moved a pool's desired change. Serializes as
/// `{"from", "upstreamDone", "desiredAt"}` (null where unknown or never).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PromotionForecast {
    /// The upstream pool (`promotion.from`), if any.
    pub from: Option<String>,
    /// When the upstream was done in its forecast (`None`: not in time, or not simulated).
    #[serde(serialize_with = "optional_instant")]
    pub upstream_done: Option<DateTime<Utc>>,
    /// When this pool's desired AMI changes (`None`: not within the forecast).
    #[serde(serialize_with = "optional_instant")]
    pub desired_at: Option<DateTime<Utc>>,
    /// From when the pool waits for the promotion (the new AMI is there, or the start of a
    /// live forecast; not before the forecast's start); `None` when no new AMI ever comes.
    /// The pool waits from here to `desired_at` (or the end), for the picture.
    #[serde(skip)]
    pub waits_from: Option<DateTime<Utc>>,
    /// `promotion.soak`, for the picture.
    #[serde(skip)]
    pub soak: Option<std::time::Duration>,
    /// `promotion.minAge` (as applied: not for a live pool), for the picture.
    #[serde(skip)]
    pub min_age: Option<std::time::Duration>,
    /// The upstream indicted the release (when, which AMI) before this pool would have taken
    /// it: it never does. For the picture.
    #[serde(skip)]
    pub indicted: Option<(DateTime<Utc>, String)>,
}

/// The one time zone all scheduled budgets use, else UTC.
fn axis_zone<'a>(policies: impl Iterator<Item = &'a Policy>) -> Tz {
    let mut zones = policies
        .flat_map(|p| p.budgets.iter())
        .filter_map(|b| b.window.as_ref().map(|w| w.time_zone));
    match zones.next() {
        Some(first) if zones.all(|z| z == first) => first,
        _ => Tz::UTC,
    }
}

/// `t` rounded down to the minute.
pub fn floor_minute(t: DateTime<Utc>) -> DateTime<Utc> {
    let secs = t.timestamp().div_euclid(60) * 60;
    DateTime::from_timestamp(secs, 0).unwrap_or(t)
}

/// `t` rounded up to the minute.
fn ceil_minute(t: DateTime<Utc>) -> DateTime<Utc> {
    let down = floor_minute(t);
    if down == t {
        t
    } else {
        down + TimeDelta::minutes(1)
    }
}

fn format_instant(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

fn instant<S: Serializer>(t: &DateTime<Utc>, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format_instant(*t))
}

fn optional_instant<S: Serializer>(t: &Option<DateTime<Utc>>, s: S) -> Result<S::Ok, S::Error> {
    match t {
        Some(t) => instant(t, s),
        None => s.serialize_none(),
    }
}
