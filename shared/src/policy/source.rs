//! Where policy documents come from: SSM parameters under a prefix (see
//! [`crate::aws::ssm::Ssm`]) or files.

use async_trait::async_trait;

use crate::port::{ErrorKind, PortError};

/// Default SSM prefix holding one policy parameter per pool.
pub const DEFAULT_PREFIX: &str = "/nodecycle/pools/";
/// Environment variable overriding [`DEFAULT_PREFIX`].
pub const PREFIX_ENV: &str = "NODECYCLE_POLICY_PREFIX";

/// One policy document and where it was read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyDocument {
    /// Parameter name or file path.
    pub source: String,
    /// YAML or JSON text.
    pub text: String,
}

/// Reads policy documents.
#[async_trait]
pub trait PolicySource: Send + Sync {
    /// Every document, sorted by source.
    async fn all(&self) -> Result<Vec<PolicyDocument>, PortError>;
    /// One document by source; `Ok(None)` if it does not exist.
    async fn one(&self, source: &str) -> Result<Option<PolicyDocument>, PortError>;
    /// True when `name` (e.g. a changed parameter) is one of this source's documents.
    fn contains(&self, name: &str) -> bool;
}

/// Policy documents in local files.
#[derive(Debug, Clone)]
pub struct Files(pub Vec<String>);

#[async_trait]
impl PolicySource for Files {
    async fn all(&self) -> Result<Vec<PolicyDocument>, PortError> {
        let mut out = Vec::new();
        for path in &self.0 {
            if let Some(doc) = self.one(path).await? {
                out.push(doc);
            } else {
                return Err(PortError::new(
                    "read",
                    ErrorKind::NotFound,
                    format!("{path}: no such file"),
                ));
            }
        }
        Ok(out)
    }

    async fn one(&self, source: &str) -> Result<Option<PolicyDocument>, PortError> {
        match std::fs::read_to_string(source) {
            Ok(text) => Ok(Some(PolicyDocument {
                source: source.to_string(),
                text,
            })),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(PortError::new(
                "read",
                ErrorKind::Other,
                format!("{source}: {e}"),
            )),
        }
    }

    fn contains(&self, name: &str) -> bool {
        self.0.iter().any(|p| p == name)
    }
}
