//! EKS managed node groups: what the rotator observes about one (pure data built by an
//! adapter), the update record it keeps in the state table, and the port it drives.
//!
//! A managed node group replaces its own nodes: `UpdateNodegroupVersion` surges, cordons,
//! drains (respecting PodDisruptionBudgets) and terminates at most `updateConfig.maxUnavailable`
//! nodes at a time. nodecycle decides *when* an update starts (budgets, gates) and *how wide*
//! (`maxUnavailable` = the Drifted allowance), then follows it with `DescribeUpdate`.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::port::PortError;
use crate::state::PoolRecord;

/// The most EKS accepts for `updateConfig.maxUnavailable`.
pub const MAX_UNAVAILABLE_LIMIT: u32 = 100;

/// Sort key of a pool's managed node group update record.
pub const UPDATE_SK: &str = "MNGUPDATE";

/// A launch template as a node group names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TemplateRef {
    /// `lt-...`.
    pub id: Option<String>,
    /// Template name.
    pub name: Option<String>,
    /// Version as the node group records it (a number).
    pub version: Option<String>,
}

/// A managed node group as `DescribeNodegroup` reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ManagedGroup {
    /// Node group name.
    pub name: String,
    /// `ACTIVE`, `UPDATING`, `DEGRADED`, ...
    pub status: String,
    /// `releaseVersion` (EKS AMI types; for custom launch templates with an AMI it is unset).
    pub release_version: Option<String>,
    /// `amiType` (`AL2023_x86_64_STANDARD`, `BOTTLEROCKET_ARM_64`, `CUSTOM`, ...).
    pub ami_type: Option<String>,
    /// The custom launch template, if the group was created with one.
    pub launch_template: Option<TemplateRef>,
    /// `updateConfig.maxUnavailable`.
    pub max_unavailable: Option<u32>,
    /// `updateConfig.maxUnavailablePercentage`.
    pub max_unavailable_percentage: Option<u32>,
    /// The Auto Scaling group EKS created for it.
    pub auto_scaling_group: Option<String>,
}

/// What an `UpdateNodegroupVersion` moves the group to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "kind")]
pub enum UpdateTarget {
    /// An EKS-published AMI release (`releaseVersion`), for groups without a custom template.
    ReleaseVersion {
        /// e.g. `1.30.4-20241109`.
        version: String,
    },
    /// A version of the group's custom launch template.
    LaunchTemplate {
        /// `lt-...`.
        id: String,
        /// Version number.
        version: String,
    },
}

impl std::fmt::Display for UpdateTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            UpdateTarget::ReleaseVersion { version } => write!(f, "releaseVersion {version}"),
            UpdateTarget::LaunchTemplate { id, version } => {
                write!(f, "launch template {id} version {version}")
            }
        }
    }
}

/// `DescribeUpdate`'s status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum UpdateState {
    /// Running.
    InProgress,
    /// Finished: every node runs the target.
    Successful,
    /// Stopped with errors (e.g. `PodEvictionFailure`).
    Failed,
    /// Cancelled.
    Cancelled,
}

impl UpdateState {
    /// Anything but `InProgress`.
    pub fn is_finished(self) -> bool {
        self != UpdateState::InProgress
    }

    /// Parses EKS's status string; unknown strings are `None`.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "InProgress" => Some(UpdateState::InProgress),
            "Successful" => Some(UpdateState::Successful),
            "Failed" => Some(UpdateState::Failed),
            "Cancelled" => Some(UpdateState::Cancelled),
            _ => None,
        }
    }
}

/// One `DescribeUpdate` answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpdateStatus {
    /// Update id.
    pub id: String,
    /// Status.
    pub state: UpdateState,
    /// `errorCode: errorMessage (resources)` per error.
    pub errors: Vec<String>,
}

/// Phase of the update record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Phase {
    /// Intent recorded (with its client request token); `UpdateNodegroupVersion` may or may not
    /// have been called. Repeating the call with the same token returns the same update.
    Starting,
    /// EKS accepted it; followed with `DescribeUpdate`.
    InProgress,
    /// Finished successfully.
    Successful,
    /// Finished with errors; the pool is halted.
    Failed,
    /// Cancelled (by EKS or a person); treated like a failure.
    Cancelled,
}

impl Phase {
    /// `Successful`, `Failed` or `Cancelled`.
    pub fn is_finished(self) -> bool {
        matches!(self, Phase::Successful | Phase::Failed | Phase::Cancelled)
    }
}

/// The pool's managed node group update, stored at ([`crate::state::pool_pk`], [`UPDATE_SK`]).
/// One record per pool: a new update replaces a finished one with a conditional write, so two
/// rotators never start two updates.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ManagedUpdate {
    /// `<cluster>/<name>`.
    pub pool: String,
    /// The AMI the update rolls out.
    pub image: String,
    /// What `UpdateNodegroupVersion` is asked for; `None` until known (first pass of `Starting`).
    pub target: Option<UpdateTarget>,
    /// `updateConfig.maxUnavailable` the update runs with (the Drifted allowance at start).
    pub max_unavailable: u32,
    /// `clientRequestToken`: makes repeating the start after a crash harmless.
    pub token: String,
    /// EKS update id, once known.
    pub update_id: Option<String>,
    /// Phase.
    pub phase: Phase,
    /// When the record was created.
    pub started_at: DateTime<Utc>,
    /// When the phase last changed.
    pub phase_at: DateTime<Utc>,
    /// Errors EKS reported, or why the start failed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<String>,
}

impl ManagedUpdate {
    /// A new record in [`Phase::Starting`].
    pub fn starting(pool: &str, image: &str, max_unavailable: u32, now: DateTime<Utc>) -> Self {
        let token = format!(
            "nodecycle-{}-{}",
            image.trim_start_matches("ami-"),
            now.timestamp_millis()
        );
        ManagedUpdate {
            pool: pool.to_string(),
            image: image.to_string(),
            target: None,
            max_unavailable,
            token,
            update_id: None,
            phase: Phase::Starting,
            started_at: now,
            phase_at: now,
            errors: Vec::new(),
        }
    }

    /// The record after `DescribeUpdate` said `status` (unchanged while in progress).
    pub fn observe(&self, status: &UpdateStatus, now: DateTime<Utc>) -> ManagedUpdate {
        let phase = match status.state {
            UpdateState::InProgress => Phase::InProgress,
            UpdateState::Successful => Phase::Successful,
            UpdateState::Failed => Phase::Failed,
            UpdateState::Cancelled => Phase::Cancelled,
        };
        ManagedUpdate {
            update_id: Some(status.id.clone()),
            phase,
            phase_at: if phase == self.phase {
                self.phase_at
            } else {
                now
            },
            errors: status.errors.clone(),
            ..self.clone()
        }
    }

    /// Why the pool halts after this update, if it failed or was cancelled.
    pub fn halt_reason(&self) -> Option<String> {
        let what = match self.phase {
            Phase::Failed => "failed",
            Phase::Cancelled => "was cancelled",
            _ => return None,
        };
        Some(format!(
            "managed node group update {} to {} ({}) {what}: {}; pool halted (fix the cause, then `nodecycle resume`)",
            self.update_id.as_deref().unwrap_or("(not started)"),
            self.image,
            self.target
                .as_ref()
                .map_or_else(|| "no target".to_string(), ToString::to_string),
            if self.errors.is_empty() {
                "no error reported".to_string()
            } else {
                self.errors.join("; ")
            }
        ))
    }
}

/// The SSM parameters that tell which EKS release `ami` is: the JSON parent of the `image_id`
/// parameter it was resolved from (EKS-optimized and Windows AMIs: `release_version`), and its
/// `image_version` sibling (Bottlerocket). The parameter comes from the provenance recorded for
/// `ami` in `record` (desired, previous, or history). An AMI that did not come from such a
/// parameter (an `id`/`name`/`tags` term, a pin outside the history) has no known release:
/// the error says what to do.
pub fn release_parameters(record: &PoolRecord, ami: &str) -> Result<(String, String), String> {
    let known = record
        .desired
        .iter()
        .chain(record.previous_desired.iter())
        .chain(record.history.iter().rev().map(|h| &h.ami))
        .find(|a| a.id == ami);
    let Some(found) = known else {
        return Err(format!(
            "{ami} is not an AMI this pool ever resolved to, so its EKS release is unknown; a managed node group without an image in its launch template can only move to EKS releases: pin an AMI from the pool's history or give the node group a launch template"
        ));
    };
    match found
        .source
        .parameter
        .as_deref()
        .and_then(|p| p.strip_suffix("/image_id"))
    {
        Some(parent) if parent.starts_with("/aws/service/") => {
            Ok((parent.to_string(), format!("{parent}/image_version")))
        }
        _ => Err(format!(
            "{ami} came from amiSelectorTerms[{}] {} {:?}, not from an EKS-published parameter, so it has no EKS release; a managed node group without an image in its launch template can only move to EKS releases: use an alias term or give the node group a launch template",
            found.source.term, found.source.field, found.source.value
        )),
    }
}

/// The release version from the values of [`release_parameters`]: the parent's JSON
/// `release_version` when its `image_id` is `ami` (a parameter that moved on since the watcher
/// resolved is an error: the next watcher pass catches up), else the `image_version` sibling.
pub fn release_version(
    values: &std::collections::HashMap<String, String>,
    (parent, sibling): &(String, String),
    ami: &str,
) -> Result<String, String> {
    if let Some(text) = values.get(parent)
        && let Ok(doc) = serde_json::from_str::<serde_json::Value>(text)
    {
        let image = doc.get("image_id").and_then(|v| v.as_str());
        let release = doc.get("release_version").and_then(|v| v.as_str());
        return match (image, release) {
            (Some(i), Some(r)) if i == ami => Ok(r.to_string()),
            (Some(i), Some(_)) => Err(format!(
                "parameter {parent} now names {i}, not {ami}: waiting for the ami-watcher to record the new AMI"
            )),
            _ => Err(format!(
                "parameter {parent} has no image_id/release_version fields; expected EKS's JSON {{\"image_id\", \"release_version\", ...}}"
            )),
        };
    }
    values.get(sibling).cloned().ok_or_else(|| {
        format!("neither {parent} (JSON with release_version) nor {sibling} exists: the release of {ami} is unknown")
    })
}

/// EKS managed node group operations.
#[async_trait::async_trait]
pub trait ManagedGroupOps: Send + Sync {
    /// `DescribeNodegroup`.
    async fn describe(&self, cluster: &str, name: &str) -> Result<ManagedGroup, PortError>;

    /// Sets `updateConfig.maxUnavailable` (`UpdateNodegroupConfig`). A no-op when it already is.
    async fn set_max_unavailable(
        &self,
        cluster: &str,
        name: &str,
        max_unavailable: u32,
    ) -> Result<(), PortError>;

    /// `UpdateNodegroupVersion` without `force` (PodDisruptionBudgets are respected); returns
    /// the update id. Repeating it with the same `token` returns the same update. Another
    /// update in progress is a [`crate::port::ErrorKind::Conflict`].
    async fn start_update(
        &self,
        cluster: &str,
        name: &str,
        target: &UpdateTarget,
        token: &str,
    ) -> Result<String, PortError>;

    /// `DescribeUpdate`.
    async fn describe_update(
        &self,
        cluster: &str,
        name: &str,
        update_id: &str,
    ) -> Result<UpdateStatus, PortError>;

    /// The launch template version that launches `image`: `template`'s version itself when it
    /// already does, else a new version created from it with only the image changed. Returns
    /// `(template id, version)`.
    async fn template_with_image(
        &self,
        template: &TemplateRef,
        image: &str,
    ) -> Result<(String, String), PortError>;

    /// The AMI a launch template version launches, if it names one.
    async fn template_image(&self, template: &TemplateRef) -> Result<Option<String>, PortError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s)
            .map(|d| d.with_timezone(&Utc))
            .unwrap_or_default()
    }

    #[test]
    fn observe_moves_phase_and_keeps_time_while_unchanged() {
        let t0 = at("2026-12-01T00:00:00Z");
        let t1 = at("2026-12-01T00:05:00Z");
        let mut u = ManagedUpdate::starting("c/p", "ami-1", 2, t0);
        u.phase = Phase::InProgress;
        let running = UpdateStatus {
            id: "u1".into(),
            state: UpdateState::InProgress,
            errors: vec![],
        };
        assert_eq!(u.observe(&running, t1).phase_at, t0);
        let failed = UpdateStatus {
            id: "u1".into(),
            state: UpdateState::Failed,
            errors: vec!["PodEvictionFailure: x".into()],
        };
        let f = u.observe(&failed, t1);
        assert_eq!((f.phase, f.phase_at), (Phase::Failed, t1));
        let why = f.halt_reason().unwrap_or_default();
        assert!(
            why.contains("u1") && why.contains("PodEvictionFailure"),
            "{why}"
        );
        assert_eq!(u.halt_reason(), None);
    }

    #[test]
    fn tokens_differ_per_image_and_time() {
        let t0 = at("2026-12-01T00:00:00Z");
        let a = ManagedUpdate::starting("c/p", "ami-1", 1, t0).token;
        let b = ManagedUpdate::starting("c/p", "ami-2", 1, t0).token;
        let c = ManagedUpdate::starting("c/p", "ami-1", 1, at("2026-12-01T00:01:00Z")).token;
        assert!(a != b && a != c);
        assert!(a.len() <= 64, "EKS clientRequestToken is at most 64 chars");
    }

    fn ami(id: &str, field: &str, parameter: Option<&str>) -> crate::ami::resolve::Ami {
        crate::ami::resolve::Ami {
            id: id.into(),
            name: format!("name-{id}"),
            architecture: crate::ami::Architecture::X86_64,
            variant: None,
            creation_date: "2024-11-01T00:00:00.000Z".into(),
            deprecated: false,
            source: crate::ami::select::Provenance {
                term: 0,
                field: field.into(),
                value: "v".into(),
                parameter: parameter.map(str::to_string),
            },
        }
    }

    const REC: &str =
        "/aws/service/eks/optimized-ami/1.30/amazon-linux-2023/x86_64/standard/recommended";

    #[test]
    fn release_of_an_alias_ami_comes_from_the_recommended_json() {
        let record = PoolRecord {
            desired: Some(ami("ami-new", "alias", Some(&format!("{REC}/image_id")))),
            previous_desired: Some(ami("ami-old", "id", None)),
            ..PoolRecord::default()
        };
        let params = release_parameters(&record, "ami-new").unwrap_or_default();
        assert_eq!(params, (REC.to_string(), format!("{REC}/image_version")));
        let mut values = std::collections::HashMap::new();
        values.insert(
            REC.to_string(),
            r#"{"image_id":"ami-new","image_name":"n","release_version":"1.30.6-20241101"}"#
                .to_string(),
        );
        assert_eq!(
            release_version(&values, &params, "ami-new"),
            Ok("1.30.6-20241101".into())
        );
        // The parameter moved on: wait for the watcher.
        let moved = release_version(&values, &params, "ami-other").unwrap_err();
        assert!(moved.contains("waiting for the ami-watcher"), "{moved}");
        // Bottlerocket: no JSON parent, an image_version sibling.
        let mut br = std::collections::HashMap::new();
        br.insert(
            format!("{REC}/image_version"),
            "1.20.3-5d9ac849".to_string(),
        );
        assert_eq!(
            release_version(&br, &params, "ami-new"),
            Ok("1.20.3-5d9ac849".into())
        );
        let none =
            release_version(&std::collections::HashMap::new(), &params, "ami-new").unwrap_err();
        assert!(none.contains("unknown"), "{none}");
    }

    #[test]
    fn an_ami_from_an_id_term_or_unknown_has_no_release() {
        let record = PoolRecord {
            desired: Some(ami("ami-x", "id", None)),
            ..PoolRecord::default()
        };
        let e = release_parameters(&record, "ami-x").unwrap_err();
        assert!(
            e.contains("not from an EKS-published parameter") && e.contains("launch template"),
            "{e}"
        );
        let e = release_parameters(&record, "ami-never").unwrap_err();
        assert!(e.contains("not an AMI this pool ever resolved to"), "{e}");
    }
}
