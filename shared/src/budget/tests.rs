//! Budget engine tests: the `cron` crate behaviours the front end corrects, cron semantics,
//! windows in time zones, evaluation, validation messages, properties.

use std::str::FromStr;

use chrono::{DateTime, Datelike, NaiveDateTime, TimeDelta, TimeZone, Timelike, Utc, Weekday};
use chrono_tz::Tz;
use proptest::prelude::*;

use super::schedule::Schedule;
use super::*;
use crate::problem::{Problems, Severity};

const PATH: &str = "disruption.budgets";

fn at(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

fn naive(s: &str) -> NaiveDateTime {
    NaiveDateTime::parse_from_str(s, "%Y-%m-%d %H:%M").unwrap()
}

/// Parses a YAML `budgets` list; returns budgets and every problem.
fn parse_yaml(yaml: &str) -> (Vec<Budget>, Problems) {
    let value: serde_json::Value = serde_norway::from_str(yaml).unwrap();
    let mut problems = Problems::new();
    let budgets = parse_budgets(Some(&value), PATH, &mut problems);
    (budgets, problems)
}

/// Parses YAML that must be valid (warnings allowed).
fn valid(yaml: &str) -> Vec<Budget> {
    let (budgets, problems) = parse_yaml(yaml);
    assert!(!problems.has_errors(), "{yaml}: {problems:?}");
    budgets
}

/// One budget with a window.
fn window(schedule: &str, duration: &str, zone: &str) -> Budget {
    let yaml = format!(
        "- nodes: \"0\"\n  schedule: \"{schedule}\"\n  duration: {duration}\n  timeZone: {zone}\n"
    );
    valid(&yaml).remove(0)
}

/// The problems as `path: [warning: ]message` lines.
fn lines(problems: &Problems) -> Vec<String> {
    problems.0.iter().map(ToString::to_string).collect()
}

/// The first `n` wall-clock hits after `from`.
fn hits(expr: &str, from: &str, n: usize) -> Vec<NaiveDateTime> {
    let schedule = Schedule::parse(expr).unwrap().schedule;
    let mut t = naive(from);
    let mut out = Vec::new();
    for _ in 0..n {
        t = schedule.next_after(t).unwrap();
        out.push(t);
    }
    out
}

// ---------------------------------------------------------------------------------------------
// What the `cron` crate does on its own (the reasons for the front end). If one of these starts
// failing after a crate upgrade, revisit the translation in `schedule.rs`.

mod cron_crate {
    use super::*;

    fn next(expr: &str, after: DateTime<Tz>) -> DateTime<Tz> {
        cron::Schedule::from_str(expr)
            .unwrap()
            .after(&after)
            .next()
            .unwrap()
    }

    #[test]
    fn numbers_days_of_week_from_one_for_sunday_and_rejects_zero() {
        let monday = Utc
            .with_ymd_and_hms(2024, 1, 1, 0, 0, 0)
            .unwrap()
            .with_timezone(&Tz::UTC);
        assert_eq!(next("0 0 0 * * 1", monday).weekday(), Weekday::Sun);
        assert_eq!(next("0 0 0 * * 7", monday).weekday(), Weekday::Sat);
        assert!(cron::Schedule::from_str("0 0 0 * * 0").is_err());
    }

    #[test]
    fn requires_a_seconds_field() {
        assert!(cron::Schedule::from_str("0 9 * * 1").is_err());
    }

    #[test]
    fn ands_day_of_month_and_day_of_week() {
        // 13th AND Friday (crate 6): the next one is 2024-09-13, not the next 13th or Friday.
        let start = Utc
            .with_ymd_and_hms(2024, 1, 1, 0, 0, 0)
            .unwrap()
            .with_timezone(&Tz::UTC);
        let hit = next("0 0 0 13 * 6", start);
        assert_eq!(
            (hit.month(), hit.day(), hit.weekday()),
            (9, 13, Weekday::Fri)
        );
    }

    #[test]
    fn rejects_wrapping_ranges() {
        assert!(cron::Schedule::from_str("0 0 22-3 * * *").is_err());
    }

    #[test]
    fn skips_local_times_in_a_dst_gap() {
        // 2024-03-10 02:30 does not exist in New York; the crate jumps to the next day.
        let ny = chrono_tz::America::New_York;
        let start = ny.with_ymd_and_hms(2024, 3, 9, 12, 0, 0).unwrap();
        let hit = next("0 30 2 * * *", start);
        assert_eq!((hit.month(), hit.day(), hit.hour()), (3, 11, 2));
    }

    #[test]
    fn yields_an_ambiguous_local_time_twice() {
        let ny = chrono_tz::America::New_York;
        let start = ny.with_ymd_and_hms(2024, 11, 2, 12, 0, 0).unwrap();
        let schedule = cron::Schedule::from_str("0 30 1 * * *").unwrap();
        let got: Vec<_> = schedule
            .after(&start)
            .take(2)
            .map(|t| t.with_timezone(&Utc))
            .collect();
        assert_eq!(
            got,
            vec![at("2024-11-03T05:30:00Z"), at("2024-11-03T06:30:00Z")]
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Cron semantics of the front end (wall-clock hits).

mod cron_syntax {
    use super::*;

    /// Weekdays of the first `n` hits from Monday 2024-01-01.
    fn weekdays(expr: &str, n: usize) -> Vec<Weekday> {
        hits(expr, "2024-01-01 00:00", n)
            .iter()
            .map(|t| t.weekday())
            .collect()
    }

    #[test]
    fn day_of_week_numbers_and_names() {
        use Weekday::*;
        for expr in [
            "0 9 * * 0",
            "0 9 * * 7",
            "0 9 * * sun",
            "0 9 * * SUN",
            "0 9 * * Sun",
        ] {
            assert_eq!(weekdays(expr, 2), vec![Sun, Sun], "{expr}");
        }
        for expr in ["0 9 * * 6", "0 9 * * sat"] {
            assert_eq!(weekdays(expr, 2), vec![Sat, Sat], "{expr}");
        }
        for expr in ["0 9 * * 1-5", "0 9 * * mon-fri"] {
            assert_eq!(
                weekdays(expr, 6),
                vec![Mon, Tue, Wed, Thu, Fri, Mon],
                "{expr}"
            );
        }
        assert_eq!(weekdays("0 9 * * 5-7", 4), vec![Fri, Sat, Sun, Fri]);
        assert_eq!(weekdays("0 9 * * */2", 5), vec![Tue, Thu, Sat, Sun, Tue]);
        assert_eq!(weekdays("0 9 * * 1/2", 4), vec![Mon, Wed, Fri, Mon]);
    }

    #[test]
    fn month_names_any_case() {
        let h = hits("0 0 1 JAN,Jul * ", "2024-02-01 00:00", 2);
        assert_eq!(
            h,
            vec![naive("2024-07-01 00:00"), naive("2025-01-01 00:00")]
        );
    }

    #[test]
    fn day_of_month_or_day_of_week_when_both_restricted() {
        // Every 13th and every Friday of September 2024.
        let h = hits("0 0 13 * fri", "2024-09-01 00:00", 6);
        let days: Vec<u32> = h.iter().map(|t| t.day()).collect();
        assert_eq!(days, vec![6, 13, 20, 27, 4, 11]);
    }

    #[test]
    fn a_star_day_field_makes_it_an_and() {
        // `*` day-of-month: only Fridays. `*` day-of-week: only the 13th.
        let fridays = hits("0 0 * * fri", "2024-09-01 00:00", 2);
        assert_eq!(
            fridays,
            vec![naive("2024-09-06 00:00"), naive("2024-09-13 00:00")]
        );
        let thirteenths = hits("0 0 13 * *", "2024-09-01 00:00", 2);
        assert_eq!(
            thirteenths,
            vec![naive("2024-09-13 00:00"), naive("2024-10-13 00:00")]
        );
        // `?` is a star too.
        assert_eq!(
            hits("0 0 13 * ?", "2024-09-01 00:00", 1),
            vec![naive("2024-09-13 00:00")]
        );
    }

    #[test]
    fn a_stepped_star_is_a_restriction_like_robfig() {
        // robfig clears the star flag for `*/n` with n > 1: `*/10` days OR Mondays.
        let h = hits("0 0 */10 * mon", "2024-08-31 00:00", 5);
        let days: Vec<u32> = h.iter().map(|t| t.day()).collect();
        assert_eq!(days, vec![1, 2, 9, 11, 16]);
        // `*/1` keeps the star: only Mondays.
        let h = hits("0 0 */1 * mon", "2024-09-01 00:00", 2);
        assert_eq!(
            h,
            vec![naive("2024-09-02 00:00"), naive("2024-09-09 00:00")]
        );
    }

    #[test]
    fn macros() {
        let from = "2024-05-15 10:30";
        let cases = [
            ("@yearly", "2025-01-01 00:00"),
            ("@annually", "2025-01-01 00:00"),
            ("@monthly", "2024-06-01 00:00"),
            ("@weekly", "2024-05-19 00:00"),
            ("@daily", "2024-05-16 00:00"),
            ("@midnight", "2024-05-16 00:00"),
            ("@hourly", "2024-05-15 11:00"),
        ];
        for (expr, next) in cases {
            assert_eq!(hits(expr, from, 1), vec![naive(next)], "{expr}");
        }
    }

    #[test]
    fn steps_ranges_lists_and_single_start_steps() {
        let minutes = |expr: &str| -> Vec<u32> {
            hits(expr, "2024-01-01 00:00", 4)
                .iter()
                .map(|t| t.minute())
                .collect()
        };
        assert_eq!(minutes("*/15 * * * *"), vec![15, 30, 45, 0]);
        assert_eq!(minutes("5/20 * * * *"), vec![5, 25, 45, 5]);
        assert_eq!(minutes("10-40/15 * * * *"), vec![10, 25, 40, 10]);
        assert_eq!(minutes("1,2,58 * * * *"), vec![1, 2, 58, 1]);
    }

    #[test]
    fn wrapping_ranges() {
        let hours: Vec<u32> = hits("0 22-2 * * *", "2024-01-01 12:00", 6)
            .iter()
            .map(|t| t.hour())
            .collect();
        assert_eq!(hours, vec![22, 23, 0, 1, 2, 22]);
        let months: Vec<u32> = hits("0 0 1 nov-feb *", "2024-03-01 00:00", 5)
            .iter()
            .map(|t| t.month())
            .collect();
        assert_eq!(months, vec![11, 12, 1, 2, 11]);
        let days: Vec<u32> = hits("0 0 30-2 * *", "2024-01-15 00:00", 6)
            .iter()
            .map(|t| t.day())
            .collect();
        assert_eq!(days, vec![30, 31, 1, 2, 1, 2]);
        use Weekday::*;
        let days: Vec<Weekday> = hits("0 0 * * fri-mon", "2024-01-01 00:00", 5)
            .iter()
            .map(|t| t.weekday())
            .collect();
        assert_eq!(days, vec![Fri, Sat, Sun, Mon, Fri]);
        let days: Vec<Weekday> = hits("0 9 * * sat-sun", "2024-01-01 00:00", 3)
            .iter()
            .map(|t| t.weekday())
            .collect();
        assert_eq!(days, vec![Sat, Sun, Sat]);
    }

    #[test]
    fn no_hit_after_the_last_one_and_feb_30_never() {
        assert_eq!(
            Schedule::parse("0 0 30 2 *")
                .unwrap()
                .schedule
                .next_after(naive("2024-01-01 00:00")),
            None
        );
        let leap = hits("0 0 29 2 *", "2024-03-01 00:00", 1);
        assert_eq!(leap, vec![naive("2028-02-29 00:00")]);
    }

    #[test]
    fn portability_warnings() {
        let warnings = |expr: &str| Schedule::parse(expr).unwrap().warnings;
        assert!(warnings("0 9 * * sun-sat").is_empty());
        assert!(warnings("0 9 * * 0-6").is_empty());
        assert_eq!(
            warnings("0 9 * * sat-sun"),
            vec![
                "day-of-week range \"sat-sun\" wraps around and is read as sat,sun; this budget \
                 is not portable to Karpenter, whose cron parser rejects a range whose start is \
                 after its end (a rejected budget blocks all disruption in the pool)"
            ]
        );
        assert!(
            warnings("0 22-3 * * *")[0]
                .starts_with("hour range \"22-3\" wraps around and is read as 22,23,0,1,2,3; ")
        );
        assert!(
            warnings("0 0 1 nov-feb *")[0].starts_with(
                "month range \"nov-feb\" wraps around and is read as nov,dec,jan,feb; "
            )
        );
        assert_eq!(
            warnings("0 9 * * 7"),
            vec![
                "day-of-week 7 is read as Sunday; this budget is not portable to Karpenter, whose \
                 cron parser accepts 0-6 only (write 0 or sun)"
            ]
        );
        assert_eq!(warnings("0 9 * * fri-mon,7").len(), 2);
        // A range that starts or ends at 7 uses it too (and 7-2 is 0-2, no wrap); a 7 in any
        // other field is only a number.
        let seven = vec![
            "day-of-week 7 is read as Sunday; this budget is not portable to Karpenter, whose \
             cron parser accepts 0-6 only (write 0 or sun)"
                .to_string(),
        ];
        assert_eq!(warnings("0 9 * * 5-7"), seven);
        assert_eq!(warnings("0 9 * * 7-2"), seven);
        assert!(warnings("7 9 * * *").is_empty());
        assert!(warnings("7-9 9 * * *").is_empty());
    }

    #[test]
    fn ranges_starting_at_seven_outside_day_of_week_are_minutes_and_hours() {
        use Weekday::*;
        assert_eq!(
            hits("7-9 9 * * *", "2024-01-01 00:00", 4),
            vec![
                naive("2024-01-01 09:07"),
                naive("2024-01-01 09:08"),
                naive("2024-01-01 09:09"),
                naive("2024-01-02 09:07"),
            ]
        );
        assert_eq!(weekdays("0 9 * * 7-2", 4), vec![Mon, Tue, Sun, Mon]);
        assert_eq!(weekdays("0 9 * * 5-7", 4), vec![Fri, Sat, Sun, Fri]);
    }

    #[test]
    fn schedules_are_equal_when_written_the_same() {
        let schedule = |expr: &str| Schedule::parse(expr).unwrap().schedule;
        assert_eq!(schedule("0 9 * * 1-5"), schedule("0 9 * * 1-5"));
        assert_ne!(schedule("0 9 * * 1-5"), schedule("0 10 * * 1-5"));
    }

    #[test]
    fn rejected_expressions_with_exact_messages() {
        let five = "5 fields (minute hour day-of-month month day-of-week) or one of @yearly, \
                    @annually, @monthly, @weekly, @daily, @midnight, @hourly";
        let cases: Vec<(&str, String)> = vec![
            ("", format!("invalid schedule \"\": it is empty; expected {five}")),
            ("0 9 * *", format!("invalid schedule \"0 9 * *\": it has 4 fields; expected {five}")),
            (
                "0 0 9 * * sat",
                format!(
                    "invalid schedule \"0 0 9 * * sat\": it has 6 fields (a seconds field is not \
                     supported); expected {five}"
                ),
            ),
            (
                "0 0 9 * * sat 2025",
                format!(
                    "invalid schedule \"0 0 9 * * sat 2025\": it has 7 fields (seconds and year \
                     fields are not supported); expected {five}"
                ),
            ),
            (
                "@every 1h",
                format!("invalid schedule \"@every 1h\": @every is not supported; expected {five}"),
            ),
            (
                "@fortnightly",
                format!("invalid schedule \"@fortnightly\": unknown macro @fortnightly; expected {five}"),
            ),
            (
                "TZ=Europe/Berlin 0 9 * * *",
                "invalid schedule \"TZ=Europe/Berlin 0 9 * * *\": a time zone prefix is not \
                 supported; expected the timeZone field of the budget instead"
                    .to_string(),
            ),
            ("60 * * * *", "invalid schedule \"60 * * * *\": minute 60 is out of range; expected 0-59".into()),
            ("0 24 * * *", "invalid schedule \"0 24 * * *\": hour 24 is out of range; expected 0-23".into()),
            ("0 0 0 * *", "invalid schedule \"0 0 0 * *\": day-of-month 0 is out of range; expected 1-31".into()),
            ("0 0 32 * *", "invalid schedule \"0 0 32 * *\": day-of-month 32 is out of range; expected 1-31".into()),
            ("0 0 1 13 *", "invalid schedule \"0 0 1 13 *\": month 13 is out of range; expected 1-12 or jan-dec".into()),
            (
                "0 0 * * 8",
                "invalid schedule \"0 0 * * 8\": day-of-week 8 is out of range; expected 0-7 (0 and \
                 7 are Sunday) or sun-sat"
                    .into(),
            ),
            (
                "0 0 * * sunday",
                "invalid schedule \"0 0 * * sunday\": day-of-week \"sunday\" is not a number or \
                 name; expected 0-7 (0 and 7 are Sunday) or sun-sat"
                    .into(),
            ),
            ("0 jan * * *", "invalid schedule \"0 jan * * *\": hour \"jan\" is not a number; expected 0-23".into()),
            ("-5 * * * *", "invalid schedule \"-5 * * * *\": minute \"-5\" is not a number; expected 0-59".into()),
            (
                "*/0 * * * *",
                "invalid schedule \"*/0 * * * *\": minute step in \"*/0\" must be positive; \
                 expected a step such as \"*/15\" or \"0-30/10\""
                    .into(),
            ),
            (
                "*/x * * * *",
                "invalid schedule \"*/x * * * *\": minute step in \"*/x\" is not a number; \
                 expected a positive whole number"
                    .into(),
            ),
            (
                "1/2/3 * * * *",
                "invalid schedule \"1/2/3 * * * *\": minute item \"1/2/3\" has more than one '/'; \
                 expected at most one step"
                    .into(),
            ),
            (
                "1-2-3 * * * *",
                "invalid schedule \"1-2-3 * * * *\": minute item \"1-2-3\" has more than one '-'; \
                 expected a value or a range such as \"1-5\""
                    .into(),
            ),
            (
                "1,,2 * * * *",
                "invalid schedule \"1,,2 * * * *\": minute \"1,,2\" has an empty list item; \
                 expected values separated by single commas"
                    .into(),
            ),
            (
                "0 9 * * fri-tue/2",
                "invalid schedule \"0 9 * * fri-tue/2\": day-of-week range \"fri-tue/2\" wraps \
                 around and has a step, which is ambiguous; expected the values as a list instead"
                    .into(),
            ),
        ];
        for (expr, message) in cases {
            assert_eq!(Schedule::parse(expr).unwrap_err(), vec![message], "{expr}");
        }
    }

    #[test]
    fn every_bad_field_is_reported() {
        let errors = Schedule::parse("61 25 * * *").unwrap_err();
        assert_eq!(errors.len(), 2, "{errors:?}");
    }
}

// ---------------------------------------------------------------------------------------------
// Evaluation: the seed policy over a week, Karpenter's examples, windows, time zones.

const SEED: &str = r#"
- nodes: 15%
- nodes: "3"
- nodes: "0"
  schedule: "0 9 * * sat-sun"
  duration: 24h
- nodes: "0"
  schedule: "0 17 * * mon-fri"
  duration: 16h
  reasons: [Drifted]
"#;

mod evaluation {
    use super::*;

    /// Independent reading of the seed policy for 40 nodes: (allowed, limitedBy).
    fn seed_expected(t: DateTime<Utc>, reason: Reason) -> (u32, usize) {
        let (day, hour) = (t.weekday(), t.hour());
        use Weekday::*;
        // Saturday 09:00 until Monday 09:00: the weekend budget (two merged 24h windows).
        let weekend = matches!((day, hour), (Sat, 9..) | (Sun, _) | (Mon, 0..9));
        if weekend {
            return (0, 2);
        }
        // 17:00 on a weekday until 09:00 the next day: the evening budget, for Drifted only.
        let evening = match day {
            Mon | Tue | Wed | Thu | Fri => hour >= 17,
            _ => false,
        } || matches!((day, hour), (Tue | Wed | Thu | Fri | Sat, 0..9));
        if evening && reason == Reason::Drifted {
            return (0, 3);
        }
        (3, 1)
    }

    #[test]
    fn seed_policy_across_a_whole_week() {
        let budgets = valid(SEED);
        assert_eq!(budgets.len(), 4);
        let start = at("2024-06-03T00:00:00Z"); // a Monday
        let mut checked = 0;
        for quarter in 0..(7 * 24 * 4) {
            let t = start + TimeDelta::minutes(15 * quarter);
            for reason in Reason::ALL {
                let a = evaluate(&budgets, reason, 40, 0, t);
                let want = seed_expected(t, reason);
                assert_eq!(
                    (a.allowed, a.limited_by),
                    (want.0, Some(want.1)),
                    "{t} {reason}"
                );
                checked += 1;
            }
        }
        assert_eq!(checked, 7 * 24 * 4 * Reason::ALL.len());
    }

    #[test]
    fn seed_policy_next_change() {
        let budgets = valid(SEED);
        let cases = [
            // Monday 10:00, Drifted: the evening window opens at 17:00.
            (
                "2024-06-03T10:00:00Z",
                Reason::Drifted,
                "2024-06-03T17:00:00Z",
            ),
            // Expired ignores the evening budget: next change is Saturday 09:00.
            (
                "2024-06-03T10:00:00Z",
                Reason::Expired,
                "2024-06-08T09:00:00Z",
            ),
            // Tuesday 03:00 Drifted: the Monday-evening window closes at 09:00.
            (
                "2024-06-04T03:00:00Z",
                Reason::Drifted,
                "2024-06-04T09:00:00Z",
            ),
            // Saturday 12:00: the weekend windows merge until Monday 09:00.
            (
                "2024-06-08T12:00:00Z",
                Reason::Expired,
                "2024-06-10T09:00:00Z",
            ),
            // Friday 18:00 Drifted: the Friday evening window ends Saturday 09:00, when the
            // weekend one opens (both change at that instant).
            (
                "2024-06-07T18:00:00Z",
                Reason::Drifted,
                "2024-06-08T09:00:00Z",
            ),
        ];
        for (now, reason, next) in cases {
            let a = evaluate(&budgets, reason, 40, 0, at(now));
            assert_eq!(a.next_window_edge, Some(at(next)), "{now} {reason}");
        }
    }

    #[test]
    fn karpenter_documented_examples() {
        // 19 nodes x 20% = 3.8, rounded up to 4.
        let b = valid("- nodes: 20%");
        assert_eq!(
            evaluate(&b, Reason::Drifted, 19, 0, at("2024-01-01T00:00:00Z")).allowed,
            4
        );
        assert_eq!(Nodes::Percent(20).value(19), 4);
        assert_eq!(Nodes::Percent(5).value(10), 1);
        assert_eq!(Nodes::Percent(0).value(10), 0);
        assert_eq!(Nodes::Percent(100).value(7), 7);
        assert_eq!(Nodes::Percent(10).value(0), 0);
        // No disruption on weekdays 09:00-17:00 UTC, 10% otherwise.
        let b = valid(
            "- nodes: \"0\"\n  schedule: \"0 9 * * mon-fri\"\n  duration: 8h\n- nodes: 10%\n",
        );
        let mon_noon = evaluate(&b, Reason::Drifted, 30, 0, at("2024-06-03T12:00:00Z"));
        assert_eq!((mon_noon.allowed, mon_noon.limited_by), (0, Some(0)));
        let mon_evening = evaluate(&b, Reason::Drifted, 30, 0, at("2024-06-03T17:00:00Z"));
        assert_eq!((mon_evening.allowed, mon_evening.limited_by), (3, Some(1)));
        // Disrupting nodes count against the budget; never below zero.
        assert_eq!(
            evaluate(&b, Reason::Drifted, 30, 2, at("2024-06-03T17:00:00Z")).allowed,
            1
        );
        assert_eq!(
            evaluate(&b, Reason::Drifted, 30, 9, at("2024-06-03T17:00:00Z")).allowed,
            0
        );
    }

    #[test]
    fn default_budget_and_no_applicable_budget() {
        let mut problems = Problems::new();
        let defaults = parse_budgets(None, PATH, &mut problems);
        assert!(problems.0.is_empty());
        assert_eq!(defaults, vec![Budget::default_budget()]);
        let a = evaluate(
            &defaults,
            Reason::Drifted,
            25,
            1,
            at("2024-01-01T00:00:00Z"),
        );
        assert_eq!(
            (a.allowed, a.limited_by, a.next_window_edge),
            (2, Some(0), None)
        );
        // Budgets only for Underutilized: nothing restricts Drifted.
        let b = valid("- nodes: \"0\"\n  reasons: [Underutilized]\n");
        let a = evaluate(&b, Reason::Drifted, 25, 5, at("2024-01-01T00:00:00Z"));
        assert_eq!((a.allowed, a.limited_by), (20, None));
        // An inactive budget does not restrict either.
        let b = valid("- nodes: \"0\"\n  schedule: \"0 9 * * *\"\n  duration: 1h\n");
        let a = evaluate(&b, Reason::Drifted, 25, 30, at("2024-01-01T12:00:00Z"));
        assert_eq!((a.allowed, a.limited_by), (0, None));
        assert_eq!(a.next_window_edge, Some(at("2024-01-02T09:00:00Z")));
        // An empty list restricts nothing (with a warning, see validation tests).
        let a = evaluate(&[], Reason::Expired, 25, 0, at("2024-01-01T12:00:00Z"));
        assert_eq!(
            (a.allowed, a.limited_by, a.next_window_edge),
            (25, None, None)
        );
    }

    #[test]
    fn ties_go_to_the_lowest_index() {
        let b = valid("- nodes: \"5\"\n- nodes: \"3\"\n- nodes: 10%\n- nodes: \"3\"\n");
        let a = evaluate(&b, Reason::Drifted, 30, 0, at("2024-01-01T00:00:00Z"));
        assert_eq!((a.allowed, a.limited_by), (3, Some(1)));
    }

    #[test]
    fn serializes_exactly() {
        let b = valid(SEED);
        let a = outlook(&b, Reason::Drifted, 40, 1, at("2024-06-03T10:00:30.250Z"));
        assert_eq!(
            serde_json::to_string(&a).unwrap(),
            r#"{"reason":"Drifted","total":40,"disrupting":1,"allowed":2,"limitedBy":"disruption.budgets[1]","nextWindowEdge":"2024-06-03T17:00:00Z","nextChange":"2024-06-03T17:00:00Z"}"#
        );
        let a = outlook(&[], Reason::Empty, 3, 0, at("2024-06-03T10:00:00Z"));
        assert_eq!(
            serde_json::to_string(&a).unwrap(),
            r#"{"reason":"Empty","total":3,"disrupting":0,"allowed":3,"limitedBy":null,"nextWindowEdge":null,"nextChange":null}"#
        );
    }

    #[test]
    fn reason_names() {
        for r in Reason::ALL {
            assert_eq!(Reason::parse(&r.to_string()), Some(r));
            assert_eq!(r.to_string().parse::<Reason>(), Ok(r));
        }
        assert_eq!(Reason::parse("drifted"), None);
        assert_eq!(
            "Drift".parse::<Reason>(),
            Err(
                "unknown reason \"Drift\"; expected one of Drifted, Expired, Unhealthy, Underutilized, Empty"
                    .to_string()
            )
        );
    }
}

mod windows {
    use super::*;

    /// Asserts activity at each instant.
    fn check(budget: &Budget, cases: &[(&str, bool)]) {
        for (t, want) in cases {
            assert_eq!(is_active(budget, at(t)), *want, "{t}");
        }
    }

    #[test]
    fn window_bounds_are_half_open() {
        let b = window("0 9 * * *", "1h", "UTC");
        check(
            &b,
            &[
                ("2024-01-01T08:59:59Z", false),
                ("2024-01-01T09:00:00Z", true),
                ("2024-01-01T09:59:59Z", true),
                ("2024-01-01T09:59:59.999Z", true),
                ("2024-01-01T10:00:00Z", false),
            ],
        );
        assert_eq!(
            next_change(&b, at("2024-01-01T09:00:00Z")),
            Some(at("2024-01-01T10:00:00Z"))
        );
        assert_eq!(
            next_change(&b, at("2024-01-01T10:00:00Z")),
            Some(at("2024-01-02T09:00:00Z"))
        );
        assert_eq!(
            next_change(&b, at("2024-01-01T08:59:59Z")),
            Some(at("2024-01-01T09:00:00Z"))
        );
    }

    #[test]
    fn a_window_ends_before_a_later_hit_of_its_day_it_does_not_reach() {
        // (schedule, duration, now, the change): two hits eight hours apart (the 09:00 window
        // closes at 10:00, not 18:00); overlapping windows that merge, then a hit hours later
        // the same day (the merged window ends where the merging stops, not at the later hit's
        // end); hits every 10 minutes, each open 15 minutes (one window to 10:05).
        let cases = [
            ("0 9,17 * * *", "1h", "09:30", "10:00"),
            ("0 9,10,17 * * *", "90m", "09:10", "11:30"),
            ("0,10,50 9 * * *", "15m", "09:05", "09:25"),
            ("*/10 9 * * *", "15m", "09:05", "10:05"),
        ];
        for (schedule, duration, now, want) in cases {
            let b = window(schedule, duration, "UTC");
            assert_eq!(
                next_change(&b, at(&format!("2024-01-01T{now}:00Z"))),
                Some(at(&format!("2024-01-01T{want}:00Z"))),
                "{schedule} for {duration} at {now}"
            );
        }
        let b = window("0 9,17 * * *", "1h", "UTC");
        // The horizon is inclusive: a change exactly at it is reported.
        let w = b.window.as_ref().unwrap();
        let (now, end) = (at("2024-01-01T09:30:00Z"), at("2024-01-01T10:00:00Z"));
        assert_eq!(w.next_change(now, end), Some(end));
        assert_eq!(w.next_change(now, end - TimeDelta::seconds(1)), None);
    }

    #[test]
    fn windows_cross_midnight_month_and_year_ends() {
        let b = window("30 22 * * *", "4h", "UTC");
        check(
            &b,
            &[
                ("2024-01-31T22:29:00Z", false),
                ("2024-01-31T23:59:59Z", true),
                ("2024-02-01T02:29:59Z", true),
                ("2024-02-01T02:30:00Z", false),
            ],
        );
        let b = window("0 18 31 12 *", "12h", "UTC");
        check(
            &b,
            &[
                ("2024-12-31T17:59:59Z", false),
                ("2025-01-01T05:59:59Z", true),
                ("2025-01-01T06:00:00Z", false),
            ],
        );
        assert_eq!(
            next_change(&b, at("2025-01-01T00:00:00Z")),
            Some(at("2025-01-01T06:00:00Z"))
        );
        // Last day of February in a leap year, window into March.
        let b = window("0 20 29 2 *", "6h", "UTC");
        check(
            &b,
            &[
                ("2024-03-01T01:59:00Z", true),
                ("2024-03-01T02:00:00Z", false),
            ],
        );
        // A long window found by walking back from now - duration (hit 10 days earlier).
        let b = window("0 0 1 * *", "240h", "UTC");
        check(
            &b,
            &[
                ("2024-05-10T23:59:59Z", true),
                ("2024-05-11T00:00:00Z", false),
            ],
        );
    }

    #[test]
    fn overlapping_hits_extend_the_window() {
        // Hourly hits with a 90 minute duration: always active.
        let b = window("0 * * * *", "90m", "UTC");
        check(
            &b,
            &[
                ("2024-01-01T00:00:00Z", true),
                ("2024-01-01T00:59:59Z", true),
            ],
        );
        assert_eq!(next_change(&b, at("2024-01-01T00:30:00Z")), None);
        // Every minute, 1m windows touch: always active, and the search is cheap.
        let b = window("* * * * *", "1m", "UTC");
        assert_eq!(next_change(&b, at("2024-01-01T00:30:00Z")), None);
        // Hits at 09:00 and 10:00 with 2h windows: one merged window 09:00-12:00.
        let b = window("0 9,10 * * *", "2h", "UTC");
        check(
            &b,
            &[
                ("2024-01-01T11:59:59Z", true),
                ("2024-01-01T12:00:00Z", false),
            ],
        );
        assert_eq!(
            next_change(&b, at("2024-01-01T09:10:00Z")),
            Some(at("2024-01-01T12:00:00Z"))
        );
        // Business hours every weekday with 24h windows: merged Monday 09:00 to Saturday 09:00.
        let b = window("*/5 9-17 * * mon-fri", "24h", "UTC");
        assert_eq!(
            next_change(&b, at("2024-06-03T09:00:00Z")),
            Some(at("2024-06-08T17:55:00Z"))
        );
    }

    #[test]
    fn next_change_beyond_a_year_is_null() {
        let b = window("0 0 29 2 *", "1h", "UTC");
        assert_eq!(next_change(&b, at("2024-03-01T00:00:00Z")), None);
        assert_eq!(
            next_change(&b, at("2027-03-01T00:00:00Z")),
            Some(at("2028-02-29T00:00:00Z"))
        );
        assert_eq!(
            next_change(&Budget::default_budget(), at("2024-03-01T00:00:00Z")),
            None
        );
    }

    #[test]
    fn new_york_spring_forward() {
        // 2024-03-10: 02:00 EST jumps to 03:00 EDT (07:00Z). A 02:30 hit fires at 03:00 EDT.
        let b = window("30 2 * * *", "1h", "America/New_York");
        check(
            &b,
            &[
                ("2024-03-09T07:30:00Z", true), // 02:30 EST
                ("2024-03-10T06:59:59Z", false),
                ("2024-03-10T07:00:00Z", true), // first instant after the gap
                ("2024-03-10T07:59:59Z", true),
                ("2024-03-10T08:00:00Z", false), // duration is elapsed time
                ("2024-03-11T06:30:00Z", true),  // 02:30 EDT
            ],
        );
        assert_eq!(
            next_change(&b, at("2024-03-10T00:00:00Z")),
            Some(at("2024-03-10T07:00:00Z"))
        );
        // Several hits inside the gap fire together, once.
        let b = window("*/15 2 * * *", "10m", "America/New_York");
        check(
            &b,
            &[
                ("2024-03-10T07:09:59Z", true),
                ("2024-03-10T07:10:00Z", false),
            ],
        );
        assert_eq!(
            next_change(&b, at("2024-03-10T07:05:00Z")),
            Some(at("2024-03-10T07:10:00Z"))
        );
        // A daily midnight window of 24h across the short day overlaps the next one; the first
        // change is at the fall-back in November (see below).
        let b = window("0 0 * * *", "24h", "America/New_York");
        assert_eq!(
            next_change(&b, at("2024-03-09T12:00:00Z")),
            Some(at("2024-11-04T04:00:00Z"))
        );
    }

    #[test]
    fn new_york_fall_back() {
        // 2024-11-03: 02:00 EDT falls back to 01:00 EST (06:00Z); 01:30 happens twice.
        let b = window("30 1 * * *", "1h", "America/New_York");
        check(
            &b,
            &[
                ("2024-11-03T05:29:59Z", false),
                ("2024-11-03T05:30:00Z", true), // 01:30 EDT, first occurrence
                ("2024-11-03T06:29:59Z", true),
                ("2024-11-03T06:30:00Z", false), // 01:30 EST: does not fire again
                ("2024-11-03T07:00:00Z", false),
                ("2024-11-04T06:30:00Z", true), // 01:30 EST the next day
            ],
        );
        assert_eq!(
            next_change(&b, at("2024-11-03T06:00:00Z")),
            Some(at("2024-11-03T06:30:00Z"))
        );
        assert_eq!(
            next_change(&b, at("2024-11-03T06:30:00Z")),
            Some(at("2024-11-04T06:30:00Z"))
        );
        // A 24h window from midnight ends an hour before the next local midnight.
        let b = window("0 0 * * *", "24h", "America/New_York");
        check(
            &b,
            &[
                ("2024-11-04T03:59:59Z", true),
                ("2024-11-04T04:00:00Z", false), // 23:00 EST, 24h after 00:00 EDT
                ("2024-11-04T05:00:00Z", true),  // 00:00 EST
            ],
        );
        assert_eq!(
            next_change(&b, at("2024-11-01T12:00:00Z")),
            Some(at("2024-11-04T04:00:00Z"))
        );
        // Hourly 1h windows leave a one-hour hole: the repeated hour does not fire again.
        let b = window("0 * * * *", "1h", "America/New_York");
        check(
            &b,
            &[
                ("2024-11-03T05:59:59Z", true),
                ("2024-11-03T06:00:00Z", false),
            ],
        );
        assert_eq!(
            next_change(&b, at("2024-11-03T06:00:00Z")),
            Some(at("2024-11-03T07:00:00Z"))
        );
        assert_eq!(
            next_change(&b, at("2024-11-02T12:00:00Z")),
            Some(at("2024-11-03T06:00:00Z"))
        );
    }

    #[test]
    fn berlin_both_transitions() {
        // 2024-03-31: 02:00 CET jumps to 03:00 CEST (01:00Z).
        let b = window("30 2 * * *", "2h", "Europe/Berlin");
        check(
            &b,
            &[
                ("2024-03-30T01:30:00Z", true), // 02:30 CET
                ("2024-03-31T00:59:59Z", false),
                ("2024-03-31T01:00:00Z", true), // 03:00 CEST
                ("2024-03-31T02:59:59Z", true),
                ("2024-03-31T03:00:00Z", false),
            ],
        );
        // 2024-10-27: 03:00 CEST falls back to 02:00 CET (01:00Z); 02:30 fires at 00:30Z only.
        check(
            &b,
            &[
                ("2024-10-27T00:29:59Z", false),
                ("2024-10-27T00:30:00Z", true),
                ("2024-10-27T02:29:59Z", true),
                ("2024-10-27T02:30:00Z", false),
            ],
        );
        let weekend = window("0 9 * * sat-sun", "24h", "Europe/Berlin");
        // Saturday 2024-10-26 09:00 CEST (07:00Z) + 24h ends Sunday 07:00Z (08:00 CET); the
        // Sunday window opens at 09:00 CET (08:00Z) and ends Monday 08:00Z.
        check(
            &weekend,
            &[
                ("2024-10-26T06:59:59Z", false),
                ("2024-10-26T07:00:00Z", true),
                ("2024-10-27T06:59:59Z", true),
                ("2024-10-27T07:00:00Z", false),
                ("2024-10-27T08:00:00Z", true),
                ("2024-10-28T07:59:59Z", true),
                ("2024-10-28T08:00:00Z", false),
            ],
        );
    }

    #[test]
    fn shanghai_has_no_dst() {
        let b = window("0 9 * * *", "8h", "Asia/Shanghai");
        for day in [
            "2024-03-10",
            "2024-03-31",
            "2024-07-01",
            "2024-10-27",
            "2024-11-03",
        ] {
            check(
                &b,
                &[
                    (&format!("{day}T00:59:59Z"), false),
                    (&format!("{day}T01:00:00Z"), true),
                    (&format!("{day}T08:59:59Z"), true),
                    (&format!("{day}T09:00:00Z"), false),
                ],
            );
        }
    }

    #[test]
    fn default_zone_is_utc() {
        let b = valid("- nodes: \"0\"\n  schedule: \"0 9 * * *\"\n  duration: 1h\n").remove(0);
        assert_eq!(b.window.as_ref().unwrap().time_zone, Tz::UTC);
        check(
            &b,
            &[
                ("2024-07-01T09:30:00Z", true),
                ("2024-07-01T10:00:00Z", false),
            ],
        );
    }

    #[test]
    fn half_hour_dst_in_lord_howe() {
        // Australia/Lord_Howe moves by 30 minutes: 2024-10-06 02:00 -> 02:30 (+10:30 -> +11).
        let b = window("15 2 * * *", "1h", "Australia/Lord_Howe");
        // 02:15 does not exist; fires at 02:30 +11 = 2024-10-05T15:30Z.
        check(
            &b,
            &[
                ("2024-10-05T15:29:59Z", false),
                ("2024-10-05T15:30:00Z", true),
            ],
        );
    }

    #[test]
    fn a_hit_inside_a_gap_fires_where_the_gap_ends_whatever_its_minute() {
        // (schedule, zone, the first instant after the gap the hit falls in). Minutes off the
        // quarter hour: the gap's end is found, not the next quarter hour that exists.
        let cases = [
            // 02:07 EST does not exist (02:00 -> 03:00 EDT at 07:00Z).
            ("7 2 10 3 *", "America/New_York", "2024-03-10T07:00:00Z"),
            ("59 2 10 3 *", "America/New_York", "2024-03-10T07:00:00Z"),
            // 02:07 and 02:22 do not exist (02:00 -> 02:30 +11 at 15:30Z).
            ("7 2 6 10 *", "Australia/Lord_Howe", "2024-10-05T15:30:00Z"),
            ("22 2 6 10 *", "Australia/Lord_Howe", "2024-10-05T15:30:00Z"),
            // Samoa skipped 2011-12-30 entirely (-10 -> +14 at 10:00Z): a hit early that day
            // is a day's walk from the next local time that exists, one late that day too.
            ("7 0 30 12 *", "Pacific/Apia", "2011-12-30T10:00:00Z"),
            ("53 23 30 12 *", "Pacific/Apia", "2011-12-30T10:00:00Z"),
        ];
        for (schedule, zone, fires) in cases {
            let b = window(schedule, "1h", zone);
            let fires = at(fires);
            let before = fires - TimeDelta::seconds(1);
            let why = format!("{schedule} in {zone}");
            assert!(
                !is_active(&b, before),
                "{why}: not open before the gap ends"
            );
            assert!(is_active(&b, fires), "{why}: open where the gap ends");
            assert!(
                is_active(&b, fires + TimeDelta::minutes(59)),
                "{why}: open for the duration"
            );
            assert!(
                !is_active(&b, fires + TimeDelta::hours(1)),
                "{why}: closed after it"
            );
            assert_eq!(
                next_change(&b, fires - TimeDelta::hours(6)),
                Some(fires),
                "{why}"
            );
            assert_eq!(
                next_change(&b, fires),
                Some(fires + TimeDelta::hours(1)),
                "{why}"
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Validation: every rule, with its exact message and path.

mod validation {
    use super::*;

    const NODES: &str = "expected a whole number of nodes such as \"3\" or a percentage from 0% \
                         to 100% such as \"15%\"";
    const REASONS: &str = "Drifted, Expired, Unhealthy, Underutilized, Empty";

    fn problems_of(yaml: &str) -> Vec<String> {
        lines(&parse_yaml(yaml).1)
    }

    #[test]
    fn nodes_forms() {
        let cases = [
            ("3", Nodes::Count(3)),
            ("\"3\"", Nodes::Count(3)),
            ("\"0\"", Nodes::Count(0)),
            ("0", Nodes::Count(0)),
            ("15%", Nodes::Percent(15)),
            ("\"15%\"", Nodes::Percent(15)),
            ("\"0%\"", Nodes::Percent(0)),
            ("\"100%\"", Nodes::Percent(100)),
        ];
        for (yaml, want) in cases {
            assert_eq!(
                valid(&format!("- nodes: {yaml}")),
                vec![Budget {
                    nodes: want,
                    window: None,
                    reasons: None
                }],
                "{yaml}"
            );
        }
        // nodes defaults to 10% (Karpenter's CRD default).
        let b = valid("- reasons: [Drifted]");
        assert_eq!(b[0].nodes, Nodes::Percent(10));
    }

    #[test]
    fn nodes_errors() {
        let p = "disruption.budgets[0].nodes";
        let cases = [
            ("-1", format!("{p}: -1 is negative; {NODES}")),
            ("\"-1\"", format!("{p}: \"-1\" is negative; {NODES}")),
            ("\"-5%\"", format!("{p}: \"-5%\" is negative; {NODES}")),
            ("1.5", format!("{p}: 1.5 is not a whole number; {NODES}")),
            (
                "\"1.5\"",
                format!("{p}: \"1.5\" is not a whole number; {NODES}"),
            ),
            (
                "\"2.5%\"",
                format!("{p}: \"2.5%\" is not a whole number; {NODES}"),
            ),
            (
                "\"101%\"",
                format!("{p}: \"101%\" is more than 100%; {NODES}"),
            ),
            (
                "\"abc\"",
                format!("{p}: \"abc\" is not a number or percentage; {NODES}"),
            ),
            (
                "\"3 nodes\"",
                format!("{p}: \"3 nodes\" is not a number or percentage; {NODES}"),
            ),
            ("\"\"", format!("{p}: empty value; {NODES}")),
            // A negative fraction is negative, not only not whole; zero written as a float is not
            // negative.
            ("-1.5", format!("{p}: -1.5 is negative; {NODES}")),
            ("0.0", format!("{p}: 0.0 is not a whole number; {NODES}")),
            // Text that only looks like a signed or fractional number is no number at all.
            (
                "\"-abc\"",
                format!("{p}: \"-abc\" is not a number or percentage; {NODES}"),
            ),
            (
                "\"a.b\"",
                format!("{p}: \"a.b\" is not a number or percentage; {NODES}"),
            ),
            (
                "\".\"",
                format!("{p}: \".\" is not a number or percentage; {NODES}"),
            ),
            (
                "\"99999999999\"",
                format!("{p}: \"99999999999\" is too large; {NODES}"),
            ),
            (
                "99999999999",
                format!("{p}: 99999999999 is too large; {NODES}"),
            ),
            (
                "true",
                format!("{p}: expected a node count or percentage, got a boolean; {NODES}"),
            ),
        ];
        for (yaml, want) in cases {
            assert_eq!(
                problems_of(&format!("- nodes: {yaml}")),
                vec![want],
                "{yaml}"
            );
        }
    }

    #[test]
    fn duration_is_at_most_a_hundred_years() {
        let budget =
            |d: &str| format!("- nodes: \"0\"\n  schedule: \"0 9 * * *\"\n  duration: {d}");
        // 100 years of 366 days, in hours: the bound itself is allowed (warned: a daily
        // window that long never closes).
        let never_closes = |d: &str| {
            vec![format!(
                "disruption.budgets[0].duration: warning: duration \"{d}\" is at least the time \
                 between the hits of schedule \"0 9 * * *\", so each window opens before the last \
                 one closes, the window never closes and this budget is always active; expected a \
                 duration shorter than the time between hits, or no schedule and duration for a \
                 budget that is always active"
            )]
        };
        assert_eq!(problems_of(&budget("878400h")), never_closes("878400h"));
        assert_eq!(problems_of(&budget("8760h")), never_closes("8760h"));
        assert_eq!(
            problems_of(&budget("878401h")),
            vec![
                "disruption.budgets[0].duration: duration \"878401h\" is too long; expected at \
                 most 100 years"
                    .to_string()
            ]
        );
    }

    #[test]
    fn schedule_and_duration_rules() {
        let b = "disruption.budgets[0]";
        let cases: Vec<(&str, Vec<String>)> = vec![
            (
                "- nodes: \"0\"\n  schedule: \"0 9 * * *\"",
                vec![format!(
                    "{b}.duration: required when schedule is set; expected hours and minutes such \
                     as \"24h\", \"30m\" or \"10h5m\""
                )],
            ),
            (
                "- nodes: \"0\"\n  duration: 8h",
                vec![format!(
                    "{b}.schedule: required when duration is set; expected a 5-field cron \
                     expression such as \"0 9 * * sat-sun\""
                )],
            ),
            (
                "- nodes: \"0\"\n  schedule: \"0 9 * * *\"\n  duration: 30s",
                vec![format!(
                    "{b}.duration: invalid duration \"30s\"; expected hours and minutes such as \
                     \"24h\", \"30m\" or \"10h5m\""
                )],
            ),
            (
                "- nodes: \"0\"\n  schedule: \"0 9 * * *\"\n  duration: 0h",
                vec![format!(
                    "{b}.duration: duration \"0h\" would never let the budget be active; expected \
                     a positive duration, hours and minutes such as \"24h\", \"30m\" or \"10h5m\""
                )],
            ),
            (
                "- nodes: \"0\"\n  schedule: \"0 9 * * *\"\n  duration: 24",
                vec![format!(
                    "{b}.duration: expected hours and minutes such as \"24h\", \"30m\" or \
                     \"10h5m\", got a number"
                )],
            ),
            (
                "- nodes: \"0\"\n  schedule: 9\n  duration: 1h",
                vec![format!(
                    "{b}.schedule: expected a 5-field cron expression such as \"0 9 * * \
                     sat-sun\", got a number"
                )],
            ),
            (
                "- nodes: \"0\"\n  schedule: \"0 0 9 * * *\"\n  duration: 1h",
                vec![format!(
                    "{b}.schedule: invalid schedule \"0 0 9 * * *\": it has 6 fields (a seconds \
                     field is not supported); expected 5 fields (minute hour day-of-month month \
                     day-of-week) or one of @yearly, @annually, @monthly, @weekly, @daily, \
                     @midnight, @hourly"
                )],
            ),
            (
                "- nodes: \"0\"\n  schedule: \"0 9 * * fri-tue/2\"\n  duration: 1h",
                vec![format!(
                    "{b}.schedule: invalid schedule \"0 9 * * fri-tue/2\": day-of-week range \
                     \"fri-tue/2\" wraps around and has a step, which is ambiguous; expected the \
                     values as a list instead"
                )],
            ),
        ];
        for (yaml, want) in cases {
            assert_eq!(problems_of(yaml), want, "{yaml}");
        }
        // 10h5m and Go's trailing 0s are accepted.
        let b = valid("- nodes: \"0\"\n  schedule: \"@daily\"\n  duration: 10h5m0s").remove(0);
        assert_eq!(b.window.unwrap().duration, TimeDelta::minutes(605));
    }

    #[test]
    fn wrapping_range_is_a_warning_with_path() {
        let (budgets, problems) = parse_yaml(SEED);
        assert_eq!(budgets.len(), 4);
        assert!(!problems.has_errors());
        assert_eq!(
            lines(&problems),
            vec![
                "disruption.budgets[2].schedule: warning: day-of-week range \"sat-sun\" wraps \
                 around and is read as sat,sun; this budget is not portable to Karpenter, whose \
                 cron parser rejects a range whose start is after its end (a rejected budget \
                 blocks all disruption in the pool)"
                    .to_string()
            ]
        );
        assert_eq!(problems.0[0].severity, Severity::Warning);
    }

    #[test]
    fn time_zone_rules() {
        let z = "disruption.budgets[0].timeZone";
        let base = "- nodes: \"0\"\n  schedule: \"0 9 * * *\"\n  duration: 1h\n";
        assert_eq!(
            problems_of(&format!("{base}  timeZone: Mars/Olympus")),
            vec![format!(
                "{z}: unknown time zone \"Mars/Olympus\"; expected an IANA time zone name such as \
                 \"America/New_York\", \"Europe/Berlin\" or \"UTC\""
            )]
        );
        assert_eq!(
            problems_of(&format!("{base}  timeZone: europe/berlin")),
            vec![format!(
                "{z}: unknown time zone \"europe/berlin\" (did you mean \"Europe/Berlin\"?); \
                 expected an IANA time zone name such as \"America/New_York\", \"Europe/Berlin\" \
                 or \"UTC\""
            )]
        );
        assert_eq!(
            problems_of(&format!("{base}  timeZone: 1")),
            vec![format!(
                "{z}: expected an IANA time zone name such as \"Europe/Berlin\", got a number"
            )]
        );
        assert_eq!(
            problems_of("- nodes: \"0\"\n  timeZone: Europe/Berlin"),
            vec![format!(
                "{z}: warning: has no effect without schedule (the budget is always active)"
            )]
        );
        let b = valid(&format!("{base}  timeZone: Asia/Shanghai")).remove(0);
        assert_eq!(b.window.unwrap().time_zone, chrono_tz::Asia::Shanghai);
    }

    #[test]
    fn reasons_rules() {
        let r = "disruption.budgets[0].reasons";
        let cases = [
            (
                "[]",
                vec![format!(
                    "{r}: an empty list matches no reason; expected one or more of {REASONS}, or \
                     no reasons field to apply to every reason"
                )],
            ),
            (
                "[Drifted, Drift]",
                vec![format!(
                    "{r}[1]: unknown reason \"Drift\"; expected one of {REASONS} (did you mean Drifted?)"
                )],
            ),
            (
                "[drifted]",
                vec![format!(
                    "{r}[0]: unknown reason \"drifted\"; expected one of {REASONS} (did you mean Drifted?)"
                )],
            ),
            (
                "[Drifted, Drifted]",
                vec![format!(
                    "{r}[1]: duplicate reason \"Drifted\"; expected each reason at most once"
                )],
            ),
            (
                "[3]",
                vec![format!(
                    "{r}[0]: expected a reason name, one of {REASONS}, got a number"
                )],
            ),
            (
                "Drifted",
                vec![format!(
                    "{r}: expected a list of reasons, one or more of {REASONS}, got a string"
                )],
            ),
        ];
        for (yaml, want) in cases {
            assert_eq!(
                problems_of(&format!("- nodes: \"0\"\n  reasons: {yaml}")),
                want,
                "{yaml}"
            );
        }
        let b = valid("- nodes: \"0\"\n  reasons: [Expired, Empty]").remove(0);
        assert_eq!(b.reasons, Some(vec![Reason::Expired, Reason::Empty]));
        assert!(b.applies_to(Reason::Expired) && !b.applies_to(Reason::Drifted));
    }

    #[test]
    fn list_and_object_rules() {
        let fields = "nodes, schedule, duration, timeZone, reasons";
        assert_eq!(
            problems_of("- nodes: \"1\"\n  foo: 1\n  timezone: UTC"),
            vec![
                format!("{PATH}[0].foo: unknown field; expected one of {fields}"),
                format!(
                    "{PATH}[0].timezone: unknown field; expected one of {fields}; did you mean timeZone?"
                ),
            ]
        );
        assert_eq!(
            problems_of("nodes: 3"),
            vec![format!(
                "{PATH}: expected a list of budgets (objects with fields {fields}), got an object"
            )]
        );
        assert_eq!(
            problems_of("- \"3\""),
            vec![format!(
                "{PATH}[0]: expected a budget object with fields {fields}, got a string"
            )]
        );
        assert_eq!(
            problems_of("[]"),
            vec![format!(
                "{PATH}: warning: empty list: no budget limits disruption, so every node may be \
                 disrupted at once; omit budgets for the default nodes: 10%"
            )]
        );
        // Karpenter's limit itself is allowed.
        assert_eq!(
            problems_of(&"- nodes: \"1\"\n".repeat(50)),
            Vec::<String>::new()
        );
        let many = "- nodes: \"1\"\n".repeat(51);
        assert_eq!(
            problems_of(&many),
            vec![format!(
                "{PATH}: 51 budgets; expected at most 50 (Karpenter's limit)"
            )]
        );
        // null is the same as absent.
        let mut problems = Problems::new();
        let b = parse_budgets(Some(&serde_json::Value::Null), PATH, &mut problems);
        assert_eq!((b, problems.0.len()), (vec![Budget::default_budget()], 0));
    }

    #[test]
    fn every_problem_is_reported_in_document_order() {
        let yaml = r#"
- nodes: 150%
  schedule: "0 25 * * mon"
  duration: 8x
  reasons: []
  extra: true
- nodes: "2"
- schedule: "@daily"
- nodes: "1"
  schedule: "0 9 * * sat-sun"
  duration: 1h
  timeZone: Nowhere/City
"#;
        let (budgets, problems) = parse_yaml(yaml);
        let paths: Vec<&str> = problems.0.iter().map(|p| p.path.as_str()).collect();
        assert_eq!(
            paths,
            vec![
                "disruption.budgets[0].extra",
                "disruption.budgets[0].nodes",
                "disruption.budgets[0].schedule",
                "disruption.budgets[0].duration",
                "disruption.budgets[0].reasons",
                "disruption.budgets[2].duration",
                "disruption.budgets[3].schedule",
                "disruption.budgets[3].timeZone",
            ]
        );
        assert_eq!(problems.0[6].severity, Severity::Warning);
        // Only the valid budget survives (the result is not used when there are errors).
        assert_eq!(budgets.len(), 1);
    }
}

// ---------------------------------------------------------------------------------------------
// Properties. Schedules are built from pieces whose value sets are written out by hand here, so
// a brute-force minute scan gives an oracle independent of the front end and the crate.

mod properties {
    use super::*;
    use chrono::offset::LocalResult;

    /// (text, values, star) per field.
    type Piece = (&'static str, &'static [u32], bool);

    const MINUTES: &[Piece] = &[
        ("*", &[], true),
        ("*/15", &[0, 15, 30, 45], false),
        ("0", &[0], false),
        ("30", &[30], false),
        ("0,30", &[0, 30], false),
        ("5-10", &[5, 6, 7, 8, 9, 10], false),
        (
            "50-5",
            &[50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 0, 1, 2, 3, 4, 5],
            false,
        ),
    ];
    const HOURS: &[Piece] = &[
        ("*", &[], true),
        ("9", &[9], false),
        ("2", &[2], false),
        ("1", &[1], false),
        ("22-3", &[22, 23, 0, 1, 2, 3], false),
        ("*/6", &[0, 6, 12, 18], false),
        ("9-17", &[9, 10, 11, 12, 13, 14, 15, 16, 17], false),
    ];
    const DOMS: &[Piece] = &[
        ("*", &[], true),
        ("?", &[], true),
        ("1", &[1], false),
        ("13", &[13], false),
        ("28-3", &[28, 29, 30, 31, 1, 2, 3], false),
        ("*/10", &[1, 11, 21, 31], false),
        ("31", &[31], false),
    ];
    const MONTHS: &[Piece] = &[
        ("*", &[], true),
        ("nov-feb", &[11, 12, 1, 2], false),
        ("3", &[3], false),
        ("jan,jul", &[1, 7], false),
        ("OCT-dec", &[10, 11, 12], false),
    ];
    const DOWS: &[Piece] = &[
        ("*", &[], true),
        ("sat-sun", &[6, 0], false),
        ("mon-fri", &[1, 2, 3, 4, 5], false),
        ("0", &[0], false),
        ("7", &[0], false),
        ("fri", &[5], false),
        ("*/3", &[0, 3, 6], false),
    ];
    const ZONES: &[&str] = &[
        "UTC",
        "America/New_York",
        "Europe/Berlin",
        "Asia/Shanghai",
        "Australia/Lord_Howe",
    ];

    #[derive(Debug, Clone)]
    struct Spec {
        pieces: [Piece; 5],
        minutes: i64,
        zone: &'static str,
    }

    impl Spec {
        fn expr(&self) -> String {
            self.pieces
                .iter()
                .map(|p| p.0)
                .collect::<Vec<_>>()
                .join(" ")
        }

        fn budget(&self) -> Budget {
            window(&self.expr(), &format!("{}m", self.minutes), self.zone)
        }

        fn tz(&self) -> Tz {
            self.zone.parse().unwrap()
        }

        /// Oracle: does wall-clock minute `n` match?
        fn matches(&self, n: NaiveDateTime) -> bool {
            let has = |p: &Piece, v: u32| p.2 || p.1.contains(&v);
            let [mi, h, dom, mo, dow] = &self.pieces;
            let dom_ok = has(dom, n.day());
            let dow_ok = has(dow, n.weekday().num_days_from_sunday());
            let day_ok = if dom.2 || dow.2 {
                dom_ok && dow_ok
            } else {
                dom_ok || dow_ok
            };
            has(mi, n.minute()) && has(h, n.hour()) && has(mo, n.month()) && day_ok
        }

        /// Oracle: the instant wall-clock minute `n` fires at, by scanning minutes.
        fn fire(&self, n: NaiveDateTime) -> DateTime<Utc> {
            let tz = self.tz();
            let mut m = n;
            loop {
                match tz.from_local_datetime(&m) {
                    LocalResult::Single(x) => return x.with_timezone(&Utc),
                    LocalResult::Ambiguous(a, _) => return a.with_timezone(&Utc),
                    LocalResult::None => m += TimeDelta::minutes(1),
                }
            }
        }

        /// Oracle: active when some hit fires in (now - d, now].
        fn active(&self, now: DateTime<Utc>) -> bool {
            let tz = self.tz();
            let d = TimeDelta::minutes(self.minutes);
            let from = (now - d).with_timezone(&tz).naive_local() - TimeDelta::hours(4);
            let to = now.with_timezone(&tz).naive_local() + TimeDelta::hours(4);
            let from = from.with_second(0).unwrap();
            let mut n = from;
            while n <= to {
                if self.matches(n) {
                    let h = self.fire(n);
                    if h > now - d && h <= now {
                        return true;
                    }
                }
                n += TimeDelta::minutes(1);
            }
            false
        }
    }

    fn piece(set: &'static [Piece]) -> impl Strategy<Value = Piece> {
        proptest::sample::select(set)
    }

    fn spec() -> impl Strategy<Value = Spec> {
        (
            (
                piece(MINUTES),
                piece(HOURS),
                piece(DOMS),
                piece(MONTHS),
                piece(DOWS),
            ),
            1i64..=3000,
            proptest::sample::select(ZONES),
        )
            .prop_map(|((a, b, c, d, e), minutes, zone)| Spec {
                pieces: [a, b, c, d, e],
                minutes,
                zone,
            })
    }

    /// An instant in 2023-2027, to the second.
    fn instant() -> impl Strategy<Value = DateTime<Utc>> {
        (1_672_531_200i64..1_830_297_600).prop_map(|s| DateTime::from_timestamp(s, 0).unwrap())
    }

    /// Instants near DST transitions of the test zones, where bugs would hide.
    fn near_transition() -> impl Strategy<Value = DateTime<Utc>> {
        let anchors = [
            "2024-03-10T07:00:00Z",
            "2024-11-03T06:00:00Z",
            "2024-03-31T01:00:00Z",
            "2024-10-27T01:00:00Z",
            "2024-10-05T15:30:00Z",
            "2025-04-05T15:00:00Z",
        ];
        (
            proptest::sample::select(anchors.to_vec()),
            -3 * 86_400i64..3 * 86_400,
        )
            .prop_map(|(a, s)| at(a) + TimeDelta::seconds(s))
    }

    fn any_instant() -> impl Strategy<Value = DateTime<Utc>> {
        prop_oneof![instant(), near_transition()]
    }

    pub(super) fn budget_list() -> impl Strategy<Value = Vec<Budget>> {
        let one = (
            spec(),
            any::<bool>(),
            0u32..60,
            any::<bool>(),
            proptest::option::of(0usize..4),
        )
            .prop_map(|(spec, scheduled, n, percent, reason)| {
                let mut b = if scheduled {
                    spec.budget()
                } else {
                    Budget::default_budget()
                };
                b.nodes = if percent {
                    Nodes::Percent(n.min(100))
                } else {
                    Nodes::Count(n)
                };
                b.reasons = reason.map(|i| vec![Reason::ALL[i]]);
                b
            });
        proptest::collection::vec(one, 0..6)
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

        #[test]
        fn is_active_matches_a_minute_scan(spec in spec(), now in any_instant()) {
            let budget = spec.budget();
            prop_assert_eq!(is_active(&budget, now), spec.active(now), "{} {}m {}", spec.expr(), spec.minutes, spec.zone);
        }

        #[test]
        fn next_change_is_the_first_change(spec in spec(), now in any_instant(), probe in 0.0f64..1.0) {
            let budget = spec.budget();
            let active = is_active(&budget, now);
            match next_change(&budget, now) {
                Some(c) => {
                    prop_assert!(c > now);
                    prop_assert!(c <= now + TimeDelta::days(HORIZON_DAYS));
                    prop_assert_ne!(is_active(&budget, c), active, "at the change {}", c);
                    prop_assert_eq!(is_active(&budget, c - TimeDelta::seconds(1)), active);
                    let span = (c - now).num_seconds();
                    let mid = now + TimeDelta::seconds((span as f64 * probe) as i64);
                    prop_assert_eq!(is_active(&budget, mid), active, "before the change {}", mid);
                }
                None => {
                    for k in 0..12 {
                        let t = now + TimeDelta::days(HORIZON_DAYS) * k / 12
                            + TimeDelta::seconds((probe * 86_400.0) as i64);
                        prop_assert_eq!(is_active(&budget, t), active, "{}", t);
                    }
                }
            }
        }

        #[test]
        fn a_lone_window_is_open_exactly_for_its_duration(spec in spec(), t in any_instant()) {
            let budget = spec.budget();
            let w = budget.window.as_ref().unwrap();
            let d = w.duration;
            let far = t + TimeDelta::days(4000);
            if let Some(h) = w.first_hit_after(t, far) {
                let next = w.first_hit_after(h, far);
                if next.is_none_or(|n| n > h + d) {
                    prop_assert!(is_active(&budget, h));
                    prop_assert!(is_active(&budget, h + d - TimeDelta::seconds(1)));
                    prop_assert!(!is_active(&budget, h + d));
                }
                prop_assert!(spec.matches(h.with_timezone(&spec.tz()).naive_local()) || spec.zone != "UTC");
            }
        }

        #[test]
        fn allowed_respects_every_active_budget(
            budgets in budget_list(),
            reason in proptest::sample::select(Reason::ALL.to_vec()),
            total in 0u32..500,
            disrupting in 0u32..500,
            more in 0u32..50,
            now in any_instant(),
        ) {
            let a = evaluate(&budgets, reason, total, disrupting, now);
            let mut cap = i64::from(total);
            let mut any = false;
            for b in budgets.iter().filter(|b| b.applies_to(reason) && is_active(b, now)) {
                prop_assert!(a.allowed <= b.nodes.value(total));
                cap = if any { cap.min(i64::from(b.nodes.value(total))) } else { i64::from(b.nodes.value(total)) };
                any = true;
            }
            prop_assert_eq!(i64::from(a.allowed), (cap - i64::from(disrupting)).max(0));
            prop_assert_eq!(a.limited_by.is_some(), any);
            if let Some(i) = a.limited_by {
                prop_assert_eq!(i64::from(budgets[i].nodes.value(total)), cap);
            }
            let b = evaluate(&budgets, reason, total, disrupting + more, now);
            prop_assert!(b.allowed <= a.allowed);
        }
    }
}

/// `outlook`: `nextChange` is when `allowed` changes, skipping window edges where it stays.
mod outlooks {
    use super::*;

    #[test]
    fn next_change_skips_edges_where_allowed_stays() {
        let zero_beside_window =
            "- nodes: \"0\"\n- nodes: \"5\"\n  schedule: \"0 9 * * *\"\n  duration: 2h\n";
        /// (budgets, reason, now, allowed, next window edge, next change)
        type Case<'a> = (
            &'a str,
            Reason,
            &'a str,
            u32,
            Option<&'a str>,
            Option<&'a str>,
        );
        let cases: [Case<'_>; 6] = [
            // Tuesday 10:00: the evening window closes Drifted at 17:00, both the same.
            (
                SEED,
                Reason::Drifted,
                "2024-06-04T10:00:00Z",
                3,
                Some("2024-06-04T17:00:00Z"),
                Some("2024-06-04T17:00:00Z"),
            ),
            // Friday 18:00: the evening window ends Saturday 09:00 as the weekend one opens
            // (still 0); Monday 09:00 the weekend closes and 3 are allowed.
            (
                SEED,
                Reason::Drifted,
                "2024-06-07T18:00:00Z",
                0,
                Some("2024-06-08T09:00:00Z"),
                Some("2024-06-10T09:00:00Z"),
            ),
            // Expired ignores the evening window: the weekend is its next edge and change.
            (
                SEED,
                Reason::Expired,
                "2024-06-07T18:00:00Z",
                3,
                Some("2024-06-08T09:00:00Z"),
                Some("2024-06-08T09:00:00Z"),
            ),
            // An always-active 0 beside a window: edges every day, allowed never changes.
            (
                zero_beside_window,
                Reason::Drifted,
                "2024-06-04T10:00:00Z",
                0,
                Some("2024-06-04T11:00:00Z"),
                None,
            ),
            // No window: no edge, no change.
            (
                "- nodes: \"2\"\n",
                Reason::Drifted,
                "2024-06-04T10:00:00Z",
                2,
                None,
                None,
            ),
            // A window budget larger than the pool's cap changes nothing for a small pool.
            (
                "- nodes: \"1\"\n- nodes: \"10\"\n  schedule: \"0 9 * * *\"\n  duration: 2h\n",
                Reason::Drifted,
                "2024-06-04T08:00:00Z",
                1,
                Some("2024-06-04T09:00:00Z"),
                None,
            ),
        ];
        for (yaml, reason, now, allowed, edge, change) in cases {
            let o = outlook(&valid(yaml), reason, 40, 0, at(now));
            assert_eq!(
                (
                    o.allowance.allowed,
                    o.allowance.next_window_edge,
                    o.next_change
                ),
                (allowed, edge.map(at), change.map(at)),
                "{yaml} {reason} {now}"
            );
        }
    }

    #[test]
    fn counts_decide_whether_an_edge_changes_allowed() {
        // 2 always; 1 from 09:00 for 2h. With 2 disrupting, allowed is 0 either way.
        let b =
            valid("- nodes: \"2\"\n- nodes: \"1\"\n  schedule: \"0 9 * * *\"\n  duration: 2h\n");
        let now = at("2024-06-04T08:00:00Z");
        assert_eq!(
            outlook(&b, Reason::Drifted, 10, 0, now).next_change,
            Some(at("2024-06-04T09:00:00Z"))
        );
        assert_eq!(outlook(&b, Reason::Drifted, 10, 2, now).next_change, None);
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

        /// `nextChange` is a window edge where `allowed` differs from now's, and no edge
        /// before it changes `allowed`.
        #[test]
        fn next_change_is_the_first_edge_changing_allowed(
            budgets in properties::budget_list(),
            total in 0u32..50,
            disrupting in 0u32..5,
            start in 0i64..(366 * 86_400),
        ) {
            let now = at("2024-01-01T00:00:00Z") + TimeDelta::seconds(start);
            let o = outlook(&budgets, Reason::Drifted, total, disrupting, now);
            let mut edge = o.allowance.next_window_edge;
            for _ in 0..OUTLOOK_MAX_EDGES {
                let Some(t) = edge.filter(|t| *t <= now + TimeDelta::days(HORIZON_DAYS)) else {
                    break;
                };
                let later = evaluate(&budgets, Reason::Drifted, total, disrupting, t);
                if o.next_change == Some(t) {
                    prop_assert_ne!(later.allowed, o.allowance.allowed);
                    break;
                }
                prop_assert_eq!(later.allowed, o.allowance.allowed, "edge {} before {:?}", t, o.next_change);
                edge = later.next_window_edge;
            }
        }
    }
}

/// Valid budgets that are almost certainly wrong: warnings with the path, value and fix.
mod warnings {
    use super::*;

    fn warnings_of(yaml: &str) -> Vec<String> {
        let (_, problems) = parse_yaml(yaml);
        assert!(!problems.has_errors(), "{yaml}: {problems:?}");
        problems.warnings().map(ToString::to_string).collect()
    }

    #[test]
    fn an_always_active_zero_beside_a_window_is_warned_on_the_zero() {
        let zero = |nodes: &str, rest: &str| {
            warnings_of(&format!(
                "- nodes: \"{nodes}\"\n- nodes: \"3\"\n  schedule: \"0 22 * * *\"\n  duration: 4h\n{rest}"
            ))
        };
        let expected = "disruption.budgets[0].nodes: warning: nodes \"0\" without schedule is always \
             active and allows no Drifted or Expired or Unhealthy disruption, so the window of \
             disruption.budgets[1] can never allow more (the smallest active budget wins) and the \
             pool never rotates; expected a schedule and duration on this budget (a freeze \
             window), or paused: true to stop rotation on purpose";
        assert_eq!(zero("0", ""), vec![expected.to_string()]);
        assert!(
            zero("0%", "")[0]
                .starts_with("disruption.budgets[0].nodes: warning: nodes \"0%\" without schedule")
        );
        // Not zero, or zero in a window (a freeze), or alone (no window to be blocked): fine.
        assert!(zero("1", "").is_empty());
        assert!(warnings_of("- nodes: \"0\"\n").is_empty());
        assert!(
            warnings_of(
                "- nodes: \"0\"\n  schedule: \"0 9 * * *\"\n  duration: 8h\n- nodes: \"2\"\n"
            )
            .is_empty()
        );
        // Different reasons: the zero blocks Expired, the window is for Drifted only.
        assert!(warnings_of("- nodes: \"0\"\n  reasons: [Expired]\n- nodes: \"3\"\n  schedule: \"0 22 * * *\"\n  duration: 4h\n  reasons: [Drifted]\n").is_empty());
        // Overlapping in Drifted only: named.
        let w = warnings_of(
            "- nodes: \"0\"\n  reasons: [Drifted, Expired]\n- nodes: \"3\"\n  schedule: \"0 22 * * *\"\n  duration: 4h\n  reasons: [Drifted]\n",
        );
        assert!(w[0].contains("allows no Drifted disruption"), "{w:?}");
        // A window that itself allows 0 is no window to open.
        assert!(
            warnings_of(
                "- nodes: \"0\"\n- nodes: \"0\"\n  schedule: \"0 22 * * *\"\n  duration: 4h\n"
            )
            .is_empty()
        );
    }

    #[test]
    fn a_schedule_that_never_fires() {
        let never = "disruption.budgets[0].schedule: warning: schedule \"0 0 30 2 *\" never \
             fires (no time from 2024 to 2028 matches it, e.g. a day-of-month its months never \
             have such as 30 feb), so this budget is never active; expected a schedule that \
             matches a date that exists";
        let of = |expr: &str| {
            warnings_of(&format!(
                "- nodes: \"0\"\n  schedule: \"{expr}\"\n  duration: 1h\n"
            ))
        };
        assert_eq!(of("0 0 30 2 *"), vec![never.to_string()]);
        assert_eq!(of("0 0 31 apr,jun,sep,nov *").len(), 1);
        // Once every four years still fires; so does a 31st in a month that has one.
        assert!(of("0 0 29 2 *").is_empty());
        assert!(of("0 0 31 2,3 *").is_empty());
        // Day-of-month OR day-of-week: Mondays in February fire.
        assert!(of("0 0 30 2 mon").is_empty());
    }

    #[test]
    fn a_window_at_least_as_long_as_the_gap_never_closes() {
        let of = |expr: &str, duration: &str, zone: &str| {
            warnings_of(&format!(
                "- nodes: \"0\"\n  schedule: \"{expr}\"\n  duration: {duration}\n  timeZone: {zone}\n"
            ))
        };
        assert_eq!(
            of("0 9 * * *", "48h", "UTC"),
            vec![
                "disruption.budgets[0].duration: warning: duration \"48h\" is at least the time \
                 between the hits of schedule \"0 9 * * *\", so each window opens before the last \
                 one closes, the window never closes and this budget is always active; expected a \
                 duration shorter than the time between hits, or no schedule and duration for a \
                 budget that is always active"
                    .to_string()
            ]
        );
        // (schedule, duration, zone, never closes)
        let cases = [
            ("0 9 * * *", "24h", "UTC", true),
            ("0 9 * * *", "23h59m", "UTC", false),
            ("@hourly", "1h", "UTC", true),
            ("@hourly", "59m", "UTC", false),
            // Weekdays: the weekend gap is 72h.
            ("0 9 * * mon-fri", "48h", "UTC", false),
            ("0 9 * * mon-fri", "72h", "UTC", true),
            // 24h daily in a zone with DST: the 25h day of the fall back leaves an hour closed.
            ("0 9 * * *", "24h", "Europe/Berlin", false),
            ("0 9 * * *", "25h", "Europe/Berlin", true),
            ("0 0 1 1 *", "8784h", "UTC", true),
            ("0 0 1 1 *", "8000h", "UTC", false),
        ];
        for (expr, duration, zone, warned) in cases {
            let w = of(expr, duration, zone);
            assert_eq!(
                w.iter().any(|l| l.contains("never closes")),
                warned,
                "{expr} {duration} {zone}: {w:?}"
            );
        }
    }

    #[test]
    fn every_minute_of_a_fixed_hour() {
        let warnings = |expr: &str| Schedule::parse(expr).unwrap().warnings;
        assert_eq!(
            warnings("* 9 * * mon-fri"),
            vec![
                "minute \"*\" with hour \"9\" fires at every minute of that hour, so each window \
                 opens 60 times an hour and stays open until the duration after the hour's last \
                 minute; expected a window that opens once: did you mean \"0 9 * * mon-fri\"?"
            ]
        );
        assert!(warnings("* 9,17 * * *")[0].ends_with("did you mean \"0 9,17 * * *\"?"));
        // Every minute of every hour, a fixed minute, or a minute list: no warning.
        for expr in [
            "* * * * *",
            "0 9 * * *",
            "*/15 9 * * *",
            "0-59 9 * * *",
            "30 * * * *",
        ] {
            assert!(warnings(expr).is_empty(), "{expr}");
        }
    }

    #[test]
    fn misspelt_fields_reasons_and_zones_get_a_suggestion() {
        let (_, problems) = parse_yaml(
            "- node: \"1\"\n  reasons: [Drifed]\n  timeZone: Europe/Berlln\n  schedule: \"0 9 * * *\"\n  duration: 1h\n",
        );
        assert_eq!(
            lines(&problems),
            vec![
                "disruption.budgets[0].node: unknown field; expected one of nodes, schedule, duration, timeZone, reasons; did you mean nodes?",
                "disruption.budgets[0].timeZone: unknown time zone \"Europe/Berlln\" (did you mean \"Europe/Berlin\"?); expected an IANA time zone name such as \"America/New_York\", \"Europe/Berlin\" or \"UTC\"",
                "disruption.budgets[0].reasons[0]: unknown reason \"Drifed\"; expected one of Drifted, Expired, Unhealthy, Underutilized, Empty (did you mean Drifted?)",
            ]
        );
        // Too far from every name: no guess.
        let (_, problems) =
            parse_yaml("- timeZone: Mars/Olympus\n  schedule: \"0 9 * * *\"\n  duration: 1h\n");
        assert!(
            !lines(&problems)[0].contains("did you mean"),
            "{problems:?}"
        );
    }
}

mod spans {
    use super::*;

    #[test]
    fn open_spans_follow_the_window_edges() {
        // Always 2, but 0 from 09:00 for 9 hours (UTC): open 18:00 -> 09:00 the next day.
        let budgets =
            valid("- nodes: \"2\"\n- nodes: \"0\"\n  schedule: \"0 9 * * *\"\n  duration: 9h\n");
        let from = at("2026-12-05T08:30:00Z");
        let spans = open_spans(
            &budgets,
            Reason::Drifted,
            10,
            from,
            from + TimeDelta::days(2),
        );
        assert_eq!(
            spans,
            vec![
                Span {
                    start: from,
                    end: Some(at("2026-12-05T09:00:00Z"))
                },
                Span {
                    start: at("2026-12-05T18:00:00Z"),
                    end: Some(at("2026-12-06T09:00:00Z"))
                },
                Span {
                    start: at("2026-12-06T18:00:00Z"),
                    end: Some(at("2026-12-07T09:00:00Z")), // followed past the period
                },
            ]
        );
        assert_eq!(spans[1].length(), Some(TimeDelta::hours(15)));
        // Inside the freeze: the first span opens at 18:00.
        let spans = open_spans(
            &budgets,
            Reason::Drifted,
            10,
            at("2026-12-05T12:00:00Z"),
            at("2026-12-05T20:00:00Z"),
        );
        assert_eq!(
            spans,
            vec![Span {
                start: at("2026-12-05T18:00:00Z"),
                end: Some(at("2026-12-06T09:00:00Z"))
            }]
        );
        // Without windows: one span, open throughout; a "0" budget: none.
        assert_eq!(
            open_spans(
                &valid("- nodes: \"1\"\n"),
                Reason::Drifted,
                3,
                from,
                from + TimeDelta::days(1)
            ),
            vec![Span {
                start: from,
                end: None
            }]
        );
        assert!(
            open_spans(
                &valid("- nodes: \"0\"\n"),
                Reason::Drifted,
                3,
                from,
                from + TimeDelta::days(1)
            )
            .is_empty()
        );
    }
}

/// Karpenter's consolidation reasons paste unchanged and are said to limit nothing here.
#[test]
fn reasons_nodecycle_never_applies_are_accepted_with_a_warning() {
    let parse = |yaml: &str| {
        let v: serde_json::Value = serde_norway::from_str(yaml).unwrap();
        let mut problems = crate::problem::Problems::new();
        let budgets = super::parse_budgets(Some(&v), "disruption.budgets", &mut problems);
        (budgets, problems)
    };
    let (budgets, problems) = parse("- nodes: \"0\"\n  reasons: [Underutilized]\n");
    assert!(!problems.has_errors(), "{problems:?}");
    assert_eq!(budgets.len(), 1);
    let warnings: Vec<String> = problems.warnings().map(ToString::to_string).collect();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0].starts_with("disruption.budgets[0].reasons: warning: nodecycle never disrupts nodes for Underutilized"), "{}", warnings[0]);
    assert!(
        warnings[0].contains("limits nothing here"),
        "{}",
        warnings[0]
    );
    let (_, problems) = parse("- nodes: \"1\"\n  reasons: [Drifted, Empty]\n");
    let warnings: Vec<String> = problems.warnings().map(ToString::to_string).collect();
    assert!(
        warnings[0].contains("limits only its Drifted, Expired and Unhealthy disruptions"),
        "{warnings:?}"
    );
    let (_, problems) = parse("- nodes: \"1\"\n  reasons: [Drifted, Expired]\n");
    assert_eq!(problems.warnings().count(), 0);
}
