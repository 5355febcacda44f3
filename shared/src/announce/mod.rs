//! Announcing recorded transitions on the bus: the writes that stage a transition's event in
//! the record they change ([`crate::bus`] decides which), the put that follows a won write, and
//! the sweep that puts what a crashed or refused writer left behind. Which transition puts
//! which event is decided here, in [`stage`] (pure); the records only carry the outbox.
//!
//! Contract: an event is staged only by the writer whose conditional write recorded the
//! transition, so a retried or concurrent pass that finds the transition already recorded
//! stages nothing. The writer puts what it staged at once and removes what the bus accepted
//! from the record's outbox; anything left there is put by a later [`Announcer::sweep_pool`]
//! once [`bus::SETTLE`] old (the same `eventId`), or dropped with an error log once
//! [`bus::MAX_AGE`] old.

pub mod stage;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use chrono::{DateTime, Utc};

use crate::bus::{self, BusEvent, EventSink};
use crate::port::PortError;
use crate::rotation::Rotation;
use crate::state::{PoolRecord, Repository, Store, Versioned};

/// The state table and the bus, for handlers that record transitions.
#[derive(Clone)]
pub struct Announcer {
    state: Repository,
    sink: Arc<dyn EventSink>,
}

/// What a sweep did (counts, for the pass report).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Swept {
    /// Events put that their writer had left behind.
    pub put: usize,
    /// Events dropped unput (older than [`bus::MAX_AGE`]).
    pub dropped: usize,
}

/// Rotation records whose staged events wait for [`Announcer::flush`] at the end of a
/// cluster's pass, so that the pass puts its events 10 a call and clears the outboxes in one
/// transaction. Until then the events are in the records' outboxes: a pass that dies first
/// leaves them to a later sweep (at least once, the same `eventId`).
#[derive(Debug, Default)]
pub struct Deferred(std::sync::Mutex<Vec<(Versioned<Rotation>, Vec<BusEvent>)>>);

impl Deferred {
    /// `written` (as stored) with the events its write staged.
    pub fn push(&self, written: Versioned<Rotation>, staged: Vec<BusEvent>) {
        if staged.is_empty() {
            return;
        }
        if let Ok(mut d) = self.0.lock() {
            d.push((written, staged));
        }
    }

    /// Events waiting.
    pub fn len(&self) -> usize {
        self.0
            .lock()
            .map(|d| d.iter().map(|(_, e)| e.len()).sum())
            .unwrap_or(0)
    }

    /// Nothing waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn take(&self) -> Vec<(Versioned<Rotation>, Vec<BusEvent>)> {
        self.0
            .lock()
            .map(|mut d| std::mem::take(&mut *d))
            .unwrap_or_default()
    }
}

impl Announcer {
    /// Puts the events `deferred` holds ([`bus::PUT_LIMIT`] a call) and removes what the bus
    /// accepted from their records' outboxes, conditional on the versions the writes left
    /// (one transaction for up to 100 records; one at a time if it loses). A record another
    /// writer changed since keeps its entries: the sweep puts them again, same `eventId`.
    pub async fn flush(&self, deferred: &Deferred) -> usize {
        let waiting = deferred.take();
        let events: Vec<BusEvent> = waiting.iter().flat_map(|(_, e)| e.clone()).collect();
        if events.is_empty() {
            return 0;
        }
        let accepted = self.put(&events).await;
        let clears: Vec<(Rotation, u64, Option<DateTime<Utc>>)> = waiting
            .into_iter()
            .filter(|(_, staged)| staged.iter().any(|e| accepted.iter().any(|a| a == e.id())))
            .map(|(written, _)| {
                let next = Rotation {
                    outbox: bus::without(&written.value.outbox, &accepted),
                    ..written.value
                };
                let ttl = crate::rotation::retention(&next);
                (next, written.version, ttl)
            })
            .collect();
        self.state.replace_rotations(&clears).await;
        accepted.len()
    }

    /// Announces through `sink`, recording in `store`.
    pub fn new(store: Arc<dyn Store>, sink: Arc<dyn EventSink>) -> Announcer {
        Announcer {
            state: Repository::new(store),
            sink,
        }
    }

    /// The state table.
    pub fn state(&self) -> &Repository {
        &self.state
    }

    /// [`Repository::update_pool`] with the write's events staged ([`stage::stage_pool`]),
    /// then puts what this write staged and removes it from the record's outbox. Returns the record before and after the
    /// change (the outbox as written).
    pub async fn update_pool(
        &self,
        pool: &str,
        now: DateTime<Utc>,
        change: impl Fn(&PoolRecord) -> PoolRecord + Send + Sync,
    ) -> Result<(PoolRecord, PoolRecord), PortError> {
        let (before, after) = self
            .state
            .update_pool(pool, change, |b, a| stage::stage_pool(b, a, now))
            .await?;
        let staged: Vec<BusEvent> = bus::staged(&before.outbox, &after.outbox)
            .into_iter()
            .cloned()
            .collect();
        if !staged.is_empty() {
            self.deliver_pool(pool, &staged, now).await;
        }
        Ok((before, after))
    }

    /// Writes rotation `next` over `before` (read at version `expected`; `None`: the record
    /// must not exist) with its transition's event staged, then puts that event and removes it
    /// from the outbox. `Ok(None)` when another writer won the write. The returned record is
    /// as stored (its latest version).
    pub async fn put_rotation(
        &self,
        before: Option<&Rotation>,
        next: Rotation,
        expected: Option<u64>,
        ttl: Option<DateTime<Utc>>,
    ) -> Result<Option<Versioned<Rotation>>, PortError> {
        let next = stage::stage_rotation(before, next);
        let staged: Vec<BusEvent> = bus::staged(
            before.map(|b| b.outbox.as_slice()).unwrap_or_default(),
            &next.outbox,
        )
        .into_iter()
        .cloned()
        .collect();
        let Some(version) = self.state.put_rotation(&next, expected, ttl).await? else {
            return Ok(None);
        };
        let written = Versioned {
            value: next,
            version,
        };
        if staged.is_empty() {
            return Ok(Some(written));
        }
        Ok(Some(self.deliver_rotation(written, &staged, ttl).await))
    }

    /// [`Announcer::put_rotation`] expiring as the rotation's step says
    /// ([`crate::rotation::retention`]: a finished one after its retention, never in flight).
    pub async fn record_rotation(
        &self,
        before: Option<&Rotation>,
        next: Rotation,
        expected: Option<u64>,
    ) -> Result<Option<Versioned<Rotation>>, PortError> {
        let ttl = crate::rotation::retention(&next);
        self.put_rotation(before, next, expected, ttl).await
    }

    /// [`Repository::put_quarantine`] with its *AMI Quarantined* event (and, for health
    /// evidence, its *Release Indicted* event) staged in the record's outbox
    /// ([`stage::quarantined`], [`stage::indicted`]), then puts them. `Ok(false)` when the target was
    /// already quarantined (nothing staged).
    pub async fn put_quarantine(
        &self,
        q: &crate::promotion::Quarantine,
    ) -> Result<bool, PortError> {
        let events: Vec<BusEvent> = std::iter::once(stage::quarantined(q))
            .chain(stage::indicted(q))
            .collect();
        let staged = crate::promotion::Quarantine {
            outbox: events.clone(),
            ..q.clone()
        };
        if !self.state.put_quarantine(&staged).await? {
            return Ok(false);
        }
        let accepted = self.put(&events).await;
        // Nothing accepted: nothing to remove (the sweep puts it).
        if let Err(e) = self
            .state
            .remove_quarantine_events(&q.target, &accepted)
            .await
        {
            tracing::warn!(error = %e, "quarantine event put; removing it from the outbox failed (the sweep will put it again)");
        }
        Ok(true)
    }

    /// Puts `events` now (no outbox: transitions whose record has none). Logs refusals.
    pub async fn put_now(&self, events: &[BusEvent]) {
        self.put(events).await;
    }

    /// Puts the events left in pool `pool`'s state record (`record`, as read) and rotation
    /// records (`rotations`, as read; updated in place to what is stored after the sweep) once
    /// [`bus::SETTLE`] old, removing what the bus accepted; drops (logs) those older than
    /// [`bus::MAX_AGE`].
    pub async fn sweep_pool(
        &self,
        pool: &str,
        record: Option<&PoolRecord>,
        rotations: &mut std::collections::BTreeMap<String, Versioned<Rotation>>,
        now: DateTime<Utc>,
    ) -> Swept {
        let mut swept = Swept::default();
        if let Some(r) = record
            && let Some(gone) = self.sweep_outbox(&r.outbox, now, &mut swept).await
        {
            self.remove_from_pool(pool, &gone, now).await;
        }
        for v in rotations.values_mut() {
            let Some(gone) = self.sweep_outbox(&v.value.outbox, now, &mut swept).await else {
                continue;
            };
            let next = Rotation {
                outbox: bus::without(&v.value.outbox, &gone),
                ..v.value.clone()
            };
            let ttl = crate::rotation::retention(&next);
            match self.state.put_rotation(&next, Some(v.version), ttl).await {
                Ok(Some(version)) => {
                    *v = Versioned {
                        value: next,
                        version,
                    }
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(pool, error = %e, "outbox sweep: removing put events failed (the next sweep puts them again)")
                }
            }
        }
        swept
    }

    /// Sweeps one outbox: puts the due entries, logs the expired ones; the ids to remove
    /// (`None`: nothing to do).
    async fn sweep_outbox(
        &self,
        outbox: &[BusEvent],
        now: DateTime<Utc>,
        swept: &mut Swept,
    ) -> Option<Vec<String>> {
        let s = bus::sweep(outbox, now);
        if s.due.is_empty() && s.expired.is_empty() {
            return None;
        }
        let due: Vec<BusEvent> = s.due.into_iter().cloned().collect();
        log_expired(&s.expired);
        let expired = ids(&s.expired);
        swept.dropped += expired.len();
        let mut gone = self.put(&due).await;
        swept.put += gone.len();
        gone.extend(expired);
        (!gone.is_empty()).then_some(gone)
    }

    /// Puts the leftover events of the quarantine entries in force as a pass read them
    /// (`quarantined`, no second read; see [`Announcer::sweep_pool`]). An entry lifted while
    /// its event still waited is not swept any more.
    pub async fn sweep_quarantine(
        &self,
        quarantined: &crate::promotion::Quarantined,
        now: DateTime<Utc>,
    ) -> Swept {
        let mut swept = Swept::default();
        for q in &quarantined.0 {
            let Some(gone) = self.sweep_outbox(&q.outbox, now, &mut swept).await else {
                continue;
            };
            if let Err(e) = self.state.remove_quarantine_events(&q.target, &gone).await {
                tracing::warn!(error = %e, "outbox sweep: removing put events failed (the next sweep puts them again)");
            }
        }
        swept
    }

    /// Puts `events` in batches of [`bus::PUT_LIMIT`]; returns the ids the bus accepted.
    async fn put(&self, events: &[BusEvent]) -> Vec<String> {
        let mut accepted = Vec::new();
        for batch in events.chunks(bus::PUT_LIMIT) {
            match self.sink.put(batch).await {
                Ok(refused) => {
                    for r in &refused {
                        tracing::warn!(event_id = %r.event_id, error = %r.error, "event refused by the bus; kept in the outbox for the next sweep");
                    }
                    for e in batch {
                        if !refused.iter().any(|r| r.event_id == e.id()) {
                            tracing::info!(event_id = %e.id(), detail_type = e.kind.detail_type(), pool = %e.detail.pool, "event put on the bus");
                            accepted.push(e.id().to_string());
                        }
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, events = batch.len(), "PutEvents failed; events kept in the outbox for the next sweep (check events:PutEvents on the default bus)");
                }
            }
        }
        accepted
    }

    async fn deliver_pool(&self, pool: &str, staged: &[BusEvent], now: DateTime<Utc>) {
        let accepted = self.put(staged).await;
        if !accepted.is_empty() {
            self.remove_from_pool(pool, &accepted, now).await;
        }
    }

    /// Removes the events `ids` (put on the bus) from pool `pool`'s outbox. A failed removal
    /// is logged: the next sweep puts them again, with the same ids.
    async fn remove_from_pool(&self, pool: &str, ids: &[String], now: DateTime<Utc>) {
        let result = self
            .state
            .update_pool(
                pool,
                |r| PoolRecord {
                    outbox: bus::without(&r.outbox, ids),
                    ..r.clone()
                },
                |b, a| stage::stage_pool(b, a, now),
            )
            .await;
        if let Err(e) = result {
            tracing::warn!(pool, error = %e, "events put; removing them from the pool outbox failed (the next sweep puts them again)");
        }
    }

    async fn deliver_rotation(
        &self,
        mut written: Versioned<Rotation>,
        staged: &[BusEvent],
        ttl: Option<DateTime<Utc>>,
    ) -> Versioned<Rotation> {
        let accepted = self.put(staged).await;
        if accepted.is_empty() {
            return written;
        }
        let next = Rotation {
            outbox: bus::without(&written.value.outbox, &accepted),
            ..written.value.clone()
        };
        // Conditional on the version just written: a writer that moved on since keeps the
        // entries, and the sweep puts them again (same eventId).
        match self
            .state
            .put_rotation(&next, Some(written.version), ttl)
            .await
        {
            Ok(Some(version)) => {
                written = Versioned {
                    value: next,
                    version,
                }
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(error = %e, "events put; removing them from the outbox failed (the sweep will put them again)")
            }
        }
        written
    }
}

fn ids(events: &[&BusEvent]) -> Vec<String> {
    events.iter().map(|e| e.id().to_string()).collect()
}

fn log_expired(events: &[&BusEvent]) {
    for e in events {
        tracing::error!(event_id = %e.id(), detail_type = e.kind.detail_type(), pool = %e.detail.pool, "event dropped unput: the bus refused it for a day (check events:PutEvents on the default bus)");
    }
}
