//! nodecycle core library.
//!
//! Pure decision modules (`policy`, `ami`, `budget`, `plan`, `rotation`, `promotion`, `event`)
//! take plain values and the current time and do no I/O. The state table is one typed
//! repository ([`state`]); events out are leaf values ([`bus`]) staged by [`announce`].
//! Adapters to AWS live in [`aws`] (feature `aws`, on by default); the Lambda handlers that
//! wire them together live in [`handlers`].
//!
//! # Layers
//!
//! Lowest first; a module uses modules of its own layer and of lower ones, never of a higher
//! one, and no two modules use each other (directly or round a circle). `scripts/layers.py`
//! enforces this list (CI runs it from `scripts/test.sh`); a nested module listed on its own
//! (`ami::resolve`) is a layer of its own, apart from its parent. Unit tests may use anything.
//!
//! - L0 base: problem, duration, clock, opt_in, port, tags, log_field
//! - L1 vocabulary: image, ami
//! - L2 model: policy, ami::resolve, ami::instance_types, budget, fleet, rotation, promotion, managed, bus, plan, simulate, event, interruption, interruption::action, metrics, inventory, stop, dispatch, members, repair, backoff, retain, rollout, deprecation, upgrade
//! - L3 state: state, announce
//! - L4 adapters: aws, kube, ports
//! - L5 use cases: handlers, handlers::ami_watcher, handlers::interruption, handlers::ops, handlers::rotator, handlers::onboard, doctor
//! - L6 wiring: wiring, logging
//! - L7 test support: fake
//!
//! Base types everyone shares (errors of port calls in [`port`]); the vocabulary of images;
//! the pure model, with each port trait beside the values it speaks in; the state table's
//! repository; adapters implementing the ports over AWS and Kubernetes; the use cases (each
//! function's handlers, `nodecycle doctor`); the wiring that reads each function's
//! configuration and builds its ports (only the functions' `main`s use it); in-memory fakes of
//! the ports for tests (feature `test-support`).

pub mod ami;
pub mod announce;
pub mod backoff;
pub mod budget;
pub mod bus;
pub mod clock;
pub mod deprecation;
pub mod dispatch;
pub mod doctor;
pub mod duration;
pub mod event;
#[cfg(all(any(test, feature = "test-support"), feature = "aws", feature = "kube"))]
pub mod fake;
pub mod fleet;
pub mod image;
pub mod interruption;
pub mod inventory;
pub mod log_field;
pub mod managed;
pub mod members;
pub mod metrics;
pub mod opt_in;
pub mod plan;
pub mod policy;
pub mod port;
pub mod problem;
pub mod promotion;
pub mod repair;
pub mod retain;
pub mod rollout;
pub mod rotation;
pub mod simulate;
pub mod state;
pub mod stop;
pub mod tags;
pub mod upgrade;

#[cfg(feature = "aws")]
pub mod aws;
#[cfg(feature = "aws")]
pub mod handlers;
// The bundle names the AWS-built adapters' ports (members among them): with `aws` only.
#[cfg(feature = "kube")]
pub mod kube;
#[cfg(feature = "aws")]
pub mod logging;
#[cfg(feature = "aws")]
pub mod ports;
#[cfg(all(feature = "aws", feature = "kube"))]
pub mod wiring;
