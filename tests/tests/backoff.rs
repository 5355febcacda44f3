//! Fair progress (fake cloud + Kubernetes stand-in, real SDK, the real rotator): a pool whose
//! passes keep failing (its Auto Scaling group is gone) backs off, 1 minute doubling to 10 with
//! jitter, recorded in its state record, while the other pool of the cluster rolls on at every
//! pass; *Pool Backing Off* goes out once and the record says why.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use crate::support;

use chrono::{TimeDelta, Utc};
use nodecycle::rotation::Step;
use support::{capture, delivered};

const QUEUE: &str = "backoff-events";

#[tokio::test]
async fn a_failing_pool_backs_off_and_never_holds_up_the_others() {
    let p = support::pool::pool(4, "    - nodes: \"1\"\n", false).await;
    p.cloud.put_parameter(
        "/nodecycle/pools/prod/broken",
        "cluster: prod\nname: broken\nnodeGroup: { autoScalingGroup: prod-gone }\narchitecture: x86_64\namiSelectorTerms:\n  - name: golden-*\n    owner: self\n",
    );
    capture(&p.cloud, QUEUE).await;
    let t0 = Utc::now();
    p.watcher.handle(&serde_json::json!({}), t0).await.unwrap();
    let mut tried = Vec::new();
    let mut skipped = 0;
    let mut done_at = None;
    for minute in 0..30 {
        let report = p.pass(t0 + TimeDelta::minutes(minute)).await;
        let of = |pool: &str| {
            report["pools"]
                .as_array()
                .unwrap()
                .iter()
                .find(|r| r["pool"] == pool)
                .cloned()
                .unwrap()
        };
        let general = of("prod/general");
        assert!(
            general["errors"].as_array().unwrap().is_empty()
                && !general["blocked"]
                    .as_str()
                    .unwrap_or_default()
                    .starts_with("backing off"),
            "minute {minute}: the other pool goes on: {general}"
        );
        let broken = of("prod/broken");
        if !broken["errors"].as_array().unwrap().is_empty() {
            tried.push(minute);
        } else if broken["blocked"]
            .as_str()
            .unwrap_or_default()
            .starts_with("backing off")
        {
            skipped += 1;
        }
        let rotations = p.rotations().await;
        if done_at.is_none()
            && rotations.len() == 4
            && rotations.iter().all(|r| r.step == Step::Done)
        {
            done_at = Some(minute);
        }
    }
    // The healthy pool rolled through all four nodes at budget 1 meanwhile.
    assert!(done_at.is_some(), "the other pool finished its rollout");
    // The failing pool was tried at growing intervals: 0, 1, then each wait about twice the
    // last (less up to a fifth), never more than 10 minutes.
    assert!(tried.len() >= 4 && tried.len() <= 8, "tried at {tried:?}");
    let gaps: Vec<i64> = tried.windows(2).map(|w| w[1] - w[0]).collect();
    for w in gaps.windows(2) {
        assert!(w[1] >= w[0], "the waits grow: {tried:?}");
    }
    assert!(
        gaps.iter().all(|g| *g <= 10),
        "at most 10 minutes: {tried:?}"
    );
    assert_eq!(skipped as usize + tried.len(), 30, "{tried:?}");
    let record = nodecycle::state::Repository::new(p.table.clone())
        .pool("prod/broken")
        .await
        .unwrap()
        .expect("record");
    let b = record.backoff.expect("backing off");
    assert_eq!(b.failures as usize, tried.len());
    assert!(b.reason.contains("prod-gone"), "{}", b.reason);
    let events = delivered(&p.cloud, QUEUE);
    let backing: Vec<_> = events
        .iter()
        .filter(|e| e["detail-type"] == "Pool Backing Off")
        .collect();
    assert_eq!(backing.len(), 1, "once per episode");
    assert_eq!(backing[0]["detail"]["pool"], "prod/broken");
}
