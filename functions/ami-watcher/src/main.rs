//! ami-watcher Lambda entry point.
fn main() {}
