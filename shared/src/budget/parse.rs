//! Validation of `disruption.budgets`: every problem, each with its field path.

use std::str::FromStr;

use chrono::TimeDelta;
use chrono_tz::Tz;
use serde_json::Value;

use super::schedule::Schedule;
use super::window::Window;
use super::{Budget, Nodes, Reason};
use crate::duration;
use crate::problem::{self, Problems};

/// Karpenter's `MaxItems` for `budgets`.
const MAX_BUDGETS: usize = 50;

/// The fields of one budget, in the order error messages list them.
pub const BUDGET_FIELDS: [&str; 5] = ["nodes", "schedule", "duration", "timeZone", "reasons"];
const FIELDS: &str = "nodes, schedule, duration, timeZone, reasons";
const REASONS: &str = "Drifted, Expired, Unhealthy, Underutilized, Empty";
const NODES_EXPECTED: &str = "expected a whole number of nodes such as \"3\" or a percentage from 0% to 100% such as \"15%\"";
const SCHEDULE_EXAMPLE: &str = "a 5-field cron expression such as \"0 9 * * sat-sun\"";
const DURATION_EXAMPLE: &str = "hours and minutes such as \"24h\", \"30m\" or \"10h5m\"";

/// "a string", "a number", ... for messages.
fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// The string `v` (at `path`), or `None` after an error `expected <expected>, got <kind>`.
fn string<'a>(
    v: &'a Value,
    path: &str,
    expected: &str,
    problems: &mut Problems,
) -> Option<&'a str> {
    match v {
        Value::String(s) => Some(s),
        other => {
            problems.error(path, format!("expected {expected}, got {}", kind(other)));
            None
        }
    }
}

/// Validates `disruption.budgets` (the JSON value at `path`, `None` when the field is absent)
/// and returns the typed budgets in document order.
///
/// Absent (or null) means the default single `nodes: 10%` budget. Every problem is pushed to
/// `problems` with its full field path (`<path>[i].<field>`), saying what is wrong and what is
/// expected; warnings mark valid budgets that are not portable to Karpenter. The returned list
/// is meaningful only when no error was pushed (invalid budgets are left out of it).
pub fn parse_budgets(value: Option<&Value>, path: &str, problems: &mut Problems) -> Vec<Budget> {
    let items = match value {
        None | Some(Value::Null) => return vec![Budget::default_budget()],
        Some(Value::Array(items)) => items,
        Some(other) => {
            problems.error(
                path,
                format!(
                    "expected a list of budgets (objects with fields {FIELDS}), got {}",
                    kind(other)
                ),
            );
            return Vec::new();
        }
    };
    if items.is_empty() {
        problems.warning(
            path,
            "empty list: no budget limits disruption, so every node may be disrupted at once; \
             omit budgets for the default nodes: 10%",
        );
    }
    if items.len() > MAX_BUDGETS {
        problems.error(
            path,
            format!(
                "{} budgets; expected at most {MAX_BUDGETS} (Karpenter's limit)",
                items.len()
            ),
        );
    }
    let budgets: Vec<(usize, Budget)> = items
        .iter()
        .enumerate()
        .filter_map(|(i, item)| Some((i, parse_budget(item, &problem::index(path, i), problems)?)))
        .collect();
    warn_zero_beside_windows(&budgets, path, problems);
    budgets.into_iter().map(|(_, b)| b).collect()
}

/// Warns on each always-active budget allowing no node (`nodes: "0"` or `"0%"`, no schedule)
/// beside a window budget allowing some for the same Drifted or Expired reason: the smallest
/// active budget wins, so the window can never allow more than 0 and the pool never rotates
/// for that reason. `budgets` are `(index in the list, budget)`.
fn warn_zero_beside_windows(budgets: &[(usize, Budget)], path: &str, problems: &mut Problems) {
    let allows_none = |b: &Budget| matches!(b.nodes, Nodes::Count(0) | Nodes::Percent(0));
    for (i, zero) in budgets {
        if zero.window.is_some() || !allows_none(zero) {
            continue;
        }
        let blocked = budgets.iter().find_map(|(j, other)| {
            let reasons: Vec<&str> = Reason::ALL
                .into_iter()
                .filter(|r| r.applied_by_nodecycle() && zero.applies_to(*r) && other.applies_to(*r))
                .map(Reason::name)
                .collect();
            (other.window.is_some() && !allows_none(other) && !reasons.is_empty())
                .then(|| (*j, reasons.join(" or ")))
        });
        let Some((j, reasons)) = blocked else {
            continue;
        };
        problems.warning(
            problem::join(&problem::index(path, *i), "nodes"),
            format!(
                "nodes \"{}\" without schedule is always active and allows no {reasons} \
                 disruption, so the window of {} can never allow more (the smallest active budget \
                 wins) and the pool never rotates; expected a schedule and duration on this budget \
                 (a freeze window), or paused: true to stop rotation on purpose",
                zero.nodes,
                problem::index(path, j)
            ),
        );
    }
}

fn parse_budget(item: &Value, path: &str, problems: &mut Problems) -> Option<Budget> {
    let Value::Object(map) = item else {
        problems.error(
            path,
            format!(
                "expected a budget object with fields {FIELDS}, got {}",
                kind(item)
            ),
        );
        return None;
    };
    let before = problems.0.len();
    let has_errors_since = |problems: &Problems| {
        problems.0[before..]
            .iter()
            .any(|p| p.severity == problem::Severity::Error)
    };
    for key in map.keys() {
        if !BUDGET_FIELDS.contains(&key.as_str()) {
            let hint = problem::did_you_mean(key, BUDGET_FIELDS)
                .map(|h| format!("; {h}"))
                .unwrap_or_default();
            problems.error(
                problem::join(path, key),
                format!("unknown field; expected one of {FIELDS}{hint}"),
            );
        }
    }

    let nodes = match map.get("nodes") {
        None => Some(Nodes::Percent(10)),
        Some(v) => parse_nodes(v)
            .map_err(|e| problems.error(problem::join(path, "nodes"), e))
            .ok(),
    };

    let schedule_path = problem::join(path, "schedule");
    let schedule = map
        .get("schedule")
        .and_then(|v| string(v, &schedule_path, SCHEDULE_EXAMPLE, problems))
        .and_then(|s| match Schedule::parse(s) {
            Ok(parsed) => {
                for w in parsed.warnings {
                    problems.warning(&schedule_path, w);
                }
                Some(parsed.schedule)
            }
            Err(errors) => {
                for e in errors {
                    problems.error(&schedule_path, e);
                }
                None
            }
        });

    let duration_path = problem::join(path, "duration");
    let duration = map
        .get("duration")
        .and_then(|v| string(v, &duration_path, DURATION_EXAMPLE, problems))
        .and_then(|s| match duration::parse_hours_minutes(s) {
            Ok(d) if d.is_zero() => {
                problems.error(
                    &duration_path,
                    format!(
                        "duration {s:?} would never let the budget be active; expected a \
                         positive duration, {DURATION_EXAMPLE}"
                    ),
                );
                None
            }
            Ok(d) => match TimeDelta::from_std(d) {
                Ok(d) if d <= TimeDelta::days(100 * 366) => Some(d),
                _ => {
                    problems.error(
                        &duration_path,
                        format!("duration {s:?} is too long; expected at most 100 years"),
                    );
                    None
                }
            },
            Err(e) => {
                problems.error(&duration_path, e);
                None
            }
        });

    match (map.contains_key("schedule"), map.contains_key("duration")) {
        (true, false) => problems.error(
            &duration_path,
            format!("required when schedule is set; expected {DURATION_EXAMPLE}"),
        ),
        (false, true) => problems.error(
            &schedule_path,
            format!("required when duration is set; expected {SCHEDULE_EXAMPLE}"),
        ),
        _ => {}
    }

    let zone_path = problem::join(path, "timeZone");
    let time_zone = match map.get("timeZone") {
        None => Some(Tz::UTC),
        Some(v) => string(
            v,
            &zone_path,
            "an IANA time zone name such as \"Europe/Berlin\"",
            problems,
        )
        .and_then(|name| match Tz::from_str(name) {
            Ok(tz) => {
                if !map.contains_key("schedule") {
                    problems.warning(
                        &zone_path,
                        "has no effect without schedule (the budget is always active)",
                    );
                }
                Some(tz)
            }
            Err(_) => {
                let names = chrono_tz::TZ_VARIANTS.iter().map(|tz| tz.name());
                let hint = problem::closest(name, names)
                    .map(|tz| format!(" (did you mean {tz:?}?)"))
                    .unwrap_or_default();
                problems.error(
                    &zone_path,
                    format!(
                        "unknown time zone {name:?}{hint}; expected an IANA time zone name such \
                         as \"America/New_York\", \"Europe/Berlin\" or \"UTC\""
                    ),
                );
                None
            }
        }),
    };

    let reasons = match map.get("reasons") {
        None => Some(None),
        Some(v) => parse_reasons(v, &problem::join(path, "reasons"), problems).map(Some),
    };

    if has_errors_since(problems) {
        return None;
    }
    let window = match (schedule, duration, time_zone) {
        (Some(schedule), Some(duration), Some(time_zone)) => Some(Window {
            schedule,
            duration,
            time_zone,
        }),
        _ => None,
    };
    if let Some(w) = window.as_ref().filter(|w| w.never_closes()) {
        let written = map
            .get("duration")
            .and_then(Value::as_str)
            .unwrap_or_default();
        problems.warning(
            &duration_path,
            format!(
                "duration {written:?} is at least the time between the hits of schedule \"{}\", \
                 so each window opens before the last one closes, the window never closes and \
                 this budget is always active; expected a duration shorter than the time between \
                 hits, or no schedule and duration for a budget that is always active",
                w.schedule
            ),
        );
    }
    Some(Budget {
        nodes: nodes?,
        window,
        reasons: reasons?,
    })
}

/// `nodes`: a non-negative integer (JSON number or digit string) or `"<0-100>%"`.
fn parse_nodes(v: &Value) -> Result<Nodes, String> {
    match v {
        Value::Number(n) => {
            if let Some(u) = n.as_u64() {
                u32::try_from(u)
                    .map(Nodes::Count)
                    .map_err(|_| format!("{u} is too large; {NODES_EXPECTED}"))
            } else if n.as_i64().is_some() || n.as_f64().is_some_and(|f| f < 0.0) {
                Err(format!("{n} is negative; {NODES_EXPECTED}"))
            } else {
                Err(format!("{n} is not a whole number; {NODES_EXPECTED}"))
            }
        }
        Value::String(s) => parse_nodes_text(s),
        other => Err(format!(
            "expected a node count or percentage, got {}; {NODES_EXPECTED}",
            kind(other)
        )),
    }
}

fn parse_nodes_text(s: &str) -> Result<Nodes, String> {
    let (digits, percent) = match s.strip_suffix('%') {
        Some(d) => (d, true),
        None => (s, false),
    };
    let all_digits = !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit());
    if !all_digits {
        let body = digits.strip_prefix('-').unwrap_or(digits);
        let numeric = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit() || b == b'.');
        let msg = if digits.starts_with('-') && numeric(body) {
            format!("{s:?} is negative")
        } else if numeric(body)
            && body.bytes().filter(|b| *b == b'.').count() == 1
            && body.len() > 1
        {
            format!("{s:?} is not a whole number")
        } else if s.is_empty() {
            "empty value".to_string()
        } else {
            format!("{s:?} is not a number or percentage")
        };
        return Err(format!("{msg}; {NODES_EXPECTED}"));
    }
    let Ok(n) = digits.parse::<u32>() else {
        return Err(format!("{s:?} is too large; {NODES_EXPECTED}"));
    };
    if percent {
        if n > 100 {
            return Err(format!("{s:?} is more than 100%; {NODES_EXPECTED}"));
        }
        Ok(Nodes::Percent(n))
    } else {
        Ok(Nodes::Count(n))
    }
}

fn parse_reasons(v: &Value, path: &str, problems: &mut Problems) -> Option<Vec<Reason>> {
    let Value::Array(items) = v else {
        problems.error(
            path,
            format!(
                "expected a list of reasons, one or more of {REASONS}, got {}",
                kind(v)
            ),
        );
        return None;
    };
    if items.is_empty() {
        problems.error(
            path,
            format!(
                "an empty list matches no reason; expected one or more of {REASONS}, or no \
                 reasons field to apply to every reason"
            ),
        );
        return None;
    }
    let mut out = Vec::new();
    let mut ok = true;
    for (i, item) in items.iter().enumerate() {
        let item_path = problem::index(path, i);
        match item {
            Value::String(s) => match Reason::parse(s) {
                Some(r) if out.contains(&r) => {
                    ok = false;
                    problems.error(
                        item_path,
                        format!("duplicate reason {s:?}; expected each reason at most once"),
                    );
                }
                Some(r) => out.push(r),
                None => {
                    ok = false;
                    let names = Reason::ALL.map(Reason::name);
                    let hint = problem::did_you_mean(s, names)
                        .map(|h| format!(" ({h})"))
                        .unwrap_or_default();
                    problems.error(
                        item_path,
                        format!("unknown reason {s:?}; expected one of {REASONS}{hint}"),
                    );
                }
            },
            other => {
                ok = false;
                problems.error(
                    item_path,
                    format!(
                        "expected a reason name, one of {REASONS}, got {}",
                        kind(other)
                    ),
                );
            }
        }
    }
    // Karpenter budgets paste unchanged: reasons nodecycle never disrupts for are accepted,
    // and said to limit nothing here.
    let never: Vec<&str> = out
        .iter()
        .filter(|r| !r.applied_by_nodecycle())
        .map(|r| r.name())
        .collect();
    if ok && !never.is_empty() {
        let scope = if never.len() == out.len() {
            "this budget limits nothing here (it applies to no reason nodecycle disrupts for)"
        } else {
            "this budget limits only its Drifted, Expired and Unhealthy disruptions here"
        };
        problems.warning(
            path,
            format!(
                "nodecycle never disrupts nodes for {} (it does not consolidate: only Drifted, Expired and Unhealthy are budgeted): accepted so Karpenter budgets paste unchanged, but {scope}",
                never.join(" or ")
            ),
        );
    }
    ok.then_some(out)
}
