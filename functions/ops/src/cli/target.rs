//! Which deployment a command acts on, and how it prints: the global options (`--context`,
//! `--stack`, `--region`, `--profile`, `--local`, `-o`), the contexts of the config file
//! (`nodecycle config`), and the stack's outputs.
//!
//! Resolution, first found wins:
//! - the context: `--context`, else `NODECYCLE_CONTEXT`, else the config file's current one;
//! - the stack: `--stack`, else `NODECYCLE_STACK`, else the context's;
//! - the region and profile: `--region`/`--profile`, else the context's (when the stack is the
//!   context's), else the AWS environment (`AWS_REGION`, `AWS_PROFILE`, `~/.aws/config`).
//!
//! With a stack, its outputs give the state table (`StateTableName`), the policy prefix
//! (`PolicyPrefix`) and the ops function (`OpsFunctionName`); they take the place of
//! `NODECYCLE_TABLE` and `NODECYCLE_POLICY_PREFIX` ([`env`]). The target is resolved once per
//! process, before the command runs ([`init`]).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::OnceLock;

use serde::{Deserialize, Serialize};

/// The environment variable naming a context (like `--context`).
pub const CONTEXT_ENV: &str = "NODECYCLE_CONTEXT";
/// The environment variable naming the config file.
pub const CONFIG_ENV: &str = "NODECYCLE_CONFIG";
/// Attempts per AWS call from the CLI (the functions make more): a wrong endpoint or missing
/// network fails in seconds.
pub const CLI_ATTEMPTS: u32 = 3;

/// Options every command takes.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct Global {
    /// The context to use (`nodecycle config use NAME`); default: $NODECYCLE_CONTEXT, else the
    /// config file's current context.
    #[arg(long, global = true, value_name = "NAME")]
    pub context: Option<String>,
    /// The deployment's CloudFormation stack: its outputs name the table, the policy prefix and
    /// the ops function. Default: $NODECYCLE_STACK, else the context's.
    #[arg(long, global = true, value_name = "NAME")]
    pub stack: Option<String>,
    /// The deployment's region. Default: the context's, else AWS_REGION or the profile's.
    #[arg(long, global = true, value_name = "REGION")]
    pub region: Option<String>,
    /// The AWS profile (~/.aws/config) to act with. Default: the context's, else AWS_PROFILE.
    #[arg(long, global = true, value_name = "NAME")]
    pub profile: Option<String>,
    /// Operator commands: run the ops code in this process with your own credentials (the
    /// table and every cluster), instead of invoking the deployed ops function.
    #[arg(long, global = true)]
    pub local: bool,
    /// Output format: table (for people; the default of the operator commands), json (for
    /// scripts; the default of budget, plan and resolve), yaml.
    #[arg(short = 'o', long, global = true, value_enum, value_name = "FORMAT")]
    pub output: Option<Output>,
}

/// An output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Output {
    /// Aligned columns and `key: value` lines.
    #[default]
    Table,
    /// The JSON object (stable for scripts).
    Json,
    /// The same object as YAML.
    Yaml,
}

/// One context of the config file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Context {
    /// Its name.
    pub name: String,
    /// The stack.
    pub stack: String,
    /// The stack's region.
    pub region: String,
    /// The AWS profile to act with, if not the environment's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
}

/// The config file (`$NODECYCLE_CONFIG`, else `$XDG_CONFIG_HOME/nodecycle/config.yaml`, else
/// `~/.config/nodecycle/config.yaml`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct ConfigFile {
    /// The context used when none is named.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_context: Option<String>,
    /// Every context.
    #[serde(default)]
    pub contexts: Vec<Context>,
}

impl ConfigFile {
    /// Where it is read from and written to; `None` without `$HOME` and the variables.
    pub fn path() -> Option<PathBuf> {
        let var = |n: &str| std::env::var_os(n).filter(|v| !v.is_empty());
        if let Some(p) = var(CONFIG_ENV) {
            return Some(PathBuf::from(p));
        }
        let base = var("XDG_CONFIG_HOME")
            .map(PathBuf::from)
            .or_else(|| var("HOME").map(|h| PathBuf::from(h).join(".config")))?;
        Some(base.join("nodecycle").join("config.yaml"))
    }

    /// The file's contents (empty when it does not exist); the error names the file and the
    /// problem.
    pub fn load() -> Result<ConfigFile, String> {
        let Some(path) = Self::path() else {
            return Ok(ConfigFile::default());
        };
        match std::fs::read_to_string(&path) {
            Ok(text) => serde_norway::from_str::<Option<ConfigFile>>(&text)
                .map(Option::unwrap_or_default)
                .map_err(|e| format!("{}: {e}", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(ConfigFile::default()),
            Err(e) => Err(format!("{}: cannot read: {e}", path.display())),
        }
    }

    /// Writes the file (creating its directory).
    pub fn save(&self) -> Result<PathBuf, String> {
        let path = Self::path()
            .ok_or("no place for the config file: set HOME, XDG_CONFIG_HOME or NODECYCLE_CONFIG")?;
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)
                .map_err(|e| format!("{}: cannot create: {e}", dir.display()))?;
        }
        let text = serde_norway::to_string(self).map_err(|e| e.to_string())?;
        std::fs::write(&path, text)
            .map_err(|e| format!("{}: cannot write: {e}", path.display()))?;
        Ok(path)
    }

    /// The context named `name`.
    pub fn context(&self, name: &str) -> Option<&Context> {
        self.contexts.iter().find(|c| c.name == name)
    }
}

/// Where commands point, resolved from the options, the environment and the config file.
#[derive(Debug, Clone, Default)]
pub struct Target {
    /// The stack, if any.
    pub stack: Option<String>,
    /// The region given (`None`: the AWS environment's).
    pub region: Option<String>,
    /// The profile given (`None`: the AWS environment's).
    pub profile: Option<String>,
    /// `--local`.
    pub local: bool,
    /// `-o`, when given ([`Target::output_or`]).
    pub output: Option<Output>,
    /// The stack's outputs, once read ([`load_stack`]).
    pub outputs: Option<BTreeMap<String, String>>,
}

impl Target {
    /// From the options, `lookup` (the process environment) and `file`; the error says which
    /// context is missing and what exists.
    pub fn resolve(
        g: &Global,
        lookup: &dyn Fn(&str) -> Option<String>,
        file: &ConfigFile,
    ) -> Result<Target, String> {
        let named = g
            .context
            .clone()
            .or_else(|| lookup(CONTEXT_ENV).filter(|c| !c.trim().is_empty()));
        let context = match &named {
            Some(name) => Some(file.context(name).ok_or_else(|| {
                let known: Vec<&str> = file.contexts.iter().map(|c| c.name.as_str()).collect();
                format!(
                    "no context {name:?} in {}; known: {}; add it with `nodecycle config use {name} --stack STACK --region REGION`",
                    ConfigFile::path().map_or_else(|| "the config file".into(), |p| p.display().to_string()),
                    if known.is_empty() { "none".to_string() } else { known.join(", ") }
                )
            })?),
            None => file
                .current_context
                .as_deref()
                .and_then(|name| file.context(name)),
        };
        let env_stack = lookup(nodecycle::doctor::STACK_ENV).filter(|s| !s.trim().is_empty());
        let stack = g.stack.clone().or(env_stack);
        // The context's region and profile go with the context's stack only.
        let context = context.filter(|c| stack.as_ref().is_none_or(|s| *s == c.stack));
        Ok(Target {
            stack: stack.or_else(|| context.map(|c| c.stack.clone())),
            region: g
                .region
                .clone()
                .or_else(|| context.map(|c| c.region.clone())),
            profile: g
                .profile
                .clone()
                .or_else(|| context.and_then(|c| c.profile.clone())),
            local: g.local,
            output: g.output,
            outputs: None,
        })
    }

    /// The output format: `-o`, else the command's `default` (a table for the operator
    /// commands, JSON for those documented as JSON: budget, plan, resolve).
    pub fn output_or(&self, default: Output) -> Output {
        self.output.unwrap_or(default)
    }

    /// A variable as commands read it: the stack's outputs in place of `NODECYCLE_TABLE` and
    /// `NODECYCLE_POLICY_PREFIX`, else the process environment.
    pub fn var(&self, name: &str) -> Option<String> {
        let output = match name {
            nodecycle::state::TABLE_ENV => "StateTableName",
            nodecycle::policy::source::PREFIX_ENV => "PolicyPrefix",
            _ => "",
        };
        self.outputs
            .as_ref()
            .and_then(|o| o.get(output))
            .filter(|v| !v.is_empty())
            .cloned()
            .or_else(|| std::env::var(name).ok())
    }
}

static TARGET: OnceLock<Target> = OnceLock::new();

/// Sets the process's target (once; later calls are ignored).
pub fn init(target: Target) {
    let _ = TARGET.set(target);
}

/// The process's target (the default one before [`init`]: the environment's).
pub fn get() -> &'static Target {
    TARGET.get_or_init(Target::default)
}

/// [`Target::var`] of the process's target.
pub fn env(name: &str) -> Option<String> {
    get().var(name)
}

/// The SDK configuration for the target: its region and profile, [`CLI_ATTEMPTS`] per call.
/// The error says how to give a region when there is none.
pub async fn sdk() -> Result<aws_config::SdkConfig, String> {
    let t = get();
    let config =
        nodecycle::aws::load_config_with(t.region.as_deref(), t.profile.as_deref(), CLI_ATTEMPTS)
            .await;
    if config.region().is_none() {
        return Err(no_region());
    }
    Ok(config)
}

/// What to do when no region is known.
pub fn no_region() -> String {
    "no AWS region: pass --region REGION, select a context (`nodecycle config use NAME --stack STACK --region REGION`), or set AWS_REGION (or AWS_PROFILE to a profile with a region)".into()
}

/// The runtime the in-process commands build their adapters from ([`sdk`], no metrics).
pub async fn runtime() -> Result<nodecycle::wiring::Runtime, String> {
    Ok(nodecycle::wiring::Runtime {
        sdk: sdk().await?,
        metrics: std::sync::Arc::new(nodecycle::metrics::NoMetrics),
    })
}

/// Reads the stack's outputs into the target when it names a stack; `Ok(None)` when it names
/// none. The error says what is wrong: no region, a stack that does not exist there, or the
/// AWS failure.
pub async fn load_stack(target: &mut Target) -> Result<Option<&BTreeMap<String, String>>, String> {
    use nodecycle::inventory::StackOutputs as _;
    let Some(stack) = target.stack.clone() else {
        return Ok(None);
    };
    let config = nodecycle::aws::load_config_with(
        target.region.as_deref(),
        target.profile.as_deref(),
        CLI_ATTEMPTS,
    )
    .await;
    let Some(region) = config.region().map(|r| r.to_string()) else {
        return Err(no_region());
    };
    let stacks = nodecycle::aws::cloudformation::Stacks::from_config(&config);
    match stacks.outputs(&stack).await {
        Ok(Some(outputs)) => {
            target.outputs = Some(outputs);
            Ok(target.outputs.as_ref())
        }
        Ok(None) => Err(format!(
            "stack {stack:?} does not exist in {region}: check --stack and --region (or the context: `nodecycle config list`)"
        )),
        Err(e) => Err(format!(
            "cannot read stack {stack:?} in {region}: {}",
            super::policy::aws_error(&e)
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file() -> ConfigFile {
        ConfigFile {
            current_context: Some("prod".into()),
            contexts: vec![
                Context {
                    name: "prod".into(),
                    stack: "nodecycle".into(),
                    region: "eu-west-1".into(),
                    profile: Some("prod-admin".into()),
                },
                Context {
                    name: "test".into(),
                    stack: "nodecycle-test".into(),
                    region: "us-east-2".into(),
                    profile: None,
                },
            ],
        }
    }

    fn resolve(g: Global, env: &[(&str, &str)]) -> Result<Target, String> {
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let lookup = move |n: &str| env.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone());
        Target::resolve(&g, &lookup, &file())
    }

    #[test]
    fn flags_win_over_the_environment_and_the_context() {
        let t = resolve(Global::default(), &[]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            (
                t.stack.as_deref(),
                t.region.as_deref(),
                t.profile.as_deref()
            ),
            (Some("nodecycle"), Some("eu-west-1"), Some("prod-admin"))
        );
        let named = Global {
            context: Some("test".into()),
            ..Global::default()
        };
        let t = resolve(named, &[]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(t.stack.as_deref(), Some("nodecycle-test"));
        let t =
            resolve(Global::default(), &[(CONTEXT_ENV, "test")]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(t.region.as_deref(), Some("us-east-2"));
        // Another stack than the context's: the context's region and profile do not apply.
        let other = Global {
            stack: Some("elsewhere".into()),
            ..Global::default()
        };
        let t = resolve(other, &[]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            (t.stack.as_deref(), t.region.as_deref(), t.profile),
            (Some("elsewhere"), None, None)
        );
        let t = resolve(Global::default(), &[("NODECYCLE_STACK", "from-env")])
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            (t.stack.as_deref(), t.region.as_deref()),
            (Some("from-env"), None)
        );
        let flags = Global {
            stack: Some("nodecycle".into()),
            region: Some("ap-south-1".into()),
            ..Global::default()
        };
        let t = resolve(flags, &[]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(t.region.as_deref(), Some("ap-south-1"));
    }

    #[test]
    fn an_unknown_context_is_refused_with_the_known_ones() {
        let g = Global {
            context: Some("staging".into()),
            ..Global::default()
        };
        let e = resolve(g, &[]).err().unwrap_or_default();
        assert!(
            e.contains("\"staging\"")
                && e.contains("prod, test")
                && e.contains("config use staging"),
            "{e}"
        );
    }

    #[test]
    fn stack_outputs_take_the_place_of_the_table_and_prefix_variables() {
        let t = Target {
            outputs: Some(BTreeMap::from([
                (
                    "StateTableName".to_string(),
                    "nodecycle-StateTable-1".to_string(),
                ),
                ("PolicyPrefix".to_string(), "/acme/pools/".to_string()),
            ])),
            ..Target::default()
        };
        assert_eq!(
            t.var(nodecycle::state::TABLE_ENV).as_deref(),
            Some("nodecycle-StateTable-1")
        );
        assert_eq!(
            t.var(nodecycle::policy::source::PREFIX_ENV).as_deref(),
            Some("/acme/pools/")
        );
    }

    #[test]
    fn the_config_file_round_trips_and_refuses_unknown_fields() {
        let text = serde_norway::to_string(&file()).unwrap_or_default();
        let back: ConfigFile = serde_norway::from_str(&text).unwrap_or_default();
        assert_eq!(back, file());
        assert!(
            serde_norway::from_str::<ConfigFile>(
                "contexts: [{name: a, stack: s, region: r, cluster: x}]"
            )
            .is_err()
        );
    }
}
