//! The pool record's operator fields: `pin` (an image checked against the pool's architecture),
//! `unpin`, `pause` and `resume`. Each is one conditional update of the pool record (re-read
//! on conflict), idempotent when repeated (`"changed": false`).

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use super::{Origin, internal, invalid1, operator};
use crate::ami::resolve::{ImageCatalog, ImageQuery};
use crate::announce::Announcer;
use crate::handlers::HandlerError;
use crate::policy::Policy;
use crate::state::{OperatorAction, Pin as PinRecord, PoolRecord, Repository};

/// `unpin`, `pause` and `resume`, and the write of `pin`: changes to the pool record.
#[derive(Clone, Copy)]
pub(super) struct PoolChange<'a> {
    /// Updates the pool record with its events.
    pub announce: &'a Announcer,
}

impl PoolChange<'_> {
    /// Applies `change` to the pool record (re-read on conflict). `change` gets the record and
    /// who/why, returns the new record and the response detail.
    async fn update(
        &self,
        policy: &Policy,
        origin: &Origin,
        now: DateTime<Utc>,
        action: &str,
        reason: &str,
        change: impl Fn(&PoolRecord, OperatorAction) -> (PoolRecord, Value) + Send + Sync,
    ) -> Result<Value, HandlerError> {
        let pool = policy.pool_id();
        let by = operator(origin, reason, now);
        let (before, after) = self
            .announce
            .update_pool(&pool, now, |r| change(r, by.clone()).0)
            .await
            .map_err(internal)?;
        let (_, detail) = change(&before, by);
        let mut out = json!({
            "action": action,
            "pool": pool,
            "requestId": origin.request_id,
            "changed": before != after,
            "desired": after.effective_desired(),
        });
        if let (Some(o), Some(d)) = (out.as_object_mut(), detail.as_object()) {
            o.extend(d.clone());
        }
        Ok(out)
    }

    /// `unpin`, `pause` or `resume` of the pool.
    pub(super) async fn set(
        &self,
        field: Field,
        policy: &Policy,
        reason: &str,
        origin: &Origin,
        now: DateTime<Utc>,
    ) -> Result<Value, HandlerError> {
        let action = match field {
            Field::Unpin => "unpin",
            Field::Pause => "pause",
            Field::Resume => "resume",
        };
        self.update(policy, origin, now, action, reason, |r, by| match field {
            Field::Unpin => (
                PoolRecord {
                    pin: None,
                    ..r.clone()
                },
                json!({"unpinned": r.pin}),
            ),
            Field::Pause => {
                let paused = r.paused.clone().unwrap_or(by);
                (
                    PoolRecord {
                        paused: Some(paused.clone()),
                        ..r.clone()
                    },
                    json!({"paused": paused}),
                )
            }
            Field::Resume => (
                PoolRecord {
                    paused: None,
                    halted: None,
                    ..r.clone()
                },
                json!({"resumed": {"paused": r.paused, "halted": r.halted}}),
            ),
        })
        .await
    }
}

/// The operator fields of the pool record that `unpin`, `pause` and `resume` set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Field {
    /// `unpin`: the pool follows its `amiSelectorTerms` again.
    Unpin,
    /// `pause`: the rotator starts nothing new in the pool (the first pause is kept).
    Pause,
    /// `resume`: lifts the operator's pause and a halt.
    Resume,
}

/// `pin`: the pool runs image `ami` whatever its terms select, once DescribeImages shows it
/// available and of the pool's architecture.
pub(super) struct Pin<'a> {
    /// DescribeImages.
    pub images: &'a dyn ImageCatalog,
    /// The pool record (its resolved architecture).
    pub state: &'a Repository,
    /// The write.
    pub change: PoolChange<'a>,
}

impl Pin<'_> {
    pub(super) async fn run(
        &self,
        policy: &Policy,
        ami: &str,
        reason: &str,
        origin: &Origin,
        now: DateTime<Utc>,
    ) -> Result<Value, HandlerError> {
        let pool = policy.pool_id();
        let query = ImageQuery {
            image_ids: vec![ami.to_string()],
            ..ImageQuery::default()
        };
        let images = self
            .images
            .describe_images(&query)
            .await
            .map_err(|e| internal(format!("cannot describe {ami}: {e}")))?;
        let Some(image) = images.into_iter().find(|i| i.id == ami) else {
            return Err(invalid1(format!(
                "ami: {ami} does not exist or is not available (DescribeImages, state=available)"
            )));
        };
        let record = self.state.pool(&pool).await.map_err(internal)?;
        let pool_arch = policy.architecture.or_else(|| {
            record
                .as_ref()
                .and_then(|r| r.desired.as_ref())
                .map(|a| a.architecture)
        });
        match (pool_arch, image.architecture) {
            (None, _) => {
                return Err(invalid1(format!(
                    "ami: cannot check {ami} against pool {pool}: its architecture is unknown (not in the policy, nothing resolved yet); set architecture in the policy"
                )));
            }
            (Some(want), got) if got != Some(want) => {
                return Err(invalid1(format!(
                    "ami: {ami} ({}) is {}, pool {pool} runs {want}",
                    image.name,
                    got.map_or("an unsupported architecture".to_string(), |a| a.to_string())
                )));
            }
            _ => {}
        }
        let name = image.name.clone();
        self.change
            .update(policy, origin, now, "pin", reason, move |r, by| {
                // A pin is the pool's first desired AMI when the terms never resolved: from
                // then on nodecycle acts on its nodes (their forced expiry counts from here).
                let adopted_at = Some(r.adopted().map_or(by.at, |a| a.min(by.at)));
                let same = r.pin.as_ref().is_some_and(|p| p.ami == ami);
                let pin = if same {
                    r.pin.clone()
                } else {
                    Some(PinRecord {
                        ami: ami.to_string(),
                        name: Some(name.clone()),
                        by,
                    })
                };
                (
                    PoolRecord {
                        pin: pin.clone(),
                        adopted_at,
                        ..r.clone()
                    },
                    json!({
                        "pinned": pin,
                        "previousPin": if same { None } else { r.pin.clone() },
                        "resolved": r.desired.as_ref().map(|a| a.id.clone()),
                    }),
                )
            })
            .await
    }
}
