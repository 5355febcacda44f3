//! Node repair end to end (fake cloud + Kubernetes stand-in, real SDK, the real rotator): a
//! node whose kubelet stops posting status for 30 minutes is replaced with reason `Unhealthy`
//! (replacement first, drain under the PDBs), and half a pool going NotReady at once is an
//! outage, not nodes to replace: repair is suspended, once, and resumes when it recovers.
//! Times: the stand-in stamps conditions with the wall clock, so passes run at wall-clock
//! based instants.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use nodecycle::rotation::{Rotation, RotationReason, Step};
use nodecycle_tests::{KubeStandIn, PdbFixture, PodFixture, SyncNodes};
use support::pool::{Pool, golden_cloud};
use support::{Adapters, CapturedMetrics, capture, delivered};

const QUEUE: &str = "repair-events";

/// A 6-node pool on the newest image (nothing drifted), budget `nodes: "2"`, every event of
/// the bus captured and the rotator's metrics kept. `health.window` is one second (the tests
/// stall nodes a few seconds after they joined): a node that turns unhealthy within the
/// window of joining is evidence against its release (release health), not a node to repair.
async fn steady_pool() -> (Pool, Arc<CapturedMetrics>) {
    let (cloud, kube, old, new) = golden_cloud();
    let a = Adapters::new(&cloud).await;
    a.create_group("prod-general", &new, "m5.large", 6, 10, None)
        .await;
    kube.sync_nodes(SyncNodes {
        asg: Some("prod-general".into()),
        ..SyncNodes::default()
    });
    cloud.put_parameter(
        "/nodecycle/pools/prod/general",
        "cluster: prod\nname: general\nnodeGroup: { autoScalingGroup: prod-general }\narchitecture: x86_64\namiSelectorTerms:\n  - name: golden-*\n    owner: self\ndisruption:\n  budgets:\n    - nodes: \"2\"\nterminationGracePeriod: 1h\nhealth:\n  window: 1s\n",
    );
    let table = a.table("nodecycle").await;
    let policies = a.policies();
    let watcher = a.watcher(policies.clone(), table.clone());
    let mut rotator = a.rotator(&cloud, policies, table.clone()).await;
    let metrics = Arc::new(CapturedMetrics::default());
    rotator.metrics = metrics.clone();
    kube.wait_for("initial nodes", Duration::from_secs(30), |s| {
        (s.nodes.len() == 6).then_some(())
    });
    capture(&cloud, QUEUE).await;
    let p = Pool {
        cloud,
        kube,
        adapters: a,
        table,
        watcher,
        rotator,
        old,
        new,
    };
    (p, metrics)
}

/// Stops the kubelets of `instances` of group `prod-general` (the others post status again)
/// and waits until exactly those nodes are Ready `Unknown`.
fn stall(kube: &KubeStandIn, instances: &[String]) {
    stall_in(kube, Some("prod-general"), instances);
}

/// [`stall`] for the instances of group `asg`, or of every group of the cluster (`None`).
fn stall_in(kube: &KubeStandIn, asg: Option<&str>, instances: &[String]) {
    // Past the pool's health.window of joining.
    std::thread::sleep(Duration::from_secs(2));
    kube.sync_nodes(SyncNodes {
        asg: asg.map(str::to_string),
        stalled_instances: instances.to_vec(),
        ..SyncNodes::default()
    });
    let want = instances.len();
    kube.wait_for("stalled nodes", Duration::from_secs(30), |k| {
        let unknown = k
            .nodes
            .iter()
            .filter(|n| {
                n["status"]["conditions"].as_array().is_some_and(|c| {
                    c.iter()
                        .any(|c| c["type"] == "Ready" && c["status"] != "True")
                })
            })
            .count();
        (unknown == want).then_some(())
    });
}

fn repairs(rotations: &[Rotation]) -> Vec<&Rotation> {
    rotations
        .iter()
        .filter(|r| r.reason == RotationReason::Unhealthy)
        .collect()
}

fn kinds(events: &[serde_json::Value]) -> Vec<String> {
    events
        .iter()
        .map(|e| e["detail-type"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// One node NotReady for 30 minutes in a 6-node group: nothing before its duration; then one
/// pass starts its repair (reason `Unhealthy`, its domain recorded); the replacement is Ready
/// and claimed before the old node is cordoned; the drain evicts through the PDB (never a
/// delete before the deadline); the old instance is terminated; events `Rotation Started`
/// (reason `Unhealthy`) and `Node Repaired` (with the condition) go out.
#[tokio::test]
async fn a_node_not_ready_for_30_minutes_is_replaced_first_and_drained_under_its_pdb() {
    let (p, _metrics) = steady_pool().await;
    let t0 = Utc::now();
    p.watcher.handle(&serde_json::json!({}), t0).await.unwrap();
    p.pass(t0).await;
    let before = p.kube.state().node_instances();
    let (sick_node, sick) = before[2].clone();
    let (other_node, _) = before[4].clone();
    for (pod, node) in [("web-a", &sick_node), ("web-b", &other_node)] {
        p.kube.add_pod(
            PodFixture::new("default", pod)
                .node(node)
                .owner("ReplicaSet", "web-5d8f")
                .label("app", "web")
                .grace_seconds(1),
        );
    }
    p.kube.add_pdb(
        PdbFixture::new("default", "web")
            .match_label("app", "web")
            .min_available(1),
    );
    let stalled_at = Utc::now();
    stall(&p.kube, std::slice::from_ref(&sick));

    // Not yet: 20 minutes.
    p.pass(stalled_at + TimeDelta::minutes(20)).await;
    assert!(repairs(&p.rotations().await).is_empty(), "not due yet");

    // 31 minutes: one pass starts the repair of that node, and only that one.
    let mut now = stalled_at + TimeDelta::minutes(31);
    p.pass(now).await;
    let started = p.rotations().await;
    let r = repairs(&started);
    assert_eq!(r.len(), 1, "{started:?}");
    assert_eq!(r[0].instance_id, sick);
    assert_ne!(r[0].step, Step::Pending, "started in the same pass");
    let domain = r[0].repair.clone().expect("domain recorded");
    assert_eq!(domain.condition, "Ready");

    // Passes until it is done.
    let mut done = None;
    for _ in 0..20 {
        now += TimeDelta::minutes(1);
        p.pass(now).await;
        let rs = p.rotations().await;
        if let Some(r) = repairs(&rs).into_iter().find(|r| r.step.is_finished()) {
            done = Some(r.clone());
            break;
        }
    }
    let done = done.expect("the repair finished within 20 passes");
    assert_eq!(done.step, Step::Done, "{done:?}");
    let replacement = done
        .replacement
        .clone()
        .expect("a replacement claimed Ready");
    assert!(
        done.surge.is_some(),
        "replacement first: the group surged before the node was cordoned"
    );
    let state = p.kube.state();
    let evicted = state.requests_to("POST", "/api/v1/namespaces/default/pods/web-a/eviction");
    assert!(
        evicted.iter().any(|r| r.status < 300),
        "web-a evicted through the PDB: {evicted:?}"
    );
    assert!(
        state
            .requests_to("DELETE", "/api/v1/namespaces/default/pods/web-a")
            .is_empty(),
        "no delete before the drain's deadline"
    );
    assert!(
        state
            .requests_to("POST", "/api/v1/namespaces/default/pods/web-b/eviction")
            .is_empty(),
        "the healthy node's pod untouched"
    );
    let instances: Vec<String> = p
        .adapters
        .group_instances("prod-general")
        .await
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    assert!(!instances.contains(&sick), "the old instance is gone");
    assert!(instances.contains(&replacement));

    let events = delivered(&p.cloud, QUEUE);
    let of_sick: Vec<&serde_json::Value> = events
        .iter()
        .filter(|e| e["detail"]["instance"] == sick.as_str())
        .collect();
    assert!(
        of_sick.iter().any(|e| e["detail-type"] == "Rotation Started"
            && e["detail"]["reason"] == "Unhealthy"),
        "{:?}",
        kinds(&events)
    );
    let repaired: Vec<_> = of_sick
        .iter()
        .filter(|e| e["detail-type"] == "Node Repaired")
        .collect();
    assert_eq!(repaired.len(), 1, "{:?}", kinds(&events));
    assert_eq!(repaired[0]["detail"]["condition"], "Ready");
    assert!(
        !kinds(&events).iter().any(|k| k == "Rotation Finished"),
        "a repair finishes as Node Repaired"
    );
}

/// 3 of 6 nodes NotReady at once: no repair, `Repair Suspended` once over several passes,
/// `RepairSuspended` 1 and the record says why; when two of them recover (1 of 6 left), the
/// breaker closes and the last one is repaired.
#[tokio::test]
async fn half_a_pool_not_ready_suspends_repair_once_and_it_resumes_when_the_pool_recovers() {
    let (p, metrics) = steady_pool().await;
    let t0 = Utc::now();
    p.watcher.handle(&serde_json::json!({}), t0).await.unwrap();
    p.pass(t0).await;
    let ids: Vec<String> = p
        .kube
        .state()
        .node_instances()
        .into_iter()
        .map(|(_, i)| i)
        .collect();
    let stalled_at = Utc::now();
    stall(&p.kube, &ids[..3]);

    let mut now: DateTime<Utc> = stalled_at + TimeDelta::minutes(31);
    for _ in 0..3 {
        p.pass(now).await;
        now += TimeDelta::minutes(1);
    }
    assert!(
        repairs(&p.rotations().await).is_empty(),
        "an outage, not nodes"
    );
    let record = nodecycle::state::Repository::new(p.table.clone())
        .pool("prod/general")
        .await
        .unwrap()
        .expect("pool record");
    let why = record.repair_suspended.expect("suspended").message;
    assert!(why.contains("3 of 6"), "{why}");
    let events = delivered(&p.cloud, QUEUE);
    assert_eq!(
        kinds(&events)
            .iter()
            .filter(|k| *k == "Repair Suspended")
            .count(),
        1,
        "{:?}",
        kinds(&events)
    );
    assert!(metrics.cell_sum("RepairSuspended") >= 3.0);

    // Two recover: 1 of 6 unhealthy is a node again.
    stall(&p.kube, &ids[..1]);
    p.pass(now).await;
    let rs = p.rotations().await;
    let r = repairs(&rs);
    assert_eq!(r.len(), 1, "{rs:?}");
    assert_eq!(r[0].instance_id, ids[0]);
    let record = nodecycle::state::Repository::new(p.table.clone())
        .pool("prod/general")
        .await
        .unwrap()
        .expect("pool record");
    assert!(record.repair_suspended.is_none(), "resumed");
}

/// Nodes of a release the pool took minutes ago turn NotReady: that is evidence against the
/// release, not nodes to repair onto it. The release is quarantined and the pool rolls back in
/// the next pass; the stalled nodes (not Ready: no drift candidates) are repaired after their
/// 30 minutes onto the release the pool went back to, never onto the quarantined one.
#[tokio::test]
async fn nodes_of_a_new_release_turning_not_ready_indict_it_and_are_repaired_onto_the_old_one() {
    let p = support::pool::pool(6, "    - nodes: \"3\"\n", false).await;
    // The pool runs golden-1, then its terms take golden-2. The breaker is opened wide: this
    // test is about the release, not the outage rule.
    let policy = |image: &str| {
        format!(
            "cluster: prod\nname: general\nnodeGroup: {{ autoScalingGroup: prod-general }}\narchitecture: x86_64\namiSelectorTerms:\n  - name: {image}\n    owner: self\ndisruption:\n  budgets:\n    - nodes: \"3\"\nterminationGracePeriod: 1m\nrepair:\n  maxUnhealthy: \"100%\"\n"
        )
    };
    p.cloud
        .put_parameter("/nodecycle/pools/prod/general", &policy("golden-1"));
    let mut now = Utc::now();
    p.watcher.handle(&serde_json::json!({}), now).await.unwrap();
    p.pass(now).await;
    p.cloud
        .put_parameter("/nodecycle/pools/prod/general", &policy("golden-*"));
    now += TimeDelta::minutes(1);
    p.watcher.handle(&serde_json::json!({}), now).await.unwrap();
    let mut rolled = false;
    for _ in 0..60 {
        p.pass(now).await;
        now += TimeDelta::minutes(1);
        let images = p.images().await;
        if images.len() == 6
            && images.iter().all(|i| *i == p.new)
            && p.rotations().await.iter().all(|r| !r.in_flight())
        {
            rolled = true;
            break;
        }
    }
    assert!(rolled, "rolled onto {}: {:?}", p.new, p.images().await);

    let on_new: Vec<String> = p
        .adapters
        .group_instances("prod-general")
        .await
        .into_iter()
        .map(|(id, _)| id)
        .take(3)
        .collect();
    stall(&p.kube, &on_new);
    let stalled_real = Utc::now();
    let stalled_at = stalled_real.max(now);
    p.pass(stalled_at).await;
    let record = nodecycle::state::Repository::new(p.table.clone())
        .pool("prod/general")
        .await
        .unwrap()
        .expect("pool record");
    assert_eq!(
        record.desired.as_ref().map(|a| a.id.as_str()),
        Some(p.old.as_str()),
        "quarantined and rolled back in the pass"
    );
    assert!(repairs(&p.rotations().await).is_empty());

    let mut now = stalled_at;
    let mut back = false;
    for _ in 0..80 {
        now += TimeDelta::minutes(1);
        p.pass(now).await;
        let instances = p.adapters.group_instances("prod-general").await;
        if instances.len() == 6
            && instances.iter().all(|(_, image)| *image == p.old)
            && p.rotations().await.iter().all(|r| !r.in_flight())
        {
            back = true;
            break;
        }
    }
    let rotations = p.rotations().await;
    assert!(
        back,
        "every node back on {}: {:?} {rotations:?}",
        p.old,
        p.adapters.group_instances("prod-general").await
    );
    let repaired = repairs(&rotations);
    let mut ids: Vec<&str> = repaired.iter().map(|r| r.instance_id.as_str()).collect();
    ids.sort();
    let mut want: Vec<&str> = on_new.iter().map(String::as_str).collect();
    want.sort();
    assert_eq!(ids, want, "the stalled nodes were repaired");
    for r in &repaired {
        assert_eq!(r.target.as_deref(), Some(p.old.as_str()), "{r:?}");
        assert!(
            r.created_at >= stalled_real + TimeDelta::minutes(30),
            "after their 30 minutes: {r:?}"
        );
    }
}

/// EC2 status checks, read by the rotator itself (EventBridge may not deliver): an instance
/// whose status check is impaired is repaired within two passes although its node is Ready;
/// an event scheduled for another is recorded as a `Maintenance` rotation with the event's
/// start as deadline, as the interruption handler would; one `DescribeInstanceStatus` call a
/// pass (1,000 instances a page).
#[tokio::test]
async fn an_impaired_status_check_is_repaired_and_a_scheduled_event_recorded_without_eventbridge() {
    let (p, _metrics) = steady_pool().await;
    let now = Utc::now();
    p.watcher.handle(&serde_json::json!({}), now).await.unwrap();
    p.pass(now).await;
    let ids: Vec<String> = p
        .kube
        .state()
        .node_instances()
        .into_iter()
        .map(|(_, i)| i)
        .collect();
    let (impaired, scheduled) = (ids[1].clone(), ids[3].clone());
    let stamp = |t: DateTime<Utc>| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    p.cloud.control(
        "instance_status_set",
        serde_json::json!({
            "instance": impaired,
            "instance_check": {"status": "impaired", "since": stamp(now - TimeDelta::minutes(3))},
        }),
    );
    let reboot_at = now + TimeDelta::days(2);
    p.cloud.control(
        "instance_status_set",
        serde_json::json!({
            "instance": scheduled,
            "events": [{"code": "system-reboot", "not_before": stamp(reboot_at),
                        "description": "scheduled reboot"}],
        }),
    );
    let calls_before = p
        .cloud
        .control("instance_status_calls", serde_json::json!({}))["calls"]
        .as_array()
        .map_or(0, Vec::len);

    let mut repaired = None;
    for pass in 1..=2 {
        p.pass(now + TimeDelta::minutes(pass)).await;
        let rs = p.rotations().await;
        if let Some(r) = rs.iter().find(|r| r.instance_id == impaired) {
            repaired = Some((pass, r.clone()));
            break;
        }
    }
    let (pass, r) = repaired.expect("the impaired instance's repair started within two passes");
    assert_eq!(r.reason, RotationReason::Unhealthy);
    assert_eq!(
        r.repair.as_ref().map(|d| d.condition.as_str()),
        Some(nodecycle::fleet::EC2_STATUS_CHECK)
    );
    let rs = p.rotations().await;
    let m = rs
        .iter()
        .find(|r| r.instance_id == scheduled)
        .expect("a Maintenance rotation recorded for the scheduled event");
    assert_eq!(m.reason, RotationReason::Maintenance);
    assert_eq!(
        m.deadline.map(|d| d.timestamp()),
        Some(reboot_at.timestamp())
    );
    let calls = p
        .cloud
        .control("instance_status_calls", serde_json::json!({}))["calls"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let this_test = &calls[calls_before..];
    assert_eq!(
        this_test.len(),
        pass as usize,
        "one call a pass: {this_test:?}"
    );
    assert!(
        this_test
            .iter()
            .all(|c| c["maxResults"] == 1000 && c["ids"] == 0)
    );
}

/// Two managed node groups of one cluster, one NotReady node in each for 31 minutes: the group
/// with EKS node auto repair on (`nodeRepairConfig.enabled`) is left to EKS (no rotation), the
/// other is repaired by nodecycle as a self-managed group would be.
#[tokio::test]
async fn a_managed_node_group_with_eks_auto_repair_is_left_to_eks() {
    let (cloud, kube, _old, new) = golden_cloud();
    let a = Adapters::new(&cloud).await;
    let mut asgs = Vec::new();
    for (name, auto) in [("eks-repairs", true), ("we-repair", false)] {
        let mut args = serde_json::json!({"cluster": "prod", "nodegroup": name, "size": 5,
                                          "max": 8, "image": new});
        if auto {
            args["nodeRepairConfig"] = serde_json::json!({"enabled": true});
        }
        let created = cloud.control("create_nodegroup", args);
        asgs.push(created["asg"].as_str().unwrap().to_string());
        cloud.put_parameter(
            &format!("/nodecycle/pools/prod/{name}"),
            &format!(
                "cluster: prod\nname: {name}\nnodeGroup: {{ managedNodeGroup: {name} }}\narchitecture: x86_64\namiSelectorTerms:\n  - name: golden-*\n    owner: self\nterminationGracePeriod: 1h\nhealth:\n  window: 1s\n"
            ),
        );
    }
    kube.sync_nodes(SyncNodes::default());
    kube.wait_for("initial nodes", Duration::from_secs(30), |s| {
        (s.nodes.len() == 10).then_some(())
    });
    let table = a.table("nodecycle").await;
    let policies = a.policies();
    let watcher = a.watcher(policies.clone(), table.clone());
    let rotator = a.rotator(&cloud, policies, table.clone()).await;
    let now = Utc::now();
    watcher.handle(&serde_json::json!({}), now).await.unwrap();
    support::rotator_pass(&rotator, now).await;

    let mut sick = Vec::new();
    for asg in &asgs {
        let first = a.group_instances(asg).await[0].0.clone();
        sick.push(first);
    }
    stall_in(&kube, None, &sick);
    let stalled_at = Utc::now();
    support::rotator_pass(&rotator, stalled_at + TimeDelta::minutes(31)).await;
    let left = support::rotations_of(&table, "prod/eks-repairs").await;
    assert!(left.is_empty(), "EKS repairs that group: {left:?}");
    let ours = support::rotations_of(&table, "prod/we-repair").await;
    assert_eq!(
        ours.iter()
            .filter(|r| r.reason == RotationReason::Unhealthy)
            .map(|r| r.instance_id.as_str())
            .collect::<Vec<_>>(),
        [sick[1].as_str()],
        "{ours:?}"
    );
}

/// `nodecycle.dev/do-not-repair=true` on a node (annotation) or on the pool's Auto Scaling
/// group (tag) keeps its nodes from repair; the other nodes are repaired as usual.
#[tokio::test]
async fn do_not_repair_on_a_node_or_the_group_is_honoured() {
    let (p, _metrics) = steady_pool().await;
    let now = Utc::now();
    p.watcher.handle(&serde_json::json!({}), now).await.unwrap();
    p.pass(now).await;
    let all = p.kube.state().node_instances();
    let (kept_node, kept) = all[0].clone();
    let (_, other) = all[1].clone();
    let patched = p.kube.client().patch(
        &format!("/api/v1/nodes/{kept_node}"),
        "application/merge-patch+json",
        &serde_json::json!({"metadata": {"annotations": {nodecycle::repair::DO_NOT_REPAIR: "true"}}}),
    );
    assert!(patched.status < 300, "{patched:?}");
    // One stalled at a time: the breaker (20%) allows one of six.
    stall(&p.kube, std::slice::from_ref(&kept));
    let stalled_at = Utc::now();
    p.pass(stalled_at + TimeDelta::minutes(31)).await;
    assert!(
        repairs(&p.rotations().await).is_empty(),
        "the annotated node is not repaired"
    );

    // The group tagged: another stalled node is not repaired either; untagged, it is.
    stall(&p.kube, std::slice::from_ref(&other));
    let tag = |value: &str| {
        aws_sdk_autoscaling::types::Tag::builder()
            .resource_id("prod-general")
            .resource_type("auto-scaling-group")
            .key(nodecycle::repair::DO_NOT_REPAIR)
            .value(value)
            .propagate_at_launch(false)
            .build()
    };
    let asg = &p.adapters.clients.autoscaling;
    asg.create_or_update_tags()
        .tags(tag("true"))
        .send()
        .await
        .unwrap();
    let later = Utc::now() + TimeDelta::minutes(31);
    p.pass(later).await;
    assert!(
        repairs(&p.rotations().await).is_empty(),
        "the group is tagged"
    );
    asg.create_or_update_tags()
        .tags(tag("false"))
        .send()
        .await
        .unwrap();
    p.pass(later + TimeDelta::minutes(1)).await;
    let rs = p.rotations().await;
    assert_eq!(
        repairs(&rs)
            .iter()
            .map(|r| r.instance_id.as_str())
            .collect::<Vec<_>>(),
        [other.as_str()],
        "{rs:?}"
    );
}
