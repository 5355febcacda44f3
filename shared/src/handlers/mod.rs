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

/// Overrides each duration whose environment variable is set (`15m`, `20s`, ...); a malformed
/// value is a `Configuration` error naming the variable.
pub fn durations_from_env(
    fields: &mut [(&str, &mut std::time::Duration)],
) -> Result<(), HandlerError> {
    for (var, field) in fields.iter_mut() {
        if let Ok(text) = std::env::var(*var) {
            **field = crate::duration::parse(&text).map_err(|e| HandlerError {
                error_type: "Configuration".into(),
                message: format!("{var}: {e}"),
            })?;
        }
    }
    Ok(())
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

/// The state table from `NODECYCLE_TABLE` (required) and the policy prefix from
/// `NODECYCLE_POLICY_PREFIX` (default `/nodecycle/pools/`).
pub fn table_and_prefix_from_env() -> Result<(String, String), HandlerError> {
    let table = std::env::var(crate::state::TABLE_ENV).map_err(|_| HandlerError {
        error_type: "Configuration".into(),
        message: format!(
            "{} is not set; expected the DynamoDB table name",
            crate::state::TABLE_ENV
        ),
    })?;
    let prefix = std::env::var(crate::policy::source::PREFIX_ENV)
        .unwrap_or_else(|_| crate::policy::source::DEFAULT_PREFIX.to_string());
    Ok((table, prefix))
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
