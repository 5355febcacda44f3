//! The parameters the pools resolve through (`PARAMETER`): the newest version seen of each,
//! so that a later read can tell a withdrawal (a higher version naming an older image) from a
//! stale read (a lower version).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::*;

/// The newest version of a parameter seen.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SeenParameter {
    /// Its version.
    pub version: i64,
    /// Its value then.
    pub value: String,
    /// When it was seen first.
    pub at: DateTime<Utc>,
}

impl Repository {
    /// Every parameter seen, by name (an unreadable item is logged and left out).
    pub async fn seen_parameters(&self) -> Result<BTreeMap<String, SeenParameter>, PortError> {
        let items = self
            .store
            .query(keys::PARAMETER_PK, keys::PARAMETER_PREFIX)
            .await?;
        let mut out = BTreeMap::new();
        for (sk, v) in items {
            let Some(name) = sk.strip_prefix(keys::PARAMETER_PREFIX) else {
                continue;
            };
            match serde_json::from_value::<SeenParameter>(v.value) {
                Ok(p) => {
                    out.insert(name.to_string(), p);
                }
                Err(e) => {
                    tracing::error!(sk = %sk, error = %e, "unreadable parameter item ignored")
                }
            }
        }
        Ok(out)
    }

    /// Records `seen` for parameter `name` unless a version at least as new is recorded
    /// (conditional on the item as read, read again on a lost race): the version it replaced,
    /// `None` when it recorded nothing newer than what was there (or nothing was there).
    pub async fn see_parameter(
        &self,
        name: &str,
        seen: &SeenParameter,
    ) -> Result<Option<SeenParameter>, PortError> {
        let sk = keys::parameter_sk(name);
        let doc = encode(seen)?;
        for _ in 0..WRITE_ATTEMPTS {
            let current = self.store.get(keys::PARAMETER_PK, &sk).await?;
            let before: Option<SeenParameter> = current
                .as_ref()
                .and_then(|v| serde_json::from_value(v.value.clone()).ok());
            if before.as_ref().is_some_and(|b| b.version >= seen.version) {
                return Ok(None);
            }
            let expected = current.map(|v| v.version);
            if won(self
                .store
                .put(keys::PARAMETER_PK, &sk, &doc, expected, None)
                .await)?
            .is_some()
            {
                return Ok(before);
            }
        }
        Err(too_many_conflicts())
    }
}
