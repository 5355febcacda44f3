//! Test support lives in the integration test files; this crate has no library code.
