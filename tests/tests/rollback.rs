//! Rollback of nodecycle itself (issue 47, part 6): this version rolls a pool part of the way,
//! then the previous release (scripts/rollback-baseline, its `nodecycle` CLI built by
//! scripts/baseline.sh, path in `NODECYCLE_BASELINE_BIN`) runs its ami-watcher and rotator
//! passes over the same table, as after `sam deploy` of the previous version over the same
//! stack: it reads or safely ignores what this version wrote. Every pool keeps its desired AMI,
//! no rotation is lost or broken, and this version, deployed again, finishes the rollout.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use crate::support;

use chrono::Utc;
use nodecycle::rotation::Step;
use serde_json::{Value, json};
use support::pool::{Pool, pool};

/// The variable scripts/test.sh sets to the previous release's CLI (scripts/baseline.sh).
const ENV_BIN: &str = "NODECYCLE_BASELINE_BIN";

/// `nodecycle run <function>` of the previous release, against the pool's cloud and table, with
/// the environment template.yaml gives the function: its JSON answer.
fn run_previous(p: &Pool, function: &str) -> Value {
    let bin = std::env::var_os(ENV_BIN).unwrap_or_else(|| {
        panic!(
            "{ENV_BIN} is not set: run scripts/baseline.sh and set {ENV_BIN} to the path it prints"
        )
    });
    let out = crate::runtime::run_nodecycle(
        std::path::Path::new(&bin),
        &p.cloud,
        function,
        &json!({}),
        &[("NODECYCLE_TABLE", "nodecycle")],
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "the previous release's {function} answered no JSON ({e}): {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// The pool's desired AMI as its state record holds it.
async fn desired(p: &Pool) -> Option<String> {
    nodecycle::state::Repository::new(p.table.clone())
        .pool("prod/general")
        .await
        .unwrap()
        .and_then(|r| r.desired.map(|a| a.id))
}

#[tokio::test]
async fn the_previous_release_over_this_versions_table_keeps_every_pool_and_rotation() {
    let p = pool(6, "    - nodes: \"2\"\n", false).await;
    // This version: the watcher resolves the new AMI, passes roll until some rotations are
    // done and others in flight.
    p.watcher.handle(&json!({}), Utc::now()).await.unwrap();
    let mut rolled = false;
    for _ in 0..40 {
        p.pass(Utc::now()).await;
        let rotations = p.rotations().await;
        let done = rotations.iter().filter(|r| r.step == Step::Done).count();
        let in_flight = rotations.iter().filter(|r| r.in_flight()).count();
        if done >= 1 && in_flight >= 1 {
            rolled = true;
            break;
        }
    }
    assert!(
        rolled,
        "the rollout is under way: {:#?}",
        p.rotations().await
    );
    let want = desired(&p).await;
    assert_eq!(want.as_deref(), Some(p.new.as_str()));
    let before = p.rotations().await;

    // The previous release over the same table: its watcher and three rotator passes.
    let watched = run_previous(&p, "ami-watcher");
    assert_eq!(
        watched["pools"][0]["desired"],
        p.new.as_str(),
        "the previous release resolves the same AMI: {watched}"
    );
    for _ in 0..3 {
        let report = run_previous(&p, "rotator");
        let pools = report["pools"].as_array().cloned().unwrap_or_default();
        assert_eq!(pools.len(), 1, "the pool is read: {report}");
        assert!(
            pools[0]["errors"].as_array().is_none_or(|e| e.is_empty()),
            "the previous release reads what this version wrote: {report}"
        );
    }
    assert_eq!(desired(&p).await, want, "the pool keeps its desired AMI");
    let after = p.rotations().await;
    for r in &before {
        let now = after
            .iter()
            .find(|a| a.instance_id == r.instance_id)
            .unwrap_or_else(|| panic!("rotation of {} lost: {after:#?}", r.instance_id));
        assert!(
            !matches!(now.step, Step::Failed | Step::Cancelled),
            "rotation of {} broken by the previous release: {now:#?}",
            r.instance_id
        );
    }
    let record = nodecycle::state::Repository::new(p.table.clone())
        .pool("prod/general")
        .await
        .unwrap()
        .unwrap();
    assert!(record.halted.is_none(), "not halted: {:?}", record.halted);

    // This version again: the rollout finishes on the new AMI.
    let mut finished = false;
    for _ in 0..60 {
        p.pass(Utc::now()).await;
        let images = p.images().await;
        let rotations = p.rotations().await;
        if images.len() == 6
            && images.iter().all(|i| *i == p.new)
            && rotations.iter().all(|r| !r.in_flight())
        {
            finished = true;
            break;
        }
    }
    assert!(
        finished,
        "the rollout finished: {:?} {:#?}",
        p.images().await,
        p.rotations().await
    );
    assert!(
        p.rotations().await.iter().all(|r| r.step == Step::Done),
        "{:#?}",
        p.rotations().await
    );
}
