//! Table tests: every rule with its exact message, several problems at once in document order,
//! YAML and JSON, defaults, and Karpenter snippets pasted unchanged.

use std::collections::BTreeMap;
use std::time::Duration;

use proptest::prelude::*;

use super::*;
use crate::image::alias::{AliasVersion, Family};
use crate::problem::Severity;

/// A valid document; tests replace or append lines.
const BASE: &str = "\
cluster: prod
name: general
nodeGroup: { autoScalingGroup: prod-general }
amiSelectorTerms:
  - alias: al2023@latest
";

/// Every problem of `text`, displayed as `<path>: <message>`.
fn messages(text: &str) -> Vec<String> {
    parse(text)
        .problems
        .0
        .iter()
        .map(ToString::to_string)
        .collect()
}

/// The base document with its terms replaced by `terms` (a YAML block or flow list).
fn with_terms(terms: &str) -> String {
    format!(
        "cluster: prod\nname: general\nnodeGroup: {{ autoScalingGroup: prod-general }}\namiSelectorTerms: {terms}\n"
    )
}

/// Asserts that each document gives exactly the expected problems, in order, and that the
/// policy is returned exactly when none of them is an error.
fn check_table(cases: &[(String, &[&str])]) {
    for (doc, expected) in cases {
        let parsed = parse(doc);
        let got: Vec<String> = parsed.problems.0.iter().map(ToString::to_string).collect();
        assert_eq!(got, *expected, "document:\n{doc}");
        assert_eq!(
            parsed.policy.is_some(),
            !parsed.problems.has_errors(),
            "policy presence for document:\n{doc}"
        );
    }
}

fn valid(text: &str) -> Policy {
    let parsed = parse(text);
    let errors: Vec<String> = parsed.problems.errors().map(ToString::to_string).collect();
    assert!(
        errors.is_empty(),
        "unexpected errors {errors:?} for:\n{text}"
    );
    parsed
        .policy
        .unwrap_or_else(|| panic!("no policy for:\n{text}"))
}

fn alias_term(family: Family, version: AliasVersion) -> SelectorTerm {
    SelectorTerm {
        alias: Some(Alias { family, version }),
        ..SelectorTerm::default()
    }
}

// ---------------------------------------------------------------------------------------------
// Valid documents and defaults
// ---------------------------------------------------------------------------------------------

#[test]
fn design_example_is_valid() {
    let text = r#"
cluster: prod
name: general
nodeGroup: { autoScalingGroup: prod-general }   # or { managedNodeGroup: general }
amiSelectorTerms:
  - alias: al2023@v20240807
disruption:
  budgets:
    - nodes: 15%
    - nodes: "0"
      schedule: "0 9 * * sat-sun"
      duration: 24h
      timeZone: Asia/Shanghai
expireAfter: 720h
terminationGracePeriod: 2h
"#;
    let policy = valid(text);
    assert_eq!(policy.cluster, "prod");
    assert_eq!(policy.name, "general");
    assert_eq!(policy.pool_id(), "prod/general");
    assert_eq!(
        policy.node_group,
        NodeGroup::AutoScalingGroup("prod-general".into())
    );
    assert_eq!(
        policy.ami_selector_terms,
        vec![alias_term(
            Family::Al2023,
            AliasVersion::Pinned("v20240807".into())
        )]
    );
    assert_eq!(policy.expire_after, Some(Duration::from_secs(720 * 3600)));
    assert_eq!(
        policy.termination_grace_period,
        Some(Duration::from_secs(2 * 3600))
    );
    // Budget problems (e.g. the portability warning for `sat-sun`) belong to the budget engine.
    assert!(
        parse(text)
            .problems
            .0
            .iter()
            .all(|p| p.path.starts_with("disruption.budgets"))
    );
}

#[test]
fn json_document_is_valid() {
    let text = r#"{
  "cluster": "prod",
  "name": "gpu",
  "nodeGroup": {"managedNodeGroup": "gpu-nodes"},
  "architecture": "x86_64",
  "variant": "nvidia",
  "amiSelectorTerms": [{"alias": "bottlerocket@1.19.2"}],
  "expireAfter": "Never",
  "interruption": {"rebalance": "replace"},
  "paused": true
}"#;
    assert_eq!(messages(text), Vec::<String>::new());
    let policy = valid(text);
    assert_eq!(
        policy.node_group,
        NodeGroup::ManagedNodeGroup("gpu-nodes".into())
    );
    assert_eq!(policy.architecture, Some(Architecture::X86_64));
    assert_eq!(policy.variant, Variant::Nvidia);
    assert_eq!(
        policy.ami_selector_terms,
        vec![alias_term(
            Family::Bottlerocket,
            AliasVersion::Pinned("1.19.2".into())
        )]
    );
    assert_eq!(policy.expire_after, None);
    assert_eq!(policy.rebalance, RebalanceAction::Replace);
    assert!(policy.paused);
}

#[test]
fn defaults_are_applied() {
    assert_eq!(messages(BASE), Vec::<String>::new());
    let policy = valid(BASE);
    assert_eq!(policy.architecture, None);
    assert_eq!(policy.variant, Variant::Standard);
    assert_eq!(policy.expire_after, Some(DEFAULT_EXPIRE_AFTER));
    assert_eq!(policy.termination_grace_period, None);
    assert_eq!(policy.rebalance, RebalanceAction::Ignore);
    assert!(!policy.paused);
    let mut scratch = Problems::new();
    assert_eq!(
        policy.budgets,
        crate::budget::parse_budgets(None, "disruption.budgets", &mut scratch)
    );
    // An empty `disruption` and an empty `interruption` also mean the defaults.
    let policy = valid(&format!("{BASE}disruption: {{}}\ninterruption: {{}}\n"));
    assert_eq!(policy.rebalance, RebalanceAction::Ignore);
    assert_eq!(
        policy.budgets,
        crate::budget::parse_budgets(None, "disruption.budgets", &mut scratch)
    );
}

#[test]
fn karpenter_term_snippets_are_accepted_unchanged() {
    let cases: &[(&str, Vec<SelectorTerm>)] = &[
        (
            "\n  - alias: al2023@v20240807",
            vec![alias_term(
                Family::Al2023,
                AliasVersion::Pinned("v20240807".into()),
            )],
        ),
        (
            "\n  - alias: al2@latest",
            vec![alias_term(Family::Al2, AliasVersion::Latest)],
        ),
        (
            "\n  - alias: windows2025@latest",
            vec![alias_term(Family::Windows2025, AliasVersion::Latest)],
        ),
        (
            // The Karpenter docs' name + owner example: one owner per term.
            "\n  - name: my-ami\n    owner: self\n  - name: my-ami\n    owner: \"123456789012\"\n",
            vec![
                SelectorTerm {
                    name: Some("my-ami".into()),
                    owner: Some("self".into()),
                    ..SelectorTerm::default()
                },
                SelectorTerm {
                    name: Some("my-ami".into()),
                    owner: Some("123456789012".into()),
                    ..SelectorTerm::default()
                },
            ],
        ),
        (
            "\n  - tags:\n      karpenter.sh/discovery: \"${CLUSTER_NAME}\"\n      environment: \"*\"",
            vec![SelectorTerm {
                tags: BTreeMap::from([
                    ("environment".into(), "*".into()),
                    ("karpenter.sh/discovery".into(), "${CLUSTER_NAME}".into()),
                ]),
                ..SelectorTerm::default()
            }],
        ),
        (
            "\n  - id: ami-123\n  - id: ami-456\n  - name: \"amazon-eks-node-al2023-*\"\n    owner: \"602401143452\"",
            vec![
                SelectorTerm {
                    id: Some("ami-123".into()),
                    ..SelectorTerm::default()
                },
                SelectorTerm {
                    id: Some("ami-456".into()),
                    ..SelectorTerm::default()
                },
                SelectorTerm {
                    name: Some("amazon-eks-node-al2023-*".into()),
                    owner: Some("602401143452".into()),
                    ..SelectorTerm::default()
                },
            ],
        ),
        (
            "\n  - ssmParameter: /my/ami/id\n  - ssmParameter: arn:aws:ssm:us-east-1:123456789012:parameter/shared/ami",
            vec![
                SelectorTerm {
                    ssm_parameter: Some("/my/ami/id".into()),
                    ..SelectorTerm::default()
                },
                SelectorTerm {
                    ssm_parameter: Some(
                        "arn:aws:ssm:us-east-1:123456789012:parameter/shared/ami".into(),
                    ),
                    ..SelectorTerm::default()
                },
            ],
        ),
        (
            "\n  - tags:\n      team: ml\n    name: \"my-ami-?\"\n    owner: amazon",
            vec![SelectorTerm {
                name: Some("my-ami-?".into()),
                owner: Some("amazon".into()),
                tags: BTreeMap::from([("team".into(), "ml".into())]),
                ..SelectorTerm::default()
            }],
        ),
    ];
    for (terms, expected) in cases {
        let text = with_terms(terms);
        assert_eq!(messages(&text), Vec::<String>::new(), "{text}");
        assert_eq!(valid(&text).ami_selector_terms, *expected, "{text}");
    }
}

#[test]
fn thirty_terms_are_accepted() {
    let terms: String = (0..30).map(|i| format!("\n  - id: ami-{i:04}")).collect();
    assert_eq!(valid(&with_terms(&terms)).ami_selector_terms.len(), 30);
}

// ---------------------------------------------------------------------------------------------
// Document and top-level fields
// ---------------------------------------------------------------------------------------------

#[test]
fn document_shape_problems() {
    let all_fields = FIELDS.join(", ");
    let cases: Vec<(String, Vec<String>)> = vec![
        (
            String::new(),
            vec![format!("(document): empty document; expected an object with the fields {all_fields}")],
        ),
        (
            "- alias: al2023@latest\n".into(),
            vec![format!(
                "(document): expected an object with the fields {all_fields}, got a list"
            )],
        ),
        (
            "\"prod\"".into(),
            vec![format!(
                "(document): expected an object with the fields {all_fields}, got \"prod\""
            )],
        ),
        (
            "cluster: prod\ncluster: staging\n".into(),
            vec![
                "(document): not a valid YAML or JSON document: duplicate entry with key \"cluster\"; expected each key at most once per mapping".into(),
            ],
        ),
        (
            "{\"cluster\": \"prod\", \"cluster\": \"staging\"}".into(),
            vec![
                "(document): not a valid YAML or JSON document: duplicate entry with key \"cluster\"; expected each key at most once per mapping".into(),
            ],
        ),
        (
            "cluster: [prod\n".into(),
            vec![
                "(document): not a valid YAML or JSON document: while parsing a flow sequence, expected ',' or ']' at byte 15 line 2 column 1".into(),
            ],
        ),
        (
            format!("{BASE}---\n{BASE}"),
            vec![
                "(document): not a valid YAML or JSON document: deserializing from YAML containing more than one document is not supported".into(),
            ],
        ),
    ];
    for (doc, expected) in cases {
        let parsed = parse(&doc);
        let got: Vec<String> = parsed.problems.0.iter().map(ToString::to_string).collect();
        assert_eq!(got, expected, "document:\n{doc}");
        assert!(parsed.policy.is_none());
    }
}

#[test]
fn top_level_field_rules() {
    let all = FIELDS.join(", ");
    let unknown =
        |field: &str, hint: &str| format!("{field}: unknown field; expected one of {all}{hint}");
    let cases: Vec<(String, Vec<String>)> = vec![
        // Required fields.
        (
            "paused: false\n".into(),
            vec![
                "cluster: required field is missing; expected the EKS cluster name".into(),
                "name: required field is missing; expected the pool name (letters, digits, '-' and '_', at most 63 characters)".into(),
                "nodeGroup: required field is missing; expected an object with exactly one of autoScalingGroup, managedNodeGroup, e.g. { autoScalingGroup: my-asg }".into(),
                "amiSelectorTerms: required field is missing; expected a list of 1 to 30 terms, e.g. [{ alias: al2023@latest }]".into(),
            ],
        ),
        // Unknown fields, with hints for near misses and Karpenter-only fields.
        (format!("{BASE}pause: true\n"), vec![unknown("pause", "; did you mean paused?")]),
        (format!("{BASE}expireAfer: 24h\n"), vec![unknown("expireAfer", "; did you mean expireAfter?")]),
        (format!("{BASE}amiSelectorTerm: []\n"), vec![unknown("amiSelectorTerm", "; did you mean amiSelectorTerms?")]),
        (format!("{BASE}clusterName: prod\n"), vec![unknown("clusterName", "")]),
        (format!("{BASE}expire_after: 24h\n"), vec![unknown("expire_after", "; did you mean expireAfter?")]),
        (format!("{BASE}AMISelectorTerms: []\n"), vec![unknown("AMISelectorTerms", "; did you mean amiSelectorTerms?")]),
        (
            format!("{BASE}amiFamily: AL2023\n"),
            vec![unknown("amiFamily", "; the AMI family comes from an alias term such as { alias: al2023@latest }")],
        ),
        (
            format!("{BASE}spec: {{}}\n"),
            vec![unknown("spec", "; nodecycle policies are flat: put amiSelectorTerms, disruption, expireAfter and the other fields at the top level")],
        ),
        (format!("{BASE}\"\": 1\n"), vec![unknown("\"\"", "")]),
        (format!("{BASE}budgets: []\n"), vec![unknown("budgets", "; did you mean disruption.budgets?")]),
        (format!("{BASE}rebalance: cordon\n"), vec![unknown("rebalance", "; did you mean interruption.rebalance?")]),
        (format!("{BASE}managedNodeGroup: general\n"), vec![unknown("managedNodeGroup", "; did you mean nodeGroup.managedNodeGroup?")]),
        (
            format!("{BASE}tags: {{ team: ml }}\n"),
            vec![unknown("tags", "; tags belongs in a term of amiSelectorTerms, e.g. amiSelectorTerms: [{ alias: al2023@latest }]")],
        ),
        // cluster
        ("cluster: 2024\nname: general\nnodeGroup: { autoScalingGroup: prod-general }\namiSelectorTerms: [{ alias: al2023@latest }]\n".into(),
            vec!["cluster: expected a string (the EKS cluster name), got 2024 (quote it: \"2024\")".into()]),
        (BASE.replace("cluster: prod", "cluster: \"\""), vec!["cluster: empty; expected the EKS cluster name".into()]),
        (BASE.replace("cluster: prod", "cluster:"), vec!["cluster: expected a string (the EKS cluster name), got null".into()]),
        (BASE.replace("cluster: prod", "cluster: -prod"), vec!["cluster: \"-prod\" starts with '-'; expected a letter or digit first".into()]),
        (BASE.replace("cluster: prod", "cluster: my cluster"), vec!["cluster: \"my cluster\" contains ' '; expected only letters, digits, '-' and '_'".into()]),
        (
            BASE.replace("cluster: prod", &format!("cluster: _{}.x", "a".repeat(100))),
            vec![
                "cluster: too long (103 characters); expected at most 100 characters".into(),
                format!("cluster: \"_{}\"... starts with '_'; expected a letter or digit first", "a".repeat(79)),
                format!("cluster: \"_{}\"... contains '.'; expected only letters, digits, '-' and '_'", "a".repeat(79)),
            ],
        ),
        (BASE.replace("cluster: prod", &format!("cluster: {}", "c".repeat(100))), vec![]),
        // name
        (BASE.replace("name: general", "name: gpu.nodes"), vec!["name: \"gpu.nodes\" contains '.'; expected only letters, digits, '-' and '_'".into()]),
        (BASE.replace("name: general", &format!("name: {}", "n".repeat(64))), vec!["name: too long (64 characters); expected at most 63 characters".into()]),
        (BASE.replace("name: general", &format!("name: {}", "n".repeat(63))), vec![]),
        (BASE.replace("name: general", "name: [general]"), vec!["name: expected a string (the pool name), got a list".into()]),
        (BASE.replace("name: general", "name: Ünïcode"), vec!["name: \"Ünïcode\" starts with 'Ü'; expected a letter or digit first".into(), "name: \"Ünïcode\" contains 'ï'; expected only letters, digits, '-' and '_'".into()]),
        // architecture
        (format!("{BASE}architecture: arm64\n"), vec![]),
        (format!("{BASE}architecture: amd64\n"), vec!["architecture: unknown architecture \"amd64\"; expected one of x86_64, arm64 (did you mean x86_64?)".into()]),
        (format!("{BASE}architecture: aarch64\n"), vec!["architecture: unknown architecture \"aarch64\"; expected one of x86_64, arm64 (did you mean arm64?)".into()]),
        (format!("{BASE}architecture: X86_64\n"), vec!["architecture: unknown architecture \"X86_64\"; expected one of x86_64, arm64 (did you mean x86_64?)".into()]),
        (format!("{BASE}architecture: i386\n"), vec!["architecture: unknown architecture \"i386\"; expected one of x86_64, arm64".into()]),
        (format!("{BASE}architecture: 64\n"), vec!["architecture: expected a string (x86_64 or arm64), got 64".into()]),
        // variant
        (format!("{BASE}variant: neuron\n"), vec![]),
        (format!("{BASE}variant: gpu\n"), vec!["variant: unknown variant \"gpu\"; expected one of standard, nvidia, neuron (did you mean nvidia?)".into()]),
        (format!("{BASE}variant: Standard\n"), vec!["variant: unknown variant \"Standard\"; expected one of standard, nvidia, neuron (did you mean standard?)".into()]),
        (format!("{BASE}variant: fpga\n"), vec!["variant: unknown variant \"fpga\"; expected one of standard, nvidia, neuron".into()]),
        (format!("{BASE}variant: true\n"), vec!["variant: expected a string (standard, nvidia or neuron), got true".into()]),
        // expireAfter
        (format!("{BASE}expireAfter: 24h\n"), vec![]),
        (format!("{BASE}expireAfter: 30d\n"), vec!["expireAfter: invalid duration \"30d\"; expected a number and unit such as \"720h\", \"1h30m\" or \"90s\", or \"Never\" (days are not a unit: 30d is \"720h\")".into()]),
        (format!("{BASE}expireAfter: never\n"), vec!["expireAfter: invalid duration \"never\"; expected a number and unit such as \"720h\", \"1h30m\" or \"90s\", or \"Never\" (\"Never\" is capitalized)".into()]),
        (format!("{BASE}expireAfter: 1.5h\n"), vec!["expireAfter: invalid duration \"1.5h\"; expected a number and unit such as \"720h\", \"1h30m\" or \"90s\", or \"Never\"".into()]),
        (format!("{BASE}expireAfter: 0s\n"), vec!["expireAfter: 0s would expire every node at once; expected a duration longer than 0s, such as \"720h\", or \"Never\"".into()]),
        (format!("{BASE}expireAfter: 720\n"), vec!["expireAfter: expected a string (a duration such as \"720h\", or \"Never\"), got 720".into()]),
        (format!("{BASE}expireAfter:\n"), vec!["expireAfter: expected a string (a duration such as \"720h\", or \"Never\"), got null".into()]),
        // terminationGracePeriod
        (format!("{BASE}terminationGracePeriod: 0s\n"), vec![]),
        (format!("{BASE}terminationGracePeriod: 2 hours\n"), vec!["terminationGracePeriod: invalid duration \"2 hours\"; expected a number and unit such as \"2h\", \"1h30m\" or \"90s\"".into()]),
        (format!("{BASE}terminationGracePeriod: 2d\n"), vec!["terminationGracePeriod: invalid duration \"2d\"; expected a number and unit such as \"2h\", \"1h30m\" or \"90s\" (days are not a unit: 2d is \"48h\")".into()]),
        (format!("{BASE}terminationGracePeriod: Never\n"), vec!["terminationGracePeriod: \"Never\" is not allowed here; expected a duration such as \"2h\" (omit terminationGracePeriod to let drains wait indefinitely)".into()]),
        (format!("{BASE}terminationGracePeriod: {{ hours: 2 }}\n"), vec!["terminationGracePeriod: expected a string (a duration such as \"2h\"), got an object".into()]),
        // interruption
        (format!("{BASE}interruption: {{ rebalance: cordon }}\n"), vec![]),
        (format!("{BASE}interruption: {{ rebalance: drain }}\n"), vec!["interruption.rebalance: unknown action \"drain\"; expected one of ignore, cordon, replace".into()]),
        (format!("{BASE}interruption: {{ rebalance: Cordon }}\n"), vec!["interruption.rebalance: unknown action \"Cordon\"; expected one of ignore, cordon, replace (did you mean cordon?)".into()]),
        (format!("{BASE}interruption: {{ rebalance: false }}\n"), vec!["interruption.rebalance: expected a string (ignore, cordon or replace), got false".into()]),
        (format!("{BASE}interruption: {{ spot: drain }}\n"), vec!["interruption.spot: unknown field; expected one of rebalance".into()]),
        (format!("{BASE}interruption: cordon\n"), vec!["interruption: expected an object with the field rebalance, got \"cordon\"".into()]),
        // disruption
        (format!("{BASE}disruption: {{ consolidationPolicy: WhenEmpty }}\n"), vec!["disruption.consolidationPolicy: unknown field; expected one of budgets, order, surgeAboveMaxSize; nodecycle does not consolidate nodes".into()]),
        (format!("{BASE}disruption: [{{ nodes: 10% }}]\n"), vec!["disruption: expected an object with the field budgets, got a list".into()]),
        // paused
        (format!("{BASE}paused: true\n"), vec![]),
        (format!("{BASE}paused: yes\n"), vec!["paused: expected a boolean (true or false), got \"yes\"".into()]),
        (format!("{BASE}paused: 1\n"), vec!["paused: expected a boolean (true or false), got 1".into()]),
        (format!("{BASE}paused:\n"), vec!["paused: expected a boolean (true or false), got null".into()]),
    ];
    for (doc, expected) in &cases {
        let parsed = parse(doc);
        let got: Vec<String> = parsed.problems.0.iter().map(ToString::to_string).collect();
        assert_eq!(&got, expected, "document:\n{doc}");
        assert_eq!(
            parsed.policy.is_some(),
            !parsed.problems.has_errors(),
            "document:\n{doc}"
        );
    }
}

#[test]
fn node_group_rules() {
    let doc = |node_group: &str| BASE.replace("{ autoScalingGroup: prod-general }", node_group);
    let cases: Vec<(String, &[&str])> = vec![
        (doc("{ managedNodeGroup: general_1 }"), &[]),
        (
            doc("{ autoScalingGroup: \"eks-general-20240807/a.b@c\" }"),
            &[],
        ),
        (
            doc("{ asg: prod-general }"),
            &[
                "nodeGroup.asg: unknown field; expected one of autoScalingGroup, managedNodeGroup",
                "nodeGroup: no node group given; expected exactly one of autoScalingGroup, managedNodeGroup",
            ],
        ),
        (
            doc("{ AutoScalingGroup: prod-general }"),
            &[
                "nodeGroup.AutoScalingGroup: unknown field; expected one of autoScalingGroup, managedNodeGroup; did you mean autoScalingGroup?",
                "nodeGroup: no node group given; expected exactly one of autoScalingGroup, managedNodeGroup",
            ],
        ),
        (
            doc("{}"),
            &[
                "nodeGroup: no node group given; expected exactly one of autoScalingGroup, managedNodeGroup",
            ],
        ),
        (
            doc("{ autoScalingGroup: a, managedNodeGroup: b }"),
            &[
                "nodeGroup: both autoScalingGroup and managedNodeGroup are set; expected exactly one (a pool manages one node group)",
            ],
        ),
        (
            doc("prod-general"),
            &[
                "nodeGroup: expected an object with exactly one of autoScalingGroup, managedNodeGroup, e.g. { autoScalingGroup: my-asg }, got \"prod-general\"",
            ],
        ),
        (
            doc("{ autoScalingGroup: \"\" }"),
            &["nodeGroup.autoScalingGroup: empty; expected the Auto Scaling group name"],
        ),
        (
            doc("{ autoScalingGroup: \"prod:general\" }"),
            &[
                "nodeGroup.autoScalingGroup: \"prod:general\" contains ':'; expected only printable ASCII characters other than ':' (no spaces)",
            ],
        ),
        (
            doc("{ autoScalingGroup: \"prod general\" }"),
            &[
                "nodeGroup.autoScalingGroup: \"prod general\" contains ' '; expected only printable ASCII characters other than ':' (no spaces)",
            ],
        ),
        (
            doc("{ managedNodeGroup: \"gpu.nodes\" }"),
            &[
                "nodeGroup.managedNodeGroup: \"gpu.nodes\" contains '.'; expected only letters, digits, '-' and '_'",
            ],
        ),
        (
            doc("{ managedNodeGroup: 7 }"),
            &[
                "nodeGroup.managedNodeGroup: expected a string (the EKS managed node group name), got 7 (quote it: \"7\")",
            ],
        ),
    ];
    let cases: Vec<(String, &[&str])> = cases;
    check_table(&cases);
    let long_asg = doc(&format!("{{ autoScalingGroup: {} }}", "a".repeat(256)));
    assert_eq!(
        messages(&long_asg),
        vec![
            "nodeGroup.autoScalingGroup: too long (256 characters); expected at most 255 characters"
        ]
    );
}

// ---------------------------------------------------------------------------------------------
// amiSelectorTerms
// ---------------------------------------------------------------------------------------------

const FAMILIES: &str = "al2, al2023, bottlerocket, windows2019, windows2022, windows2025";
const OWNERS: &str = "a 12-digit AWS account id, self, amazon, aws-marketplace or aws-backup-vault";

#[test]
fn alias_rules() {
    let t = |alias: &str| with_terms(&format!("\n  - alias: {alias}"));
    let unknown_family = |family: &str, hint: &str| {
        format!(
            "amiSelectorTerms[0].alias: unknown family \"{family}\"; expected one of {FAMILIES}{hint}"
        )
    };
    let format_error = |alias: &str| {
        format!(
            "amiSelectorTerms[0].alias: invalid alias \"{alias}\"; expected family@version such as \"al2023@latest\" or \"al2023@v20240807\""
        )
    };
    let cases: Vec<(String, Vec<String>)> = vec![
        (t("al2023@latest"), vec![]),
        (t("al2023@v20240807"), vec![]),
        (t("bottlerocket@v1.19.2"), vec![]),
        (t("windows2019@latest"), vec![]),
        (t("al2024@latest"), vec![unknown_family("al2024", "")]),
        (t("ubuntu@latest"), vec![unknown_family("ubuntu", "")]),
        (t("AL2023@latest"), vec![unknown_family("AL2023", " (families are lowercase: al2023)")]),
        (t("al2023"), vec![format_error("al2023")]),
        (t("\"al2023@\""), vec![format_error("al2023@")]),
        (t("\"@latest\""), vec![format_error("@latest")]),
        (t("al2023-latest"), vec![format_error("al2023-latest")]),
        (t("al2023@v1@v2"), vec![format_error("al2023@v1@v2")]),
        (t("windows2022@v20240807"), vec![
            "amiSelectorTerms[0].alias: windows2022 accepts only version \"latest\", got \"v20240807\"; expected \"windows2022@latest\"".into(),
        ]),
        (t("windows2025@v1.0.0"), vec![
            "amiSelectorTerms[0].alias: windows2025 accepts only version \"latest\", got \"v1.0.0\"; expected \"windows2025@latest\"".into(),
        ]),
        (t("al2023@Latest"), vec![
            "amiSelectorTerms[0].alias: invalid version \"Latest\"; expected \"latest\" in lowercase".into(),
        ]),
        (t("al2023@v2024/08"), vec![
            "amiSelectorTerms[0].alias: invalid version \"v2024/08\"; expected \"latest\" or a release version such as \"v20240807\" (letters, digits, '.', '-' and '_', starting with 'v' or a digit)".into(),
        ]),
        (t("al2023@v20240807-0123456789abcd"), vec![
            "amiSelectorTerms[0].alias: too long (31 characters); expected at most 30 characters".into(),
        ]),
        (t("al2023@v20240807-0123456789ab"), vec![]),
        (t("al2024@v20240807-0123456789abcd"), vec![
            "amiSelectorTerms[0].alias: too long (31 characters); expected at most 30 characters".into(),
            unknown_family("al2024", ""),
        ]),
        (t("2023"), vec![
            "amiSelectorTerms[0].alias: expected a string such as \"al2023@latest\" or \"al2023@v20240807\", got 2023".into(),
        ]),
    ];
    for (doc, expected) in &cases {
        assert_eq!(&messages(doc), expected, "document:\n{doc}");
    }
}

#[test]
fn issue_example_message_is_exact() {
    let text = with_terms("\n  - alias: al2024@latest");
    let parsed = parse(&text);
    assert!(parsed.policy.is_none());
    assert_eq!(
        parsed
            .problems
            .0
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>(),
        vec![
            "amiSelectorTerms[0].alias: unknown family \"al2024\"; expected one of al2, al2023, bottlerocket, windows2019, windows2022, windows2025"
        ]
    );
}

#[test]
fn term_rules() {
    let t = with_terms;
    let all_term_fields = "alias, id, name, owner, tags, ssmParameter";
    let selecting = "alias, id, name, tags, ssmParameter";
    let cases: Vec<(String, Vec<String>)> = vec![
        // Count.
        (t("[]"), vec!["amiSelectorTerms: empty; expected 1 to 30 terms, e.g. [{ alias: al2023@latest }]".into()]),
        (
            t(&(0..31).map(|i| format!("\n  - id: ami-{i:04}")).collect::<String>()),
            vec!["amiSelectorTerms: 31 terms; expected at most 30 (terms are ORed)".into()],
        ),
        (t("{ alias: al2023@latest }"), vec![
            "amiSelectorTerms: expected a list of 1 to 30 terms, e.g. [{ alias: al2023@latest }], got an object".into(),
        ]),
        (t("al2023@latest"), vec![
            "amiSelectorTerms: expected a list of 1 to 30 terms, e.g. [{ alias: al2023@latest }], got \"al2023@latest\"".into(),
        ]),
        (t("[al2023@latest]"), vec![
            format!("amiSelectorTerms[0]: expected an object with at least one of {selecting}, got \"al2023@latest\""),
        ]),
        (t("\n  -\n"), vec![format!("amiSelectorTerms[0]: expected an object with at least one of {selecting}, got null")]),
        // At least one selecting field.
        (t("[{}]"), vec![format!("amiSelectorTerms[0]: no selector; expected at least one of {selecting}")]),
        (t("[{ owner: self }]"), vec![
            format!("amiSelectorTerms[0]: owner alone selects nothing; expected at least one of {selecting} with it"),
        ]),
        // Unknown term fields.
        (t("[{ imageId: ami-123 }]"), vec![
            format!("amiSelectorTerms[0].imageId: unknown field; expected one of {all_term_fields}"),
            format!("amiSelectorTerms[0]: no selector; expected at least one of {selecting}"),
        ]),
        (t("[{ ID: ami-123 }]"), vec![
            format!("amiSelectorTerms[0].ID: unknown field; expected one of {all_term_fields}; did you mean id?"),
            format!("amiSelectorTerms[0]: no selector; expected at least one of {selecting}"),
        ]),
        (t("[{ ssm_parameter: /a/b }]"), vec![
            format!("amiSelectorTerms[0].ssm_parameter: unknown field; expected one of {all_term_fields}; did you mean ssmParameter?"),
            format!("amiSelectorTerms[0]: no selector; expected at least one of {selecting}"),
        ]),
        // alias: exclusive in its term and in the list.
        (t("[{ alias: al2023@latest, owner: self }]"), vec![
            "amiSelectorTerms[0]: alias cannot be combined with other fields in its term (found owner); expected alias alone".into(),
        ]),
        (t("[{ alias: al2023@latest, id: ami-123, tags: { a: b } }]"), vec![
            "amiSelectorTerms[0]: alias cannot be combined with other fields in its term (found id, tags); expected alias alone".into(),
        ]),
        (t("[{ alias: al2023@latest, ssmParameter: /a/b }]"), vec![
            "amiSelectorTerms[0]: alias cannot be combined with other fields in its term (found ssmParameter); expected alias alone".into(),
        ]),
        (t("[{ alias: al2023@latest }, { id: ami-123 }]"), vec![
            "amiSelectorTerms: an alias term must be the only term, got 2 terms; expected a single alias term, or terms without alias".into(),
        ]),
        (t("[{ alias: al2023@latest }, { alias: bottlerocket@latest }]"), vec![
            "amiSelectorTerms: an alias term must be the only term, got 2 terms; expected a single alias term, or terms without alias".into(),
        ]),
        // id: pattern and exclusive.
        (t("[{ id: ami-0123456789abcdef0 }]"), vec![]),
        (t("[{ id: ami-ABC }]"), vec![
            "amiSelectorTerms[0].id: invalid AMI id \"ami-ABC\"; expected \"ami-\" followed by lowercase letters and digits, such as \"ami-0123456789abcdef0\"".into(),
        ]),
        (t("[{ id: \"ami-\" }]"), vec![
            "amiSelectorTerms[0].id: invalid AMI id \"ami-\"; expected \"ami-\" followed by lowercase letters and digits, such as \"ami-0123456789abcdef0\"".into(),
        ]),
        (t("[{ id: \"my-ami-123\" }]"), vec![
            "amiSelectorTerms[0].id: invalid AMI id \"my-ami-123\"; expected \"ami-\" followed by lowercase letters and digits, such as \"ami-0123456789abcdef0\"".into(),
        ]),
        (t("[{ id: 123 }]"), vec![
            "amiSelectorTerms[0].id: expected a string (an AMI id such as \"ami-0123456789abcdef0\"), got 123".into(),
        ]),
        (t("[{ id: ami-123, name: my-ami }]"), vec![
            "amiSelectorTerms[0]: id cannot be combined with other fields in its term (found name); expected id alone, or one term per selector".into(),
        ]),
        (t("[{ id: ami-123, owner: self, ssmParameter: /a/b }]"), vec![
            "amiSelectorTerms[0]: id cannot be combined with other fields in its term (found owner, ssmParameter); expected id alone, or one term per selector".into(),
        ]),
        // ssmParameter: name or ARN, alone in its term.
        (t("[{ ssmParameter: my-ami-param }]"), vec![]),
        (t("[{ ssmParameter: \"\" }]"), vec![
            "amiSelectorTerms[0].ssmParameter: empty; expected an SSM parameter name such as \"/my/ami/id\", or its ARN".into(),
        ]),
        (t("[{ ssmParameter: \"/my ami\" }]"), vec![
            "amiSelectorTerms[0].ssmParameter: invalid SSM parameter \"/my ami\"; expected a parameter name such as \"/my/ami/id\" (letters, digits, '_', '.', '-' and '/') or an ARN such as \"arn:aws:ssm:us-east-1:123456789012:parameter/my/ami/id\"".into(),
        ]),
        (t("[{ ssmParameter: \"arn:aws:s3:::bucket/key\" }]"), vec![
            "amiSelectorTerms[0].ssmParameter: invalid SSM parameter \"arn:aws:s3:::bucket/key\"; expected a parameter name such as \"/my/ami/id\" (letters, digits, '_', '.', '-' and '/') or an ARN such as \"arn:aws:ssm:us-east-1:123456789012:parameter/my/ami/id\"".into(),
        ]),
        (t("[{ ssmParameter: /a/b, tags: { team: ml } }]"), vec![
            "amiSelectorTerms[0]: ssmParameter cannot be combined with other fields in its term (found tags): Karpenter ignores them for an ssmParameter term; expected ssmParameter alone, or one term per selector".into(),
        ]),
        // name
        (t("[{ name: \"\" }]"), vec![
            "amiSelectorTerms[0].name: empty; expected the EC2 image name, wildcards * and ? allowed".into(),
        ]),
        (t("[{ name: [a, b] }]"), vec![
            "amiSelectorTerms[0].name: expected a string (the EC2 image name, wildcards * and ? allowed), got a list".into(),
        ]),
        // owner
        (t("[{ name: my-ami, owner: \"123456789012\" }]"), vec![]),
        (t("[{ name: my-ami, owner: aws-marketplace }]"), vec![]),
        (t("[{ name: my-ami, owner: 123456789012 }]"), vec![
            "amiSelectorTerms[0].owner: expected a string (an AWS account id in quotes, self, amazon, aws-marketplace or aws-backup-vault), got 123456789012 (quote it: \"123456789012\")".into(),
        ]),
        (t("[{ name: my-ami, owner: \"self,amazon\" }]"), vec![
            "amiSelectorTerms[0].owner: several owners in \"self,amazon\"; expected one owner per term (write one term per owner)".into(),
        ]),
        (t("[{ name: my-ami, owner: Amazon }]"), vec![
            format!("amiSelectorTerms[0].owner: invalid owner \"Amazon\"; expected {OWNERS}"),
        ]),
        (t("[{ name: my-ami, owner: \"\" }]"), vec![format!("amiSelectorTerms[0].owner: empty; expected {OWNERS}")]),
        (t("[{ name: my-ami, owner: [self, amazon] }]"), vec![
            "amiSelectorTerms[0].owner: expected a string (an AWS account id in quotes, self, amazon, aws-marketplace or aws-backup-vault), got a list".into(),
        ]),
        // tags
        (t("[{ tags: { team: \"*\" } }]"), vec![]),
        (t("[{ tags: {} }]"), vec![
            "amiSelectorTerms[0].tags: empty; expected at least one tag key: value (a value of \"*\" matches any value)".into(),
        ]),
        (t("[{ tags: { team: \"\" } }]"), vec![
            "amiSelectorTerms[0].tags.team: empty value; expected a value, or \"*\" to match any value".into(),
        ]),
        (t("[{ tags: { \"\": ml } }]"), vec![
            "amiSelectorTerms[0].tags: empty tag key (with value \"ml\"); expected non-empty keys".into(),
        ]),
        (t("[{ tags: { version: 2 } }]"), vec![
            "amiSelectorTerms[0].tags.version: expected a string (the tag value, or \"*\" for any value), got 2 (quote it: \"2\")".into(),
        ]),
        (t("[{ tags: { team: } }]"), vec![
            "amiSelectorTerms[0].tags.team: expected a string (the tag value, or \"*\" for any value), got null".into(),
        ]),
        (t("[{ tags: [team] }]"), vec![
            "amiSelectorTerms[0].tags: expected an object mapping tag keys to values, e.g. { team: ml }, got a list".into(),
        ]),
        (
            t(&format!("[{{ tags: {{ {}: x, b: \"{}\" }} }}]", "k".repeat(129), "v".repeat(257))),
            vec![
                format!("amiSelectorTerms[0].tags.{}: tag key too long (129 characters); expected at most 128", "k".repeat(129)),
                "amiSelectorTerms[0].tags.b: tag value too long (257 characters); expected at most 256".into(),
            ],
        ),
        (
            t(&format!("[{{ tags: {{ {} }} }}]", (0..21).map(|i| format!("k{i}: v")).collect::<Vec<_>>().join(", "))),
            vec!["amiSelectorTerms[0].tags: 21 tags; expected at most 20".into()],
        ),
    ];
    for (doc, expected) in &cases {
        let parsed = parse(doc);
        let got: Vec<String> = parsed.problems.0.iter().map(ToString::to_string).collect();
        assert_eq!(&got, expected, "document:\n{doc}");
        assert_eq!(
            parsed.policy.is_some(),
            !parsed.problems.has_errors(),
            "document:\n{doc}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Rules across fields
// ---------------------------------------------------------------------------------------------

#[test]
fn cross_field_rules() {
    let windows = BASE.replace("al2023@latest", "windows2022@latest");
    let tags = with_terms("[{ tags: { team: ml } }]");
    let cases: Vec<(String, &[&str])> = vec![
        (
            format!("{windows}architecture: x86_64\nvariant: standard\n"),
            &[],
        ),
        (
            format!("{windows}architecture: arm64\n"),
            &[
                "architecture: windows2022 AMIs are x86_64 only, got arm64; expected x86_64 or no architecture",
            ],
        ),
        (
            format!("{windows}variant: nvidia\n"),
            &["variant: windows2022 AMIs have no nvidia variant; expected standard or no variant"],
        ),
        (
            format!("{tags}variant: neuron\n"),
            &[
                "variant: warning: neuron has no effect: only alias terms use the variant, and amiSelectorTerms has no alias; expected variant only with an alias term",
            ],
        ),
        (
            format!("{tags}variant: standard\narchitecture: arm64\n"),
            &[],
        ),
    ];
    check_table(&cases);
    // A warning does not withhold the policy.
    assert_eq!(
        valid(&format!("{tags}variant: neuron\n")).variant,
        Variant::Neuron
    );
}

// ---------------------------------------------------------------------------------------------
// Every problem at once, in document order
// ---------------------------------------------------------------------------------------------

#[test]
fn every_problem_is_reported_in_document_order_yaml() {
    let text = "\
name: \"gpu nodes\"
paused: yes
nodeGroup:
  asg: prod-gpu
amiSelectorTerms:
  - alias: al2024@latest
    owner: self
  - id: ami-XYZ
expireAfter: 30d
cluster: -prod
interruption: { rebalance: drain }
colour: blue
";
    assert_eq!(
        messages(text),
        vec![
            "name: \"gpu nodes\" contains ' '; expected only letters, digits, '-' and '_'",
            "paused: expected a boolean (true or false), got \"yes\"",
            "nodeGroup.asg: unknown field; expected one of autoScalingGroup, managedNodeGroup",
            "nodeGroup: no node group given; expected exactly one of autoScalingGroup, managedNodeGroup",
            "amiSelectorTerms[0].alias: unknown family \"al2024\"; expected one of al2, al2023, bottlerocket, windows2019, windows2022, windows2025",
            "amiSelectorTerms[0]: alias cannot be combined with other fields in its term (found owner); expected alias alone",
            "amiSelectorTerms[1].id: invalid AMI id \"ami-XYZ\"; expected \"ami-\" followed by lowercase letters and digits, such as \"ami-0123456789abcdef0\"",
            "amiSelectorTerms: an alias term must be the only term, got 2 terms; expected a single alias term, or terms without alias",
            "expireAfter: invalid duration \"30d\"; expected a number and unit such as \"720h\", \"1h30m\" or \"90s\", or \"Never\" (days are not a unit: 30d is \"720h\")",
            "cluster: \"-prod\" starts with '-'; expected a letter or digit first",
            "interruption.rebalance: unknown action \"drain\"; expected one of ignore, cordon, replace",
            &format!(
                "colour: unknown field; expected one of {}",
                FIELDS.join(", ")
            ),
        ]
    );
    assert!(parse(text).policy.is_none());
}

#[test]
fn every_problem_is_reported_in_document_order_json() {
    let text = r#"{
  "paused": "no",
  "amiSelectorTerms": [{"owner": "self"}, {"tags": {"team": ""}}, {"name": "x", "owner": "self,amazon"}],
  "nodeGroup": {"autoScalingGroup": "a", "managedNodeGroup": "b"},
  "variant": "gpu"
}"#;
    assert_eq!(
        messages(text),
        vec![
            "paused: expected a boolean (true or false), got \"no\"",
            "amiSelectorTerms[0]: owner alone selects nothing; expected at least one of alias, id, name, tags, ssmParameter with it",
            "amiSelectorTerms[1].tags.team: empty value; expected a value, or \"*\" to match any value",
            "amiSelectorTerms[2].owner: several owners in \"self,amazon\"; expected one owner per term (write one term per owner)",
            "nodeGroup: both autoScalingGroup and managedNodeGroup are set; expected exactly one (a pool manages one node group)",
            "variant: unknown variant \"gpu\"; expected one of standard, nvidia, neuron (did you mean nvidia?)",
            "cluster: required field is missing; expected the EKS cluster name",
            "name: required field is missing; expected the pool name (letters, digits, '-' and '_', at most 63 characters)",
        ]
    );
}

#[test]
fn validate_appends_to_existing_problems() {
    let mut problems = Problems::new();
    problems.error("elsewhere", "an earlier error");
    let value: serde_json::Value = serde_norway::from_str(BASE).expect("base is YAML");
    // The earlier error is not this document's: the policy is still returned.
    assert!(validate(&value, &mut problems).is_some());
    assert_eq!(problems.0.len(), 1);
}

#[test]
fn problems_carry_path_and_severity() {
    let parsed = parse(&format!("{BASE}paused: 1\n"));
    assert_eq!(
        parsed.problems.0,
        vec![crate::problem::Problem {
            path: "paused".into(),
            message: "expected a boolean (true or false), got 1".into(),
            severity: Severity::Error,
        }]
    );
}

// ---------------------------------------------------------------------------------------------
// Robustness: never panic, policy exactly when no error
// ---------------------------------------------------------------------------------------------

fn arbitrary_value() -> impl Strategy<Value = serde_json::Value> {
    let keys = prop::sample::select(vec![
        "cluster",
        "name",
        "nodeGroup",
        "autoScalingGroup",
        "managedNodeGroup",
        "architecture",
        "variant",
        "amiSelectorTerms",
        "alias",
        "id",
        "owner",
        "tags",
        "ssmParameter",
        "disruption",
        "expireAfter",
        "terminationGracePeriod",
        "interruption",
        "rebalance",
        "paused",
        "",
        "x",
    ]);
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::Bool),
        any::<i64>().prop_map(serde_json::Value::from),
        "[a-z0-9@*?:/._ -]{0,40}".prop_map(serde_json::Value::String),
        prop::sample::select(vec![
            "al2023@latest",
            "windows2022@v1",
            "ami-123",
            "self",
            "720h",
            "Never",
            "arm64",
            "nvidia",
            "cordon",
            "prod",
            "0s",
        ])
        .prop_map(serde_json::Value::from),
    ];
    leaf.prop_recursive(4, 64, 8, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::Array),
            prop::collection::vec((keys.clone(), inner), 0..6).prop_map(|pairs| {
                serde_json::Value::Object(
                    pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
                )
            }),
        ]
    })
}

proptest! {
    #[test]
    fn parse_never_panics_on_text(text in "\\PC{0,200}") {
        let parsed = parse(&text);
        prop_assert_eq!(parsed.policy.is_some(), !parsed.problems.has_errors());
    }

    #[test]
    fn validate_never_panics_and_policy_means_no_error(value in arbitrary_value()) {
        let mut problems = Problems::new();
        let policy = validate(&value, &mut problems);
        prop_assert_eq!(policy.is_some(), !problems.has_errors());
        for problem in &problems.0 {
            prop_assert!(!problem.message.is_empty());
        }
    }
}

#[test]
fn promotion_rules() {
    let p = valid(&format!(
        "{BASE}promotion:\n  from: test/general\n  soak: 72h\n  alarms: [p99-latency, \"arn:aws:cloudwatch:us-east-1:123456789012:alarm:errors\"]\n  minAge: 24h\n"
    ));
    let promo = p.promotion.expect("promotion");
    assert_eq!(promo.from.as_deref(), Some("test/general"));
    assert_eq!(promo.soak, Some(Duration::from_secs(72 * 3600)));
    assert_eq!(promo.alarms.len(), 2);
    assert_eq!(alarm_name(&promo.alarms[1]), "errors");
    assert_eq!(promo.min_age, Some(Duration::from_secs(24 * 3600)));
    assert!(
        valid(&format!("{BASE}promotion: {{ minAge: 24h }}\n"))
            .promotion
            .is_some()
    );
    let problems = |extra: &str| -> Vec<String> {
        parse(&format!("{BASE}promotion:\n{extra}"))
            .problems
            .errors()
            .map(|p| p.path.clone())
            .collect()
    };
    assert_eq!(
        problems("  from: test/general\n"),
        vec!["promotion"],
        "soak is required with from"
    );
    assert_eq!(
        problems("  from: general\n  soak: 1h\n"),
        vec!["promotion.from"]
    );
    assert_eq!(
        problems("  soak: 1h\n"),
        vec!["promotion"],
        "soak needs from"
    );
    assert_eq!(
        problems("  from: t/a\n  soak: 0s\n"),
        vec!["promotion.soak"]
    );
    assert_eq!(
        problems("  from: t/a\n  soak: 3d\n"),
        vec!["promotion.soak"]
    );
    assert_eq!(
        problems("  from: t/a\n  soak: 1h\n  alarms: [\"\"]\n"),
        vec!["promotion.alarms[0]"]
    );
    assert_eq!(
        problems("  from: t/a\n  soak: 1h\n  alarms: p99\n"),
        vec!["promotion.alarms"]
    );
    assert_eq!(
        problems("  from: t/a\n  soak: 1h\n  soakTime: 2h\n"),
        vec!["promotion.soakTime"]
    );
    assert_eq!(problems("  {}\n"), vec!["promotion"], "empty");
}

fn at(path: &str, text: &str) -> PolicyDocument {
    PolicyDocument::parameter("/nodecycle/pools/", path, text)
}

#[test]
fn a_parameter_path_owns_its_pool() {
    // The path names the pool: cluster and name may be left out.
    let body = "nodeGroup: { autoScalingGroup: prod-general }\namiSelectorTerms: [{ alias: al2023@latest }]\n";
    let parsed = parse_document(&at("/nodecycle/pools/prod/general", body));
    let p = parsed.policy.expect("valid");
    assert_eq!(p.pool_id(), "prod/general");
    // The same names as the path: valid.
    assert!(
        parse_document(&at("/nodecycle/pools/prod/general", BASE))
            .policy
            .is_some()
    );
    // Another pool's names: invalid, naming both pools; the pool is still the path's.
    let parsed = parse_document(&at("/nodecycle/pools/test/general", BASE));
    assert!(parsed.policy.is_none());
    assert_eq!(
        parsed.pool.map(|p| p.to_string()),
        Some("test/general".into())
    );
    let e: Vec<String> = parsed.problems.errors().map(ToString::to_string).collect();
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(e[0].starts_with("cluster: \"prod\" names pool prod/general, but its parameter path is that of pool test/general"), "{}", e[0]);
    let parsed = parse_document(&at("/nodecycle/pools/prod/other", BASE));
    let e = parsed.problems.errors().next().unwrap().to_string();
    assert!(e.starts_with("name: \"general\" names pool prod/general, but its parameter path is that of pool prod/other"), "{e}");
    // A path that names no pool defines nothing.
    let parsed = parse_document(&at("/nodecycle/pools/prod", BASE));
    assert!(parsed.policy.is_none());
    assert_eq!(parsed.pool, None);
    assert!(
        parsed
            .problems
            .errors()
            .next()
            .unwrap()
            .to_string()
            .contains("names no pool"),
        "{:?}",
        parsed.problems
    );
    // A file names its own pool, as before.
    assert_eq!(
        parse_document(&PolicyDocument::file("p.yaml", BASE))
            .policy
            .map(|p| p.pool_id()),
        Some("prod/general".into())
    );
    let e = messages(body);
    assert!(
        e.iter().any(|m| m.starts_with("cluster: required")),
        "{e:?}"
    );
}

#[test]
fn invalid_names_give_no_pool() {
    for doc in [
        "cluster: \"prod#x\"\nname: \"..\"\n",
        &format!("cluster: prod\nname: {}\n", "a".repeat(300)),
        "cluster: prod\nname: \"a/b\"\n",
    ] {
        let parsed = parse(doc);
        assert!(parsed.policy.is_none());
        assert_eq!(parsed.pool, None, "{doc}");
    }
    let parsed = parse("cluster: prod\nname: general\n");
    assert_eq!(
        parsed.pool.map(|p| p.to_string()),
        Some("prod/general".into())
    );
}

#[test]
fn the_interruption_handler_reads_only_what_locates_a_pool() {
    // A broken budget and unknown fields elsewhere do not hide the pool.
    let text = format!(
        "{BASE}disruption: {{ budgets: [{{ nodes: lots }}] }}\nterminationGracePeriod: 1h\ninterruption: {{ rebalance: cordon }}\nwhatever: 1\n"
    );
    assert!(parse(&text).policy.is_none());
    let r = locate(&PolicyDocument::file("p", text)).unwrap();
    assert_eq!(r.pool_id(), "prod/general");
    assert_eq!(r.rebalance, RebalanceAction::Cordon);
    assert_eq!(r.termination_grace_period, Some(Duration::from_secs(3600)));
    // Ownership holds here too.
    assert!(locate(&at("/nodecycle/pools/test/general", BASE)).is_err());
    let body = "nodeGroup: { autoScalingGroup: g }\n";
    assert_eq!(
        locate(&at("/nodecycle/pools/test/x", body))
            .unwrap()
            .pool_id(),
        "test/x"
    );
    // Without a node group there is no pool to find.
    assert!(locate(&PolicyDocument::file("p", "cluster: prod\nname: general\n")).is_err());
    // And the bounds hold.
    let e = locate(&PolicyDocument::file("p", limits_doc())).unwrap_err();
    assert!(
        e.errors()
            .next()
            .unwrap()
            .message
            .contains("more than 10000")
    );
}

/// The report's 1,486-byte document (expands to 3,000,000 values).
fn limits_doc() -> String {
    let list = |item: &str, n: usize| vec![item; n].join(",");
    format!(
        "{BASE}x: &a [{}]\ny: &b [{}]\nz: [{}]\n",
        list("1", 300),
        list("*a", 200),
        list("*b", 50)
    )
}

#[test]
fn expansion_is_refused_at_its_path() {
    let e = messages(&limits_doc());
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(e[0].starts_with("y[3"), "{e:?}");
    assert!(e[0].contains("more than 10000 values"), "{e:?}");
}

/// A document holding `path` (a [`field_paths`] entry) with value `leaf`, list items as
/// one-element lists, beside the fields every document needs.
fn document_with(path: &str, leaf: serde_json::Value) -> serde_json::Value {
    fn set(at: &mut serde_json::Value, parts: &[&str], leaf: serde_json::Value) {
        let Some((first, rest)) = parts.split_first() else {
            *at = leaf;
            return;
        };
        let (key, item) = match first.strip_suffix("[]") {
            Some(k) => (k, true),
            None => (*first, false),
        };
        let Some(map) = at.as_object_mut() else {
            return;
        };
        let slot = map.entry(key.to_string()).or_insert(serde_json::json!({}));
        if item {
            if !slot.is_array() {
                *slot = serde_json::json!([{}]);
            }
            if let Some(first_item) = slot.get_mut(0) {
                set(first_item, rest, leaf);
            }
        } else {
            set(slot, rest, leaf);
        }
    }
    let mut doc = serde_json::json!({
        "cluster": "prod",
        "name": "general",
        "nodeGroup": {"autoScalingGroup": "prod-general"},
        "amiSelectorTerms": [{"alias": "al2023@latest"}],
    });
    let parts: Vec<&str> = path.split('.').collect();
    set(&mut doc, &parts, leaf);
    doc
}

/// Whether parsing `doc` reports the field at `path` (`[]` read as `[0]`) as unknown.
fn reported_unknown(doc: &serde_json::Value, path: &str) -> bool {
    let shown = path.replace("[]", "[0]");
    parse(&doc.to_string())
        .problems
        .0
        .iter()
        .any(|p| p.path == shown && p.message.starts_with("unknown field"))
}

/// `field_paths` is what the parser accepts: every path listed is taken as a field (its
/// value may be wrong, it is never "unknown"), and a made-up field beside it is refused, so
/// the check can fail. docs/policy-reference.md is compared with this list.
#[test]
fn field_paths_are_the_fields_the_parser_accepts() {
    let paths = field_paths();
    assert!(paths.len() > 30, "{paths:?}");
    for path in &paths {
        let doc = document_with(path, serde_json::Value::Null);
        assert!(
            !reported_unknown(&doc, path),
            "{path} is listed but refused"
        );
        let sibling = match path.rsplit_once('.') {
            Some((parent, _)) => format!("{parent}.madeUpField"),
            None => "madeUpField".to_string(),
        };
        let doc = document_with(&sibling, serde_json::Value::Null);
        assert!(
            reported_unknown(&doc, &sibling),
            "{sibling} beside {path} is not refused: {:?}",
            parse(&doc.to_string()).problems
        );
    }
}

/// Valid policies that are almost certainly wrong: warnings with the field path, the value and
/// what to do; the policy is still returned.
#[test]
fn warnings_for_valid_but_wrong_policies() {
    let cases: Vec<(String, Vec<String>)> = vec![
        // expireAfter below 1h.
        (
            format!("{BASE}expireAfter: 5m\n"),
            vec!["expireAfter: warning: \"5m\" is shorter than 1h: every node would be replaced once it is that old, so the pool would replace nodes continuously; expected a node lifetime such as \"720h\" (the default; at least 1h), or \"Never\"".into()],
        ),
        (format!("{BASE}expireAfter: 59m59s\n"), vec!["expireAfter: warning: \"59m59s\" is shorter than 1h: every node would be replaced once it is that old, so the pool would replace nodes continuously; expected a node lifetime such as \"720h\" (the default; at least 1h), or \"Never\"".into()]),
        (format!("{BASE}expireAfter: 1h\n"), vec![]),
        (format!("{BASE}expireAfter: Never\n"), vec![]),
        // An alias family with no image of the architecture and variant.
        (
            "cluster: prod\nname: gpu\nnodeGroup: { autoScalingGroup: g }\narchitecture: arm64\nvariant: nvidia\namiSelectorTerms:\n  - alias: al2@latest\n".into(),
            vec!["variant: warning: al2 has no arm64 nvidia AMI (AL2's accelerated AMIs are x86_64 only), so amiSelectorTerms[0].alias \"al2@latest\" would resolve to no image; expected architecture x86_64, or alias al2023@latest or bottlerocket@latest for arm64 nvidia".into()],
        ),
        (
            "cluster: prod\nname: inf\nnodeGroup: { autoScalingGroup: g }\narchitecture: arm64\nvariant: neuron\namiSelectorTerms:\n  - alias: al2023@v20240807\n".into(),
            vec!["variant: warning: al2023 has no arm64 neuron AMI (Neuron serves AWS Inferentia and Trainium instances, which are x86_64 only), so amiSelectorTerms[0].alias \"al2023@v20240807\" would resolve to no image; expected architecture x86_64 with variant neuron".into()],
        ),
    ];
    for (doc, expected) in &cases {
        let parsed = parse(doc);
        let got: Vec<String> = parsed.problems.0.iter().map(ToString::to_string).collect();
        assert_eq!(&got, expected, "document:\n{doc}");
        assert!(parsed.policy.is_some(), "{doc}");
    }
    // The combinations that exist (or that the architecture leaves open) give no warning.
    for family in ["al2", "al2023", "bottlerocket"] {
        for arch in ["x86_64", "arm64", ""] {
            for variant in ["standard", "nvidia", "neuron"] {
                let arch_line = if arch.is_empty() {
                    String::new()
                } else {
                    format!("architecture: {arch}\n")
                };
                let doc = format!(
                    "cluster: prod\nname: p\nnodeGroup: {{ autoScalingGroup: g }}\n{arch_line}variant: {variant}\namiSelectorTerms:\n  - alias: {family}@latest\n"
                );
                let warned = !messages(&doc).is_empty();
                let missing = arch == "arm64"
                    && (variant == "neuron" || (family == "al2" && variant == "nvidia"));
                assert_eq!(warned, missing, "{doc}");
            }
        }
    }
}

/// Misspelt fields and values one or two edits from a known one are named; the budgets' own
/// fields too (`disruption.budget`).
#[test]
fn did_you_mean_by_edit_distance() {
    let cases: Vec<(String, &str)> = vec![
        (
            format!("{BASE}disruption: {{ budget: [] }}\n"),
            "disruption.budget: unknown field; expected one of budgets, order, surgeAboveMaxSize; did you mean budgets?",
        ),
        (
            format!("{BASE}variant: nvidai\n"),
            "variant: unknown variant \"nvidai\"; expected one of standard, nvidia, neuron (did you mean nvidia?)",
        ),
        (
            format!("{BASE}architecture: arm46\n"),
            "architecture: unknown architecture \"arm46\"; expected one of x86_64, arm64 (did you mean arm64?)",
        ),
        (
            format!("{BASE}interruption: {{ rebalance: cordn }}\n"),
            "interruption.rebalance: unknown action \"cordn\"; expected one of ignore, cordon, replace (did you mean cordon?)",
        ),
        (
            BASE.replace(
                "{ autoScalingGroup: prod-general }",
                "{ autoScalingGrup: g }",
            ),
            "nodeGroup.autoScalingGrup: unknown field; expected one of autoScalingGroup, managedNodeGroup; did you mean autoScalingGroup?",
        ),
        (
            format!(
                "{BASE}disruption:\n  budgets:\n    - nodes: \"1\"\n      schedule: \"0 9 * * *\"\n      duration: 1h\n      timeZone: Europe/Berlln\n"
            ),
            "disruption.budgets[0].timeZone: unknown time zone \"Europe/Berlln\" (did you mean \"Europe/Berlin\"?); expected an IANA time zone name such as \"America/New_York\", \"Europe/Berlin\" or \"UTC\"",
        ),
    ];
    for (doc, expected) in cases {
        let got = messages(&doc);
        assert!(
            got.iter().any(|m| m == expected),
            "{got:#?}\nexpected {expected}"
        );
    }
}

/// A UTF-8 byte order mark (Windows editors) is skipped, in YAML and in JSON.
#[test]
fn a_byte_order_mark_is_accepted() {
    let parsed = parse(&format!("\u{feff}{BASE}"));
    assert!(parsed.problems.0.is_empty(), "{:?}", parsed.problems);
    assert_eq!(parsed.policy.map(|p| p.name), Some("general".to_string()));
    let json = "\u{feff}{\"cluster\": \"prod\", \"name\": \"general\", \"nodeGroup\": {\"autoScalingGroup\": \"g\"}, \"amiSelectorTerms\": [{\"alias\": \"al2023@latest\"}]}";
    assert!(
        parse(json).problems.0.is_empty(),
        "{:?}",
        parse(json).problems
    );
    // Only at the start: a second mark is content.
    assert!(
        parse(&format!("\u{feff}\u{feff}{BASE}"))
            .problems
            .has_errors()
    );
}

/// `disruption.order`: the two orders, `emptiestFirst` by default, a misspelling named with the
/// right spelling.
#[test]
fn disruption_order_chooses_how_candidates_are_taken() {
    assert_eq!(valid(BASE).candidate_order, CandidateOrder::EmptiestFirst);
    for (text, want) in [
        ("emptiestFirst", CandidateOrder::EmptiestFirst),
        ("oldestFirst", CandidateOrder::OldestFirst),
    ] {
        let policy = valid(&format!("{BASE}disruption:\n  order: {text}\n"));
        assert_eq!(policy.candidate_order, want, "{text}");
    }
    for (text, hint) in [
        ("oldest", "oldestFirst"),
        ("oldestFrist", "oldestFirst"),
        ("emptyFirst", "emptiestFirst"),
    ] {
        let got = messages(&format!("{BASE}disruption:\n  order: {text}\n"));
        assert!(
            got.len() == 1 && got[0].starts_with("disruption.order: ") && got[0].contains(hint),
            "{text}: {got:?}"
        );
    }
    let got = messages(&format!("{BASE}disruption:\n  ordr: oldestFirst\n"));
    assert!(
        got.iter()
            .any(|m| m.contains("did you mean") && m.contains("order")),
        "{got:?}"
    );
}

/// `health`: defaults for a pool that sets nothing, each threshold checked with its path, and
/// the window at least the soak (by default stretched to it; given shorter, an error).
#[test]
fn health_thresholds_have_safe_defaults_and_bounds() {
    let h = valid(BASE).health;
    assert_eq!(h, HealthPolicy::default());
    assert_eq!(h.window, Duration::from_secs(24 * 3600));
    let set = valid(&format!(
        "{BASE}health: {{ window: 48h, maxRatio: 5, minSamples: 50, minFailureRate: 0.25 }}\n"
    ))
    .health;
    assert_eq!(
        (
            set.window,
            set.max_ratio,
            set.min_samples,
            set.min_failure_rate
        ),
        (Duration::from_secs(48 * 3600), 5.0, 50, 0.25)
    );
    let promoted = "promotion: { from: test/general, soak: 72h, soakNodes: 5 }\n";
    let p = valid(&format!("{BASE}{promoted}"));
    assert_eq!(
        p.health.window,
        Duration::from_secs(72 * 3600),
        "stretched to the soak"
    );
    assert_eq!(p.promotion.and_then(|p| p.soak_nodes), Some(5));
    for (extra, path) in [
        (
            format!("{promoted}health: {{ window: 24h }}\n"),
            "health.window",
        ),
        ("health: { window: 0s }\n".to_string(), "health.window"),
        ("health: { maxRatio: 0.5 }\n".to_string(), "health.maxRatio"),
        (
            "health: { minSamples: 0 }\n".to_string(),
            "health.minSamples",
        ),
        (
            "health: { minFailureRate: 2 }\n".to_string(),
            "health.minFailureRate",
        ),
        ("health: { windw: 24h }\n".to_string(), "health.windw"),
        (
            "promotion: { from: test/general, soak: 1h, soakNodes: 0 }\n".to_string(),
            "promotion.soakNodes",
        ),
    ] {
        let got = messages(&format!("{BASE}{extra}"));
        assert!(
            got.iter().any(|m| m.starts_with(&format!("{path}: "))),
            "{extra}: {got:?}"
        );
        assert!(parse(&format!("{BASE}{extra}")).policy.is_none(), "{extra}");
    }
}

/// `repair`: on by default with the conditions' durations, each field overridable and checked
/// with its path; a condition repair does not know is refused naming the ones it does.
#[test]
fn repair_has_defaults_overrides_and_bounds() {
    let r = valid(BASE).repair;
    assert_eq!(r, RepairPolicy::default());
    assert!(r.enabled);
    assert_eq!(r.conditions["Ready"], Duration::from_secs(30 * 60));
    assert_eq!(
        r.conditions["AcceleratedHardwareReady"],
        Duration::from_secs(10 * 60)
    );
    assert_eq!(
        (r.drain_timeout, r.max_parallel, r.max_unhealthy_percent),
        (Duration::from_secs(600), 1, 20)
    );
    let set = valid(&format!(
        "{BASE}repair: {{ enabled: false, conditions: {{ Ready: 15m }}, drainTimeout: 5m, maxParallel: 2, maxUnhealthy: \"40%\" }}\n"
    ))
    .repair;
    assert!(!set.enabled);
    assert_eq!(set.conditions["Ready"], Duration::from_secs(15 * 60));
    assert_eq!(
        set.conditions["KernelReady"],
        Duration::from_secs(30 * 60),
        "others kept"
    );
    assert_eq!(
        (
            set.drain_timeout,
            set.max_parallel,
            set.max_unhealthy_percent
        ),
        (Duration::from_secs(300), 2, 40)
    );
    for (extra, path) in [
        ("repair: { enabled: yes please }\n", "repair.enabled"),
        (
            "repair: { conditions: { Ready: 0s } }\n",
            "repair.conditions.Ready",
        ),
        (
            "repair: { conditions: { DiskPressure: 5m } }\n",
            "repair.conditions.DiskPressure",
        ),
        ("repair: { drainTimeout: soon }\n", "repair.drainTimeout"),
        ("repair: { maxParallel: 0 }\n", "repair.maxParallel"),
        ("repair: { maxUnhealthy: 20 }\n", "repair.maxUnhealthy"),
        ("repair: { maxUnhealthy: \"0%\" }\n", "repair.maxUnhealthy"),
        ("repair: { enable: true }\n", "repair.enable"),
    ] {
        let got = messages(&format!("{BASE}{extra}"));
        assert!(
            got.iter().any(|m| m.starts_with(&format!("{path}: "))),
            "{extra}: {got:?}"
        );
        assert!(parse(&format!("{BASE}{extra}")).policy.is_none(), "{extra}");
    }
    let unknown = messages(&format!(
        "{BASE}repair: {{ conditions: {{ DiskPressure: 5m }} }}\n"
    ));
    assert!(
        unknown
            .iter()
            .any(|m| m.contains("expected one of Ready, KernelReady")),
        "{unknown:?}"
    );
}

#[test]
fn metrics_per_pool_is_opt_in() {
    let base = with_terms("[{ alias: al2023@latest }]");
    assert!(!valid(&base).metrics_per_pool, "cell metrics by default");
    assert!(valid(&format!("{base}metrics: {{ perPool: true }}\n")).metrics_per_pool);
    assert!(!valid(&format!("{base}metrics: {{ perPool: false }}\n")).metrics_per_pool);
    assert!(!valid(&format!("{base}metrics: {{}}\n")).metrics_per_pool);
    for (doc, path) in [
        (
            format!("{base}metrics: {{ perPool: yes please }}\n"),
            "metrics.perPool",
        ),
        (format!("{base}metrics: {{ pool: true }}\n"), "metrics.pool"),
        (format!("{base}metrics: true\n"), "metrics"),
    ] {
        let parsed = parse(&doc);
        assert!(parsed.policy.is_none(), "{doc}");
        let paths: Vec<String> = parsed.problems.errors().map(|p| p.path.clone()).collect();
        assert_eq!(paths, [path], "{doc}");
    }
    // The interruption handler reads it too, and a mistake in it never hides the pool.
    let doc = |m: &str| PolicyDocument::file("p", format!("{base}metrics: {m}\n"));
    assert!(locate(&doc("{ perPool: true }")).unwrap().metrics_per_pool);
    assert!(!locate(&doc("{ perPool: 3 }")).unwrap().metrics_per_pool);
}
