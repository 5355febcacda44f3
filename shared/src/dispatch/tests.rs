use super::*;
use serde_json::json;

const CELL_ACCOUNT: &str = "111111111111";

fn cell() -> Cell {
    Cell {
        account: CELL_ACCOUNT.into(),
        region: "us-east-1".into(),
    }
}

fn at(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

fn place(account: Option<&str>, region: Option<&str>, cluster: &str, pool: &str) -> PoolPlace {
    PoolPlace {
        account: account.map(str::to_string),
        region: region.map(str::to_string),
        cluster: cluster.into(),
        pool: pool.into(),
    }
}

fn served() -> Served {
    Served {
        accounts: vec![CELL_ACCOUNT.into(), "222222222222".into()],
        regions: vec!["us-east-1".into()],
    }
}

fn item(cluster: &str, dispatched_at: &str) -> WorkItem {
    WorkItem {
        version: VERSION,
        account: CELL_ACCOUNT.into(),
        region: "us-east-1".into(),
        cluster: cluster.into(),
        dispatched_at: at(dispatched_at),
        reason: "1 pool of cluster prod: prod/general".into(),
    }
}

#[test]
fn one_item_per_account_region_and_cluster() {
    let now = at("2026-12-01T10:00:00Z");
    // (places, expected (place, reason) in order)
    type Case = (Vec<PoolPlace>, Vec<(&'static str, &'static str)>);
    let cases: Vec<Case> = vec![
        (vec![], vec![]),
        (
            vec![place(None, None, "prod", "prod/general")],
            vec![(
                "111111111111/us-east-1/prod",
                "1 pool of cluster prod: prod/general",
            )],
        ),
        // Two pools of one cluster: one item listing both, sorted.
        (
            vec![
                place(None, None, "prod", "prod/spot"),
                place(None, None, "prod", "prod/general"),
            ],
            vec![(
                "111111111111/us-east-1/prod",
                "2 pools of cluster prod: prod/general, prod/spot",
            )],
        ),
        // A pool naming the cell's own account and region is the same place as one naming none.
        (
            vec![
                place(Some(CELL_ACCOUNT), Some("us-east-1"), "prod", "prod/a"),
                place(None, None, "prod", "prod/b"),
            ],
            vec![(
                "111111111111/us-east-1/prod",
                "2 pools of cluster prod: prod/a, prod/b",
            )],
        ),
        // The same cluster name in another account or region is another item.
        (
            vec![
                place(None, None, "prod", "prod/a"),
                place(Some("222222222222"), None, "prod", "prod/a"),
                place(None, Some("eu-west-1"), "prod", "prod/a"),
            ],
            vec![
                (
                    "111111111111/eu-west-1/prod",
                    "1 pool of cluster prod: prod/a",
                ),
                (
                    "111111111111/us-east-1/prod",
                    "1 pool of cluster prod: prod/a",
                ),
                (
                    "222222222222/us-east-1/prod",
                    "1 pool of cluster prod: prod/a",
                ),
            ],
        ),
        // A pool listed twice counts once; long lists are bounded.
        (
            (0..8)
                .map(|i| place(None, None, "big", &format!("big/p{i}")))
                .chain([place(None, None, "big", "big/p0")])
                .collect(),
            vec![(
                "111111111111/us-east-1/big",
                "8 pools of cluster big: big/p0, big/p1, big/p2, big/p3, big/p4 and 3 more",
            )],
        ),
    ];
    for (places, expected) in cases {
        let items = work_items(&places, &cell(), now);
        let got: Vec<(String, String)> = items
            .iter()
            .map(|i| (i.place(), i.reason.clone()))
            .collect();
        let expected: Vec<(String, String)> = expected
            .into_iter()
            .map(|(p, r)| (p.to_string(), r.to_string()))
            .collect();
        assert_eq!(got, expected, "{places:?}");
        assert!(
            items
                .iter()
                .all(|i| i.dispatched_at == now && i.version == VERSION)
        );
    }
}

#[test]
fn a_pass_over_three_accounts_two_regions_five_clusters_is_thirty_items() {
    let mut places = Vec::new();
    for a in ["111111111111", "222222222222", "333333333333"] {
        for r in ["us-east-1", "eu-west-1"] {
            for c in 0..5 {
                for pool in ["general", "spot"] {
                    places.push(place(
                        Some(a),
                        Some(r),
                        &format!("c{c}"),
                        &format!("c{c}/{pool}"),
                    ));
                }
            }
        }
    }
    let items = work_items(&places, &cell(), at("2026-12-01T10:00:00Z"));
    assert_eq!(items.len(), 30);
    let unique: std::collections::BTreeSet<String> = items.iter().map(WorkItem::place).collect();
    assert_eq!(unique.len(), 30);
}

#[test]
fn items_read_back_as_written_and_anything_else_is_refused_by_field() {
    let it = item("prod", "2026-12-01T10:00:00Z");
    assert_eq!(WorkItem::parse(&it.body()).unwrap(), it);
    let good = serde_json::to_value(&it).unwrap();
    let with = |k: &str, v: Value| {
        let mut x = good.clone();
        x[k] = v;
        x.to_string()
    };
    let without = |k: &str| {
        let mut x = good.clone();
        x.as_object_mut().unwrap().remove(k);
        x.to_string()
    };
    // (body, the start of the error)
    let cases: Vec<(String, &str)> = vec![
        ("not json".into(), "(body): not JSON"),
        ("[]".into(), "v: "),
        (with("v", json!(2)), "v: \"2\"; expected 1"),
        (without("v"), "v: \"null\""),
        (with("account", json!("12345")), "account: \"12345\""),
        (with("account", json!("12345678901a")), "account: "),
        (with("account", json!(" 123456789012")), "account: "),
        (
            with("account", json!("123456789012,210987654321")),
            "account: ",
        ),
        (with("region", json!("us-east-1,eu-west-1")), "region: "),
        (with("region", json!("us-east-1 ")), "region: "),
        (with("region", json!("useast1")), "region: \"useast1\""),
        (with("region", json!("us-east-x")), "region: "),
        (with("cluster", json!("")), "cluster: \"\""),
        (with("cluster", json!("-x")), "cluster: "),
        (with("cluster", json!("a/b")), "cluster: "),
        (with("cluster", json!("c".repeat(101))), "cluster: "),
        (with("cluster", json!(7)), "(body): invalid type"),
        (with("extra", json!(1)), "(body): unknown field `extra`"),
        (
            without("dispatchedAt"),
            "(body): missing field `dispatchedAt`",
        ),
        (with("reason", json!("r".repeat(1025))), "reason: "),
        (format!("{good}{}", " ".repeat(MAX_BODY)), "(body): "),
    ];
    for (body, expected) in cases {
        let err = WorkItem::parse(&body).unwrap_err();
        assert!(err.starts_with(expected), "{body:.80}: {err}");
        assert!(err.len() < 300, "{err}");
    }
}

#[test]
fn admission() {
    let now = at("2026-12-01T10:10:00Z");
    let max_age = Duration::from_secs(300);
    let fresh = item("prod", "2026-12-01T10:09:00Z");
    let stale = item("prod", "2026-12-01T10:04:00Z");
    let mut foreign = fresh.clone();
    foreign.account = "999999999999".into();
    let mut elsewhere = fresh.clone();
    elsewhere.region = "eu-west-1".into();
    let mut member = fresh.clone();
    member.account = "222222222222".into();
    // (item, receive count, expected kind)
    let cases = [
        (&fresh, 1, "serve"),
        (&member, 1, "serve"),
        (&stale, 1, "superseded"),
        // Exactly max_age old: still served.
        (&item("prod", "2026-12-01T10:05:00Z"), 1, "serve"),
        // A redelivery is served whatever its age (it ends in the DLQ if it keeps failing).
        (&stale, 2, "serve"),
        (&foreign, 1, "refuse"),
        (&foreign, 3, "refuse"),
        (&elsewhere, 1, "refuse"),
    ];
    for (it, count, expected) in cases {
        let got = admit(it, count, &served(), max_age, now);
        let kind = match &got {
            Admission::Serve => "serve",
            Admission::Superseded(_) => "superseded",
            Admission::Refuse(_) => "refuse",
        };
        assert_eq!(kind, expected, "{} x{count}: {got:?}", it.place());
    }
    match admit(&foreign, 1, &served(), max_age, now) {
        Admission::Refuse(why) => assert!(why.contains("\"999999999999\""), "{why}"),
        other => panic!("{other:?}"),
    }
    match admit(&stale, 1, &served(), max_age, now) {
        Admission::Superseded(why) => assert!(why.contains("360s ago"), "{why}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn verdicts() {
    let it = item("prod", "2026-12-01T10:00:00Z");
    let answer =
        |status: &str| json!({"trigger": "schedule", "clusters": {"prod": status}, "pools": []});
    // (pass, expected: done?)
    let cases: Vec<(Result<Value, &str>, bool)> = vec![
        (Ok(answer("done")), true),
        (
            Ok(answer(
                "lease held by rotator-abc until 2026-12-01T10:05:00Z",
            )),
            true,
        ),
        // The cluster is no longer named by any policy.
        (
            Ok(json!({"trigger": "schedule", "clusters": {}, "pools": []})),
            true,
        ),
        (
            Ok(json!({"trigger": "schedule", "clusters": {"other": "done"}, "pools": []})),
            true,
        ),
        (Ok(answer("failed: task panicked")), false),
        (
            Ok(answer("cannot take the lease: dynamodb:PutItem throttled")),
            false,
        ),
        (Err("Internal: cannot list policies"), false),
    ];
    for (pass, done) in cases {
        let got = verdict(&it, pass.as_ref().map_err(|e| *e));
        assert_eq!(matches!(got, Verdict::Done(_)), done, "{pass:?}: {got:?}");
    }
}

#[cfg(feature = "aws")]
#[tokio::test]
async fn the_memory_queue_keeps_what_it_accepts_and_names_what_it_refuses() {
    let items = work_items(
        &[place(None, None, "a", "a/x"), place(None, None, "b", "b/x")],
        &cell(),
        at("2026-12-01T10:00:00Z"),
    );
    let q = MemoryQueue::refusing(&["111111111111/us-east-1/b"]);
    let err = q.send(&items).await.unwrap_err();
    assert!(err.message.contains("111111111111/us-east-1/b"), "{err}");
    assert_eq!(q.take(), items[..1].to_vec());
    assert!(q.take().is_empty());
}

#[test]
fn the_rotator_is_told_the_cluster_and_for_another_place_its_account_and_region() {
    let own = item("prod", "2026-12-01T10:00:00Z");
    assert_eq!(selection(&own, &cell()), json!({"clusters": ["prod"]}));
    let mut member = own.clone();
    member.account = "222222222222".into();
    assert_eq!(
        selection(&member, &cell()),
        json!({"clusters": ["prod"], "account": "222222222222", "region": "us-east-1"})
    );
    let mut elsewhere = own;
    elsewhere.region = "eu-west-1".into();
    assert_eq!(selection(&elsewhere, &cell())["region"], "eu-west-1");
    // The rotator serves only the pools of that account and region.
    let chosen = crate::event::rotator_selection(&selection(&member, &cell())).unwrap();
    let there = crate::policy::Place {
        account: "222222222222".into(),
        region: "us-east-1".into(),
    };
    assert!(chosen.includes_at("prod", "222222222222/us-east-1/prod/a", Some(&there)));
    assert!(!chosen.includes_at("prod", "prod/a", None));
    assert_eq!(cell_of(&served()), Some(cell()));
    assert_eq!(cell_of(&Served::default()), None);
}
