//! Operator quarantine: `quarantine` excludes an image or a release from every pool's
//! candidates (cause `operator`, who/why/when), `unquarantine` lifts it. Deployment-wide, so the
//! audit record goes under the `QUARANTINE` partition. Both are idempotent: repeating a
//! quarantine returns the entry in force (its time and reason unchanged), lifting what is not
//! quarantined answers `"changed": false`.
//!
//! An image id and a release that is that image id (pools on non-alias terms) name the same
//! thing: either form finds, and lifts, the other.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use super::{Origin, internal};
use crate::announce::Announcer;
use crate::handlers::HandlerError;
use crate::policy::Policy;
use crate::promotion::{self, Cause, Quarantine, Quarantined, Release, Rollback, Target};
use crate::state::{PoolRecord, ReleaseHow, Repository};

/// The targets that name the same thing as `target` (an image id also as a release).
fn equivalents(target: &Target) -> Vec<Target> {
    match target {
        Target::Ami(id) => vec![
            Target::Ami(id.clone()),
            Target::Release(Release(id.clone())),
        ],
        Target::Release(r) if r.is_image() => {
            vec![Target::Ami(r.0.clone()), Target::Release(r.clone())]
        }
        Target::Release(r) => vec![Target::Release(r.clone())],
    }
}

/// The entry in force for `target` (or an equivalent target), if any.
fn in_force<'a>(quarantined: &'a Quarantined, target: &Target) -> Option<&'a Quarantine> {
    let wanted = equivalents(target);
    quarantined.0.iter().find(|q| wanted.contains(&q.target))
}

/// What a new quarantine `entry` does to each pool (records by pool id), with every entry in
/// force (`all`, including `entry`): pools whose desired AMI (or pin) it covers roll back, drop
/// the pin, or halt when there is nothing to go back to. Pools it does not touch are left out.
pub fn effects(
    records: &BTreeMap<String, Option<PoolRecord>>,
    entry: &Quarantine,
    all: &Quarantined,
) -> Vec<Value> {
    let only = Quarantined(vec![entry.clone()]);
    let mut out = Vec::new();
    for (pool, record) in records {
        let Some(record) = record else { continue };
        if record.rollback(&only).is_none() {
            continue;
        }
        let desired = record.effective_desired().map(str::to_string);
        let release = record.desired.as_ref().map(promotion::release_of);
        let effect = match record.rollback(all) {
            Some(Rollback::To { target, .. }) => json!({
                "then": "rollBack",
                "to": target.id,
                "toRelease": promotion::release_of(&target),
                "detail": format!(
                    "the next rotator pass sets the desired AMI (and what the group launches) back to {}, cancels rotations towards {} in flight, and replaces its nodes within the pool's Drifted budgets",
                    target.id,
                    desired.as_deref().unwrap_or("it")
                ),
            }),
            Some(Rollback::Unpin { reason }) => json!({
                "then": "unpin",
                "detail": format!("{reason}: the next rotator pass drops the pin; the desired AMI its terms resolve to applies again"),
            }),
            Some(Rollback::Nowhere { reason }) => json!({
                "then": "halt",
                "detail": format!("{reason}; the next rotator pass halts the pool"),
            }),
            None => continue,
        };
        let mut v = json!({"pool": pool, "desired": desired, "release": release});
        if let (Some(o), Some(e)) = (v.as_object_mut(), effect.as_object()) {
            o.extend(e.clone());
        }
        out.push(v);
    }
    out
}

/// Pools whose promotion history records a rollback away from what `target` names.
fn rolled_back_from(
    records: &BTreeMap<String, Option<PoolRecord>>,
    target: &Target,
) -> Vec<String> {
    records
        .iter()
        .filter_map(|(pool, r)| r.as_ref().map(|r| (pool, r)))
        .filter(|(_, r)| {
            r.releases.iter().any(|e| {
                let ReleaseHow::RolledBack { from_release, .. } = &e.how else {
                    return false;
                };
                equivalents(target).iter().any(|t| match t {
                    Target::Release(rel) => rel == from_release,
                    Target::Ami(id) => r
                        .history
                        .iter()
                        .any(|h| h.ami.id == *id && promotion::release_of(&h.ami) == *from_release),
                })
            })
        })
        .map(|(pool, _)| pool.clone())
        .collect()
}

/// `quarantine` / `unquarantine` for one operator request: the deployment-wide quarantine of
/// a release or image, and the pools it moves.
pub(super) struct Quarantines<'a> {
    /// The state table (the quarantine, the pools' records).
    pub state: &'a Repository,
    /// Records a quarantine with its events.
    pub announce: &'a Announcer,
    /// The pools' policies by pool id (the pools a change moves).
    pub policies: &'a BTreeMap<String, Policy>,
    /// The operator's request (caller and request id, recorded on the entry and in the answer).
    pub origin: &'a Origin,
    /// When the request is served.
    pub now: DateTime<Utc>,
}

impl Quarantines<'_> {
    /// The quarantine as the table has it now; a failed read is an internal error that says so.
    async fn current(&self) -> Result<Quarantined, HandlerError> {
        self.state
            .quarantine()
            .await
            .map_err(|e| internal(format!("cannot read the quarantine: {e}")))
    }

    /// Quarantines `target` for `reason` (once: an entry in force, or one another request put
    /// meanwhile, is kept and answered with `changed: false`).
    pub(super) async fn quarantine(
        &self,
        target: &Target,
        reason: &str,
    ) -> Result<Value, HandlerError> {
        let (policies, origin, now) = (self.policies, self.origin, self.now);
        let mut all = self.current().await?;
        let (entry, changed) = match in_force(&all, target).cloned() {
            Some(existing) => (existing, false),
            None => {
                let q = Quarantine {
                    target: target.clone(),
                    reason: reason.to_string(),
                    by: origin
                        .caller
                        .clone()
                        .unwrap_or_else(|| "unknown".to_string()),
                    at: now,
                    cause: Cause::Operator {
                        request_id: origin.request_id.clone(),
                    },
                    outbox: Vec::new(),
                };
                if (self.announce.put_quarantine(&q).await).map_err(internal)? {
                    all.0.push(q.clone());
                    (q, true)
                } else {
                    // Another request quarantined it meanwhile: its entry stays.
                    all = self.current().await?;
                    let first = in_force(&all, target).cloned().ok_or_else(|| {
                        internal(format!(
                            "{target} was quarantined and lifted while this request ran; repeat it"
                        ))
                    })?;
                    (first, false)
                }
            }
        };
        let records = super::records(self.state, policies).await?;
        let affected = effects(&records, &entry, &all);
        let next = if affected.is_empty() {
            format!("no pool desires {target} now; no pool will take it while it is quarantined")
        } else {
            format!(
                "{} pool(s) desire {target} now and change on the next rotator pass (see affected); no pool will take it while it is quarantined",
                affected.len()
            )
        };
        if changed {
            tracing::warn!(target = %target, request_id = %origin.request_id, affected = affected.len(), decision = "quarantined", reason = %reason, "quarantined by an operator");
        }
        Ok(json!({
            "action": "quarantine",
            "requestId": origin.request_id,
            "changed": changed,
            "quarantine": entry,
            "affected": affected,
            "next": next,
        }))
    }

    /// Lifts every entry naming `target` (or what it is the same as: an image and its
    /// release); `changed: false` when none was in force.
    pub(super) async fn unquarantine(
        &self,
        target: &Target,
        reason: &str,
    ) -> Result<Value, HandlerError> {
        let origin = self.origin;
        let all = self.current().await?;
        let by = super::operator(origin, reason, self.now);
        let mut lifted = Vec::new();
        for t in equivalents(target) {
            let entry = all.0.iter().find(|q| q.target == t).cloned();
            if self
                .state
                .lift_quarantine(&t, &by)
                .await
                .map_err(internal)?
            {
                lifted.extend(entry);
            }
        }
        let records = super::records(self.state, self.policies).await?;
        let back = rolled_back_from(&records, target);
        let changed = !lifted.is_empty();
        let next = if changed {
            "pools whose terms select it, or whose upstream proves it, may take it again from the next ami-watcher pass".to_string()
        } else {
            format!("{target} is not quarantined; nothing to do")
        };
        if changed {
            tracing::warn!(target = %target, request_id = %origin.request_id, decision = "unquarantined", reason = %reason, "quarantine lifted by an operator");
        }
        Ok(json!({
            "action": "unquarantine",
            "requestId": origin.request_id,
            "changed": changed,
            "lifted": lifted,
            "rolledBackFrom": back,
            "next": next,
        }))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::ami::Architecture;
    use crate::ami::resolve::Ami;
    use crate::ami::select::Provenance;

    fn t(min: i64) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-12-01T00:00:00Z")
            .map(|d| d.with_timezone(&Utc))
            .unwrap_or_default()
            + chrono::TimeDelta::minutes(min)
    }

    /// An AL2023 image from the `al2023@latest` alias, release `version`.
    pub(crate) fn ami(id: &str, version: &str) -> Ami {
        Ami {
            id: id.into(),
            name: format!("amazon-eks-node-al2023-x86_64-standard-1.30-{version}"),
            architecture: Architecture::X86_64,
            variant: None,
            creation_date: "2024-11-09T00:00:00.000Z".into(),
            deprecated: false,
            source: Provenance {
                term: 0,
                field: "alias".into(),
                value: "al2023@latest".into(),
                parameter: None,
            },
        }
    }

    fn record(pool: &str, desired: Ami, previous: Option<Ami>) -> PoolRecord {
        PoolRecord {
            pool: pool.into(),
            desired: Some(desired),
            previous_desired: previous,
            ..PoolRecord::default()
        }
    }

    fn entry(target: Target) -> Quarantine {
        Quarantine {
            target,
            reason: "bad".into(),
            by: "alice".into(),
            at: t(0),
            cause: Cause::Operator {
                request_id: "r1".into(),
            },
            outbox: Vec::new(),
        }
    }

    #[test]
    fn a_release_quarantine_rolls_back_the_pools_that_desire_it() {
        let old = ami("ami-00000001", "v20241101");
        let bad = ami("ami-00000002", "v20241109");
        let records: BTreeMap<String, Option<PoolRecord>> = [
            (
                "prod/a",
                Some(record("prod/a", bad.clone(), Some(old.clone()))),
            ),
            ("prod/b", Some(record("prod/b", old.clone(), None))),
            ("test/a", Some(record("test/a", bad.clone(), None))),
            ("new/a", None),
        ]
        .into_iter()
        .map(|(p, r)| (p.to_string(), r))
        .collect();
        let q = entry(Target::Release(Release("v20241109".into())));
        let all = Quarantined(vec![q.clone()]);
        let got = effects(&records, &q, &all);
        let summary: Vec<(&str, &str, Option<&str>)> = got
            .iter()
            .map(|v| {
                (
                    v["pool"].as_str().unwrap_or_default(),
                    v["then"].as_str().unwrap_or_default(),
                    v["to"].as_str(),
                )
            })
            .collect();
        assert_eq!(
            summary,
            vec![
                ("prod/a", "rollBack", Some("ami-00000001")),
                ("test/a", "halt", None)
            ]
        );
        // The previous AMI quarantined as well: nowhere to go.
        let both = Quarantined(vec![q.clone(), entry(Target::Ami("ami-00000001".into()))]);
        let got = effects(&records, &q, &both);
        assert_eq!(got[0]["then"], "halt", "{got:?}");
    }

    #[test]
    fn a_pinned_pool_is_affected_only_when_its_pin_is_quarantined() {
        let old = ami("ami-00000001", "v20241101");
        let bad = ami("ami-00000002", "v20241109");
        let mut pinned = record("prod/a", bad.clone(), Some(old.clone()));
        pinned.pin = Some(crate::state::Pin {
            ami: old.id.clone(),
            name: None,
            by: crate::state::OperatorAction {
                reason: "hold".into(),
                at: t(0),
                by: None,
            },
        });
        let records: BTreeMap<String, Option<PoolRecord>> =
            [("prod/a".to_string(), Some(pinned))].into_iter().collect();
        let q = entry(Target::Release(Release("v20241109".into())));
        assert!(effects(&records, &q, &Quarantined(vec![q.clone()])).is_empty());
        let q = entry(Target::Ami(old.id.clone()));
        let got = effects(&records, &q, &Quarantined(vec![q.clone()]));
        assert_eq!(got[0]["then"], "unpin", "{got:?}");
    }

    #[test]
    fn an_image_and_the_release_that_is_that_image_are_one_target() {
        let all = Quarantined(vec![entry(Target::Release(Release("ami-00000002".into())))]);
        assert!(in_force(&all, &Target::Ami("ami-00000002".into())).is_some());
        assert!(in_force(&all, &Target::Ami("ami-00000003".into())).is_none());
        let all = Quarantined(vec![entry(Target::Ami("ami-00000002".into()))]);
        assert!(in_force(&all, &Target::Release(Release("ami-00000002".into()))).is_some());
        assert!(in_force(&all, &Target::Release(Release("v20241109".into()))).is_none());
    }
}
