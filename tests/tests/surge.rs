//! Surge accounting end to end: every unit of capacity a rotation adds for its replacement is
//! given back exactly once, whatever ends the rotation (a replacement that never becomes
//! Ready, the old instance vanishing, an operator's cancel), and two rotators contend for the
//! cluster's lease.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use crate::support;

use std::time::{Duration, Instant};

use nodecycle::handlers::Invocation;
use nodecycle::rotation::Step;
use serde_json::json;
use support::pool::*;

/// A new AMI whose nodes never become Ready, pool of 6, budget "2": both rotations start, both
/// time out in the same pass; each gives its own surge back, so the group is back at 6 with no
/// instance of the bad AMI left.
#[tokio::test]
async fn two_replacements_timing_out_in_one_pass_leave_no_surge() {
    let mut p = pool(6, "    - nodes: \"2\"\n", true).await;
    p.rotator.settings.replacement_timeout = Duration::from_secs(20);
    let t0 = at("2026-12-01T10:00:00Z");
    p.watcher.handle(&json!({}), t0).await.unwrap();
    p.pass(t0).await;
    assert_eq!(p.desired_capacity().await, 8, "two surges");
    let started = p.rotations().await;
    assert_eq!(started.len(), 2);
    assert!(
        started.iter().all(|r| r.step == Step::Surging),
        "{started:?}"
    );
    // Both replacements launched and never became Ready; both time out in this pass.
    p.pass(t0 + chrono::Duration::minutes(1)).await;
    let rotations = p.rotations().await;
    assert!(
        rotations.iter().all(|r| r.step == Step::Failed),
        "{rotations:?}"
    );
    for later in 2..5 {
        p.pass(t0 + chrono::Duration::minutes(later)).await;
    }
    assert_eq!(p.desired_capacity().await, 6, "both surges given back");
    let images = p.images().await;
    assert_eq!(images.len(), 6, "{images:?}");
    assert!(
        images.iter().all(|i| *i == p.old),
        "no instance of the bad AMI left: {images:?}"
    );
    assert_eq!(p.rotations().await.len(), 2, "nothing else started");
}

/// The old instance disappears mid-rotation (Spot reclaim, someone terminates it): Auto
/// Scaling replaces it, and the rotation gives its surge back, so the group ends at its size.
#[tokio::test]
async fn old_instance_vanishing_mid_rotation_gives_the_surge_back() {
    let p = pool(4, "    - nodes: \"1\"\n", false).await;
    let t0 = at("2026-12-01T10:00:00Z");
    p.watcher.handle(&json!({}), t0).await.unwrap();
    let mut now = t0;
    // Run until the first rotation has claimed its replacement (Cordoned).
    let mut victim = None;
    for _ in 0..10 {
        p.pass(now).await;
        now += chrono::Duration::minutes(1);
        if let Some(r) = p
            .rotations()
            .await
            .iter()
            .find(|r| r.step == Step::Cordoned)
        {
            victim = Some(r.instance_id.clone());
            break;
        }
    }
    let victim = victim.expect("a rotation reached Cordoned");
    assert_eq!(p.desired_capacity().await, 5);
    p.adapters
        .clients
        .ec2
        .terminate_instances()
        .instance_ids(&victim)
        .send()
        .await
        .unwrap();
    for _ in 0..40 {
        p.pass(now).await;
        now += chrono::Duration::minutes(1);
        let rotations = p.rotations().await;
        let images = p.images().await;
        if rotations.iter().all(|r| !r.in_flight())
            && images.len() == 4
            && images.iter().all(|i| *i == p.new)
            && p.desired_capacity().await == 4
        {
            break;
        }
    }
    assert_eq!(p.desired_capacity().await, 4, "the surge was given back");
    let images = p.images().await;
    assert!(
        images.len() == 4 && images.iter().all(|i| *i == p.new),
        "{images:?}"
    );
}

/// Two rotators invoked at the same instant in the same process contend for the lease: one
/// works, the other sees the lease held (holders are unique per invocation).
#[tokio::test]
async fn two_rotators_in_one_process_contend_for_the_lease() {
    let p = pool(2, "    - nodes: \"1\"\n", false).await;
    let now = at("2026-12-01T10:00:00Z");
    p.watcher.handle(&json!({}), now).await.unwrap();
    let other = p.rotator.clone();
    let mut contended = 0;
    for i in 0..5 {
        let t = now + chrono::Duration::minutes(i);
        let deadline = Instant::now() + Duration::from_secs(120);
        let tick = json!({});
        let (a, b) = tokio::join!(
            p.rotator.handle(&tick, Invocation::at(t, deadline)),
            other.handle(&tick, Invocation::at(t, deadline)),
        );
        let states: Vec<String> = [a.unwrap(), b.unwrap()]
            .iter()
            .map(|r| r["clusters"]["prod"].as_str().unwrap().to_string())
            .collect();
        if states.iter().any(|s| s.starts_with("lease held")) {
            contended += 1;
        }
    }
    assert!(contended > 0, "the two rotators never contended");
}

/// An invocation of the same process at the same instant holds the lease (the holder the
/// rotator used to derive from the process id and `now`): another invocation must not take it.
#[tokio::test]
async fn a_lease_held_by_another_invocation_of_the_same_process_and_instant_is_respected() {
    let p = pool(2, "    - nodes: \"1\"\n", false).await;
    let now = at("2026-12-01T10:00:00Z");
    p.watcher.handle(&json!({}), now).await.unwrap();
    let same = format!(
        "rotator-{}-{}",
        std::process::id(),
        now.timestamp_nanos_opt().unwrap()
    );
    let taken = nodecycle::state::Repository::new(p.table.clone())
        .acquire_lease("cluster/prod", &same, now, chrono::Duration::minutes(5))
        .await
        .unwrap();
    assert!(taken.is_ok());
    let report = p
        .rotator
        .handle(
            &json!({}),
            Invocation::at(now, Instant::now() + Duration::from_secs(120)),
        )
        .await
        .unwrap();
    let state = report["clusters"]["prod"].as_str().unwrap();
    assert!(state.starts_with("lease held"), "{report}");
    assert!(
        p.rotations().await.is_empty(),
        "nothing done under another's lease"
    );
}
