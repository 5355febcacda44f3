//! Lambda handlers: the one code path shared by each function's `main.rs` and `nodecycle run`.
//! Handlers take the payload as JSON and `now`, and return a JSON response.

/// Declares a handler's [`PlacePorts`]: a struct of the named fields of [`crate::ports::Ports`]
/// (each of the type and meaning it has there, [`crate::ports::port_type`]) and its
/// [`PlacePorts::of`], which takes each of them from a place's `Ports` by the same name. With
/// `for Handler`, also the handler's `at(place)`: the handler (a struct with fields `cell` and
/// `ports` of this type) for pools at `place`.
macro_rules! place_ports {
    (
        $(#[$meta:meta])*
        pub struct $name:ident { $($field:ident),* $(,)? }
        $(for $handler:ident)?
    ) => {
        $(#[$meta])*
        #[derive(Clone)]
        pub struct $name {
            $(
                #[doc = concat!("[`Ports::", stringify!($field), "`](crate::ports::Ports::", stringify!($field), ").")]
                pub $field: $crate::ports::port_type::$field,
            )*
        }

        impl $crate::handlers::PlacePorts for $name {
            fn of(ports: &$crate::ports::Ports) -> Self {
                $name {
                    $($field: ports.$field.clone(),)*
                }
            }
        }

        $(
            impl $handler {
                /// This handler for pools and events at `place`: its AWS and Kubernetes ports
                /// those of the place's member ([`crate::ports::Members`]); the table, the bus
                /// and the metrics stay the cell's. `None` (or the cell's own place) is this
                /// handler. `Err`: the place is not served or its spoke role cannot be assumed.
                pub async fn at(
                    &self,
                    place: Option<&$crate::policy::Place>,
                ) -> Result<Self, $crate::members::MemberError> {
                    Ok($handler {
                        ports: self.cell.at(place, &self.ports).await?,
                        ..self.clone()
                    })
                }
            }
        )?
    };
}

pub mod ami_watcher;
#[cfg(feature = "kube")]
pub mod dispatch;
#[cfg(feature = "kube")]
pub mod interruption;
#[cfg(feature = "kube")]
pub mod onboard;
#[cfg(feature = "kube")]
pub mod ops;
#[cfg(feature = "kube")]
pub mod rotator;

use std::time::Instant;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::event::InvalidEvent;

/// One invocation as the Lambda runtime reports it (or `nodecycle run`, which stands in for it).
#[derive(Clone, Copy, Debug)]
pub struct Invocation<'a> {
    /// When it started: the handlers' clock.
    pub now: DateTime<Utc>,
    /// When it must have answered.
    pub deadline: Instant,
    /// Lambda's request id (`None`: not invoked through Lambda, e.g. a test).
    pub request_id: Option<&'a str>,
    /// Who invoked it, when the client says (Lambda's client context or Cognito identity).
    pub caller: Option<&'a str>,
}

impl Invocation<'_> {
    /// An invocation at `now` with `deadline`, of no request and no caller.
    pub fn at(now: DateTime<Utc>, deadline: Instant) -> Self {
        Invocation {
            now,
            deadline,
            request_id: None,
            caller: None,
        }
    }
}

/// A function as its runtime calls it: one event in; out, the answer, or the error Lambda
/// records for the invocation. Each function's `main` serves one
/// ([`crate::wiring::serve`]); `nodecycle run` invokes the same.
#[async_trait]
pub trait Function: Send + Sync {
    /// Answers `payload`, delivered in invocation `inv`.
    async fn invoke(&self, payload: &Value, inv: Invocation<'_>) -> Result<Value, HandlerError>;
}

/// An invocation's deadline as an `Instant`, from Lambda's deadline in epoch milliseconds (an
/// already passed or unreadable deadline is now).
pub fn deadline_from_epoch_ms(deadline_ms: u64) -> std::time::Instant {
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    let left = u128::from(deadline_ms).saturating_sub(now_ms);
    std::time::Instant::now() + std::time::Duration::from_millis(u64::try_from(left).unwrap_or(0))
}

/// A handler failure with the Lambda error type to report.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{error_type}: {message}")]
pub struct HandlerError {
    /// Lambda `errorType` (`InvalidEvent`, `InvalidRequest`, `Internal`, ...).
    pub error_type: String,
    /// What went wrong and what to do.
    pub message: String,
}

impl HandlerError {
    /// An internal failure (the invocation should be retried).
    pub fn internal(message: impl Into<String>) -> Self {
        Self {
            error_type: "Internal".into(),
            message: message.into(),
        }
    }
}

/// What a Lambda function reports: `errorType` and `errorMessage`.
#[cfg(feature = "lambda")]
impl From<HandlerError> for lambda_runtime::Diagnostic {
    fn from(e: HandlerError) -> Self {
        lambda_runtime::Diagnostic {
            error_type: e.error_type,
            error_message: e.message,
        }
    }
}

impl From<InvalidEvent> for HandlerError {
    fn from(e: InvalidEvent) -> Self {
        Self {
            error_type: InvalidEvent::ERROR_TYPE.into(),
            message: e.to_string(),
        }
    }
}

/// What every handler of a cell holds, wherever the pool it works on is: the policy documents,
/// the cell's state table and bus, and the members whose ports reach other places. Beside it
/// each handler keeps only the ports it uses of the place it works at ([`PlacePorts`]).
#[derive(Clone)]
pub struct CellPorts {
    /// Policy documents.
    pub policies: std::sync::Arc<dyn crate::policy::source::PolicySource>,
    /// The state table.
    pub state: crate::state::Repository,
    /// Records transitions' events and puts them on the bus (same table as `state`).
    pub announce: crate::announce::Announcer,
    /// The ports of pools in other accounts and regions.
    pub members: std::sync::Arc<dyn crate::ports::Members>,
    /// Where pools' rollout statuses are published (SSM parameters in the cell's account).
    pub status: std::sync::Arc<dyn crate::rollout::StatusBoard>,
}

impl CellPorts {
    /// The cell's parts of `ports`.
    pub fn new(ports: &crate::ports::Ports) -> Self {
        CellPorts {
            policies: ports.policies.clone(),
            state: ports.repository(),
            announce: ports.announcer(),
            members: ports.members.clone(),
            status: ports.status.clone(),
        }
    }

    /// Every policy document; a failed read is an internal error that says so.
    pub async fn documents(
        &self,
    ) -> Result<Vec<crate::policy::source::PolicyDocument>, HandlerError> {
        self.policies
            .all()
            .await
            .map_err(|e| HandlerError::internal(format!("cannot list policies: {e}")))
    }

    /// `own` (the ports a handler uses at the cell's place) for pools at `place`: `own` itself
    /// for `None` or the cell's own place, else the same ports of the place's member
    /// ([`crate::members::at`]). `Err`: the place is not served or its spoke role cannot be
    /// assumed.
    pub async fn at<P: PlacePorts>(
        &self,
        place: Option<&crate::policy::Place>,
        own: &P,
    ) -> Result<P, crate::members::MemberError> {
        crate::ports::at(self.members.as_ref(), place, own, |p| P::of(&p)).await
    }
}

/// The ports a handler uses of the place it works at (AWS and Kubernetes: the cell's own, or a
/// member's), taken from that place's [`crate::ports::Ports`].
pub trait PlacePorts: Clone {
    /// The ports this handler uses, out of `ports`.
    fn of(ports: &crate::ports::Ports) -> Self;
}
