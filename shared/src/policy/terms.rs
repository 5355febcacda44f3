//! `amiSelectorTerms` validation: Karpenter's CRD and CEL rules, with nodecycle's stricter
//! checks on owners, ids and SSM parameter names.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::SelectorTerm;
use super::fields::{describe, free_text, object, quote, string, unknown_field, wrong_type};
use crate::image::alias::Alias;
use crate::problem::{Problems, index, join};

/// Fields of one term, in the order error messages list them.
pub(super) const TERM_FIELDS: [&str; 6] = ["alias", "id", "name", "owner", "tags", "ssmParameter"];
/// The fields that select images (`owner` only narrows a selection).
const SELECTING: &str = "alias, id, name, tags, ssmParameter";
/// At most this many terms (Karpenter `maxItems`).
pub(super) const MAX_TERMS: usize = 30;
/// At most this many tags per term (Karpenter `maxProperties`).
const MAX_TAGS: usize = 20;
/// EC2 tag key and value limits.
const MAX_TAG_KEY: usize = 128;
const MAX_TAG_VALUE: usize = 256;
/// Owner aliases EC2 DescribeImages accepts besides account ids.
const OWNER_ALIASES: [&str; 4] = ["self", "amazon", "aws-marketplace", "aws-backup-vault"];

/// Validates the `amiSelectorTerms` value at `path`; returns the terms when all are valid.
/// Problems inside terms come first, in document order; rules about the whole list (count,
/// alias alone) follow.
pub(super) fn validate(
    value: &Value,
    path: &str,
    problems: &mut Problems,
) -> Option<Vec<SelectorTerm>> {
    let Value::Array(items) = value else {
        wrong_type(
            path,
            "a list of 1 to 30 terms, e.g. [{ alias: al2023@latest }]",
            value,
            problems,
        );
        return None;
    };
    let mut terms = Some(Vec::with_capacity(items.len()));
    for (i, item) in items.iter().enumerate() {
        let term = validate_term(item, &index(path, i), problems);
        match (term, terms.as_mut()) {
            (Some(term), Some(list)) => list.push(term),
            _ => terms = None,
        }
    }
    if items.is_empty() {
        problems.error(
            path,
            "empty; expected 1 to 30 terms, e.g. [{ alias: al2023@latest }]".to_string(),
        );
        return None;
    }
    if items.len() > MAX_TERMS {
        problems.error(
            path,
            format!(
                "{} terms; expected at most {MAX_TERMS} (terms are ORed)",
                items.len()
            ),
        );
        terms = None;
    }
    let has_alias = items.iter().any(|t| t.get("alias").is_some());
    if has_alias && items.len() > 1 {
        problems.error(
            path,
            format!(
                "an alias term must be the only term, got {} terms; expected a single alias term, or terms without alias",
                items.len()
            ),
        );
        terms = None;
    }
    terms
}

fn validate_term(value: &Value, path: &str, problems: &mut Problems) -> Option<SelectorTerm> {
    let expected = format!("an object with at least one of {SELECTING}");
    let map = object(value, path, &expected, problems)?;
    let errors_before = problems.errors().count();
    let mut term = SelectorTerm::default();
    for (key, field) in map {
        let field_path = join(path, key);
        let p = field_path.as_str();
        match key.as_str() {
            "alias" => term.alias = alias(field, p, problems),
            "id" => term.id = ami_id(field, p, problems),
            "name" => {
                term.name = non_empty(
                    field,
                    p,
                    "a string (the EC2 image name, wildcards * and ? allowed)",
                    problems,
                )
            }
            "owner" => term.owner = owner(field, p, problems),
            "tags" => term.tags = tags(field, p, problems),
            "ssmParameter" => term.ssm_parameter = ssm_parameter(field, p, problems),
            _ => unknown_field(path, key, &TERM_FIELDS, problems),
        }
    }
    combination(map, path, problems);
    (problems.errors().count() == errors_before).then_some(term)
}

/// The rules about which fields may share a term.
fn combination(map: &Map<String, Value>, path: &str, problems: &mut Problems) {
    let present = |field: &str| map.contains_key(field);
    let others = |own: &str| -> Vec<&'static str> {
        TERM_FIELDS
            .iter()
            .copied()
            .filter(|f| *f != own && present(f))
            .collect()
    };
    // The fields that stand alone in their term, the first present one checked, with how the
    // message goes on after `(found ...)`.
    let alone = [
        ("alias", "; expected alias alone"),
        ("id", "; expected id alone, or one term per selector"),
        (
            "ssmParameter",
            ": Karpenter ignores them for an ssmParameter term; expected ssmParameter alone, or one term per selector",
        ),
    ];
    if let Some((own, expected)) = alone.into_iter().find(|(own, _)| present(own)) {
        let with = others(own);
        if !with.is_empty() {
            problems.error(
                path,
                format!(
                    "{own} cannot be combined with other fields in its term (found {}){expected}",
                    with.join(", ")
                ),
            );
        }
    } else if !present("name") && !present("tags") {
        let message = if present("owner") {
            format!("owner alone selects nothing; expected at least one of {SELECTING} with it")
        } else {
            format!("no selector; expected at least one of {SELECTING}")
        };
        problems.error(path, message);
    }
}

fn non_empty(value: &Value, path: &str, expected: &str, problems: &mut Problems) -> Option<String> {
    let text = free_text(value, path, expected, problems)?;
    if text.is_empty() {
        let what = expected
            .strip_prefix("a string (")
            .and_then(|s| s.strip_suffix(')'));
        problems.error(
            path,
            format!("empty; expected {}", what.unwrap_or(expected)),
        );
        return None;
    }
    Some(text.to_string())
}

fn alias(value: &Value, path: &str, problems: &mut Problems) -> Option<Alias> {
    let expected = "a string such as \"al2023@latest\" or \"al2023@v20240807\"";
    let text = string(value, path, expected, problems)?;
    let len = text.chars().count();
    let too_long = len > Alias::MAX_LEN;
    if too_long {
        problems.error(
            path,
            format!(
                "too long ({len} characters); expected at most {} characters",
                Alias::MAX_LEN
            ),
        );
    }
    match Alias::parse(text) {
        Ok(alias) => (!too_long).then_some(alias),
        Err(e) => {
            problems.error(path, e.to_string());
            None
        }
    }
}

fn ami_id(value: &Value, path: &str, problems: &mut Problems) -> Option<String> {
    let expected = "a string (an AMI id such as \"ami-0123456789abcdef0\")";
    let text = string(value, path, expected, problems)?;
    let valid = text.strip_prefix("ami-").is_some_and(|rest| {
        !rest.is_empty()
            && rest
                .chars()
                .all(|c| c.is_ascii_digit() || c.is_ascii_lowercase())
    });
    if !valid {
        problems.error(
            path,
            format!(
                "invalid AMI id {}; expected \"ami-\" followed by lowercase letters and digits, such as \"ami-0123456789abcdef0\"",
                quote(text)
            ),
        );
        return None;
    }
    Some(text.to_string())
}

fn owner(value: &Value, path: &str, problems: &mut Problems) -> Option<String> {
    let expected =
        "a string (an AWS account id in quotes, self, amazon, aws-marketplace or aws-backup-vault)";
    let text = free_text(value, path, expected, problems)?;
    let is_account = text.len() == 12 && text.chars().all(|c| c.is_ascii_digit());
    if is_account || OWNER_ALIASES.contains(&text) {
        return Some(text.to_string());
    }
    let message = if text.contains(',') {
        format!(
            "several owners in {}; expected one owner per term (write one term per owner)",
            quote(text)
        )
    } else if text.is_empty() {
        "empty; expected a 12-digit AWS account id, self, amazon, aws-marketplace or aws-backup-vault".to_string()
    } else {
        format!(
            "invalid owner {}; expected a 12-digit AWS account id, self, amazon, aws-marketplace or aws-backup-vault",
            quote(text)
        )
    };
    problems.error(path, message);
    None
}

fn tags(value: &Value, path: &str, problems: &mut Problems) -> BTreeMap<String, String> {
    let expected = "an object mapping tag keys to values, e.g. { team: ml }";
    let Some(map) = object(value, path, expected, problems) else {
        return BTreeMap::new();
    };
    if map.is_empty() {
        problems.error(
            path,
            "empty; expected at least one tag key: value (a value of \"*\" matches any value)"
                .to_string(),
        );
    }
    if map.len() > MAX_TAGS {
        problems.error(
            path,
            format!("{} tags; expected at most {MAX_TAGS}", map.len()),
        );
    }
    let mut tags = BTreeMap::new();
    for (key, tag_value) in map {
        if key.is_empty() {
            problems.error(
                path,
                format!(
                    "empty tag key (with value {}); expected non-empty keys",
                    describe(tag_value)
                ),
            );
            continue;
        }
        let tag_path = join(path, key);
        let key_len = key.chars().count();
        if key_len > MAX_TAG_KEY {
            problems.error(
                &tag_path,
                format!("tag key too long ({key_len} characters); expected at most {MAX_TAG_KEY}"),
            );
        }
        let Some(text) = free_text(
            tag_value,
            &tag_path,
            "a string (the tag value, or \"*\" for any value)",
            problems,
        ) else {
            continue;
        };
        if text.is_empty() {
            problems.error(
                &tag_path,
                "empty value; expected a value, or \"*\" to match any value".to_string(),
            );
            continue;
        }
        let value_len = text.chars().count();
        if value_len > MAX_TAG_VALUE {
            problems.error(
                &tag_path,
                format!(
                    "tag value too long ({value_len} characters); expected at most {MAX_TAG_VALUE}"
                ),
            );
        }
        tags.insert(key.clone(), text.to_string());
    }
    tags
}

fn ssm_parameter(value: &Value, path: &str, problems: &mut Problems) -> Option<String> {
    let expected = "a string (an SSM parameter name such as \"/my/ami/id\", or its ARN)";
    let text = non_empty(value, path, expected, problems)?;
    let name = match text.strip_prefix("arn:") {
        Some(rest) => {
            // arn:<partition>:ssm:<region>:<account>:parameter/<name>
            let parts: Vec<&str> = rest.splitn(5, ':').collect();
            match parts.as_slice() {
                [partition, "ssm", region, account, resource]
                    if !partition.is_empty() && !region.is_empty() && !account.is_empty() =>
                {
                    resource.strip_prefix("parameter/")
                }
                _ => None,
            }
        }
        None => Some(text.as_str()),
    };
    let valid = name.is_some_and(|n| {
        !n.is_empty()
            && n.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-' | '/'))
    });
    if !valid {
        problems.error(
            path,
            format!(
                "invalid SSM parameter {}; expected a parameter name such as \"/my/ami/id\" (letters, digits, '_', '.', '-' and '/') or an ARN such as \"arn:aws:ssm:us-east-1:123456789012:parameter/my/ami/id\"",
                quote(&text)
            ),
        );
        return None;
    }
    Some(text)
}
