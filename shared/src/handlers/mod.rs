//! Lambda handlers: the one code path shared by each function's `main.rs` and `nodecycle run`.
//! Handlers take the payload as JSON and `now`, and return a JSON response.

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

use crate::event::InvalidEvent;

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

impl From<InvalidEvent> for HandlerError {
    fn from(e: InvalidEvent) -> Self {
        Self {
            error_type: InvalidEvent::ERROR_TYPE.into(),
            message: e.to_string(),
        }
    }
}

/// Names of the functions `nodecycle run` can invoke.
pub const FUNCTIONS: &[&str] = &["ami-watcher", "rotator", "ops", "interruption-handler"];
