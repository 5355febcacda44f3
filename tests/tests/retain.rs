//! Retain, not kill (issue 46, part 3), end to end against the fake cloud: a self-managed group
//! with nodecycle's terminate hook (default result ABANDON) and the instance lifecycle policy
//! `TerminateHookAbandon: retain`; a scale-in meets the hook on a node whose pod a
//! PodDisruptionBudget never lets go. The interruption handler hands the drain to the rotator;
//! once the hand-over is out of time the tick answers ABANDON, Auto Scaling keeps the instance
//! `Terminating:Retained` with its pod, `status` and `doctor` report it with the pod, the
//! `RetainedInstances` metric counts it, and nothing is terminated with pods on it. Once a
//! second replica lets the PDB allow the eviction, the rotator's drain evicts the pod and a
//! later pass terminates the retained instance (no capacity change).

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use nodecycle::aws::instances::{Ec2Instances, LifecycleActions};
use nodecycle::handlers::Invocation;
use nodecycle::handlers::interruption::{InterruptionHandler, InterruptionPorts, Settings};
use nodecycle::handlers::rotator::EksConnector;
use nodecycle_tests::{PdbFixture, PodFixture};
use serde_json::{Value, json};

use crate::support::pool::Pool;
use crate::support::{CapturedMetrics, Operator, rotator_pass};

const POOL: &str = "prod/general";
const GROUP: &str = "prod-general";
const HOOK: &str = "nodecycle-drain";

/// The pool of `support::pool` (2 nodes of `golden-1`), its policy pinned to `golden-1` (no
/// drift) without terminationGracePeriod (a drain waits for PDBs as long as it takes), its
/// group with nodecycle's terminate hook (default ABANDON) and the retain policy.
async fn retaining_pool() -> Pool {
    let p = crate::support::pool::pool(2, "    - nodes: \"1\"\n", false).await;
    p.cloud.put_parameter(
        "/nodecycle/pools/prod/general",
        "cluster: prod\nname: general\nnodeGroup: { autoScalingGroup: prod-general }\narchitecture: x86_64\namiSelectorTerms:\n  - name: golden-1\n    owner: self\n",
    );
    (p.adapters.clients.autoscaling)
        .put_lifecycle_hook()
        .auto_scaling_group_name(GROUP)
        .lifecycle_hook_name(HOOK)
        .lifecycle_transition("autoscaling:EC2_INSTANCE_TERMINATING")
        .heartbeat_timeout(300)
        .default_result("ABANDON")
        .send()
        .await
        .unwrap();
    p.adapters.retain_abandoned(GROUP).await;
    p
}

/// The interruption handler over the fake cloud's real Auto Scaling lifecycle actions, which
/// abandons a hand-over still draining `limit` after the action started.
async fn handler(p: &Pool, limit: Duration) -> InterruptionHandler {
    let a = &p.adapters;
    let sdk = p.cloud.sdk_config().await;
    InterruptionHandler {
        cell: a.cell(a.policies(), p.table.clone()),
        ports: InterruptionPorts {
            instances: Arc::new(Ec2Instances::new(a.clients.ec2.clone())),
            lifecycle: Arc::new(LifecycleActions::new(a.clients.autoscaling.clone())),
            kube: Arc::new(EksConnector::new(sdk.clone())),
        },
        deployment: Arc::new(nodecycle::aws::identity::OwnAccount::new(&sdk)),
        settings: Settings {
            poll: Duration::from_millis(200),
            heartbeat_every: Duration::from_millis(400),
            hand_over_limit: limit,
            ..Settings::default()
        },
        metrics: Arc::new(nodecycle::metrics::NoMetrics),
    }
}

/// `(instance, lifecycle state)` of the group's instances, from DescribeAutoScalingGroups.
async fn lifecycle_states(p: &Pool) -> Vec<(String, String)> {
    let out = (p.adapters.clients.autoscaling)
        .describe_auto_scaling_groups()
        .auto_scaling_group_names(GROUP)
        .send()
        .await
        .unwrap();
    out.auto_scaling_groups()[0]
        .instances()
        .iter()
        .map(|i| {
            (
                i.instance_id().unwrap().to_string(),
                i.lifecycle_state().unwrap().as_str().to_string(),
            )
        })
        .collect()
}

/// The pool's doctor lines of kind `retention`, doctor run in process over the real adapters
/// (no stack, no rules: those lines fail).
async fn doctor_retention(p: &Pool) -> Vec<nodecycle::doctor::Check> {
    // No stack, no rules: the pool's lines are what is looked at.
    let none = nodecycle::doctor::memory::World::default();
    crate::support::doctor_checks(&p.cloud, &p.adapters, &none)
        .await
        .into_iter()
        .filter(|c| c.check == nodecycle::doctor::CheckKind::Retention && c.subject == POOL)
        .collect()
}

fn terminated_with_pods(p: &Pool) -> Vec<nodecycle_tests::Termination> {
    p.cloud
        .scaling_records(Some(GROUP))
        .terminations
        .into_iter()
        .filter(|t| !t.pods.is_empty())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn an_undrainable_hand_over_is_retained_with_its_pods_then_terminated_once_empty() {
    let p = retaining_pool().await;
    let t0: DateTime<Utc> = Utc::now();
    let minutes = |n: i64| t0 + chrono::Duration::minutes(n);
    p.watcher.handle(&json!({}), t0).await.unwrap();
    let nodes = p.adapters.group_instances(GROUP).await;
    let (instance, other) = (nodes[0].0.clone(), nodes[1].0.clone());
    let node_of = |id: &str| {
        p.kube
            .state()
            .node_instances()
            .into_iter()
            .find(|(_, i)| i == id)
            .map(|(n, _)| n)
            .unwrap()
    };
    let (node, other_node) = (node_of(&instance), node_of(&other));
    // One replica, and a PDB that needs it: no eviction is ever allowed.
    let db = |name: &str, on: &str| {
        PodFixture::new("default", name)
            .node(on)
            .owner("StatefulSet", "db")
            .label("app", "db")
            .grace_seconds(0)
    };
    p.kube.add_pod(db("db-0", &node));
    p.kube.add_pdb(
        PdbFixture::new("default", "db")
            .match_label("app", "db")
            .min_available(1),
    );
    let handler = handler(&p, Duration::from_secs(600)).await;
    let metrics = Arc::new(CapturedMetrics::default());
    let mut rotator = p
        .adapters
        .rotator(&p.cloud, p.adapters.policies(), p.table.clone())
        .await;
    rotator.metrics = metrics.clone();
    let retained_metric = || {
        metrics
            .0
            .lock()
            .unwrap()
            .iter()
            .rev()
            .find_map(|d| d["RetainedInstances"].as_f64())
    };

    // A scale-in meets the hook: the drain cannot finish in the invocation and is handed over.
    let token = p.cloud.lifecycle_wait(GROUP, HOOK, &instance, None);
    let mut ev =
        crate::interruption::event("asg-terminate-lifecycle-action.json", &instance, t0, None);
    ev["detail"]["LifecycleActionToken"] = json!(token);
    let out = handler
        .handle(
            &ev,
            Invocation::at(t0, Instant::now() + Duration::from_secs(12)),
        )
        .await
        .unwrap();
    assert_eq!(out["outcomes"][0]["action"], "handedOver", "{out}");
    let tick = |at: DateTime<Utc>| {
        let handler = &handler;
        async move {
            handler
                .handle(
                    &json!({}),
                    Invocation::at(at, Instant::now() + Duration::from_secs(60)),
                )
                .await
                .unwrap()
        }
    };
    // In time: the rotator drains (still blocked), the tick only heartbeats.
    rotator_pass(&rotator, minutes(1)).await;
    let out = tick(minutes(2)).await;
    assert_eq!(out["outcomes"][0]["action"], "heartbeat", "{out}");

    // Out of time: ABANDON, and Auto Scaling retains the instance with its pod.
    let out = tick(minutes(11)).await;
    assert_eq!(out["outcomes"][0]["action"], "retain", "{out}");
    let results: Vec<Value> = p
        .cloud
        .lifecycle_calls()
        .into_iter()
        .filter(|c| c["action"] == "CompleteLifecycleAction")
        .map(|c| c["result"].clone())
        .collect();
    assert_eq!(
        results,
        vec![json!("ABANDON")],
        "never CONTINUE with a pod left"
    );
    let states = lifecycle_states(&p).await;
    assert!(
        states.contains(&(instance.clone(), "Terminating:Retained".into())),
        "{states:?}"
    );
    assert_eq!(p.desired_capacity().await, 1, "retained: not counted");
    assert_eq!(p.kube.state().pods_on(&node).len(), 1);
    // Closed: later ticks answer nothing.
    let out = tick(minutes(12)).await;
    assert!(out["outcomes"].as_array().unwrap().is_empty(), "{out}");

    // The rotator keeps it (a pod is left), and reports it.
    rotator_pass(&rotator, minutes(12)).await;
    assert!(
        lifecycle_states(&p)
            .await
            .iter()
            .any(|(i, _)| *i == instance)
    );
    assert_eq!(retained_metric(), Some(1.0));
    let operator = Operator::new(
        p.adapters.ops(
            p.adapters
                .rotator(&p.cloud, p.adapters.policies(), p.table.clone())
                .await,
        ),
    );
    let status = operator
        .ok(json!({"action": "status", "pool": POOL}), minutes(12))
        .await["pools"][0]
        .clone();
    let retained = status["retained"].as_array().unwrap();
    assert_eq!(retained.len(), 1, "{status}");
    assert_eq!(retained[0]["instance"], instance.as_str());
    assert_eq!(retained[0]["pods"], json!(["default/db-0"]));
    assert_eq!(retained[0]["next"]["decision"], "keep");
    let doctor = doctor_retention(&p).await;
    let found = doctor
        .iter()
        .find(|c| c.detail.contains(&instance))
        .unwrap_or_else(|| panic!("{doctor:#?}"));
    assert_eq!(found.status, nodecycle::doctor::Status::Warn);
    assert!(found.detail.contains("default/db-0"), "{found}");
    // The group's own setup (policy retain, hook default ABANDON) is fine.
    assert!(
        doctor
            .iter()
            .any(|c| c.status == nodecycle::doctor::Status::Ok),
        "{doctor:#?}"
    );
    assert!(terminated_with_pods(&p).is_empty());

    // A second replica: the PDB lets db-0 go; the drain evicts it and the instance goes.
    p.kube.add_pod(db("db-1", &other_node));
    let mut at = minutes(13);
    for _ in 0..10 {
        rotator_pass(&rotator, at).await;
        if lifecycle_states(&p)
            .await
            .iter()
            .all(|(i, _)| *i != instance)
        {
            break;
        }
        at += chrono::Duration::minutes(1);
    }
    assert!(
        lifecycle_states(&p)
            .await
            .iter()
            .all(|(i, _)| *i != instance),
        "the empty retained instance is terminated"
    );
    let records = p.cloud.scaling_records(Some(GROUP));
    let ended: Vec<_> = records
        .terminations
        .iter()
        .filter(|t| t.instance == instance)
        .collect();
    assert_eq!(ended.len(), 1, "{ended:?}");
    assert_eq!(ended[0].op, "TerminateInstanceInAutoScalingGroup");
    assert_eq!(ended[0].decrement, Some(false));
    assert!(
        terminated_with_pods(&p).is_empty(),
        "nothing terminated with pods on it"
    );
    assert_eq!(p.desired_capacity().await, 1);
    assert_eq!(retained_metric(), Some(0.0));
}
