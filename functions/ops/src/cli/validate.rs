//! `nodecycle validate <POLICY_FILE>...`, `nodecycle validate --live <POLICY_FILE>...` and
//! `nodecycle validate --prefix <PREFIX> [POOL...]` (the stored form).

use nodecycle::policy::source::PolicyDocument;

/// Arguments.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Policy files (YAML or JSON); with --prefix, pools (`<cluster>/<name>`, all when none).
    #[arg(required_unless_present = "prefix", value_name = "POLICY_FILE")]
    files: Vec<String>,
    /// Validate the policies stored as SSM parameters under this prefix (e.g.
    /// /nodecycle/pools/) instead of files: the stored form, cluster and name from the path.
    #[arg(long, conflicts_with = "live")]
    prefix: Option<String>,
    /// Also read the live group (and the state table when NODECYCLE_TABLE is set) and print
    /// what nodecycle's first pass would do for each valid file, changing nothing.
    #[arg(long)]
    live: bool,
    /// Treat warnings as failures: exit 1 when a file has a warning and no error (for CI).
    #[arg(long)]
    strict: bool,
}

impl Args {
    /// Whether it reads a deployment (`--live`, `--prefix`).
    pub fn reads_deployment(&self) -> bool {
        self.live || self.prefix.is_some()
    }
}

/// Prints every problem of every file (errors and warnings, `<file>: <path>: <message>`), then
/// the promotion chains across the files: a pool promoting from itself or a cycle is an error,
/// an upstream that is none of the files a warning (it may be deployed from elsewhere; the
/// ami-watcher checks the chains across every deployed policy). Exit 0 when no file has an
/// error, 2 otherwise; with `--strict`, 1 when there is no error but a warning. `--live` runs
/// when no file has an error, and the larger exit code of the two is returned.
pub async fn run(args: Args) -> u8 {
    if let Some(prefix) = &args.prefix {
        return stored(&args, prefix).await;
    }
    let docs = args
        .files
        .iter()
        .map(|path| {
            let doc = std::fs::read_to_string(path)
                .map(|text| PolicyDocument::file(path.clone(), text))
                .map_err(|e| format!("{path}: cannot read: {e}"));
            (path.clone(), doc)
        })
        .collect::<Vec<_>>();
    let code = check(&args, &docs, true);
    if !args.live || code == 2 {
        return code;
    }
    live(&args.files).await.max(code)
}

/// `--prefix`: the documents stored under the prefix (those of the pools given, all when none)
/// checked as the deployed functions read them. Exit 1 when they cannot be read, 2 when a pool
/// given is not stored.
async fn stored(args: &Args, prefix: &str) -> u8 {
    let prefix = super::policy::prefix(Some(prefix));
    let mut wanted = Vec::new();
    for p in &args.files {
        match nodecycle::policy::PoolId::parse(p) {
            Ok(id) => wanted.push(nodecycle::policy::stored::parameter_name(&prefix, &id)),
            Err(e) => {
                println!("{p}: not a pool: {e}");
                return 2;
            }
        }
    }
    let ssm = match super::policy::ssm().await {
        Ok(s) => s,
        Err(code) => return code,
    };
    let all = match ssm.parameters_by_path(&prefix).await {
        Ok(all) => all,
        Err(e) => {
            super::print_json(&serde_json::json!({"error": super::policy::aws_error(&e)}));
            return 1;
        }
    };
    let mut missing = false;
    for w in &wanted {
        if !all.iter().any(|p| &p.name == w) {
            println!("{w}: no policy stored at this parameter");
            missing = true;
        }
    }
    let docs: Vec<(String, Result<PolicyDocument, String>)> = all
        .into_iter()
        .filter(|p| wanted.is_empty() || wanted.contains(&p.name))
        .map(|p| {
            let name = p.name.clone();
            (
                name,
                Ok(PolicyDocument::parameter(&prefix, p.name, p.value)),
            )
        })
        .collect();
    let code = check(args, &docs, false);
    if missing { code.max(2) } else { code }
}

/// The offline checks (see [`run`]) of `docs` (source, document or why it is unreadable);
/// `size_bounds`: also the SSM size bounds (a stored document fits its parameter already). With
/// `--live` their lines go to stderr, so that stdout is the JSON alone.
fn check(args: &Args, docs: &[(String, Result<PolicyDocument, String>)], size_bounds: bool) -> u8 {
    use nodecycle::promotion::{ChainProblem, chain_problems};
    let say = |line: String| {
        if args.live {
            eprintln!("{line}");
        } else {
            println!("{line}");
        }
    };
    let mut failed = false;
    let mut warned = false;
    let mut chains = std::collections::BTreeMap::new();
    let mut files = std::collections::BTreeMap::new();
    for (path, doc) in docs {
        let doc = match doc {
            Ok(d) => d,
            Err(line) => {
                say(line.clone());
                failed = true;
                continue;
            }
        };
        let parsed = nodecycle::policy::parse_document(doc);
        for problem in &parsed.problems.0 {
            say(format!("{path}: {problem}"));
        }
        if size_bounds {
            match nodecycle::policy::stored::size_problem(doc.text.len()) {
                Ok(None) => {}
                Ok(Some(warning)) => {
                    say(format!("{path}: (document): warning: {warning}"));
                    warned = true;
                }
                Err(error) => {
                    say(format!("{path}: (document): {error}"));
                    failed = true;
                }
            }
        }
        failed |= parsed.problems.has_errors();
        warned |= parsed.problems.warnings().next().is_some();
        if let Some(p) = &parsed.policy {
            let from = p.promotion.as_ref().and_then(|x| x.from.clone());
            chains.insert(p.pool_id(), from);
            files.insert(p.pool_id(), path.clone());
        }
    }
    for (pool, problem) in chain_problems(&chains) {
        let path = files.get(&pool).map(String::as_str).unwrap_or_default();
        match problem {
            ChainProblem::UnknownUpstream { upstream, .. } => {
                say(format!(
                    "{path}: promotion.from: warning: upstream pool {upstream} is not among the files given; the ami-watcher checks it against every deployed policy"
                ));
                warned = true;
            }
            other => {
                say(format!("{path}: {other}"));
                failed = true;
            }
        }
    }
    match (failed, warned && args.strict) {
        (true, _) => 2,
        (false, true) => 1,
        (false, false) => 0,
    }
}

/// `--live`: for each file, what the first pass would do
/// ([`nodecycle::handlers::onboard::first_pass`]), as `{"pools": [...]}` on stdout. Uses the
/// environment's AWS configuration and Kubernetes access (as `plan`); the state table only
/// when `NODECYCLE_TABLE` is set (else no quarantine, no record, no upstream is known: said in
/// each entry's `table`). Exit 0 when every file was previewed, 1 when a live read failed or
/// a pool's AMI does not resolve (its entry says why).
async fn live(files: &[String]) -> u8 {
    use nodecycle::handlers::onboard;
    nodecycle::wiring::init_logging();
    let config = match super::target::sdk().await {
        Ok(c) => c,
        Err(e) => {
            super::print_json(&serde_json::json!({ "error": e }));
            return 1;
        }
    };
    let table = super::target::env(nodecycle::state::TABLE_ENV).filter(|t| !t.trim().is_empty());
    // No table is fine here (nothing is written); the served accounts and regions and the
    // members' spoke role are the deployment's (a member's pool is read through its role).
    let mut common = match nodecycle::wiring::Common::without_table(&super::target::env) {
        Ok(c) => c,
        Err(e) => {
            super::print_json(&serde_json::json!({"error": e.message}));
            return 1;
        }
    };
    common.table = table.clone().unwrap_or_else(|| "-".into());
    common.group_updates = false;
    let ports = common.ports(&config);
    let settings = match nodecycle::wiring::RotatorConfig::settings(&super::target::env) {
        Ok(s) => s,
        Err(e) => {
            super::print_json(&serde_json::json!({"error": e.message}));
            return 1;
        }
    };
    let mut out = Vec::new();
    let mut failed = false;
    for path in files {
        let Ok(policy) = super::load_policy(path) else {
            return 2;
        };
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let doc = PolicyDocument::file(path.clone(), text);
        let store = table.as_ref().map(|_| ports.store.clone());
        let now = chrono::Utc::now();
        match onboard::first_pass(&ports, store, doc, &policy, settings.clone(), now).await {
            Ok(v) => {
                failed |= matches!(v["watcher"]["status"].as_str(), Some("failed" | "invalid"))
                    || v["problems"].as_array().is_some_and(|p| !p.is_empty());
                out.push(v);
            }
            Err(e) => {
                failed = true;
                out.push(serde_json::json!({"pool": policy.pool_id(), "error": e}));
            }
        }
    }
    super::print_json(&serde_json::json!({ "pools": out }));
    u8::from(failed)
}
