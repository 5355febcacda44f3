//! The `nodecycle` CLI.
fn main() {}
