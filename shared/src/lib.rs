//! nodecycle core library.
//!
//! Pure decision modules (`policy`, `ami`, `budget`, `plan`, `state`, `event`) take plain values
//! and the current time and do no I/O. Adapters to AWS live in [`aws`] (feature `aws`, on by
//! default); the Lambda handlers that wire them together live in [`handlers`].

pub mod ami;
pub mod announce;
pub mod budget;
pub mod bus;
pub mod clock;
pub mod doctor;
pub mod duration;
pub mod event;
pub mod fleet;
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
pub mod snapshot;
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
