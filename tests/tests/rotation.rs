//! End to end: a new AMI ends with every node of the pool on it, never more disrupted at once
//! than the budgets allow. moto runs the Auto Scaling group (replacements come from the group),
//! the Kubernetes stand-in registers a Ready node for each new instance; the real ami-watcher
//! and rotator handlers run pass after pass with an injected clock.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use crate::support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;
use nodecycle::aws::autoscaling::AutoScaling;
use nodecycle::handlers::Invocation;
use nodecycle::rotation::{Rotation, Step};
use serde_json::json;
use support::pool::*;

#[tokio::test]
async fn a_new_ami_rolls_through_the_pool_within_budget() {
    let p = pool(6, "    - nodes: \"2\"\n    - nodes: \"0\"\n      schedule: \"0 0 * * *\"\n      duration: 1h\n", false).await;
    let t0 = at("2026-12-01T00:10:00Z");
    let report = p.watcher.handle(&json!({}), t0).await.unwrap();
    assert_eq!(report["pools"][0]["desired"], p.new.as_str());

    // Inside the nightly "0" window: the launch template moves, no node is touched.
    let report = p.pass(t0).await;
    assert!(p.rotations().await.is_empty(), "{report}");
    let blocked = report["pools"][0]["blocked"].as_str().unwrap();
    assert!(blocked.contains("until 2026-12-01T01:00:00Z"), "{blocked}");
    assert_eq!(report["pools"][0]["launchTemplate"], p.new.as_str());

    let mut now = at("2026-12-01T01:05:00Z");
    let mut max_in_flight = 0;
    for _ in 0..60 {
        p.pass(now).await;
        let in_flight = p.rotations().await.iter().filter(|r| r.in_flight()).count();
        max_in_flight = max_in_flight.max(in_flight);
        assert!(in_flight <= 2, "budget 2 exceeded: {in_flight} in flight");
        let images = p.images().await;
        if in_flight == 0 && images.len() == 6 && images.iter().all(|i| *i == p.new) {
            break;
        }
        now += chrono::Duration::minutes(1);
    }
    let images = p.images().await;
    assert_eq!(images.len(), 6, "group back at its size: {images:?}");
    assert!(
        images.iter().all(|i| *i == p.new),
        "every node on the new AMI: {images:?}"
    );
    assert_eq!(max_in_flight, 2, "the budget was used");
    let rotations = p.rotations().await;
    assert_eq!(rotations.len(), 6);
    assert!(
        rotations
            .iter()
            .all(|r| r.step == Step::Done && r.replacement.is_some()),
        "{rotations:?}"
    );
    // Old nodes were cordoned and their Node objects removed; no node is left cordoned.
    let state = p.kube.state();
    assert_eq!(state.nodes.len(), 6);
    assert!(
        state
            .nodes
            .iter()
            .all(|n| n["spec"]["unschedulable"] != true),
        "a node was left cordoned"
    );
    let _ = &p.old;
    let _ = &p.cloud;
}

#[tokio::test]
async fn a_replacement_that_never_becomes_ready_halts_the_pool() {
    let p = pool(3, "    - nodes: \"1\"\n", true).await;
    let t0 = at("2026-12-01T10:00:00Z");
    p.watcher.handle(&json!({}), t0).await.unwrap();
    let mut now = t0;
    for _ in 0..5 {
        p.pass(now).await;
        now += chrono::Duration::minutes(5);
    }
    // 20 minutes later: the one rotation failed after the 15 minute timeout, the pool halted.
    let rotations = p.rotations().await;
    assert_eq!(rotations.len(), 1, "only one node was tried: {rotations:?}");
    assert_eq!(rotations[0].step, Step::Failed);
    assert!(
        rotations[0]
            .error
            .as_ref()
            .unwrap()
            .contains("not Ready within 15m")
    );
    let record = nodecycle::state::Repository::new(p.table.clone())
        .pool("prod/general")
        .await
        .unwrap()
        .unwrap();
    assert!(record.halted.is_some());
    // More passes start nothing; the surge was undone; nothing is cordoned.
    let report = p.pass(now).await;
    assert!(
        report["pools"][0]["blocked"]
            .as_str()
            .unwrap()
            .contains("halted"),
        "{report}"
    );
    assert_eq!(p.rotations().await.len(), 1);
    std::thread::sleep(Duration::from_millis(500));
    let images = p.images().await;
    assert_eq!(images.len(), 3, "surge undone: {images:?}");
    assert!(images.iter().all(|i| *i == p.old));
    let state = p.kube.state();
    assert!(
        state
            .nodes
            .iter()
            .all(|n| n["spec"]["unschedulable"] != true),
        "a node was left cordoned"
    );
}

#[tokio::test]
async fn plan_shows_what_the_rotator_would_do_without_doing_it() {
    let p = pool(3, "    - nodes: \"2\"\n    - nodes: \"0\"\n      schedule: \"0 0 * * *\"\n      duration: 1h\n", false).await;
    p.watcher.handle(&json!({}), Utc::now()).await.unwrap();
    let policy = std::env::temp_dir().join(format!("nodecycle-plan-{}.yaml", std::process::id()));
    let param = aws_sdk_ssm::Client::new(&p.cloud.sdk_config().await)
        .get_parameter()
        .name("/nodecycle/pools/prod/general")
        .send()
        .await
        .unwrap();
    std::fs::write(&policy, param.parameter().unwrap().value().unwrap()).unwrap();
    let bin = std::env::current_exe()
        .unwrap()
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("nodecycle");
    let run = |at: &str| {
        let out = std::process::Command::new(&bin)
            .args(["plan", policy.to_str().unwrap(), "--at", at])
            .envs(p.cloud.env_vars())
            .env("NODECYCLE_TABLE", "nodecycle")
            .env("NODECYCLE_LOG", "warn")
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    let v = run("2026-12-01T12:00:00Z");
    assert_eq!(v["pool"], "prod/general");
    assert_eq!(v["allowed"]["Drifted"], 2);
    assert_eq!(v["candidates"].as_array().unwrap().len(), 3);
    assert_eq!(v["candidates"][0]["reason"], "Drifted");
    assert_eq!(v["candidates"][0]["image"], p.old.as_str());
    let actions = v["actions"].as_array().unwrap();
    assert_eq!(
        actions[0],
        json!({"action": "updateLaunchTemplate", "image": p.new})
    );
    assert_eq!(
        actions
            .iter()
            .filter(|a| a["action"] == "startRotation")
            .count(),
        2
    );
    assert!(
        v["blocked"].as_str().unwrap().contains("budget"),
        "third candidate waits: {v}"
    );
    let v = run("2026-12-01T00:30:00Z");
    assert_eq!(v["allowed"]["Drifted"], 0);
    assert!(
        v["blocked"]
            .as_str()
            .unwrap()
            .contains("until 2026-12-01T01:00:00Z"),
        "{v}"
    );
    // Nothing was done.
    assert!(p.rotations().await.is_empty());
    assert!(p.images().await.iter().all(|i| *i == p.old));
}

/// Auto Scaling calls that fail once, at the first call of `op`: either before reaching AWS
/// (a crash just before the call) or after AWS performed it (a crash just after).
struct Faulty {
    inner: AutoScaling,
    op: &'static str,
    after: bool,
    fired: std::sync::atomic::AtomicBool,
}

impl Faulty {
    fn trip(&self, op: &str) -> bool {
        op == self.op && !self.fired.swap(true, std::sync::atomic::Ordering::SeqCst)
    }
    fn crash(&self) -> nodecycle::port::PortError {
        nodecycle::port::PortError::new(
            self.op,
            nodecycle::port::ErrorKind::Transient,
            "injected crash",
        )
    }
}

#[async_trait::async_trait]
impl nodecycle::fleet::snapshot::GroupSnapshots for Faulty {
    async fn describe_groups(
        &self,
        names: &[String],
    ) -> std::collections::BTreeMap<String, nodecycle::fleet::snapshot::GroupRead> {
        self.inner.describe_groups(names).await
    }
    async fn prefetch_template_tags(&self, names: &[String]) {
        self.inner.prefetch_template_tags(names).await
    }
}

#[async_trait::async_trait]
impl nodecycle::fleet::GroupOps for Faulty {
    async fn describe(
        &self,
        g: &str,
    ) -> Result<(nodecycle::fleet::Group, Vec<nodecycle::fleet::Member>), nodecycle::port::PortError>
    {
        self.inner.describe(g).await
    }
    async fn set_desired_capacity(
        &self,
        g: &str,
        d: i32,
    ) -> Result<(), nodecycle::port::PortError> {
        let trip = self.trip("set_desired_capacity");
        if trip && !self.after {
            return Err(self.crash());
        }
        self.inner.set_desired_capacity(g, d).await?;
        if trip { Err(self.crash()) } else { Ok(()) }
    }
    async fn terminate_instance(
        &self,
        i: &str,
        dec: bool,
    ) -> Result<(), nodecycle::port::PortError> {
        let trip = self.trip("terminate_instance");
        if trip && !self.after {
            return Err(self.crash());
        }
        self.inner.terminate_instance(i, dec).await?;
        if trip { Err(self.crash()) } else { Ok(()) }
    }
    async fn sizes(&self, g: &str) -> Result<nodecycle::fleet::Sizes, nodecycle::port::PortError> {
        self.inner.sizes(g).await
    }
    async fn set_max_size(&self, g: &str, max: i32) -> Result<(), nodecycle::port::PortError> {
        self.inner.set_max_size(g, max).await
    }
    async fn suspend_processes(
        &self,
        g: &str,
        p: &[String],
    ) -> Result<(), nodecycle::port::PortError> {
        let trip = self.trip("suspend_processes");
        if trip && !self.after {
            return Err(self.crash());
        }
        self.inner.suspend_processes(g, p).await?;
        if trip { Err(self.crash()) } else { Ok(()) }
    }
    async fn resume_processes(
        &self,
        g: &str,
        p: &[String],
    ) -> Result<(), nodecycle::port::PortError> {
        let trip = self.trip("resume_processes");
        if trip && !self.after {
            return Err(self.crash());
        }
        self.inner.resume_processes(g, p).await?;
        if trip { Err(self.crash()) } else { Ok(()) }
    }
    async fn launch_problem(
        &self,
        g: &str,
    ) -> Result<Option<nodecycle::fleet::LaunchProblem>, nodecycle::port::PortError> {
        self.inner.launch_problem(g).await
    }
    async fn set_image(&self, g: &str, image: &str) -> Result<String, nodecycle::port::PortError> {
        let trip = self.trip("set_image");
        if trip && !self.after {
            return Err(self.crash());
        }
        let v = self.inner.set_image(g, image).await?;
        if trip { Err(self.crash()) } else { Ok(v) }
    }
}

async fn converges_despite_a_crash(op: &'static str, after: bool) {
    let mut p = pool(4, "    - nodes: \"2\"\n", false).await;
    p.rotator.ports.groups = Arc::new(Faulty {
        inner: AutoScaling::new(
            p.adapters.clients.autoscaling.clone(),
            p.adapters.clients.ec2.clone(),
        ),
        op,
        after,
        fired: std::sync::atomic::AtomicBool::new(false),
    });
    let mut now = at("2026-12-01T12:00:00Z");
    p.watcher.handle(&json!({}), now).await.unwrap();
    let mut suspended_while_rolling = false;
    for _ in 0..40 {
        p.pass(now).await;
        let in_flight = p.rotations().await.iter().filter(|r| r.in_flight()).count();
        assert!(in_flight <= 2, "budget exceeded after a crash in {op}");
        let suspended = p.suspended_processes().await;
        suspended_while_rolling |= in_flight > 0 && suspended.contains(&"AZRebalance".into());
        let images = p.images().await;
        if in_flight == 0
            && images.len() == 4
            && images.iter().all(|i| *i == p.new)
            && suspended.is_empty()
        {
            break;
        }
        now += chrono::Duration::minutes(1);
    }
    assert!(
        suspended_while_rolling,
        "crash in {op} (after={after}): AZRebalance suspended during the roll"
    );
    assert_eq!(
        p.suspended_processes().await,
        Vec::<String>::new(),
        "crash in {op} (after={after}): AZRebalance resumed after the roll"
    );
    let images = p.images().await;
    assert_eq!(
        images.len(),
        4,
        "crash in {op} (after={after}): group size restored: {images:?}"
    );
    assert!(
        images.iter().all(|i| *i == p.new),
        "crash in {op} (after={after}): {images:?}"
    );
    let rotations = p.rotations().await;
    assert_eq!(rotations.len(), 4, "no node rotated twice: {rotations:?}");
    assert!(rotations.iter().all(|r| r.step == Step::Done));
    let out = p
        .adapters
        .clients
        .autoscaling
        .describe_auto_scaling_groups()
        .auto_scaling_group_names("prod-general")
        .send()
        .await
        .unwrap();
    assert_eq!(
        out.auto_scaling_groups()[0].desired_capacity(),
        Some(4),
        "surges all undone"
    );
}

#[tokio::test]
async fn crash_before_suspending_az_rebalance_resumes() {
    converges_despite_a_crash("suspend_processes", false).await;
}

#[tokio::test]
async fn crash_after_suspending_az_rebalance_resumes() {
    converges_despite_a_crash("suspend_processes", true).await;
}

#[tokio::test]
async fn crash_before_resuming_az_rebalance_resumes() {
    converges_despite_a_crash("resume_processes", false).await;
}

#[tokio::test]
async fn crash_after_resuming_az_rebalance_resumes() {
    converges_despite_a_crash("resume_processes", true).await;
}

#[tokio::test]
async fn crash_before_raising_capacity_resumes() {
    converges_despite_a_crash("set_desired_capacity", false).await;
}

#[tokio::test]
async fn crash_after_raising_capacity_resumes() {
    converges_despite_a_crash("set_desired_capacity", true).await;
}

#[tokio::test]
async fn crash_before_terminating_resumes() {
    converges_despite_a_crash("terminate_instance", false).await;
}

#[tokio::test]
async fn crash_after_terminating_resumes() {
    converges_despite_a_crash("terminate_instance", true).await;
}

#[tokio::test]
async fn crash_around_the_launch_template_update_resumes() {
    converges_despite_a_crash("set_image", false).await;
    converges_despite_a_crash("set_image", true).await;
}

#[tokio::test]
async fn two_rotators_at_once_never_exceed_the_budget() {
    let p = pool(6, "    - nodes: \"2\"\n", false).await;
    let mut now = at("2026-12-01T12:00:00Z");
    p.watcher.handle(&json!({}), now).await.unwrap();
    let other = p.rotator.clone();
    for _ in 0..40 {
        let tick = json!({});
        let (a, b) = tokio::join!(
            p.rotator.handle(
                &tick,
                Invocation::at(now, Instant::now() + Duration::from_secs(120))
            ),
            other.handle(
                &tick,
                Invocation::at(now, Instant::now() + Duration::from_secs(120))
            ),
        );
        let (a, b) = (a.unwrap(), b.unwrap());
        // Each either worked on the cluster or saw the other's lease; they may also run one
        // after the other within the same instant.
        for r in [&a, &b] {
            let c = r["clusters"]["prod"].as_str().unwrap();
            assert!(c == "done" || c.starts_with("lease held"), "{r}");
        }
        std::thread::sleep(Duration::from_millis(400));
        let in_flight = p.rotations().await.iter().filter(|r| r.in_flight()).count();
        assert!(in_flight <= 2, "budget exceeded: {in_flight}");
        let images = p.images().await;
        if in_flight == 0 && images.len() == 6 && images.iter().all(|i| *i == p.new) {
            break;
        }
        now += chrono::Duration::minutes(1);
    }
    let images = p.images().await;
    assert!(
        images.len() == 6 && images.iter().all(|i| *i == p.new),
        "{images:?}"
    );
}

#[tokio::test]
async fn pdb_blocked_drain_waits_then_honours_termination_grace_period() {
    use nodecycle_tests::{PdbFixture, PodFixture};
    let p = pool(2, "    - nodes: \"1\"\n", false).await;
    // One database pod per node; the PDB never allows an eviction (2 of 2 must stay available).
    let names: Vec<String> = p
        .kube
        .state()
        .nodes
        .iter()
        .map(|n| n["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    for (i, node) in names.iter().enumerate() {
        p.kube.add_pod(
            PodFixture::new("default", &format!("db-{i}"))
                .node(node)
                .owner("StatefulSet", "db")
                .label("app", "db")
                .grace_seconds(1),
        );
    }
    p.kube.add_pdb(
        PdbFixture::new("default", "db")
            .match_label("app", "db")
            .min_available(2),
    );
    let t0 = at("2026-12-01T12:00:00Z");
    p.watcher.handle(&json!({}), t0).await.unwrap();
    let mut now = t0;
    let mut draining_since = None;
    let mut blocked_passes = 0;
    for _ in 0..30 {
        p.pass(now).await;
        let rotations = p.rotations().await;
        let draining: Vec<&Rotation> = rotations
            .iter()
            .filter(|r| r.step == Step::Draining)
            .collect();
        if let Some(r) = draining.first() {
            let since = *draining_since.get_or_insert(r.step_at);
            // A pass reads the clock as its start plus the real time it has run: only passes
            // starting clearly before the deadline must not delete.
            if now + chrono::Duration::seconds(5) < since + chrono::Duration::minutes(1) {
                // Before terminationGracePeriod: evictions refused (429), nothing deleted.
                let state = p.kube.state();
                let deletes = state
                    .requests
                    .iter()
                    .filter(|q| q.method == "DELETE" && q.path.contains("/pods/db-"))
                    .count();
                assert_eq!(
                    deletes, 0,
                    "a PDB-protected pod was deleted before the deadline"
                );
                blocked_passes += 1;
            }
        }
        if rotations.len() == 2 && rotations.iter().all(|r| r.step == Step::Done) {
            break;
        }
        now += chrono::Duration::seconds(20);
    }
    assert!(
        blocked_passes >= 2,
        "the drain waited on the PDB for several passes ({blocked_passes})"
    );
    let state = p.kube.state();
    let refused = state
        .requests
        .iter()
        .filter(|q| q.method == "POST" && q.path.ends_with("/eviction") && q.status == 429)
        .count();
    assert!(refused >= 2, "evictions were refused by the PDB: {refused}");
    let rotations = p.rotations().await;
    assert!(
        rotations.len() == 2 && rotations.iter().all(|r| r.step == Step::Done),
        "{rotations:?}"
    );
    assert!(p.images().await.iter().all(|i| *i == p.new));
}
