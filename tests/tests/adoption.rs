//! Adoption never stampedes (docs/concepts.md, Drift and expiry): the getting-started path with
//! the shipped example (examples/prod-general.yaml: `expireAfter: 720h`,
//! `terminationGracePeriod: 2h`, budgets 15% and "3") on a fake-cloud group of 6 nodes aged
//! 1,000 hours. Stored paused, checked, resumed: no pass has more rotations in flight than the
//! budget allows and none is forced. And when forced deadlines did pass while the pool was
//! paused, `validate --live` (exit 1), `status` and the answer of `resume` say "6 of 6 nodes
//! are forced at once" before anything starts.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use crate::cli::{repo, temp_file};
use crate::support;

use chrono::{DateTime, Datelike, TimeDelta, Timelike, Utc};
use serde_json::{Value, json};
use support::Operator;
use support::pool::{Pool, pool};

const PARAMETER: &str = "/nodecycle/pools/prod/general";

/// examples/prod-general.yaml, its terms resolving to `golden-1`, the image the group runs (so
/// its nodes are only expired, never drifted), `paused: true` appended when `paused`.
fn example(paused: bool) -> String {
    let text = std::fs::read_to_string(repo("examples/prod-general.yaml")).unwrap();
    assert!(
        text.contains("  - alias: al2023@v20240807\n"),
        "the example's terms moved"
    );
    let mut text = text.replace(
        "  - alias: al2023@v20240807\n",
        "  - name: golden-1\n    owner: self\n",
    );
    if paused {
        text.push_str("paused: true\n");
    }
    text
}

/// A group of 6 Ready nodes on `golden-1`, launched 1,000 hours ago, with the example stored
/// (paused when `paused`), and an operator.
async fn adopted(paused: bool) -> (Pool, Operator) {
    let p = pool(6, "    - nodes: \"1\"\n", false).await;
    p.cloud.put_parameter(PARAMETER, &example(paused));
    assert_eq!(p.cloud.age_instances("prod-general", 1000).len(), 6);
    let operator = Operator::new(p.adapters.ops(p.rotator.clone()));
    (p, operator)
}

/// `validate --live` of `text` at the real clock, reading the state table.
fn validate_live(p: &Pool, text: &str) -> (Option<i32>, Value) {
    let file = temp_file("adoption.yaml", text);
    crate::cli::validate_live(&p.cloud, &file, &[("NODECYCLE_TABLE", "nodecycle")])
}

async fn status(operator: &Operator, now: DateTime<Utc>) -> Value {
    operator
        .ok(json!({"action": "status", "pool": "prod/general"}), now)
        .await["pools"][0]
        .clone()
}

/// The next Wednesday 02:00 UTC after `t`: outside the example's weekend window, so its
/// Expired budgets allow 1 of 6 (15% rounded up).
fn next_wednesday(t: DateTime<Utc>) -> DateTime<Utc> {
    let mut d = t + TimeDelta::days(1);
    while d.weekday() != chrono::Weekday::Wed {
        d += TimeDelta::days(1);
    }
    d.with_hour(2)
        .and_then(|d| d.with_minute(0))
        .and_then(|d| d.with_second(0))
        .unwrap()
}

#[tokio::test]
async fn adopting_old_nodes_replaces_them_within_the_budget() {
    let (p, operator) = adopted(true).await;

    // Before the watcher has seen it: the first pass over the paused pool would start nothing,
    // and resuming would force nothing (adoption is now), so validate --live has no problem.
    let (code, v) = validate_live(&p, &example(true));
    assert_eq!(code, Some(0), "{v}");
    assert_eq!(v["problems"], json!([]), "{v}");
    let candidates = v["plan"]["candidates"].as_array().unwrap();
    assert_eq!(candidates.len(), 6, "{v}");
    assert!(
        candidates
            .iter()
            .all(|c| c["reason"] == "Expired" && c["forced"] == false),
        "{v}"
    );
    assert!(v["plan"].get("forcedAtOnce").is_none(), "{v}");

    // The watcher adopts the pool; paused, nothing starts, nothing is forced at once.
    let t0 = next_wednesday(Utc::now());
    p.watcher.handle(&json!({}), t0).await.unwrap();
    let record = nodecycle::state::Repository::new(p.table.clone())
        .pool("prod/general")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.adopted_at, Some(t0));
    p.pass(t0).await;
    assert!(p.rotations().await.is_empty());
    let s = status(&operator, t0).await;
    assert_eq!(s["forcedAtOnce"], Value::Null, "{s}");

    // Resumed (the policy stored without `paused`): within the budgets at every pass (15% of
    // the Ready nodes rounded up: 1 of 6, 2 of 7 while a surged replacement is Ready beside
    // the node it replaces), never forced, until all six are replaced.
    p.cloud.put_parameter(PARAMETER, &example(false));
    let mut now = t0 + TimeDelta::minutes(1);
    let mut max_in_flight = 0;
    for _ in 0..150 {
        let report = p.pass(now).await;
        let pool = &report["pools"][0];
        let started = pool["started"].as_array().map_or(0, Vec::len);
        let allowed = pool["allowed"]["Expired"].as_u64().unwrap_or(0);
        assert!(
            started as u64 <= allowed,
            "{started} started at {now}, the budget allowed {allowed}: {report}"
        );
        let rotations = p.rotations().await;
        let in_flight = rotations.iter().filter(|r| r.in_flight()).count();
        max_in_flight = max_in_flight.max(in_flight);
        assert!(
            in_flight <= 2,
            "budget exceeded at {now}: {in_flight} in flight"
        );
        assert!(
            rotations.iter().all(|r| !r.forced),
            "a rotation was forced at {now}: {rotations:?}"
        );
        if in_flight == 0 && rotations.len() == 6 {
            break;
        }
        now += TimeDelta::minutes(1);
    }
    let rotations = p.rotations().await;
    assert_eq!(rotations.len(), 6, "{rotations:?}");
    assert!(rotations.iter().all(|r| !r.in_flight()), "{rotations:?}");
    assert!(max_in_flight >= 1, "nothing was replaced");
}

#[tokio::test]
async fn deadlines_passed_while_paused_are_said_before_anything_starts() {
    let (p, operator) = adopted(false).await;
    // Adopted 800 hours ago (more than expireAfter + terminationGracePeriod, 722h) and paused
    // by an operator since: every node's forced deadline has passed.
    let adopted_at = Utc::now() - TimeDelta::hours(800);
    p.watcher.handle(&json!({}), adopted_at).await.unwrap();
    operator
        .ok(
            json!({"action": "pause", "pool": "prod/general", "reason": "look first"}),
            adopted_at,
        )
        .await;
    let now = Utc::now();
    p.watcher.handle(&json!({}), now).await.unwrap();
    p.pass(now).await;
    assert!(p.rotations().await.is_empty(), "paused: nothing starts");

    // validate --live: a problem, exit 1.
    let (code, v) = validate_live(&p, &example(false));
    assert_eq!(code, Some(1), "{v}");
    let problems: Vec<&str> = v["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m.as_str().unwrap())
        .collect();
    assert!(
        problems
            .iter()
            .any(|m| m.starts_with("6 of 6 nodes are forced at once")),
        "{v}"
    );

    // status says it while paused, naming the pause. (The example's budgets allow 1 of 6 at
    // once on weekdays, 0 in its weekend window: the real clock decides which.)
    let s = status(&operator, now).await;
    assert_eq!(
        (
            s["forcedAtOnce"]["forced"].clone(),
            s["forcedAtOnce"]["nodes"].clone()
        ),
        (json!(6), json!(6)),
        "{s}"
    );
    assert!(s["forcedAtOnce"]["allowed"].as_u64().unwrap() <= 1, "{s}");
    assert!(
        s["forcedAtOnce"]["message"]
            .as_str()
            .unwrap()
            .contains("look first"),
        "{s}"
    );

    // The answer of resume carries it.
    let resumed = operator
        .ok(
            json!({"action": "resume", "pool": "prod/general", "reason": "go"}),
            now,
        )
        .await;
    assert_eq!(resumed["forcedAtOnce"]["forced"], 6, "{resumed}");
}
