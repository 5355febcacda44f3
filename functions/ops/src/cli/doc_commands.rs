//! The `nodecycle` commands README.md, CHANGELOG.md and docs/*.md show are commands of this
//! CLI: a renamed subcommand or flag breaks the suite, not the reader.
//!
//! * A command line of a shell block, or an inline code span, that starts with `nodecycle ` is
//!   parsed with [`Cli::try_parse_from`] (the block's `\` continuations joined, shell comments,
//!   pipes and redirections cut off).
//!   Every line of a shell block must parse.
//! * An inline span with placeholders (`<`, `[`, `|` or `...`), or one that does not parse, is
//!   a synopsis or a mention (`nodecycle plan`,
//!   `nodecycle stop|start`, `nodecycle simulate <POLICY_FILE>... [--from <RFC3339>]`): it must
//!   name subcommands of the CLI and only flags they have. A bare `nodecycle` names the CLI.
//! * docs/reference.md names every subcommand and every flag of each.

use std::collections::BTreeSet;
use std::path::PathBuf;

use clap::{CommandFactory, Parser};
use nodecycle_tests::docs::pages;

use super::Cli;

fn root() -> PathBuf {
    let dir = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    dir.join("../..")
}

/// The words of a shell command line up to a pipe, list operator or redirection, with the
/// leading `$ ` prompt and `VAR=value` assignments dropped; `None` unless the command is
/// `nodecycle`.
fn command_words(line: &str) -> Option<Vec<String>> {
    let line = line.trim().trim_start_matches("$ ");
    let words = shlex::split(line)?;
    let words: Vec<String> = words
        .into_iter()
        .skip_while(|w| {
            w.split_once('=').is_some_and(|(k, _)| {
                !k.is_empty() && k.chars().all(|c| c.is_ascii_uppercase() || c == '_')
            })
        })
        .take_while(|w| {
            !matches!(
                w.as_str(),
                "|" | "||" | "&&" | ";" | ">" | ">>" | "2>" | "2>&1" | "&"
            )
        })
        .collect();
    (words.first().map(String::as_str) == Some("nodecycle")).then_some(words)
}

/// Checks a synopsis: its first word after `nodecycle` is one subcommand or several joined by
/// `|`, and every `--flag` it names is a flag of one of them. Returns what is wrong.
fn check_synopsis(text: &str, mentioned: &mut BTreeSet<(String, String)>) -> Result<(), String> {
    let cli = Cli::command();
    let mut words = text.split_whitespace().skip(1);
    let Some(first) = words.next() else {
        return Ok(());
    };
    let names: Vec<&str> = first
        .split('|')
        .map(|n| n.trim_matches(|c: char| !c.is_ascii_alphanumeric() && c != '-'))
        .filter(|n| !n.is_empty() && *n != "...")
        .collect();
    let mut subcommands = Vec::new();
    for name in &names {
        let sub = cli
            .find_subcommand(name)
            .ok_or_else(|| format!("no subcommand {name:?}"))?;
        mentioned.insert((name.to_string(), String::new()));
        subcommands.push((name.to_string(), sub));
    }
    let mut words = words.peekable();
    // A command with subcommands of its own (`nodecycle policy get|diff|apply ...`).
    if let [(parent, sub)] = subcommands.as_slice()
        && sub.has_subcommands()
        && let Some(next) = words.peek()
    {
        let (parent, sub) = (parent.clone(), *sub);
        let mut nested = Vec::new();
        for n in next.split('|').filter(|n| !n.is_empty()) {
            let child = sub
                .find_subcommand(n)
                .ok_or_else(|| format!("no subcommand {parent} {n:?}"))?;
            let name = format!("{parent} {n}");
            mentioned.insert((name.clone(), String::new()));
            nested.push((name, child));
        }
        subcommands = nested;
        words.next();
    }
    let names: Vec<String> = subcommands.iter().map(|(n, _)| n.clone()).collect();
    for word in words {
        let Some(start) = word.find("--") else {
            continue;
        };
        let flag: String = word[start + 2..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
            .collect();
        if flag.is_empty() {
            continue;
        }
        // The global options (`--stack`, `--region`, `-o`, ...) go with every subcommand.
        if cli
            .get_arguments()
            .any(|a| a.is_global_set() && a.get_long() == Some(flag.as_str()))
        {
            mentioned.insert((String::new(), flag));
            continue;
        }
        let (owner, _) = subcommands
            .iter()
            .find(|(_, s)| {
                s.get_arguments()
                    .any(|a| a.get_long() == Some(flag.as_str()))
            })
            .ok_or_else(|| format!("--{flag} is no flag of {}", names.join("|")))?;
        mentioned.insert((owner.clone(), flag));
    }
    Ok(())
}

/// The subcommand and the long flags a parsed command line used.
fn used(words: &[String]) -> Vec<(String, String)> {
    let cli = Cli::command();
    let Some(name) = words.get(1) else {
        return Vec::new();
    };
    let Some(mut sub) = cli.find_subcommand(name) else {
        return Vec::new();
    };
    let mut out = vec![(name.clone(), String::new())];
    let mut name = name.clone();
    let mut rest = &words[2..];
    if let Some(child) = rest.first().and_then(|w| sub.find_subcommand(w)) {
        name = format!("{name} {}", child.get_name());
        out.push((name.clone(), String::new()));
        sub = child;
        rest = &rest[1..];
    }
    for w in rest {
        if let Some(flag) = w.strip_prefix("--") {
            let flag = flag.split('=').next().unwrap_or_default();
            if sub.get_arguments().any(|a| a.get_long() == Some(flag)) {
                out.push((name.clone(), flag.to_string()));
            } else if cli
                .get_arguments()
                .any(|a| a.is_global_set() && a.get_long() == Some(flag))
            {
                out.push((String::new(), flag.to_string()));
            }
        }
    }
    out
}

#[test]
fn every_nodecycle_command_in_the_docs_parses() {
    let root = root();
    let mut failures = Vec::new();
    let mut parsed = 0;
    let mut synopses = 0;
    let mut in_reference = BTreeSet::new();
    for page in pages(&root) {
        let reference = page.path.ends_with("reference.md");
        for code in page.code() {
            let at = format!("{}:{}", page.path.display(), code.line);
            let shown = code.text.trim().trim_start_matches("$ ");
            let Some(words) = command_words(&code.text) else {
                if !code.block && shown.starts_with("nodecycle ") {
                    failures.push(format!("{at}: `{}`: not a shell command line", code.text));
                }
                continue;
            };
            // An inline span with placeholders is a synopsis, never a command line (its
            // `[--flag` words would parse as positional arguments).
            let synopsis = !code.block
                && (['<', '[', '|'].iter().any(|c| code.text.contains(*c))
                    || code.text.contains("..."));
            let result = if synopsis {
                Err(clap::Error::new(clap::error::ErrorKind::InvalidValue))
            } else {
                Cli::try_parse_from(&words)
            };
            match result {
                Ok(_) => {
                    parsed += 1;
                    if reference {
                        in_reference.extend(used(&words));
                    }
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        clap::error::ErrorKind::DisplayHelp
                            | clap::error::ErrorKind::DisplayVersion
                    ) =>
                {
                    parsed += 1;
                }
                Err(e) => {
                    if code.block {
                        failures.push(format!("{at}: `{}`: {e}", code.text));
                        continue;
                    }
                    synopses += 1;
                    let mut mentioned = BTreeSet::new();
                    match check_synopsis(&code.text, &mut mentioned) {
                        Ok(()) => {
                            if reference {
                                in_reference.extend(mentioned);
                            }
                        }
                        Err(why) => failures.push(format!("{at}: `{}`: {why}", code.text)),
                    }
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "commands the docs show that the CLI refuses:\n{}",
        failures.join("\n")
    );
    assert!(
        parsed >= 25 && synopses >= 5,
        "only {parsed} commands and {synopses} synopses found"
    );

    // docs/reference.md names every subcommand and every flag.
    let mut missing = Vec::new();
    let cli = Cli::command();
    let mut all = Vec::new();
    for sub in cli.get_subcommands() {
        all.push((sub.get_name().to_string(), sub));
        for child in sub.get_subcommands() {
            all.push((format!("{} {}", sub.get_name(), child.get_name()), child));
        }
    }
    for arg in cli.get_arguments().filter(|a| a.is_global_set()) {
        if let Some(long) = arg.get_long()
            && !in_reference.contains(&(String::new(), long.to_string()))
        {
            missing.push(format!("nodecycle --{long} (a global option)"));
        }
    }
    for (name, sub) in all {
        if name == "help" || name.ends_with(" help") {
            continue;
        }
        if !in_reference.contains(&(name.clone(), String::new())) {
            missing.push(format!("nodecycle {name}"));
        }
        for arg in sub.get_arguments() {
            let Some(long) = arg.get_long() else { continue };
            if long == "help" || long == "version" {
                continue;
            }
            if !in_reference.contains(&(name.clone(), long.to_string())) {
                missing.push(format!("nodecycle {name} --{long}"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "docs/reference.md does not show: {}",
        missing.join(", ")
    );
}

#[test]
fn the_extraction_sees_what_a_reader_sees() {
    assert_eq!(
        command_words("NODECYCLE_TABLE=t nodecycle status prod/general | jq . # why"),
        Some(vec![
            "nodecycle".into(),
            "status".into(),
            "prod/general".into()
        ])
    );
    assert_eq!(command_words("aws ssm put-parameter --name x"), None);
    assert!(Cli::try_parse_from(["nodecycle", "statsu"]).is_err());
    let mut seen = BTreeSet::new();
    assert!(
        check_synopsis(
            "nodecycle budget <POLICY_FILE> --at <RFC3339> --nodes N",
            &mut seen
        )
        .is_ok()
    );
    assert!(check_synopsis("nodecycle budget <POLICY_FILE> --when <RFC3339>", &mut seen).is_err());
    assert!(check_synopsis("nodecycle stop|start|pause", &mut seen).is_ok());
    assert!(check_synopsis("nodecycle stop|halt", &mut seen).is_err());
}
