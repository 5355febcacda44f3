//! `nodecycle simulate <POLICY_FILE>... [--from T] [--days N] [--nodes N | --nodes <pool>=N ...]
//! [--rotation D] [--new-ami-at T] [--age D] [--failures <AMI|new>:<NODES>@<AFTER> ...]
//! [--svg FILE] [--html FILE]` and
//! `nodecycle simulate --live [<POOL>...] [--days N] [--svg FILE] [--html FILE]`.
//!
//! The forecast itself is `nodecycle::simulate` (pure); this file reads the inputs: policy files
//! and options, or with `--live` each pool's state exactly as `status` reads it
//! (`Planner::preview`: read-only, no lease, nothing written).

use std::collections::BTreeMap;

use chrono::{DateTime, TimeDelta, Utc};
use nodecycle::policy::{NodeGroup, Policy};
use nodecycle::simulate::{self, Failure, Forecast, ManagedStart, PoolStart, Settings};
use serde_json::json;

impl Args {
    /// Whether it reads a deployment (`--live`).
    pub fn reads_deployment(&self) -> bool {
        self.live
    }
}

/// Nodes per pool when `--nodes` does not say.
const DEFAULT_NODES: u32 = 6;

/// Arguments.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Policy files (YAML or JSON); with --live, pools (`<cluster>/<name>`; default every pool).
    #[arg(value_name = "POLICY_FILE|POOL")]
    inputs: Vec<String>,
    /// With --live: only the pools of this account (12 digits).
    #[arg(long, value_name = "ACCOUNT", requires = "live")]
    account: Option<String>,
    /// With --live: only the pools of this region (`--region` is the deployment's own).
    #[arg(
        long = "pool-region",
        id = "pool_region",
        value_name = "REGION",
        requires = "live"
    )]
    region: Option<String>,
    /// Forecast the live fleet from now: each pool's nodes, rotations and desired AMI as
    /// `status` reads them (read-only).
    #[arg(long)]
    live: bool,
    /// Start of the forecast (RFC 3339; default now, rounded down to the minute).
    #[arg(long, value_parser = super::budget::parse_instant, conflicts_with = "live")]
    from: Option<DateTime<Utc>>,
    /// Days forecast (1 to 31).
    #[arg(long, default_value_t = 7, value_parser = clap::value_parser!(u32).range(1..=31))]
    days: u32,
    /// Nodes per pool: N for every pool, or <cluster>/<name>=N for one (repeat); default 6.
    #[arg(long = "nodes", value_name = "N|POOL=N", conflicts_with = "live")]
    nodes: Vec<String>,
    /// Time from a rotation's start to its done, and of one node group update wave (whole
    /// minutes).
    #[arg(long, default_value = "10m", value_parser = parse_duration)]
    rotation: TimeDelta,
    /// When the desired AMI of every pool changes (RFC 3339; default --from).
    #[arg(long, value_parser = super::budget::parse_instant, conflicts_with = "live")]
    new_ami_at: Option<DateTime<Utc>>,
    /// Age of the nodes at --from (drives expireAfter); default 0s.
    #[arg(long, value_parser = parse_duration, conflicts_with = "live")]
    age: Option<TimeDelta>,
    /// A release that fails: <AMI|new>:<NODES>@<AFTER> (e.g. new:3@2h): in each pool, the
    /// first NODES nodes that join on it turn unhealthy AFTER joining; the forecast shows the
    /// indictment and the rollback. `new` is the synthetic new AMI (ami-new), `current` the
    /// one the nodes start on. Repeat for several AMIs. Policy files only (not with --live).
    #[arg(
        long = "failures",
        value_name = "AMI:NODES@AFTER",
        value_parser = parse_failure,
        conflicts_with = "live"
    )]
    failures: Vec<Failure>,
    /// Also draw the forecast as an SVG file.
    #[arg(long, value_name = "FILE")]
    svg: Option<String>,
    /// Also write a self-contained HTML page (the SVG, a legend, hover details).
    #[arg(long, value_name = "FILE")]
    html: Option<String>,
}

/// `--failures <AMI|new|current>:<NODES>@<AFTER>`: the AMI (`new` is [`simulate::NEW_AMI`],
/// `current` [`simulate::CURRENT_AMI`], else an `ami-` id), at least 1 node, a duration.
fn parse_failure(s: &str) -> Result<Failure, String> {
    let expected = "expected <AMI|new>:<NODES>@<AFTER>, e.g. new:3@2h or ami-0abc:1@30m";
    let (ami, rest) = s
        .rsplit_once(':')
        .ok_or_else(|| format!("{s:?} has no ':'; {expected}"))?;
    let (nodes, after) = rest
        .split_once('@')
        .ok_or_else(|| format!("{s:?} has no '@'; {expected}"))?;
    let ami = match ami.trim() {
        "new" => simulate::NEW_AMI.to_string(),
        "current" => simulate::CURRENT_AMI.to_string(),
        a if a.starts_with("ami-") && a.len() > 4 => a.to_string(),
        a => {
            return Err(format!(
                "{a:?} is not an AMI; expected new, current or an ami- id ({expected})"
            ));
        }
    };
    let nodes = match nodes.trim().parse::<u32>() {
        Ok(n) if n > 0 => n,
        _ => {
            return Err(format!(
                "NODES {nodes:?} is not a number of nodes of at least 1; {expected}"
            ));
        }
    };
    let after = parse_duration(after.trim())
        .map_err(|e| format!("AFTER {after:?} is not a duration ({e}); {expected}"))?;
    Ok(Failure { ami, nodes, after })
}

fn parse_duration(s: &str) -> Result<TimeDelta, String> {
    let d = nodecycle::duration::parse(s)?;
    TimeDelta::from_std(d).map_err(|e| format!("{s}: {e}"))
}

/// Bad input: `{"error"}` on stdout, exit 2.
fn refuse(message: String) -> u8 {
    super::print_json(&json!({ "error": message }));
    2
}

/// Prints the forecast `{"from", "to", "pools": [...]}` and writes the pictures asked for.
/// Exit 2 on bad input (invalid policies as `validate` reports them, an unknown pool), 1 when
/// the live state cannot be read or a file cannot be written.
pub async fn run(args: Args) -> u8 {
    let settings = Settings {
        from: args.from.unwrap_or_else(Utc::now),
        days: args.days,
        rotation: args.rotation,
        failures: args.failures.clone(),
    };
    if let Err(e) = settings.check() {
        return refuse(format!("--{e}"));
    }
    let pools = if args.live {
        let only = (args.account.as_deref(), args.region.as_deref());
        match live(&args.inputs, only, settings.from).await {
            Ok(p) => p,
            Err(code) => return code,
        }
    } else {
        match from_files(&args, &settings) {
            Ok(p) => p,
            Err(code) => return code,
        }
    };
    let forecast = simulate::simulate(pools, &settings);
    if let Err(code) = write_pictures(&args, &forecast) {
        return code;
    }
    match serde_json::to_value(&forecast) {
        Ok(v) => {
            super::print_json(&v);
            0
        }
        Err(e) => {
            super::print_json(&json!({ "error": e.to_string() }));
            1
        }
    }
}

fn write_pictures(args: &Args, forecast: &Forecast) -> Result<(), u8> {
    let files = [
        (
            args.svg.as_ref(),
            simulate::picture::svg as fn(&Forecast) -> String,
        ),
        (args.html.as_ref(), simulate::picture::html),
    ];
    for (path, draw) in files {
        let Some(path) = path else { continue };
        if let Err(e) = std::fs::write(path, draw(forecast)) {
            super::print_json(&json!({ "error": format!("cannot write {path}: {e}") }));
            return Err(1);
        }
    }
    Ok(())
}

/// Synthetic pools from policy files and the options.
fn from_files(args: &Args, settings: &Settings) -> Result<Vec<PoolStart>, u8> {
    if args.inputs.is_empty() {
        return Err(refuse(
            "no policy file given (or --live for the live fleet)".into(),
        ));
    }
    let mut policies: Vec<Policy> = Vec::new();
    let mut invalid = false;
    for path in &args.inputs {
        match super::load_policy(path) {
            Ok(p) => policies.push(p),
            Err(_) => invalid = true,
        }
    }
    if invalid {
        return Err(2);
    }
    let mut seen = BTreeMap::new();
    for (p, path) in policies.iter().zip(&args.inputs) {
        if let Some(other) = seen.insert(p.pool_id(), path) {
            return Err(refuse(format!(
                "pool {} is defined by both {other} and {path}",
                p.pool_id()
            )));
        }
    }
    let counts = node_counts(&args.nodes, &policies).map_err(refuse)?;
    let from = simulate::floor_minute(settings.from);
    let age = args.age.unwrap_or_else(TimeDelta::zero);
    let new_ami_at = args.new_ami_at.unwrap_or(from);
    Ok(policies
        .into_iter()
        .map(|p| {
            let n = counts.get(&p.pool_id()).copied().unwrap_or(DEFAULT_NODES);
            let note = age_note(&p, args.age);
            let mut start = PoolStart::synthetic(p, n, from, age, new_ami_at);
            start.notes.extend(note);
            start
        })
        .collect())
}

/// The warning for a policy with `expireAfter` forecast without `--age`: every node starts new,
/// so the forecast shows no expiry, whatever the real nodes' ages.
fn age_note(policy: &Policy, age: Option<TimeDelta>) -> Option<String> {
    let expire = policy.expire_after?;
    if age.is_some_and(|a| a > TimeDelta::zero()) {
        return None;
    }
    let note = format!(
        "--age is 0: every node starts new, so none reaches expireAfter {} in this forecast; \
         pass --age with the age of your oldest nodes (e.g. --age 1000h) to see expiry",
        nodecycle::duration::format(expire)
    );
    eprintln!("warning: {}: {note}", policy.pool_id());
    Some(note)
}

/// `--nodes` values: `N` for every pool, `<pool>=N` for one; unknown pools are named.
fn node_counts(values: &[String], policies: &[Policy]) -> Result<BTreeMap<String, u32>, String> {
    let known: Vec<String> = policies.iter().map(Policy::pool_id).collect();
    let number = |text: &str, value: &str| {
        text.trim().parse::<u32>().map_err(|_| {
            format!("--nodes {value}: {text:?} is not a number of nodes; expected N or <cluster>/<name>=N")
        })
    };
    let mut default = None;
    let mut out = BTreeMap::new();
    for v in values {
        match v.split_once('=') {
            None => default = Some(number(v, v)?),
            Some((pool, n)) => {
                if !known.iter().any(|k| k == pool) {
                    return Err(format!(
                        "--nodes {v}: unknown pool {pool:?}; the policies define {}",
                        known.join(", ")
                    ));
                }
                out.insert(pool.to_string(), number(n, v)?);
            }
        }
    }
    if let Some(d) = default {
        for k in known {
            out.entry(k).or_insert(d);
        }
    }
    Ok(out)
}

/// Each pool's state as `status` reads it (the rotator's `preview`: snapshot and, for a managed
/// node group, its update record as `DescribeUpdate` reports it now, without writing it), plus
/// the node group's status. Read-only: no lease, no write.
async fn live(
    pools: &[String],
    (account, region): (Option<&str>, Option<&str>),
    now: DateTime<Utc>,
) -> Result<Vec<PoolStart>, u8> {
    nodecycle::wiring::init_logging();
    let fail = |e: String| {
        super::print_json(&json!({ "error": e }));
        1
    };
    let wiring = nodecycle::wiring::RotatorConfig::from_lookup(&super::target::env)
        .map_err(|e| fail(e.message))?;
    let rotator = wiring.rotator(&super::target::runtime().await.map_err(fail)?);
    let docs = rotator
        .cell
        .documents()
        .await
        .map_err(|e| fail(e.message))?;
    let mut policies = Vec::new();
    for doc in docs {
        let parsed = nodecycle::policy::parse_document(&doc);
        match parsed.policy {
            Some(p) => policies.push(p),
            None => eprintln!(
                "{}: invalid policy skipped (nodecycle validate lists its problems)",
                doc.source
            ),
        }
    }
    policies.sort_by_key(Policy::pool_id);
    if let Some(unknown) = pools
        .iter()
        .find(|p| !policies.iter().any(|x| &x.pool_id() == *p))
    {
        let known: Vec<String> = policies.iter().map(Policy::pool_id).collect();
        return Err(refuse(format!(
            "unknown pool {unknown:?}; the policies define {}",
            known.join(", ")
        )));
    }
    policies.retain(|p| pools.is_empty() || pools.contains(&p.pool_id()));
    if let Some(bad) = account.filter(|a| !nodecycle::policy::place::is_account(a)) {
        return Err(refuse(format!(
            "--account {bad:?} is not an account id; expected 12 digits"
        )));
    }
    if let Some(bad) = region.filter(|r| !nodecycle::policy::place::is_region(r)) {
        return Err(refuse(format!(
            "--region {bad:?} is not a region name; expected one such as eu-west-1"
        )));
    }
    let cell = rotator.cell.members.cell().await.ok();
    policies
        .retain(|p| nodecycle::members::selected(p.place.as_ref(), cell.as_ref(), account, region));
    let mut out = Vec::new();
    for policy in policies {
        let pool = policy.pool_id();
        let rotator = rotator
            .at(policy.place.as_ref())
            .await
            .map_err(|e| fail(format!("{pool}: {e}")))?;
        let kube = rotator
            .ports
            .kube
            .connect(&policy.cluster)
            .await
            .map_err(|e| {
                fail(format!(
                    "{pool}: cluster {} unreachable: {e}",
                    policy.cluster
                ))
            })?;
        let (snapshot, preview) = rotator
            .planner()
            .preview(&policy, kube.as_ref(), now)
            .await
            .map_err(|e| fail(format!("{pool}: {e}")))?;
        let managed = match (&policy.node_group, preview) {
            (
                NodeGroup::ManagedNodeGroup(name),
                nodecycle::handlers::rotator::Preview::Managed { record, .. },
            ) => {
                let group = rotator
                    .ports
                    .managed
                    .describe(&policy.cluster, name)
                    .await
                    .map_err(|e| fail(format!("{pool}: {e}")))?;
                Some(ManagedStart {
                    status: group.status,
                    update: record,
                })
            }
            _ => None,
        };
        // The release the pool runs and its soak under way, so that a pool promoting from it
        // is forecast to take what it will prove (and one promoting from another, to wait).
        let release = rotator
            .cell
            .state
            .pool(&pool)
            .await
            .map_err(|e| fail(format!("{pool}: {e}")))?
            .map(|r| r.release_state())
            .unwrap_or_default();
        // A paused pool is forecast as if resumed: what resuming it would do is the question
        // (a forecast of a pause is empty). Halts and stops stay: they need more than a resume.
        let mut snapshot = snapshot;
        let notes = snapshot
            .gates
            .paused
            .take()
            .map(|why| {
                vec![format!(
                    "paused ({why}): forecast as if resumed now; nothing starts until it is"
                )]
            })
            .unwrap_or_default();
        out.push(PoolStart {
            snapshot,
            managed,
            desired_change: None,
            notes,
            release,
        });
    }
    Ok(out)
}
