//! A forecast of the rollout (pure, no I/O): days of rotator passes over virtual fleets, run
//! through the real planner ([`crate::plan::plan`], [`crate::plan::managed::plan_managed`]) and
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
//! wave ends, a budget becomes active or inactive (`next_change` of [`crate::budget::evaluate`]),
//! a node reaches `expireAfter` or `expireAfter + terminationGracePeriod`, the desired AMI
//! changes, a waiting maintenance rotation reaches its forced line. A pass that changes nothing
//! is therefore followed by the pass at the first such instant (rounded up to the minute, as the
//! rotator runs on whole minutes); a pass that changes something by the pass one minute later.
//! The tests compare this against a pass at every minute.

mod blocked;
mod engine;
pub mod picture;
mod waves;
mod windows;

#[cfg(test)]
mod tests;

use chrono::{DateTime, SecondsFormat, TimeDelta, Utc};
use chrono_tz::Tz;
use serde::{Serialize, Serializer};

use crate::fleet::{Gates, Group, Lifecycle, Member, NodeStatus, Snapshot};
use crate::managed::ManagedUpdate;
use crate::policy::{NodeGroup, Policy};
use crate::rotation::RotationReason;

/// The AMI the nodes of a synthetic pool run at the start.
pub const CURRENT_AMI: &str = "ami-current";
/// The AMI a synthetic pool's desired AMI changes to.
pub const NEW_AMI: &str = "ami-new";
/// The most days one forecast covers.
pub const MAX_DAYS: u32 = 31;

/// How the forecast runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    /// First pass (rounded down to the minute by [`simulate`]).
    pub from: DateTime<Utc>,
    /// Days forecast (1 to [`MAX_DAYS`]).
    pub days: u32,
    /// Time from a rotation's start to its done (and of one node group update wave); a whole
    /// number of minutes, at least one.
    pub rotation: TimeDelta,
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
}

impl PoolStart {
    /// The synthetic start: `nodes` Ready nodes running [`CURRENT_AMI`], launched `age` before
    /// `from`, the group launching [`CURRENT_AMI`] (the desired AMI until `new_ami_at`, then
    /// [`NEW_AMI`]); a managed node group is `ACTIVE` with no update. Gates: only the policy's
    /// `paused`.
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
                },
                group: Group {
                    name: group_name,
                    min_size: 0,
                    max_size: size.saturating_mul(2),
                    desired_capacity: size,
                    launch_template_image: Some(CURRENT_AMI.to_string()),
                },
                members,
                rotations: Vec::new(),
            },
            managed,
            desired_change: Some((new_ami_at, NEW_AMI.to_string())),
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
        node: Some(NodeStatus {
            name: format!("node-{id}"),
            ready: true,
            unschedulable: false,
            disrupted: None,
            evictable_pods: 1,
        }),
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
/// `{"pool", "nodes", "rotations", "blocked", "done", "maxInFlight"}`.
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

/// One rotation. Serializes as `{"instance", "reason", "start", "end"}`.
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
    #[serde(skip)]
    pub forced: bool,
    /// Part of a managed node group update.
    #[serde(skip)]
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

/// Runs the forecast of every pool (independently) from `settings.from` for `settings.days`.
/// The caller checks `settings` ([`Settings::check`]).
pub fn simulate(pools: Vec<PoolStart>, settings: &Settings) -> Forecast {
    let settings = Settings {
        from: floor_minute(settings.from),
        ..*settings
    };
    let time_zone = axis_zone(pools.iter().map(|p| &p.snapshot.policy));
    Forecast {
        from: settings.from,
        to: settings.to(),
        pools: pools
            .into_iter()
            .map(|p| engine::run(p, &settings, engine::Stepping::Events))
            .collect(),
        time_zone,
    }
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
