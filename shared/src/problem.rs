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
}
