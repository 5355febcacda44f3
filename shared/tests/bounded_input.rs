//! Hostile input within bounded memory: arbitrary bytes and generated YAML/JSON (anchors and
//! aliases included) through the policy parser, and arbitrary JSON through the event
//! classifiers and the ops request parser, each call under a capped global allocator
//! (`cap`): past the cap an allocation fails and the test binary aborts, so "no panic" and
//! "bounded memory" are both asserted by the run itself.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::alloc::System;
use std::sync::Mutex;

use cap::Cap;
use nodecycle::policy::source::PolicyDocument;
use proptest::prelude::*;
use serde_json::Value;

#[global_allocator]
static ALLOCATOR: Cap<System> = Cap::new(System, usize::MAX);

/// What one call may allocate on top of what the process holds: well under a function's
/// 256 MB, as issue 21 asks (any document under 8 KB in well under 64 MB).
const BUDGET: usize = 64 * 1024 * 1024;

/// One capped call at a time (the cap is process-wide).
static SERIAL: Mutex<()> = Mutex::new(());

/// Runs `f` with at most [`BUDGET`] bytes more than are allocated now.
fn capped<T>(f: impl FnOnce() -> T) -> T {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    ALLOCATOR
        .set_limit(ALLOCATOR.allocated() + BUDGET)
        .expect("set the cap");
    let out = f();
    ALLOCATOR.set_limit(usize::MAX).expect("lift the cap");
    out
}

const HEADER: &str = "cluster: prod\nname: general\nnodeGroup: { autoScalingGroup: prod-general }\namiSelectorTerms: [{ alias: al2023@latest }]\n";

/// The documents of the report: 1,486 bytes that expanded to 525 MB, and the 3.5 KB variant
/// that aborted the process.
fn laughs(a: usize, b: usize, c: usize) -> String {
    let list = |item: &str, n: usize| vec![item; n].join(",");
    format!(
        "{HEADER}x: &a [{}]\ny: &b [{}]\nz: [{}]\n",
        list("1", a),
        list("*a", b),
        list("*b", c)
    )
}

/// Values in `v`, keys included: what [`nodecycle::policy::limits::MAX_NODES`] bounds.
fn nodes(v: &Value) -> usize {
    match v {
        Value::Array(items) => 1 + items.iter().map(nodes).sum::<usize>(),
        Value::Object(map) => 1 + map.values().map(|v| 1 + nodes(v)).sum::<usize>(),
        _ => 1,
    }
}

/// The bound is checked on saphyr-parser's events, the document read by serde_norway: what
/// the check lets through must be no bigger once serde_norway has expanded it.
fn the_check_bounds_what_is_deserialized(text: &str) {
    use nodecycle::policy::limits;
    if limits::check(text).is_ok()
        && let Ok(v) = serde_norway::from_str::<Value>(text)
    {
        assert!(nodes(&v) <= limits::MAX_NODES, "{} values", nodes(&v));
    }
}

fn parse_all_ways(text: &str) {
    the_check_bounds_what_is_deserialized(text);
    let parsed = nodecycle::policy::parse(text);
    // Every message quotes at most a prefix of what it was given.
    for p in &parsed.problems.0 {
        assert!(p.to_string().len() < 4096, "{}", p.to_string().len());
    }
    let doc = PolicyDocument::parameter("/nodecycle/pools/", "/nodecycle/pools/prod/general", text);
    let _ = nodecycle::policy::parse_document(&doc);
    let _ = nodecycle::policy::locate(&doc);
}

#[test]
fn the_reported_documents_are_refused_within_the_budget() {
    for (a, b, c) in [(300, 200, 50), (700, 450, 200)] {
        let doc = laughs(a, b, c);
        assert!(doc.len() < 4 * 1024, "{}", doc.len());
        let parsed = capped(|| nodecycle::policy::parse(&doc));
        assert!(parsed.policy.is_none());
        let e = parsed.problems.errors().next().unwrap();
        assert!(e.path.starts_with("y["), "{e}");
        assert!(e.message.contains("more than 10000 values"), "{e}");
        capped(|| parse_all_ways(&doc));
    }
    // Nested aliases of long text, and deep nesting.
    let text = format!(
        "{HEADER}a: &s \"{}\"\nb: &t [*s,*s,*s,*s,*s,*s,*s,*s]\nc: [*t,*t,*t,*t,*t,*t,*t,*t]\n",
        "x".repeat(7000)
    );
    capped(|| parse_all_ways(&text));
    let deep = format!("{}{}", "[".repeat(4000), "]".repeat(4000));
    capped(|| parse_all_ways(&deep));
}

/// YAML with anchors and aliases: each line `kN: &aN [...]` lists scalars and aliases of
/// earlier anchors, so the expansion can grow exponentially in the number of lines.
fn yaml_with_aliases() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop::collection::vec((any::<bool>(), 0usize..8, "[a-z0-9]{0,6}"), 0..40),
        1..8,
    )
    .prop_map(|lines| {
        let mut out = String::from(HEADER);
        for (i, items) in lines.iter().enumerate() {
            let items: Vec<String> = items
                .iter()
                .map(|(alias, j, s)| {
                    if *alias && i > 0 {
                        format!("*a{}", j % i)
                    } else {
                        format!("\"{s}\"")
                    }
                })
                .collect();
            out.push_str(&format!("k{i}: &a{i} [{}]\n", items.join(", ")));
        }
        out
    })
}

/// Arbitrary JSON values, nested.
fn json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        ".{0,40}".prop_map(Value::String),
        prop::sample::select(vec![
            "EC2 Spot Instance Interruption Warning",
            "EC2 Instance State-change Notification",
            "EC2 Instance-terminate Lifecycle Action",
            "AWS Health Event",
            "aws.ec2",
            "aws.autoscaling",
            "aws.health",
            "i-0123456789abcdef0",
            "2026-12-01T10:00:00Z",
            "terminated",
        ])
        .prop_map(|s| Value::String(s.to_string())),
    ];
    leaf.prop_recursive(4, 64, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
            prop::collection::btree_map(
                prop::sample::select(vec![
                    "detail-type",
                    "source",
                    "detail",
                    "id",
                    "time",
                    "account",
                    "region",
                    "instance-id",
                    "state",
                    "action",
                    "pool",
                    "reason",
                    "pools",
                    "x",
                ]),
                inner,
                0..8
            )
            .prop_map(|m| Value::Object(m.into_iter().map(|(k, v)| (k.to_string(), v)).collect())),
        ]
    })
}

fn classify_all_ways(v: &Value) {
    let _ = nodecycle::event::instance_events::interruption_event(v);
    let _ = nodecycle::event::watcher_trigger(v);
    let _ = nodecycle::event::rotator_selection(v);
    // The ops request parser lives with the handlers (feature `aws`).
    #[cfg(feature = "aws")]
    let _ = nodecycle::handlers::ops::request::parse(v);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_parse_within_the_budget(bytes in prop::collection::vec(any::<u8>(), 0..2048)) {
        let text = String::from_utf8_lossy(&bytes).into_owned();
        capped(|| parse_all_ways(&text));
        if let Ok(v) = serde_json::from_slice::<Value>(&bytes) {
            capped(|| classify_all_ways(&v));
        }
    }

    #[test]
    fn aliased_yaml_parses_within_the_budget(text in yaml_with_aliases()) {
        capped(|| parse_all_ways(&text));
    }

    #[test]
    fn json_documents_parse_and_classify_within_the_budget(v in json()) {
        let text = v.to_string();
        capped(|| parse_all_ways(&text));
        capped(|| classify_all_ways(&v));
        let mut envelope = serde_json::json!({
            "version": "0", "id": "e", "detail-type": "EC2 Spot Instance Interruption Warning",
            "source": "aws.ec2", "account": "123456789012", "time": "2026-12-01T10:00:00Z",
            "region": "us-east-2", "resources": [], "detail": {}
        });
        envelope["detail"] = v;
        capped(|| classify_all_ways(&envelope));
    }
}
