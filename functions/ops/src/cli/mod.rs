//! Subcommands. Exit codes: 0 success, 1 the operation failed (e.g. nothing resolves),
//! 2 bad input (invalid policy, bad arguments).

mod budget;
mod config;
#[cfg(test)]
mod doc_commands;
mod doctor;
mod drain;
mod ops;
mod output;
mod plan;
mod policy;
mod resolve;
mod run;
mod simulate;
mod target;
mod validate;
mod wait;

use clap::{Parser, Subcommand};

/// Keep EKS node groups on the right AMI: nodecycle's command line.
///
/// Operator commands (status, rotate, pin, pause, ...) invoke the deployed ops function, which
/// records your IAM identity in its audit; select the deployment once with `nodecycle config
/// use NAME --stack STACK --region REGION` (or pass --stack and --region). Policy commands
/// (validate, policy, plan, simulate, doctor) read the same deployment with your credentials.
/// Answers print as tables; `-o json` for scripts.
#[derive(Debug, Parser)]
#[command(name = "nodecycle", version, about, long_about)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
    #[command(flatten)]
    global: target::Global,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Validate policy files; one line per problem (`<file>: <path>: <message>`), exit 2 if any
    /// error. With --live, also what the first pass would do for each (JSON), changing nothing.
    Validate(validate::Args),
    /// Policies as data: print (get), compare (diff) or store (apply) the policies kept as SSM
    /// parameters under the prefix.
    Policy(policy::Args),
    /// Resolve a policy's amiSelectorTerms against AWS and print the desired AMI and candidates.
    Resolve(resolve::Args),
    /// Evaluate a policy's disruption budgets at an instant.
    Budget(budget::Args),
    /// Run one function's handler once, in-process, exactly as the Lambda would.
    Run(run::Args),
    /// Cordon and drain one instance's node from outside the cluster.
    Drain(drain::Args),
    /// What is happening to a pool's nodes and why (the ops function's `status`).
    Status(ops::StatusArgs),
    /// Queue manual rotations of instances (or --all) of a pool; audited.
    Rotate(ops::RotateArgs),
    /// Pin a pool's desired AMI until unpinned; audited.
    Pin(ops::PinArgs),
    /// Remove a pool's pin; audited.
    Unpin(ops::PoolArgs),
    /// Pause a pool: no voluntary rotation starts; audited.
    Pause(ops::PoolArgs),
    /// Resume a paused or halted pool; audited.
    Resume(ops::PoolArgs),
    /// Abort a rotation that has not reached Terminating; audited.
    Cancel(ops::CancelArgs),
    /// Quarantine an image (--ami) or a release (--release) in every pool; pools on it roll back; audited.
    Quarantine(ops::QuarantineArgs),
    /// Lift a quarantine (--ami or --release); audited.
    Unquarantine(ops::QuarantineArgs),
    /// A release's journey through the promotion chains: per pool, desired since, promoted, soak, rolled back.
    Promotion(ops::PromotionArgs),
    /// Hold every pool of the deployment at its next step boundary (interruptions go on); audited.
    Stop(ops::ReasonArgs),
    /// Undo `stop`: pools not paused of their own go on; audited.
    Start(ops::ReasonArgs),
    /// Wait until a pool's rollout reached the desired release (exit 0), halted or was
    /// quarantined (1) or the timeout passed (2), reading only its published status.
    Wait(wait::Args),
    /// Show what the rotator would do for a pool now (or at --at), changing nothing.
    Plan(plan::Args),
    /// Forecast the rollout over days (policy files or --live), as JSON and an SVG/HTML picture.
    Simulate(simulate::Args),
    /// Read-only preflight of a deployment: stack, table, policies, groups, access, RBAC, rules.
    Doctor(doctor::Args),
    /// Contexts: which deployment (stack, region, profile) commands act on.
    Config(config::Args),
}

/// Runs the parsed command and returns the process exit code: resolves the target (context,
/// stack, region) first, and reads the stack's outputs for the commands that act on a
/// deployment (exit 2 with what to fix when that fails).
pub async fn run(cli: Cli) -> u8 {
    if let Command::Config(a) = cli.command {
        return config::run(a, &cli.global);
    }
    let file = match target::ConfigFile::load() {
        Ok(f) => f,
        Err(e) => {
            eprintln!("nodecycle: {e}");
            return 2;
        }
    };
    let mut t = match target::Target::resolve(&cli.global, &nodecycle::wiring::process_env, &file) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("nodecycle: {e}");
            return 2;
        }
    };
    if cli.command.acts_on_a_deployment()
        && let Err(e) = target::load_stack(&mut t).await
    {
        eprintln!("nodecycle: {e}");
        return 2;
    }
    target::init(t);
    match cli.command {
        Command::Validate(a) => validate::run(a).await,
        Command::Policy(a) => policy::run(a).await,
        Command::Resolve(a) => resolve::run(a).await,
        Command::Budget(a) => budget::run(a),
        Command::Run(a) => run::run(a).await,
        Command::Drain(a) => drain::run(a).await,
        Command::Status(a) => ops::run(ops::status_request(a), output::status).await,
        Command::Rotate(a) => ops::run(ops::rotate_request(a), output::generic).await,
        Command::Pin(a) => ops::run(ops::pin_request(a), output::generic).await,
        Command::Unpin(a) => ops::run(ops::pool_request("unpin", a), output::generic).await,
        Command::Pause(a) => ops::run(ops::pool_request("pause", a), output::generic).await,
        Command::Resume(a) => ops::run(ops::pool_request("resume", a), output::generic).await,
        Command::Cancel(a) => ops::run(ops::cancel_request(a), output::generic).await,
        Command::Quarantine(a) => {
            ops::run(ops::quarantine_request("quarantine", a), output::generic).await
        }
        Command::Unquarantine(a) => {
            ops::run(ops::quarantine_request("unquarantine", a), output::generic).await
        }
        Command::Promotion(a) => ops::run(ops::promotion_request(a), output::generic).await,
        Command::Stop(a) => ops::run(ops::switch_request("stop", a), output::generic).await,
        Command::Start(a) => ops::run(ops::switch_request("start", a), output::generic).await,
        Command::Wait(a) => wait::run(a).await,
        Command::Plan(a) => plan::run(a).await,
        Command::Simulate(a) => simulate::run(a).await,
        Command::Doctor(a) => doctor::run(a).await,
        Command::Config(a) => config::run(a, &cli.global),
    }
}

impl Command {
    /// Whether the command reads the deployment a stack names (its table, policies, ops
    /// function), so that the stack's outputs are read first. `doctor` reads the stack itself
    /// (a missing stack is one of its findings); validate, budget and simulate of files need
    /// no deployment.
    fn acts_on_a_deployment(&self) -> bool {
        match self {
            Command::Validate(a) => a.reads_deployment(),
            Command::Simulate(a) => a.reads_deployment(),
            Command::Budget(_)
            | Command::Doctor(_)
            | Command::Config(_)
            | Command::Run(_)
            | Command::Wait(_) => false,
            _ => true,
        }
    }
}

/// Prints one JSON value on stdout.
pub fn print_json(value: &serde_json::Value) {
    println!(
        "{}",
        serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string())
    );
}

/// Reads and validates one policy file; on failure prints the problems (`<file>: ...`) and
/// returns `Err(exit code)`.
pub fn load_policy(path: &str) -> Result<nodecycle::policy::Policy, u8> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) => {
            println!("{path}: cannot read: {e}");
            return Err(2);
        }
    };
    let parsed = nodecycle::policy::parse(&text);
    for problem in parsed.problems.warnings() {
        eprintln!("{path}: {problem}");
    }
    match parsed.policy {
        Some(p) => Ok(p),
        None => {
            for problem in parsed.problems.errors() {
                println!("{path}: {problem}");
            }
            Err(2)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The JSON request a command line becomes (operator subcommands only).
    fn request(args: &[&str]) -> serde_json::Value {
        let cli = Cli::try_parse_from(std::iter::once("nodecycle").chain(args.iter().copied()))
            .unwrap_or_else(|e| panic!("{args:?}: {e}"));
        match cli.command {
            Command::Quarantine(a) => ops::quarantine_request("quarantine", a),
            Command::Unquarantine(a) => ops::quarantine_request("unquarantine", a),
            Command::Promotion(a) => ops::promotion_request(a),
            other => panic!("not a promotion command: {other:?}"),
        }
    }

    /// clap's own checks of the definition (one id per argument, globals that do not clash
    /// with a subcommand's flags, ...): a clash panics at parse time only for the command used.
    #[test]
    fn the_command_line_definition_is_consistent() {
        use clap::CommandFactory as _;
        Cli::command().debug_assert();
        // Every operator command that changes something needs --reason before anything runs.
        for args in [
            vec!["pause", "prod/general"],
            vec!["pin", "prod/general", "ami-1"],
            vec!["stop"],
            vec!["quarantine", "--ami", "ami-1"],
        ] {
            let parsed =
                Cli::try_parse_from(std::iter::once("nodecycle").chain(args.iter().copied()));
            assert!(
                parsed.is_err_and(|e| e.to_string().contains("--reason")),
                "{args:?}"
            );
        }
    }

    #[test]
    fn quarantine_commands_build_the_ops_requests() {
        let cases = [
            (
                vec!["quarantine", "--release", "v20241109", "--reason", "bad"],
                json!({"action": "quarantine", "release": "v20241109", "reason": "bad"}),
            ),
            (
                vec![
                    "quarantine",
                    "--ami",
                    "ami-0123456789abcdef0",
                    "--reason",
                    "bad",
                ],
                json!({"action": "quarantine", "ami": "ami-0123456789abcdef0", "reason": "bad"}),
            ),
            (
                vec!["unquarantine", "--release", "1.26.0", "--reason", "fixed"],
                json!({"action": "unquarantine", "release": "1.26.0", "reason": "fixed"}),
            ),
            // The handler validates (both, neither): every problem at once.
            (
                vec![
                    "quarantine",
                    "--ami",
                    "ami-1",
                    "--release",
                    "v1",
                    "--reason",
                    "r",
                ],
                json!({"action": "quarantine", "ami": "ami-1", "release": "v1", "reason": "r"}),
            ),
            (
                vec!["promotion", "v20241109"],
                json!({"action": "promotion", "release": "v20241109"}),
            ),
        ];
        for (args, want) in cases {
            assert_eq!(request(&args), want, "{args:?}");
        }
        assert!(Cli::try_parse_from(["nodecycle", "promotion"]).is_err());
        assert!(Cli::try_parse_from(["nodecycle", "quarantine", "v20241109"]).is_err());
    }
}
