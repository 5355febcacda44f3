//! Validation problems: a field path, what is wrong, what is expected.

use std::fmt;

/// Longest part of a user's string a message, response or log line quotes.
pub const QUOTE_MAX: usize = 80;

/// A user string in quotes (Rust debug escaping), shortened to its first [`QUOTE_MAX`]
/// characters and `...`, so that a pasted blob (or a hostile 1 MB value) cannot flood a
/// message, a response or a log line.
pub fn quote(text: &str) -> String {
    match text.char_indices().nth(QUOTE_MAX) {
        None => format!("{text:?}"),
        Some((end, _)) => format!("{:?}...", &text[..end]),
    }
}

/// `text` cut to `limit` characters, an ellipsis marking the cut (events, published statuses:
/// what others read gets the gist, the logs have the rest).
pub fn clip(text: &str, limit: usize) -> String {
    if text.chars().count() <= limit {
        text.to_string()
    } else {
        let mut s: String = text.chars().take(limit.saturating_sub(1)).collect();
        s.push('…');
        s
    }
}

/// A user string as it is, shortened like [`quote`] (for text shown without quotes).
pub fn shorten(text: &str) -> std::borrow::Cow<'_, str> {
    match text.char_indices().nth(QUOTE_MAX) {
        None => text.into(),
        Some((end, _)) => format!("{}...", &text[..end]).into(),
    }
}

/// Most items a [`summary`] lists (the rest are counted).
pub const SUMMARY_MAX_ITEMS: usize = 20;
/// Longest item a [`summary`] shows, in characters (a field path can hold a user's key).
pub const SUMMARY_MAX_ITEM: usize = 400;

/// `items` joined with `; `, at most [`SUMMARY_MAX_ITEMS`] of them, each at most
/// [`SUMMARY_MAX_ITEM`] characters, then `; and N more`: what a message, a record or a log line
/// says of a list that a hostile document can make as long as it likes.
pub fn summary<S: AsRef<str>>(items: impl IntoIterator<Item = S>) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut more = 0usize;
    for item in items {
        if out.len() == SUMMARY_MAX_ITEMS {
            more += 1;
            continue;
        }
        let item = item.as_ref();
        out.push(match item.char_indices().nth(SUMMARY_MAX_ITEM) {
            None => item.to_string(),
            Some((end, _)) => format!("{}...", &item[..end]),
        });
    }
    let mut text = out.join("; ");
    if more > 0 {
        text.push_str(&format!("; and {more} more"));
    }
    text
}

/// Largest edit distance at which [`closest`] suggests a name.
pub const SUGGEST_MAX_DISTANCE: usize = 2;

/// The one of `candidates` that `word` is most likely a misspelling of, for a "did you mean"
/// hint: the candidate at the smallest Damerau-Levenshtein distance (ASCII case ignored, so a
/// transposition, a dropped or an extra character each count 1), when that distance is at
/// most [`SUGGEST_MAX_DISTANCE`] and at most a third of the longer of the two (`ids` for `id`,
/// never `id` for `ix`), and no other candidate is as close (an ambiguous
/// word gets no suggestion). Candidates whose length differs from the word's by more than the
/// maximum distance are skipped without computing one, so a long hostile word costs nothing.
pub fn closest<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let lower = word.to_ascii_lowercase();
    let len = lower.chars().count();
    let mut best: Option<(usize, &'a str)> = None;
    let mut tied = false;
    for candidate in candidates {
        let candidate_len = candidate.chars().count();
        if candidate_len.abs_diff(len) > SUGGEST_MAX_DISTANCE {
            continue;
        }
        let distance = strsim::damerau_levenshtein(&lower, &candidate.to_ascii_lowercase());
        if distance > SUGGEST_MAX_DISTANCE || distance > candidate_len.max(len) / 3 {
            continue;
        }
        match best {
            Some((d, c)) if d == distance && c != candidate => tied = true,
            Some((d, _)) if d <= distance => {}
            _ => {
                best = Some((distance, candidate));
                tied = false;
            }
        }
    }
    best.filter(|_| !tied).map(|(_, c)| c)
}

/// `did you mean <name>?` for the one of `names` that `text` is a misspelling of
/// ([`closest`]), if any.
pub fn did_you_mean<'a>(text: &str, names: impl IntoIterator<Item = &'a str>) -> Option<String> {
    closest(text, names).map(|n| format!("did you mean {n}?"))
}

/// How serious a [`Problem`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// The document is rejected.
    Error,
    /// The document is accepted; the user should still know (e.g. not portable to Karpenter).
    Warning,
}

/// One problem found while validating a document.
///
/// `path` uses dotted field names and `[i]` indexes, e.g. `amiSelectorTerms[0].alias`;
/// the empty string means the document as a whole.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Problem {
    /// Field path inside the document.
    pub path: String,
    /// What is wrong and what is expected.
    pub message: String,
    /// Error or warning.
    pub severity: Severity,
}

impl fmt::Display for Problem {
    /// `<path>: <message>` for errors, `<path>: warning: <message>` for warnings.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let path = if self.path.is_empty() {
            "(document)"
        } else {
            &self.path
        };
        match self.severity {
            Severity::Error => write!(f, "{path}: {}", self.message),
            Severity::Warning => write!(f, "{path}: warning: {}", self.message),
        }
    }
}

/// An ordered collection of problems; validation pushes every problem it finds, never stops early.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Problems(pub Vec<Problem>);

impl Problems {
    /// An empty collection.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records an error at `path`.
    pub fn error(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.0.push(Problem {
            path: path.into(),
            message: message.into(),
            severity: Severity::Error,
        });
    }

    /// Records a warning at `path`.
    pub fn warning(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.0.push(Problem {
            path: path.into(),
            message: message.into(),
            severity: Severity::Warning,
        });
    }

    /// True when at least one error (not warning) was recorded.
    pub fn has_errors(&self) -> bool {
        self.0.iter().any(|p| p.severity == Severity::Error)
    }

    /// The errors only.
    pub fn errors(&self) -> impl Iterator<Item = &Problem> {
        self.0.iter().filter(|p| p.severity == Severity::Error)
    }

    /// The errors as one bounded line ([`summary`]).
    pub fn error_summary(&self) -> String {
        summary(self.errors().map(ToString::to_string))
    }

    /// The warnings only.
    pub fn warnings(&self) -> impl Iterator<Item = &Problem> {
        self.0.iter().filter(|p| p.severity == Severity::Warning)
    }
}

/// Joins a parent path and a field name: `join("a", "b") == "a.b"`, `join("", "b") == "b"`.
pub fn join(parent: &str, field: &str) -> String {
    if parent.is_empty() {
        field.to_string()
    } else {
        format!("{parent}.{field}")
    }
}

/// Appends an index: `index("a", 2) == "a[2]"`.
pub fn index(parent: &str, i: usize) -> String {
    format!("{parent}[{i}]")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summaries_are_bounded() {
        assert_eq!(summary(["a", "b"]), "a; b");
        let many: Vec<String> = (0..1000).map(|i| format!("k{i}: unknown field")).collect();
        let s = summary(&many);
        assert!(s.starts_with("k0: unknown field; k1: "), "{s}");
        assert!(s.ends_with("; and 980 more"), "{s}");
        let long = summary([&"x".repeat(1 << 20)]);
        assert_eq!(long.len(), SUMMARY_MAX_ITEM + 3);
        // Multi-byte characters are cut on a boundary.
        assert!(summary([&"é".repeat(1000)]).ends_with("é..."));
        assert_eq!(quote(&"é".repeat(100)).chars().count(), QUOTE_MAX + 5);
    }

    #[test]
    fn closest_suggests_only_near_unambiguous_names() {
        let fields = [
            "expireAfter",
            "amiSelectorTerms",
            "budgets",
            "id",
            "tags",
            "name",
        ];
        // Misspelt: a transposition, a missing or extra character, another case.
        for (word, meant) in [
            ("expireAfer", "expireAfter"),
            ("expierAfter", "expireAfter"),
            ("EXPIREAFTER", "expireAfter"),
            ("amiSelectorTerm", "amiSelectorTerms"),
            ("budget", "budgets"),
            ("ids", "id"),
            ("tag", "tags"),
            ("nmae", "name"),
        ] {
            assert_eq!(closest(word, fields), Some(meant), "{word}");
        }
        // Too far, or too short for its distance: no guess.
        for word in ["expire", "ix", "xy", ""] {
            assert_eq!(closest(word, fields), None, "{word}");
        }
        // Two candidates as close: no suggestion.
        assert_eq!(closest("al2022", ["al2023", "al2021"]), None);
        assert_eq!(closest("al2022", ["al2023", "al2"]), Some("al2023"));
        assert_eq!(
            closest("Europe/Berlln", ["Europe/Berlin", "Europe/Dublin"]),
            Some("Europe/Berlin")
        );
        // A hostile word is skipped by length alone.
        assert_eq!(closest(&"x".repeat(1 << 20), fields), None);
    }
}
