//! How commands print their answer (`-o table|json|yaml`): JSON exactly as before (the stable
//! interface for scripts), YAML the same object, and for people a table: the status of pools
//! as columns ([`status`]), any other answer as `key: value` lines with its lists of objects as
//! columns ([`generic`]).

use serde_json::Value;

use super::target::Output;

/// Prints `value` on stdout in `output`; `table` renders it for [`Output::Table`].
pub fn print(value: &Value, output: Output, table: impl FnOnce(&Value) -> String) {
    match output {
        Output::Json => super::print_json(value),
        Output::Yaml => match serde_norway::to_string(value) {
            Ok(text) => print!("{text}"),
            Err(_) => super::print_json(value),
        },
        Output::Table => {
            let text = table(value);
            if text.ends_with('\n') {
                print!("{text}");
            } else {
                println!("{text}");
            }
        }
    }
}

/// Left-aligned columns under `headers`, separated by three spaces, no borders (as kubectl).
pub fn columns(headers: &[&str], rows: Vec<Vec<String>>) -> String {
    let mut table = comfy_table::Table::new();
    table
        .load_preset(comfy_table::presets::NOTHING)
        .set_content_arrangement(comfy_table::ContentArrangement::Disabled)
        .set_header(headers.iter().copied());
    for row in rows {
        table.add_row(row);
    }
    for column in table.column_iter_mut() {
        column.set_padding((0, 3));
    }
    table
        .lines()
        .map(|l| l.trim_end().to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

/// A scalar as people read it: strings bare, `null` as `-`, anything nested as compact JSON.
pub fn cell(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        Value::String(s) => s.clone(),
        Value::Bool(b) => if *b { "yes" } else { "no" }.into(),
        Value::Number(n) => n.to_string(),
        other => other.to_string(),
    }
}

/// Any answer: its scalar fields as `key: value` lines (nulls and empty lists left out), each
/// list of objects as a table under its key, other nested values as compact JSON. An error
/// answer (`errorType`, `errorMessage`) is one line.
pub fn generic(v: &Value) -> String {
    if let (Some(kind), Some(message)) = (v["errorType"].as_str(), v["errorMessage"].as_str()) {
        return format!("Error ({kind}): {message}");
    }
    let Some(o) = v.as_object() else {
        return cell(v);
    };
    let mut lines = Vec::new();
    let mut tables = Vec::new();
    for (k, val) in o {
        match val {
            Value::Null => {}
            Value::Array(items) if items.is_empty() => {}
            Value::Array(items) if items.iter().all(Value::is_object) => {
                tables.push(format!("{k}:\n{}", objects(items)));
            }
            Value::Array(items) if items.iter().all(|i| !i.is_object() && !i.is_array()) => {
                lines.push(format!(
                    "{k}: {}",
                    items.iter().map(cell).collect::<Vec<_>>().join(", ")
                ));
            }
            other => lines.push(format!("{k}: {}", cell(other))),
        }
    }
    lines.extend(tables);
    lines.join("\n")
}

/// A list of objects as columns: every key that has a scalar value in some item, in first-seen
/// order.
fn objects(items: &[Value]) -> String {
    let mut keys: Vec<&str> = Vec::new();
    for item in items {
        for (k, v) in item.as_object().into_iter().flatten() {
            if !v.is_object() && !v.is_array() && !keys.contains(&k.as_str()) {
                keys.push(k);
            }
        }
    }
    let headers: Vec<String> = keys.iter().map(|k| heading(k)).collect();
    let rows = items
        .iter()
        .map(|i| keys.iter().map(|k| cell(&i[*k])).collect())
        .collect();
    indent(&columns(
        &headers.iter().map(String::as_str).collect::<Vec<_>>(),
        rows,
    ))
}

/// `inStepFor` → `IN-STEP-FOR`.
fn heading(key: &str) -> String {
    let mut out = String::new();
    for c in key.chars() {
        if c.is_ascii_uppercase() && !out.is_empty() {
            out.push('-');
        }
        out.push(c.to_ascii_uppercase());
    }
    out
}

fn indent(text: &str) -> String {
    text.lines()
        .map(|l| format!("  {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The ops function's `status` answer: one row per pool (its desired AMI, nodes, what the
/// budgets allow now, and its state with the reason), then the deployment's problems and each
/// pool's.
pub fn status(v: &Value) -> String {
    if v.get("errorType").is_some() {
        return generic(v);
    }
    let mut out = Vec::new();
    if let Some(stopped) = v["stopped"].as_object() {
        out.push(format!(
            "STOPPED since {} by {}: {}",
            cell(&stopped.get("at").cloned().unwrap_or_default()),
            cell(&stopped.get("caller").cloned().unwrap_or_default()),
            cell(&stopped.get("reason").cloned().unwrap_or_default()),
        ));
    }
    let pools = v["pools"].as_array().cloned().unwrap_or_default();
    let rows = pools.iter().map(pool_row).collect();
    out.push(columns(
        &[
            "POOL",
            "DESIRED",
            "NODES",
            "DRIFTED",
            "EXPIRED",
            "DISRUPTING",
            "ALLOWED",
            "STATE",
        ],
        rows,
    ));
    let mut problems: Vec<String> = v["problems"]
        .as_array()
        .into_iter()
        .flatten()
        .map(cell)
        .collect();
    for p in &pools {
        for problem in p["problems"].as_array().into_iter().flatten() {
            problems.push(format!("{}: {}", cell(&p["pool"]), cell(problem)));
        }
    }
    for i in v["invalid"].as_array().into_iter().flatten() {
        problems.push(format!("invalid policy: {}", generic_line(i)));
    }
    if !problems.is_empty() {
        out.push(format!("\nProblems:\n{}", indent(&problems.join("\n"))));
    }
    // What lies ahead: AMIs deprecating within the horizon, a pinned release without builds
    // for the next Kubernetes minor (the ami-watcher's findings).
    let warnings: Vec<String> = pools
        .iter()
        .flat_map(|p| {
            p["warnings"]
                .as_array()
                .into_iter()
                .flatten()
                .map(move |w| format!("{}: {}", cell(&p["pool"]), cell(w)))
        })
        .collect();
    if !warnings.is_empty() {
        out.push(format!("\nWarnings:\n{}", indent(&warnings.join("\n"))));
    }
    out.join("\n")
}

/// An object on one line: `k=v` pairs.
fn generic_line(v: &Value) -> String {
    match v.as_object() {
        Some(o) => o
            .iter()
            .filter(|(_, v)| !v.is_null())
            .map(|(k, v)| format!("{k}={}", cell(v)))
            .collect::<Vec<_>>()
            .join(" "),
        None => cell(v),
    }
}

fn pool_row(p: &Value) -> Vec<String> {
    let nodes = &p["nodes"];
    let allowed = ["drifted", "expired"]
        .iter()
        .filter_map(|r| p["budgets"][*r]["allowed"].as_u64().map(|a| (r, a)))
        .map(|(r, a)| format!("{r} {a}"))
        .collect::<Vec<_>>()
        .join(", ");
    let desired = match (
        p["desired"]["ami"].as_str(),
        p["desired"]["source"].as_str(),
    ) {
        (Some(ami), Some("pin")) => format!("{ami} (pinned)"),
        (Some(ami), _) => ami.to_string(),
        (None, _) => "unresolved".to_string(),
    };
    vec![
        cell(&p["pool"]),
        desired,
        match (nodes["ready"].as_u64(), nodes["instances"].as_u64()) {
            (Some(r), Some(i)) => format!("{r}/{i} ready"),
            (None, Some(i)) => i.to_string(),
            _ => "-".into(),
        },
        cell(&nodes["drifted"]),
        cell(&nodes["expired"]),
        cell(&nodes["disrupting"]),
        if allowed.is_empty() {
            "-".into()
        } else {
            allowed
        },
        state(p),
    ]
}

/// What holds or moves the pool, with why: paused, halted, backing off (its passes keep
/// failing), repair suspended (an outage), instances retained (`Terminating:Retained`, their
/// drain did not finish), rotating, blocked, waiting for promotion, or `ok`.
fn state(p: &Value) -> String {
    if let Some(paused) = p["paused"].as_object() {
        let by = paused
            .get("caller")
            .and_then(Value::as_str)
            .or_else(|| paused.get("by").and_then(Value::as_str))
            .unwrap_or("-");
        return format!(
            "paused by {by}: {}",
            cell(&paused.get("reason").cloned().unwrap_or_default())
        );
    }
    if !p["halted"].is_null() {
        return format!("halted: {}", reason_of(&p["halted"]));
    }
    if let Some(until) = p["backoff"]["until"].as_str() {
        return format!("backing off until {until}: {}", reason_of(&p["backoff"]));
    }
    if !p["repairSuspended"].is_null() {
        return format!("repair suspended: {}", reason_of(&p["repairSuspended"]));
    }
    let retained = p["retained"].as_array().map_or(0, Vec::len);
    if retained > 0 {
        // Which instances and pods: the pool's problems, below the table.
        return format!("retained {retained}");
    }
    let rotating = p["rotations"].as_array().map_or(0, Vec::len);
    if rotating > 0 {
        if p["replacement"]["strategy"] == "terminateFirst" {
            return format!("rotating {rotating}, terminate first");
        }
        return format!("rotating {rotating}");
    }
    if !p["blocked"].is_null() {
        return format!("blocked: {}", reason_of(&p["blocked"]));
    }
    if !p["promotionWait"].is_null() {
        return format!("waiting: {}", reason_of(&p["promotionWait"]));
    }
    "ok".into()
}

fn reason_of(v: &Value) -> String {
    match v {
        Value::Object(o) => o
            .get("reason")
            .or_else(|| o.get("why"))
            .or_else(|| o.get("message"))
            .map(cell)
            .unwrap_or_else(|| generic_line(v)),
        other => cell(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_suspended_repair_shows_as_the_pools_state_with_why() {
        let p = json!({"pool": "prod/general", "paused": null, "halted": null,
                       "repairSuspended": {"message": "3 of 6 nodes of the pool are unhealthy", "at": "2026-12-05T10:00:00Z"},
                       "rotations": [], "blocked": null});
        assert_eq!(
            state(&p),
            "repair suspended: 3 of 6 nodes of the pool are unhealthy"
        );
    }

    #[test]
    fn retained_instances_show_as_the_pools_state() {
        let p = json!({"pool": "prod/general", "paused": null, "halted": null,
                       "repairSuspended": null, "blocked": null,
                       "rotations": [{"instance": "i-1", "step": "Draining"}],
                       "retained": [{"instance": "i-1", "pods": ["default/db-0"]}]});
        assert_eq!(state(&p), "retained 1");
    }

    #[test]
    fn the_status_table_has_a_row_per_pool_with_its_state_and_reason() {
        let v = json!({
            "stopped": null,
            "pools": [
                {"pool": "prod/general", "desired": {"ami": "ami-1", "source": "amiSelectorTerms"},
                 "nodes": {"instances": 6, "ready": 6, "drifted": 2, "expired": 0, "disrupting": 1},
                 "budgets": {"drifted": {"allowed": 1}, "expired": {"allowed": 0}},
                 "paused": null, "halted": null, "blocked": null, "rotations": [{"instanceId": "i-1"}],
                 "problems": []},
                {"pool": "prod/a-very-long-pool-name-for-gpu-workloads", "desired": {"ami": "ami-2", "source": "pin"},
                 "nodes": {"instances": 3, "ready": 3, "drifted": 0, "expired": 0, "disrupting": 0},
                 "budgets": {}, "paused": {"by": "operator", "reason": "change freeze", "caller": "arn:aws:iam::1:user/alice"},
                 "rotations": [], "problems": ["2 of 3 nodes are forced at once"],
                 "warnings": ["AMI ami-2 (golden-7), pinned, is deprecated at 2026-12-25T00:00:00Z, in 20 day(s): move the pool to a newer release before then"]}
            ],
            "problems": []
        });
        let text = status(&v);
        let lines: Vec<&str> = text.lines().collect();
        assert!(
            lines[0].starts_with("POOL") && lines[0].contains("STATE"),
            "{text}"
        );
        let general = lines
            .iter()
            .find(|l| l.starts_with("prod/general"))
            .copied()
            .unwrap_or_default();
        assert!(
            general.contains("6/6 ready")
                && general.contains("rotating 1")
                && general.contains("drifted 1, expired 0"),
            "{text}"
        );
        let long = lines
            .iter()
            .find(|l| l.starts_with("prod/a-very-long"))
            .copied()
            .unwrap_or_default();
        assert!(
            long.contains("ami-2 (pinned)")
                && long.contains("paused by arn:aws:iam::1:user/alice: change freeze"),
            "{text}"
        );
        // Columns line up: every row's second column starts where the header's does.
        let at = lines[0].find("DESIRED").unwrap_or_default();
        assert!(
            general[at..].starts_with("ami-1") && long[at..].starts_with("ami-2"),
            "{text}"
        );
        assert!(text.contains("Problems:\n  prod/a-very-long-pool-name-for-gpu-workloads: 2 of 3 nodes are forced at once"), "{text}");
        assert!(
            text.contains("Warnings:\n  prod/a-very-long-pool-name-for-gpu-workloads: AMI ami-2 (golden-7), pinned, is deprecated"),
            "{text}"
        );
        assert!(!text.contains('{') && !text.contains("null"), "{text}");
    }

    #[test]
    fn any_answer_prints_as_lines_and_columns() {
        let v = json!({"action": "pause", "pool": "prod/general", "changed": true, "previous": null,
                       "rotations": [{"instanceId": "i-1", "step": "Draining", "inStepFor": "5m"}],
                       "tags": ["a", "b"]});
        let text = generic(&v);
        assert!(
            text.contains("action: pause\n")
                && text.contains("changed: yes")
                && text.contains("tags: a, b"),
            "{text}"
        );
        assert!(!text.contains("previous"), "{text}");
        assert!(
            text.contains(
                "rotations:\n  INSTANCE-ID   STEP       IN-STEP-FOR\n  i-1           Draining   5m"
            ),
            "{text}"
        );
        assert_eq!(
            generic(&json!({"errorType": "InvalidRequest", "errorMessage": "reason: required"})),
            "Error (InvalidRequest): reason: required"
        );
    }
}
