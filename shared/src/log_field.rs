//! How a structured value appears in a log line: as JSON, never as Rust `Debug` text
//! (`Some(..)`, `Terminate { .. }`). `tracing::info!(undo = %log_field::json(&undo), ...)`.

/// `value` as compact JSON; a value that cannot be encoded logs as `null`.
pub fn json<T: serde::Serialize + ?Sized>(value: &T) -> String {
    serde_json::to_string(value).unwrap_or_else(|_| "null".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn structures_log_as_json_not_debug() {
        assert_eq!(json(&Some("prod/newpool")), "\"prod/newpool\"");
        assert_eq!(json(&None::<String>), "null");
        assert_eq!(json(&vec!["a", "b"]), "[\"a\",\"b\"]");
        let mut bad = std::collections::HashMap::new();
        bad.insert(vec![1], 1);
        assert_eq!(json(&bad), "null");
    }
}
