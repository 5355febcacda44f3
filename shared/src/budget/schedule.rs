//! Cron front end: Kubernetes CronJob (robfig/cron `ParseStandard`) syntax on top of the `cron`
//! crate.
//!
//! The front end validates a 5-field expression (or macro), resolves names, reads `7` as Sunday,
//! expands wrapping ranges (`sat-sun`, `22-3`), and hands the `cron` crate an expression made of
//! plain numeric lists. The crate then does the calendar walking. The differences it corrects:
//!
//! * the crate wants 6 or 7 fields (seconds first, optional years): we prepend `0`;
//! * the crate numbers days of the week 1 (Sunday) to 7 (Saturday) and rejects 0; cron uses
//!   0 (Sunday) to 6, with 7 as a second Sunday: we translate;
//! * the crate ANDs day-of-month and day-of-week; cron ORs them when both are restricted (neither
//!   written with a leading `*`/`?`, robfig's rule): we then evaluate two crate schedules (one per
//!   day field) and merge their hits;
//! * the crate accepts full day names, `?` only in day fields, and rejects wrapping ranges: we
//!   accept exactly the CronJob syntax plus wrapping ranges, and only ever pass it numbers;
//! * the crate resolves local times itself and silently skips times that fall in a DST gap. We
//!   only ever ask it for wall-clock (naive) times, using `Utc` as a carrier without DST; the
//!   mapping from wall-clock to instants (gaps, repeats) is done by the caller (`window.rs`).
//!
//! The crate's calendar ends in 2100; beyond that a schedule has no more hits.

use std::fmt::Write as _;
use std::str::FromStr;

use chrono::{DateTime, NaiveDateTime, TimeZone, Utc};

/// The span a schedule must have a hit in, or it is said never to fire: [`FIRES_YEARS`] years
/// from 1 January of this year (a leap year, so 29 feb is in the span).
const FIRES_FROM: i32 = 2024;
/// How many years [`Schedule::fires`] looks at.
const FIRES_YEARS: i32 = 5;

/// Macros accepted in place of five fields, with their 5-field meaning.
const MACROS: [(&str, &str); 7] = [
    ("@yearly", "0 0 1 1 *"),
    ("@annually", "0 0 1 1 *"),
    ("@monthly", "0 0 1 * *"),
    ("@weekly", "0 0 * * 0"),
    ("@daily", "0 0 * * *"),
    ("@midnight", "0 0 * * *"),
    ("@hourly", "0 * * * *"),
];

const FIVE_FIELDS: &str = "5 fields (minute hour day-of-month month day-of-week) or one of \
     @yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly";

const MONTH_NAMES: [&str; 12] = [
    "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
];
const DAY_NAMES: [&str; 7] = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];

/// One of the five cron fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Minute,
    Hour,
    DayOfMonth,
    Month,
    DayOfWeek,
}

impl Kind {
    const ALL: [Kind; 5] = [
        Kind::Minute,
        Kind::Hour,
        Kind::DayOfMonth,
        Kind::Month,
        Kind::DayOfWeek,
    ];

    fn name(self) -> &'static str {
        match self {
            Kind::Minute => "minute",
            Kind::Hour => "hour",
            Kind::DayOfMonth => "day-of-month",
            Kind::Month => "month",
            Kind::DayOfWeek => "day-of-week",
        }
    }

    fn min(self) -> u32 {
        match self {
            Kind::DayOfMonth | Kind::Month => 1,
            _ => 0,
        }
    }

    /// Largest value `*` and `a/n` reach (day-of-week: 6; 7 is only another name for Sunday).
    fn max(self) -> u32 {
        match self {
            Kind::Minute => 59,
            Kind::Hour => 23,
            Kind::DayOfMonth => 31,
            Kind::Month => 12,
            Kind::DayOfWeek => 6,
        }
    }

    /// Largest value that may be written.
    fn max_written(self) -> u32 {
        if self == Kind::DayOfWeek {
            7
        } else {
            self.max()
        }
    }

    fn names(self) -> &'static [&'static str] {
        match self {
            Kind::Month => &MONTH_NAMES,
            Kind::DayOfWeek => &DAY_NAMES,
            _ => &[],
        }
    }

    fn expected(self) -> &'static str {
        match self {
            Kind::Minute => "0-59",
            Kind::Hour => "0-23",
            Kind::DayOfMonth => "1-31",
            Kind::Month => "1-12 or jan-dec",
            Kind::DayOfWeek => "0-7 (0 and 7 are Sunday) or sun-sat",
        }
    }

    /// How a value is shown in messages.
    fn show(self, v: u32) -> String {
        match self {
            Kind::Month => MONTH_NAMES[(v as usize).saturating_sub(1) % 12].to_string(),
            Kind::DayOfWeek => DAY_NAMES[(v % 7) as usize].to_string(),
            _ => v.to_string(),
        }
    }
}

/// Values of one field as a bit set, plus robfig's "star" flag (an item that is `*` or `?`
/// without a step above 1), which decides whether day-of-month and day-of-week are ANDed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Field {
    bits: u64,
    star: bool,
}

impl Field {
    fn values(self) -> impl Iterator<Item = u32> {
        (0..64).filter(move |v| self.bits & (1u64 << v) != 0)
    }

    fn is_full(self, kind: Kind) -> bool {
        (kind.min()..=kind.max()).all(|v| self.bits & (1u64 << v) != 0)
    }

    /// The field as the `cron` crate reads it (`*` or a numeric list; day-of-week shifted to
    /// the crate's 1 = Sunday numbering).
    fn to_crate(self, kind: Kind) -> String {
        if self.is_full(kind) {
            return "*".to_string();
        }
        let shift = u32::from(kind == Kind::DayOfWeek);
        let mut out = String::new();
        for v in self.values() {
            if !out.is_empty() {
                out.push(',');
            }
            let _ = write!(out, "{}", v + shift);
        }
        out
    }
}

/// Something about a valid expression that the user should know (not portable to Karpenter).
fn wrap_warning(kind: Kind, item: &str, start: u32, end: u32) -> String {
    let mut read = Vec::new();
    let mut v = start;
    loop {
        read.push(kind.show(v));
        if v == end {
            break;
        }
        v = if v >= kind.max() { kind.min() } else { v + 1 };
    }
    format!(
        "{} range \"{item}\" wraps around and is read as {}; this budget is not portable to \
         Karpenter, whose cron parser rejects a range whose start is after its end (a rejected \
         budget blocks all disruption in the pool)",
        kind.name(),
        read.join(",")
    )
}

/// Parses one number or name of a field.
fn value(kind: Kind, text: &str, item: &str) -> Result<u32, String> {
    let lower = text.to_ascii_lowercase();
    if let Some(i) = kind.names().iter().position(|n| *n == lower) {
        let i = i as u32;
        return Ok(if kind == Kind::Month { i + 1 } else { i });
    }
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        let what = if kind.names().is_empty() {
            "a number"
        } else {
            "a number or name"
        };
        let shown = if text.is_empty() { item } else { text };
        return Err(format!(
            "{} \"{shown}\" is not {what}; expected {}",
            kind.name(),
            kind.expected()
        ));
    }
    let v: u32 = text.parse().unwrap_or(u32::MAX);
    if v < kind.min() || v > kind.max_written() {
        return Err(format!(
            "{} {text} is out of range; expected {}",
            kind.name(),
            kind.expected()
        ));
    }
    Ok(v)
}

/// What parsing one field found besides its values.
#[derive(Default)]
struct Notes {
    warnings: Vec<String>,
    uses_seven: bool,
}

/// Parses one field (a comma-separated list of items).
fn field(kind: Kind, text: &str, notes: &mut Notes) -> Result<Field, String> {
    let mut out = Field {
        bits: 0,
        star: false,
    };
    for item in text.split(',') {
        if item.is_empty() {
            return Err(format!(
                "{} \"{text}\" has an empty list item; expected values separated by single commas",
                kind.name()
            ));
        }
        let mut parts = item.split('/');
        let range = parts.next().unwrap_or_default();
        let step = match (parts.next(), parts.next()) {
            (None, _) => None,
            (Some(s), None) => {
                if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(format!(
                        "{} step in \"{item}\" is not a number; expected a positive whole number",
                        kind.name()
                    ));
                }
                match s.parse::<u32>() {
                    Ok(0) | Err(_) => {
                        return Err(format!(
                            "{} step in \"{item}\" must be positive; expected a step such as \
                             \"*/15\" or \"0-30/10\"",
                            kind.name()
                        ));
                    }
                    Ok(n) => Some(n),
                }
            }
            (Some(_), Some(_)) => {
                return Err(format!(
                    "{} item \"{item}\" has more than one '/'; expected at most one step",
                    kind.name()
                ));
            }
        };
        let (start, end, star) = if range == "*" || range == "?" {
            (kind.min(), kind.max(), step.unwrap_or(1) == 1)
        } else {
            let bounds: Vec<&str> = range.split('-').collect();
            match bounds.as_slice() {
                [single] => {
                    let v = value(kind, single, item)?;
                    notes.uses_seven |= kind == Kind::DayOfWeek && v == 7;
                    // robfig: `a/n` means `a-max/n`.
                    (v, if step.is_some() { kind.max().max(v) } else { v }, false)
                }
                [a, b] => {
                    let mut a = value(kind, a, item)?;
                    let b = value(kind, b, item)?;
                    notes.uses_seven |= kind == Kind::DayOfWeek && (a == 7 || b == 7);
                    if kind == Kind::DayOfWeek && a == 7 {
                        a = 0;
                    }
                    (a, b, false)
                }
                _ => {
                    return Err(format!(
                        "{} item \"{item}\" has more than one '-'; expected a value or a range \
                         such as \"1-5\"",
                        kind.name()
                    ));
                }
            }
        };
        out.star |= star;
        if start > end {
            if step.is_some() {
                return Err(format!(
                    "{} range \"{item}\" wraps around and has a step, which is ambiguous; \
                     expected the values as a list instead",
                    kind.name()
                ));
            }
            notes.warnings.push(wrap_warning(kind, item, start, end));
            for v in (start..=kind.max()).chain(kind.min()..=end) {
                out.bits |= 1u64 << v;
            }
        } else {
            let step = step.unwrap_or(1) as usize;
            for v in (start..=end).step_by(step) {
                let v = if kind == Kind::DayOfWeek && v == 7 {
                    0
                } else {
                    v
                };
                out.bits |= 1u64 << v;
            }
        }
    }
    Ok(out)
}

/// A validated cron schedule (wall-clock hits; time zones are applied by the caller).
#[derive(Debug, Clone)]
pub struct Schedule {
    source: String,
    /// One crate schedule, or two whose hits are merged (day-of-month OR day-of-week).
    crons: Vec<cron::Schedule>,
    /// Largest distance in seconds between consecutive hits within one day, `None` when there
    /// is a single hit per day.
    max_gap_in_day: Option<i64>,
}

impl PartialEq for Schedule {
    fn eq(&self, other: &Self) -> bool {
        self.source == other.source
    }
}

/// A parsed schedule and the warnings about it (each a full sentence, no path).
#[derive(Debug, Clone)]
pub struct Parsed {
    /// The schedule.
    pub schedule: Schedule,
    /// Valid but not portable to Karpenter (wrapping ranges, day-of-week 7), or almost
    /// certainly wrong (minute `*` with a fixed hour, a schedule that never fires).
    pub warnings: Vec<String>,
}

impl Schedule {
    /// Parses a schedule as Kubernetes CronJob reads it (5 fields or a macro), plus wrapping
    /// ranges. On error returns every problem found, each a sentence naming what is wrong and
    /// what is expected (no field path).
    pub fn parse(expr: &str) -> Result<Parsed, Vec<String>> {
        let trimmed = expr.trim();
        let bad = |msg: String| vec![format!("invalid schedule \"{expr}\": {msg}")];
        if trimmed.is_empty() {
            return Err(bad(format!("it is empty; expected {FIVE_FIELDS}")));
        }
        if trimmed.starts_with("TZ=") || trimmed.starts_with("CRON_TZ=") {
            return Err(bad(
                "a time zone prefix is not supported; expected the timeZone field of the budget \
                 instead"
                    .to_string(),
            ));
        }
        let fields_text = if trimmed.starts_with('@') {
            if trimmed.starts_with("@every") {
                return Err(bad(format!(
                    "@every is not supported; expected {FIVE_FIELDS}"
                )));
            }
            match MACROS.iter().find(|(name, _)| *name == trimmed) {
                Some((_, five)) => *five,
                None => {
                    return Err(bad(format!(
                        "unknown macro {trimmed}; expected {FIVE_FIELDS}"
                    )));
                }
            }
        } else {
            trimmed
        };
        let texts: Vec<&str> = fields_text.split_whitespace().collect();
        if texts.len() != 5 {
            let extra = match texts.len() {
                6 => " (a seconds field is not supported)",
                7 => " (seconds and year fields are not supported)",
                _ => "",
            };
            return Err(bad(format!(
                "it has {} fields{extra}; expected {FIVE_FIELDS}",
                texts.len()
            )));
        }
        let mut notes = Notes::default();
        let mut errors = Vec::new();
        let mut fields = [Field {
            bits: 0,
            star: true,
        }; 5];
        for (i, kind) in Kind::ALL.into_iter().enumerate() {
            match field(kind, texts[i], &mut notes) {
                Ok(f) => fields[i] = f,
                Err(e) => errors.extend(bad(e)),
            }
        }
        if !errors.is_empty() {
            return Err(errors);
        }
        if notes.uses_seven {
            notes.warnings.push(
                "day-of-week 7 is read as Sunday; this budget is not portable to Karpenter, whose \
                 cron parser accepts 0-6 only (write 0 or sun)"
                    .to_string(),
            );
        }
        let [minute, hour, dom, month, dow] = fields;
        let crate_expr = |dom: String, dow: String| {
            format!(
                "0 {} {} {dom} {} {dow}",
                minute.to_crate(Kind::Minute),
                hour.to_crate(Kind::Hour),
                month.to_crate(Kind::Month)
            )
        };
        let exprs = if !dom.star && !dow.star {
            // Both restricted: a day matches when either matches.
            vec![
                crate_expr(dom.to_crate(Kind::DayOfMonth), "*".into()),
                crate_expr("*".into(), dow.to_crate(Kind::DayOfWeek)),
            ]
        } else {
            vec![crate_expr(
                dom.to_crate(Kind::DayOfMonth),
                dow.to_crate(Kind::DayOfWeek),
            )]
        };
        let mut crons = Vec::with_capacity(exprs.len());
        for e in exprs {
            match cron::Schedule::from_str(&e) {
                Ok(c) => crons.push(c),
                Err(err) => {
                    return Err(bad(format!("internal error translating to \"{e}\": {err}")));
                }
            }
        }
        let times: Vec<i64> = hour
            .values()
            .flat_map(|h| minute.values().map(move |m| i64::from(h * 3600 + m * 60)))
            .collect();
        let max_gap_in_day = times.windows(2).map(|w| w[1] - w[0]).max();
        if texts[0] == "*" && !hour.is_full(Kind::Hour) {
            let mut fixed = texts.clone();
            fixed[0] = "0";
            notes.warnings.push(format!(
                "minute \"*\" with hour \"{}\" fires at every minute of that hour, so each window \
                 opens 60 times an hour and stays open until the duration after the hour's last \
                 minute; expected a window that opens once: did you mean \"{}\"?",
                texts[1],
                fixed.join(" ")
            ));
        }
        let schedule = Schedule {
            source: expr.to_string(),
            crons,
            max_gap_in_day,
        };
        if !schedule.fires() {
            notes.warnings.push(format!(
                "schedule \"{expr}\" never fires (no time from {} to {} matches it, e.g. a \
                 day-of-month its months never have such as 30 feb), so this budget is never \
                 active; expected a schedule that matches a date that exists",
                FIRES_FROM,
                FIRES_FROM + FIRES_YEARS - 1
            ));
        }
        Ok(Parsed {
            schedule,
            warnings: notes.warnings,
        })
    }

    /// True when the schedule has a hit in the [`FIRES_YEARS`] years from 1 January of
    /// [`FIRES_FROM`] (a fixed span, so validation does not depend on the clock). Every
    /// schedule that fires at all fires within this span: its hits recur every year (a
    /// weekday in given months, a day of given months), or every leap year for 29 feb alone,
    /// and the span holds two leap days (2024, 2028).
    fn fires(&self) -> bool {
        let year = FIRES_FROM;
        let from = chrono::NaiveDate::from_ymd_opt(year, 1, 1).and_then(|d| d.and_hms_opt(0, 0, 0));
        let until = chrono::NaiveDate::from_ymd_opt(year + FIRES_YEARS, 1, 1)
            .and_then(|d| d.and_hms_opt(0, 0, 0));
        let (Some(from), Some(until)) = (from, until) else {
            return true;
        };
        self.next_after(from - chrono::TimeDelta::seconds(1))
            .is_some_and(|hit| hit < until)
    }

    /// Largest wall-clock distance (seconds) between consecutive hits within one day; `None`
    /// when a matching day has a single hit.
    pub(crate) fn max_gap_in_day(&self) -> Option<i64> {
        self.max_gap_in_day
    }

    /// The first wall-clock hit strictly after `t` (wall-clock), if any before 2101.
    pub fn next_after(&self, t: NaiveDateTime) -> Option<NaiveDateTime> {
        self.nearest(t, |hits| hits.next()).min()
    }

    /// The last wall-clock hit strictly before `t` (wall-clock), if any after 1970.
    pub fn prev_before(&self, t: NaiveDateTime) -> Option<NaiveDateTime> {
        self.nearest(t, |hits| hits.next_back()).max()
    }

    /// Each cron's hit nearest `t` on one side (wall-clock): `side` takes it from the cron's
    /// hits around `t` (`next`: the first after, `next_back`: the last before).
    fn nearest(
        &self,
        t: NaiveDateTime,
        side: fn(&mut cron::ScheduleIterator<'_, Utc>) -> Option<DateTime<Utc>>,
    ) -> impl Iterator<Item = NaiveDateTime> + '_ {
        let at = Utc.from_utc_datetime(&t);
        self.crons
            .iter()
            .filter_map(move |c| side(&mut c.after(&at)))
            .map(|d| d.naive_utc())
    }
}

impl std::fmt::Display for Schedule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.source)
    }
}
