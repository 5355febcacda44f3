//! Fan-out on AWS services: the dispatcher's work items on a real SQS queue (moto, through the
//! SDK and the `aws::queue` adapter, with a redrive policy to a dead-letter queue) served by the
//! worker ([`FanOut::serve`]) as Lambda's SQS event source would run it: receive a batch,
//! invoke with it, delete what the answer does not list in `batchItemFailures`, leave the rest
//! (received again, then dead-lettered after the receive limit).

#![allow(clippy::expect_used, clippy::unwrap_used)]

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use chrono::Utc;
use nodecycle::dispatch::{self, Cell, PoolPlace, WorkQueue};
use nodecycle::event::served::Served;
use nodecycle::handlers::dispatch::{ClusterPass, DEFAULT_MAX_AGE, FanOut, StandInPass as Passes};
use nodecycle::handlers::{HandlerError, Invocation};
use nodecycle_tests::{ACCOUNT_ID, DEFAULT_REGION, FakeCloud};
use serde_json::{Value, json};

const ACCOUNTS: [&str; 3] = [ACCOUNT_ID, "222222222222", "333333333333"];
const REGIONS: [&str; 2] = [DEFAULT_REGION, "eu-west-1"];
const RECEIVES: u32 = 3;

fn cell() -> Cell {
    Cell {
        account: ACCOUNT_ID.into(),
        region: DEFAULT_REGION.into(),
    }
}

fn served() -> Served {
    Served {
        accounts: ACCOUNTS.iter().map(|a| a.to_string()).collect(),
        regions: REGIONS.iter().map(|r| r.to_string()).collect(),
    }
}

/// A work queue and its dead-letter queue (after `RECEIVES` receives), visible again at once
/// when an item is left (visibility timeout 0: the test need not wait for redeliveries).
struct Queues {
    sqs: aws_sdk_sqs::Client,
    url: String,
    arn: String,
    dlq_url: String,
}

async fn queues(cloud: &FakeCloud, name: &str) -> Queues {
    let sqs = aws_sdk_sqs::Client::new(&cloud.sdk_config().await);
    let dlq_url = sqs
        .create_queue()
        .queue_name(format!("{name}-dlq"))
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    let dlq_arn = arn_of(&sqs, &dlq_url).await;
    let redrive = json!({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": RECEIVES.to_string()});
    let url = sqs
        .create_queue()
        .queue_name(name)
        .attributes(
            aws_sdk_sqs::types::QueueAttributeName::RedrivePolicy,
            redrive.to_string(),
        )
        .attributes(
            aws_sdk_sqs::types::QueueAttributeName::VisibilityTimeout,
            "0",
        )
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    let arn = arn_of(&sqs, &url).await;
    Queues {
        sqs,
        url,
        arn,
        dlq_url,
    }
}

async fn arn_of(sqs: &aws_sdk_sqs::Client, url: &str) -> String {
    sqs.get_queue_attributes()
        .queue_url(url)
        .attribute_names(aws_sdk_sqs::types::QueueAttributeName::QueueArn)
        .send()
        .await
        .unwrap()
        .attributes
        .unwrap()[&aws_sdk_sqs::types::QueueAttributeName::QueueArn]
        .clone()
}

impl Queues {
    fn adapter(&self) -> nodecycle::aws::queue::SqsQueue {
        nodecycle::aws::queue::SqsQueue::new(self.sqs.clone(), &self.url)
    }

    /// Lambda's poller: batches of up to `batch` messages, each batch one invocation of the
    /// worker, until the queue gives nothing twice in a row. Returns the invocations made.
    async fn drain(&self, fan_out: &FanOut, pass: &dyn ClusterPass, batch: i32) -> usize {
        let mut invocations = 0;
        let mut empty = 0;
        while empty < 2 {
            assert!(invocations < 500, "the queue does not drain");
            let got = self
                .sqs
                .receive_message()
                .queue_url(&self.url)
                .max_number_of_messages(batch)
                .message_system_attribute_names(
                    aws_sdk_sqs::types::MessageSystemAttributeName::ApproximateReceiveCount,
                )
                .send()
                .await
                .unwrap();
            let messages = got.messages.unwrap_or_default();
            if messages.is_empty() {
                empty += 1;
                continue;
            }
            empty = 0;
            invocations += 1;
            // The event Lambda builds from the batch.
            let records: Vec<Value> = messages
                .iter()
                .map(|m| {
                    let count = m
                        .attributes
                        .as_ref()
                        .and_then(|a| {
                            a.get(&aws_sdk_sqs::types::MessageSystemAttributeName::ApproximateReceiveCount)
                        })
                        .cloned()
                        .unwrap_or_else(|| "1".into());
                    json!({
                        "messageId": m.message_id, "receiptHandle": m.receipt_handle,
                        "body": m.body, "attributes": {"ApproximateReceiveCount": count},
                        "messageAttributes": {}, "md5OfBody": m.md5_of_body,
                        "eventSource": "aws:sqs", "eventSourceARN": self.arn,
                        "awsRegion": DEFAULT_REGION,
                    })
                })
                .collect();
            let answer = fan_out
                .serve(
                    pass,
                    &json!({ "Records": records }),
                    Invocation {
                        request_id: Some(&format!("invocation-{invocations}")),
                        ..Invocation::at(Utc::now(), Instant::now() + Duration::from_secs(120))
                    },
                )
                .await
                .unwrap();
            let failed: BTreeSet<&str> = answer["batchItemFailures"]
                .as_array()
                .unwrap()
                .iter()
                .map(|f| f["itemIdentifier"].as_str().unwrap())
                .collect();
            for m in &messages {
                if !failed.contains(m.message_id.as_deref().unwrap()) {
                    self.sqs
                        .delete_message()
                        .queue_url(&self.url)
                        .receipt_handle(m.receipt_handle.as_deref().unwrap())
                        .send()
                        .await
                        .unwrap();
                }
            }
        }
        invocations
    }

    /// The bodies in the dead-letter queue.
    async fn dead_letters(&self) -> Vec<String> {
        let mut out = Vec::new();
        loop {
            let got = self
                .sqs
                .receive_message()
                .queue_url(&self.dlq_url)
                .max_number_of_messages(10)
                .visibility_timeout(60)
                .send()
                .await
                .unwrap();
            let messages = got.messages.unwrap_or_default();
            if messages.is_empty() {
                return out;
            }
            out.extend(messages.into_iter().filter_map(|m| m.body));
        }
    }
}

fn fan_out(queue: Option<Arc<dyn WorkQueue>>) -> FanOut {
    FanOut {
        policies: Arc::new(nodecycle::policy::source::Files(vec![])),
        deployment: Arc::new(served()),
        queue,
        max_age: DEFAULT_MAX_AGE,
    }
}

/// 3 accounts x 2 regions x 5 clusters, two pools each.
fn organisation() -> Vec<PoolPlace> {
    let mut places = Vec::new();
    for a in ACCOUNTS {
        for r in REGIONS {
            for c in 0..5 {
                for pool in ["general", "spot"] {
                    places.push(PoolPlace {
                        account: Some(a.into()),
                        region: Some(r.into()),
                        cluster: format!("c{c}"),
                        pool: format!("c{c}/{pool}"),
                    });
                }
            }
        }
    }
    places
}

#[tokio::test]
async fn a_pass_over_three_accounts_two_regions_five_clusters_is_thirty_items_all_served() {
    let cloud = FakeCloud::start();
    let q = queues(&cloud, "work").await;
    let items = dispatch::work_items(&organisation(), &cell(), Utc::now());
    assert_eq!(items.len(), 30);
    let started = Instant::now();
    q.adapter().send(&items).await.unwrap();
    let sent = started.elapsed();
    let passes = Passes::default();
    let started = Instant::now();
    let invocations = q.drain(&fan_out(None), &passes, 1).await;
    let served_in = started.elapsed();
    let served = passes.served(&cell());
    let expected: BTreeMap<String, usize> = items.iter().map(|i| (i.place(), 1)).collect();
    assert_eq!(served, expected, "every item served exactly once");
    assert_eq!(invocations, 30, "batch size 1: one invocation per cluster");
    assert!(q.dead_letters().await.is_empty());
    // Figures for docs/organisation.md (printed, not asserted: timing depends on the machine).
    println!(
        "fan-out: 30 items sent in {:.0} ms (SendMessageBatch x3), received, served and deleted in {:.0} ms by one poller ({:.0} items/s)",
        sent.as_secs_f64() * 1e3,
        served_in.as_secs_f64() * 1e3,
        30.0 / served_in.as_secs_f64()
    );
}

#[tokio::test]
async fn a_poisoned_item_ends_in_the_dead_letter_queue_after_its_receives_and_the_others_finish() {
    let cloud = FakeCloud::start();
    let q = queues(&cloud, "work").await;
    let items = dispatch::work_items(&organisation(), &cell(), Utc::now());
    q.adapter().send(&items).await.unwrap();
    // One cluster whose pass keeps failing, and a message that is no work item at all.
    let failing = "222222222222/eu-west-1/c3".to_string();
    q.sqs
        .send_message()
        .queue_url(&q.url)
        .message_body(r#"{"v":1,"cluster":"prod"}"#)
        .send()
        .await
        .unwrap();
    let passes = Passes {
        fail: vec![failing.clone()],
        ..Passes::default()
    };
    // Batches of ten: the failed item is retried alone, its batch's others are deleted.
    q.drain(&fan_out(None), &passes, 10).await;
    let served = passes.served(&cell());
    for item in &items {
        let want = if item.place() == failing {
            RECEIVES as usize
        } else {
            1
        };
        assert_eq!(served.get(&item.place()), Some(&want), "{}", item.place());
    }
    let mut dead = q.dead_letters().await;
    dead.sort();
    assert_eq!(dead.len(), 2, "{dead:?}");
    assert!(
        dead.iter().any(|b| b == r#"{"v":1,"cluster":"prod"}"#),
        "{dead:?}"
    );
    let failed_item = dead
        .iter()
        .find_map(|b| dispatch::WorkItem::parse(b).ok())
        .unwrap();
    assert_eq!(failed_item.place(), failing);
}

#[tokio::test]
async fn the_dispatcher_reads_the_policies_and_the_rotator_serves_its_cluster() {
    let cloud = FakeCloud::start();
    let q = queues(&cloud, "work").await;
    let adapters = support::Adapters::new(&cloud).await;
    for (cluster, name) in [("prod", "general"), ("prod", "spot"), ("test", "general")] {
        cloud.put_parameter(
            &format!("/nodecycle/pools/{cluster}/{name}"),
            &format!(
                "nodeGroup: {{ autoScalingGroup: {cluster}-{name} }}\namiSelectorTerms:\n  - alias: al2023@latest\n"
            ),
        );
    }
    let table = adapters.table("nodecycle-fan-out").await;
    let rotator = adapters
        .rotator(&cloud, adapters.policies(), table.clone())
        .await;
    let fan_out = FanOut {
        policies: adapters.policies(),
        deployment: Arc::new(Served {
            accounts: vec![ACCOUNT_ID.into()],
            regions: vec![DEFAULT_REGION.into()],
        }),
        queue: Some(Arc::new(q.adapter())),
        max_age: DEFAULT_MAX_AGE,
    };
    let schedule = json!({
        "version": "0", "id": "tick", "detail-type": "Scheduled Event", "source": "aws.events",
        "account": ACCOUNT_ID, "time": "2026-12-01T10:00:00Z", "region": DEFAULT_REGION,
        "resources": [], "detail": {}
    });
    let deadline = Instant::now() + Duration::from_secs(120);
    let out = fan_out
        .route(
            &rotator,
            &schedule,
            Invocation {
                request_id: Some("tick"),
                ..Invocation::at(Utc::now(), deadline)
            },
        )
        .await
        .unwrap()
        .unwrap();
    let places: Vec<&str> = out["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["place"].as_str().unwrap())
        .collect();
    assert_eq!(
        places,
        [
            format!("{ACCOUNT_ID}/{DEFAULT_REGION}/prod"),
            format!("{ACCOUNT_ID}/{DEFAULT_REGION}/test")
        ]
    );
    // The real rotator serves each item: one pass over that cluster's pools (no such cluster
    // in EKS here, so its pools report it unreachable, which is the pools' report, not a
    // failed item).
    let recorder = Recording {
        inner: &rotator,
        answers: Mutex::default(),
    };
    q.drain(&fan_out, &recorder, 1).await;
    let answers = recorder.answers.lock().unwrap().clone();
    assert_eq!(answers.len(), 2, "{answers:#?}");
    for a in &answers {
        let clusters: Vec<&String> = a["clusters"].as_object().unwrap().keys().collect();
        assert_eq!(clusters.len(), 1, "one cluster per pass: {a}");
        let pools: Vec<&str> = a["pools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["pool"].as_str().unwrap())
            .collect();
        assert!(
            pools.iter().all(|p| p.starts_with(clusters[0].as_str())),
            "{a}"
        );
    }
    assert!(q.dead_letters().await.is_empty());
}

/// The real rotator, its answers kept.
struct Recording<'a> {
    inner: &'a nodecycle::handlers::rotator::RotatorHandler,
    answers: Mutex<Vec<Value>>,
}

#[async_trait]
impl ClusterPass for Recording<'_> {
    async fn pass(&self, selection: &Value, at: Invocation<'_>) -> Result<Value, HandlerError> {
        let answer = self.inner.pass(selection, at).await?;
        self.answers.lock().unwrap().push(answer.clone());
        Ok(answer)
    }
}
