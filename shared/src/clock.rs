//! Time for handlers: an invocation starts at an instant it is given (the Lambda's `now`, or a
//! test's) and reads the time as that instant plus the real time elapsed since, so a pass that
//! lasts two minutes does not act on a two-minute-old `now`, and tests can still place a pass
//! anywhere in time.

use std::time::Instant;

use chrono::{DateTime, Utc};

/// `start + elapsed since the clock was made`.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    wall: DateTime<Utc>,
    started: Instant,
}

impl Clock {
    /// A clock reading `start` now.
    pub fn starting_at(start: DateTime<Utc>) -> Self {
        Clock {
            wall: start,
            started: Instant::now(),
        }
    }

    /// The instant the clock started at.
    pub fn start(&self) -> DateTime<Utc> {
        self.wall
    }

    /// The current time: the start plus the real time elapsed since.
    pub fn now(&self) -> DateTime<Utc> {
        self.wall + chrono::Duration::from_std(self.started.elapsed()).unwrap_or_default()
    }
}
