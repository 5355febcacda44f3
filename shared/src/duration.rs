//! Go-style durations as Karpenter writes them (`720h`, `10h5m`, `90s`).

use std::time::Duration;

/// Parses a sequence of `<digits><unit>` groups with units `h`, `m`, `s` (e.g. `2h`, `1h30m`,
/// `45s`, `0s`). Each unit may appear at most once and in the order h, m, s. Returns a message
/// naming the expected form on error.
pub fn parse(text: &str) -> Result<Duration, String> {
    parse_units(text, &['h', 'm', 's'])
}

/// Like [`parse`] but accepts only hours and minutes (a budget `duration`), with an optional
/// trailing `0s` as Go's `time.Duration.String()` prints it.
pub fn parse_hours_minutes(text: &str) -> Result<Duration, String> {
    let trimmed = text
        .strip_suffix("0s")
        .filter(|t| !t.is_empty())
        .unwrap_or(text);
    parse_units(trimmed, &['h', 'm']).map_err(|_| {
        format!("invalid duration {text:?}; expected hours and minutes such as \"24h\", \"30m\" or \"10h5m\"")
    })
}

fn parse_units(text: &str, units: &[char]) -> Result<Duration, String> {
    let expected = || {
        let forms = if units.contains(&'s') {
            "such as \"720h\", \"1h30m\" or \"90s\""
        } else {
            "such as \"24h\", \"30m\" or \"10h5m\""
        };
        format!("invalid duration {text:?}; expected a number followed by a unit, {forms}")
    };
    if text.is_empty() {
        return Err(expected());
    }
    let mut total: u64 = 0;
    let mut digits = String::new();
    let mut next_unit = 0usize;
    for c in text.chars() {
        if c.is_ascii_digit() {
            digits.push(c);
            continue;
        }
        let Some(pos) = units.iter().position(|u| *u == c) else {
            return Err(expected());
        };
        if digits.is_empty() || pos < next_unit {
            return Err(expected());
        }
        let n: u64 = digits.parse().map_err(|_| expected())?;
        let secs = match c {
            'h' => n.checked_mul(3600),
            'm' => n.checked_mul(60),
            _ => Some(n),
        }
        .ok_or_else(expected)?;
        total = total.checked_add(secs).ok_or_else(expected)?;
        digits.clear();
        next_unit = pos + 1;
    }
    if !digits.is_empty() {
        return Err(expected());
    }
    Ok(Duration::from_secs(total))
}

/// Serializes a duration as [`format()`] writes it (serde `serialize_with`).
pub fn serialize<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format(*d))
}

/// Formats a duration the way Go prints it (`720h0m0s` style is avoided: `720h`, `1h30m`, `45s`).
pub fn format(d: Duration) -> String {
    let secs = d.as_secs();
    let (h, m, s) = (secs / 3600, (secs % 3600) / 60, secs % 60);
    let mut out = String::new();
    if h > 0 {
        out.push_str(&format!("{h}h"));
    }
    if m > 0 {
        out.push_str(&format!("{m}m"));
    }
    if s > 0 || out.is_empty() {
        out.push_str(&format!("{s}s"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_valid_forms() {
        let cases = [
            ("720h", 720 * 3600),
            ("1h30m", 5400),
            ("90s", 90),
            ("0s", 0),
            ("2h0m5s", 7205),
        ];
        for (text, secs) in cases {
            assert_eq!(parse(text), Ok(Duration::from_secs(secs)), "{text}");
        }
    }

    #[test]
    fn rejects_invalid_forms() {
        for text in ["", "h", "10", "1.5h", "30m1h", "1h1h", "-1h", "1d", " 1h"] {
            assert!(parse(text).is_err(), "{text}");
        }
    }

    #[test]
    fn budget_durations_are_hours_and_minutes() {
        assert_eq!(parse_hours_minutes("10h5m"), Ok(Duration::from_secs(36300)));
        assert_eq!(parse_hours_minutes("24h0s"), Ok(Duration::from_secs(86400)));
        assert!(parse_hours_minutes("30s").is_err());
        assert!(parse_hours_minutes("0s").is_err());
    }

    #[test]
    fn formats_round_trip() {
        for text in ["720h", "1h30m", "45s", "2h5s", "0s"] {
            assert_eq!(format(parse(text).unwrap()), text);
        }
    }
}
