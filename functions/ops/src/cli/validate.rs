//! `nodecycle validate <POLICY_FILE>...`

/// Arguments.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Policy files (YAML or JSON).
    #[arg(required = true, value_name = "POLICY_FILE")]
    files: Vec<String>,
}

/// Prints every problem of every file (errors and warnings, `<file>: <path>: <message>`), then
/// the promotion chains across the files: a pool promoting from itself or a cycle is an error,
/// an upstream that is none of the files a warning (it may be deployed from elsewhere; the
/// ami-watcher checks the chains across every deployed policy). Exit 0 when no file has an
/// error, 2 otherwise.
pub fn run(args: Args) -> u8 {
    use nodecycle::promotion::{ChainProblem, chain_problems};
    let mut failed = false;
    let mut chains = std::collections::BTreeMap::new();
    let mut files = std::collections::BTreeMap::new();
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
        if let Some(p) = &parsed.policy {
            let from = p.promotion.as_ref().and_then(|x| x.from.clone());
            chains.insert(p.pool_id(), from);
            files.insert(p.pool_id(), path.clone());
        }
    }
    for (pool, problem) in chain_problems(&chains) {
        let path = files.get(&pool).map(String::as_str).unwrap_or_default();
        match problem {
            ChainProblem::UnknownUpstream { upstream, .. } => println!(
                "{path}: promotion.from: warning: upstream pool {upstream} is not among the files given; the ami-watcher checks it against every deployed policy"
            ),
            other => {
                println!("{path}: {other}");
                failed = true;
            }
        }
    }
    if failed { 2 } else { 0 }
}
