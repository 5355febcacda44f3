//! `nodecycle policy get|diff|apply`: policies as data, stored as SSM String parameters under
//! the prefix (`/nodecycle/pools/<cluster>/<name>`, see [`nodecycle::policy::stored`]).

use std::path::Path;

use clap::Subcommand;
use nodecycle::aws::ssm::Ssm;
use nodecycle::policy::PoolId;
use nodecycle::policy::source::{DEFAULT_PREFIX, Owner, PREFIX_ENV, owner_of};
use nodecycle::policy::stored::{self, Change, FilePolicy, Stored, Tier};
use nodecycle::port::PortError;
use serde_json::{Value, json};

use super::print_json;

/// Arguments.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: PolicyCommand,
}

#[derive(Debug, Subcommand)]
enum PolicyCommand {
    /// Print the policies stored under the prefix (all, or the pools given), as JSON.
    Get(GetArgs),
    /// Compare policy files with what is stored: per pool create, update (with a diff) or
    /// unchanged, and the stored pools no file holds (notInFiles). Writes nothing.
    Diff(FileArgs),
    /// Store the policy files that differ from what is stored (PutParameter, String,
    /// overwrite); nothing at all when a file is invalid. Never deletes.
    Apply(FileArgs),
}

/// `policy get`.
#[derive(Debug, clap::Args)]
pub struct GetArgs {
    /// SSM prefix of the policies (default NODECYCLE_POLICY_PREFIX, else /nodecycle/pools/).
    #[arg(long)]
    prefix: Option<String>,
    /// Pools (`<cluster>/<name>`); all when none.
    #[arg(value_name = "POOL")]
    pools: Vec<String>,
}

/// `policy diff` and `policy apply`.
#[derive(Debug, clap::Args)]
pub struct FileArgs {
    /// A policy file, or a directory whose *.yaml, *.yml and *.json files are policies
    /// (repeatable).
    #[arg(short = 'f', long = "file", required = true, value_name = "DIR|FILE")]
    files: Vec<String>,
    /// SSM prefix of the policies (default NODECYCLE_POLICY_PREFIX, else /nodecycle/pools/).
    #[arg(long)]
    prefix: Option<String>,
    /// SSM parameter tier: Standard holds 4,096 bytes, Advanced 8,192 (charged).
    #[arg(long, default_value = "Standard", value_parser = ["Standard", "Advanced"])]
    tier: String,
}

/// Runs a `policy` subcommand; the exit code.
pub async fn run(args: Args) -> u8 {
    match args.command {
        PolicyCommand::Get(a) => get(a).await,
        PolicyCommand::Diff(a) => diff_or_apply(a, false).await,
        PolicyCommand::Apply(a) => diff_or_apply(a, true).await,
    }
}

/// The prefix given, else `NODECYCLE_POLICY_PREFIX`, else the default; with one trailing `/`.
pub fn prefix(given: Option<&str>) -> String {
    let env = super::target::env(PREFIX_ENV).filter(|p| !p.trim().is_empty());
    stored::normalize_prefix(
        given
            .map(str::to_string)
            .or(env)
            .as_deref()
            .unwrap_or(DEFAULT_PREFIX),
    )
}

/// An SSM client from the environment; `Err(exit code)` after saying what to set.
pub async fn ssm() -> Result<Ssm, u8> {
    nodecycle::wiring::init_logging();
    let config = match super::target::sdk().await {
        Ok(c) => c,
        Err(e) => {
            print_json(&json!({ "error": e }));
            return Err(2);
        }
    };
    Ok(Ssm::new(nodecycle::aws::Clients::new(&config).ssm))
}

/// An AWS failure as one sentence saying what to check (no SDK debug text).
pub fn aws_error(e: &PortError) -> String {
    let lower = e.message.to_ascii_lowercase();
    if let Some(hint) = nodecycle::port::credentials_hint(&e.message) {
        format!("{} failed: {hint}", e.operation)
    } else if lower.contains("dispatch failure")
        || lower.contains("timeout")
        || lower.contains("io error")
    {
        format!(
            "{} failed: AWS is unreachable ({}); check AWS_REGION and AWS_ENDPOINT_URL",
            e.operation,
            without_debug(&e.message)
        )
    } else {
        format!("{} failed: {}", e.operation, without_debug(&e.message))
    }
}

/// `message` up to the first Rust debug rendering the SDK appends (` (DispatchFailure(...))`,
/// `Some(...)`).
fn without_debug(message: &str) -> &str {
    let debug_at = message.char_indices().find_map(|(i, c)| {
        if !c.is_ascii_uppercase() {
            return None;
        }
        let word: String = message[i..]
            .chars()
            .take_while(char::is_ascii_alphanumeric)
            .collect();
        let starts_word = i == 0 || !message[..i].ends_with(|p: char| p.is_ascii_alphanumeric());
        (starts_word && message[i + word.len()..].starts_with('(')).then_some(i)
    });
    match debug_at {
        Some(i) => message[..i].trim_end().trim_end_matches('(').trim_end(),
        None => message,
    }
}

/// `{pool, parameter, version, text}` of each stored policy, `pool` null when the path names none.
async fn get(args: GetArgs) -> u8 {
    let prefix = prefix(args.prefix.as_deref());
    let mut wanted = Vec::new();
    for p in &args.pools {
        match PoolId::parse(p) {
            Ok(id) => wanted.push(stored::parameter_name(&prefix, &id)),
            Err(e) => {
                print_json(&json!({"error": format!("{p}: {e}")}));
                return 2;
            }
        }
    }
    let ssm = match ssm().await {
        Ok(s) => s,
        Err(code) => return code,
    };
    let all = match ssm.parameters_by_path(&prefix).await {
        Ok(all) => all,
        Err(e) => {
            print_json(&json!({"error": aws_error(&e)}));
            return 1;
        }
    };
    let out: Vec<Value> = all
        .iter()
        .filter(|p| wanted.is_empty() || wanted.contains(&p.name))
        .map(|p| {
            json!({
                "pool": pool_of(&prefix, &p.name),
                "parameter": p.name,
                "version": p.version,
                "text": p.value,
            })
        })
        .collect();
    let missing: Vec<&String> = wanted
        .iter()
        .filter(|w| !all.iter().any(|p| &p.name == *w))
        .collect();
    print_json(&Value::Array(out));
    for m in &missing {
        eprintln!("nodecycle policy get: no policy stored at {m}");
    }
    u8::from(!missing.is_empty())
}

/// The pool parameter `name` owns, `None` when its path names none.
fn pool_of(prefix: &str, name: &str) -> Option<String> {
    match owner_of(prefix, name) {
        Owner::Path(id) => Some(id.to_string()),
        Owner::Document | Owner::NoPool(_) => None,
    }
}

/// The policy files of `-f` arguments: a file as given, a directory's `*.yaml`, `*.yml` and
/// `*.json` (not recursive), sorted. `Err` with the line to print.
pub fn policy_files(args: &[String]) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for arg in args {
        let path = Path::new(arg);
        if path.is_dir() {
            let entries =
                std::fs::read_dir(path).map_err(|e| format!("{arg}: cannot read: {e}"))?;
            let mut found: Vec<String> = entries
                .filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| p.is_file())
                .filter(|p| {
                    p.extension()
                        .and_then(|x| x.to_str())
                        .is_some_and(|x| matches!(x, "yaml" | "yml" | "json"))
                })
                .map(|p| p.to_string_lossy().into_owned())
                .collect();
            if found.is_empty() {
                return Err(format!(
                    "{arg}: no *.yaml, *.yml or *.json file in the directory"
                ));
            }
            found.sort();
            out.extend(found);
        } else {
            out.push(arg.clone());
        }
    }
    Ok(out)
}

/// Reads and validates every file (problems on stdout as `validate` prints them, warnings on
/// stderr), and checks each fits a parameter of `tier`. `Err(2)` when any file is invalid.
fn load_files(paths: &[String], tier: Tier) -> Result<Vec<FilePolicy>, u8> {
    let mut failed = false;
    let mut out = Vec::new();
    for path in paths {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) => {
                println!("{path}: cannot read: {e}");
                failed = true;
                continue;
            }
        };
        let parsed = nodecycle::policy::parse(&text);
        for problem in parsed.problems.warnings() {
            eprintln!("{path}: {problem}");
        }
        for problem in parsed.problems.errors() {
            println!("{path}: {problem}");
        }
        let Some(policy) = parsed.policy else {
            failed = true;
            continue;
        };
        let Some(pool) = parsed.pool else {
            println!("{path}: (document): names no pool; expected cluster and name");
            failed = true;
            continue;
        };
        if let Err(why) = stored::fits(
            &format!("the policy {}", policy.pool_id()),
            text.len(),
            tier,
        ) {
            println!("{path}: (document): {why}");
            failed = true;
            continue;
        }
        out.push(FilePolicy {
            path: path.clone(),
            pool,
            text,
        });
    }
    if failed { Err(2) } else { Ok(out) }
}

/// A unified line diff from the stored text to the file's.
pub fn unified(parameter: &str, path: &str, old: &str, new: &str) -> String {
    similar::TextDiff::from_lines(old, new)
        .unified_diff()
        .context_radius(3)
        .header(parameter, path)
        .to_string()
}

async fn diff_or_apply(args: FileArgs, apply: bool) -> u8 {
    let prefix = prefix(args.prefix.as_deref());
    let tier: Tier = args.tier.parse().unwrap_or_default();
    let paths = match policy_files(&args.files) {
        Ok(p) => p,
        Err(line) => {
            println!("{line}");
            return 2;
        }
    };
    let files = match load_files(&paths, tier) {
        Ok(f) => f,
        Err(code) => return code,
    };
    let ssm = match ssm().await {
        Ok(s) => s,
        Err(code) => return code,
    };
    let current = match ssm.parameters_by_path(&prefix).await {
        Ok(all) => all
            .into_iter()
            .map(|p| Stored {
                name: p.name,
                text: p.value,
                version: p.version,
            })
            .collect(),
        Err(e) => {
            print_json(&json!({"error": aws_error(&e)}));
            return 1;
        }
    };
    let plan = match stored::plan(&prefix, files, current) {
        Ok(p) => p,
        Err(clashes) => {
            for c in clashes {
                println!("{c}");
            }
            return 2;
        }
    };
    if chains_broken(&prefix, &plan) {
        return 2;
    }
    let mut pools = Vec::new();
    let mut written = 0;
    let mut failure = None;
    for step in &plan.steps {
        let mut entry = json!({
            "pool": step.file.pool.to_string(),
            "file": step.file.path,
            "parameter": step.parameter,
            "change": step.change.as_str(),
            "version": step.stored.as_ref().map(|s| s.version),
        });
        if step.change == Change::Update && !apply {
            let old = step
                .stored
                .as_ref()
                .map(|s| s.text.as_str())
                .unwrap_or_default();
            entry["diff"] = json!(unified(
                &step.parameter,
                &step.file.path,
                old,
                &step.file.text
            ));
        }
        if apply && step.change != Change::Unchanged && failure.is_none() {
            match ssm
                .put_string(&step.parameter, &step.file.text, tier == Tier::Advanced)
                .await
            {
                Ok(version) => {
                    entry["version"] = json!(version);
                    entry["written"] = json!(true);
                    written += 1;
                }
                Err(e) => {
                    entry["written"] = json!(false);
                    entry["error"] = json!(aws_error(&e));
                    failure = Some(aws_error(&e));
                }
            }
        } else if apply {
            entry["written"] = json!(false);
        }
        pools.push(entry);
    }
    let not_in_files: Vec<Value> = plan
        .not_in_files
        .iter()
        .map(|s| json!({"pool": pool_of(&prefix, &s.name), "parameter": s.name, "version": s.version}))
        .collect();
    let mut out = json!({"prefix": prefix, "pools": pools, "notInFiles": not_in_files});
    if apply {
        out["written"] = json!(written);
    }
    if let Some(e) = &failure {
        out["error"] = json!(e);
    }
    print_json(&out);
    u8::from(failure.is_some())
}

/// The promotion chains once the files are stored (the stored policies, each file in its
/// pool's place): a pool of the files promoting from itself or in a cycle is an error (its
/// line on stdout, `true`); an upstream stored nowhere a warning on stderr.
fn chains_broken(prefix: &str, plan: &stored::Plan) -> bool {
    use nodecycle::policy::source::PolicyDocument;
    use nodecycle::promotion::{ChainProblem, chain_problems};
    let from_of = |doc: PolicyDocument| {
        let parsed = nodecycle::policy::parse_document(&doc);
        parsed
            .policy
            .map(|p| (p.pool_id(), p.promotion.and_then(|x| x.from)))
    };
    let mut chains = std::collections::BTreeMap::new();
    let stored_docs = plan
        .steps
        .iter()
        .filter_map(|s| s.stored.as_ref())
        .chain(&plan.not_in_files);
    for s in stored_docs {
        let doc = PolicyDocument::parameter(prefix, s.name.clone(), s.text.clone());
        if let Some((pool, from)) = from_of(doc) {
            chains.insert(pool, from);
        }
    }
    let mut files = std::collections::BTreeMap::new();
    for step in &plan.steps {
        let doc = PolicyDocument::file(step.file.path.clone(), step.file.text.clone());
        if let Some((pool, from)) = from_of(doc) {
            chains.insert(pool.clone(), from);
            files.insert(pool, step.file.path.clone());
        }
    }
    let mut broken = false;
    for (pool, problem) in chain_problems(&chains) {
        let Some(path) = files.get(&pool) else {
            continue;
        };
        match problem {
            ChainProblem::UnknownUpstream { upstream, .. } => eprintln!(
                "{path}: promotion.from: warning: upstream pool {upstream} is neither among the files nor stored under {prefix}"
            ),
            other => {
                println!("{path}: {other}");
                broken = true;
            }
        }
    }
    broken
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directories_give_their_policy_files_sorted() {
        let dir =
            std::env::temp_dir().join(format!("nodecycle-policy-files-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for f in ["b.yml", "a.yaml", "c.json", "notes.md"] {
            std::fs::write(dir.join(f), "x").unwrap();
        }
        let d = dir.to_string_lossy().into_owned();
        let got = policy_files(std::slice::from_ref(&d)).unwrap();
        let names: Vec<&str> = got.iter().map(|p| p.rsplit('/').next().unwrap()).collect();
        assert_eq!(names, ["a.yaml", "b.yml", "c.json"]);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn sdk_debug_text_is_cut() {
        let m = "dispatch failure: io error: client error (Connect): tcp connect error: Connection refused (os error 111) (DispatchFailure(DispatchFailure { source: Some(x) }))";
        assert_eq!(
            without_debug(m),
            "dispatch failure: io error: client error (Connect): tcp connect error: Connection refused (os error 111)"
        );
        assert_eq!(without_debug("x: Some(3)"), "x:");
        assert_eq!(
            without_debug("plain (HTTP 400): no"),
            "plain (HTTP 400): no"
        );
    }

    #[test]
    fn updates_show_a_unified_diff() {
        let d = unified("/p/prod/a", "a.yaml", "a: 1\nb: 2\n", "a: 1\nb: 3\n");
        assert!(
            d.contains("--- /p/prod/a") && d.contains("+++ a.yaml"),
            "{d}"
        );
        assert!(d.contains("-b: 2\n") && d.contains("+b: 3\n"), "{d}");
    }
}
