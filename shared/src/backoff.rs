//! Back-off of a pool whose passes keep failing (pure): it is left out of the passes for a
//! while, 1 minute after its first failed pass, doubling after each further one up to 10
//! minutes, shortened by up to a fifth (jitter, derived from the pool and the count so every
//! rotator computes the same) so pools that failed together do not retry together. Recorded in
//! the pool's state record ([`crate::state::PoolRecord::backoff`]) so a restart keeps it; a
//! successful pass clears it. Other pools' passes never wait for it.

use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};

/// The first wait.
pub const FIRST: std::time::Duration = std::time::Duration::from_secs(60);

/// The longest wait.
pub const MAX: std::time::Duration = std::time::Duration::from_secs(600);

/// A pool backing off.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Backoff {
    /// Failed passes in a row.
    pub failures: u32,
    /// The first of them.
    pub since: DateTime<Utc>,
    /// Left out of the passes until then.
    pub until: DateTime<Utc>,
    /// Why the last one failed.
    pub reason: String,
}

impl Backoff {
    /// It still holds the pool out at `now`.
    pub fn holds(&self, now: DateTime<Utc>) -> bool {
        now < self.until
    }
}

/// How long pool `pool` waits after its `failures`-th failed pass in a row (at least 1):
/// [`FIRST`] doubled per further failure, at most [`MAX`], less a jitter of up to a fifth.
pub fn delay(pool: &str, failures: u32) -> std::time::Duration {
    let doublings = failures.saturating_sub(1).min(16);
    let base = FIRST.saturating_mul(1u32 << doublings).min(MAX);
    // A hash of the pool and the count: the same on every rotator of a deployment (one
    // binary), different across pools.
    let h = {
        use std::hash::{Hash, Hasher};
        let mut hasher = std::hash::DefaultHasher::new();
        (pool, failures).hash(&mut hasher);
        hasher.finish()
    };
    let fifth = base / 5;
    let cut = u32::try_from(h % 1000).unwrap_or(0);
    base.saturating_sub(fifth.mul_f64(f64::from(cut) / 1000.0))
}

/// The back-off after a failed pass at `now` (`previous`: the pool's current one, if any).
pub fn after_failure(
    previous: Option<&Backoff>,
    pool: &str,
    reason: &str,
    now: DateTime<Utc>,
) -> Backoff {
    let failures = previous.map_or(1, |b| b.failures.saturating_add(1));
    let wait = Duration::from_std(delay(pool, failures)).unwrap_or(Duration::minutes(10));
    Backoff {
        failures,
        since: previous.map_or(now, |b| b.since),
        until: now + wait,
        reason: reason.chars().take(crate::bus::TEXT_LIMIT).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wait_doubles_to_ten_minutes_less_a_fifth_at_most_the_same_everywhere() {
        for pool in ["prod/general", "test/gpu", "x/y"] {
            let mut last = std::time::Duration::ZERO;
            for (n, base) in [
                (1, 60),
                (2, 120),
                (3, 240),
                (4, 480),
                (5, 600),
                (9, 600),
                (40, 600),
            ] {
                let d = delay(pool, n);
                let base = std::time::Duration::from_secs(base);
                assert!(d <= base && d >= base - base / 5, "{pool} {n}: {d:?}");
                assert_eq!(d, delay(pool, n), "deterministic");
                if n <= 4 {
                    assert!(d > last, "grows: {pool} {n}");
                }
                last = d;
            }
        }
        assert_ne!(
            delay("prod/general", 3),
            delay("test/gpu", 3),
            "jitter differs"
        );
    }

    #[test]
    fn failures_count_up_from_the_first_and_a_back_off_holds_until_its_end() {
        let t0 = DateTime::<Utc>::UNIX_EPOCH + Duration::days(20_000);
        let b1 = after_failure(None, "p/q", "DescribeAutoScalingGroups failed", t0);
        assert_eq!((b1.failures, b1.since), (1, t0));
        assert!(b1.holds(t0 + Duration::seconds(47)) && !b1.holds(t0 + Duration::seconds(60)));
        let t1 = b1.until;
        let b2 = after_failure(Some(&b1), "p/q", "again", t1);
        assert_eq!((b2.failures, b2.since), (2, t0));
        assert!(b2.until - t1 >= Duration::seconds(96));
    }
}
