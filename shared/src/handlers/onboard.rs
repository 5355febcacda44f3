//! Safe onboarding (`nodecycle validate --live`): what nodecycle's first pass would do for a
//! policy that is not stored yet, changing nothing.
//!
//! It runs the real code of that first pass, the ami-watcher's resolution of the pool and the
//! rotator's plan for it, over ports whose writes go nowhere: a [`Scratch`] store (reads come
//! from the state table when there is one, writes stay in memory), a policy source that is the
//! deployed policies with this document in its pool's place ([`WithDocument`]), and a bus that
//! forgets every event. So the answer is what the deployed functions would decide, including
//! what they do to a group they have never seen (see docs/concepts.md, "The first pass").

use std::sync::Arc;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use super::ami_watcher::AmiWatcher;
use super::rotator::{RotatorHandler, Settings};
use crate::ami::instance_types::{self, GroupTypes};
use crate::policy::source::{PolicyDocument, PolicySource};
use crate::policy::{self, Policy};
use crate::port::PortError;
use crate::ports::Ports;
use crate::state::{Scratch, Store};

/// The deployed policies (when they can be read) with `doc` in the place of any document of
/// the same pool: the pass sees the deployment as it would be once `doc` is stored.
pub struct WithDocument {
    deployed: Vec<PolicyDocument>,
    doc: PolicyDocument,
}

impl WithDocument {
    /// `doc` among `deployed` (documents of its pool are left out).
    pub fn new(deployed: Vec<PolicyDocument>, doc: PolicyDocument, pool: &str) -> Self {
        let deployed = deployed
            .into_iter()
            .filter(|d| {
                policy::parse_document(d)
                    .policy
                    .is_none_or(|p| p.pool_id() != pool)
            })
            .collect();
        WithDocument { deployed, doc }
    }
}

#[async_trait]
impl PolicySource for WithDocument {
    async fn all(&self) -> Result<Vec<PolicyDocument>, PortError> {
        let mut all = self.deployed.clone();
        all.push(self.doc.clone());
        all.sort_by(|a, b| a.source.cmp(&b.source));
        Ok(all)
    }

    async fn one(&self, source: &str) -> Result<Option<PolicyDocument>, PortError> {
        Ok(self.all().await?.into_iter().find(|d| d.source == source))
    }

    fn contains(&self, name: &str) -> bool {
        name == self.doc.source || self.deployed.iter().any(|d| d.source == name)
    }
}

/// Checks of the policy against what the live group runs, beside the first pass's plan: the
/// architecture of the policy (when set) and of the image the first pass would make desired,
/// against the group's instance types (`facts`, or why they could not be read). Each problem is
/// one sentence saying what is wrong and what to do.
pub fn live_checks(
    policy: &Policy,
    desired: Option<&crate::ami::resolve::Ami>,
    facts: Result<&GroupTypes, &PortError>,
) -> Vec<String> {
    let facts = match facts {
        Ok(f) => f,
        Err(e) => {
            return vec![format!(
                "architecture: cannot read the instance types of the group ({e}); the rotator checks them before it writes an image"
            )];
        }
    };
    let mut problems = instance_types::check_policy(policy, facts);
    if let Some(ami) = desired {
        problems
            .0
            .extend(instance_types::check(ami.architecture, false, &policy.node_group, facts).0);
    }
    let mut out: Vec<String> = problems.errors().map(ToString::to_string).collect();
    out.dedup();
    out
}

/// What the first pass would do for the policy `doc` (already valid: `policy`) at `now`:
/// `{"pool", "firstPass", "table", "watcher", "desired", "plan", "problems"}`:
/// - `firstPass`: the table holds no record of the pool (nodecycle has never seen it);
/// - `table`: whether the state table was read (quarantine, the pool's record, upstreams);
/// - `watcher`: the ami-watcher's outcome for the pool (`status`, `desired`, `waiting`,
///   `error`), `desired`: the pool record after it (`ami`, `name`, `source`, `history`);
/// - `plan`: the rotator's plan as `nodecycle plan` prints it (candidates, actions, blocked,
///   decisions; a managed node group's `update`);
/// - `problems`: [`live_checks`], and more nodes forced at once than the budgets allow
///   ([`crate::plan::ForcedAtOnce`]).
///
/// `base` are the deployment's ports; nothing is written through them (`Err` says what could
/// not be read). A pool that names its account and region is read through that member's
/// ports (`base.members`), as the deployed functions read it; a member whose spoke role
/// cannot be assumed is the `Err`.
pub async fn first_pass(
    base: &Ports,
    table: Option<Arc<dyn Store>>,
    doc: PolicyDocument,
    policy: &Policy,
    settings: Settings,
    now: DateTime<Utc>,
) -> Result<Value, String> {
    let pool = policy.pool_id();
    let read_table = table.is_some();
    let store: Arc<dyn Store> = Arc::new(Scratch::new(table));
    let deployed = match base.policies.all().await {
        Ok(d) => d,
        Err(e) => {
            tracing::warn!(error = %e, "cannot list the deployed policies; the document alone is checked");
            Vec::new()
        }
    };
    let ports = Ports {
        policies: Arc::new(WithDocument::new(deployed, doc, &pool)),
        store: store.clone(),
        events: Arc::new(crate::bus::Discard),
        metrics: Arc::new(crate::metrics::NoMetrics),
        ..base.clone()
    };
    let state = crate::state::Repository::new(store.clone());
    let before = state
        .pool(&pool)
        .await
        .map_err(|e| format!("cannot read the pool's state: {e}"))?;
    let watcher = AmiWatcher::new(&ports)
        .handle(&json!({ "pools": [pool] }), now)
        .await
        .map_err(|e| e.message)?;
    let outcome = watcher["pools"]
        .as_array()
        .and_then(|p| p.iter().find(|o| o["pool"] == json!(pool)))
        .cloned()
        .unwrap_or(Value::Null);
    let record = state
        .pool(&pool)
        .await
        .map_err(|e| format!("cannot read the pool's state: {e}"))?;
    // The pool's account and region: the plan and the group's facts through its member's
    // ports (the scratch table and the forgetful bus stay).
    let rotator = RotatorHandler::new(&ports, settings)
        .at(policy.place.as_ref())
        .await
        .map_err(|e| e.to_string())?;
    let kube = rotator
        .ports
        .kube
        .connect(&policy.cluster)
        .await
        .map_err(|e| format!("cluster {} unreachable: {e}", policy.cluster))?;
    let (_snapshot, preview) = rotator
        .planner()
        .preview(policy, kube.as_ref(), now)
        .await?;
    let facts = rotator
        .ports
        .node_groups
        .instance_types(&policy.cluster, &policy.node_group)
        .await;
    let forced_at_once = preview.plan().forced_at_once.clone();
    let mut plan = serde_json::to_value(&preview).map_err(|e| e.to_string())?;
    if let Some(o) = plan.as_object_mut() {
        o.insert(
            "promotionWait".into(),
            json!(record.as_ref().and_then(|r| r.promotion_wait.clone())),
        );
    }
    let desired = record.as_ref().map(|r| {
        json!({
            "ami": r.desired.as_ref().map(|a| &a.id),
            "name": r.desired.as_ref().map(|a| &a.name),
            "source": r.desired.as_ref().map(|a| &a.source),
            "history": r.history.iter().map(|h| &h.ami.id).collect::<Vec<_>>(),
            "pin": r.pin.as_ref().map(|p| &p.ami),
        })
    });
    let mut problems = live_checks(
        policy,
        record.as_ref().and_then(|r| r.desired.as_ref()),
        facts.as_ref(),
    );
    problems.extend(forced_at_once.map(|f| f.message));
    Ok(json!({
        "pool": pool,
        "firstPass": before.is_none(),
        "table": read_table,
        "watcher": outcome,
        "desired": desired,
        "plan": plan,
        "problems": problems,
    }))
}
