//! ops Lambda entry point.
fn main() {}
