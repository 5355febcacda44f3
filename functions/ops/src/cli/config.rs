//! `nodecycle config use NAME [--stack S --region R --profile P] | list | current | delete NAME`:
//! the contexts of the config file ([`super::target::ConfigFile`]), as kubectl keeps clusters.

use serde_json::json;

use super::target::{ConfigFile, Context, Global};

/// Arguments.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: ConfigCommand,
}

#[derive(Debug, clap::Subcommand)]
enum ConfigCommand {
    /// Select context NAME for later commands; with --stack and --region (and --profile),
    /// create it or change it first.
    Use {
        /// The context.
        #[arg(value_name = "NAME")]
        name: String,
    },
    /// Every context, the current one marked.
    List,
    /// The current context.
    Current,
    /// Remove context NAME.
    Delete {
        /// The context.
        #[arg(value_name = "NAME")]
        name: String,
    },
}

/// Runs a `config` subcommand: exit 0, 1 when the file cannot be read or written, 2 for a
/// context that does not exist or lacks a stack or region.
pub fn run(args: Args, global: &Global) -> u8 {
    let mut file = match ConfigFile::load() {
        Ok(f) => f,
        Err(e) => {
            eprintln!("nodecycle config: {e}");
            return 1;
        }
    };
    let output = global.output.unwrap_or_default();
    match args.command {
        ConfigCommand::Use { name } => {
            let existing = file.context(&name).cloned();
            let stack = global
                .stack
                .clone()
                .or(existing.as_ref().map(|c| c.stack.clone()));
            let region = global
                .region
                .clone()
                .or(existing.as_ref().map(|c| c.region.clone()));
            let (Some(stack), Some(region)) = (stack, region) else {
                eprintln!(
                    "nodecycle config: no context {name:?} yet; create it with `nodecycle config use {name} --stack STACK --region REGION`"
                );
                return 2;
            };
            let context = Context {
                name: name.clone(),
                stack,
                region,
                profile: global.profile.clone().or(existing.and_then(|c| c.profile)),
            };
            match file.contexts.iter_mut().find(|c| c.name == name) {
                Some(c) => *c = context.clone(),
                None => file.contexts.push(context.clone()),
            }
            file.current_context = Some(name);
            match file.save() {
                Ok(path) => {
                    let v = json!({"current": context, "file": path.display().to_string()});
                    super::output::print(&v, output, |_| {
                        format!(
                            "Switched to context {:?} (stack {} in {}{}), saved in {}",
                            context.name,
                            context.stack,
                            context.region,
                            context
                                .profile
                                .as_ref()
                                .map(|p| format!(", profile {p}"))
                                .unwrap_or_default(),
                            path.display()
                        )
                    });
                    0
                }
                Err(e) => {
                    eprintln!("nodecycle config: {e}");
                    1
                }
            }
        }
        ConfigCommand::List => {
            let rows: Vec<serde_json::Value> = file
                .contexts
                .iter()
                .map(|c| {
                    json!({
                        "current": file.current_context.as_deref() == Some(c.name.as_str()),
                        "name": c.name, "stack": c.stack, "region": c.region, "profile": c.profile,
                    })
                })
                .collect();
            let v = json!({"contexts": rows});
            super::output::print(&v, output, |_| {
                super::output::columns(
                    &["CURRENT", "NAME", "STACK", "REGION", "PROFILE"],
                    file.contexts
                        .iter()
                        .map(|c| {
                            vec![
                                if file.current_context.as_deref() == Some(c.name.as_str()) {
                                    "*".to_string()
                                } else {
                                    String::new()
                                },
                                c.name.clone(),
                                c.stack.clone(),
                                c.region.clone(),
                                c.profile.clone().unwrap_or_default(),
                            ]
                        })
                        .collect(),
                )
            });
            0
        }
        ConfigCommand::Current => match file
            .current_context
            .as_deref()
            .and_then(|n| file.context(n))
        {
            Some(c) => {
                super::output::print(&json!(c), output, |_| c.name.clone());
                0
            }
            None => {
                eprintln!(
                    "nodecycle config: no current context; select one with `nodecycle config use NAME`"
                );
                2
            }
        },
        ConfigCommand::Delete { name } => {
            if file.context(&name).is_none() {
                eprintln!("nodecycle config: no context {name:?}");
                return 2;
            }
            file.contexts.retain(|c| c.name != name);
            if file.current_context.as_deref() == Some(name.as_str()) {
                file.current_context = None;
            }
            match file.save() {
                Ok(_) => {
                    super::output::print(&json!({"deleted": name}), output, |_| {
                        format!("Deleted context {name:?}")
                    });
                    0
                }
                Err(e) => {
                    eprintln!("nodecycle config: {e}");
                    1
                }
            }
        }
    }
}
