//! The `nodecycle` CLI: validate, resolve, budget, and run any function's handler in-process.
//! Output on stdout is a stable interface (one JSON object, or one line per problem); logs and
//! progress go to stderr.

use clap::Parser;

#[path = "../cli/mod.rs"]
mod cli;

fn main() -> std::process::ExitCode {
    let args = cli::Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("nodecycle: cannot start the async runtime: {e}");
            return std::process::ExitCode::from(1);
        }
    };
    std::process::ExitCode::from(runtime.block_on(cli::run(args)))
}
