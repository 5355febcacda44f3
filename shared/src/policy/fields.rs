//! Helpers shared by the policy validators: describing values in messages, type checks,
//! unknown-field reports and name checks. Every helper pushes its problems and never panics.

use std::fmt::Display;

use serde_json::{Map, Value};

use crate::duration;
use crate::problem::{Problems, join};

/// How a value is shown after "got": strings quoted, numbers and booleans as written,
/// `null`, `a list`, `an object`. Long strings are shortened.
pub(super) fn describe(value: &Value) -> String {
    match value {
        Value::String(s) => quote(s),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Null => "null".to_string(),
        Value::Array(_) => "a list".to_string(),
        Value::Object(_) => "an object".to_string(),
    }
}

/// A user string in quotes, shortened ([`crate::problem::quote`]).
pub(super) fn quote(text: &str) -> String {
    crate::problem::quote(text)
}

/// Pushes `<path>: expected <expected>, got <value>`.
pub(super) fn wrong_type(path: &str, expected: &str, value: &Value, problems: &mut Problems) {
    problems.error(
        path,
        format!("expected {expected}, got {}", describe(value)),
    );
}

/// The string at `path`, or a wrong-type error naming `expected` (e.g. "a string (x86_64 or
/// arm64)").
pub(super) fn string<'a>(
    value: &'a Value,
    path: &str,
    expected: &str,
    problems: &mut Problems,
) -> Option<&'a str> {
    match value {
        Value::String(s) => Some(s),
        _ => {
            wrong_type(path, expected, value, problems);
            None
        }
    }
}

/// Like [`string`] for free text (names, tag values, account ids), where a number or boolean
/// is most likely text that YAML read as a scalar: the message adds `(quote it: "2024")`.
pub(super) fn free_text<'a>(
    value: &'a Value,
    path: &str,
    expected: &str,
    problems: &mut Problems,
) -> Option<&'a str> {
    if let Value::Number(_) | Value::Bool(_) = value {
        problems.error(
            path,
            format!("expected {expected}, got {value} (quote it: \"{value}\")"),
        );
        return None;
    }
    string(value, path, expected, problems)
}

/// The object at `path`, or a wrong-type error naming `expected`.
pub(super) fn object<'a>(
    value: &'a Value,
    path: &str,
    expected: &str,
    problems: &mut Problems,
) -> Option<&'a Map<String, Value>> {
    match value {
        Value::Object(map) => Some(map),
        _ => {
            wrong_type(path, expected, value, problems);
            None
        }
    }
}

/// Pushes `<path>.<key>: unknown field; expected one of <known>`, with a hint when the key is a
/// known field spelled with another case or separators (`expire_after`), a field one level
/// away from its place (`budgets` at the top level), a Karpenter field nodecycle lacks, or a
/// misspelling of one known field ([`crate::problem::closest`]: `expireAfer`).
pub(super) fn unknown_field(parent: &str, key: &str, known: &[&str], problems: &mut Problems) {
    let shown_key = if key.is_empty() || key.contains(char::is_whitespace) {
        quote(key)
    } else {
        key.to_string()
    };
    let mut message = format!("unknown field; expected one of {}", known.join(", "));
    if let Some(hint) = unknown_field_hint(key, known) {
        message.push_str("; ");
        message.push_str(&hint);
    }
    problems.error(join(parent, &shown_key), message);
}

fn unknown_field_hint(key: &str, known: &[&str]) -> Option<String> {
    let normalize = |s: &str| -> String {
        s.chars()
            .filter(|c| *c != '_' && *c != '-')
            .map(|c| c.to_ascii_lowercase())
            .collect()
    };
    let wanted = normalize(key);
    if let Some(field) = known.iter().find(|k| normalize(k) == wanted) {
        return Some(format!("did you mean {field}?"));
    }
    if known.contains(&"amiSelectorTerms") {
        // Top level: fields that belong one level down.
        match key {
            "budgets" => return Some("did you mean disruption.budgets?".to_string()),
            "rebalance" => return Some("did you mean interruption.rebalance?".to_string()),
            "autoScalingGroup" | "managedNodeGroup" => {
                return Some(format!("did you mean nodeGroup.{key}?"));
            }
            "alias" | "id" | "owner" | "tags" | "ssmParameter" => {
                return Some(format!(
                    "{key} belongs in a term of amiSelectorTerms, e.g. amiSelectorTerms: [{{ alias: al2023@latest }}]"
                ));
            }
            _ => {}
        }
    }
    let note = match key {
        "spec" | "template" => {
            "nodecycle policies are flat: put amiSelectorTerms, disruption, expireAfter and the other fields at the top level"
        }
        "amiFamily" => "the AMI family comes from an alias term such as { alias: al2023@latest }",
        "consolidationPolicy" | "consolidateAfter" => "nodecycle does not consolidate nodes",
        _ => return crate::problem::did_you_mean(key, known.iter().copied()),
    };
    Some(note.to_string())
}

/// Pushes `<path>: unknown <kind> "<got>"; expected one of <options>` with a hint: `hint` when
/// given, else the option `got` is a misspelling of ([`crate::problem::closest`], case aside).
pub(super) fn unknown_value(
    path: &str,
    kind: &str,
    got: &str,
    options: &[&str],
    hint: Option<&str>,
    problems: &mut Problems,
) {
    let mut message = format!(
        "unknown {kind} {}; expected one of {}",
        quote(got),
        options.join(", ")
    );
    let suggestion = hint.or_else(|| crate::problem::closest(got, options.iter().copied()));
    if let Some(s) = suggestion {
        message.push_str(&format!(" (did you mean {s}?)"));
    }
    problems.error(path, message);
}

/// The one of `options` the string at `path` names, each option with the other spellings users
/// write for it. Another type is a wrong-type error expecting `a string (a, b or c)`; an unknown
/// string, an [`unknown_value`] error of `kind` listing the options, suggesting the option one
/// of whose other spellings it is (case aside).
pub(super) fn choice<T: Copy + Display>(
    value: &Value,
    path: &str,
    kind: &str,
    options: &[(T, &[&str])],
    problems: &mut Problems,
) -> Option<T> {
    let names: Vec<String> = options.iter().map(|(o, _)| o.to_string()).collect();
    let listed = match names.split_last() {
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => String::new(),
    };
    let text = string(value, path, &format!("a string ({listed})"), problems)?;
    if let Some(i) = names.iter().position(|n| n == text) {
        return Some(options[i].0);
    }
    let lower = text.to_ascii_lowercase();
    let hint = options
        .iter()
        .position(|(_, also)| also.contains(&lower.as_str()))
        .map(|i| names[i].as_str());
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    unknown_value(path, kind, text, &names, hint, problems);
    None
}

/// Character rules of an AWS resource name.
pub(super) struct NameRule {
    /// What the name is, after "expected" (e.g. "the EKS cluster name").
    pub what: &'static str,
    /// Maximum length in characters.
    pub max: usize,
    /// Whether a character is allowed after the first one.
    pub allowed: fn(char) -> bool,
    /// Whether a character is allowed first.
    pub first: fn(char) -> bool,
    /// The allowed characters, after "expected only".
    pub allowed_text: &'static str,
    /// The allowed first characters, after "expected"; empty when `first == allowed`.
    pub first_text: &'static str,
}

/// EKS cluster, node group and nodecycle pool names: letters, digits, `-` and `_`, starting
/// with a letter or digit.
pub(super) fn eks_name(what: &'static str, max: usize) -> NameRule {
    NameRule {
        what,
        max,
        allowed: |c| c.is_ascii_alphanumeric() || c == '-' || c == '_',
        first: |c| c.is_ascii_alphanumeric(),
        allowed_text: "letters, digits, '-' and '_'",
        first_text: "a letter or digit first",
    }
}

/// Checks a name against `rule`; pushes one problem per broken rule (empty, too long, bad
/// first character, first bad character) and returns the name when it is valid.
pub(super) fn name(
    value: &Value,
    path: &str,
    rule: &NameRule,
    problems: &mut Problems,
) -> Option<String> {
    let text = free_text(value, path, &format!("a string ({})", rule.what), problems)?;
    let mut ok = true;
    let Some(first) = text.chars().next() else {
        problems.error(path, format!("empty; expected {}", rule.what));
        return None;
    };
    let len = text.chars().count();
    if len > rule.max {
        problems.error(
            path,
            format!(
                "too long ({len} characters); expected at most {} characters",
                rule.max
            ),
        );
        ok = false;
    }
    let mut rest = text.chars();
    if !(rule.first)(first) {
        problems.error(
            path,
            format!(
                "{} starts with {first:?}; expected {}",
                quote(text),
                rule.first_text
            ),
        );
        ok = false;
        rest.next();
    }
    if let Some(bad) = rest.find(|c| !(rule.allowed)(*c)) {
        problems.error(
            path,
            format!(
                "{} contains {bad:?}; expected only {}",
                quote(text),
                rule.allowed_text
            ),
        );
        ok = false;
    }
    ok.then(|| text.to_string())
}

/// A duration longer than 0 at `path`, or the problem (`example` in the message).
pub(super) fn positive_duration(
    field: &Value,
    path: &str,
    example: &str,
    problems: &mut Problems,
) -> Option<std::time::Duration> {
    let expected = format!("a duration such as \"{example}\"");
    let text = string(field, path, &expected, problems)?;
    match duration::parse(text) {
        Ok(d) if !d.is_zero() => Some(d),
        _ => {
            problems.error(
                path,
                format!(
                    "invalid duration {}; expected a duration longer than 0s such as \"{example}\"",
                    describe(field)
                ),
            );
            None
        }
    }
}
