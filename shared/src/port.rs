//! Errors shared by every port (narrow trait over one AWS or Kubernetes capability).

use std::fmt;

/// What kind of failure a port call had; decisions depend on the kind, never on SDK types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub enum ErrorKind {
    /// The named thing does not exist.
    NotFound,
    /// A conditional write lost a race, or the resource is busy; re-read and retry.
    Conflict,
    /// The service throttled the call (after the SDK's own retries); retry later, slower.
    Throttled,
    /// A transient service or network failure (5xx, reset, timeout); retry later.
    Transient,
    /// Credentials or permissions.
    AccessDenied,
    /// The request was refused as invalid (validation errors, bad parameters).
    Invalid,
    /// Anything else (unexpected response).
    Other,
}

impl ErrorKind {
    /// Throttled or transient: the same call may succeed later.
    pub fn is_retryable(self) -> bool {
        matches!(self, ErrorKind::Throttled | ErrorKind::Transient)
    }
}

/// A failed call through a port: which service and operation, what kind, and the message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct PortError {
    /// e.g. `ssm:GetParameters`.
    pub operation: String,
    /// Classification used by callers.
    pub kind: ErrorKind,
    /// Human-readable detail (service error code and message); never contains secrets.
    pub message: String,
}

impl PortError {
    /// Builds an error.
    pub fn new(operation: impl Into<String>, kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            operation: operation.into(),
            kind,
            message: message.into(),
        }
    }

    /// True for [`ErrorKind::NotFound`].
    pub fn is_not_found(&self) -> bool {
        self.kind == ErrorKind::NotFound
    }

    /// An error of kind [`ErrorKind::Other`] for something that is not a service call (e.g. a
    /// record that cannot be encoded).
    pub fn other(operation: impl Into<String>, message: impl std::fmt::Display) -> Self {
        Self::new(operation, ErrorKind::Other, message.to_string())
    }
}

impl fmt::Display for PortError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} failed: {}", self.operation, self.message)
    }
}
