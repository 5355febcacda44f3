//! `status`: what is happening to a pool's nodes and why, from the same snapshot and plan the
//! rotator uses, plus the pool record, rotation records and handled interruptions; with
//! promotion, each candidate release's soak progress upstream, why the pool waits, its
//! promotion history, and the quarantine in force.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use super::{OpsHandler, instant, rotation_summary};
use crate::budget;
use crate::fleet::Lifecycle;
use crate::handlers::HandlerError;
use crate::plan::{self, Drift, Expiry};
use crate::policy::Policy;
use crate::rotation::Rotation;

/// Interruptions handled within this window are shown.
const INTERRUPTION_WINDOW_HOURS: i64 = 24;
/// Finished rotations within this window are shown.
const FINISHED_WINDOW_HOURS: i64 = 24;

fn age(now: DateTime<Utc>, t: DateTime<Utc>) -> String {
    crate::duration::format((now - t).to_std().unwrap_or_default())
}

/// The time an `EVT#` item is about: its first RFC 3339 field among the usual names.
fn event_time(doc: &Value) -> Option<DateTime<Utc>> {
    ["handledAt", "at", "receivedAt", "time"]
        .iter()
        .filter_map(|k| doc.get(*k).and_then(Value::as_str))
        .find_map(|t| DateTime::parse_from_rfc3339(t).ok())
        .map(|t| t.with_timezone(&Utc))
}

/// A policy document that is invalid: nothing acts on it, `status` lists it (`invalid`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Invalid {
    /// Where it was read (the parameter name).
    pub source: String,
    /// The pool its parameter path owns, when the path names one.
    pub pool: Option<String>,
    /// Its errors, bounded ([`crate::problem::summary`]).
    pub problems: String,
}

/// More nodes of `policy`'s pool forced at once than its budgets allow, as `status` reads the
/// pool now ([`plan::ForcedAtOnce`]), for the answer of a request that lets the pool start
/// (`resume`, `start`). `None` when none is, or when the pool cannot be read (the request has
/// done its work; the rotator plans again and `status` says more).
pub(super) async fn forced_at_once(
    ops: &OpsHandler,
    policy: &Policy,
    now: DateTime<Utc>,
) -> Option<plan::ForcedAtOnce> {
    let ops = ops.at(policy.place.as_ref()).await.ok()?;
    let kube = ops.ports.kube.connect(&policy.cluster).await.ok()?;
    let (_, preview) = ops
        .planner()
        .preview(policy, kube.as_ref(), now)
        .await
        .ok()?;
    preview.plan().forced_at_once.clone()
}

pub(super) async fn status(
    ops: &OpsHandler,
    policies: &[&Policy],
    invalid: &[&Invalid],
    now: DateTime<Utc>,
) -> Result<Value, HandlerError> {
    let mut problems = Vec::new();
    let quarantined = match ops.cell.state.quarantine().await {
        Ok(q) => Some(q),
        Err(e) => {
            problems.push(format!("cannot read the quarantine: {e}"));
            None
        }
    };
    let stopped = super::stop::status_of(&ops.cell.state, &mut problems).await;
    let mut pools = Vec::new();
    for policy in policies {
        pools.push(pool_status(ops, policy, quarantined.as_ref(), now).await?);
    }
    Ok(json!({
        "at": instant(now),
        "stopped": stopped,
        "pools": pools,
        "invalid": invalid,
        "quarantine": quarantined,
        "problems": problems,
    }))
}

/// The instances of the snapshot's group Auto Scaling retained (`Terminating:Retained`,
/// [`crate::retain`]): each with its node, the evictable pods still on it (`namespace/name`,
/// listed now; `null` when they cannot be listed) and what the rotator's next pass does with
/// it. One with pods is also a problem of the pool.
async fn retained_instances(
    s: &plan::Snapshot,
    kube: &dyn crate::kube::NodeOps,
    now: DateTime<Utc>,
    problems: &mut Vec<String>,
) -> Vec<Value> {
    let mut out = Vec::new();
    for m in s
        .members
        .iter()
        .filter(|m| s.group.retained.contains(&m.instance_id))
    {
        let node = m.node.as_ref().map(|n| n.name.clone());
        let pods = match &node {
            None => Some(Vec::new()),
            Some(n) => match kube.list_pods(n).await {
                Ok(pods) => Some(
                    pods.iter()
                        .filter(|p| {
                            matches!(
                                crate::kube::classify(p, now),
                                crate::kube::PodClass::Evict { .. }
                            )
                        })
                        .map(|p| format!("{}/{}", p.pod.namespace, p.pod.name))
                        .collect::<Vec<_>>(),
                ),
                Err(e) => {
                    problems.push(format!(
                        "cannot list the pods of retained instance {} (node {n}): {e}",
                        m.instance_id
                    ));
                    None
                }
            },
        };
        if let Some(p) = pods.as_ref().filter(|p| !p.is_empty()) {
            problems.push(format!(
                "instance {} is Terminating:Retained (its terminate lifecycle hook was abandoned: the drain did not finish) with {} pod(s) on node {}: {}; it is terminated once they are gone",
                m.instance_id,
                p.len(),
                node.as_deref().unwrap_or("?"),
                p.join(", ")
            ));
        }
        out.push(json!({
            "instance": m.instance_id,
            "node": node,
            "pods": pods,
            "next": crate::retain::cleanup(m),
        }));
    }
    out
}

async fn pool_status(
    ops: &OpsHandler,
    policy: &Policy,
    quarantined: Option<&crate::promotion::Quarantined>,
    now: DateTime<Utc>,
) -> Result<Value, HandlerError> {
    let pool = policy.pool_id();
    let store = &ops.cell.state;
    let internal = |e: crate::port::PortError| HandlerError::internal(e.to_string());
    let record = store.pool(&pool).await.map_err(internal)?;
    let mut problems = Vec::new();

    // Desired AMI and where it came from.
    let resolved = record.as_ref().and_then(|r| r.desired.as_ref()).map(|a| {
        json!({
            "ami": a.id,
            "name": a.name,
            "term": a.source.term,
            "field": a.source.field,
            "value": a.source.value,
            "parameter": a.source.parameter,
            "resolvedAt": record.as_ref().and_then(|r| r.resolved_at).map(instant),
        })
    });
    let pin = record.as_ref().and_then(|r| r.pin.clone());
    let desired = json!({
        "ami": record.as_ref().and_then(|r| r.effective_desired()),
        "source": if pin.is_some() { "pin" } else if resolved.is_some() { "amiSelectorTerms" } else { "unresolved" },
        "pin": pin,
        "resolved": resolved,
        "previous": record.as_ref().and_then(|r| r.previous_desired.as_ref()).map(|a| a.id.clone()),
        "changedAt": record.as_ref().and_then(|r| r.desired_changed_at).map(instant),
    });

    // Nodes, budgets, plan: the rotator's own view.
    let mut nodes = Value::Null;
    let mut budgets = Value::Null;
    let mut blocked = Value::Null;
    let mut forced_at_once = Value::Null;
    let mut replacement = Value::Null;
    let mut opted_out: Vec<Value> = Vec::new();
    let mut rotations: Vec<Rotation> = Vec::new();
    // The pool's place's ports, had once for the plan and the promotion alarms.
    let here = ops
        .at(policy.place.as_ref())
        .await
        .map_err(|e| e.to_string());
    let connected = match &here {
        Err(e) => Err(e.clone()),
        Ok(ops) => (ops.ports.kube.connect(&policy.cluster).await)
            .map_err(|e| format!("cluster {} unreachable: {e}", policy.cluster)),
    };
    let snapshot = match (&here, &connected) {
        (Ok(ops), Ok(kube)) => ops.planner().preview(policy, kube.as_ref(), now).await,
        (Err(e), _) | (_, Err(e)) => Err(e.clone()),
    };
    let mut retained: Vec<Value> = Vec::new();
    let mut node_group_update = Value::Null;
    match snapshot {
        Err(e) => problems.push(e),
        Ok((s, preview)) => {
            if let crate::handlers::rotator::Preview::Managed { record, .. } = &preview {
                node_group_update = json!(record);
            }
            let p = preview.plan();
            let desired_ami = s.gates.desired_ami.as_deref();
            let mut by_ami: BTreeMap<String, u32> = BTreeMap::new();
            let (mut drifted, mut expired, mut not_ready, mut launching) = (0u32, 0u32, 0u32, 0u32);
            for m in &s.members {
                *by_ami
                    .entry(m.image_id.clone().unwrap_or_else(|| "unknown".into()))
                    .or_default() += 1;
                match m.lifecycle {
                    Lifecycle::Pending => launching += 1,
                    Lifecycle::InService if !m.is_ready() => not_ready += 1,
                    _ => {}
                }
                if m.lifecycle != Lifecycle::InService {
                    continue;
                }
                let a = plan::assess(m, desired_ami, &s.expiration(), now);
                if matches!(a.drift, Drift::Drifted { .. }) {
                    drifted += 1;
                }
                if matches!(a.expiry, Expiry::Expired { .. } | Expiry::Forced { .. }) {
                    expired += 1;
                }
            }
            nodes = json!({
                "instances": s.members.len(),
                "ready": p.total,
                "byAmi": by_ami,
                "drifted": drifted,
                "expired": expired,
                "notReady": not_ready,
                "launching": launching,
                "disrupting": p.disrupting,
                "group": {
                    "name": s.group.name,
                    "min": s.group.min_size,
                    "max": s.group.max_size,
                    "desired": s.group.desired_capacity,
                    "launchTemplateImage": s.group.launch_template_image,
                },
            });
            let mut b = serde_json::Map::new();
            for reason in [budget::Reason::Drifted, budget::Reason::Expired] {
                let o = budget::outlook(&policy.budgets, reason, p.total, p.disrupting, now);
                let a = &o.allowance;
                b.insert(
                    reason.to_string(),
                    json!({
                        "allowed": a.allowed,
                        "limitedBy": a.limited_by.map(budget::budget_path),
                        "nextChange": o.next_change.map(instant),
                        "nextWindowEdge": a.next_window_edge.map(instant),
                    }),
                );
            }
            budgets = Value::Object(b);
            blocked = json!(p.blocked);
            // Nodes a pod keeps from voluntary disruption: which pod, by what, until when.
            opted_out = s
                .members
                .iter()
                .filter_map(|m| {
                    let o = m.node.as_ref()?.opt_out.as_ref().filter(|o| o.holds(now))?;
                    Some(json!({"instance": m.instance_id, "pod": o.pod,
                                "annotation": o.annotation, "value": o.value,
                                "until": o.until.map(instant)}))
                })
                .collect();
            if let Some(f) = &p.forced_at_once {
                problems.push(f.message.clone());
                forced_at_once = json!(f);
            }
            // How nodes are replaced: surge or terminate first (a managed node group's update
            // with EKS's MINIMAL strategy), and why.
            let managed = matches!(preview, crate::handlers::rotator::Preview::Managed { .. });
            let mut r = json!(p.replacement);
            if let Some(o) = r.as_object_mut() {
                let message = match (managed, p.replacement.terminate_first()) {
                    (true, true) => format!(
                        "{}: node group updates use EKS's MINIMAL update strategy",
                        p.replacement
                    ),
                    _ => p.replacement.to_string(),
                };
                o.insert("message".into(), json!(message));
            }
            replacement = r;
            if let Ok(kube) = &connected {
                retained = retained_instances(&s, kube.as_ref(), now, &mut problems).await;
            }
            rotations = s.rotations;
        }
    }
    if rotations.is_empty() {
        // Without a snapshot, still show the records.
        rotations = store
            .rotations(&pool)
            .await
            .map_err(internal)?
            .into_iter()
            .map(|v| v.value)
            .collect();
    }
    rotations.sort_by(|a, b| (a.created_at, &a.instance_id).cmp(&(b.created_at, &b.instance_id)));
    let summarize = |r: &Rotation| {
        let mut v = rotation_summary(r);
        if let Some(o) = v.as_object_mut() {
            o.insert("age".into(), json!(age(now, r.created_at)));
            o.insert("inStepFor".into(), json!(age(now, r.step_at)));
            o.insert("waiting".into(), json!(r.waiting()));
        }
        v
    };
    let in_flight: Vec<Value> = rotations
        .iter()
        .filter(|r| r.in_flight())
        .map(summarize)
        .collect();
    let finished: Vec<Value> = rotations
        .iter()
        .filter(|r| {
            !r.in_flight() && now - r.step_at < chrono::Duration::hours(FINISHED_WINDOW_HOURS)
        })
        .map(summarize)
        .collect();

    // Interruptions handled by the interruption handler (EVT# items) in the last 24h.
    let interruptions: Vec<Value> = store
        .event_log(&pool)
        .await
        .map_err(internal)?
        .into_iter()
        .filter(|(_, v)| {
            event_time(v)
                .is_none_or(|t| now - t < chrono::Duration::hours(INTERRUPTION_WINDOW_HOURS))
        })
        .map(|(sk, v)| json!({"id": sk, "event": v}))
        .collect();

    // Promotion: the upstream's candidates (the quarantine unread: shown as nothing proven).
    let promotion = match quarantined {
        Some(q) => {
            let wait = record.as_ref().and_then(|r| r.promotion_wait.as_deref());
            let alarms = match &here {
                Ok(here) => Ok(here.ports.alarms.as_ref()),
                Err(e) => Err(e.clone()),
            };
            ops.promotions()
                .promotion_status(policy, alarms, q, wait, now, &mut problems)
                .await
        }
        None if policy.promotion.is_some() => {
            json!({"from": policy.promotion.as_ref().and_then(|p| p.from.clone()), "candidates": [], "next": null})
        }
        None => Value::Null,
    };

    let paused = match record.as_ref().and_then(|r| r.paused.clone()) {
        Some(p) => {
            json!({"by": "operator", "reason": p.reason, "at": instant(p.at), "caller": p.by})
        }
        None if policy.paused => json!({"by": "policy", "reason": "policy sets paused: true"}),
        None => Value::Null,
    };
    Ok(json!({
        "pool": pool,
        "desired": desired,
        "nodes": nodes,
        // The rollout status the rotator last published (at most one pass old).
        "rollout": record.as_ref().and_then(|r| r.rollout.clone()),
        // What the ami-watcher found ahead of time: deprecating AMIs, next-minor builds.
        "findings": record.as_ref().and_then(|r| r.findings.clone()),
        "warnings": record
            .as_ref()
            .and_then(|r| r.findings.as_ref())
            .map(|f| f.warnings(now))
            .unwrap_or_default(),
        "budgets": budgets,
        "blocked": blocked,
        "optedOut": opted_out,
        "retained": retained,
        "forcedAtOnce": forced_at_once,
        "replacement": replacement,
        "paused": paused,
        "halted": record.as_ref().and_then(|r| r.halted.clone()),
        "repairSuspended": record.as_ref().and_then(|r| r.repair_suspended.clone()),
        "backoff": record.as_ref().and_then(|r| r.backoff.clone()),
        "rotations": in_flight,
        "nodeGroupUpdate": node_group_update,
        "finished24h": finished,
        "interruptions24h": interruptions,
        "lastError": record.as_ref().and_then(|r| r.last_error.clone()),
        "promotion": promotion,
        "promotionWait": record.as_ref().and_then(|r| r.promotion_wait.clone()),
        "releases": record.as_ref().map(|r| r.releases.clone()).unwrap_or_default(),
        "problems": problems,
    }))
}
