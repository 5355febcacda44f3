//! Table tests of the rotation record's own rules (retention).

use chrono::{DateTime, TimeDelta, Utc};

use super::*;

fn at(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

#[test]
fn a_finished_record_expires_a_retention_after_its_last_step_and_one_in_flight_never() {
    let started = at("2026-12-01T08:00:00Z");
    let last_step = at("2026-12-01T09:30:00Z");
    let kept = last_step + TimeDelta::days(DONE_RETENTION_DAYS);
    let cases = [
        (Step::Pending, None),
        (Step::Surging, None),
        (Step::Cordoned, None),
        (Step::Draining, None),
        (Step::Terminating, None),
        (Step::Done, Some(kept)),
        (Step::Failed, Some(kept)),
        (Step::Cancelled, Some(kept)),
    ];
    for (step, want) in cases {
        let r = Rotation {
            step,
            step_at: last_step,
            ..Rotation::new(
                "prod/general",
                "i-1",
                RotationReason::Drifted,
                false,
                started,
            )
        };
        assert_eq!(retention(&r), want, "{step:?}");
    }
    assert_eq!(kept, at("2026-12-08T09:30:00Z"));
}
