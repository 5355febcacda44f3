//! template.yaml and the code agree: the table the tests and the local run create has the same
//! keys and TTL as the deployed one, and every function in the template exists in the workspace.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use serde_norway::Value;

fn template() -> Value {
    let text = std::fs::read_to_string(nodecycle_tests::repo_path("template.yaml")).unwrap();
    serde_norway::from_str(&text).unwrap()
}

#[test]
fn table_definition_matches_the_code() {
    let t = template();
    let props = &t["Resources"]["StateTable"]["Properties"];
    assert_eq!(props["BillingMode"], "PAY_PER_REQUEST");
    let keys: Vec<(String, String)> = props["KeySchema"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|k| {
            (
                k["AttributeName"].as_str().unwrap().into(),
                k["KeyType"].as_str().unwrap().into(),
            )
        })
        .collect();
    assert_eq!(
        keys,
        vec![
            (nodecycle::state::PK.into(), "HASH".into()),
            (nodecycle::state::SK.into(), "RANGE".into())
        ]
    );
    for a in props["AttributeDefinitions"].as_sequence().unwrap() {
        assert_eq!(a["AttributeType"], "S");
    }
    assert_eq!(
        props["TimeToLiveSpecification"]["AttributeName"],
        nodecycle::state::TTL
    );
    assert_eq!(props["TimeToLiveSpecification"]["Enabled"], true);
}

#[test]
fn functions_are_built_from_workspace_binaries_for_arm64() {
    let t = template();
    assert_eq!(t["Globals"]["Function"]["Runtime"], "provided.al2023");
    assert_eq!(t["Globals"]["Function"]["Architectures"][0], "arm64");
    for (name, res) in t["Resources"].as_mapping().unwrap() {
        if res["Type"] != "AWS::Serverless::Function" {
            continue;
        }
        assert_eq!(
            res["Metadata"]["BuildMethod"], "rust-cargolambda",
            "{name:?}"
        );
        let binary = res["Metadata"]["BuildProperties"]["Binary"]
            .as_str()
            .unwrap();
        let manifest = nodecycle_tests::repo_path(&format!("functions/{binary}/Cargo.toml"));
        assert!(
            manifest.exists(),
            "{name:?} builds {binary}, which has no crate"
        );
    }
}

#[test]
fn mutating_actions_never_use_a_wildcard_resource() {
    let t = template();
    for (name, res) in t["Resources"].as_mapping().unwrap() {
        let Some(policies) = res["Properties"]["Policies"].as_sequence() else {
            continue;
        };
        for p in policies {
            for st in p["Statement"].as_sequence().unwrap() {
                let actions: Vec<&str> = match &st["Action"] {
                    Value::String(s) => vec![s.as_str()],
                    Value::Sequence(v) => v.iter().filter_map(Value::as_str).collect(),
                    _ => vec![],
                };
                let read_only = actions.iter().all(|a| {
                    let verb = a.split(':').nth(1).unwrap_or("");
                    ["Describe", "Get", "List", "Query"]
                        .iter()
                        .any(|p| verb.starts_with(p))
                });
                if st["Resource"] == "*" {
                    assert!(
                        read_only || st["Condition"].is_mapping(),
                        "{name:?}: {actions:?} on * without a condition"
                    );
                }
            }
        }
    }
}

#[test]
fn node_group_updates_are_scoped_to_the_named_clusters() {
    let t = template();
    let statements = t["Resources"]["RotatorFunction"]["Properties"]["Policies"][0]["Statement"]
        .as_sequence()
        .unwrap();
    let st = statements
        .iter()
        .find(|s| {
            s["Action"]
                .as_sequence()
                .is_some_and(|a| a.iter().any(|x| x == "eks:UpdateNodegroupVersion"))
        })
        .expect("the rotator may update node groups");
    // One `nodegroup/<cluster>/*/*` ARN per entry of ClusterNames, never `nodegroup/*`.
    let resource = format!("{:?}", st["Resource"]);
    assert!(resource.contains("Split"), "{resource}");
    assert!(resource.contains("ClusterNames"), "{resource}");
    assert!(resource.contains("nodegroup/${Clusters}/*/*"), "{resource}");
    assert!(!resource.contains("nodegroup/*\""), "{resource}");
}
