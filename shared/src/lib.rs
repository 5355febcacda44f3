//! nodecycle core library.
//!
//! Pure decision modules (`policy`, `ami`, `budget`, `plan`, `rotation`, `promotion`, `event`)
//! take plain values and the current time and do no I/O. The state table is one typed
//! repository ([`state`]); events out are leaf values ([`bus`]) staged by [`announce`].
//! Adapters to AWS live in [`aws`] (feature `aws`, on by default); the Lambda handlers that
//! wire them together live in [`handlers`].
//!
//! # Layers
//! Each top-level module belongs to one layer and uses only modules of its own layer or lower
//! ones, with no circle within a layer (scripts/layers.py checks these lines):
//! - L0 base: problem, duration, clock, error, opt_in
//! - L1 model: image, policy, ami, budget, fleet, rotation, bus, promotion, managed, stop, plan, simulate, metrics, event, interruption
//! - L2 port: port
//! - L3 state: state, announce
//! - L4 adapters: aws, kube
//! - L5 use cases: handlers, doctor
//! - L6 wiring: wiring, logging

pub mod ami;
pub mod announce;
pub mod budget;
pub mod bus;
pub mod clock;
pub mod doctor;
pub mod duration;
pub mod event;
pub mod fleet;
pub mod image;
pub mod interruption;
pub mod managed;
pub mod metrics;
pub mod opt_in;
pub mod plan;
pub mod policy;
pub mod port;
pub mod problem;
pub mod promotion;
pub mod rotation;
pub mod simulate;
pub mod state;
pub mod stop;

#[cfg(feature = "aws")]
pub mod aws;
#[cfg(feature = "aws")]
pub mod handlers;
#[cfg(feature = "kube")]
pub mod kube;
#[cfg(feature = "aws")]
pub mod logging;
