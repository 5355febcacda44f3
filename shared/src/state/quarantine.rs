//! Quarantines (`QUARANTINE`) of images and releases, and their events.

use super::*;

impl Repository {
    /// Every quarantine in force (lifted entries are kept for the audit, not returned).
    pub async fn quarantine(&self) -> Result<Quarantined, PortError> {
        let items = self
            .store
            .query(keys::QUARANTINE_PK, keys::QUARANTINE_PREFIX)
            .await?;
        let mut out = Vec::new();
        for (sk, v) in items {
            if lifted(&v.value) {
                continue;
            }
            match serde_json::from_value::<Quarantine>(v.value) {
                Ok(q) => out.push(q),
                Err(e) => {
                    tracing::error!(sk = %sk, error = %e, "unreadable quarantine item ignored")
                }
            }
        }
        Ok(Quarantined(out))
    }

    /// Records quarantine `q` (with the outbox it carries) unless its target is quarantined
    /// already: `Ok(false)` then (the first entry, with its reason, stays). A lifted entry of
    /// the same target is replaced.
    pub async fn put_quarantine(&self, q: &Quarantine) -> Result<bool, PortError> {
        let doc = encode(q)?;
        self.rewrite_quarantine(&q.target, |current| {
            Ok(match current {
                None => Rewrite::Write(doc.clone(), None, true),
                Some(v) if lifted(&v.value) => Rewrite::Write(doc.clone(), Some(v.version), true),
                Some(_) => Rewrite::Keep(false),
            })
        })
        .await
    }

    /// Lifts the quarantine of `target` (kept as an audit record with who/when/why);
    /// `Ok(false)` when it was not quarantined.
    pub async fn lift_quarantine(
        &self,
        target: &Target,
        by: &OperatorAction,
    ) -> Result<bool, PortError> {
        self.rewrite_quarantine(target, |current| {
            let Some(v) = current.filter(|v| !lifted(&v.value)) else {
                return Ok(Rewrite::Keep(false));
            };
            let mut doc = v.value;
            doc["liftedAt"] = serde_json::json!(by.at);
            doc["liftedBy"] = serde_json::json!(by.by);
            doc["liftReason"] = serde_json::json!(by.reason);
            Ok(Rewrite::Write(doc, Some(v.version), true))
        })
        .await
    }

    /// Removes the events `ids` (put on the bus) from the outbox of `target`'s quarantine
    /// item, re-reading on a lost race; the item's other fields are kept as they are.
    pub async fn remove_quarantine_events(
        &self,
        target: &Target,
        ids: &[String],
    ) -> Result<(), PortError> {
        if ids.is_empty() {
            return Ok(());
        }
        self.rewrite_quarantine(target, |current| {
            let Some(v) = current else {
                return Ok(Rewrite::Keep(()));
            };
            let outbox: Vec<BusEvent> = v
                .value
                .get("outbox")
                .and_then(|o| serde_json::from_value(o.clone()).ok())
                .unwrap_or_default();
            let kept = crate::bus::without(&outbox, ids);
            if kept.len() == outbox.len() {
                return Ok(Rewrite::Keep(()));
            }
            let mut doc = v.value;
            if let Some(map) = doc.as_object_mut() {
                if kept.is_empty() {
                    map.remove("outbox");
                } else {
                    map.insert("outbox".into(), encode(&kept)?);
                }
            }
            Ok(Rewrite::Write(doc, Some(v.version), ()))
        })
        .await
    }

    /// Reads `target`'s quarantine item, lets `decide` say what to do with it (as read,
    /// `None`: absent) and writes what it says conditionally on that read, reading again on
    /// a lost race, at most [`WRITE_ATTEMPTS`] times.
    async fn rewrite_quarantine<T>(
        &self,
        target: &Target,
        decide: impl Fn(Option<Versioned<Value>>) -> Result<Rewrite<T>, PortError> + Send + Sync,
    ) -> Result<T, PortError>
    where
        T: Send,
    {
        let sk = keys::quarantine_sk(target);
        for _ in 0..WRITE_ATTEMPTS {
            let current = self.store.get(keys::QUARANTINE_PK, &sk).await?;
            let (doc, expected, then) = match decide(current)? {
                Rewrite::Keep(out) => return Ok(out),
                Rewrite::Write(doc, expected, then) => (doc, expected, then),
            };
            if won(self
                .store
                .put(keys::QUARANTINE_PK, &sk, &doc, expected, None)
                .await)?
            .is_some()
            {
                return Ok(then);
            }
        }
        Err(too_many_conflicts())
    }
}
