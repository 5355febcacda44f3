//! Library side of `nodecycle drain --cluster <NAME> <INSTANCE_ID> [--grace D] [--timeout D]`.
//!
//! The CLI binary parses arguments, calls [`drain_command`], prints the progress lines it is given
//! to stderr and the [`DrainReport`] as JSON on stdout, and exits with
//! [`DrainCommandError::exit_code`] (or 0 when `report.done`, 1 when not).

use super::client::EksKube;
use super::drain::{DrainError, DrainProgress, DrainState, drain_step, start_drain};
use super::node_ops::{KubeError, NodeOps, list_some, n_pods};
use chrono::Utc;
use serde::Serialize;
use std::collections::BTreeMap;
use std::time::Duration;
use tokio::time::Instant;

/// Reason written into the taint and the Events of a manual drain.
pub const MANUAL_DRAIN_REASON: &str = "ManualDrain";
/// Pause between two drain steps of the CLI.
pub const STEP_INTERVAL: Duration = Duration::from_secs(2);
/// Time budget of one step of the CLI.
const STEP_BUDGET: Duration = Duration::from_secs(30);

/// Final result of `nodecycle drain`, printed as JSON on stdout:
/// `{"node": "...", "evicted": N, "skipped": N, "deleted": N, "blockedBy": [...], "done": bool}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DrainReport {
    /// Node name.
    pub node: String,
    /// Pods whose eviction was accepted, over the whole drain.
    pub evicted: usize,
    /// Pods left alone (DaemonSet, mirror, finished) at the last step.
    pub skipped: usize,
    /// Pods deleted after the deadline (`--grace`), over the whole drain.
    pub deleted: usize,
    /// PodDisruptionBudgets (`namespace/name`) blocking at the last step; empty when done.
    pub blocked_by: Vec<String>,
    /// Evictions that failed for another reason at the last step that tried them, with the API
    /// server's answer (e.g. HTTP 500 for a pod under two PodDisruptionBudgets, 403 without
    /// RBAC): what else keeps the drain from ending; empty when done.
    pub failures: Vec<String>,
    /// Every pod that had to leave is gone.
    pub done: bool,
}

/// Why `nodecycle drain` failed before it could report.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DrainCommandError {
    /// Bad input: invalid instance id, unknown cluster, no node for the instance. Exit code 2.
    #[error("{0}")]
    BadInput(String),
    /// Anything else (AWS or Kubernetes failures). Exit code 1.
    #[error(transparent)]
    Failed(#[from] KubeError),
}

impl DrainCommandError {
    /// Process exit code: 2 for bad input or an unknown instance, 1 otherwise.
    pub fn exit_code(&self) -> i32 {
        match self {
            DrainCommandError::BadInput(_) => 2,
            DrainCommandError::Failed(_) => 1,
        }
    }
}

impl From<DrainError> for DrainCommandError {
    fn from(e: DrainError) -> Self {
        match e {
            DrainError::NodeNotFound(_) => DrainCommandError::BadInput(e.to_string()),
            DrainError::Kube(k) => DrainCommandError::Failed(k),
        }
    }
}

/// Whether `id` looks like an EC2 instance id (`i-` followed by 8 or 17 hex digits).
pub fn is_instance_id(id: &str) -> bool {
    id.strip_prefix("i-").is_some_and(|hex| {
        matches!(hex.len(), 8 | 17) && hex.bytes().all(|b| b.is_ascii_hexdigit())
    })
}

/// Cordons and drains the node of `instance_id` in EKS cluster `cluster`, from outside the
/// cluster: steps until the drain is done or `timeout` has passed, sleeping [`STEP_INTERVAL`]
/// between steps. `grace` is the drain deadline (remaining pods are deleted once it has passed;
/// `None` waits for PodDisruptionBudgets until the timeout). Progress lines go to `progress`.
///
/// Returns the report (check `done`: false means the timeout ended it first), or
/// [`DrainCommandError::BadInput`] for an invalid instance id, an unknown cluster or an instance
/// without node.
pub async fn drain_command(
    sdk: &aws_config::SdkConfig,
    overrides: &super::KubeOverrides,
    cluster: &str,
    instance_id: &str,
    grace: Option<Duration>,
    timeout: Duration,
    progress: &mut (dyn FnMut(&str) + Send),
) -> Result<DrainReport, DrainCommandError> {
    if !is_instance_id(instance_id) {
        return Err(DrainCommandError::BadInput(format!(
            "{instance_id:?} is not an EC2 instance id (expected i- followed by 8 or 17 hex digits)"
        )));
    }
    if cluster.trim().is_empty() {
        return Err(DrainCommandError::BadInput(
            "--cluster must name an EKS cluster".to_owned(),
        ));
    }
    let api = EksKube::connect(sdk, cluster, overrides)
        .await
        .map_err(|e| match e {
            KubeError::ClusterNotFound(_) | KubeError::Config(_) => {
                DrainCommandError::BadInput(e.to_string())
            }
            other => DrainCommandError::Failed(other),
        })?;
    drain_until(&api, instance_id, grace, timeout, STEP_INTERVAL, progress).await
}

/// The loop of [`drain_command`] over any [`NodeOps`]: start, then step until done or
/// `timeout`, pausing `interval` between steps. Time is tokio's (`tokio::time::Instant` and
/// `sleep`), so tests run it on the paused clock.
pub async fn drain_until<A: NodeOps + ?Sized>(
    api: &A,
    instance_id: &str,
    grace: Option<Duration>,
    timeout: Duration,
    interval: Duration,
    progress: &mut (dyn FnMut(&str) + Send),
) -> Result<DrainReport, DrainCommandError> {
    let started = Instant::now();
    let mut state = start_drain(api, instance_id, MANUAL_DRAIN_REASON, grace, Utc::now()).await?;
    progress(&format!(
        "node {} (instance {instance_id}) cordoned and tainted; draining{}",
        state.node,
        match state.deadline {
            Some(d) => format!(
                ", pods still blocked at {} will be deleted",
                d.format("%H:%M:%SZ")
            ),
            None => String::new(),
        }
    ));
    // The failures of the last step that tried every eviction (a step cut short by the
    // timeout may not have retried them).
    let mut failures: Vec<String> = Vec::new();
    loop {
        let remaining = timeout.saturating_sub(started.elapsed());
        let step = drain_step(api, &mut state, Utc::now(), remaining.min(STEP_BUDGET)).await?;
        progress(&describe_step(&step));
        if !step.failed.is_empty() || step.deferred == 0 {
            failures = step.failed.iter().map(|f| f.message.clone()).collect();
        }
        if step.done || started.elapsed() + interval >= timeout {
            return Ok(report(&state, &step, failures));
        }
        tokio::time::sleep(interval).await;
    }
}

fn report(state: &DrainState, last: &DrainProgress, failures: Vec<String>) -> DrainReport {
    DrainReport {
        node: state.node.clone(),
        evicted: state.evicted.len(),
        skipped: last.skipped,
        deleted: state.deleted.len(),
        // A last step cut short by the timeout may not have retried the blocked evictions:
        // then the blockers of the previous step (kept in the state) still stand.
        blocked_by: if last.done {
            Vec::new()
        } else if last.blocked_by.is_empty() {
            state.blocked_by.clone()
        } else {
            last.blocked_by.clone()
        },
        failures: if last.done { Vec::new() } else { failures },
        done: last.done,
    }
}

/// One progress line for a step.
pub fn describe_step(step: &DrainProgress) -> String {
    if step.done {
        return if step.node_gone {
            format!("node {}: node object is gone; drain complete", step.node)
        } else {
            format!(
                "node {}: drained ({} left alone)",
                step.node,
                n_pods(step.skipped)
            )
        };
    }
    let mut parts = vec![format!(
        "node {}: {} to go",
        step.node,
        n_pods(step.pods_remaining)
    )];
    if !step.evicted.is_empty() {
        parts.push(format!("evicted {}", list_some(&step.evicted, 5)));
    }
    if !step.deleted.is_empty() {
        parts.push(format!(
            "deleted after deadline {}",
            list_some(&step.deleted, 5)
        ));
    }
    if !step.blocked.is_empty() {
        let mut by_pdb: BTreeMap<&str, usize> = BTreeMap::new();
        for b in &step.blocked {
            *by_pdb
                .entry(b.pdb.as_deref().unwrap_or("(API server 429)"))
                .or_default() += 1;
        }
        let text: Vec<String> = by_pdb
            .iter()
            .map(|(pdb, n)| format!("{n} by {pdb}"))
            .collect();
        parts.push(format!("blocked {}", text.join(", ")));
    }
    for f in &step.failed {
        parts.push(f.message.clone());
    }
    if step.deferred > 0 {
        parts.push(format!("{} deferred to the next step", step.deferred));
    }
    parts.join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kube::memory::MemoryCluster;
    use crate::kube::node_ops::EvictOutcome;
    use crate::kube::pods::{PodInfo, PodRef};

    fn pod(name: &str, controller: &str) -> PodInfo {
        PodInfo {
            pod: PodRef {
                namespace: "default".into(),
                name: name.into(),
                uid: format!("uid-{name}"),
            },
            phase: "Running".into(),
            controller_kind: Some(controller.into()),
            mirror: false,
            deletion_timestamp: None,
            grace_period_seconds: Some(0),
            priority_class: None,
            start_failure: None,
            opt_out: None,
        }
    }

    #[test]
    fn instance_ids() {
        assert!(is_instance_id("i-0123456789abcdef0"));
        assert!(is_instance_id("i-01234567"));
        for bad in [
            "",
            "i-",
            "i-xyz",
            "0123456789abcdef0",
            "i-0123456789abcdef",
            "i-0123456789ABCDEFG",
        ] {
            assert!(!is_instance_id(bad), "{bad}");
        }
    }

    #[test]
    fn report_json_shape() {
        let r = DrainReport {
            node: "ip-10-0-0-1.ec2.internal".into(),
            evicted: 3,
            skipped: 2,
            deleted: 1,
            blocked_by: vec!["default/web".into()],
            failures: vec!["eviction of default/cache failed with HTTP 500: two PDBs".into()],
            done: false,
        };
        assert_eq!(
            serde_json::to_value(&r).unwrap(),
            serde_json::json!({"node": "ip-10-0-0-1.ec2.internal", "evicted": 3, "skipped": 2,
                "deleted": 1, "blockedBy": ["default/web"],
                "failures": ["eviction of default/cache failed with HTTP 500: two PDBs"],
                "done": false})
        );
    }

    #[test]
    fn exit_codes() {
        assert_eq!(DrainCommandError::BadInput("x".into()).exit_code(), 2);
        assert_eq!(
            DrainCommandError::Failed(KubeError::Config("x".into())).exit_code(),
            1
        );
        let e: DrainCommandError = DrainError::NodeNotFound("i-1".into()).into();
        assert_eq!(e.exit_code(), 2);
    }

    #[tokio::test]
    async fn drain_until_done() {
        let c = MemoryCluster::new(Utc::now());
        c.add_node("n1", "i-0123456789abcdef0");
        c.add_pod("n1", pod("a", "ReplicaSet"));
        c.add_pod("n1", pod("ds", "DaemonSet"));
        let mut lines = Vec::new();
        let report = drain_until(
            &c,
            "i-0123456789abcdef0",
            None,
            Duration::from_secs(5),
            Duration::from_millis(1),
            &mut |l: &str| lines.push(l.to_owned()),
        )
        .await
        .unwrap();
        assert_eq!(
            report,
            DrainReport {
                node: "n1".into(),
                evicted: 1,
                skipped: 1,
                deleted: 0,
                blocked_by: vec![],
                failures: vec![],
                done: true
            }
        );
        assert!(lines.len() >= 2, "{lines:?}");
    }

    /// On tokio's paused clock: the loop's timeout and pauses are virtual time (no wall-clock
    /// wait, whatever the machine's load), so a ten-minute drain command with its two-second
    /// pauses runs in milliseconds, and the steps it takes are exactly those that fit.
    #[tokio::test(start_paused = true)]
    async fn drain_until_times_out_while_blocked() {
        let c = MemoryCluster::new(Utc::now());
        c.add_node("n1", "i-0123456789abcdef0");
        c.add_pod("n1", pod("a", "ReplicaSet"));
        let blocked = EvictOutcome::Blocked {
            pdb: Some("web".into()),
            message: "no".into(),
        };
        c.script_evictions("a", vec![blocked; 1000]);
        let timeout = Duration::from_secs(600);
        let mut lines = 0;
        let started = Instant::now();
        let report = drain_until(
            &c,
            "i-0123456789abcdef0",
            None,
            timeout,
            STEP_INTERVAL,
            &mut |_: &str| lines += 1,
        )
        .await
        .unwrap();
        // Ended by the timeout, not by completion: still blocked, nothing evicted.
        assert!(!report.done);
        assert_eq!(report.blocked_by, vec!["default/web"]);
        assert_eq!(report.evicted, 0);
        // The start line, then one step per pause that fits in the timeout.
        let steps = (timeout.as_secs() / STEP_INTERVAL.as_secs()) as usize;
        assert_eq!(lines, 1 + steps);
        assert!(started.elapsed() < timeout, "no pause past the timeout");

        let err = drain_until(
            &c,
            "i-0fffffffffffffff0",
            None,
            Duration::from_secs(1),
            Duration::ZERO,
            &mut |_: &str| {},
        )
        .await
        .unwrap_err();
        assert_eq!(err.exit_code(), 2);
    }

    /// An eviction refused for another reason than a budget (a pod under two PDBs: 500) is
    /// named in the report of a drain that timed out, with the API server's answer; a budget's
    /// refusal of another pod stays in `blockedBy`.
    #[tokio::test(start_paused = true)]
    async fn drain_until_reports_what_else_refused_an_eviction() {
        let c = MemoryCluster::new(Utc::now());
        c.add_node("n1", "i-0123456789abcdef0");
        c.add_pod("n1", pod("a", "ReplicaSet"));
        c.add_pod("n1", pod("cache", "ReplicaSet"));
        let blocked = EvictOutcome::Blocked {
            pdb: Some("web".into()),
            message: "no".into(),
        };
        let two_pdbs = EvictOutcome::Rejected {
            code: 500,
            message: "This pod has more than one PodDisruptionBudget, which the eviction \
                      subresource does not support."
                .into(),
        };
        c.script_evictions("a", vec![blocked; 100]);
        c.script_evictions("cache", vec![two_pdbs; 100]);
        let report = drain_until(
            &c,
            "i-0123456789abcdef0",
            None,
            Duration::from_secs(20),
            STEP_INTERVAL,
            &mut |_: &str| {},
        )
        .await
        .unwrap();
        assert!(!report.done);
        assert_eq!(report.blocked_by, vec!["default/web"]);
        assert_eq!(
            report.failures,
            vec![
                "eviction of default/cache failed with HTTP 500: This pod has more than one \
                 PodDisruptionBudget, which the eviction subresource does not support."
                    .to_string()
            ]
        );
    }
}
