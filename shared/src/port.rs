//! Errors shared by every port (narrow trait over one AWS or Kubernetes capability).

use std::fmt;

/// What kind of failure a port call had; decisions depend on the kind, never on SDK types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub enum ErrorKind {
    /// The named thing does not exist.
    NotFound,
    /// A conditional write lost a race; re-read and retry.
    Conflict,
    /// Throttling or a transient service/network failure; retry later.
    Transient,
    /// Credentials or permissions.
    AccessDenied,
    /// Anything else (bad request, unexpected response).
    Other,
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
}

impl fmt::Display for PortError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} failed: {}", self.operation, self.message)
    }
}
