//! The documentation is checked against the code so it cannot drift: docs/policy-reference.md
//! lists exactly the fields the policy parser accepts, with the defaults a parsed policy gets,
//! and its examples are valid policies; every relative link of README.md, CHANGELOG.md and
//! docs/*.md resolves (file and heading). The `nodecycle` commands the pages show are parsed
//! against the real CLI in functions/ops (`cli::doc_commands`).

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
