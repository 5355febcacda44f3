//! EKS managed node groups: what the rotator observes about one (pure data built by an
//! adapter), the update record it keeps in the state table, and the port it drives.
//!
//! A managed node group replaces its own nodes: `UpdateNodegroupVersion` surges, cordons,
//! drains (respecting PodDisruptionBudgets) and terminates at most `updateConfig.maxUnavailable`
//! nodes at a time. nodecycle decides *when* an update starts (budgets, gates) and *how wide*
//! (`maxUnavailable` = the Drifted allowance), then follows it with `DescribeUpdate`.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::ami::resolve::Ami;
use crate::port::PortError;

/// The most EKS accepts for `updateConfig.maxUnavailable`.
pub const MAX_UNAVAILABLE_LIMIT: u32 = 100;

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
    /// Its `updateConfig` (flat in JSON: `maxUnavailable`, `maxUnavailablePercentage`).
    #[serde(flatten)]
    pub update_config: UpdateConfig,
    /// The Auto Scaling group EKS created for it.
    pub auto_scaling_group: Option<String>,
    /// EKS node auto repair is on (`nodeRepairConfig.enabled`): EKS repairs the group's
    /// nodes, nodecycle does not.
    #[serde(default)]
    pub auto_repair: bool,
}

/// A node group's `updateConfig`: one of the two sizes is set, and the strategy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UpdateConfig {
    /// `maxUnavailable`.
    pub max_unavailable: Option<u32>,
    /// `maxUnavailablePercentage`.
    pub max_unavailable_percentage: Option<u32>,
    /// `updateStrategy` (`None`: not given, EKS's `DEFAULT`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update_strategy: Option<UpdateStrategy>,
}

/// `updateConfig.updateStrategy`: how EKS replaces a version update's nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum UpdateStrategy {
    /// New instances first, then the old ones terminated (EKS raises the group's size).
    Default,
    /// Old instances terminated first, then new ones launched: for groups that cannot grow
    /// (scarce or reserved capacity), nodecycle's `rollout.strategy: terminateFirst`.
    Minimal,
}

impl UpdateStrategy {
    /// EKS's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            UpdateStrategy::Default => "DEFAULT",
            UpdateStrategy::Minimal => "MINIMAL",
        }
    }
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

/// The pool's managed node group update, stored under the pool's partition
/// ([`crate::state::keys::UPDATE_SK`]).
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
    /// The group's `updateConfig` before nodecycle changed it, restored once the update ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub original_config: Option<UpdateConfig>,
    /// `original_config` was put back.
    #[serde(default)]
    pub config_restored: bool,
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
            original_config: None,
            config_restored: false,
        }
    }

    /// The `updateConfig` to put back now: the update has ended and the original is not
    /// restored yet.
    pub fn config_to_restore(&self) -> Option<UpdateConfig> {
        (self.phase.is_finished() && !self.config_restored)
            .then_some(self.original_config)
            .flatten()
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

/// Where the EKS release of an AMI can be read (see [`release_parameters`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReleaseLookup {
    /// The AMI.
    pub ami: String,
    /// Its EC2 name.
    pub name: String,
    /// The directory of the parameter it was resolved from (`.../recommended`, `.../latest`,
    /// `.../<release name>`).
    pub parent: String,
    /// The same release's own directory when `parent` is a moving one (`recommended`/`latest`):
    /// `<base>/<image name>` (EKS publishes one per release).
    pub release_dir: Option<String>,
    /// The AMI is what the pool's terms resolve to now (not a pin or an older AMI).
    pub current: bool,
}

impl ReleaseLookup {
    /// Every parameter to read (one `GetParameters` call).
    pub fn parameters(&self) -> Vec<String> {
        let p = &self.parent;
        let mut out = vec![
            p.clone(),
            format!("{p}/image_id"),
            format!("{p}/image_version"),
        ];
        out.extend(self.release_dir.clone());
        out
    }
}

/// Why a release is unknown: worth waiting for (the watcher has not caught up), or not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReleaseError {
    /// What and what to do.
    pub message: String,
    /// The next pass may succeed.
    pub retry: bool,
}

/// Where to read which EKS release `ami` is, from the provenance recorded for it among the
/// AMIs the pool resolved to (`desired`, then `known`: previous, history newest first; see
/// [`crate::state::PoolRecord::known_amis`]). An AMI that did not come from an EKS-published
/// parameter (an `id`/`name`/`tags` term, a pin outside the history) has no known release: the
/// error says what to do.
pub fn release_parameters<'a>(
    desired: Option<&Ami>,
    known: impl IntoIterator<Item = &'a Ami>,
    ami: &str,
) -> Result<ReleaseLookup, String> {
    let known = known.into_iter().find(|a| a.id == ami);
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
            let release_dir = parent
                .rsplit_once('/')
                .filter(|(_, leaf)| matches!(*leaf, "recommended" | "latest"))
                .map(|(base, _)| format!("{base}/{}", found.name));
            Ok(ReleaseLookup {
                ami: ami.to_string(),
                name: found.name.clone(),
                parent: parent.to_string(),
                release_dir,
                current: desired.is_some_and(|d| d.id == ami),
            })
        }
        _ => Err(format!(
            "{ami} came from amiSelectorTerms[{}] {} {:?}, not from an EKS-published parameter, so it has no EKS release; a managed node group without an image in its launch template can only move to EKS releases: use an alias term or give the node group a launch template",
            found.source.term, found.source.field, found.source.value
        )),
    }
}

/// The release version from the values of [`ReleaseLookup::parameters`], first match wins:
/// 1. a JSON value (`recommended`, or the release's own directory) whose `image_id` is the AMI:
///    its `release_version`;
/// 2. `image_version` beside an `image_id` that is the AMI (Bottlerocket);
/// 3. a Bottlerocket image name `bottlerocket-...-v<version>`: that version.
///
/// Otherwise, when the AMI is the pool's current one and its parameter names another image,
/// the watcher has not caught up yet (retry); anything else is a configuration problem.
pub fn release_version(
    values: &std::collections::HashMap<String, String>,
    lookup: &ReleaseLookup,
) -> Result<String, ReleaseError> {
    let ami = lookup.ami.as_str();
    let json_image = |name: &str| -> Option<(String, Option<String>)> {
        let doc = serde_json::from_str::<serde_json::Value>(values.get(name)?).ok()?;
        let image = doc.get("image_id")?.as_str()?.to_string();
        let release = doc
            .get("release_version")
            .and_then(|v| v.as_str())
            .map(str::to_string);
        Some((image, release))
    };
    for name in std::iter::once(&lookup.parent).chain(lookup.release_dir.iter()) {
        if let Some((image, Some(release))) = json_image(name)
            && image == ami
        {
            return Ok(release);
        }
    }
    let parent = &lookup.parent;
    let named = values
        .get(&format!("{parent}/image_id"))
        .cloned()
        .or_else(|| json_image(parent).map(|(i, _)| i));
    if named.as_deref() == Some(ami)
        && let Some(v) = values.get(&format!("{parent}/image_version"))
    {
        return Ok(v.clone());
    }
    if let Some((_, v)) = lookup
        .name
        .strip_prefix("bottlerocket-")
        .and_then(|rest| rest.rsplit_once("-v"))
        .filter(|(_, v)| v.starts_with(|c: char| c.is_ascii_digit()))
    {
        return Ok(v.to_string());
    }
    match named {
        Some(other) if other != ami && lookup.current => Err(ReleaseError {
            message: format!(
                "parameter {parent} now names {other}, not {ami}: waiting for the ami-watcher to record the new AMI"
            ),
            retry: true,
        }),
        _ => Err(ReleaseError {
            message: format!(
                "the EKS release of {ami} ({}) is not published any more under {}: a managed node group without an image in its launch template can only move to releases EKS still lists; pin a newer AMI or give the node group a launch template",
                lookup.name,
                lookup.parameters().join(", ")
            ),
            retry: false,
        }),
    }
}

/// EKS managed node group operations.
#[async_trait::async_trait]
pub trait ManagedGroupOps: Send + Sync {
    /// `DescribeNodegroup`.
    async fn describe(&self, cluster: &str, name: &str) -> Result<ManagedGroup, PortError>;

    /// Sets `updateConfig` (`UpdateNodegroupConfig`). A no-op when it already is that.
    async fn set_update_config(
        &self,
        cluster: &str,
        name: &str,
        config: UpdateConfig,
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

    /// A node group's JSON is flat: its `updateConfig` fields stand beside the others, as
    /// before they were grouped, and it reads back the same (absent fields are `None`).
    #[test]
    fn a_managed_group_serializes_flat_and_reads_back() {
        let group = ManagedGroup {
            name: "ng".into(),
            status: "ACTIVE".into(),
            release_version: Some("1.31.0-20241109".into()),
            ami_type: Some("AL2023_x86_64_STANDARD".into()),
            launch_template: None,
            update_config: UpdateConfig {
                max_unavailable: None,
                max_unavailable_percentage: Some(33),
                update_strategy: None,
            },
            auto_scaling_group: Some("eks-ng-1".into()),
            auto_repair: false,
        };
        let v = serde_json::to_value(&group).expect("serializes");
        assert_eq!(
            v,
            serde_json::json!({
                "name": "ng",
                "status": "ACTIVE",
                "releaseVersion": "1.31.0-20241109",
                "amiType": "AL2023_x86_64_STANDARD",
                "launchTemplate": null,
                "maxUnavailable": null,
                "maxUnavailablePercentage": 33,
                "autoScalingGroup": "eks-ng-1",
                "autoRepair": false
            })
        );
        let back: ManagedGroup = serde_json::from_value(v).expect("reads back");
        assert_eq!(back, group);
        let sparse: ManagedGroup =
            serde_json::from_value(serde_json::json!({"name": "ng", "status": "ACTIVE"}))
                .expect("absent fields are None");
        assert_eq!(sparse.update_config.max_unavailable, None);
        assert_eq!(sparse.update_config.max_unavailable_percentage, None);
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
    fn the_original_config_is_restored_once_after_the_update_ends() {
        let t0 = at("2026-12-01T00:00:00Z");
        let mut u = ManagedUpdate::starting("c/p", "ami-1", 2, t0);
        let original = UpdateConfig {
            max_unavailable: None,
            max_unavailable_percentage: Some(33),
            update_strategy: None,
        };
        u.original_config = Some(original);
        for (phase, restore) in [
            (Phase::Starting, false),
            (Phase::InProgress, false),
            (Phase::Successful, true),
            (Phase::Failed, true),
            (Phase::Cancelled, true),
        ] {
            u.phase = phase;
            assert_eq!(u.config_to_restore().is_some(), restore, "{phase:?}");
        }
        u.config_restored = true;
        assert_eq!(u.config_to_restore(), None);
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

    fn values(pairs: &[(&str, &str)]) -> std::collections::HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn json(image: &str, release: &str) -> String {
        format!(r#"{{"image_id":"{image}","image_name":"n","release_version":"{release}"}}"#)
    }

    #[test]
    fn release_of_an_alias_ami_comes_from_the_recommended_json() {
        let record = [
            ami("ami-new", "alias", Some(&format!("{REC}/image_id"))),
            ami("ami-old", "alias", Some(&format!("{REC}/image_id"))),
        ];
        let new = release_parameters(record.first(), &record, "ami-new")
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(new.parent, REC);
        assert!(new.current);
        let base = REC.trim_end_matches("/recommended");
        assert_eq!(new.release_dir, Some(format!("{base}/name-ami-new")));
        let v = values(&[(REC, &json("ami-new", "1.30.6-20241101"))]);
        assert_eq!(release_version(&v, &new), Ok("1.30.6-20241101".into()));

        // Rollback to the previous AMI: `recommended` moved on; its own release directory has it.
        let old = release_parameters(record.first(), &record, "ami-old")
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(!old.current);
        let v = values(&[
            (REC, &json("ami-new", "1.30.6-20241101")),
            (
                &format!("{base}/name-ami-old"),
                &json("ami-old", "1.30.4-20241001"),
            ),
        ]);
        assert_eq!(release_version(&v, &old), Ok("1.30.4-20241001".into()));
        // ... and without it, a clear refusal rather than a wrong release.
        let v = values(&[(REC, &json("ami-new", "1.30.6-20241101"))]);
        let e = release_version(&v, &old).unwrap_err();
        assert!(
            !e.retry && e.message.contains("not published any more"),
            "{e:?}"
        );

        // The current AMI while the parameter already moved on: wait for the watcher.
        let v = values(&[(REC, &json("ami-newer", "1.30.7-20241201"))]);
        let e = release_version(&v, &new).unwrap_err();
        assert!(
            e.retry && e.message.contains("waiting for the ami-watcher"),
            "{e:?}"
        );
    }

    #[test]
    fn bottlerocket_release_comes_from_image_version_or_the_name() {
        let latest = "/aws/service/bottlerocket/aws-k8s-1.30/x86_64/latest";
        let mut a = ami("ami-br", "alias", Some(&format!("{latest}/image_id")));
        a.name = "bottlerocket-aws-k8s-1.30-x86_64-v1.20.3-5d9ac849".into();
        let record = [a];
        let l =
            release_parameters(record.first(), &record, "ami-br").unwrap_or_else(|e| panic!("{e}"));
        let v = values(&[
            (&format!("{latest}/image_id"), "ami-br"),
            (&format!("{latest}/image_version"), "1.20.3-5d9ac849"),
        ]);
        assert_eq!(release_version(&v, &l), Ok("1.20.3-5d9ac849".into()));
        // `latest` moved on: the version in the image name still tells.
        let v = values(&[
            (&format!("{latest}/image_id"), "ami-other"),
            (&format!("{latest}/image_version"), "1.21.0-abc"),
        ]);
        assert_eq!(release_version(&v, &l), Ok("1.20.3-5d9ac849".into()));
    }

    #[test]
    fn an_ami_from_an_id_term_or_unknown_has_no_release() {
        let record = [ami("ami-x", "id", None)];
        let e = release_parameters(record.first(), &record, "ami-x").unwrap_err();
        assert!(
            e.contains("not from an EKS-published parameter") && e.contains("launch template"),
            "{e}"
        );
        let e = release_parameters(record.first(), &record, "ami-never").unwrap_err();
        assert!(e.contains("not an AMI this pool ever resolved to"), "{e}");
    }
}
