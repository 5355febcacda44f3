//! The per-cluster lease of a rotator pass: one invocation works on a cluster at a time. The
//! holder is unique per invocation (the Lambda request id, else a random id), the lease lasts no
//! longer than the invocation can (a dead invocation blocks the cluster until its own deadline
//! at most), and it is given back with retries at the end of the pass whatever happened in it.

use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};

use crate::state::Repository;

/// Attempts to give a lease back before leaving it to expire.
const RELEASE_ATTEMPTS: u32 = 4;

/// A lease this invocation holds.
pub(super) struct Held {
    name: String,
    holder: String,
}

/// This invocation's holder name: `rotator-<request id>`, or a random one.
pub(super) fn holder(request_id: Option<&str>) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    match request_id {
        Some(id) if !id.is_empty() => format!("rotator-{id}"),
        _ => {
            let n = COUNTER.fetch_add(1, Ordering::Relaxed);
            // RandomState is seeded randomly per process (and varies per instance).
            let random = RandomState::new().hash_one((std::process::id(), n));
            format!("rotator-{}-{n}-{random:016x}", std::process::id())
        }
    }
}

/// The cluster leases of a pass, over the state table: at most `length` each.
#[derive(Clone, Copy)]
pub(super) struct Leases<'a> {
    pub state: &'a Repository,
    pub length: Duration,
}

impl Leases<'_> {
    /// Takes `cluster`'s lease for `holder` until the invocation's deadline (at most the
    /// configured lease). `Err` says why the cluster is skipped this pass.
    pub(super) async fn lease(
        &self,
        cluster: &str,
        holder: &str,
        now: DateTime<Utc>,
        deadline: Instant,
    ) -> Result<Held, String> {
        let left = deadline.saturating_duration_since(Instant::now()) + Duration::from_secs(5);
        let ttl = chrono::Duration::from_std(self.length.min(left))
            .unwrap_or(chrono::Duration::minutes(5));
        let held = Held {
            name: format!("cluster/{cluster}"),
            holder: holder.to_string(),
        };
        match self.state.acquire_lease(&held.name, holder, now, ttl).await {
            Ok(Ok(())) => Ok(held),
            Ok(Err(lease)) => Err(format!(
                "lease held by {} until {}",
                lease.holder,
                lease.expires.to_rfc3339()
            )),
            Err(e) => {
                // The write may have landed with its answer lost: give it back.
                self.release(&held, now).await;
                Err(format!("cannot take the lease: {e}"))
            }
        }
    }

    /// Gives the lease back, retrying transient failures; logs when it cannot (it then expires
    /// at the invocation's deadline).
    pub(super) async fn release(&self, held: &Held, now: DateTime<Utc>) {
        let mut wait = Duration::from_millis(100);
        for attempt in 1..=RELEASE_ATTEMPTS {
            match self
                .state
                .release_lease(&held.name, &held.holder, now)
                .await
            {
                Ok(()) => return,
                Err(e) if attempt < RELEASE_ATTEMPTS => {
                    tracing::warn!(lease = %held.name, attempt, error = %e, "could not release the lease; retrying");
                    tokio::time::sleep(wait).await;
                    wait *= 2;
                }
                Err(e) => {
                    tracing::error!(lease = %held.name, error = %e, decision = "lease left to expire", "could not release the lease");
                }
            }
        }
    }
}
