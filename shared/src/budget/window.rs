//! Active windows: a schedule read in a time zone, each hit opening a window of `duration`.
//!
//! Wall-clock hits come from [`Schedule`]; this module maps them to instants:
//! a hit that does not exist locally (spring forward) fires at the first instant after the gap,
//! an ambiguous one (fall back) fires once, at its first occurrence. `duration` is elapsed time.
//! That mapping is monotone (a later wall-clock hit never maps to an earlier instant), which the
//! searches below rely on.

use chrono::offset::LocalResult;
use chrono::{DateTime, NaiveDateTime, Offset, TimeDelta, TimeZone, Utc};
use chrono_tz::Tz;

use super::schedule::Schedule;

/// Where [`Window::never_closes`] looks from: 2024-01-01T00:00:00Z.
pub const NEVER_CLOSES_FROM: DateTime<Utc> =
    DateTime::from_timestamp_nanos(1_704_067_200_000_000_000);

/// A schedule, a duration and a time zone: active for `now` in `[H, H + duration)` for a hit H.
#[derive(Debug, Clone, PartialEq)]
pub struct Window {
    /// When windows open (wall-clock in `time_zone`).
    pub schedule: Schedule,
    /// How long each window stays open (elapsed time); positive.
    pub duration: TimeDelta,
    /// Zone the schedule is read in.
    pub time_zone: Tz,
}

impl Window {
    fn local(&self, t: DateTime<Utc>) -> NaiveDateTime {
        t.with_timezone(&self.time_zone).naive_local()
    }

    fn offset_seconds(&self, t: DateTime<Utc>) -> i32 {
        self.time_zone
            .offset_from_utc_datetime(&t.naive_utc())
            .fix()
            .local_minus_utc()
    }

    /// The instant a wall-clock hit fires at.
    fn resolve(&self, n: NaiveDateTime) -> DateTime<Utc> {
        match self.time_zone.from_local_datetime(&n) {
            LocalResult::Single(x) => x.with_timezone(&Utc),
            LocalResult::Ambiguous(a, b) => a.min(b).with_timezone(&Utc),
            LocalResult::None => self.gap_end(n),
        }
    }

    /// The first instant whose local time is after `n`, for `n` inside a gap.
    fn gap_end(&self, n: NaiveDateTime) -> DateTime<Utc> {
        let step = TimeDelta::minutes(15);
        let exists = |m: NaiveDateTime| self.time_zone.from_local_datetime(&m).earliest();
        let mut before = None;
        let mut after = None;
        for k in 1..=(2 * 24 * 4) {
            if before.is_none() {
                before = exists(n - step * k);
            }
            if after.is_none() {
                after = exists(n + step * k);
            }
            if before.is_some() && after.is_some() {
                break;
            }
        }
        let (Some(lo), Some(hi)) = (before, after) else {
            // No zone has a gap this long; read the time as UTC rather than fail.
            return Utc.from_utc_datetime(&n);
        };
        // Invariant: local(lo) < n < local(hi); local time only jumps forward in between.
        let (mut lo, mut hi) = (lo.timestamp(), hi.timestamp());
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            let at = DateTime::from_timestamp(mid, 0).unwrap_or_default();
            if self.local(at) > n {
                hi = mid;
            } else {
                lo = mid;
            }
        }
        DateTime::from_timestamp(hi, 0).unwrap_or_default()
    }

    /// The first hit strictly after `t`, if it is at most `limit`.
    pub fn first_hit_after(&self, t: DateTime<Utc>, limit: DateTime<Utc>) -> Option<DateTime<Utc>> {
        // Wall-clock hits at or before local(t) fire at or before t (monotone mapping); hits
        // after it may still fire at or before t inside a repeated (fall back) hour.
        let mut n = self.local(t);
        loop {
            let m = self.schedule.next_after(n)?;
            let x = self.resolve(m);
            if x > limit {
                return None;
            }
            if x > t {
                return Some(x);
            }
            n = m;
        }
    }

    /// The last hit at or before `t`.
    pub fn last_hit_at_or_before(&self, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let n = self.local(t);
        let mut best = None;
        let mut cursor = n - TimeDelta::nanoseconds(1);
        while let Some(m) = self.schedule.next_after(cursor) {
            let x = self.resolve(m);
            if x > t {
                break;
            }
            best = Some(x);
            cursor = m;
        }
        best.or_else(|| self.schedule.prev_before(n).map(|m| self.resolve(m)))
    }

    /// True when some hit H has `H <= now < H + duration`. Walks forward from
    /// `now - duration`: the window is open exactly when the first hit after that is not after
    /// `now`.
    pub fn is_active(&self, now: DateTime<Utc>) -> bool {
        self.duration > TimeDelta::zero()
            && self.first_hit_after(now - self.duration, now).is_some()
    }

    /// The first instant after `now` and at most `horizon` at which the window opens or closes.
    /// Windows that overlap or touch merge; an open window's change is where the merged window
    /// ends.
    pub fn next_change(&self, now: DateTime<Utc>, horizon: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let d = self.duration;
        if d <= TimeDelta::zero() {
            return None;
        }
        let open_since = self.last_hit_at_or_before(now).filter(|h| *h + d > now);
        if open_since.is_none() {
            return self.first_hit_after(now, horizon);
        }
        let mut end = open_since? + d;
        loop {
            if end > horizon {
                return None;
            }
            let Some(q) = self.last_hit_at_or_before(end) else {
                return Some(end);
            };
            if q + d <= end {
                return Some(end);
            }
            end = q + d;
            // Shortcut for dense schedules: when every gap between hits of a day fits in the
            // duration, the rest of q's day extends the window to its last hit + d. Valid only
            // when no offset change happens around q's day (then elapsed = wall-clock).
            if self
                .schedule
                .max_gap_in_day()
                .is_some_and(|g| d.num_seconds() >= g)
                && let Some(x) = self.last_hit_of_day(q)
            {
                let off = self.offset_seconds(q);
                if x > q
                    && off == self.offset_seconds(q - TimeDelta::days(1))
                    && off == self.offset_seconds(x)
                {
                    end = end.max(x + d);
                }
            }
        }
    }

    /// True when the window never closes: it is open at [`NEVER_CLOSES_FROM`] and does not
    /// close in the [`super::HORIZON_DAYS`] days after (each hit comes before the window of the
    /// one before it ends: a duration at least the longest time between hits). A fixed instant
    /// keeps validation free of the clock.
    pub fn never_closes(&self) -> bool {
        let from = NEVER_CLOSES_FROM;
        self.is_active(from)
            && self
                .next_change(from, from + TimeDelta::days(super::HORIZON_DAYS))
                .is_none()
    }

    /// The last hit on the local calendar day of instant `q`.
    fn last_hit_of_day(&self, q: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let next_midnight = self.local(q).date().succ_opt()?.and_hms_opt(0, 0, 0)?;
        self.schedule
            .prev_before(next_midnight)
            .map(|m| self.resolve(m))
    }
}
