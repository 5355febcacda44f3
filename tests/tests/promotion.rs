//! Tiered rollout end to end: pool `test/general` follows `al2023@latest`, pool `prod/general`
//! (another cluster, another Kubernetes version) takes only releases proven in test. A bad
//! release is quarantined where it fails and rolled back there, and never reaches prod; a good
//! release reaches prod no earlier than its soak; promotion alarms hold it back.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use crate::support;

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use nodecycle::promotion::{Release, Target};
use nodecycle::rotation::Step;
use support::pool::at;
use support::stages::*;

/// Pool of 6 in test with budget "2", a new release whose nodes never become Ready: at most 2
/// rotations, the release is quarantined in the pass where the replacements time out, the
/// launch template launches the previous AMI again in that pass, no surge is left, every node
/// ends on the previous AMI uncordoned, and prod never records the bad release as desired.
#[tokio::test]
async fn a_bad_release_is_quarantined_and_rolled_back_in_test_and_never_reaches_prod() {
    let mut s = stages(
        Stage {
            nodes: 6,
            budget: "2",
        },
        Stage {
            nodes: 3,
            budget: "1",
        },
        "    soak: 1h\n",
    )
    .await;
    s.rotator.settings.replacement_timeout = Duration::from_secs(20);
    let metrics = std::sync::Arc::new(support::CapturedMetrics::default());
    s.rotator.metrics = metrics.clone();
    let t0 = at("2026-12-01T10:00:00Z");
    s.watch(t0).await;
    s.pass(t0).await;
    assert_eq!(
        s.record("prod/general").await.desired.unwrap().id,
        s.prod_old
    );

    let (bad, prod_bad) = s.publish_new();
    s.never_ready_in_test(&bad);
    let t1 = t0 + minutes(5);
    s.watch(t1).await;
    assert_eq!(s.record("test/general").await.desired.unwrap().id, bad);
    s.pass(t1).await;
    let started = s.rotations("test/general").await;
    assert_eq!(started.len(), 2, "budget 2: {started:?}");
    assert_eq!(
        s.group("test-general").await,
        (8, bad.clone()),
        "two surges"
    );

    // The replacements time out in this pass: quarantine, rollback, launch template back.
    let t2 = t1 + minutes(1);
    s.pass(t2).await;
    let q = s.quarantined().await;
    assert!(
        q.0.iter()
            .any(|e| e.target == Target::Release(Release(NEW.into()))),
        "release quarantined: {q:?}"
    );
    assert_eq!(
        s.group("test-general").await.1,
        s.test_old,
        "the launch template launches the previous AMI again in the same pass"
    );
    let rec = s.record("test/general").await;
    assert_eq!(rec.desired.as_ref().unwrap().id, s.test_old);
    assert!(rec.halted.is_none(), "the halt is lifted for the rollback");
    // The passes' metrics: two rotations started and failed, six nodes drifted while the
    // pool was on the bad release, never halted at a pass's start.
    assert_eq!(metrics.sum("test/general", "RotationsStarted"), 2.0);
    assert_eq!(metrics.sum("test/general", "RotationsFailed"), 2.0);
    assert!(metrics.sum("test/general", "DriftedNodes") >= 6.0);
    assert_eq!(metrics.sum("test/general", "PoolsHalted"), 0.0);
    assert_eq!(metrics.sum("prod/general", "RotationsStarted"), 0.0);

    // Settles: every node on the previous AMI, none cordoned, group at its size.
    let mut now = t2 + minutes(1);
    let settled = until(&s, &mut now, 40, async |s: &Stages| {
        let images = s.images("test-general").await;
        images.len() == 6
            && images.iter().all(|i| *i == s.test_old)
            && s.group("test-general").await.0 == 6
            && s.rotations("test/general")
                .await
                .iter()
                .all(|r| !r.in_flight())
    })
    .await;
    assert!(
        settled,
        "test pool back on {}: {:?}, capacity {:?}, rotations {:?}",
        s.test_old,
        s.images("test-general").await,
        s.group("test-general").await,
        s.rotations("test/general").await
    );
    s.test_kube.wait_for(
        "nodes of the replaced instances leave",
        Duration::from_secs(30),
        |k| (k.nodes.len() == 6).then_some(()),
    );
    assert!(Stages::cordoned(&s.test_kube).is_empty());
    let failed = s
        .rotations("test/general")
        .await
        .iter()
        .filter(|r| r.step == Step::Failed)
        .count();
    assert!(failed <= 2, "at most the budget of nodes rotated");
    let events = s.test_kube.state().events;
    let failures: Vec<&serde_json::Value> = events
        .iter()
        .filter(|e| e["reason"] == "RotationFailed")
        .collect();
    assert_eq!(failures.len(), 2, "{events:?}");
    assert!(
        failures.iter().all(|e| e["type"] == "Warning"),
        "{failures:?}"
    );

    // Long after any soak, prod still never desired the bad release.
    for later in [2, 6, 30] {
        s.watch(now + TimeDelta::hours(later)).await;
        s.pass(now + TimeDelta::hours(later)).await;
    }
    let prod = s.record("prod/general").await;
    assert_eq!(prod.desired.as_ref().unwrap().id, s.prod_old);
    assert!(
        prod.history.iter().all(|h| h.ami.id != prod_bad)
            && prod.releases.iter().all(|e| e.release.as_str() != NEW),
        "{prod:?}"
    );
    assert!(
        s.images("prod-general")
            .await
            .iter()
            .all(|i| *i == s.prod_old)
    );
    // The watcher keeps the test pool off the quarantined release although @latest is it.
    assert_eq!(
        s.record("test/general").await.desired.unwrap().id,
        s.test_old
    );
}

/// Rolls the test pool to the new release; returns the pass time at which all its nodes were
/// on it (the soak starts there).
async fn roll_test(s: &Stages, now: &mut DateTime<Utc>, new: &str) -> DateTime<Utc> {
    let on_new = until(s, now, 60, async |s: &Stages| {
        let images = s.images("test-general").await;
        images.len() == 4
            && images.iter().all(|i| i == new)
            && s.record("test/general")
                .await
                .ledger
                .iter()
                .any(|p| p.until.is_none() && p.release.as_str() == NEW)
    })
    .await;
    assert!(on_new, "test rolled to {new}");
    let rec = s.record("test/general").await;
    rec.ledger
        .iter()
        .find(|p| p.until.is_none() && p.release.as_str() == NEW)
        .unwrap()
        .since
}

/// A good release: prod's desired changes no earlier than the soak after test's last node became
/// Ready on it, then prod rolls within its own budget.
#[tokio::test]
async fn a_good_release_reaches_prod_after_its_soak_and_rolls_within_budget() {
    let s = stages(
        Stage {
            nodes: 4,
            budget: "2",
        },
        Stage {
            nodes: 3,
            budget: "1",
        },
        "    soak: 2h\n",
    )
    .await;
    let mut now = at("2026-12-01T10:00:00Z");
    s.watch(now).await;
    s.pass(now).await;
    let (new, prod_new) = s.publish_new();
    now += minutes(5);
    let since = roll_test(&s, &mut now, &new).await;

    // Before the soak has passed: prod keeps its AMI and says what it waits for.
    for t in [now, since + TimeDelta::hours(2) - minutes(1)] {
        s.watch(t).await;
        let prod = s.record("prod/general").await;
        assert_eq!(prod.desired.as_ref().unwrap().id, s.prod_old, "at {t}");
        assert!(prod.promotion_wait.is_some(), "a wait reason at {t}");
    }
    // Soak passed: prod's desired is the same release for its own Kubernetes version.
    let mut now = since + TimeDelta::hours(2) + minutes(1);
    s.watch(now).await;
    let prod = s.record("prod/general").await;
    assert_eq!(prod.desired.as_ref().unwrap().id, prod_new);
    assert!(
        prod.desired_changed_at.unwrap() >= since + TimeDelta::hours(2),
        "{prod:?}"
    );
    assert!(prod.releases.iter().any(|e| e.release.as_str() == NEW));

    // Prod rolls, never more than its budget (1) at once.
    let mut most = 0;
    let rolled = until(&s, &mut now, 60, async |s: &Stages| {
        let in_flight = s
            .rotations("prod/general")
            .await
            .iter()
            .filter(|r| r.in_flight())
            .count();
        most = most.max(in_flight);
        let images = s.images("prod-general").await;
        images.len() == 3 && images.iter().all(|i| *i == prod_new)
    })
    .await;
    assert!(rolled, "prod rolled: {:?}", s.images("prod-general").await);
    assert_eq!(most, 1, "budget 1");
    // `kubectl describe node` tells the story: each replaced node got its events.
    let events = s.prod_kube.state().events;
    let count = |reason: &str| events.iter().filter(|e| e["reason"] == reason).count();
    assert_eq!(count("RotationStarted"), 3, "{events:?}");
    assert_eq!(count("RotationTerminating"), 3, "{events:?}");
}

/// A promotion alarm in ALARM during the soak holds the release back until a full clean soak
/// after the alarm's last change; the same alarm firing while prod rolls to the release
/// quarantines it and rolls prod back.
#[tokio::test]
async fn promotion_alarms_hold_a_release_back_and_quarantine_it_during_the_rollout() {
    let s = stages(
        Stage {
            nodes: 4,
            budget: "2",
        },
        Stage {
            nodes: 2,
            budget: "1",
        },
        "    soak: 2h\n    alarms: [prod-canary-errors]\n",
    )
    .await;
    let cw = &s.adapters.clients.cloudwatch;
    cw.put_metric_alarm()
        .alarm_name("prod-canary-errors")
        .namespace("canary")
        .metric_name("Errors")
        .statistic(aws_sdk_cloudwatch::types::Statistic::Sum)
        .period(60)
        .evaluation_periods(1)
        .threshold(1.0)
        .comparison_operator(aws_sdk_cloudwatch::types::ComparisonOperator::GreaterThanThreshold)
        .send()
        .await
        .unwrap();
    // The rollout in test happens in the past, so that the alarm's state changes (stamped
    // with the real clock) fall inside the soak.
    let mut now = Utc::now() - TimeDelta::hours(3);
    s.watch(now).await;
    s.pass(now).await;
    let (new, prod_new) = s.publish_new();
    now += minutes(5);
    let since = roll_test(&s, &mut now, &new).await;
    assert!(
        since + TimeDelta::hours(2) < Utc::now(),
        "soak elapsed by the clock"
    );

    let set = |state: aws_sdk_cloudwatch::types::StateValue| {
        cw.set_alarm_state()
            .alarm_name("prod-canary-errors")
            .state_value(state)
            .state_reason("test")
            .send()
    };
    set(aws_sdk_cloudwatch::types::StateValue::Alarm)
        .await
        .unwrap();
    s.watch(Utc::now()).await;
    let prod = s.record("prod/general").await;
    assert_eq!(
        prod.desired.as_ref().unwrap().id,
        s.prod_old,
        "held while in ALARM"
    );
    std::thread::sleep(Duration::from_millis(1100));
    set(aws_sdk_cloudwatch::types::StateValue::Ok)
        .await
        .unwrap();
    let cleared = Utc::now();
    // The soak had passed by the ledger, but the alarm changed during it: wait a clean soak.
    s.watch(cleared + minutes(1)).await;
    assert_eq!(
        s.record("prod/general").await.desired.unwrap().id,
        s.prod_old,
        "a full clean soak has not passed since the alarm cleared"
    );
    s.watch(cleared + TimeDelta::hours(2) - minutes(1)).await;
    assert_eq!(
        s.record("prod/general").await.desired.unwrap().id,
        s.prod_old
    );
    s.watch(cleared + TimeDelta::hours(2) + minutes(1)).await;
    assert_eq!(s.record("prod/general").await.desired.unwrap().id, prod_new);
    assert!(
        s.quarantined().await.0.is_empty(),
        "prod was not rolling: no quarantine"
    );

    // The alarm fires while prod rolls to the release: the release is quarantined and prod
    // goes back to its previous AMI, launch template first.
    let mut now = cleared + TimeDelta::hours(2) + minutes(2);
    s.pass(now).await;
    assert!(
        s.rotations("prod/general")
            .await
            .iter()
            .any(|r| r.in_flight()),
        "prod is rolling"
    );
    set(aws_sdk_cloudwatch::types::StateValue::Alarm)
        .await
        .unwrap();
    now += minutes(1);
    s.watch(now).await;
    let q = s.quarantined().await;
    assert!(
        q.0.iter().any(|e| e.target == Target::Release(Release(NEW.into()))
            && matches!(&e.cause, nodecycle::promotion::Cause::Alarm { pool, .. } if pool == "prod/general")),
        "{q:?}"
    );
    s.pass(now).await;
    assert_eq!(
        s.record("prod/general").await.desired.unwrap().id,
        s.prod_old
    );
    assert_eq!(s.group("prod-general").await.1, s.prod_old);
    let back = until(&s, &mut now, 40, async |s: &Stages| {
        let images = s.images("prod-general").await;
        images.len() == 2
            && images.iter().all(|i| *i == s.prod_old)
            && s.rotations("prod/general")
                .await
                .iter()
                .all(|r| !r.in_flight())
    })
    .await;
    assert!(
        back,
        "prod back on {}: {:?}",
        s.prod_old,
        s.images("prod-general").await
    );
}
