//! When a warning's drain may stop honouring PodDisruptionBudgets, decided without I/O from the
//! event's `time`, the handling's `now` and, when the time cannot be trusted, what EC2 says of
//! the interruption.
//!
//! A Spot warning gives two minutes: PDBs are honoured until `force_after` (90 s) after the
//! warning, then what they still hold is deleted so it reschedules before the instance dies.
//! That deadline counts from the event's `time`, which only EventBridge delivery bounds: a
//! warning older than any delivery can be ([`MAX_EVENT_AGE`]) or dated in the future is a
//! replay or a direct invoke, and is not believed to come from EC2 on its own word. It is
//! drained with PDBs honoured throughout (no deadline: nothing is ever deleted) unless EC2
//! confirms the interruption (the Spot request's status `marked-for-termination`, see
//! [`spot_status_confirms`]); a confirmed one keeps the deadline a fresh warning has, counted
//! from its handling. A confirmation that cannot be read is no confirmation (fail closed).

use std::time::Duration;

use chrono::{DateTime, Utc};

/// How long EventBridge retries delivering an interruption warning: the `InterruptionWarnings`
/// rule's `RetryPolicy.MaximumEventAgeInSeconds` in template.yaml.
pub const RULE_MAX_EVENT_AGE: Duration = Duration::from_secs(120);

/// How long the function's asynchronous queue keeps an event: the interruption handler's
/// `EventInvokeConfig.MaximumEventAgeInSeconds` in template.yaml.
pub const INVOKE_MAX_EVENT_AGE: Duration = Duration::from_secs(120);

/// The oldest a warning can be when EventBridge delivers it: the rule's retries, then the
/// function's queue (`tests/tests/template.rs` checks both against template.yaml). The
/// handler's default `max_event_age` (`NODECYCLE_MAX_EVENT_AGE`).
pub const MAX_EVENT_AGE: Duration = RULE_MAX_EVENT_AGE.saturating_add(INVOKE_MAX_EVENT_AGE);

/// How far in the future a warning's time may be and still be believed: EC2's clock and the
/// function's may disagree a little.
pub const CLOCK_SKEW: Duration = Duration::from_secs(120);

/// Spot request status codes saying EC2 is interrupting the instance (the request's status
/// once the interruption notice is given: `marked-for-termination`, `marked-for-stop`, and
/// their `-by-experiment` forms under AWS FIS).
pub fn spot_status_confirms(code: &str) -> bool {
    code.starts_with("marked-for-")
}

fn chrono_of(d: Duration) -> chrono::Duration {
    chrono::Duration::from_std(d).unwrap_or(chrono::Duration::MAX)
}

/// The event's time when it is believable: within `[now - max_age, now + CLOCK_SKEW]`. Else
/// why not, in words (logged and in the outcome's reason).
pub fn trusted_time(
    time: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
    max_age: Duration,
) -> Result<DateTime<Utc>, String> {
    match time {
        None => Err("the event has no time".to_string()),
        Some(t) if t > now + chrono_of(CLOCK_SKEW) => Err(format!(
            "the event time {} is in the future",
            t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
        )),
        Some(t) if now - t > chrono_of(max_age) => Err(format!(
            "the event time {} is older than any delivery can be ({} s)",
            t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            max_age.as_secs()
        )),
        Some(t) => Ok(t),
    }
}

/// What EC2 says of the interruption, asked only when the event's time is not trusted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Confirmation {
    /// EC2 confirms it (how, in words).
    Confirmed(String),
    /// EC2 does not, or cannot be asked, or could not be read (why, in words).
    Unconfirmed(String),
}

/// The drain's deadlines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deadlines {
    /// When pods PDBs still hold are deleted; `None`: never (PDBs honoured throughout).
    pub force_at: Option<DateTime<Utc>>,
    /// When the instance is due to stop: the handler stops stepping the drain then.
    pub gone_at: DateTime<Utc>,
    /// Why the deadlines are not the event's own (`None`: they are), in words.
    pub why: Option<String>,
}

/// The deadlines of a drain whose event time is `trusted` ([`trusted_time`]) and, when it is not,
/// what EC2 said (`confirmation`; `None` when it was not asked: no confirmation).
///
/// | time | EC2 | PDBs deleted at | stepping ends at |
/// |---|---|---|---|
/// | trusted | (not asked) | time + `force_after` | time + `notice` |
/// | not trusted | confirms | now + `force_after` | now + `notice` |
/// | not trusted | does not, or unreadable | never | now + `notice` |
pub fn deadlines(
    trusted: &Result<DateTime<Utc>, String>,
    confirmation: Option<&Confirmation>,
    now: DateTime<Utc>,
    force_after: Duration,
    notice: Duration,
) -> Deadlines {
    match (trusted, confirmation) {
        (Ok(t), _) => Deadlines {
            force_at: Some(*t + chrono_of(force_after)),
            gone_at: *t + chrono_of(notice),
            why: None,
        },
        (Err(untrusted), Some(Confirmation::Confirmed(how))) => Deadlines {
            force_at: Some(now + chrono_of(force_after)),
            gone_at: now + chrono_of(notice),
            why: Some(format!(
                "{untrusted}, but {how}: deadlines count from the handling"
            )),
        },
        (Err(untrusted), unconfirmed) => {
            let not = match unconfirmed {
                Some(Confirmation::Unconfirmed(why)) => why.as_str(),
                _ => "EC2 was not asked to confirm the interruption",
            };
            Deadlines {
                force_at: None,
                gone_at: now + chrono_of(notice),
                why: Some(format!(
                    "{untrusted} and {not}: PDBs are honoured throughout, no pod is deleted"
                )),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s)
            .map(|d| d.with_timezone(&Utc))
            .unwrap_or_default()
    }

    const NOW: &str = "2026-12-01T10:00:00Z";

    #[test]
    fn the_bound_is_the_rules_retries_and_the_functions_queue() {
        assert_eq!(MAX_EVENT_AGE, Duration::from_secs(240));
    }

    #[test]
    fn a_time_is_trusted_within_the_delivery_window_and_the_clock_skew() {
        let now = t(NOW);
        type Row = (&'static str, Option<&'static str>, Result<(), &'static str>);
        let rows: Vec<Row> = vec![
            ("a minute old", Some("2026-12-01T09:59:00Z"), Ok(())),
            ("just now", Some(NOW), Ok(())),
            (
                "as old as a delivery can be",
                Some("2026-12-01T09:56:00Z"),
                Ok(()),
            ),
            (
                "a second older",
                Some("2026-12-01T09:55:59Z"),
                Err("older than any delivery can be (240 s)"),
            ),
            (
                "1970",
                Some("1970-01-01T00:00:00Z"),
                Err("1970-01-01T00:00:00Z is older than any delivery"),
            ),
            (
                "two minutes ahead (skew)",
                Some("2026-12-01T10:02:00Z"),
                Ok(()),
            ),
            (
                "a second more ahead",
                Some("2026-12-01T10:02:01Z"),
                Err("in the future"),
            ),
            (
                "next year",
                Some("2027-12-01T10:00:00Z"),
                Err("in the future"),
            ),
            ("no time", None, Err("no time")),
        ];
        for (name, time, want) in rows {
            let got = trusted_time(time.map(t), now, MAX_EVENT_AGE);
            match (got, want) {
                (Ok(got), Ok(())) => assert_eq!(Some(got), time.map(t), "{name}"),
                (Err(why), Err(w)) => assert!(why.contains(w), "{name}: {why}"),
                (got, want) => panic!("{name}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn only_a_trusted_or_confirmed_warning_ever_deletes_what_pdbs_hold() {
        let now = t(NOW);
        let (force, notice) = (Duration::from_secs(90), Duration::from_secs(120));
        let sent = t("2026-12-01T09:59:00Z");
        let old = || Err::<DateTime<Utc>, _>("the event time 1970-01-01T00:00:00Z is old".into());
        let confirmed =
            Confirmation::Confirmed("the Spot request is marked-for-termination".into());
        let unconfirmed = Confirmation::Unconfirmed("EC2 has no Spot request for it".into());
        let unreadable = Confirmation::Unconfirmed("cannot read the Spot request (denied)".into());
        type Row<'a> = (
            &'static str,
            Result<DateTime<Utc>, String>,
            Option<&'a Confirmation>,
            Option<&'static str>,
            &'static str,
            Option<&'static str>,
        );
        let rows: Vec<Row<'_>> = vec![
            (
                "trusted: from the event",
                Ok(sent),
                None,
                Some("2026-12-01T10:00:30Z"),
                "2026-12-01T10:01:00Z",
                None,
            ),
            (
                "trusted, whatever EC2 says",
                Ok(sent),
                Some(&unconfirmed),
                Some("2026-12-01T10:00:30Z"),
                "2026-12-01T10:01:00Z",
                None,
            ),
            (
                "untrusted but confirmed: from the handling",
                old(),
                Some(&confirmed),
                Some("2026-12-01T10:01:30Z"),
                "2026-12-01T10:02:00Z",
                Some("but the Spot request is marked-for-termination"),
            ),
            (
                "untrusted, not confirmed: never",
                old(),
                Some(&unconfirmed),
                None,
                "2026-12-01T10:02:00Z",
                Some("EC2 has no Spot request for it: PDBs are honoured throughout"),
            ),
            (
                "untrusted, confirmation unreadable: never (fail closed)",
                old(),
                Some(&unreadable),
                None,
                "2026-12-01T10:02:00Z",
                Some("cannot read the Spot request (denied)"),
            ),
            (
                "untrusted, not asked: never",
                old(),
                None,
                None,
                "2026-12-01T10:02:00Z",
                Some("not asked"),
            ),
        ];
        for (name, trusted, confirmation, force_at, gone_at, why) in rows {
            let d = deadlines(&trusted, confirmation, now, force, notice);
            assert_eq!(d.force_at, force_at.map(t), "{name}");
            assert_eq!(d.gone_at, t(gone_at), "{name}");
            match (&d.why, why) {
                (None, None) => {}
                (Some(got), Some(w)) => {
                    assert!(got.contains(w), "{name}: {got}");
                    assert!(got.contains("1970-01-01T00:00:00Z"), "{name}: {got}");
                }
                (got, want) => panic!("{name}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn spot_statuses_that_confirm_an_interruption() {
        for (code, confirms) in [
            ("marked-for-termination", true),
            ("marked-for-stop", true),
            ("marked-for-stop-by-experiment", true),
            ("fulfilled", false),
            ("instance-terminated-by-price", false),
            ("request-canceled-and-instance-running", false),
            ("", false),
        ] {
            assert_eq!(spot_status_confirms(code), confirms, "{code}");
        }
    }
}
