//! The dispatcher and the worker over in-memory ports: a pass becomes one item per cluster, and
//! each received item is served, superseded or refused, a failed one alone.

use super::*;
use crate::dispatch::MemoryQueue;
use crate::event::served::Served;
use crate::policy::source::PolicyDocument;
use crate::port::PortError;

const CELL: &str = "111111111111";

struct Docs(Vec<PolicyDocument>);

#[async_trait]
impl PolicySource for Docs {
    async fn all(&self) -> Result<Vec<PolicyDocument>, PortError> {
        Ok(self.0.clone())
    }
    async fn one(&self, source: &str) -> Result<Option<PolicyDocument>, PortError> {
        Ok(self.0.iter().find(|d| d.source == source).cloned())
    }
    fn contains(&self, name: &str) -> bool {
        self.0.iter().any(|d| d.source == name)
    }
}

fn doc(cluster: &str, name: &str) -> PolicyDocument {
    PolicyDocument::file(
        format!("{cluster}-{name}.yaml"),
        format!(
            "cluster: {cluster}\nname: {name}\nnodeGroup: {{ autoScalingGroup: {cluster}-{name} }}\namiSelectorTerms:\n  - alias: al2023@latest\n"
        ),
    )
}

type Passes = StandInPass;

fn fan_out(docs: Vec<PolicyDocument>, queue: Option<Arc<MemoryQueue>>) -> FanOut {
    FanOut {
        policies: Arc::new(Docs(docs)),
        deployment: Arc::new(Served {
            accounts: vec![CELL.into(), "222222222222".into()],
            regions: vec!["us-east-1".into()],
        }),
        queue: queue.map(|q| q as Arc<dyn WorkQueue>),
        max_age: DEFAULT_MAX_AGE,
    }
}

fn now() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-12-01T10:00:00Z")
        .unwrap()
        .with_timezone(&Utc)
}

fn later() -> Instant {
    Instant::now() + Duration::from_secs(120)
}

/// A pass at [`now`] with the deadline [`later`].
fn pass_at(request_id: Option<&str>) -> Invocation<'_> {
    Invocation {
        request_id,
        ..Invocation::at(now(), later())
    }
}

fn schedule() -> Value {
    json!({
        "version": "0", "id": "e1", "detail-type": "Scheduled Event", "source": "aws.events",
        "account": CELL, "time": "2026-12-01T10:00:00Z", "region": "us-east-1",
        "resources": [], "detail": {}
    })
}

fn record(id: &str, body: &str, receives: u32) -> Value {
    json!({
        "messageId": id, "receiptHandle": "h", "body": body,
        "attributes": {"ApproximateReceiveCount": receives.to_string()},
        "messageAttributes": {}, "eventSource": "aws:sqs",
        "eventSourceARN": "arn:aws:sqs:us-east-1:111111111111:work", "awsRegion": "us-east-1"
    })
}

#[tokio::test]
async fn a_scheduled_pass_is_dispatched_only_when_a_queue_is_configured() {
    let docs = vec![
        doc("prod", "general"),
        doc("prod", "spot"),
        doc("test", "general"),
        PolicyDocument::file("broken.yaml", "cluster: [nope"),
    ];
    let queue = Arc::new(MemoryQueue::default());
    let f = fan_out(docs.clone(), Some(queue.clone()));
    let passes = Passes::default();
    let out = f
        .route(&passes, &schedule(), pass_at(None))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(out["trigger"], "dispatch");
    assert_eq!(out["invalidPolicies"], 1);
    let sent = queue.take();
    let places: Vec<String> = sent.iter().map(WorkItem::place).collect();
    assert_eq!(
        places,
        ["111111111111/us-east-1/prod", "111111111111/us-east-1/test"]
    );
    assert!(
        sent[0].reason.contains("prod/general, prod/spot"),
        "{}",
        sent[0].reason
    );
    // The dispatcher runs no pass itself.
    assert!(passes.seen.lock().unwrap().is_empty());

    // Without a queue the schedule is the rotator's own (a single-account deployment).
    let f = fan_out(docs, None);
    assert!(f.route(&passes, &schedule(), pass_at(None)).await.is_none());
    // A custom input is always the rotator's.
    let custom = json!({"clusters": ["prod"]});
    assert!(f.route(&passes, &custom, pass_at(None)).await.is_none());
}

#[tokio::test]
async fn a_queue_that_refuses_fails_the_dispatch_naming_the_items() {
    let queue = Arc::new(MemoryQueue::refusing(&["111111111111/us-east-1/test"]));
    let f = fan_out(vec![doc("prod", "a"), doc("test", "a")], Some(queue));
    let err = f.dispatch(now()).await.unwrap_err();
    assert!(err.message.contains("111111111111/us-east-1/test"), "{err}");
}

#[tokio::test]
async fn each_record_is_judged_alone() {
    let queue = Arc::new(MemoryQueue::default());
    let f = fan_out(
        vec![doc("a", "x"), doc("b", "x"), doc("c", "x"), doc("d", "x")],
        Some(queue.clone()),
    );
    f.dispatch(now()).await.unwrap();
    let bodies: Vec<String> = queue.take().iter().map(WorkItem::body).collect();
    let mut foreign = WorkItem::parse(&bodies[0]).unwrap();
    foreign.account = "999999999999".into();
    let mut stale = WorkItem::parse(&bodies[3]).unwrap();
    stale.dispatched_at = now() - chrono::Duration::minutes(10);
    let event = json!({"Records": [
        record("m-a", &bodies[0], 1),
        // b fails its pass; c's lease is held by another invocation.
        record("m-b", &bodies[1], 1),
        record("m-c", &bodies[2], 1),
        record("m-poison", "{\"v\":1,\"cluster\":\"x\"}", 1),
        record("m-foreign", &foreign.body(), 1),
        record("m-stale", &stale.body(), 1),
        // The same stale item redelivered is served (it may be failing on its way to the DLQ).
        record("m-stale-again", &stale.body(), 2),
    ]});
    let passes = Passes {
        fail: vec!["b".into()],
        status: vec![(
            "c".into(),
            "lease held by rotator-x until 2026-12-01T10:02:00Z".into(),
        )],
        ..Passes::default()
    };
    let out = f
        .route(&passes, &event, pass_at(Some("req")))
        .await
        .unwrap()
        .unwrap();
    let failed: Vec<&str> = out["batchItemFailures"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["itemIdentifier"].as_str().unwrap())
        .collect();
    assert_eq!(failed, ["m-b", "m-poison", "m-foreign"], "{out:#}");
    let seen: Vec<Value> = passes.seen.lock().unwrap().clone();
    assert_eq!(
        seen,
        [
            json!({"clusters": ["a"]}),
            json!({"clusters": ["b"]}),
            json!({"clusters": ["c"]}),
            json!({"clusters": ["d"]}),
        ],
        "the foreign, poisoned and first stale records run no pass"
    );
    let reason = |id: &str| {
        out["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["messageId"] == id)
            .unwrap()["reason"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert!(
        reason("m-poison").contains("account"),
        "{}",
        reason("m-poison")
    );
    assert!(
        reason("m-foreign").contains("999999999999"),
        "{}",
        reason("m-foreign")
    );
    assert!(
        reason("m-stale").contains("next pass"),
        "{}",
        reason("m-stale")
    );
}

#[tokio::test]
async fn a_record_not_from_sqs_or_a_batch_too_large_is_refused() {
    let f = fan_out(vec![], None);
    let passes = Passes::default();
    let mut r = record("m1", "{}", 1);
    r["eventSource"] = json!("aws:kinesis");
    let out = f
        .serve(&passes, &json!({"Records": [r]}), pass_at(None))
        .await
        .unwrap();
    assert_eq!(out["batchItemFailures"][0]["itemIdentifier"], "m1");
    let many: Vec<Value> = (0..=MAX_RECORDS)
        .map(|i| record(&i.to_string(), "{}", 1))
        .collect();
    let err = f
        .serve(&passes, &json!({"Records": many}), pass_at(None))
        .await
        .unwrap_err();
    assert!(err.message.contains("101 records"), "{err}");
    let err = f
        .serve(&passes, &json!({"Records": "x"}), pass_at(None))
        .await
        .unwrap_err();
    assert_eq!(err.error_type, "InvalidEvent");
    assert!(passes.seen.lock().unwrap().is_empty());
}
