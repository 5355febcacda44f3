//! The rotator pass (observe, plan, perform, record) against the in-memory fakes: the state
//! table ([`MemoryStore`]), Auto Scaling groups ([`Groups`]), EKS managed node groups
//! ([`ManagedGroups`]), images and policies ([`Cloud`]) and Kubernetes ([`MemoryCluster`]).
//! Whole passes run one after the other on the fakes' clock (a minute apart); between two
//! passes the test plays Auto Scaling (instances launched up to the desired capacity, on the
//! launch template's image) and the kubelet (a Node per new instance, Ready unless its image is
//! bad), and advances the cluster's clock (evicted pods leave after their grace period).
//! The moto tests in `tests/` stay the reference; these cover the same behaviour in
//! milliseconds: surge, drain under a PodDisruptionBudget, give-back, another writer of the
//! desired capacity between passes, a crash around any Auto Scaling call, quarantine and
//! rollback.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use super::{RotatorHandler, Settings};
use crate::ami::Architecture;
use crate::ami::select::Image;
use crate::fake::{
    Cloud, Clusters, Groups, ManagedGroups, MemoryStore, StoredGroup, StoredImage, World,
};
use crate::fleet::{Group, GroupOps, Lifecycle, Member};
use crate::handlers::Invocation;
use crate::handlers::ami_watcher::AmiWatcher;
use crate::kube::memory::MemoryCluster;
use crate::kube::{EvictOutcome, PodInfo, PodRef};
use crate::policy::source::PolicyDocument;
use crate::port::{ErrorKind, PortError};
use crate::rotation::{Rotation, Step};

const GROUP: &str = "prod-general";
const POOL: &str = "prod/general";
const POOL_PARAM: &str = "/nodecycle/pools/prod/general";
/// The AMI the pool runs at first.
const OLD: &str = "ami-1";
/// The AMI the pool is told to run.
const NEW: &str = "ami-2";

fn at(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s)
        .map(|d| d.with_timezone(&Utc))
        .unwrap()
}

fn image(id: &str, created: &str) -> StoredImage {
    StoredImage {
        image: Image {
            id: id.into(),
            name: format!("golden-{id}"),
            architecture: Some(Architecture::X86_64),
            creation_date: created.into(),
            deprecation_time: None,
        },
        owner: "123456789012".into(),
        tags: BTreeMap::new(),
    }
}

fn world(budget: u32) -> World {
    let policy = PolicyDocument::parameter(
        "/nodecycle/pools/",
        POOL_PARAM,
        format!(
            "cluster: prod\nname: general\nnodeGroup: {{ autoScalingGroup: {GROUP} }}\narchitecture: x86_64\namiSelectorTerms: [{{ ssmParameter: /golden/ami }}]\ndisruption:\n  budgets:\n    - nodes: \"{budget}\"\nterminationGracePeriod: 10m\n"
        ),
    );
    World {
        policies: [(POOL_PARAM.to_string(), policy)].into(),
        parameters: [("/golden/ami".to_string(), OLD.to_string())].into(),
        images: vec![
            image(OLD, "2026-11-01T00:00:00Z"),
            image(NEW, "2026-11-30T00:00:00Z"),
        ],
        versions: [("prod".to_string(), "1.31".to_string())].into(),
        ..World::default()
    }
}

/// A pod of a ReplicaSet, leaving 90 s after its eviction: longer than the minute between two
/// passes, so a drain sees it terminating for a pass before it is gone.
fn pod(name: &str) -> PodInfo {
    PodInfo {
        pod: PodRef {
            namespace: "default".into(),
            name: name.into(),
            uid: format!("uid-{name}"),
        },
        phase: "Running".into(),
        controller_kind: Some("ReplicaSet".into()),
        mirror: false,
        deletion_timestamp: None,
        grace_period_seconds: Some(90),
        priority_class: None,
        start_failure: None,
        opt_out: None,
    }
}

/// What nodecycle did to the group's desired capacity, and a crash injected around one Auto
/// Scaling call: the first call of `op` fails, before reaching Auto Scaling or (`after`) once
/// Auto Scaling performed it (the answer lost, as a crash right after the call).
struct Watched {
    inner: Arc<Groups>,
    crash: Option<(&'static str, bool)>,
    fired: AtomicBool,
    /// The desired capacity after each call of nodecycle that changed it, with the call.
    changes: Mutex<Vec<(String, i32)>>,
}

impl Watched {
    fn new(inner: Arc<Groups>, crash: Option<(&'static str, bool)>) -> Self {
        Watched {
            inner,
            crash,
            fired: AtomicBool::new(false),
            changes: Mutex::new(Vec::new()),
        }
    }

    /// Runs `call` as Auto Scaling answers `op`, with the crash if it is this one's.
    async fn call<T>(
        &self,
        op: &'static str,
        call: impl std::future::Future<Output = Result<T, PortError>>,
    ) -> Result<T, PortError> {
        let trip =
            self.crash.is_some_and(|(o, _)| o == op) && !self.fired.swap(true, Ordering::SeqCst);
        let crash = || PortError::new(op, ErrorKind::Transient, "injected crash");
        if trip && self.crash.is_some_and(|(_, after)| !after) {
            return Err(crash());
        }
        let out = call.await?;
        let desired = self.inner.get(GROUP).unwrap().group.desired_capacity;
        self.changes.lock().unwrap().push((op.to_string(), desired));
        if trip { Err(crash()) } else { Ok(out) }
    }
}

#[async_trait::async_trait]
impl crate::fleet::snapshot::GroupSnapshots for Watched {
    async fn describe_groups(
        &self,
        names: &[String],
    ) -> BTreeMap<String, crate::fleet::snapshot::GroupRead> {
        self.inner.describe_groups(names).await
    }
}

#[async_trait::async_trait]
impl GroupOps for Watched {
    async fn describe(&self, g: &str) -> Result<(Group, Vec<Member>), PortError> {
        self.inner.describe(g).await
    }
    async fn set_max_size(&self, g: &str, max: i32) -> Result<(), PortError> {
        self.inner.set_max_size(g, max).await
    }
    async fn suspend_processes(&self, g: &str, p: &[String]) -> Result<(), PortError> {
        self.call("suspend_processes", self.inner.suspend_processes(g, p))
            .await
    }
    async fn resume_processes(&self, g: &str, p: &[String]) -> Result<(), PortError> {
        self.call("resume_processes", self.inner.resume_processes(g, p))
            .await
    }
    async fn launch_problem(
        &self,
        g: &str,
    ) -> Result<Option<crate::fleet::LaunchProblem>, PortError> {
        self.inner.launch_problem(g).await
    }
    async fn set_desired_capacity(&self, g: &str, d: i32) -> Result<(), PortError> {
        self.call(
            "set_desired_capacity",
            self.inner.set_desired_capacity(g, d),
        )
        .await
    }
    async fn terminate_instance(&self, i: &str, decrement: bool) -> Result<(), PortError> {
        self.call(
            "terminate_instance",
            self.inner.terminate_instance(i, decrement),
        )
        .await
    }
    async fn set_image(&self, g: &str, image: &str) -> Result<String, PortError> {
        self.call("set_image", self.inner.set_image(g, image)).await
    }
}

/// One pool of `size` nodes on [`OLD`] in cluster `prod`, with the rotator and the ami-watcher
/// over the fakes, and the clock of its passes.
struct Pool {
    cloud: Arc<Cloud>,
    groups: Arc<Groups>,
    watched: Arc<Watched>,
    kube: Arc<MemoryCluster>,
    rotator: RotatorHandler,
    watcher: AmiWatcher,
    now: DateTime<Utc>,
    /// Instances launched so far (their ids count up).
    launched: u32,
    /// Images whose nodes register but never become Ready.
    never_ready: BTreeSet<String>,
    /// Each instance's node name.
    node_of: BTreeMap<String, String>,
    /// The pool's disruption budget.
    budget: usize,
    /// Instances that left the group, each checked once: drained before it was terminated.
    gone: BTreeSet<String>,
}

impl Pool {
    /// `size` nodes on [`OLD`] with a pod each (group MinSize 1, MaxSize `size + 4`), budget
    /// `budget` nodes,
    /// the desired AMI [`OLD`] resolved, then [`NEW`] (so the record knows both), and a crash
    /// around the first call of `crash` if given.
    async fn new(size: i32, budget: u32, crash: Option<(&'static str, bool)>) -> Pool {
        let now = at("2026-12-01T12:00:00Z");
        let cloud = Cloud::new(world(budget));
        let store = Arc::new(MemoryStore::new());
        let groups = Arc::new(Groups::default());
        groups.insert(StoredGroup {
            group: Group {
                name: GROUP.into(),
                min_size: 1,
                max_size: size + 4,
                desired_capacity: size,
                launch_template_image: Some(OLD.into()),
                suspended_processes: Vec::new(),
                do_not_repair: false,
                retained: Vec::new(),
            },
            instances: Vec::new(),
            template_version: 1,
            failed_activity: None,
        });
        let clusters = Arc::new(Clusters::default());
        let kube = clusters.cluster("prod", now);
        let watched = Arc::new(Watched::new(groups.clone(), crash));
        let mut rotator = cloud.rotator(
            store.clone(),
            groups.clone(),
            Arc::new(ManagedGroups::default()),
            clusters,
            Settings::default(),
        );
        rotator.ports.groups = watched.clone();
        let watcher = cloud.watcher(store.clone());
        let mut pool = Pool {
            cloud,
            groups,
            watched,
            kube,
            rotator,
            watcher,
            now,
            launched: 0,
            never_ready: BTreeSet::new(),
            node_of: BTreeMap::new(),
            budget: budget as usize,
            gone: BTreeSet::new(),
        };
        pool.settle().await;
        for (n, node) in pool.node_of.values().enumerate() {
            pool.kube.add_pod(node, pod(&format!("web-{n}")));
        }
        let report = pool.watcher.handle(&json!({}), now).await.unwrap();
        assert_eq!(report["pools"][0]["desired"], OLD, "{report}");
        pool.cloud
            .with(|w| w.parameters.insert("/golden/ami".into(), NEW.into()));
        let report = pool.watcher.handle(&json!({}), now).await.unwrap();
        assert_eq!(report["pools"][0]["desired"], NEW, "{report}");
        pool
    }

    /// Auto Scaling and the kubelet between passes: instances launched on the launch
    /// template's image up to the desired capacity, each with its Node (Ready unless its image
    /// never becomes Ready, no pod yet); above the desired capacity, the newest instances
    /// terminated with their Nodes.
    async fn settle(&mut self) {
        let mut g = self.groups.get(GROUP).unwrap();
        let desired = usize::try_from(g.group.desired_capacity).unwrap();
        while g.instances.len() < desired {
            self.launched += 1;
            let id = format!("i-{:017x}", self.launched);
            let name = format!("node-{}", self.launched);
            let image = g.group.launch_template_image.clone().unwrap();
            g.instances.push(Member {
                instance_id: id.clone(),
                availability_zone: "us-east-1a".into(),
                image_id: Some(image.clone()),
                launch_time: self.now,
                lifecycle: Lifecycle::InService,
                node: None,
            });
            self.kube.add_node(&name, &id);
            if self.never_ready.contains(&image) {
                let mut node = self.kube.node(&name).unwrap();
                node.ready = false;
                self.kube.set_node(node);
            }
            self.node_of.insert(id, name);
        }
        while g.instances.len() > desired {
            let m = g.instances.pop().unwrap();
            let node = &self.node_of[&m.instance_id];
            self.gone.insert(m.instance_id.clone());
            crate::kube::NodeOps::delete_node(self.kube.as_ref(), node)
                .await
                .unwrap();
        }
        self.groups.insert(g);
    }

    /// One rotator pass at the pool's clock; then the checks every pass must pass (budget,
    /// drains), the clock a minute on, and [`Self::settle`].
    async fn pass(&mut self) -> Value {
        let report = self
            .rotator
            .handle(
                &json!({}),
                Invocation::at(self.now, Instant::now() + Duration::from_secs(600)),
            )
            .await
            .unwrap();
        self.check_pass(&report).await;
        self.now += chrono::Duration::minutes(1);
        self.kube.advance(self.now);
        self.settle().await;
        report
    }

    /// What holds after every pass: at most `budget` rotations in flight and nodes cordoned,
    /// and every instance that left the group had no pod left on its node.
    async fn check_pass(&mut self, report: &Value) {
        let in_flight = self
            .rotations()
            .await
            .iter()
            .filter(|r| r.in_flight())
            .count();
        assert!(
            in_flight <= self.budget,
            "budget {} exceeded: {in_flight} rotations in flight\n{report}",
            self.budget
        );
        let members: BTreeSet<String> = self.instances().into_keys().collect();
        let cordoned = members
            .iter()
            .filter_map(|i| self.kube.node(&self.node_of[i]))
            .filter(|n| n.unschedulable)
            .count();
        assert!(
            cordoned <= self.budget,
            "budget {} exceeded: {cordoned} nodes cordoned\n{report}",
            self.budget
        );
        let left: Vec<String> = self
            .node_of
            .keys()
            .filter(|i| !members.contains(*i) && !self.gone.contains(*i))
            .cloned()
            .collect();
        for instance in left {
            let node = &self.node_of[&instance];
            let pods: Vec<String> = self
                .kube
                .pods(node)
                .iter()
                .map(|p| p.pod.to_string())
                .collect();
            assert!(
                pods.is_empty(),
                "instance {instance} terminated before its drain ended: pods {pods:?} still on node {node}\n{report}"
            );
            self.gone.insert(instance);
        }
    }

    /// Passes until every rotation ended, every instance runs `image` and no process is
    /// suspended, on the group nor in the pool's record (at most `passes`); the number of
    /// passes it took.
    async fn until_settled(&mut self, image: &str, passes: usize) -> usize {
        for n in 1..=passes {
            self.pass().await;
            let images: Vec<String> = self.instances().into_values().collect();
            let g = self.groups.get(GROUP).unwrap().group;
            if self.rotations().await.iter().all(|r| !r.in_flight())
                && images.iter().all(|i| i == image)
                && g.suspended_processes.is_empty()
                && self.record().await.group_holds.suspended.is_empty()
            {
                return n;
            }
        }
        panic!(
            "not settled after {passes} passes: {:?}, rotations {:?}",
            self.groups.get(GROUP).unwrap(),
            self.rotations().await
        );
    }

    /// The group's instances with their images.
    fn instances(&self) -> BTreeMap<String, String> {
        self.groups
            .get(GROUP)
            .unwrap()
            .instances
            .into_iter()
            .map(|m| (m.instance_id, m.image_id.unwrap_or_default()))
            .collect()
    }

    fn desired_capacity(&self) -> i32 {
        self.groups.get(GROUP).unwrap().group.desired_capacity
    }

    async fn rotations(&self) -> Vec<Rotation> {
        self.rotator
            .cell
            .state
            .rotations(POOL)
            .await
            .unwrap()
            .into_iter()
            .map(|v| v.value)
            .collect()
    }

    async fn record(&self) -> crate::state::PoolRecord {
        self.rotator.cell.state.pool(POOL).await.unwrap().unwrap()
    }

    /// `instance` disappears (Spot reclaim, someone terminates it): it leaves the group
    /// without a decrement, its Node with it.
    async fn vanish(&mut self, instance: &str) {
        let mut g = self.groups.get(GROUP).unwrap();
        g.instances.retain(|m| m.instance_id != instance);
        self.groups.insert(g);
        self.gone.insert(instance.to_string());
        crate::kube::NodeOps::delete_node(self.kube.as_ref(), &self.node_of[instance])
            .await
            .unwrap();
    }

    /// Every node of the group, and none cordoned.
    fn assert_nodes_schedulable(&self) {
        for (instance, _) in self.instances() {
            let node = self.kube.node(&self.node_of[&instance]).unwrap();
            assert!(!node.unschedulable, "{} left cordoned", node.name);
        }
    }
}

/// A drifted pool of 4 rolls to the desired AMI: the launch template first, then each node
/// replaced surge first (+1, the replacement Ready, cordon, drain, terminate with the
/// decrement), never more than the budget of 2 at once. At the end the group is back at 4, all
/// on the new AMI, every rotation `Done` with its replacement and its surge given back, each
/// old node drained (its pod evicted) and its Node deleted, no node left cordoned, and
/// AZRebalance, suspended during the roll, resumed.
#[tokio::test]
async fn a_drifted_pool_rolls_to_the_desired_ami_with_surge_within_budget() {
    let mut p = Pool::new(4, 2, None).await;
    let old: Vec<String> = p.instances().into_keys().collect();
    let report = p.pass().await;
    assert_eq!(report["pools"][0]["launchTemplate"], NEW, "{report}");
    assert_eq!(p.desired_capacity(), 6, "two surges (budget 2): {report}");
    let started = p.rotations().await;
    assert_eq!(started.len(), 2, "{started:?}");
    assert!(
        started.iter().all(|r| r.step == Step::Surging),
        "{started:?}"
    );
    assert_eq!(
        p.groups.get(GROUP).unwrap().group.suspended_processes,
        vec!["AZRebalance".to_string()],
        "AZRebalance suspended while rotations run"
    );
    p.until_settled(NEW, 40).await;
    assert_eq!(p.desired_capacity(), 4, "every surge given back");
    assert_eq!(p.instances().len(), 4, "the group back at its size");
    let rotations = p.rotations().await;
    assert_eq!(
        rotations.len(),
        4,
        "each old node rotated once: {rotations:?}"
    );
    for r in &rotations {
        assert_eq!(r.step, Step::Done, "{r:?}");
        assert!(old.contains(&r.instance_id), "{r:?}");
        assert!(r.replacement.is_some(), "{r:?}");
        assert!(
            !r.surge_active() && !r.surge_owed(),
            "surge given back: {r:?}"
        );
    }
    for i in &old {
        let node = &p.node_of[i];
        assert!(p.kube.node(node).is_none(), "{node} deleted");
        assert!(
            p.kube.log().contains(&format!("cordon {node}")),
            "{node} cordoned before it went"
        );
    }
    assert!(
        p.kube
            .log()
            .iter()
            .any(|l| l.starts_with("evict default/web-"))
    );
    p.assert_nodes_schedulable();
    // Nothing more to do: a further pass starts nothing and changes nothing.
    let desired_before = p.desired_capacity();
    let report = p.pass().await;
    assert_eq!(report["pools"][0]["started"], json!([]), "{report}");
    assert_eq!(p.desired_capacity(), desired_before);
}

/// A drain waits for its pods: the old node's pod is refused eviction by its
/// PodDisruptionBudget (HTTP 429) three times; the rotation stays `Draining` pass after pass
/// and the instance is terminated only once the pod has left (checked after every pass: no
/// instance leaves the group with a pod still on its node).
#[tokio::test]
async fn a_drain_blocked_by_a_pod_disruption_budget_waits_for_the_pod() {
    let mut p = Pool::new(1, 1, None).await;
    let (old, node) = p
        .node_of
        .iter()
        .next()
        .map(|(i, n)| (i.clone(), n.clone()))
        .unwrap();
    p.kube.add_pod(&node, pod("db-0"));
    let blocked = || EvictOutcome::Blocked {
        pdb: Some("db".into()),
        message: "Cannot evict pod as it would violate the pod's disruption budget.".into(),
    };
    p.kube
        .script_evictions("db-0", vec![blocked(), blocked(), blocked()]);
    let mut draining_passes = 0;
    for _ in 0..20 {
        p.pass().await;
        let rotations = p.rotations().await;
        if rotations.iter().any(|r| r.step == Step::Draining) {
            draining_passes += 1;
            assert!(
                p.instances().contains_key(&old),
                "terminated while draining"
            );
        }
        if rotations.iter().all(|r| r.step == Step::Done) && !rotations.is_empty() {
            break;
        }
    }
    let evictions = p
        .kube
        .log()
        .iter()
        .filter(|l| *l == "evict default/db-0")
        .count();
    assert_eq!(evictions, 4, "three refused, the fourth accepted");
    assert!(
        draining_passes >= 4,
        "the drain waited for the budget ({draining_passes} passes)"
    );
    let rotations = p.rotations().await;
    assert_eq!(rotations.len(), 1);
    assert_eq!(rotations[0].step, Step::Done, "{rotations:?}");
    assert!(!p.instances().contains_key(&old));
    assert!(p.kube.pods(&node).is_empty(), "the pod left before the end");
    assert_eq!(p.desired_capacity(), 1, "the surge was given back");
}

/// The Cluster Autoscaler (or any other writer) raises the desired capacity between two
/// passes while a surge holds a unit: nodecycle changes the capacity only by a delta from a
/// fresh read (+1 on the value it reads, the give-back as a terminate with its decrement), so
/// no value it sets is below the other writer's size, and the group ends at that size (the
/// other writer's extra node kept), every instance on the new AMI.
#[tokio::test]
async fn another_writer_raising_capacity_between_passes_is_never_undone() {
    let mut p = Pool::new(4, 1, None).await;
    p.pass().await;
    assert_eq!(p.desired_capacity(), 5, "one surge (budget 1)");
    // The Cluster Autoscaler scales up by one: its size without nodecycle's unit is 5.
    p.groups.set_desired_capacity(GROUP, 6).await.unwrap();
    let other_writers_size = 5;
    let before = p.watched.changes.lock().unwrap().len();
    p.until_settled(NEW, 40).await;
    let changes = p.watched.changes.lock().unwrap()[before..].to_vec();
    assert!(!changes.is_empty());
    for (call, desired) in &changes {
        assert!(
            *desired >= other_writers_size,
            "{call} left the desired capacity at {desired}, below the other writer's {other_writers_size}: {changes:?}"
        );
    }
    assert_eq!(
        p.desired_capacity(),
        other_writers_size,
        "the other writer's size, nodecycle's surges given back: {changes:?}"
    );
    assert_eq!(p.instances().len(), 5);
    assert_eq!(p.rotations().await.len(), 4, "the four old nodes rotated");
}

/// A rotation whose old instance disappears mid-rotation (after its replacement was claimed)
/// gives its surge back: Auto Scaling replaces the lost instance, and the group ends at its
/// size, all on the new AMI.
#[tokio::test]
async fn an_old_instance_vanishing_mid_rotation_gives_the_surge_back() {
    let mut p = Pool::new(4, 1, None).await;
    let mut victim = None;
    for _ in 0..10 {
        p.pass().await;
        let rotations = p.rotations().await;
        if let Some(r) = rotations.iter().find(|r| r.step == Step::Cordoned) {
            victim = Some(r.instance_id.clone());
            break;
        }
    }
    let victim = victim.expect("a rotation claimed its replacement");
    assert_eq!(p.desired_capacity(), 5, "the surge holds a unit");
    p.vanish(&victim).await;
    p.until_settled(NEW, 40).await;
    assert_eq!(p.desired_capacity(), 4, "the surge was given back");
    assert_eq!(p.instances().len(), 4);
    let rotations = p.rotations().await;
    assert!(
        rotations
            .iter()
            .all(|r| !r.surge_active() && !r.surge_owed()),
        "{rotations:?}"
    );
}

/// A pool of 4, budget 2, rolled while the first call of `op` fails, before Auto Scaling
/// performed it or (`after`) after (its answer lost: a crash between the call and the record
/// of its result). The next passes finish the roll: every old node rotated exactly once, no
/// surge left behind (the group back at 4, all on the new AMI), AZRebalance resumed, never
/// more than the budget in flight.
async fn converges_despite_a_crash(op: &'static str, after: bool) {
    let mut p = Pool::new(4, 2, Some((op, after))).await;
    p.until_settled(NEW, 40).await;
    assert!(
        p.watched.fired.load(Ordering::SeqCst),
        "the crash in {op} happened"
    );
    assert_eq!(
        p.desired_capacity(),
        4,
        "crash in {op} (after={after}): a surge was left behind: {:?}",
        p.watched.changes.lock().unwrap()
    );
    assert_eq!(p.instances().len(), 4, "crash in {op} (after={after})");
    let rotations = p.rotations().await;
    assert_eq!(rotations.len(), 4, "no node rotated twice: {rotations:?}");
    assert!(
        rotations.iter().all(|r| r.step == Step::Done),
        "{rotations:?}"
    );
    assert!(
        p.record().await.group_holds.suspended.is_empty(),
        "crash in {op} (after={after}): the record holds no suspended process"
    );
    p.assert_nodes_schedulable();
}

/// [`converges_despite_a_crash`] in `SetDesiredCapacity` (the surge's raise), before the call.
#[tokio::test]
async fn a_crash_before_raising_capacity_leaves_no_surge() {
    converges_despite_a_crash("set_desired_capacity", false).await;
}

/// [`converges_despite_a_crash`] in `SetDesiredCapacity` (the surge's raise), after the call.
#[tokio::test]
async fn a_crash_after_raising_capacity_leaves_no_surge() {
    converges_despite_a_crash("set_desired_capacity", true).await;
}

/// [`converges_despite_a_crash`] in the terminate with decrement, before the call.
#[tokio::test]
async fn a_crash_before_terminating_leaves_no_surge() {
    converges_despite_a_crash("terminate_instance", false).await;
}

/// [`converges_despite_a_crash`] in the terminate with decrement, after the call.
#[tokio::test]
async fn a_crash_after_terminating_leaves_no_surge() {
    converges_despite_a_crash("terminate_instance", true).await;
}

/// [`converges_despite_a_crash`] in suspending AZRebalance, before and after the call.
#[tokio::test]
async fn a_crash_around_suspending_az_rebalance_leaves_no_surge() {
    converges_despite_a_crash("suspend_processes", false).await;
    converges_despite_a_crash("suspend_processes", true).await;
}

/// [`converges_despite_a_crash`] in resuming AZRebalance, before and after the call.
#[tokio::test]
async fn a_crash_around_resuming_az_rebalance_leaves_no_surge() {
    converges_despite_a_crash("resume_processes", false).await;
    converges_despite_a_crash("resume_processes", true).await;
}

/// [`converges_despite_a_crash`] in the launch template update, before and after the call.
#[tokio::test]
async fn a_crash_around_the_launch_template_update_leaves_no_surge() {
    converges_despite_a_crash("set_image", false).await;
    converges_despite_a_crash("set_image", true).await;
}

/// A new AMI whose replacement never becomes Ready: the rotation fails after the replacement
/// timeout, the AMI's release is quarantined, the pool's desired AMI rolls back to the previous
/// one, and the pool is not left halted; the surge is given back (the bad instance terminated), so the group
/// is back at its size on the old AMI with no node cordoned.
#[tokio::test]
async fn a_replacement_never_ready_quarantines_the_ami_and_rolls_back() {
    let mut p = Pool::new(3, 1, None).await;
    p.never_ready.insert(NEW.into());
    for _ in 0..25 {
        p.pass().await;
    }
    let rotations = p.rotations().await;
    assert_eq!(rotations.len(), 1, "only one node was tried: {rotations:?}");
    assert_eq!(rotations[0].step, Step::Failed, "{rotations:?}");
    assert!(
        rotations[0]
            .error
            .as_deref()
            .is_some_and(|e| e.contains("not Ready within 15m")),
        "{rotations:?}"
    );
    let quarantine = p.rotator.cell.state.quarantine().await.unwrap();
    assert_eq!(quarantine.0.len(), 1, "the release is quarantined");
    let record = p.record().await;
    assert_eq!(
        record.desired.as_ref().map(|a| a.id.as_str()),
        Some(OLD),
        "rolled back"
    );
    assert!(
        record.halted.is_none(),
        "the rollback lifts the pool's own halt: {:?}",
        record.halted
    );
    let g = p.groups.get(GROUP).unwrap().group;
    assert_eq!(g.launch_template_image.as_deref(), Some(OLD));
    assert_eq!(g.desired_capacity, 3, "the surge was given back");
    let images: Vec<String> = p.instances().into_values().collect();
    assert_eq!(
        images,
        vec![OLD.to_string(); 3],
        "no instance of the bad AMI left"
    );
    p.assert_nodes_schedulable();
}

/// An operator quarantines the release a pool has fully rolled out: the next pass rolls the
/// pool's desired AMI back to the previous one (and the launch template with it), and the
/// following passes rotate every node back to it, surge first, ending at the group's size.
#[tokio::test]
async fn an_operator_quarantine_rolls_the_pool_back_to_the_previous_ami() {
    use crate::promotion::{Cause, Quarantine, Target, release_of};
    let mut p = Pool::new(3, 1, None).await;
    p.until_settled(NEW, 40).await;
    let desired = p.record().await.desired.unwrap();
    assert_eq!(desired.id, NEW);
    let q = Quarantine {
        target: Target::Release(release_of(&desired)),
        reason: "bad release".into(),
        by: "operator".into(),
        at: p.now,
        cause: Cause::Operator {
            request_id: "r-1".into(),
        },
        outbox: Vec::new(),
    };
    assert!(p.rotator.cell.announce.put_quarantine(&q).await.unwrap());
    let report = p.pass().await;
    assert_eq!(report["pools"][0]["rolledBack"], OLD, "{report}");
    assert_eq!(report["pools"][0]["launchTemplate"], OLD, "{report}");
    p.until_settled(OLD, 40).await;
    assert_eq!(
        p.record().await.desired.as_ref().map(|a| a.id.as_str()),
        Some(OLD)
    );
    assert_eq!(p.desired_capacity(), 3, "every surge given back");
    assert_eq!(p.instances().len(), 3);
    assert_eq!(
        p.rotations()
            .await
            .iter()
            .filter(|r| r.step == Step::Done)
            .count(),
        6
    );
    p.assert_nodes_schedulable();
}

/// A managed node group `general` of 3 nodes on [`OLD`], on customer launch template `lt-1`
/// (version 1 launches [`OLD`]), behind Auto Scaling group `eks-general`; the pool's desired
/// AMI is [`NEW`]. The rotator moves it by one node group update to a new template version
/// that launches [`NEW`] (version 1 untouched), recorded with its client request token before
/// the call, never started twice; while EKS rolls the nodes the rotator only follows the
/// update, and once EKS reports it successful the record says so and every node runs [`NEW`].
#[tokio::test]
async fn a_managed_node_group_moves_to_a_new_template_version_by_one_update() {
    use crate::managed::{ManagedGroup, Phase, TemplateRef, UpdateConfig, UpdateState};
    use crate::managed::{ManagedGroupOps, UpdateTarget};
    let mut now = at("2026-12-01T12:00:00Z");
    let mut w = world(1);
    w.policies.insert(
        POOL_PARAM.to_string(),
        PolicyDocument::parameter(
            "/nodecycle/pools/",
            POOL_PARAM,
            "cluster: prod\nname: general\nnodeGroup: { managedNodeGroup: general }\narchitecture: x86_64\namiSelectorTerms: [{ ssmParameter: /golden/ami }]\ndisruption:\n  budgets:\n    - nodes: \"1\"\n",
        ),
    );
    let cloud = Cloud::new(w);
    let store = Arc::new(MemoryStore::new());
    let groups = Arc::new(Groups::default());
    let launched = now;
    let member = move |n: u32, image: &str| Member {
        instance_id: format!("i-{n:017x}"),
        availability_zone: "us-east-1a".into(),
        image_id: Some(image.into()),
        launch_time: launched,
        lifecycle: Lifecycle::InService,
        node: None,
    };
    groups.insert(StoredGroup {
        group: Group {
            name: "eks-general".into(),
            min_size: 1,
            max_size: 6,
            desired_capacity: 3,
            launch_template_image: Some(OLD.into()),
            suspended_processes: Vec::new(),
            do_not_repair: false,
            retained: Vec::new(),
        },
        instances: (1..=3).map(|n| member(n, OLD)).collect(),
        template_version: 1,
        failed_activity: None,
    });
    let managed = Arc::new(ManagedGroups::default());
    managed.insert(
        "prod",
        ManagedGroup {
            name: "general".into(),
            status: "ACTIVE".into(),
            release_version: None,
            ami_type: Some("CUSTOM".into()),
            launch_template: Some(TemplateRef {
                id: Some("lt-1".into()),
                name: Some("custom-general".into()),
                version: Some("1".into()),
            }),
            update_config: UpdateConfig {
                max_unavailable: Some(1),
                max_unavailable_percentage: None,
                update_strategy: None,
            },
            auto_scaling_group: Some("eks-general".into()),
            auto_repair: false,
        },
    );
    managed.insert_template("lt-1", vec![Some(OLD.into())]);
    let clusters = Arc::new(Clusters::default());
    let kube = clusters.cluster("prod", now);
    for n in 1..=3u32 {
        kube.add_node(&format!("node-{n}"), &format!("i-{n:017x}"));
    }
    let rotator = cloud.rotator(
        store.clone(),
        groups.clone(),
        managed.clone(),
        clusters,
        Settings::default(),
    );
    let watcher = cloud.watcher(store.clone());
    watcher.handle(&json!({}), now).await.unwrap();
    cloud.with(|w| w.parameters.insert("/golden/ami".into(), NEW.into()));
    let report = watcher.handle(&json!({}), now).await.unwrap();
    assert_eq!(report["pools"][0]["desired"], NEW, "{report}");
    let mut rolled = false;
    for _ in 0..10 {
        let report = rotator
            .handle(
                &json!({}),
                Invocation::at(now, Instant::now() + Duration::from_secs(600)),
            )
            .await
            .unwrap();
        assert_eq!(report["pools"][0]["errors"], json!([]), "{report}");
        let stored = managed.get("prod", "general").unwrap();
        assert!(
            stored.updates.len() <= 1,
            "one update: {:?}",
            stored.updates
        );
        if let Some((_, _, status)) = stored.updates.first()
            && status.state == UpdateState::InProgress
        {
            // EKS rolls the group onto the new version, then reports the update successful.
            assert!(
                !rolled,
                "the rotator followed the update, never started another"
            );
            let mut g = groups.get("eks-general").unwrap();
            g.instances = (4..=6).map(|n| member(n, NEW)).collect();
            g.group.launch_template_image = Some(NEW.into());
            groups.insert(g);
            for n in 4..=6u32 {
                kube.add_node(&format!("node-{n}"), &format!("i-{n:017x}"));
            }
            managed.finish("prod", "general", UpdateState::Successful);
            rolled = true;
        }
        let update = rotator.cell.state.managed_update(POOL).await.unwrap();
        if update.is_some_and(|u| u.value.phase == Phase::Successful) {
            break;
        }
        now += chrono::Duration::minutes(1);
    }
    let update = rotator
        .cell
        .state
        .managed_update(POOL)
        .await
        .unwrap()
        .unwrap()
        .value;
    assert_eq!(update.phase, Phase::Successful, "{update:?}");
    assert_eq!(
        update.target,
        Some(UpdateTarget::LaunchTemplate {
            id: "lt-1".into(),
            version: "2".into()
        }),
        "{update:?}"
    );
    let stored = managed.get("prod", "general").unwrap();
    assert_eq!(stored.updates.len(), 1, "{:?}", stored.updates);
    assert_eq!(
        stored.updates[0].0, update.token,
        "started with its recorded token"
    );
    let template = |version: &str| TemplateRef {
        id: Some("lt-1".into()),
        name: None,
        version: Some(version.into()),
    };
    assert_eq!(
        managed
            .template_image(&template("1"))
            .await
            .unwrap()
            .as_deref(),
        Some(OLD),
        "version 1 untouched"
    );
    assert_eq!(
        managed
            .template_image(&template("2"))
            .await
            .unwrap()
            .as_deref(),
        Some(NEW)
    );
    assert_eq!(
        stored
            .group
            .launch_template
            .and_then(|t| t.version)
            .as_deref(),
        Some("2")
    );
    let g = groups.get("eks-general").unwrap();
    assert_eq!(
        g.group.desired_capacity, 3,
        "nodecycle left the group's size alone"
    );
    assert!(
        g.instances
            .iter()
            .all(|m| m.image_id.as_deref() == Some(NEW))
    );
}

/// A change of course mid-rollout gives back what it leaves: the desired AMI moves NEW -> OLD
/// -> NEW -> OLD within a few passes (a stale read followed, a restore, a withdrawal); the
/// group ends at its own size, every instance on OLD, no rotation in flight, no surge held or
/// owed (issue 43, part 5: 4 nodes ended at 8).
#[tokio::test]
async fn a_desired_ami_changing_back_and_forth_mid_rollout_leaves_no_surge() {
    let mut p = Pool::new(4, 2, None).await;
    let flip = |p: &mut Pool, image: &str| {
        p.cloud
            .with(|w| w.parameters.insert("/golden/ami".into(), image.into()));
    };
    p.pass().await;
    for image in [OLD, NEW, OLD] {
        flip(&mut p, image);
        let report = p.watcher.handle(&json!({}), p.now).await.unwrap();
        assert_eq!(report["pools"][0]["desired"], image, "{report}");
        p.pass().await;
        p.pass().await;
    }
    p.until_settled(OLD, 60).await;
    assert_eq!(
        p.desired_capacity(),
        4,
        "every surge given back: {:?}",
        p.rotations().await
    );
    assert_eq!(
        p.instances().len(),
        4,
        "the group back at its size: {:?}",
        p.instances()
    );
    for r in p.rotations().await {
        assert!(
            !r.surge_active() && !r.surge_owed(),
            "surge given back: {r:?}"
        );
    }
}
