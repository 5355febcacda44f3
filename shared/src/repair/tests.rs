use super::*;

fn t(min: i64) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-12-05T00:00:00Z")
        .map(|d| d.with_timezone(&Utc))
        .unwrap_or_default()
        + Duration::minutes(min)
}

fn ready(status: &str, since: i64) -> Condition {
    Condition {
        kind: "Ready".into(),
        status: status.into(),
        reason: None,
        since: Some(t(since)),
    }
}

/// Node `i` in zone `a`, `b` or `c` (round robin), joined at 0, Ready since 1.
fn node(i: usize) -> Node {
    Node {
        instance_id: format!("i-{i}"),
        zone: ["a", "b", "c"][i % 3].into(),
        image: Some("ami-old".into()),
        joined: t(0),
        conditions: vec![ready("True", 1)],
        opt_out: None,
        do_not_repair: false,
        in_flight: false,
    }
}

/// `n` healthy nodes, those in `bad` NotReady since minute `since`.
fn pool(n: usize, bad: &[usize], since: i64) -> Vec<Node> {
    (0..n)
        .map(|i| {
            let mut node = node(i);
            if bad.contains(&i) {
                node.conditions = vec![ready("False", since)];
            }
            node
        })
        .collect()
}

fn ids(p: &Plan) -> Vec<&str> {
    p.repairs.iter().map(|r| r.instance_id.as_str()).collect()
}

fn run(nodes: &[Node], now: i64) -> Plan {
    plan(
        nodes,
        &RepairPolicy::default(),
        &BTreeMap::new(),
        &[],
        1,
        t(now),
    )
}

#[test]
fn a_node_bad_for_its_duration_is_repaired_and_not_before() {
    let nodes = pool(6, &[2], 100);
    assert!(run(&nodes, 129).repairs.is_empty(), "29 minutes NotReady");
    let p = run(&nodes, 130);
    assert_eq!(ids(&p), ["i-2"]);
    assert_eq!(p.repairs[0].condition, "Ready");
    assert_eq!(p.repairs[0].since, t(100));
    assert_eq!(p.suspended, None);
    // The monitoring agent's conditions: AcceleratedHardwareReady after 10 minutes.
    let mut gpu = pool(6, &[], 0);
    gpu[4].conditions.push(Condition {
        kind: "AcceleratedHardwareReady".into(),
        status: "False".into(),
        reason: Some("DCGMError".into()),
        since: Some(t(100)),
    });
    assert_eq!(ids(&run(&gpu, 110)), ["i-4"]);
    // Repair off: nothing.
    let off = RepairPolicy {
        enabled: false,
        ..RepairPolicy::default()
    };
    assert!(
        plan(&nodes, &off, &BTreeMap::new(), &[], 1, t(200))
            .repairs
            .is_empty()
    );
}

#[test]
fn the_circuit_breaker_stops_repair_when_much_of_a_pool_or_a_zone_is_unhealthy() {
    // 3 of 6 at once: an outage, not nodes.
    let p = run(&pool(6, &[0, 1, 2], 100), 200);
    assert!(p.repairs.is_empty());
    assert!(
        p.suspended
            .as_deref()
            .is_some_and(|w| w.contains("3 of 6 nodes of the pool")),
        "{p:?}"
    );
    // A false-positive flood on half of 20 nodes: nothing.
    let flood: Vec<usize> = (0..10).collect();
    assert!(run(&pool(20, &flood, 100), 200).suspended.is_some());
    // 3 of zone a's 10 nodes (30%) in a 30-node pool (10%): the zone trips.
    let big = pool(30, &[0, 3, 6], 100);
    let z = run(&big, 200);
    assert!(
        z.suspended
            .as_deref()
            .is_some_and(|w| w.contains("3 of 10 nodes in zone a")),
        "{z:?}"
    );
    // One node is never an outage, even alone in its zone.
    assert_eq!(ids(&run(&pool(2, &[0], 100), 200)), ["i-0"]);
}

#[test]
fn opt_outs_and_releases_under_watch_hold_a_repair_and_say_why() {
    let mut nodes = pool(10, &[1, 2], 100);
    nodes[1].do_not_repair = true;
    nodes[2].image = Some("ami-new".into());
    let p = plan(
        &nodes,
        &RepairPolicy::default(),
        &BTreeMap::new(),
        &["ami-new".to_string()],
        2,
        t(200),
    );
    assert!(p.repairs.is_empty(), "{p:?}");
    let why: BTreeMap<&str, &str> = p
        .held
        .iter()
        .map(|(i, w)| (i.as_str(), w.as_str()))
        .collect();
    assert!(why["i-1"].contains("do-not-repair"));
    assert!(why["i-2"].contains("under watch"));
}

#[test]
fn slow_start_paces_each_domain_and_parallelism_bounds_the_pool() {
    // Two due nodes in one domain (zone a, Ready, ami-old): width 1 starts one.
    let nodes = pool(30, &[0, 3], 100);
    let policy = RepairPolicy {
        max_unhealthy_percent: 100,
        ..RepairPolicy::default()
    };
    let p = plan(&nodes, &policy, &BTreeMap::new(), &[], 5, t(200));
    assert_eq!(ids(&p), ["i-0"]);
    assert!(
        p.held
            .iter()
            .any(|(i, w)| i == "i-3" && w.contains("slow start"))
    );
    // Settled healthy: width 2, but the round's cooldown holds the next for 5 minutes.
    let domain = p.repairs[0].domain.clone();
    let settled: BTreeMap<Domain, SlowStart> = p
        .slow_start
        .iter()
        .map(|(d, s)| (d.clone(), s.settle(true)))
        .collect();
    assert_eq!(settled[&domain].width, 2);
    let rest: Vec<Node> = nodes
        .iter()
        .filter(|n| n.instance_id != "i-0")
        .cloned()
        .collect();
    assert!(
        plan(&rest, &policy, &settled, &[], 5, t(204))
            .repairs
            .is_empty(),
        "cooling down"
    );
    assert_eq!(
        ids(&plan(&rest, &policy, &settled, &[], 5, t(205))),
        ["i-3"]
    );
    // A failed repair: back to width 1.
    assert_eq!(
        SlowStart {
            width: 8,
            in_flight: 1,
            round_at: None
        }
        .settle(false)
        .width,
        1
    );
    // Different domains (zones a and b) start together, within maxParallel.
    let two = pool(30, &[0, 1], 100);
    assert_eq!(
        ids(&plan(&two, &policy, &BTreeMap::new(), &[], 2, t(200))),
        ["i-0", "i-1"]
    );
    let one = plan(&two, &policy, &BTreeMap::new(), &[], 1, t(200));
    assert_eq!(ids(&one), ["i-0"], "one already in flight");
    assert!(
        one.held
            .iter()
            .any(|(_, w)| w.contains("1 repair(s) could start"))
    );
}

#[test]
fn the_unhealthy_budget_does_not_count_nodes_that_are_not_ready() {
    let budgets = |json: serde_json::Value| {
        crate::budget::parse_budgets(
            Some(&json),
            "disruption.budgets",
            &mut crate::problem::Problems::default(),
        )
    };
    let policy = RepairPolicy {
        max_parallel: 2,
        ..RepairPolicy::default()
    };
    // (budgets, total, disrupting, of them not Ready, repairs in flight) -> repairs that may
    // start now.
    let named = budgets(serde_json::json!([{"nodes": "3", "reasons": ["Unhealthy"]}]));
    let general = budgets(serde_json::json!([{"nodes": "1"}]));
    type Case<'a> = (&'a Vec<crate::budget::Budget>, u32, u32, u32, u32, u32);
    let cases: [Case<'_>; 6] = [
        // 2 NotReady nodes do not eat the Unhealthy budget of 3.
        (&named, 10, 2, 2, 0, 3),
        // A rotation in flight does (a repair in flight is one: it counts as disrupting).
        (&named, 10, 3, 2, 1, 2),
        // No budget names Unhealthy: repair.maxParallel, whatever the others say...
        (&general, 10, 2, 2, 0, 2),
        (&Vec::new(), 10, 0, 0, 0, 2),
        // ... less the repairs in flight.
        (&general, 10, 3, 2, 1, 1),
        (&Vec::new(), 10, 2, 0, 2, 0),
    ];
    for (i, (b, total, disrupting, not_ready, in_flight, want)) in cases.into_iter().enumerate() {
        assert_eq!(
            room(b, &policy, total, disrupting, not_ready, in_flight, t(0)),
            want,
            "case {i}"
        );
    }
}

#[test]
fn slow_start_is_recomputed_from_the_repairs_as_they_settled() {
    let d = |zone: &str| Domain {
        zone: zone.into(),
        condition: "Ready".into(),
        image: "ami-old".into(),
    };
    let o = |zone: &str, started: i64, state: OutcomeState| Outcome {
        domain: d(zone),
        started: t(started),
        state,
    };
    // Zone a: two healthy settlements (width 4), then one in flight.
    // Zone b: healthy, then failed (back to 1); a cancelled one says nothing.
    let s = slow_start(&[
        o("a", 0, OutcomeState::Healthy(t(20))),
        o("a", 30, OutcomeState::Healthy(t(50))),
        o("a", 60, OutcomeState::Unsettled),
        o("b", 0, OutcomeState::Failed(t(40))),
        o("b", 10, OutcomeState::Healthy(t(30))),
        o("b", 70, OutcomeState::Neutral),
    ]);
    assert_eq!(
        s[&d("a")],
        SlowStart {
            width: 4,
            in_flight: 1,
            round_at: Some(t(60))
        }
    );
    assert_eq!(
        s[&d("b")],
        SlowStart {
            width: 1,
            in_flight: 0,
            round_at: Some(t(70))
        }
    );
    assert!(slow_start(&[]).is_empty());
}

#[test]
fn a_pod_opt_out_holds_the_repair_of_its_node_while_it_holds() {
    let mut nodes = pool(10, &[], 0);
    nodes[4].conditions = vec![Condition {
        kind: "KernelReady".into(),
        status: "False".into(),
        reason: None,
        since: Some(t(100)),
    }];
    nodes[4].opt_out = Some(crate::fleet::OptOut {
        pod: "ns/p".into(),
        annotation: crate::fleet::DO_NOT_DISRUPT.into(),
        value: "2h".into(),
        until: Some(t(220)),
    });
    let p = plan(
        &nodes,
        &RepairPolicy::default(),
        &BTreeMap::new(),
        &[],
        1,
        t(200),
    );
    assert!(p.repairs.is_empty());
    assert!(
        p.held.iter().any(|(i, w)| i == "i-4" && w.contains("ns/p")),
        "{p:?}"
    );
    let later = plan(
        &nodes,
        &RepairPolicy::default(),
        &BTreeMap::new(),
        &[],
        1,
        t(220),
    );
    assert_eq!(ids(&later), ["i-4"]);
}
