//! The ami-watcher's and the interruption handler's use cases against the in-memory fakes:
//! whole invocations (payload in, JSON out, the table and the cloud after), in milliseconds.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::*;
use crate::ami::Architecture;
use crate::handlers::Invocation;
use crate::handlers::interruption::Settings;

const POOL_PARAM: &str = "/nodecycle/pools/prod/general";
const I1: &str = "i-0123456789abcdef1";
const I2: &str = "i-0123456789abcdef2";

fn at(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s)
        .map(|d| d.with_timezone(&Utc))
        .unwrap_or_default()
}

fn now() -> DateTime<Utc> {
    at("2026-12-01T10:00:00Z")
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

fn policy_doc(extra: &str) -> PolicyDocument {
    PolicyDocument::parameter(
        "/nodecycle/pools/",
        POOL_PARAM,
        format!(
            "cluster: prod\nname: general\nnodeGroup: {{ autoScalingGroup: prod-general }}\narchitecture: x86_64\namiSelectorTerms: [{{ ssmParameter: /golden/ami }}]\n{extra}"
        ),
    )
}

fn instance(id: &str) -> InstanceInfo {
    InstanceInfo {
        instance_id: id.into(),
        state: "running".into(),
        availability_zone: "us-east-2a".into(),
        tags: [
            (crate::tags::AUTO_SCALING_GROUP, "prod-general"),
            (crate::tags::CLUSTER, "prod"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect(),
    }
}

fn world(extra: &str) -> World {
    World {
        policies: [(POOL_PARAM.to_string(), policy_doc(extra))].into(),
        parameters: [("/golden/ami".to_string(), "ami-1".to_string())].into(),
        images: vec![
            image("ami-1", "2026-11-01T00:00:00Z"),
            image("ami-2", "2026-11-30T00:00:00Z"),
        ],
        versions: [("prod".to_string(), "1.31".to_string())].into(),
        instances: [
            (I1.to_string(), instance(I1)),
            (I2.to_string(), instance(I2)),
        ]
        .into(),
        ..World::default()
    }
}

fn pool_record(v: &[(String, Value)]) -> Value {
    v.iter()
        .find(|(sk, _)| sk == crate::state::keys::POOL_STATE_SK)
        .map(|(_, v)| v.clone())
        .unwrap_or(Value::Null)
}

#[tokio::test]
async fn a_pass_records_the_desired_ami_and_follows_its_parameter() {
    let cloud = Cloud::new(world(""));
    let store = Arc::new(MemoryStore::new());
    let watcher = cloud.watcher(store.clone());
    let report = watcher.handle(&json!({}), now()).await.unwrap();
    assert_eq!(report["pools"][0]["status"], "changed", "{report}");
    assert_eq!(report["pools"][0]["desired"], "ami-1", "{report}");
    let pk = crate::state::keys::pool_pk("prod/general");
    assert_eq!(pool_record(&store.partition(&pk))["desired"]["id"], "ami-1");
    // Again: unchanged, nothing new.
    let report = watcher.handle(&json!({}), now()).await.unwrap();
    assert_eq!(report["pools"][0]["status"], "unchanged", "{report}");
    // The parameter moves: the desired AMI follows.
    cloud.with(|w| w.put_parameter("/golden/ami", "ami-2"));
    let report = watcher.handle(&json!({}), now()).await.unwrap();
    assert_eq!(report["pools"][0]["status"], "changed", "{report}");
    assert_eq!(report["pools"][0]["previous"], "ami-1", "{report}");
    assert_eq!(pool_record(&store.partition(&pk))["desired"]["id"], "ami-2");
}

#[tokio::test]
async fn an_unreadable_quarantine_resolves_nothing() {
    let cloud = Cloud::new(world(""));
    let store = Arc::new(MemoryStore::new());
    let watcher = cloud.watcher(store.clone());
    store.fail("query", ErrorKind::Throttled);
    let e = watcher.handle(&json!({}), now()).await.unwrap_err();
    assert!(e.message.contains("cannot read the quarantine"), "{e}");
    store.heal();
    assert!(
        store
            .partition(&crate::state::keys::pool_pk("prod/general"))
            .is_empty()
    );
    assert_eq!(cloud.world().calls.get("ec2:DescribeImages"), None);
}

#[tokio::test]
async fn a_failed_resolution_keeps_the_desired_ami_and_records_why() {
    let cloud = Cloud::new(world(""));
    let store = Arc::new(MemoryStore::new());
    let watcher = cloud.watcher(store.clone());
    watcher.handle(&json!({}), now()).await.unwrap();
    cloud.with(|w| w.denied.push("ec2:DescribeImages".into()));
    let report = watcher.handle(&json!({}), now()).await.unwrap();
    assert_eq!(report["pools"][0]["status"], "failed", "{report}");
    assert_eq!(report["pools"][0]["desired"], "ami-1", "{report}");
    let rec = pool_record(&store.partition(&crate::state::keys::pool_pk("prod/general")));
    assert_eq!(rec["desired"]["id"], "ami-1");
    assert!(
        rec["lastError"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("AccessDenied")),
        "{rec}"
    );
}

/// The pool record's version after a second watcher pass that follows a new parameter value,
/// with another writer rewriting the record just before that pass's first write of it
/// (`race`) or not.
async fn second_pass_version(race: bool) -> u64 {
    let cloud = Cloud::new(world(""));
    let store = Arc::new(MemoryStore::new());
    let watcher = cloud.watcher(store.clone());
    watcher.handle(&json!({}), now()).await.unwrap();
    cloud.with(|w| w.put_parameter("/golden/ami", "ami-2"));
    let (pk, sk) = (
        crate::state::keys::pool_pk("prod/general"),
        crate::state::keys::POOL_STATE_SK,
    );
    if race {
        store.race_next_write(&pk, sk);
    }
    let report = watcher.handle(&json!({}), now()).await.unwrap();
    assert_eq!(report["pools"][0]["desired"], "ami-2", "{report}");
    assert_eq!(pool_record(&store.partition(&pk))["desired"]["id"], "ami-2");
    store.item(&pk, sk).unwrap().doc.version
}

#[tokio::test]
async fn a_write_lost_to_another_watcher_is_retried_from_a_fresh_read() {
    // The other writer's version came in between and the pass's write landed on top of it.
    assert_eq!(
        second_pass_version(true).await,
        second_pass_version(false).await + 1
    );
}

fn handler(
    cloud: &Arc<Cloud>,
    store: &Arc<MemoryStore>,
    kube: &Arc<Clusters>,
) -> InterruptionHandler {
    cloud.interruption_handler(
        store.clone(),
        kube.clone(),
        Settings {
            poll: Duration::from_millis(1),
            reserve: Duration::from_millis(1),
            ..Settings::default()
        },
    )
}

fn ec2_event(id: &str, detail_type: &str, detail: Value) -> Value {
    json!({
        "version": "0",
        "id": id,
        "detail-type": detail_type,
        "source": "aws.ec2",
        "account": "123456789012",
        "time": now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        "region": "us-east-2",
        "resources": [],
        "detail": detail,
    })
}

fn spot_warning(id: &str, instance: &str) -> Value {
    ec2_event(
        id,
        "EC2 Spot Instance Interruption Warning",
        json!({"instance-id": instance, "instance-action": "terminate"}),
    )
}

fn deadline() -> Instant {
    Instant::now() + Duration::from_secs(300)
}

#[tokio::test]
async fn a_spot_warning_drains_once_however_often_it_comes() {
    let cloud = Cloud::new(world(""));
    let store = Arc::new(MemoryStore::new());
    let kube = Arc::new(Clusters::default());
    kube.cluster("prod", now()).add_node("ip-10-0-0-1", I1);
    let h = handler(&cloud, &store, &kube);
    let out = h
        .handle(&spot_warning("e-1", I1), Invocation::at(now(), deadline()))
        .await
        .unwrap();
    assert_eq!(out["outcomes"][0]["action"], "drained", "{out}");
    let node = kube.cluster("prod", now()).node("ip-10-0-0-1").unwrap();
    assert!(node.unschedulable);
    let pk = crate::state::keys::pool_pk("prod/general");
    let items = store.partition(&pk);
    let claim = items
        .iter()
        .find(|(sk, _)| sk == &format!("CLAIM#{I1}#drain"))
        .map(|(_, v)| v.clone())
        .unwrap();
    assert_eq!(claim["status"], "done", "{claim}");
    assert!(items.iter().any(|(sk, _)| sk.starts_with("EVT#")));
    assert_eq!(
        cloud.world().events.len(),
        1,
        "one Interruption Handled event"
    );
    // The same event again: a duplicate.
    let out = h
        .handle(&spot_warning("e-1", I1), Invocation::at(now(), deadline()))
        .await
        .unwrap();
    assert_eq!(out["decision"], "duplicate", "{out}");
    // Its state change (another event): skipped, the drain is not repeated.
    cloud.with(|w| {
        if let Some(i) = w.instances.get_mut(I1) {
            i.state = "stopping".into();
        }
    });
    let stopping = ec2_event(
        "e-2",
        "EC2 Instance State-change Notification",
        json!({"instance-id": I1, "state": "stopping"}),
    );
    let out = h
        .handle(&stopping, Invocation::at(now(), deadline()))
        .await
        .unwrap();
    assert_eq!(out["outcomes"][0]["action"], "skipped", "{out}");
    assert!(
        out["outcomes"][0]["reason"]
            .as_str()
            .is_some_and(|r| r.contains("already drained")),
        "{out}"
    );
}

#[tokio::test]
async fn a_failed_drain_is_taken_over_by_the_next_delivery() {
    let cloud = Cloud::new(world(""));
    let store = Arc::new(MemoryStore::new());
    let kube = Arc::new(Clusters::default());
    let h = handler(&cloud, &store, &kube);
    // The cluster is unreachable: the event fails (Lambda retries it).
    let e = h
        .handle(&spot_warning("e-1", I1), Invocation::at(now(), deadline()))
        .await
        .unwrap_err();
    assert!(e.message.contains("unreachable"), "{e}");
    let pk = crate::state::keys::pool_pk("prod/general");
    let claim = store
        .partition(&pk)
        .into_iter()
        .find(|(sk, _)| sk == &format!("CLAIM#{I1}#drain"))
        .map(|(_, v)| v)
        .unwrap();
    assert_eq!(claim["status"], "failed", "{claim}");
    // The retry reaches the cluster and drains.
    kube.cluster("prod", now()).add_node("ip-10-0-0-1", I1);
    let out = h
        .handle(&spot_warning("e-1", I1), Invocation::at(now(), deadline()))
        .await
        .unwrap();
    assert_eq!(out["outcomes"][0]["action"], "drained", "{out}");
}

#[tokio::test]
async fn rebalance_replace_records_one_forced_rotation() {
    let cloud = Cloud::new(world("interruption: { rebalance: replace }\n"));
    let store = Arc::new(MemoryStore::new());
    let kube = Arc::new(Clusters::default());
    let h = handler(&cloud, &store, &kube);
    let rebalance = |id: &str| {
        ec2_event(
            id,
            "EC2 Instance Rebalance Recommendation",
            json!({"instance-id": I1}),
        )
    };
    let out = h
        .handle(&rebalance("e-1"), Invocation::at(now(), deadline()))
        .await
        .unwrap();
    assert_eq!(out["outcomes"][0]["action"], "rotationRecorded", "{out}");
    let pk = crate::state::keys::pool_pk("prod/general");
    let rotation = store
        .partition(&pk)
        .into_iter()
        .find(|(sk, _)| sk == &crate::state::keys::rotation_sk(I1))
        .map(|(_, v)| v)
        .unwrap();
    assert_eq!(rotation["reason"], "Interrupted", "{rotation}");
    assert_eq!(rotation["forced"], true, "{rotation}");
    // Another recommendation for it: the claim says it was handled.
    let out = h
        .handle(&rebalance("e-2"), Invocation::at(now(), deadline()))
        .await
        .unwrap();
    assert_eq!(out["outcomes"][0]["action"], "skipped", "{out}");
}

#[tokio::test]
async fn a_lifecycle_action_without_a_node_completes_at_once() {
    let cloud = Cloud::new(world(""));
    cloud.with(|w| {
        w.lifecycle.insert(
            I2.into(),
            LifecycleState {
                active: true,
                ..LifecycleState::default()
            },
        )
    });
    let store = Arc::new(MemoryStore::new());
    let kube = Arc::new(Clusters::default());
    kube.cluster("prod", now());
    let h = handler(&cloud, &store, &kube);
    let a = lifecycle_action("prod-general", I2);
    let event = json!({
        "version": "0",
        "id": "e-9",
        "detail-type": "EC2 Instance-terminate Lifecycle Action",
        "source": "aws.autoscaling",
        "account": "123456789012",
        "time": now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        "region": "us-east-2",
        "resources": [],
        "detail": {
            "LifecycleActionToken": a.token,
            "AutoScalingGroupName": a.group,
            "LifecycleHookName": a.hook,
            "EC2InstanceId": a.instance_id,
            "LifecycleTransition": "autoscaling:EC2_INSTANCE_TERMINATING",
        },
    });
    let out = h
        .handle(&event, Invocation::at(now(), deadline()))
        .await
        .unwrap();
    assert_eq!(out["outcomes"][0]["action"], "completed", "{out}");
    assert!(cloud.world().lifecycle[I2].completed);
    // Another account's event is refused before anything is written.
    let mut other = spot_warning("e-10", I1);
    other["account"] = json!("210987654321");
    let before = store.calls("put");
    let out = h
        .handle(&other, Invocation::at(now(), deadline()))
        .await
        .unwrap();
    assert_eq!(out["decision"], "refused", "{out}");
    assert_eq!(store.calls("put"), before);
}

#[tokio::test]
async fn groups_answer_as_auto_scaling_does() {
    use crate::fleet::{Group, GroupOps, Lifecycle, Member};
    let groups = Groups::default();
    let member = |id: &str| Member {
        instance_id: id.into(),
        availability_zone: "us-east-2a".into(),
        image_id: Some("ami-1".into()),
        launch_time: now(),
        lifecycle: Lifecycle::InService,
        node: None,
    };
    groups.insert(StoredGroup {
        group: Group {
            name: "prod-general".into(),
            min_size: 2,
            max_size: 3,
            desired_capacity: 2,
            launch_template_image: Some("ami-1".into()),
            suspended_processes: Vec::new(),
            do_not_repair: false,
            retained: Vec::new(),
        },
        instances: vec![member(I1), member(I2)],
        template_version: 1,
        failed_activity: None,
    });
    // Above MaxSize is refused; within it is taken.
    let e = groups
        .set_desired_capacity("prod-general", 4)
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Invalid, "{e}");
    groups
        .set_desired_capacity("prod-general", 3)
        .await
        .unwrap();
    // MaxSize below the desired capacity is refused.
    assert!(groups.set_max_size("prod-general", 2).await.is_err());
    // Terminating with a decrement lowers the desired capacity, down to MinSize only.
    groups.terminate_instance(I1, true).await.unwrap();
    assert_eq!(groups.sizes("prod-general").await.unwrap().desired, 2);
    assert!(groups.terminate_instance(I2, true).await.is_err());
    // A gone instance is success.
    groups.terminate_instance(I1, true).await.unwrap();
    // A new image is a new template version; the same image is none.
    assert_eq!(
        groups.set_image("prod-general", "ami-2").await.unwrap(),
        "2"
    );
    assert_eq!(
        groups.set_image("prod-general", "ami-2").await.unwrap(),
        "2"
    );
    groups
        .suspend_processes("prod-general", &["AZRebalance".into()])
        .await
        .unwrap();
    assert_eq!(
        groups
            .get("prod-general")
            .unwrap()
            .group
            .suspended_processes,
        vec!["AZRebalance".to_string()]
    );
    assert!(groups.describe("nope").await.is_err());
}

#[tokio::test]
async fn managed_node_groups_answer_as_eks_does() {
    use crate::managed::{ManagedGroup, ManagedGroupOps, TemplateRef, UpdateState, UpdateTarget};
    let eks = ManagedGroups::default();
    let template = TemplateRef {
        id: Some("lt-1".into()),
        name: None,
        version: Some("1".into()),
    };
    eks.insert(
        "prod",
        ManagedGroup {
            name: "spot".into(),
            status: "ACTIVE".into(),
            release_version: None,
            ami_type: Some("CUSTOM".into()),
            launch_template: Some(template.clone()),
            update_config: crate::managed::UpdateConfig {
                max_unavailable: Some(1),
                max_unavailable_percentage: None,
                update_strategy: None,
            },
            auto_scaling_group: Some("eks-spot-1".into()),
            auto_repair: false,
        },
    );
    eks.insert_template("lt-1", vec![Some("ami-1".into())]);
    // The same image is the same version; a new image a new one.
    assert_eq!(
        eks.template_with_image(&template, "ami-1").await.unwrap(),
        ("lt-1".to_string(), "1".to_string())
    );
    let (id, version) = eks.template_with_image(&template, "ami-2").await.unwrap();
    assert_eq!(version, "2");
    let target = UpdateTarget::LaunchTemplate { id, version };
    let u = eks
        .start_update("prod", "spot", &target, "tok-1")
        .await
        .unwrap();
    // The same token is the same update; another update meanwhile is a conflict.
    assert_eq!(
        eks.start_update("prod", "spot", &target, "tok-1")
            .await
            .unwrap(),
        u
    );
    let e = eks
        .start_update("prod", "spot", &target, "tok-2")
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Conflict, "{e}");
    assert_eq!(
        eks.describe_update("prod", "spot", &u).await.unwrap().state,
        UpdateState::InProgress
    );
    eks.finish("prod", "spot", UpdateState::Successful);
    let g = eks.describe("prod", "spot").await.unwrap();
    assert_eq!(g.status, "ACTIVE");
    let now_on = g.launch_template.unwrap();
    assert_eq!(
        eks.template_image(&now_on).await.unwrap().as_deref(),
        Some("ami-2")
    );
    assert!(
        eks.describe("prod", "nope")
            .await
            .unwrap_err()
            .is_not_found()
    );
}
