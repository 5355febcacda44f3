//! `nodecycle wait --pool CLUSTER/NAME --for up-to-date [--release R] [--min-ready 90%]
//! --timeout 2h`: waits until a pool's published rollout status ([`nodecycle::rollout`], the SSM
//! parameter `/nodecycle/status/<cluster>/<name>`) says the rollout reached what a pipeline
//! gates on. Needs only `ssm:GetParameter` (and `ssm:GetParametersByPath` for `--all`) on those
//! parameters: no stack, table or ops function.

use std::time::{Duration, Instant};

use nodecycle::port::PortError;
use nodecycle::rollout::{self, MinReady, Rollout, StatusBoard, Verdict, Want};

/// What to wait for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Condition {
    /// Every node (or --min-ready of them) on the desired release (or --release) and Ready.
    UpToDate,
}

/// Arguments.
#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("which").required(true).args(["pool", "all"])))]
pub struct Args {
    /// The pool (`<cluster>/<name>`).
    #[arg(long, value_name = "CLUSTER/NAME")]
    pool: Option<String>,
    /// Every pool of --cluster (each must reach it; one halted fails the wait).
    #[arg(long, requires = "cluster")]
    all: bool,
    /// The cluster of --all.
    #[arg(long, value_name = "CLUSTER")]
    cluster: Option<String>,
    /// What to wait for.
    #[arg(long = "for", value_enum, value_name = "CONDITION")]
    condition: Condition,
    /// The release the pool must be on: image id, image name, release version (v20240807) or
    /// pinned alias (al2023@v20240807). Default: whatever it should run now.
    #[arg(long, value_name = "RELEASE")]
    release: Option<String>,
    /// How many nodes must be up to date and Ready: a share (90%) of the larger of the nodes
    /// and the group's desired capacity, or a count (5). Default 100%.
    #[arg(long, value_name = "SHARE_OR_COUNT", value_parser = |s: &str| s.parse::<MinReady>())]
    min_ready: Option<MinReady>,
    /// Give up after this long (30s, 15m, 2h).
    #[arg(long, value_name = "DURATION", value_parser = nodecycle::duration::parse)]
    timeout: Duration,
    /// How often to read the status.
    #[arg(long, value_name = "DURATION", value_parser = nodecycle::duration::parse, default_value = "15s")]
    interval: Duration,
}

/// Exit codes: 0 reached, 1 halted or quarantined (with why), 2 timed out (or bad arguments,
/// as for every command), 3 the status cannot be read (no permission, not a status). Each change
/// of the verdicts goes to standard error; at the end, standard output has the last read as the
/// ops request `rollout` answers it: `{"verdict", "pools": [{"pool", "verdict", "message",
/// "status"}]}`.
pub async fn run(args: Args) -> u8 {
    let Condition::UpToDate = args.condition;
    let sdk = match super::target::sdk().await {
        Ok(s) => s,
        Err(e) => {
            eprintln!("nodecycle wait: {e}");
            return 3;
        }
    };
    let board = nodecycle::aws::ssm::Ssm::from_config(&sdk);
    let want = Want {
        release: args.release.clone(),
        min_ready: args.min_ready.unwrap_or(MinReady::All),
    };
    let started = Instant::now();
    let mut last: Option<String> = None;
    loop {
        let (statuses, verdicts) = match read(&board, &args).await {
            Ok(statuses) => {
                let v = verdicts(&args, &statuses, &want);
                (statuses, v)
            }
            Err(e) if e.kind.is_retryable() => (
                Vec::new(),
                vec![Verdict::Waiting(format!(
                    "cannot read the status now ({e}); trying again"
                ))],
            ),
            Err(e) => {
                eprintln!("nodecycle wait: cannot read the rollout status: {e}");
                return 3;
            }
        };
        let summary: Vec<String> = verdicts
            .iter()
            .map(|v| format!("{}: {}", v.name(), v.message()))
            .collect();
        let summary = summary.join("\n");
        if last.as_deref() != Some(summary.as_str()) {
            eprintln!("{summary}");
            last = Some(summary);
        }
        let overall = rollout::overall(&verdicts);
        let left = args.timeout.saturating_sub(started.elapsed());
        if overall != "waiting" || left.is_zero() {
            super::print_json(&answer(overall, &statuses, &verdicts));
        }
        match overall {
            "reached" => return 0,
            "failed" => return 1,
            _ => {}
        }
        if left.is_zero() {
            eprintln!(
                "nodecycle wait: timed out after {}",
                nodecycle::duration::format(args.timeout)
            );
            return 2;
        }
        tokio::time::sleep(args.interval.min(left)).await;
    }
}

/// The published statuses of `args`' pools: `(pool, status)`, `None` for a pool not published.
async fn read(
    board: &dyn StatusBoard,
    args: &Args,
) -> Result<Vec<(String, Option<Rollout>)>, PortError> {
    match (&args.pool, &args.cluster) {
        (Some(pool), _) => Ok(vec![(pool.clone(), board.read(pool).await?)]),
        (None, Some(cluster)) => Ok(board
            .read_cluster(cluster)
            .await?
            .into_iter()
            .map(|s| (s.pool.clone(), Some(s)))
            .collect()),
        (None, None) => Ok(Vec::new()),
    }
}

/// The last read and its verdicts, as the ops request `rollout` answers them.
fn answer(
    overall: &str,
    statuses: &[(String, Option<Rollout>)],
    verdicts: &[Verdict],
) -> serde_json::Value {
    let pools: Vec<serde_json::Value> = statuses
        .iter()
        .zip(verdicts)
        .map(|((pool, status), v)| {
            serde_json::json!({
                "pool": pool,
                "verdict": v.name(),
                "message": v.message(),
                "status": status,
            })
        })
        .collect();
    serde_json::json!({"verdict": overall, "pools": pools})
}

fn verdicts(args: &Args, statuses: &[(String, Option<Rollout>)], want: &Want) -> Vec<Verdict> {
    if statuses.is_empty() {
        return vec![Verdict::Waiting(format!(
            "no pool of cluster {} has a published status yet",
            args.cluster.as_deref().unwrap_or("?")
        ))];
    }
    statuses
        .iter()
        .map(|(pool, s)| rollout::judge_published(pool, s.as_ref(), want))
        .collect()
}
