//! The documentation is checked against the code so it cannot drift: docs/policy-reference.md
//! lists exactly the fields the policy parser accepts, with the defaults a parsed policy gets,
//! and its examples are valid policies; every relative link of README.md, CHANGELOG.md and
//! docs/*.md resolves (file and heading). The `nodecycle` commands the pages show are parsed
//! against the real CLI in functions/ops (`cli::doc_commands`). Every `sam build`, `sam package`
//! and `sam deploy` they show carries what template.yaml needs (its transforms and IAM resources,
//! read from the template) and overrides only parameters it has; every parameter table gives
//! the template's defaults, and getting-started.md's lists every parameter.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use nodecycle::policy::{self, Policy};
use nodecycle_tests::docs::{Page, pages};

/// Pages other branches write, not merged yet: links to them are tolerated while they are
/// missing (and checked, anchors included, once they exist). The coordinator empties this
/// list when they are merged.
// docs/accounts-and-regions.md: the orgcore branch's (issue 24), linked from docs/organisation.md.
const PENDING_PAGES: [&str; 0] = [];

fn root() -> PathBuf {
    nodecycle_tests::repo_path("")
}

fn page(rel: &str) -> Page {
    pages(&root())
        .into_iter()
        .find(|p| p.path == Path::new(rel))
        .unwrap_or_else(|| panic!("{rel} is missing"))
}

/// What an absent field means, as the reference's *default* column says it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Default {
    /// The document is refused without it.
    Required,
    /// Nothing: the field's absence has its own meaning (stated in the cell).
    Nothing,
    /// This value.
    Value(String),
}

/// The reference's rows: field path -> (default as documented, line).
fn documented() -> BTreeMap<String, (Default, usize)> {
    let page = page("docs/policy-reference.md");
    let mut out = BTreeMap::new();
    for table in page.tables() {
        let Some((header, _)) = table.first() else {
            continue;
        };
        if header.first().map(String::as_str) != Some("field") {
            continue;
        }
        let column = header
            .iter()
            .position(|h| h == "default")
            .expect("a field table has a default column");
        for (cells, line) in &table[1..] {
            let field = cells[0].trim_matches('`').to_string();
            assert!(
                cells[0].starts_with('`') && !field.contains('`'),
                "policy-reference.md:{line}: the field cell is one code span, got {:?}",
                cells[0]
            );
            let cell = cells[column].as_str();
            let default = if cell.starts_with("required") {
                Default::Required
            } else if cell.starts_with("none") {
                Default::Nothing
            } else if let Some(rest) = cell.strip_prefix('`') {
                Default::Value(rest.split('`').next().unwrap_or_default().to_string())
            } else {
                panic!(
                    "policy-reference.md:{line}: the default of {field} starts with a value in backticks, `required` or `none`; got {cell:?}"
                )
            };
            assert!(
                out.insert(field.clone(), (default, *line)).is_none(),
                "policy-reference.md:{line}: {field} is listed twice"
            );
        }
    }
    out
}

#[test]
fn policy_reference_lists_exactly_the_fields_the_parser_accepts() {
    let documented: BTreeSet<String> = documented().into_keys().collect();
    let accepted: BTreeSet<String> = policy::field_paths().into_iter().collect();
    let missing: Vec<&String> = accepted.difference(&documented).collect();
    let extra: Vec<&String> = documented.difference(&accepted).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "docs/policy-reference.md is out of step with the policy parser:\n  accepted but not documented: {missing:?}\n  documented but not accepted: {extra:?}"
    );
}

/// A document with the fields every policy needs, plus `extra` (YAML lines at the top level).
fn minimal(extra: &str) -> String {
    format!(
        "cluster: prod\nname: general\nnodeGroup: {{ autoScalingGroup: prod-general }}\namiSelectorTerms: [{{ alias: al2023@latest }}]\n{extra}"
    )
}

fn parsed(text: &str) -> Policy {
    let parsed = policy::parse(text);
    parsed
        .policy
        .unwrap_or_else(|| panic!("{text}\n{:?}", parsed.problems))
}

/// Whether `text` is refused with a problem at `path`.
fn refused_at(text: &str, path: &str) -> bool {
    let parsed = policy::parse(text);
    parsed.policy.is_none() && parsed.problems.errors().any(|p| p.path == path)
}

fn budgets(list: &[nodecycle::budget::Budget]) -> String {
    let items: Vec<String> = list
        .iter()
        .map(|b| format!("{{nodes: {}}}", b.nodes))
        .collect();
    format!("[{}]", items.join(", "))
}

/// What a parsed policy gets when `field` is absent, read from the parser's result. A field
/// this function does not know fails the test: whoever adds a field says here how to read its
/// default (and documents it).
fn observed(field: &str) -> Default {
    let base = parsed(&minimal(""));
    let without = |line: &str| minimal("").replace(line, "");
    let required = |line: &str, path: &str| {
        assert!(
            refused_at(&without(line), path),
            "{field}: a document without it is accepted"
        );
        Default::Required
    };
    let nothing = |absent: bool| {
        assert!(
            absent,
            "{field}: documented as none, but a parsed policy has a value"
        );
        Default::Nothing
    };
    let value = |v: String| Default::Value(v);
    let budget = |extra: &str| parsed(&minimal(extra)).budgets.remove(0);
    let promotion = |extra: &str| parsed(&minimal(extra)).promotion.expect("promotion parsed");
    let term = |t: &str| {
        parsed(&format!(
        "cluster: prod\nname: general\nnodeGroup: {{ autoScalingGroup: prod-general }}\namiSelectorTerms: [{t}]\n"
    ))
    .ami_selector_terms
    .remove(0)
    };
    match field {
        "cluster" => required("cluster: prod\n", "cluster"),
        "name" => required("name: general\n", "name"),
        "nodeGroup" => required(
            "nodeGroup: { autoScalingGroup: prod-general }\n",
            "nodeGroup",
        ),
        "amiSelectorTerms" => required(
            "amiSelectorTerms: [{ alias: al2023@latest }]\n",
            "amiSelectorTerms",
        ),
        "nodeGroup.autoScalingGroup" | "nodeGroup.managedNodeGroup" => {
            // Either one, never neither.
            assert!(refused_at(
                &minimal("").replace("{ autoScalingGroup: prod-general }", "{}"),
                "nodeGroup"
            ));
            let other = if field.ends_with("autoScalingGroup") {
                "{ managedNodeGroup: general }"
            } else {
                "{ autoScalingGroup: prod-general }"
            };
            parsed(&minimal("").replace("{ autoScalingGroup: prod-general }", other));
            Default::Nothing
        }
        "account" | "region" => nothing(base.place.is_none()),
        "architecture" => nothing(base.architecture.is_none()),
        "variant" => value(base.variant.as_str().to_string()),
        "amiSelectorTerms[].alias" => nothing(term("{ name: golden-* }").alias.is_none()),
        "amiSelectorTerms[].id" => nothing(term("{ name: golden-* }").id.is_none()),
        "amiSelectorTerms[].name" => nothing(term("{ id: ami-0123456789abcdef0 }").name.is_none()),
        "amiSelectorTerms[].owner" => nothing(term("{ name: golden-* }").owner.is_none()),
        "amiSelectorTerms[].tags" => nothing(term("{ name: golden-* }").tags.is_empty()),
        "amiSelectorTerms[].ssmParameter" => {
            nothing(term("{ name: golden-* }").ssm_parameter.is_none())
        }
        "disruption" => value(format!("{{budgets: {}}}", budgets(&base.budgets))),
        "disruption.budgets" => value(budgets(&base.budgets)),
        "disruption.surgeAboveMaxSize" => value(base.surge_above_max_size.to_string()),
        "disruption.budgets[].nodes" => {
            value(budget("disruption: { budgets: [{}] }\n").nodes.to_string())
        }
        "disruption.budgets[].schedule" | "disruption.budgets[].duration" => nothing(
            budget("disruption: { budgets: [{ nodes: \"1\" }] }\n")
                .window
                .is_none(),
        ),
        "disruption.budgets[].timeZone" => value(
            budget(
                "disruption: { budgets: [{ nodes: \"0\", schedule: \"@daily\", duration: 1h }] }\n",
            )
            .window
            .expect("a window")
            .time_zone
            .name()
            .to_string(),
        ),
        "disruption.budgets[].reasons" => nothing(
            budget("disruption: { budgets: [{ nodes: \"1\" }] }\n")
                .reasons
                .is_none(),
        ),
        "expireAfter" => value(
            base.expire_after
                .map_or("Never".to_string(), nodecycle::duration::format),
        ),
        "disruption.order" => value(base.candidate_order.to_string()),
        "terminationGracePeriod" => nothing(base.termination_grace_period.is_none()),
        "interruption" => value(format!(
            "{{rebalance: {}}}",
            serde_json::to_value(base.rebalance)
                .expect("serializes")
                .as_str()
                .unwrap_or_default()
        )),
        "interruption.rebalance" => value(
            serde_json::to_value(base.rebalance)
                .expect("serializes")
                .as_str()
                .unwrap_or_default()
                .to_string(),
        ),
        "paused" => value(base.paused.to_string()),
        "promotion" => nothing(base.promotion.is_none()),
        "promotion.from" => nothing(promotion("promotion: { minAge: 1h }\n").from.is_none()),
        "promotion.soak" => nothing(promotion("promotion: { minAge: 1h }\n").soak.is_none()),
        "promotion.alarms" => {
            let alarms = promotion("promotion: { from: test/general, soak: 1h }\n").alarms;
            value(format!("[{}]", alarms.join(", ")))
        }
        "promotion.minAge" => nothing(
            promotion("promotion: { from: test/general, soak: 1h }\n")
                .min_age
                .is_none(),
        ),
        "promotion.soakNodes" => nothing(
            promotion("promotion: { from: test/general, soak: 1h }\n")
                .soak_nodes
                .is_none(),
        ),
        "health" => value(format!(
            "{{window: {}, maxRatio: {}, minSamples: {}, minFailureRate: {}}}",
            nodecycle::duration::format(base.health.window),
            base.health.max_ratio,
            base.health.min_samples,
            base.health.min_failure_rate
        )),
        "health.window" => value(nodecycle::duration::format(base.health.window)),
        "health.maxRatio" => value(base.health.max_ratio.to_string()),
        "health.minSamples" => value(base.health.min_samples.to_string()),
        "health.minFailureRate" => value(base.health.min_failure_rate.to_string()),
        "repair" => value(format!(
            "{{enabled: {}, drainTimeout: {}, maxParallel: {}, maxUnhealthy: {}%}}",
            base.repair.enabled,
            nodecycle::duration::format(base.repair.drain_timeout),
            base.repair.max_parallel,
            base.repair.max_unhealthy_percent
        )),
        "repair.enabled" => value(base.repair.enabled.to_string()),
        "repair.conditions" => value(format!(
            "{{{}}}",
            base.repair
                .conditions
                .iter()
                .map(|(k, d)| format!("{k}: {}", nodecycle::duration::format(*d)))
                .collect::<Vec<_>>()
                .join(", ")
        )),
        "repair.drainTimeout" => value(nodecycle::duration::format(base.repair.drain_timeout)),
        "repair.maxParallel" => value(base.repair.max_parallel.to_string()),
        "repair.maxUnhealthy" => value(format!("{}%", base.repair.max_unhealthy_percent)),
        "rollout" => value(format!("{{strategy: {}}}", base.rollout)),
        "rollout.strategy" => value(base.rollout.to_string()),
        "metrics" => value(format!("{{perPool: {}}}", base.metrics_per_pool)),
        "metrics.perPool" => value(base.metrics_per_pool.to_string()),
        other => panic!(
            "tests/tests/docs.rs: say in `observed` how a parsed policy shows the default of {other} (and document it in docs/policy-reference.md)"
        ),
    }
}

#[test]
fn policy_reference_defaults_are_what_a_parsed_policy_gets() {
    let mut wrong = Vec::new();
    for (field, (documented, line)) in documented() {
        let got = observed(&field);
        if got != documented {
            wrong.push(format!(
                "policy-reference.md:{line}: {field}: documented {documented:?}, the parser gives {got:?}"
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// Every YAML block of the reference that is a policy (it names a `cluster`) is valid.
#[test]
fn policy_reference_examples_are_valid_policies() {
    let page = page("docs/policy-reference.md");
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in page.text.lines() {
        match (&mut current, line.trim_end()) {
            (None, "```yaml") => current = Some(String::new()),
            (Some(_), "```") => blocks.extend(current.take()),
            (Some(block), l) => {
                block.push_str(l);
                block.push('\n');
            }
            (None, _) => {}
        }
    }
    let policies: Vec<&String> = blocks.iter().filter(|b| b.contains("cluster:")).collect();
    assert!(policies.len() >= 3, "{blocks:?}");
    for block in policies {
        parsed(block);
    }
}

/// The file a link points at and its anchor, or `None` for links out of the repository.
fn target(from: &Path, dest: &str) -> Option<(PathBuf, Option<String>)> {
    if dest.contains("://") || dest.starts_with("mailto:") {
        return None;
    }
    let (file, anchor) = match dest.split_once('#') {
        Some((f, a)) => (f, Some(a.to_string())),
        None => (dest, None),
    };
    let dir = from.parent().unwrap_or(Path::new(""));
    let path = if file.is_empty() {
        from.to_path_buf()
    } else {
        normalize(&dir.join(file))
    };
    Some((path, anchor))
}

fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

#[test]
fn relative_links_resolve() {
    let root = root();
    let pages = pages(&root);
    let anchors: BTreeMap<PathBuf, BTreeSet<String>> = pages
        .iter()
        .map(|p| (p.path.clone(), p.anchors()))
        .collect();
    let mut broken = Vec::new();
    let mut checked = 0;
    for page in &pages {
        for (dest, line) in page.links() {
            let Some((path, anchor)) = target(&page.path, &dest) else {
                continue;
            };
            checked += 1;
            let at = format!("{}:{line}: {dest}", page.path.display());
            if !root.join(&path).exists() {
                if !PENDING_PAGES.iter().any(|p| Path::new(p) == path) {
                    broken.push(format!("{at}: no such file"));
                }
                continue;
            }
            let Some(anchor) = anchor else { continue };
            let known = anchors.get(&path).cloned().or_else(|| {
                (path.extension().is_some_and(|x| x == "md")).then(|| {
                    let text = std::fs::read_to_string(root.join(&path)).unwrap_or_default();
                    Page {
                        path: path.clone(),
                        text,
                    }
                    .anchors()
                })
            });
            match known {
                Some(known) if known.contains(&anchor) => {}
                Some(known) => broken.push(format!(
                    "{at}: no heading with anchor #{anchor} (anchors: {known:?})"
                )),
                None => broken.push(format!("{at}: an anchor into a file that is not Markdown")),
            }
        }
    }
    assert!(checked > 40, "only {checked} links found");
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

// ---------------------------------------------------------------------------------------------
// Deploy commands: every `sam build`, `sam package` and `sam deploy` the pages show carries
// what template.yaml needs, read from the template itself.

/// What deploying a template takes, read from the template.
#[derive(Debug)]
struct Needs {
    /// Capabilities to acknowledge: (why, any one of these).
    capabilities: Vec<(String, &'static [&'static str])>,
    /// `AWS::LanguageExtensions` is a transform: SAM CLI expands `Fn::ForEach` locally only
    /// with `--language-extensions` (or `SAM_CLI_ENABLE_LANGUAGE_EXTENSIONS=1`).
    language_extensions: bool,
    /// The template's parameter names.
    parameters: BTreeSet<String>,
}

/// The template's resources as CloudFormation creates them: `(logical id, resource)`, the
/// bodies of `Fn::ForEach` loops included (their logical ids keep the `${...}` placeholders).
fn resources(map: &serde_norway::Value, out: &mut Vec<(String, serde_norway::Value)>) {
    let Some(map) = map.as_mapping() else { return };
    for (k, v) in map {
        let key = k.as_str().unwrap_or_default();
        if key.starts_with("Fn::ForEach::") {
            // [identifier, collection, { logical id template: resource, ... }]
            if let Some(body) = v.as_sequence().and_then(|s| s.get(2)) {
                resources(body, out);
            }
        } else {
            out.push((key.to_string(), v.clone()));
        }
    }
}

/// IAM resources whose name property makes them "named" (CAPABILITY_NAMED_IAM).
const NAMED_IAM: [(&str, &str); 5] = [
    ("AWS::IAM::Role", "RoleName"),
    ("AWS::IAM::User", "UserName"),
    ("AWS::IAM::Group", "GroupName"),
    ("AWS::IAM::ManagedPolicy", "ManagedPolicyName"),
    ("AWS::IAM::InstanceProfile", "InstanceProfileName"),
];

fn needs(template: &serde_norway::Value) -> Needs {
    let transforms: Vec<String> = match &template["Transform"] {
        serde_norway::Value::String(s) => vec![s.clone()],
        serde_norway::Value::Sequence(s) => s
            .iter()
            .filter_map(|t| t.as_str().map(str::to_string))
            .collect(),
        _ => vec![],
    };
    let mut capabilities: Vec<(String, &'static [&'static str])> = Vec::new();
    if !transforms.is_empty() {
        // A transform is a macro (AWS::Serverless and AWS::LanguageExtensions are hosted by
        // CloudFormation): the stack must acknowledge that the template is expanded.
        capabilities.push((
            format!("the transforms {transforms:?}"),
            &["CAPABILITY_AUTO_EXPAND"],
        ));
    }
    let mut all = Vec::new();
    resources(&template["Resources"], &mut all);
    let mut iam = Vec::new();
    let mut named = Vec::new();
    for (id, r) in &all {
        let kind = r["Type"].as_str().unwrap_or_default();
        let props = &r["Properties"];
        if kind.starts_with("AWS::IAM::") {
            iam.push(id.clone());
        }
        // SAM creates a role for a function or state machine that names none.
        if matches!(
            kind,
            "AWS::Serverless::Function" | "AWS::Serverless::StateMachine"
        ) && props.get("Role").is_none()
        {
            iam.push(format!("{id} (the role SAM creates)"));
        }
        if NAMED_IAM
            .iter()
            .any(|(k, name)| *k == kind && props.get(*name).is_some())
        {
            named.push(id.clone());
        }
    }
    if !named.is_empty() {
        capabilities.push((
            format!("IAM resources with custom names {named:?}"),
            &["CAPABILITY_NAMED_IAM"],
        ));
    } else if !iam.is_empty() {
        capabilities.push((
            format!("IAM resources {iam:?}"),
            &["CAPABILITY_IAM", "CAPABILITY_NAMED_IAM"],
        ));
    }
    let parameters = template["Parameters"]
        .as_mapping()
        .map(|m| {
            m.keys()
                .filter_map(|k| k.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    Needs {
        capabilities,
        language_extensions: transforms.iter().any(|t| t == "AWS::LanguageExtensions"),
        parameters,
    }
}

fn template_yaml() -> serde_norway::Value {
    let text = std::fs::read_to_string(root().join("template.yaml")).expect("template.yaml");
    serde_norway::from_str(&text).expect("template.yaml parses")
}

/// One simple command of a shell line: its leading `NAME=value` assignments and its words
/// (quotes removed, escapes applied).
#[derive(Debug, Default, PartialEq)]
struct Simple {
    env: Vec<(String, String)>,
    words: Vec<String>,
}

/// The simple commands of one logical shell line (`&&`, `||`, `;`, `|`, `&` and parentheses
/// separate them; `#` at the start of a word ends the line).
fn simple_commands(line: &str) -> Vec<Simple> {
    fn end_word(cur: &mut Simple, word: &mut String, in_word: &mut bool) {
        if !std::mem::take(in_word) {
            return;
        }
        let w = std::mem::take(word);
        match w.split_once('=') {
            Some((name, value))
                if cur.words.is_empty()
                    && !name.is_empty()
                    && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') =>
            {
                cur.env.push((name.to_string(), value.to_string()))
            }
            _ => cur.words.push(w),
        }
    }
    let mut out = Vec::new();
    let mut cur = Simple::default();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                in_word = true;
                word.extend(chars.next());
            }
            '\'' => {
                in_word = true;
                word.extend(chars.by_ref().take_while(|&c| c != '\''));
            }
            '"' => {
                in_word = true;
                while let Some(c) = chars.next() {
                    match c {
                        '"' => break,
                        '\\' => word.extend(chars.next()),
                        c => word.push(c),
                    }
                }
            }
            '#' if !in_word => break,
            ';' | '&' | '|' | '(' | ')' => {
                end_word(&mut cur, &mut word, &mut in_word);
                if cur != Simple::default() {
                    out.push(std::mem::take(&mut cur));
                }
            }
            c if c.is_whitespace() => end_word(&mut cur, &mut word, &mut in_word),
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    end_word(&mut cur, &mut word, &mut in_word);
    if cur != Simple::default() {
        out.push(cur);
    }
    out
}

/// A `sam` command as SAM CLI reads its options.
#[derive(Debug, Default)]
struct SamCommand {
    /// `build`, `package`, `deploy`.
    verb: String,
    capabilities: BTreeSet<String>,
    /// The parameter names `--parameter-overrides` sets.
    overrides: Vec<String>,
    /// Local `Fn::ForEach` expansion on (`--language-extensions`, or the environment variable).
    language_extensions: bool,
}

/// The `sam build|package|deploy` of a simple command, `None` for anything else and for a bare
/// `sam deploy` (the command's name in a sentence, no arguments).
fn sam_command(cmd: &Simple) -> Option<SamCommand> {
    let (program, rest) = cmd.words.split_first()?;
    let (verb, args) = rest.split_first()?;
    if !(program == "sam" || program.ends_with("/sam"))
        || !matches!(verb.as_str(), "build" | "package" | "deploy")
        || (args.is_empty() && cmd.env.is_empty())
    {
        return None;
    }
    let mut out = SamCommand {
        verb: verb.clone(),
        language_extensions: cmd.env.iter().any(|(k, v)| {
            k == "SAM_CLI_ENABLE_LANGUAGE_EXTENSIONS"
                && matches!(v.to_lowercase().as_str(), "1" | "true" | "yes" | "on")
        }),
        ..SamCommand::default()
    };
    // Every word that is not an option belongs to the option before it (`--capabilities` and
    // `--parameter-overrides` take several; sam has no positional arguments).
    let mut option = String::new();
    let value = |option: &str, v: &str, out: &mut SamCommand| match option {
        "--capabilities" => {
            out.capabilities.insert(v.to_string());
        }
        "--parameter-overrides" => {
            // Key=Value, or ParameterKey=Key,ParameterValue=Value.
            let name = match v.strip_prefix("ParameterKey=") {
                Some(rest) => rest.split(',').next().unwrap_or_default(),
                None => v.split('=').next().unwrap_or_default(),
            };
            out.overrides.push(name.to_string());
        }
        _ => {}
    };
    for arg in args {
        if arg.starts_with('-') {
            let (name, inline) = match arg.split_once('=') {
                Some((n, v)) => (n, Some(v)),
                None => (arg.as_str(), None),
            };
            option = name.to_string();
            match name {
                "--language-extensions" => out.language_extensions = true,
                "--no-language-extensions" => out.language_extensions = false,
                _ => {}
            }
            if let Some(v) = inline {
                value(&option, v, &mut out);
            }
        } else {
            value(&option, arg, &mut out);
        }
    }
    Some(out)
}

/// What is wrong with the `sam` commands of `page` for a template that needs `needs`, one line
/// each, and how many commands were checked.
fn sam_command_problems(page: &Page, needs: &Needs) -> (Vec<String>, usize) {
    let mut problems = Vec::new();
    let mut checked = 0;
    for code in page.code() {
        for cmd in simple_commands(&code.text).iter().filter_map(sam_command) {
            checked += 1;
            let at = format!("{}:{}: sam {}", page.path.display(), code.line, cmd.verb);
            if needs.language_extensions && !cmd.language_extensions {
                problems.push(format!(
                    "{at} lacks --language-extensions (the template's AWS::LanguageExtensions transform: SAM CLI reads Fn::ForEach only with it)"
                ));
            }
            if cmd.verb != "deploy" {
                continue;
            }
            for (why, any_of) in &needs.capabilities {
                if !any_of.iter().any(|c| cmd.capabilities.contains(*c)) {
                    problems.push(format!(
                        "{at}: --capabilities {:?} lacks {} (for {why})",
                        cmd.capabilities,
                        any_of.join(" or ")
                    ));
                }
            }
            for name in &cmd.overrides {
                if !needs.parameters.contains(name) {
                    problems.push(format!(
                        "{at}: --parameter-overrides names {name}, which template.yaml does not have"
                    ));
                }
            }
        }
    }
    (problems, checked)
}

#[test]
fn sam_commands_carry_what_the_template_needs() {
    let needs = needs(&template_yaml());
    // template.yaml today: both transforms and unnamed IAM roles.
    assert!(needs.language_extensions, "{needs:?}");
    assert_eq!(needs.capabilities.len(), 2, "{needs:?}");
    let mut problems = Vec::new();
    let mut deploys = 0;
    for page in pages(&root()) {
        let (p, n) = sam_command_problems(&page, &needs);
        problems.extend(p);
        deploys += n;
    }
    assert!(deploys >= 4, "only {deploys} sam commands found");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The check finds what a page gets wrong: a multi-line `sam deploy` without a capability the
/// template needs, an override of a parameter it does not have, a `sam build` without local
/// expansion; and lets the right ones pass.
#[test]
fn sam_command_check_finds_what_is_missing() {
    let needs = needs(&template_yaml());
    let page = |text: &str| Page {
        path: PathBuf::from("x.md"),
        text: text.to_string(),
    };
    let problems = |text: &str| {
        let (p, n) = sam_command_problems(&page(text), &needs);
        assert!(n > 0, "no sam command found in {text:?}");
        p
    };
    let good =
        "sam deploy --language-extensions --capabilities CAPABILITY_IAM CAPABILITY_AUTO_EXPAND";
    assert_eq!(
        problems(&format!("```sh\n{good}\n```\n")),
        Vec::<String>::new()
    );
    assert_eq!(problems(&format!("Run `{good}`.\n")), Vec::<String>::new());
    assert_eq!(
        problems(
            "```sh\nSAM_CLI_ENABLE_LANGUAGE_EXTENSIONS=1 sam deploy \\\n  --capabilities=CAPABILITY_NAMED_IAM \\\n  --capabilities CAPABILITY_AUTO_EXPAND --parameter-overrides Clusters=a ParameterKey=FanOut,ParameterValue=Enabled\n```\n"
        ),
        Vec::<String>::new()
    );
    // Multi-line, IAM only: no CAPABILITY_AUTO_EXPAND.
    let p = problems(
        "```sh\nsam deploy --language-extensions --region us-east-1 --capabilities CAPABILITY_IAM \\\n  --parameter-overrides Clusters=prod\n```\n",
    );
    assert!(
        p.len() == 1
            && p[0].contains("x.md:2: sam deploy")
            && p[0].contains("CAPABILITY_AUTO_EXPAND"),
        "{p:?}"
    );
    // No capabilities at all, and a parameter the template lacks, after `cd` and `&&`.
    let p = problems(
        "```sh\ncd /src && sam deploy --language-extensions --parameter-overrides 'Clusters=a,b' Clustres=c\n```\n",
    );
    assert_eq!(p.len(), 3, "{p:?}");
    assert!(
        p.iter()
            .any(|x| x.contains("CAPABILITY_IAM or CAPABILITY_NAMED_IAM")),
        "{p:?}"
    );
    assert!(p.iter().any(|x| x.contains("names Clustres")), "{p:?}");
    // Without local expansion.
    let p = problems("`CARGO_PROFILE_RELEASE_PANIC=abort sam build`\n");
    assert!(
        p.len() == 1 && p[0].contains("--language-extensions"),
        "{p:?}"
    );
    // The command's bare name in a sentence is no command.
    assert_eq!(
        sam_command_problems(&page("`sam build` and `sam deploy` deploy it.\n"), &needs).1,
        0
    );
}

/// Every parameter table of the pages (header `parameter`, with a `default` column) names
/// parameters template.yaml has, with the template's default; getting-started.md's lists
/// every one.
#[test]
fn parameter_tables_match_the_template() {
    let template = template_yaml();
    let params = template["Parameters"].as_mapping().expect("Parameters");
    let required_by_rule = |name: &str| {
        serde_norway::to_string(&template["Rules"])
            .unwrap_or_default()
            .contains(name)
    };
    let mut wrong = Vec::new();
    let mut tables = 0;
    let mut complete = None;
    for page in pages(&root()) {
        for table in page.tables() {
            let Some((header, _)) = table.first() else {
                continue;
            };
            if header.first().map(String::as_str) != Some("parameter") {
                continue;
            }
            let Some(column) = header.iter().position(|h| h == "default") else {
                continue;
            };
            tables += 1;
            let mut listed = BTreeSet::new();
            for (cells, line) in &table[1..] {
                let at = format!("{}:{line}", page.path.display());
                let name = cells[0].trim_matches('`');
                let Some(param) = params.get(name) else {
                    wrong.push(format!("{at}: {name} is no parameter of template.yaml"));
                    continue;
                };
                listed.insert(name.to_string());
                let default = match &param["Default"] {
                    serde_norway::Value::String(s) => s.clone(),
                    serde_norway::Value::Number(n) => n.to_string(),
                    serde_norway::Value::Null => String::new(),
                    other => format!("{other:?}"),
                };
                let cell = cells[column].as_str();
                let ok = if cell.trim_start_matches('(').starts_with("required") {
                    default.is_empty() && required_by_rule(name)
                } else if cell.starts_with("empty") {
                    default.is_empty()
                } else if let Some(rest) = cell.strip_prefix('`') {
                    rest.split('`').next() == Some(default.as_str())
                } else {
                    false
                };
                if !ok {
                    wrong.push(format!(
                        "{at}: {name}: default documented as {cell:?}, template.yaml has {default:?}"
                    ));
                }
            }
            if page.path == Path::new("docs/getting-started.md") {
                complete = Some(listed);
            }
        }
    }
    assert!(tables >= 2, "only {tables} parameter tables found");
    let listed = complete.expect("docs/getting-started.md has a parameter table");
    let missing: Vec<&str> = params
        .keys()
        .filter_map(|k| k.as_str())
        .filter(|k| !listed.contains(*k))
        .collect();
    if !missing.is_empty() {
        wrong.push(format!(
            "docs/getting-started.md: the parameter table lacks {missing:?}"
        ));
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
