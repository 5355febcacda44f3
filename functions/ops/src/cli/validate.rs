//! `nodecycle validate <POLICY_FILE>...`

/// Arguments.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Policy files (YAML or JSON).
    #[arg(required = true, value_name = "POLICY_FILE")]
    files: Vec<String>,
}

/// Prints every problem of every file (errors and warnings, `<file>: <path>: <message>`);
/// exit 0 when no file has an error, 2 otherwise.
pub fn run(args: Args) -> u8 {
    let mut failed = false;
    for path in &args.files {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) => {
                println!("{path}: cannot read: {e}");
                failed = true;
                continue;
            }
        };
        let parsed = nodecycle::policy::parse(&text);
        for problem in &parsed.problems.0 {
            println!("{path}: {problem}");
        }
        failed |= parsed.problems.has_errors();
    }
    if failed { 2 } else { 0 }
}
