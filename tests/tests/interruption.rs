//! The interruption handler end to end: the sample events in `events/` (instance ids rewritten
//! to the moto instances of the test) against moto (EC2 tags, Auto Scaling group, SSM policy,
//! DynamoDB) and the Kubernetes API stand-in. moto does not implement CompleteLifecycleAction /
//! RecordLifecycleActionHeartbeat: tests/fakecloud patches it to answer and log them like AWS
//! (used through `nodecycle run`); the ordering tests use a recording fake of the narrow
//! [`LifecycleOps`] port that also looks at the node's pods at the moment of each call.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use crate::support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use nodecycle::aws::{
    dynamodb::Table,
    instances::Ec2Instances,
    ssm::{Ssm, SsmPolicies},
};
use nodecycle::handlers::Invocation;
use nodecycle::handlers::interruption::{InterruptionHandler, InterruptionPorts, Settings};
use nodecycle::handlers::rotator::EksConnector;
use nodecycle::interruption::{LifecycleAction, LifecycleOps};
use nodecycle::port::PortError;
use nodecycle::rotation::{Rotation, RotationReason, Step};
use nodecycle::state::Store;
use nodecycle_tests::{
    AwsFault, AwsFaults, FakeCloud, Faults, KubeStandIn, KubeState, PdbFixture, PodFixture,
};
use serde_json::{Value, json};
use support::*;

const POLICY: &str = "/nodecycle/pools/prod/general";

/// A lifecycle call seen by the fake, with the pods still on the node at that moment.
#[derive(Debug, Clone)]
struct Call {
    op: &'static str,
    instance: String,
    pods_left: usize,
}

/// Records lifecycle calls; asks the stand-in how many pods the node still has at each call.
struct RecordingLifecycle {
    calls: Mutex<Vec<Call>>,
    kube: KubeStandIn,
    node: Mutex<Option<String>>,
}

impl RecordingLifecycle {
    fn record(&self, op: &'static str, instance: &str) {
        let node = self.node.lock().unwrap().clone();
        let pods_left = node.map_or(0, |n| {
            self.kube
                .state()
                .pods_on(&n)
                .iter()
                .filter(|p| p["metadata"]["ownerReferences"][0]["kind"] != "DaemonSet")
                .count()
        });
        self.calls.lock().unwrap().push(Call {
            op,
            instance: instance.to_string(),
            pods_left,
        });
    }

    fn calls(&self) -> Vec<Call> {
        self.calls.lock().unwrap().clone()
    }
}

#[async_trait]
impl LifecycleOps for RecordingLifecycle {
    async fn heartbeat(&self, a: &LifecycleAction) -> Result<bool, PortError> {
        assert_eq!(
            (a.group.as_str(), a.hook.as_str()),
            ("prod-general", "nodecycle-drain")
        );
        self.record("heartbeat", &a.instance_id);
        Ok(true)
    }

    async fn complete_continue(&self, a: &LifecycleAction) -> Result<bool, PortError> {
        assert_eq!(
            (a.group.as_str(), a.hook.as_str()),
            ("prod-general", "nodecycle-drain")
        );
        self.record("complete", &a.instance_id);
        Ok(true)
    }

    async fn complete_abandon(&self, a: &LifecycleAction) -> Result<bool, PortError> {
        self.record("abandon", &a.instance_id);
        Ok(true)
    }
}

struct Env {
    cloud: FakeCloud,
    kube: KubeStandIn,
    adapters: Adapters,
    table: Arc<Table>,
    handler: InterruptionHandler,
    lifecycle: Arc<RecordingLifecycle>,
    /// Instances of the pool's group, with their node names.
    nodes: Vec<(String, String)>,
    image: String,
}

fn policy_text(rebalance: &str) -> String {
    format!(
        "cluster: prod\nname: general\nnodeGroup: {{ autoScalingGroup: prod-general }}\namiSelectorTerms:\n  - name: golden-*\n    owner: self\nterminationGracePeriod: 1h\ninterruption: {{ rebalance: {rebalance} }}\n"
    )
}

async fn env(size: i32) -> Env {
    let cloud = FakeCloud::start();
    cloud.create_cluster("prod", "1.30");
    let kube = cloud.create_kube("prod");
    let image = cloud.register_image(
        nodecycle_tests::ImageFixture::new("golden-1")
            .owner("self")
            .created("2024-01-01T00:00:00Z"),
    );
    let a = Adapters::new(&cloud).await;
    a.create_group(
        "prod-general",
        &image,
        "m5.large",
        size,
        size + 2,
        Some("prod"),
    )
    .await;
    let out = a
        .clients
        .autoscaling
        .describe_auto_scaling_groups()
        .auto_scaling_group_names("prod-general")
        .send()
        .await
        .unwrap();
    let mut ids: Vec<String> = out.auto_scaling_groups()[0]
        .instances()
        .iter()
        .map(|i| i.instance_id().unwrap().to_string())
        .collect();
    ids.sort();
    let nodes: Vec<(String, String)> = ids
        .iter()
        .enumerate()
        .map(|(n, id)| {
            let name = format!("ip-10-0-1-{}.us-east-2.compute.internal", 10 + n);
            kube.add_node(&name, &format!("aws:///us-east-2a/{id}"));
            (id.clone(), name)
        })
        .collect();
    cloud.put_parameter(POLICY, &policy_text("ignore"));
    let table = a.table("nodecycle").await;
    let lifecycle = Arc::new(RecordingLifecycle {
        calls: Mutex::new(Vec::new()),
        kube: kube.clone(),
        node: Mutex::new(None),
    });
    let handler = InterruptionHandler {
        cell: a.cell(
            Arc::new(SsmPolicies::new(
                Ssm::new(a.clients.ssm.clone()),
                "/nodecycle/pools/",
            )),
            table.clone(),
        ),
        ports: InterruptionPorts {
            instances: Arc::new(Ec2Instances::new(a.clients.ec2.clone())),
            lifecycle: lifecycle.clone(),
            kube: Arc::new(EksConnector::new(cloud.sdk_config().await)),
        },
        deployment: Arc::new(nodecycle::aws::identity::OwnAccount::new(
            &cloud.sdk_config().await,
        )),
        settings: Settings {
            poll: Duration::from_millis(200),
            heartbeat_every: Duration::from_millis(400),
            ..Settings::default()
        },
        metrics: Arc::new(nodecycle::metrics::NoMetrics),
    };
    Env {
        cloud,
        kube,
        adapters: a,
        table,
        handler,
        lifecycle,
        nodes,
        image,
    }
}

/// A sample event from `events/` with its instance ids replaced by `instance`, its time set and,
/// when given, its id.
pub(crate) fn event(file: &str, instance: &str, time: DateTime<Utc>, id: Option<&str>) -> Value {
    let path = nodecycle_tests::repo_path(&format!("events/{file}"));
    let text = std::fs::read_to_string(&path).unwrap();
    let mut v: Value = serde_json::from_str(&text).unwrap();
    let sample_id = v["detail"]["instance-id"]
        .as_str()
        .or(v["detail"]["EC2InstanceId"].as_str())
        .or(v["detail"]["affectedEntities"][0]["entityValue"].as_str())
        .map(str::to_string);
    if let Some(sample_id) = sample_id {
        let text = serde_json::to_string(&v)
            .unwrap()
            .replace(&sample_id, instance);
        v = serde_json::from_str(&text).unwrap();
    }
    v["time"] = json!(time.to_rfc3339_opts(chrono::SecondsFormat::Secs, true));
    // Each event its own id unless the test redelivers one on purpose.
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let fresh = format!(
        "evt-{}",
        NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    );
    v["id"] = json!(id.map_or(fresh, str::to_string));
    v
}

impl Env {
    async fn handle(&self, payload: &Value) -> Value {
        self.try_handle(payload).await.unwrap()
    }

    async fn try_handle(
        &self,
        payload: &Value,
    ) -> Result<Value, nodecycle::handlers::HandlerError> {
        self.handler
            .handle(
                payload,
                Invocation::at(Utc::now(), Instant::now() + Duration::from_secs(170)),
            )
            .await
    }

    async fn items(&self, prefix: &str) -> Vec<(String, Value)> {
        if prefix.is_empty() {
            let mut all = Vec::new();
            for p in ["CLAIM#", "EVT#", "ROT#", "LCA#", "STATE"] {
                all.extend(Box::pin(self.items(p)).await);
            }
            return all;
        }
        self.table
            .query("POOL#prod/general", prefix)
            .await
            .unwrap()
            .into_iter()
            .map(|(sk, v)| (sk, v.value))
            .collect()
    }

    async fn rotation(&self, instance: &str) -> Option<Rotation> {
        self.table
            .get("POOL#prod/general", &format!("ROT#{instance}"))
            .await
            .unwrap()
            .map(|v| serde_json::from_value(v.value).unwrap())
    }

    fn web_pods(&self, node: &str, names: &[&str], grace: u32) {
        for n in names {
            self.kube.add_pod(
                PodFixture::new("default", n)
                    .node(node)
                    .owner("ReplicaSet", "web-5d8f")
                    .label("app", "web")
                    .grace_seconds(grace),
            );
        }
    }
}

fn node_patches(state: &KubeState, node: &str) -> usize {
    state
        .requests_to("PATCH", &format!("/api/v1/nodes/{node}"))
        .len()
}

fn evictions(state: &KubeState, name: &str) -> usize {
    state
        .requests_to(
            "POST",
            &format!("/api/v1/namespaces/default/pods/{name}/eviction"),
        )
        .len()
}

fn pod_deletions(state: &KubeState, name: &str) -> usize {
    state
        .requests_to("DELETE", &format!("/api/v1/namespaces/default/pods/{name}"))
        .len()
}

fn taint(state: &KubeState, node: &str) -> Option<String> {
    let n = state.node(node)?;
    n["spec"]["taints"]
        .as_array()?
        .iter()
        .find(|t| t["key"] == "nodecycle.dev/disrupted")
        .and_then(|t| t["value"].as_str().map(str::to_string))
}

#[tokio::test]
async fn spot_warning_cordons_evicts_then_deletes_what_pdbs_hold_after_90s() {
    let e = env(2).await;
    let (instance, node) = e.nodes[0].clone();
    e.web_pods(&node, &["web-a", "web-b"], 1);
    e.kube.add_pod(
        PodFixture::new("default", "db-0")
            .node(&node)
            .owner("StatefulSet", "db")
            .label("app", "db")
            .grace_seconds(1),
    );
    e.kube.add_pdb(
        PdbFixture::new("default", "db")
            .match_label("app", "db")
            .min_available(1),
    );
    // The warning is 86 s old: PDBs are honoured for 4 more seconds, then db-0 is deleted.
    let sent = Utc::now() - chrono::Duration::seconds(86);
    let out = e
        .handle(&event(
            "spot-interruption-warning.json",
            &instance,
            sent,
            None,
        ))
        .await;
    assert_eq!(out["kind"], "SpotInterruptionWarning", "{out}");
    assert_eq!(out["outcomes"][0]["action"], "drained", "{out}");
    assert_eq!(out["outcomes"][0]["pool"], "prod/general", "{out}");

    let s = e.kube.state();
    let node_obj = s.node(&node).unwrap();
    assert_eq!(node_obj["spec"]["unschedulable"], true);
    assert_eq!(taint(&s, &node).as_deref(), Some("SpotInterruption"));
    // Cordon first, then evictions of every pod, the PDB-held one deleted after 90 s.
    let first_patch = s
        .requests
        .iter()
        .position(|r| r.method == "PATCH" && r.path.ends_with(&node))
        .unwrap();
    let first_evict = s
        .requests
        .iter()
        .position(|r| r.path.ends_with("/eviction"))
        .unwrap();
    assert!(first_patch < first_evict);
    assert_eq!(evictions(&s, "web-a"), 1);
    assert_eq!(evictions(&s, "web-b"), 1);
    assert!(evictions(&s, "db-0") >= 1, "PDB-blocked evictions retried");
    assert_eq!(pod_deletions(&s, "db-0"), 1, "deleted once after 90 s");
    // The PDB was honoured until 90 s after the warning: the stand-in saw the delete then.
    let deleted = s.requests_to("DELETE", "/api/v1/namespaces/default/pods/db-0")[0]
        .time
        .parse::<DateTime<Utc>>()
        .unwrap();
    assert!(
        deleted >= sent + chrono::Duration::seconds(89),
        "db-0 deleted at {deleted}, warning sent at {sent}: PDB honoured until 90 s"
    );
    assert_eq!(pod_deletions(&s, "web-a"), 0);
    assert!(s.pods_on(&node).is_empty());
    // The other node is untouched.
    assert_eq!(node_patches(&s, &e.nodes[1].1), 0);

    // Recorded for status: event record and the drain claim.
    let records = e.items("EVT#").await;
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0].1["instance"], instance.as_str());
    assert_eq!(records[0].1["action"], "drained");
    assert_eq!(records[0].1["kind"], "SpotInterruptionWarning");
    let claims = e.items(&format!("CLAIM#{instance}#drain")).await;
    assert_eq!(claims[0].1["status"], "done");
}

/// A Spot warning whose time cannot be believed (1970, or a day ahead: a replay, a direct
/// invoke) for a live instance EC2 does not say is interrupted (no Spot request, or one still
/// `fulfilled`, or one marked for termination that the handler's role may not read): every pod
/// PDBs allow to go is evicted, the one whose PDB allows nothing is never deleted and is still
/// there when the handler ends. The same 1970 warning for an
/// instance whose Spot request EC2 marked `marked-for-termination` keeps the deadline of a
/// fresh warning: what PDBs hold is deleted `force_after` after the handling. The deadlines
/// are shortened (2 s, 4 s) alike for all: only the time and EC2's word differ.
#[tokio::test]
async fn an_untrustworthy_warning_time_never_skips_a_pdb_unless_ec2_confirms_it() {
    let mut e = env(4).await;
    e.handler.settings.force_after = Duration::from_secs(2);
    e.handler.settings.notice = Duration::from_secs(4);
    for (n, (_, node)) in e.nodes.iter().enumerate() {
        e.web_pods(node, &[&format!("web-{n}")], 1);
        e.kube.add_pod(
            PodFixture::new("default", &format!("db-{n}"))
                .node(node)
                .owner("StatefulSet", &format!("db-{n}"))
                .label("app", &format!("db-{n}"))
                .grace_seconds(1),
        );
        // One pod and minAvailable 1: the budget allows no disruption.
        e.kube.add_pdb(
            PdbFixture::new("default", &format!("db-{n}"))
                .match_label("app", &format!("db-{n}"))
                .min_available(1),
        );
    }
    let epoch = DateTime::parse_from_rfc3339("1970-01-01T00:00:00Z")
        .unwrap()
        .with_timezone(&Utc);
    let (old, ahead, confirmed, unreadable) = (&e.nodes[0], &e.nodes[1], &e.nodes[2], &e.nodes[3]);
    e.cloud.control(
        "spot_request_set",
        json!({"instance": ahead.0, "code": "fulfilled"}),
    );
    e.cloud.control(
        "spot_request_set",
        json!({"instance": confirmed.0, "code": "marked-for-termination"}),
    );
    e.cloud.control(
        "spot_request_set",
        json!({"instance": unreadable.0, "code": "marked-for-termination"}),
    );

    for (n, what, (instance, node), time, denied, why) in [
        (
            0,
            "1970, no Spot request",
            old,
            epoch,
            false,
            "no Spot request for the instance",
        ),
        (
            1,
            "a day ahead, request fulfilled",
            ahead,
            Utc::now() + chrono::Duration::days(1),
            false,
            "Spot request fulfilled",
        ),
        (
            3,
            "1970, marked for termination but unreadable",
            unreadable,
            epoch,
            true,
            "the Spot request could not be read",
        ),
    ] {
        if denied {
            e.cloud.faults(
                Faults::new().aws(
                    AwsFaults::new(1.0)
                        .kinds(&[AwsFault::AccessDenied])
                        .operations(&["ec2:DescribeSpotInstanceRequests"]),
                ),
            );
        }
        let out = e
            .handle(&event(
                "spot-interruption-warning.json",
                instance,
                time,
                None,
            ))
            .await;
        e.cloud.clear_faults();
        let o = &out["outcomes"][0];
        assert_eq!(o["action"], "draining", "{what}: {out}");
        let reason = o["reason"].as_str().unwrap();
        assert!(
            reason.contains("PDBs are honoured throughout, no pod is deleted")
                && reason.contains(why),
            "{what}: {reason}"
        );
        assert_eq!(o["details"]["forceAt"], Value::Null, "{what}: {out}");
        assert_eq!(o["details"]["remaining"], 1, "{what}: {out}");
        let s = e.kube.state();
        assert_eq!(s.node(node).unwrap()["spec"]["unschedulable"], true);
        assert_eq!(taint(&s, node).as_deref(), Some("SpotInterruption"));
        let (web, db) = (format!("web-{n}"), format!("db-{n}"));
        assert_eq!(evictions(&s, &web), 1, "{what}");
        assert!(s.pod("default", &web).is_none(), "{what}: {web} evicted");
        assert!(evictions(&s, &db) >= 1, "{what}: eviction of {db} tried");
        assert_eq!(pod_deletions(&s, &db), 0, "{what}: {db} never deleted");
        assert!(s.pod("default", &db).is_some(), "{what}: {db} still there");
    }

    // Confirmed by EC2: today's deadline, counted from the handling.
    let (instance, node) = confirmed;
    let started = Utc::now();
    let out = e
        .handle(&event(
            "spot-interruption-warning.json",
            instance,
            epoch,
            None,
        ))
        .await;
    let o = &out["outcomes"][0];
    assert_eq!(o["action"], "drained", "{out}");
    assert!(
        o["reason"]
            .as_str()
            .unwrap()
            .contains("EC2 confirms it (Spot request marked-for-termination)"),
        "{out}"
    );
    let force_at: DateTime<Utc> = serde_json::from_value(o["details"]["forceAt"].clone()).unwrap();
    assert!(force_at >= started + chrono::Duration::seconds(2), "{out}");
    let s = e.kube.state();
    assert_eq!(evictions(&s, "web-2"), 1);
    assert_eq!(
        pod_deletions(&s, "db-2"),
        1,
        "the PDB-held pod deleted once"
    );
    let deleted = s.requests_to("DELETE", "/api/v1/namespaces/default/pods/db-2")[0]
        .time
        .parse::<DateTime<Utc>>()
        .unwrap();
    assert!(
        deleted >= started + chrono::Duration::seconds(1),
        "PDB honoured until forceAt: deleted {deleted}, handled from {started}"
    );
    assert!(s.pods_on(node).is_empty());
    // The unconfirmed ones still hold their PDB-protected pods.
    for db in ["db-0", "db-1", "db-3"] {
        assert!(s.pod("default", db).is_some(), "{db}");
    }
}

/// The *Interruption Handled* events the capture queue received since the last call.
fn handled_events(e: &Env) -> Vec<Value> {
    support::delivered(&e.cloud, "interruptions")
        .into_iter()
        .filter(|v| v["detail-type"] == "Interruption Handled")
        .collect()
}

async fn outbox_len(e: &Env) -> usize {
    nodecycle::state::Repository::new(e.table.clone())
        .pool("prod/general")
        .await
        .unwrap()
        .map_or(0, |r| r.outbox.len())
}

/// *Interruption Handled* reaches the bus once per handled event, however often EventBridge
/// delivers it; a put the bus refuses waits in the pool record's outbox and the rotator's
/// sweep puts it later, once.
#[tokio::test]
async fn interruption_handled_is_put_once_and_a_refused_put_waits_for_the_sweep() {
    let e = env(2).await;
    // The pool has a record (the ami-watcher resolved it).
    let now = Utc::now();
    nodecycle::state::Repository::new(e.table.clone())
        .update_pool(
            "prod/general",
            |r| nodecycle::state::PoolRecord {
                kubernetes_version: Some("1.30".into()),
                ..r.clone()
            },
            |before, after| nodecycle::announce::stage::stage_pool(before, after, now),
        )
        .await
        .unwrap();
    support::capture(&e.cloud, "interruptions").await;
    let (first, _) = e.nodes[0].clone();
    let ev = event(
        "spot-interruption-warning.json",
        &first,
        Utc::now(),
        Some("spot-1"),
    );
    // Delivered twice at once, then once more.
    let _ = tokio::join!(e.handle(&ev), e.handle(&ev));
    e.handle(&ev).await;
    let got = handled_events(&e);
    assert_eq!(got.len(), 1, "{got:#?}");
    assert_eq!(got[0]["detail"]["instance"], first.as_str());
    assert_eq!(got[0]["detail"]["sourceEventId"], "spot-1");
    assert_eq!(outbox_len(&e).await, 0, "put and removed");

    // The bus refuses every put: the event waits in the outbox.
    e.cloud.faults(
        Faults::new().seed(3).aws(
            AwsFaults::new(1.0)
                .kinds(&[AwsFault::Http500])
                .operations(&["events:PutEvents"]),
        ),
    );
    let (second, _) = e.nodes[1].clone();
    let out = e
        .handle(&event(
            "spot-interruption-warning.json",
            &second,
            Utc::now(),
            Some("spot-2"),
        ))
        .await;
    assert_eq!(out["outcomes"][0]["action"], "drained", "{out}");
    assert!(handled_events(&e).is_empty());
    assert_eq!(outbox_len(&e).await, 1);

    // The bus is back: the rotator's sweep (events two minutes old) puts it, once.
    e.cloud.clear_faults();
    let announce = e.adapters.announce(e.table.clone());
    for _ in 0..2 {
        let record = nodecycle::state::Repository::new(e.table.clone())
            .pool("prod/general")
            .await
            .unwrap();
        announce
            .sweep_pool(
                "prod/general",
                record.as_ref(),
                &mut Default::default(),
                Utc::now() + chrono::Duration::minutes(3),
            )
            .await;
    }
    let got = handled_events(&e);
    assert_eq!(got.len(), 1, "{got:#?}");
    assert_eq!(got[0]["detail"]["instance"], second.as_str());
    assert_eq!(outbox_len(&e).await, 0);
}

#[tokio::test]
async fn duplicates_never_drain_twice() {
    let e = env(1).await;
    let (instance, node) = e.nodes[0].clone();
    e.web_pods(&node, &["web-a"], 1);
    let ev = event(
        "spot-interruption-warning.json",
        &instance,
        Utc::now(),
        Some("dup-1"),
    );
    // Three deliveries of the same event at once.
    let (a, b, c) = tokio::join!(e.handle(&ev), e.handle(&ev), e.handle(&ev));
    let outs = [a, b, c];
    let drained = outs
        .iter()
        .filter(|o| o["outcomes"][0]["action"] == "drained")
        .count();
    let dups = outs.iter().filter(|o| o["decision"] == "duplicate").count();
    assert_eq!((drained, dups), (1, 2), "{outs:?}");
    // Three more, one after the other, including a redelivery under a new id.
    for id in ["dup-1", "dup-1", "dup-2"] {
        let ev = event(
            "spot-interruption-warning.json",
            &instance,
            Utc::now(),
            Some(id),
        );
        let out = e.handle(&ev).await;
        if id == "dup-2" {
            assert_eq!(out["outcomes"][0]["action"], "skipped", "{out}");
        } else {
            assert_eq!(out["decision"], "duplicate", "{out}");
        }
    }
    let s = e.kube.state();
    assert_eq!(node_patches(&s, &node), 1, "cordoned once");
    assert_eq!(evictions(&s, "web-a"), 1, "evicted once");
    assert_eq!(e.items("EVT#").await.len(), 2, "drained + skipped");
}

#[tokio::test]
async fn warning_then_state_changes_drain_once_then_remove_the_node_and_close_the_rotation() {
    let e = env(2).await;
    let (instance, node) = e.nodes[0].clone();
    e.web_pods(&node, &["web-a"], 1);
    // A rotation of this instance is in flight (the rotator was replacing it).
    let rot = Rotation {
        step: Step::Draining,
        ..Rotation::new(
            "prod/general",
            &instance,
            RotationReason::Drifted,
            false,
            Utc::now(),
        )
    };
    e.table
        .put(
            "POOL#prod/general",
            &format!("ROT#{instance}"),
            &serde_json::to_value(&rot).unwrap(),
            None,
            None,
        )
        .await
        .unwrap();

    let out = e
        .handle(&event(
            "spot-interruption-warning.json",
            &instance,
            Utc::now(),
            None,
        ))
        .await;
    assert_eq!(out["outcomes"][0]["action"], "drained", "{out}");
    // The instance stops (instance-action stop) then shuts down: no second drain. EC2 says
    // so too (a state change EC2 does not confirm is refused).
    e.adapters
        .clients
        .ec2
        .stop_instances()
        .instance_ids(&instance)
        .send()
        .await
        .unwrap();
    let mut stopping = event(
        "instance-state-change.json",
        &instance,
        Utc::now(),
        Some("sc-1"),
    );
    stopping["detail"]["state"] = json!("stopping");
    let out = e.handle(&stopping).await;
    assert_eq!(out["outcomes"][0]["action"], "skipped", "{out}");
    let s = e.kube.state();
    assert_eq!(node_patches(&s, &node), 1);
    assert_eq!(evictions(&s, "web-a"), 1);

    e.adapters
        .clients
        .ec2
        .terminate_instances()
        .instance_ids(&instance)
        .send()
        .await
        .unwrap();
    let out = e
        .handle(&event(
            "instance-state-change.json",
            &instance,
            Utc::now(),
            Some("sc-2"),
        ))
        .await;
    assert_eq!(out["outcomes"][0]["action"], "nodeDeleted", "{out}");
    assert!(e.kube.state().node(&node).is_none());
    assert!(e.kube.state().node(&e.nodes[1].1).is_some());
    assert_eq!(e.rotation(&instance).await.unwrap().step, Step::Done);
    // terminated follows: nothing left to do.
    let mut terminated = event(
        "instance-state-change.json",
        &instance,
        Utc::now(),
        Some("sc-3"),
    );
    terminated["detail"]["state"] = json!("terminated");
    let out = e.handle(&terminated).await;
    assert_eq!(out["outcomes"][0]["action"], "skipped", "{out}");
    // running / pending are no-ops without any lookup.
    let mut running = event(
        "instance-state-change.json",
        &instance,
        Utc::now(),
        Some("sc-4"),
    );
    running["detail"]["state"] = json!("running");
    assert_eq!(e.handle(&running).await["decision"], "ignored");
    let s = e.kube.state();
    assert_eq!(
        s.requests_to("DELETE", &format!("/api/v1/nodes/{node}"))
            .len(),
        1
    );
    assert_eq!(e.items("EVT#").await.len(), 4);
}

#[tokio::test]
async fn instances_of_other_clusters_and_unknown_instances_are_ignored_quietly() {
    let e = env(1).await;
    let run = e
        .adapters
        .clients
        .ec2
        .run_instances()
        .image_id(&e.image)
        .min_count(1)
        .max_count(1)
        .tag_specifications(
            aws_sdk_ec2::types::TagSpecification::builder()
                .resource_type(aws_sdk_ec2::types::ResourceType::Instance)
                .tags(
                    aws_sdk_ec2::types::Tag::builder()
                        .key("eks:cluster-name")
                        .value("dev")
                        .build(),
                )
                .tags(
                    aws_sdk_ec2::types::Tag::builder()
                        .key("aws:autoscaling:groupName")
                        .value("prod-general")
                        .build(),
                )
                .build(),
        )
        .send()
        .await
        .unwrap();
    let other = run.instances()[0].instance_id().unwrap().to_string();
    // The committed variant: a warning for an instance of cluster dev.
    let path = nodecycle_tests::repo_path("events/spot-interruption-warning-other-cluster.json");
    let sample: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let sample_id = sample["detail"]["instance-id"]
        .as_str()
        .unwrap()
        .to_string();
    let ev: Value = serde_json::from_str(
        &serde_json::to_string(&sample)
            .unwrap()
            .replace(&sample_id, &other),
    )
    .unwrap();
    let out = e.handle(&ev).await;
    assert_eq!(out["outcomes"][0]["action"], "ignored", "{out}");
    assert!(
        out["outcomes"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("cluster dev")
    );
    // An instance EC2 does not know (another account's or long gone), every kind.
    for file in [
        "spot-interruption-warning.json",
        "rebalance-recommendation.json",
        "instance-state-change.json",
        "health-scheduled-change.json",
    ] {
        let out = e
            .handle(&event(file, "i-0aaaaaaaaaaaaaaaa", Utc::now(), None))
            .await;
        assert_eq!(out["outcomes"][0]["action"], "ignored", "{file}: {out}");
    }
    // A lifecycle action of an unmanaged group, naming an instance EC2 has in another group:
    // refused before the pool is looked for.
    let mut lca = event(
        "asg-terminate-lifecycle-action.json",
        &other,
        Utc::now(),
        None,
    );
    lca["detail"]["AutoScalingGroupName"] = json!("dev-general");
    let out = e.handle(&lca).await;
    assert_eq!(out["decision"], "refused", "{out}");
    assert!(
        out["reason"]
            .as_str()
            .unwrap()
            .contains("is in group \"prod-general\", not in \"dev-general\""),
        "{out}"
    );
    assert!(e.lifecycle.calls().is_empty());
    // Nothing touched, nothing recorded under the pool.
    let s = e.kube.state();
    assert!(
        s.requests.iter().all(|r| r.method == "GET"),
        "{:?}",
        s.requests
    );
    assert!(e.items("").await.is_empty());
}

#[tokio::test]
async fn unknown_events_are_no_ops_and_malformed_ones_are_rejected_without_state() {
    let e = env(1).await;
    let (instance, _) = e.nodes[0].clone();
    let mut unknown = event(
        "spot-interruption-warning.json",
        &instance,
        Utc::now(),
        Some("u-1"),
    );
    unknown["detail-type"] = json!("EC2 Fleet Spot Instance Request Change");
    let out = e.handle(&unknown).await;
    assert_eq!(out["decision"], "ignored", "{out}");
    let param = event(
        "parameter-store-change.json",
        "i-0aaaaaaaaaaaaaaaa",
        Utc::now(),
        None,
    );
    assert_eq!(e.handle(&param).await["decision"], "ignored");

    let mut bad = event(
        "spot-interruption-warning.json",
        &instance,
        Utc::now(),
        Some("bad-1"),
    );
    bad["detail"].as_object_mut().unwrap().remove("instance-id");
    let err = e.try_handle(&bad).await.unwrap_err();
    assert_eq!(err.error_type, "InvalidEvent");
    assert!(
        err.message.contains("detail.instance-id"),
        "{}",
        err.message
    );
    let mut bad_time = event(
        "health-scheduled-change.json",
        &instance,
        Utc::now(),
        Some("bad-2"),
    );
    bad_time["detail"]["startTime"] = json!("soon");
    let err = e.try_handle(&bad_time).await.unwrap_err();
    assert_eq!(err.error_type, "InvalidEvent");
    assert!(err.message.contains("detail.startTime"), "{}", err.message);

    for id in ["u-1", "bad-1", "bad-2"] {
        assert!(
            e.table
                .get(&format!("EVENT#{id}"), "EVENT")
                .await
                .unwrap()
                .is_none(),
            "{id}"
        );
    }
    assert!(e.items("").await.is_empty());
    assert!(e.kube.state().requests.is_empty());
}

#[tokio::test]
async fn rebalance_follows_the_pool_policy() {
    let e = env(3).await;
    let now = Utc::now();
    // ignore (default): recorded only.
    let (i0, n0) = e.nodes[0].clone();
    let out = e
        .handle(&event("rebalance-recommendation.json", &i0, now, None))
        .await;
    assert_eq!(out["outcomes"][0]["action"], "recorded", "{out}");
    assert_eq!(node_patches(&e.kube.state(), &n0), 0);

    // cordon.
    e.cloud.put_parameter(POLICY, &policy_text("cordon"));
    let (i1, n1) = e.nodes[1].clone();
    let out = e
        .handle(&event("rebalance-recommendation.json", &i1, now, None))
        .await;
    assert_eq!(out["outcomes"][0]["action"], "cordoned", "{out}");
    let s = e.kube.state();
    assert_eq!(s.node(&n1).unwrap()["spec"]["unschedulable"], true);
    assert_eq!(taint(&s, &n1).as_deref(), Some("RebalanceRecommendation"));
    assert!(s.requests.iter().all(|r| !r.path.ends_with("/eviction")));

    // replace: a forced Interrupted rotation, Pending, for the rotator.
    e.cloud.put_parameter(POLICY, &policy_text("replace"));
    let (i2, n2) = e.nodes[2].clone();
    let out = e
        .handle(&event("rebalance-recommendation.json", &i2, now, None))
        .await;
    assert_eq!(out["outcomes"][0]["action"], "rotationRecorded", "{out}");
    let r = e.rotation(&i2).await.unwrap();
    assert_eq!(
        (r.reason, r.step, r.forced, r.pool.as_str()),
        (
            RotationReason::Interrupted,
            Step::Pending,
            true,
            "prod/general"
        )
    );
    assert_eq!(
        node_patches(&e.kube.state(), &n2),
        0,
        "the rotator surges first"
    );
    // A second recommendation (new event id) changes nothing.
    let out = e
        .handle(&event("rebalance-recommendation.json", &i2, now, None))
        .await;
    assert_eq!(out["outcomes"][0]["action"], "skipped", "{out}");
    assert_eq!(e.items("ROT#").await.len(), 1);
    assert_eq!(e.items("EVT#").await.len(), 4);
}

#[tokio::test]
async fn health_scheduled_change_records_a_maintenance_rotation_with_the_deadline() {
    let e = env(2).await;
    let (instance, node) = e.nodes[1].clone();
    let ev = event(
        "health-scheduled-change.json",
        &instance,
        Utc::now(),
        Some("h-1"),
    );
    let out = e.handle(&ev).await;
    assert_eq!(out["kind"], "ScheduledMaintenance");
    assert_eq!(out["outcomes"][0]["action"], "rotationRecorded", "{out}");
    let r = e.rotation(&instance).await.unwrap();
    assert_eq!(r.reason, RotationReason::Maintenance);
    assert_eq!(r.step, Step::Pending);
    assert!(
        !r.forced,
        "within budgets until 30 minutes before the deadline"
    );
    assert_eq!(
        r.deadline.unwrap().to_rfc3339(),
        "2026-12-05T15:10:09+00:00"
    );
    // Redelivery: duplicate; the same change under another id: the rotation is already there.
    assert_eq!(e.handle(&ev).await["decision"], "duplicate");
    let mut again = ev.clone();
    again["id"] = json!("h-2");
    let out = e.handle(&again).await;
    assert_eq!(out["outcomes"][0]["action"], "skipped", "{out}");
    assert_eq!(node_patches(&e.kube.state(), &node), 0);
}

#[tokio::test]
async fn lifecycle_hook_completes_only_after_the_pods_are_gone_with_heartbeats_meanwhile() {
    let e = env(3).await;
    let (instance, node) = e.nodes[0].clone();
    *e.lifecycle.node.lock().unwrap() = Some(node.clone());
    e.web_pods(&node, &["web-a", "web-b"], 2);
    let ev = event(
        "asg-terminate-lifecycle-action.json",
        &instance,
        Utc::now(),
        Some("l-1"),
    );
    let out = e.handle(&ev).await;
    assert_eq!(out["kind"], "TerminateLifecycleAction");
    assert_eq!(out["outcomes"][0]["action"], "completed", "{out}");
    let calls = e.lifecycle.calls();
    let ops: Vec<&str> = calls.iter().map(|c| c.op).collect();
    assert!(ops.len() >= 2, "{calls:?}");
    assert_eq!(ops.last(), Some(&"complete"), "{calls:?}");
    assert_eq!(ops.iter().filter(|o| **o == "complete").count(), 1);
    assert!(ops[..ops.len() - 1].iter().all(|o| *o == "heartbeat"));
    // Heartbeats go out while pods are still leaving (a pod may finish terminating between
    // the drain step and the heartbeat it decided on, so only the first is checked).
    let first = calls.iter().find(|c| c.op == "heartbeat").unwrap();
    assert!(first.pods_left > 0, "heartbeat while draining: {calls:?}");
    assert_eq!(
        calls.last().unwrap().pods_left,
        0,
        "completed once pods were gone"
    );
    assert!(calls.iter().all(|c| c.instance == instance));
    let s = e.kube.state();
    assert_eq!(taint(&s, &node).as_deref(), Some("Terminating"));
    assert_eq!(evictions(&s, "web-a"), 1);

    // Redelivered: nothing more.
    assert_eq!(e.handle(&ev).await["decision"], "duplicate");
    assert_eq!(e.lifecycle.calls().len(), calls.len());

    // No node for the instance: CONTINUE at once.
    let (i1, n1) = e.nodes[1].clone();
    e.kube.delete_node(&n1);
    let out = e
        .handle(&event(
            "asg-terminate-lifecycle-action.json",
            &i1,
            Utc::now(),
            None,
        ))
        .await;
    assert_eq!(out["outcomes"][0]["action"], "completed", "{out}");
    assert!(
        out["outcomes"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("no Kubernetes node")
    );

    // Drained by a Spot warning before: CONTINUE at once, no second drain.
    let (i2, n2) = e.nodes[2].clone();
    e.web_pods(&n2, &["web-c"], 1);
    e.handle(&event(
        "spot-interruption-warning.json",
        &i2,
        Utc::now(),
        None,
    ))
    .await;
    let before = e.kube.state().requests.len();
    let out = e
        .handle(&event(
            "asg-terminate-lifecycle-action.json",
            &i2,
            Utc::now(),
            None,
        ))
        .await;
    assert_eq!(out["outcomes"][0]["action"], "completed", "{out}");
    assert!(
        out["outcomes"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("already drained")
    );
    assert_eq!(e.kube.state().requests.len(), before, "no Kubernetes call");
    let completes: Vec<String> = e
        .lifecycle
        .calls()
        .iter()
        .filter(|c| c.op == "complete")
        .map(|c| c.instance.clone())
        .collect();
    assert_eq!(completes, vec![instance, i1, i2]);
}

#[tokio::test]
async fn lifecycle_drain_longer_than_the_invocation_is_handed_to_the_rotator() {
    let e = env(1).await;
    let (instance, node) = e.nodes[0].clone();
    e.web_pods(&node, &["web-a"], 1);
    e.kube.add_pdb(
        PdbFixture::new("default", "web")
            .match_label("app", "web")
            .min_available(1),
    );
    let ev = event(
        "asg-terminate-lifecycle-action.json",
        &instance,
        Utc::now(),
        None,
    );
    // 12 s left: the drain (blocked by the PDB, grace period 1h) cannot finish.
    let out = e
        .handler
        .handle(
            &ev,
            Invocation::at(Utc::now(), Instant::now() + Duration::from_secs(12)),
        )
        .await
        .unwrap();
    assert_eq!(out["outcomes"][0]["action"], "handedOver", "{out}");
    let r = e.rotation(&instance).await.unwrap();
    assert_eq!((r.step, r.forced), (Step::Draining, true));
    assert!(r.drain.is_some());
    assert!(e.lifecycle.calls().iter().all(|c| c.op == "heartbeat"));
    // A tick while the rotator drains: heartbeat only.
    let out = e.handle(&json!({})).await;
    assert_eq!(out["outcomes"][0]["action"], "heartbeat", "{out}");
    // The rotator finished the drain and terminated it: the tick completes the action.
    let mut drain = r.drain.clone().unwrap();
    drain["done"] = json!(true);
    let done = Rotation {
        step: Step::Done,
        drain: Some(drain),
        ..r
    };
    let v = e
        .table
        .get("POOL#prod/general", &format!("ROT#{instance}"))
        .await
        .unwrap()
        .unwrap();
    e.table
        .put(
            "POOL#prod/general",
            &format!("ROT#{instance}"),
            &serde_json::to_value(&done).unwrap(),
            Some(v.version),
            None,
        )
        .await
        .unwrap();
    let out = e.handle(&json!({})).await;
    assert_eq!(out["outcomes"][0]["action"], "completed", "{out}");
    let out = e.handle(&json!({})).await;
    assert_eq!(
        out["outcomes"].as_array().unwrap().len(),
        0,
        "closed: {out}"
    );
    assert_eq!(
        e.lifecycle
            .calls()
            .iter()
            .filter(|c| c.op == "complete")
            .count(),
        1
    );
}

/// The `nodecycle` binary next to this test (debug or, with `NODECYCLE_BIN`, any build).
fn nodecycle_bin() -> Option<std::path::PathBuf> {
    if let Ok(p) = std::env::var("NODECYCLE_BIN") {
        return Some(p.into());
    }
    let exe = std::env::current_exe().ok()?;
    let path = exe.parent()?.parent()?.join("nodecycle");
    path.exists().then_some(path)
}

fn write_event(dir: &std::path::Path, name: &str, v: &Value) -> String {
    std::fs::create_dir_all(dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, serde_json::to_string_pretty(v).unwrap()).unwrap();
    path.to_string_lossy().into_owned()
}

fn run_cli(e: &Env, event_file: &str) -> std::process::Output {
    std::process::Command::new(nodecycle_bin().unwrap())
        .args(["run", "interruption-handler", "--event", event_file])
        .env_remove("AWS_PROFILE")
        .envs(e.cloud.env_vars())
        .env("NODECYCLE_TABLE", "nodecycle")
        .env("NODECYCLE_LOG", "warn")
        .output()
        .unwrap()
}

/// Held-out events go through `nodecycle run interruption-handler --event <FILE>`: the same
/// handler as the Lambda, real adapters (lifecycle actions: the fake cloud's patched Auto Scaling).
#[tokio::test]
async fn nodecycle_run_interruption_handler_acts_on_event_files() {
    let Some(_) = nodecycle_bin() else {
        eprintln!("nodecycle binary not built (cargo build -p ops); skipping");
        return;
    };
    let e = env(3).await;
    let (instance, node) = e.nodes[0].clone();
    e.web_pods(&node, &["web-a"], 1);
    let dir = std::env::temp_dir().join(format!("nodecycle-interruption-{}", std::process::id()));
    let warning = write_event(
        &dir,
        "warning.json",
        &event(
            "spot-interruption-warning.json",
            &instance,
            Utc::now(),
            None,
        ),
    );
    let out = run_cli(&e, &warning);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["outcomes"][0]["action"], "drained", "{v}");
    let s = e.kube.state();
    assert_eq!(taint(&s, &node).as_deref(), Some("SpotInterruption"));
    assert!(s.pods_on(&node).is_empty());
    // Redelivered: a duplicate, exit 0.
    let out = run_cli(&e, &warning);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["decision"], "duplicate", "{v}");
    // Malformed: InvalidEvent, exit 1.
    let mut bad = event(
        "spot-interruption-warning.json",
        &instance,
        Utc::now(),
        None,
    );
    bad["detail"]["instance-id"] = json!(42);
    let out = run_cli(&e, &write_event(&dir, "bad.json", &bad));
    assert_eq!(out.status.code(), Some(1));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["errorType"], "InvalidEvent", "{v}");
    // Health scheduled change through the CLI.
    let (other, _) = e.nodes[1].clone();
    let health = write_event(
        &dir,
        "health.json",
        &event("health-scheduled-change.json", &other, Utc::now(), None),
    );
    let out = run_cli(&e, &health);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["outcomes"][0]["action"], "rotationRecorded", "{v}");
    assert_eq!(
        e.rotation(&other).await.unwrap().reason,
        RotationReason::Maintenance
    );
    // Terminate lifecycle action through the real Auto Scaling adapter (moto, patched): the
    // group's terminating hook holds the instance in Terminating:Wait, as a scale-in does.
    let (third, third_node) = e.nodes[2].clone();
    e.web_pods(&third_node, &["web-z"], 1);
    e.adapters
        .clients
        .autoscaling
        .put_lifecycle_hook()
        .auto_scaling_group_name("prod-general")
        .lifecycle_hook_name("nodecycle-drain")
        .lifecycle_transition("autoscaling:EC2_INSTANCE_TERMINATING")
        .heartbeat_timeout(300)
        .send()
        .await
        .unwrap();
    e.cloud.lifecycle_wait(
        "prod-general",
        "nodecycle-drain",
        &third,
        Some("87654321-4321-4321-4321-210987654321"),
    );
    let lca = write_event(
        &dir,
        "lca.json",
        &event(
            "asg-terminate-lifecycle-action.json",
            &third,
            Utc::now(),
            None,
        ),
    );
    let out = run_cli(&e, &lca);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["outcomes"][0]["action"], "completed", "{v}");
    assert!(e.kube.state().pods_on(&third_node).is_empty());
    let calls = e.cloud.control("lifecycle_actions", json!({}))["calls"].clone();
    let completes: Vec<&Value> = calls
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["action"] == "CompleteLifecycleAction")
        .collect();
    assert_eq!(completes.len(), 1, "{calls}");
    assert!(completes[0].get("error").is_none(), "accepted: {calls}");
    assert_eq!(completes[0]["instance"], third.as_str());
    assert_eq!(completes[0]["result"], "CONTINUE");
    assert_eq!(
        completes[0]["token"],
        "87654321-4321-4321-4321-210987654321"
    );
    // Completed: the termination went on, the instance left the group.
    let left = e.adapters.group_instances("prod-general").await;
    assert!(left.iter().all(|(id, _)| *id != third), "{left:?}");
    // The adapter treats an action that is no longer active as done, not as an error.
    let adapter =
        nodecycle::aws::instances::LifecycleActions::new(e.adapters.clients.autoscaling.clone());
    let action = LifecycleAction {
        group: "prod-general".into(),
        hook: "nodecycle-drain".into(),
        token: None,
        instance_id: third.clone(),
    };
    let again = adapter.complete_continue(&action).await.unwrap();
    assert!(!again, "no active lifecycle action any more");
    assert!(adapter.heartbeat(&action).await.is_ok_and(|active| !active));
}

fn first_cordon_ts(e: &Env, node: &str) -> Option<f64> {
    let v = e.cloud.control(
        "kube_requests",
        json!({"cluster": "prod", "region": "us-east-2"}),
    );
    v["requests"]
        .as_array()?
        .iter()
        .find(|r| r["method"] == "PATCH" && r["path"] == format!("/api/v1/nodes/{node}").as_str())
        .and_then(|r| r["ts"].as_f64())
}

fn epoch(t: std::time::SystemTime) -> f64 {
    t.duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// Benchmark, not an assertion: process start of `nodecycle run interruption-handler --event
/// <spot warning>` to the cordon request reaching the stand-in (cold: a new process each time),
/// and handler call to cordon in a process that already handled one event (warm: clients and
/// connections reused, as in a warm Lambda). Run with
/// `cargo test -p nodecycle-tests --test interruption -- --ignored --nocapture bench`
/// (`NODECYCLE_BIN=target/release/nodecycle` for the release build).
#[tokio::test]
#[ignore = "benchmark"]
async fn bench_spot_warning_to_cordon() {
    let e = env(8).await;
    let dir = std::env::temp_dir().join(format!("nodecycle-bench-{}", std::process::id()));
    let mut cold = Vec::new();
    for (i, (instance, node)) in e.nodes[..4].iter().enumerate() {
        let file = write_event(
            &dir,
            &format!("w{i}.json"),
            &event("spot-interruption-warning.json", instance, Utc::now(), None),
        );
        let start = epoch(std::time::SystemTime::now());
        let out = run_cli(&e, &file);
        assert_eq!(out.status.code(), Some(0));
        let ts = first_cordon_ts(&e, node).unwrap();
        cold.push((ts - start) * 1000.0);
    }
    // Warm: one handler object; the first event warms it, the others are measured.
    let mut warm = Vec::new();
    for (instance, node) in &e.nodes[4..] {
        let ev = event("spot-interruption-warning.json", instance, Utc::now(), None);
        let start = epoch(std::time::SystemTime::now());
        e.handle(&ev).await;
        let ts = first_cordon_ts(&e, node).unwrap();
        warm.push((ts - start) * 1000.0);
    }
    eprintln!(
        "BENCH spot warning -> cordon: cold (process start) ms {cold:.1?}; warm (in-process, first one warms) ms {warm:.1?}"
    );
}

/// Writes `rotation` as the instance's rotation record (over whatever is there).
async fn seed_rotation(e: &Env, rotation: &Rotation) {
    let sk = format!("ROT#{}", rotation.instance_id);
    let current = e.table.get("POOL#prod/general", &sk).await.unwrap();
    e.table
        .put(
            "POOL#prod/general",
            &sk,
            &serde_json::to_value(rotation).unwrap(),
            current.map(|v| v.version),
            None,
        )
        .await
        .unwrap();
}

/// A drain handed over to the rotator is never swallowed by a record already there for the
/// instance (a stale failed rotation, a maintenance rotation waiting for budget): the record
/// becomes the draining rotation, and the lifecycle action completes only once it drained.
#[tokio::test]
async fn a_hand_over_replaces_a_stale_or_waiting_rotation_of_the_instance() {
    for seeded in ["failed", "waiting maintenance"] {
        let e = env(1).await;
        let (instance, node) = e.nodes[0].clone();
        e.web_pods(&node, &["web-a"], 1);
        e.kube.add_pdb(
            PdbFixture::new("default", "web")
                .match_label("app", "web")
                .min_available(1),
        );
        let earlier = Utc::now() - chrono::Duration::hours(2);
        let record = match seeded {
            "failed" => Rotation::new(
                "prod/general",
                &instance,
                RotationReason::Drifted,
                false,
                earlier,
            )
            .enter(Step::Failed, earlier),
            _ => Rotation {
                deadline: Some(Utc::now() + chrono::Duration::days(5)),
                ..Rotation::new(
                    "prod/general",
                    &instance,
                    RotationReason::Maintenance,
                    false,
                    earlier,
                )
            },
        };
        seed_rotation(&e, &record).await;
        let ev = event(
            "asg-terminate-lifecycle-action.json",
            &instance,
            Utc::now(),
            None,
        );
        let out = e
            .handler
            .handle(
                &ev,
                Invocation::at(Utc::now(), Instant::now() + Duration::from_secs(12)),
            )
            .await
            .unwrap();
        assert_eq!(
            out["outcomes"][0]["action"], "handedOver",
            "{seeded}: {out}"
        );
        let r = e.rotation(&instance).await.unwrap();
        assert_eq!(
            (r.step, r.reason),
            (Step::Draining, RotationReason::Interrupted),
            "{seeded}: the hand-over was swallowed: {r:?}"
        );
        assert!(r.drain.is_some(), "{seeded}");
        // The rotation is closed as Done without having drained (e.g. its instance left):
        // the pods are still there, so the lifecycle action is not completed.
        let closed = Rotation {
            drain: None,
            ..r.enter(Step::Done, Utc::now())
        };
        seed_rotation(&e, &closed).await;
        let out = e.handle(&json!({})).await;
        assert_eq!(out["outcomes"][0]["action"], "heartbeat", "{seeded}: {out}");
        assert!(
            e.lifecycle.calls().iter().all(|c| c.op != "complete"),
            "{seeded}: completed with pods on the node: {:?}",
            e.lifecycle.calls()
        );
    }
}
