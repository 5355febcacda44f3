//! The ops actions against the in-memory fakes ([`crate::fake`]): each mutating use case over
//! only its ports, and the handler's parse, route and audit around them, in milliseconds.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use super::*;
use crate::ami::Architecture;
use crate::ami::select::Image;
use crate::fake::{Cloud, Clusters, Groups, ManagedGroups, MemoryStore, StoredGroup, World};
use crate::fleet::{Group, Lifecycle, Member};
use crate::policy::source::PolicyDocument;
use crate::port::ErrorKind;
use crate::rotation::Step;
use crate::state::keys;

const POOL: &str = "prod/general";
const I1: &str = "i-0123456789abcdef1";
const I2: &str = "i-0123456789abcdef2";

fn now() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-12-01T10:00:00Z")
        .map(|d| d.with_timezone(&Utc))
        .unwrap_or_default()
}

fn image(id: &str, architecture: Architecture) -> crate::fake::StoredImage {
    crate::fake::StoredImage {
        image: Image {
            id: id.into(),
            name: format!("golden-{id}"),
            architecture: Some(architecture),
            creation_date: "2026-11-01T00:00:00Z".into(),
            deprecation_time: None,
        },
        owner: "123456789012".into(),
        tags: BTreeMap::new(),
    }
}

fn member(id: &str, lifecycle: Lifecycle) -> Member {
    Member {
        instance_id: id.into(),
        availability_zone: "us-east-2a".into(),
        image_id: Some("ami-1".into()),
        launch_time: now(),
        lifecycle,
        node: None,
    }
}

/// One pool (prod/general, group prod-general with I1 in service and I2 leaving), two images
/// (ami-1 x86_64, ami-arm arm64), the ports over them.
struct Deployment {
    cloud: Arc<Cloud>,
    store: Arc<MemoryStore>,
    ops: OpsHandler,
}

fn deployment() -> Deployment {
    let doc = PolicyDocument::parameter(
        "/nodecycle/pools/",
        "/nodecycle/pools/prod/general",
        "cluster: prod\nname: general\nnodeGroup: { autoScalingGroup: prod-general }\narchitecture: x86_64\namiSelectorTerms: [{ ssmParameter: /golden/ami }]\n",
    );
    let cloud = Cloud::new(World {
        policies: [(doc.source.clone(), doc)].into(),
        images: vec![
            image("ami-1", Architecture::X86_64),
            image("ami-arm", Architecture::Arm64),
        ],
        ..World::default()
    });
    let groups = Arc::new(Groups::default());
    groups.insert(StoredGroup {
        group: Group {
            name: "prod-general".into(),
            min_size: 1,
            max_size: 3,
            desired_capacity: 2,
            launch_template_image: Some("ami-1".into()),
            suspended_processes: Vec::new(),
            do_not_repair: false,
            retained: Vec::new(),
        },
        instances: vec![
            member(I1, Lifecycle::InService),
            member(I2, Lifecycle::Leaving),
        ],
        template_version: 1,
        failed_activity: None,
    });
    let store = Arc::new(MemoryStore::new());
    let ops = OpsHandler {
        cell: cloud.cell(store.clone()),
        ports: super::OpsPorts {
            groups,
            managed: Arc::new(ManagedGroups::default()),
            kube: Arc::new(Clusters::default()),
            images: cloud.clone(),
            alarms: cloud.clone(),
        },
        node_group_wave: std::time::Duration::from_secs(600),
    };
    Deployment { cloud, store, ops }
}

fn inv(id: &str) -> Origin {
    Origin {
        request_id: id.into(),
        caller: Some("arn:aws:iam::123456789012:user/oncall".into()),
    }
}

async fn policy(ops: &OpsHandler) -> Policy {
    match ops.policies().await {
        Ok((policies, _)) => policies[POOL].clone(),
        Err(e) => panic!("{e:?}"),
    }
}

fn change(d: &Deployment) -> pool::PoolChange<'_> {
    pool::PoolChange {
        announce: &d.ops.cell.announce,
    }
}

#[tokio::test]
async fn pause_is_kept_once_and_resume_lifts_it() {
    let d = deployment();
    let p = policy(&d.ops).await;
    let first = change(&d)
        .set(pool::Field::Pause, &p, "incident", &inv("r1"), now())
        .await;
    let first = first.unwrap();
    assert_eq!(first["changed"], true, "{first}");
    assert_eq!(first["paused"]["reason"], "incident", "{first}");
    // A second pause keeps the first one's reason and changes nothing.
    let again = change(&d)
        .set(pool::Field::Pause, &p, "other", &inv("r2"), now())
        .await;
    let again = again.unwrap();
    assert_eq!(again["changed"], false, "{again}");
    assert_eq!(again["paused"]["reason"], "incident", "{again}");
    let resumed = change(&d)
        .set(pool::Field::Resume, &p, "over", &inv("r3"), now())
        .await;
    let resumed = resumed.unwrap();
    assert_eq!(resumed["changed"], true, "{resumed}");
    assert_eq!(resumed["resumed"]["paused"]["reason"], "incident");
    let record = d.ops.cell.state.pool(POOL).await.unwrap().unwrap();
    assert_eq!(record.paused, None);
}

#[tokio::test]
async fn pin_takes_only_an_available_image_of_the_pools_architecture() {
    let d = deployment();
    let p = policy(&d.ops).await;
    let pin = pool::Pin {
        images: d.ops.ports.images.as_ref(),
        state: &d.ops.cell.state,
        change: change(&d),
    };
    for (ami, why) in [
        ("ami-gone", "does not exist"),
        ("ami-arm", "pool prod/general runs x86_64"),
    ] {
        let e = pin
            .run(&p, ami, "cve", &inv("r1"), now())
            .await
            .unwrap_err();
        assert_eq!(e.error_type, "InvalidRequest", "{e:?}");
        assert!(e.message.contains(why), "{}", e.message);
    }
    assert_eq!(
        d.ops.cell.state.pool(POOL).await.unwrap(),
        None,
        "nothing written"
    );
    let out = pin
        .run(&p, "ami-1", "cve", &inv("r2"), now())
        .await
        .unwrap();
    assert_eq!(out["changed"], true, "{out}");
    assert_eq!(out["desired"], "ami-1", "{out}");
    let record = d.ops.cell.state.pool(POOL).await.unwrap().unwrap();
    assert_eq!(record.pin.as_ref().map(|p| p.ami.as_str()), Some("ami-1"));
    // The pin is the pool's first desired AMI: the pool is adopted now, and a later pin keeps
    // that adoption.
    assert_eq!(record.adopted_at, Some(now()));
    pin.run(
        &p,
        "ami-1",
        "again",
        &inv("r2b"),
        now() + chrono::TimeDelta::hours(1),
    )
    .await
    .unwrap();
    let record = d.ops.cell.state.pool(POOL).await.unwrap().unwrap();
    assert_eq!(record.adopted_at, Some(now()));
    // Unpinning gives the pin back in the answer and clears it.
    let out = change(&d)
        .set(pool::Field::Unpin, &p, "fixed", &inv("r3"), now())
        .await;
    let out = out.unwrap();
    assert_eq!(out["unpinned"]["ami"], "ami-1", "{out}");
    assert_eq!(
        d.ops.cell.state.pool(POOL).await.unwrap().unwrap().pin,
        None
    );
}

#[tokio::test]
async fn rotate_queues_the_in_service_instances_once_and_refuses_unknown_or_leaving_ones() {
    let d = deployment();
    let p = policy(&d.ops).await;
    let rotate = rotations::Rotate {
        planner: d.ops.planner(),
        announce: &d.ops.cell.announce,
    };
    let e = rotate
        .run(
            &p,
            &Target::Instances(vec![I2.into(), "i-0000000000000000f".into()]),
            "cve",
            false,
            1,
            &inv("r0"),
            now(),
        )
        .await
        .unwrap_err();
    assert!(
        e.message.contains("i-0000000000000000f not in pool"),
        "{e:?}"
    );
    assert!(
        e.message.contains(&format!("{I2} already leaving")),
        "{e:?}"
    );
    assert!(d.ops.cell.state.rotations(POOL).await.unwrap().is_empty());

    let out = rotate
        .run(&p, &Target::All, "cve", true, 2, &inv("r1"), now())
        .await
        .unwrap();
    assert_eq!(out["queued"], json!([I1]), "{out}");
    assert_eq!(out["maxConcurrent"], 2, "{out}");
    let rotations = d.ops.cell.state.rotations(POOL).await.unwrap();
    assert_eq!(rotations.len(), 1);
    assert!(
        rotations[0].value.forced,
        "ignoreBudgets forces the rotation"
    );
    // The identical request again answers as the first, marked repeated, nothing added.
    let again = rotate
        .run(&p, &Target::All, "cve", true, 2, &inv("r2"), now())
        .await
        .unwrap();
    assert_eq!(again["repeated"], true, "{again}");
    assert_eq!(again["requestId"], "r1", "{again}");
    assert_eq!(d.ops.cell.state.rotations(POOL).await.unwrap().len(), 1);
}

#[tokio::test]
async fn cancel_ends_a_queued_rotation_once() {
    let d = deployment();
    let p = policy(&d.ops).await;
    let rotate = rotations::Rotate {
        planner: d.ops.planner(),
        announce: &d.ops.cell.announce,
    };
    let targets = Target::Instances(vec![I1.into()]);
    (rotate.run(&p, &targets, "cve", false, 1, &inv("r1"), now()))
        .await
        .unwrap();
    let cancel = rotations::Cancel {
        planner: d.ops.planner(),
        announce: &d.ops.cell.announce,
        kube: d.ops.ports.kube.as_ref(),
    };
    let e = cancel.run(&p, I2, "oops", &inv("r2"), now()).await;
    assert!(e.unwrap_err().message.contains("no rotation of"));
    let out = cancel.run(&p, I1, "oops", &inv("r3"), now()).await.unwrap();
    assert_eq!(out["changed"], true, "{out}");
    let rotations = d.ops.cell.state.rotations(POOL).await.unwrap();
    assert_eq!(rotations[0].value.step, Step::Cancelled);
    assert!(
        (rotations[0].value.error.as_deref()).is_some_and(|e| e.contains("oncall")),
        "{:?}",
        rotations[0].value.error
    );
    let again = cancel.run(&p, I1, "oops", &inv("r4"), now()).await.unwrap();
    assert_eq!(again["changed"], false, "{again}");
}

#[tokio::test]
async fn a_quarantine_is_put_once_and_lifted_by_either_name() {
    let d = deployment();
    let (policies, _) = d.ops.policies().await.unwrap();
    let invocations = [inv("r1"), inv("r2"), inv("r3")];
    let q = |inv| quarantine::Quarantines {
        state: &d.ops.cell.state,
        announce: &d.ops.cell.announce,
        policies: &policies,
        origin: inv,
        now: now(),
    };
    let target = crate::promotion::Target::Ami("ami-1".into());
    let out = q(&invocations[0])
        .quarantine(&target, "bad kernel")
        .await
        .unwrap();
    assert_eq!(out["changed"], true, "{out}");
    let events = d.cloud.world().events.len();
    assert!(events > 0, "the quarantine is announced");
    let again = q(&invocations[1])
        .quarantine(&target, "again")
        .await
        .unwrap();
    assert_eq!(again["changed"], false, "{again}");
    assert_eq!(again["quarantine"]["reason"], "bad kernel", "{again}");
    assert_eq!(d.cloud.world().events.len(), events, "announced once");
    // The release that is that image id names the same thing.
    let release = crate::promotion::Target::Release(crate::promotion::Release("ami-1".into()));
    let lifted = q(&invocations[2])
        .unquarantine(&release, "fixed")
        .await
        .unwrap();
    assert_eq!(lifted["changed"], true, "{lifted}");
    assert!(d.ops.cell.state.quarantine().await.unwrap().0.is_empty());
}

#[tokio::test]
async fn stop_holds_every_pool_and_start_lets_the_unpaused_ones_go() {
    let d = deployment();
    let (policies, _) = d.ops.policies().await.unwrap();
    let out = stop::stop_switch(
        &d.ops.cell.state,
        &policies,
        true,
        "freeze",
        &inv("r1"),
        now(),
    )
    .await
    .unwrap();
    assert_eq!(out["changed"], true, "{out}");
    assert_eq!(out["holds"], json!([POOL]), "{out}");
    assert_eq!(out["stopped"]["reason"], "freeze", "{out}");
    let second = inv("r2");
    let again = stop::stop_switch(&d.ops.cell.state, &policies, true, "x", &second, now());
    assert_eq!(again.await.unwrap()["changed"], false);
    let out = stop::stop_switch(&d.ops.cell.state, &policies, false, "go", &inv("r3"), now())
        .await
        .unwrap();
    assert_eq!(out["resumes"], json!([POOL]), "{out}");
    assert_eq!(out["stopped"], Value::Null, "{out}");
}

fn audit_of(items: &[(String, Value)]) -> Vec<&Value> {
    items
        .iter()
        .filter(|(sk, _)| sk.starts_with(keys::AUDIT_PREFIX))
        .map(|(_, v)| v)
        .collect()
}

#[tokio::test]
async fn a_mutating_request_is_audited_before_it_acts_and_refused_when_it_cannot_be() {
    let d = deployment();
    let pause = json!({"action": "pause", "pool": POOL, "reason": "incident"});
    let out = d.ops.handle(&pause, &inv("r1"), now()).await.unwrap();
    assert_eq!(out["changed"], true, "{out}");
    let items = d.store.partition(&keys::pool_pk(POOL));
    let audit = audit_of(&items);
    assert_eq!(audit.len(), 1, "{items:?}");
    assert_eq!(audit[0]["requestId"], "r1");
    assert_eq!(audit[0]["outcome"]["ok"], true, "{}", audit[0]);

    // The table refuses writes: the request is refused and the pool left as it was.
    d.store.fail("put", ErrorKind::Throttled);
    let resume = json!({"action": "resume", "pool": POOL, "reason": "over"});
    let e = d.ops.handle(&resume, &inv("r2"), now()).await.unwrap_err();
    assert!(e.message.contains("cannot write the audit record"), "{e:?}");
    d.store.heal();
    let record = d.ops.cell.state.pool(POOL).await.unwrap().unwrap();
    assert!(record.paused.is_some(), "still paused");

    // An unknown pool is refused and audited unscoped.
    let unknown = json!({"action": "pause", "pool": "prod/nope", "reason": "x"});
    let e = d.ops.handle(&unknown, &inv("r3"), now()).await.unwrap_err();
    assert!(e.message.contains("pool: unknown"), "{e:?}");
    let unscoped = d.store.partition(keys::AUDIT_PK);
    assert_eq!(audit_of(&unscoped).len(), 1, "{unscoped:?}");
}
