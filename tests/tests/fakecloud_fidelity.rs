//! The fake cloud fails and refuses the way AWS does, as the real Rust SDK sees it: injected
//! throttling, 500/503 and dropped connections are classified and retried by the SDK as in
//! AWS (`faults`), and lifecycle actions are refused unless one is active (`lifecycle_wait`).
//! Groups made by `seed_groups` read like groups made through the API, and the fake cloud's
//! indexed answers are moto's own (`moto_speedups`).

// Test code: helpers outside #[test] fns panic on failure too.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use crate::support;

use std::time::Duration;

use aws_config::retry::RetryConfig;
use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, KeySchemaElement, KeyType,
    ScalarAttributeType,
};
use nodecycle_tests::{
    AwsFault, AwsFaults, FakeCloud, Faults, GroupSeed, ImageFixture, KubeFault, KubeFaults,
};
use serde_json::json;

/// Clients with the SDK's standard retry mode (3 attempts), backing off 1 ms instead of 1 s.
async fn config(cloud: &FakeCloud) -> aws_config::SdkConfig {
    cloud
        .sdk_config()
        .await
        .into_builder()
        .retry_config(
            RetryConfig::standard()
                .with_max_attempts(3)
                .with_initial_backoff(Duration::from_millis(1)),
        )
        .build()
}

struct Clients {
    ddb: aws_sdk_dynamodb::Client,
    ec2: aws_sdk_ec2::Client,
    asg: aws_sdk_autoscaling::Client,
    eks: aws_sdk_eks::Client,
    ssm: aws_sdk_ssm::Client,
}

async fn clients(cloud: &FakeCloud) -> Clients {
    let c = config(cloud).await;
    Clients {
        ddb: aws_sdk_dynamodb::Client::new(&c),
        ec2: aws_sdk_ec2::Client::new(&c),
        asg: aws_sdk_autoscaling::Client::new(&c),
        eks: aws_sdk_eks::Client::new(&c),
        ssm: aws_sdk_ssm::Client::new(&c),
    }
}

async fn table(c: &Clients) {
    c.ddb
        .create_table()
        .table_name("t")
        .billing_mode(BillingMode::PayPerRequest)
        .attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name("pk")
                .attribute_type(ScalarAttributeType::S)
                .build()
                .unwrap(),
        )
        .key_schema(
            KeySchemaElement::builder()
                .attribute_name("pk")
                .key_type(KeyType::Hash)
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
}

/// One call per service; `Err` carries the error code the SDK parsed (or `dispatch` for a
/// connection failure).
async fn call(c: &Clients, service: &str) -> Result<(), String> {
    fn code<E: ProvideErrorMetadata, R>(e: SdkError<E, R>) -> String {
        match e {
            SdkError::DispatchFailure(_) => "dispatch".into(),
            other => other.code().unwrap_or("(no code)").into(),
        }
    }
    match service {
        "dynamodb" => c
            .ddb
            .get_item()
            .table_name("t")
            .key("pk", AttributeValue::S("a".into()))
            .send()
            .await
            .map(|_| ())
            .map_err(code),
        "ec2" => c
            .ec2
            .describe_instances()
            .send()
            .await
            .map(|_| ())
            .map_err(code),
        "autoscaling" => c
            .asg
            .describe_auto_scaling_groups()
            .send()
            .await
            .map(|_| ())
            .map_err(code),
        "eks" => c
            .eks
            .describe_cluster()
            .name("prod")
            .send()
            .await
            .map(|_| ())
            .map_err(code),
        "ssm" => c
            .ssm
            .get_parameter()
            .name("/p")
            .send()
            .await
            .map(|_| ())
            .map_err(code),
        other => panic!("no call for {other}"),
    }
}

const SERVICES: [&str; 5] = ["dynamodb", "ec2", "autoscaling", "eks", "ssm"];

#[tokio::test]
async fn the_sdk_retries_injected_throttling_server_errors_and_resets_as_in_aws() {
    let cloud = FakeCloud::start();
    cloud.create_cluster("prod", "1.30");
    cloud.put_parameter("/p", "v");
    let c = clients(&cloud).await;
    table(&c).await;

    // Two faults, then none: the SDK classifies each kind as retryable and the third attempt
    // gets through.
    for kind in [
        AwsFault::Throttle,
        AwsFault::Http500,
        AwsFault::Http503,
        AwsFault::Reset,
    ] {
        for service in SERVICES {
            cloud.faults(
                Faults::new().aws(
                    AwsFaults::new(1.0)
                        .kinds(&[kind])
                        .services(&[service])
                        .limit(2),
                ),
            );
            let got = call(&c, service).await;
            let stats = cloud.fault_stats().aws;
            assert!(got.is_ok(), "{kind:?} on {service}: {got:?} {stats:?}");
            // Both faults reached the SDK and it went on to a successful attempt. Usually that
            // is 3 requests; once in a full run under load the server saw a 4th (a transport
            // level re-send by the SDK, not a fault), so the count is bounded, not exact.
            assert_eq!(stats.failed, 2, "{kind:?} on {service}: {stats:?}");
            assert!(
                (3..=4).contains(&stats.in_scope),
                "{kind:?} on {service}: {stats:?}"
            );
        }
    }

    // Every attempt throttled: after its 3 attempts the SDK reports the service's throttling
    // error code.
    cloud.faults(Faults::new().aws(AwsFaults::new(1.0).kinds(&[AwsFault::Throttle])));
    let mut codes = Vec::new();
    for service in SERVICES {
        codes.push((service, call(&c, service).await.unwrap_err()));
    }
    assert_eq!(
        codes,
        [
            (
                "dynamodb",
                "ProvisionedThroughputExceededException".to_string()
            ),
            ("ec2", "RequestLimitExceeded".to_string()),
            ("autoscaling", "Throttling".to_string()),
            ("eks", "ThrottlingException".to_string()),
            ("ssm", "ThrottlingException".to_string()),
        ]
    );
    let stats = cloud.fault_stats().aws;
    assert_eq!((stats.calls, stats.failed), (15, 15), "{stats:?}");
    assert_eq!(
        stats.by_operation["dynamodb:GetItem"].by_kind["throttle"], 3,
        "{stats:?}"
    );

    // Dropped connections every time: a dispatch failure after 3 attempts.
    cloud.faults(
        Faults::new().aws(
            AwsFaults::new(1.0)
                .kinds(&[AwsFault::Reset])
                .services(&["ec2"]),
        ),
    );
    assert_eq!(call(&c, "ec2").await.unwrap_err(), "dispatch");
    assert_eq!(cloud.fault_stats().aws.failed, 3);

    // The answer lost after the write happened: the SDK's retry meets its own conditional write.
    cloud.faults(
        Faults::new().aws(
            AwsFaults::new(1.0)
                .kinds(&[AwsFault::ResetAfter])
                .operations(&["PutItem"])
                .limit(1),
        ),
    );
    let err = c
        .ddb
        .put_item()
        .table_name("t")
        .item("pk", AttributeValue::S("lease".into()))
        .condition_expression("attribute_not_exists(pk)")
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        err.code(),
        Some("ConditionalCheckFailedException"),
        "{err:?}"
    );
    cloud.clear_faults();
    let item = c
        .ddb
        .get_item()
        .table_name("t")
        .key("pk", AttributeValue::S("lease".into()))
        .send()
        .await
        .unwrap();
    assert!(item.item().is_some());
}

#[tokio::test]
async fn kubernetes_faults_answer_like_the_api_server() {
    let cloud = FakeCloud::start();
    let kube = cloud.create_kube("prod");
    kube.faults(
        KubeFaults::new(1.0)
            .kinds(&[KubeFault::TooManyRequests])
            .verbs(&["list"])
            .resources(&["nodes"])
            .limit(1),
    );
    let client = kube.client();
    let first = client.get("/api/v1/nodes");
    let second = client.get("/api/v1/nodes");
    assert_eq!(first.status, 429, "{first:?}");
    assert_eq!(first.body["reason"], "TooManyRequests");
    assert_eq!(first.body["details"]["retryAfterSeconds"], 1);
    assert_eq!(second.status, 200, "{second:?}");
    let stats = kube.fault_stats();
    assert_eq!((stats.calls, stats.failed), (2, 1), "{stats:?}");
    assert_eq!(stats.by_operation["prod:list nodes"].by_kind["429"], 1);
    let log = kube.requests();
    assert_eq!(log[0].fault.as_deref(), Some("429"));
    assert_eq!(log[1].fault, None);
}

/// (instance, lifecycle state) of the group's instances, and its desired capacity last.
async fn instances(c: &Clients, name: &str) -> Vec<(String, String)> {
    let out = c
        .asg
        .describe_auto_scaling_groups()
        .auto_scaling_group_names(name)
        .send()
        .await
        .unwrap();
    let g = &out.auto_scaling_groups()[0];
    let mut v: Vec<(String, String)> = g
        .instances()
        .iter()
        .map(|i| {
            (
                i.instance_id().unwrap().to_string(),
                i.lifecycle_state().unwrap().as_str().to_string(),
            )
        })
        .collect();
    v.sort();
    v.push(("desired".into(), g.desired_capacity().unwrap().to_string()));
    v
}

#[tokio::test]
async fn lifecycle_actions_are_refused_unless_one_is_active() {
    let cloud = FakeCloud::start();
    let c = clients(&cloud).await;
    let image = cloud.register_image(ImageFixture::new("golden-1"));
    let a = support::Adapters::new(&cloud).await;
    a.create_group("workers", &image, "m5.large", 2, 4, None)
        .await;
    let ids: Vec<String> = a
        .group_instances("workers")
        .await
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    c.asg
        .put_lifecycle_hook()
        .auto_scaling_group_name("workers")
        .lifecycle_hook_name("drain")
        .lifecycle_transition("autoscaling:EC2_INSTANCE_TERMINATING")
        .heartbeat_timeout(300)
        .send()
        .await
        .unwrap();
    let complete = |hook: &str, instance: Option<&str>, token: Option<&str>| {
        c.asg
            .complete_lifecycle_action()
            .auto_scaling_group_name("workers")
            .lifecycle_hook_name(hook)
            .lifecycle_action_result("CONTINUE")
            .set_instance_id(instance.map(str::to_string))
            .set_lifecycle_action_token(token.map(str::to_string))
            .send()
    };
    let refused = |e: SdkError<_, _>| -> String {
        let e = aws_sdk_autoscaling::Error::from(e);
        assert_eq!(e.code(), Some("ValidationError"), "{e:?}");
        e.message().unwrap_or_default().to_string()
    };

    // Nothing waits: refused, by instance and by token.
    let msg = refused(complete("drain", Some(&ids[0]), None).await.unwrap_err());
    assert_eq!(
        msg,
        format!(
            "No active Lifecycle Action found with instance ID {}",
            ids[0]
        )
    );
    let msg = refused(
        complete("drain", None, Some("11111111-2222-3333-4444-555555555555"))
            .await
            .unwrap_err(),
    );
    assert_eq!(
        msg,
        "No active Lifecycle Action found with token 11111111-2222-3333-4444-555555555555"
    );

    // A scale-in meets the hook: the instance waits, the group counts one less.
    let token = cloud.lifecycle_wait("workers", "drain", &ids[0], None);
    let state = instances(&c, "workers").await;
    assert!(
        state.contains(&(ids[0].clone(), "Terminating:Wait".into())),
        "{state:?}"
    );
    assert_eq!(state.last().unwrap().1, "1");

    // Another token, another hook, another instance: still refused.
    assert!(
        refused(
            complete("drain", None, Some("11111111-2222-3333-4444-555555555555"))
                .await
                .unwrap_err()
        )
        .contains("with token")
    );
    assert!(
        refused(complete("other", Some(&ids[0]), None).await.unwrap_err())
            .contains("with instance ID")
    );
    assert!(refused(complete("drain", Some(&ids[1]), None).await.unwrap_err()).contains(&ids[1]));
    // A heartbeat with the token, then completing by instance: accepted; the instance goes.
    c.asg
        .record_lifecycle_action_heartbeat()
        .auto_scaling_group_name("workers")
        .lifecycle_hook_name("drain")
        .lifecycle_action_token(&token)
        .send()
        .await
        .unwrap();
    complete("drain", Some(&ids[0]), None).await.unwrap();
    let state = instances(&c, "workers").await;
    assert_eq!(
        state,
        [
            (ids[1].clone(), "InService".to_string()),
            ("desired".into(), "1".into())
        ]
    );
    // Done: a second completion is refused.
    assert!(refused(complete("drain", None, Some(&token)).await.unwrap_err()).contains(&token));
    let calls = cloud.lifecycle_calls();
    let errors: Vec<bool> = calls.iter().map(|c| c.get("error").is_some()).collect();
    assert_eq!(
        errors,
        [true, true, true, true, true, false, false, true],
        "{calls:?}"
    );
}

/// CloudWatch as the SDK speaks it (rpc-v2-cbor): alarms put, read back with their state and
/// its change time, an unknown alarm refused by name.
#[tokio::test]
async fn cloudwatch_alarms_over_cbor_behave_as_the_service() {
    use aws_sdk_cloudwatch::types::{ComparisonOperator, StateValue, Statistic};
    let cloud = FakeCloud::start();
    let cw = aws_sdk_cloudwatch::Client::new(&config(&cloud).await);
    cw.put_metric_alarm()
        .alarm_name("errors")
        .namespace("app")
        .metric_name("Errors")
        .statistic(Statistic::Sum)
        .period(60)
        .evaluation_periods(1)
        .threshold(1.0)
        .comparison_operator(ComparisonOperator::GreaterThanThreshold)
        .send()
        .await
        .unwrap();
    let before = chrono::Utc::now().timestamp();
    cw.set_alarm_state()
        .alarm_name("errors")
        .state_value(StateValue::Alarm)
        .state_reason("test")
        .send()
        .await
        .unwrap();
    let out = cw
        .describe_alarms()
        .alarm_names("errors")
        .alarm_names("other")
        .send()
        .await
        .unwrap();
    let alarms = out.metric_alarms();
    assert_eq!(alarms.len(), 1);
    assert_eq!(alarms[0].state_value(), Some(&StateValue::Alarm));
    assert!(alarms[0].state_updated_timestamp().unwrap().secs() >= before);
    let err = cw
        .set_alarm_state()
        .alarm_name("missing")
        .state_value(StateValue::Ok)
        .state_reason("test")
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        aws_sdk_cloudwatch::error::ProvideErrorMetadata::code(&err),
        Some("ResourceNotFound")
    );
}

/// What the Rust SDK reads of a group, without what differs between two groups by
/// construction (names, ids, addresses, times).
async fn group_view(a: &support::Adapters, name: &str) -> String {
    let out = a
        .clients
        .autoscaling
        .describe_auto_scaling_groups()
        .auto_scaling_group_names(name)
        .send()
        .await
        .unwrap();
    let g = &out.auto_scaling_groups()[0];
    let lt = g.launch_template().unwrap();
    let tags: Vec<_> = g
        .tags()
        .iter()
        .map(|t| {
            (
                t.key(),
                t.value(),
                t.propagate_at_launch(),
                t.resource_type(),
            )
        })
        .collect();
    let members: Vec<_> = g
        .instances()
        .iter()
        .map(|i| {
            (
                i.availability_zone(),
                i.lifecycle_state().map(|s| s.as_str().to_string()),
                i.health_status(),
                i.launch_template().and_then(|t| t.version()),
                i.protected_from_scale_in(),
                i.instance_type(),
            )
        })
        .collect();
    let ids: Vec<String> = g
        .instances()
        .iter()
        .map(|i| i.instance_id().unwrap().to_string())
        .collect();
    let described = a
        .clients
        .ec2
        .describe_instances()
        .set_instance_ids(Some(ids))
        .send()
        .await
        .unwrap();
    let mut instances: Vec<String> = described
        .reservations()
        .iter()
        .flat_map(|r| r.instances())
        .map(|i| {
            let mut tags: Vec<(String, String)> = i
                .tags()
                .iter()
                .map(|t| {
                    let (k, v) = (t.key().unwrap_or_default(), t.value().unwrap_or_default());
                    let v = if v == name || v.starts_with("lt-") {
                        "X"
                    } else {
                        v
                    };
                    (k.to_string(), v.to_string())
                })
                .collect();
            tags.sort();
            format!(
                "{:?}",
                (
                    i.image_id(),
                    i.instance_type(),
                    i.state().and_then(|s| s.name()),
                    i.placement().and_then(|p| p.availability_zone()),
                    i.subnet_id().is_some(),
                    i.private_ip_address().map(|ip| ip.starts_with("10.3.")),
                    i.architecture(),
                    i.root_device_name(),
                    i.block_device_mappings().len(),
                    i.network_interfaces().len(),
                    tags,
                )
            )
        })
        .collect();
    instances.sort();
    let versions = a
        .clients
        .ec2
        .describe_launch_template_versions()
        .launch_template_name(name)
        .send()
        .await
        .unwrap();
    let data: Vec<_> = versions
        .launch_template_versions()
        .iter()
        .map(|v| {
            (
                v.version_number(),
                v.default_version(),
                v.launch_template_data().and_then(|d| d.image_id()),
                v.launch_template_data().and_then(|d| d.instance_type()),
            )
        })
        .collect();
    format!(
        "{:?}",
        (
            g.min_size(),
            g.max_size(),
            g.desired_capacity(),
            lt.version(),
            g.vpc_zone_identifier(),
            g.availability_zones(),
            g.health_check_type(),
            tags,
            members,
            instances,
            data
        )
    )
}

/// Every page of DescribeInstances for `filter` = `values`, 5 instances a page: (reservation
/// ids, instance ids, whether a next page is announced).
async fn pages(a: &support::Adapters, filter: &str, values: &[&str]) -> Vec<String> {
    let mut out = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let page = a
            .clients
            .ec2
            .describe_instances()
            .filters(
                aws_sdk_ec2::types::Filter::builder()
                    .name(filter)
                    .set_values(Some(values.iter().map(|v| v.to_string()).collect()))
                    .build(),
            )
            .max_results(5)
            .set_next_token(token.clone())
            .send()
            .await
            .unwrap();
        for r in page.reservations() {
            let ids: Vec<_> = r.instances().iter().map(|i| i.instance_id()).collect();
            out.push(format!("{:?} {ids:?}", r.reservation_id()));
        }
        token = page.next_token().map(str::to_string);
        out.push(format!("next: {token:?}"));
        if token.is_none() {
            return out;
        }
    }
}

#[tokio::test]
async fn seeded_groups_read_like_groups_made_through_the_api_and_indexed_answers_are_motos() {
    let cloud = FakeCloud::start();
    let a = support::Adapters::new(&cloud).await;
    let image = cloud.register_image(ImageFixture::new("golden-1").owner("self"));
    let subnet = a.create_subnet("10.3.0.0/16", "10.3.0.0/17").await;
    a.create_group_in("api-g", &image, "m5.large", 3, 5, Some("c0"), Some(&subnet))
        .await;
    let seeded = cloud.seed_groups(
        &[GroupSeed::new("seed-g", &image, 3)
            .max(5)
            .subnet(&subnet)
            .cluster("c0")],
        false,
    );
    assert_eq!((seeded.groups, seeded.instances), (1, 3), "{seeded:?}");
    assert!(seeded.launch_templates["seed-g"].starts_with("lt-"));
    assert_eq!(
        group_view(&a, "seed-g").await,
        group_view(&a, "api-g").await,
        "a seeded group reads like one made through the API"
    );

    // More reservations than a page, then the same questions with moto's own walks.
    cloud.seed_groups(
        &(0..6)
            .map(|i| {
                GroupSeed::new(&format!("more-{i}"), &image, 2)
                    .subnet(&subnet)
                    .cluster(if i % 2 == 0 { "c0" } else { "c1" })
            })
            .collect::<Vec<_>>(),
        false,
    );
    let questions = [
        ("tag:eks:cluster-name", vec!["c0"]),
        ("tag:eks:cluster-name", vec!["c1", "c0"]),
        ("tag:aws:autoscaling:groupName", vec!["more-1", "api-g"]),
        ("instance-state-name", vec!["running"]),
    ];
    let mut indexed = Vec::new();
    for (filter, values) in &questions {
        indexed.push(pages(&a, filter, values).await);
    }
    let off = cloud.control("moto_speedups", json!({"enabled": false}));
    assert_eq!(off["enabled"], json!(false));
    for ((filter, values), answer) in questions.iter().zip(&indexed) {
        assert_eq!(
            &pages(&a, filter, values).await,
            answer,
            "{filter}={values:?}: moto's own answer"
        );
    }
    let on = cloud.control("moto_speedups", json!({"enabled": true}));
    assert!(
        on["indexed"].as_u64().unwrap() > 0,
        "the indexes answered: {on}"
    );
    // EC2's pages count instances, not reservations: c0's 12 (seed-g and api-g 3 each, 3 more
    // groups 2 each) come in pages of 5, 5 and 2, a reservation split where a page is full.
    let mut per_page = vec![0];
    for line in &indexed[0] {
        if line.starts_with("next:") {
            per_page.push(0);
        } else {
            *per_page.last_mut().unwrap() += line.matches("Some(\"i-").count();
        }
    }
    per_page.pop();
    assert_eq!(
        per_page,
        [5, 5, 2],
        "seed-g, api-g and 3 more in c0, 5 instances a page: {indexed:?}"
    );
}
