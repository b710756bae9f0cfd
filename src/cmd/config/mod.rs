//! Where every option's value comes from: the command line, then `PAGEVAULT_<OPTION>`
//! variables, then the configuration file's stanza and top level, then the default.
//!
//! One mechanism for every command: each option with a long name gets its variable
//! (clap's `env`), a first lenient parse says which options the command line and the
//! environment left unset, the file's values for those are appended as `--option=value`
//! and the arguments are parsed again, so clap checks a file's value as it checks a typed
//! one. `--show-config` prints the result with each value's origin.

mod file;
mod repos;
mod stores;

pub use file::{ConfigFile, Known, DEFAULT_PATH};
pub use repos::RepoEntry;
pub use stores::RepoOptions;

use anyhow::{bail, Result};
use clap::parser::ValueSource;
use clap::{ArgMatches, Command};
use serde::Serialize;
use std::ffi::OsString;

/// Options that mean different things to different commands, or name one run: never
/// taken from a variable or a file.
const PER_RUN: &[&str] = &[
    "to",
    "from",
    "help",
    "version",
    "config",
    "show-config",
    "repo-index",
];

/// Options a file gives a command only from its own `[stanza.NAME.COMMAND]` table:
/// `status --spool` is the async spool, the stanza's `spool` a backup's SQLite one
/// (status finds the stanza's archive-push spool itself).
const OWN_TABLE_ONLY: &[(&str, &str)] = &[("status", "spool")];

/// Options a command takes from the command line and its variable only: `backup
/// --to-repo` picks among the stanza's repositories before the file is read (a file's
/// `to-repo` is `copy`'s destination).
const NOT_FROM_FILE: &[(&str, &str)] = &[("backup", "to-repo")];

/// The variable of an option: `--max-transfer-size` is `PAGEVAULT_MAX_TRANSFER_SIZE`.
pub fn env_name(long: &str) -> String {
    format!("PAGEVAULT_{}", long.replace('-', "_").to_uppercase())
}

/// Every option of every command given its `PAGEVAULT_*` variable.
pub fn with_env(cmd: Command) -> Command {
    cmd.mut_args(|a| match a.get_long() {
        Some(l) if !a.is_hide_set() && !PER_RUN.contains(&l) && a.get_env().is_none() => {
            let name = env_name(l);
            let a = a.env(name).hide_env_values(true);
            // A switch's variable reads 1/0, yes/no, on/off, true/false.
            match a.get_action() {
                clap::ArgAction::SetTrue => {
                    a.value_parser(clap::builder::BoolishValueParser::new())
                }
                _ => a,
            }
        }
        _ => a,
    })
    .mut_subcommands(with_env)
}

/// One option's effective value and where it came from.
#[derive(Debug, Clone, Serialize)]
pub struct Setting {
    pub option: String,
    /// The values as given (several for a repeated option); empty when unset.
    pub values: Vec<String>,
    /// cli, env:VARIABLE, file:STANZA, file:STANZA.COMMAND, file:global, default, or unset.
    pub origin: String,
}

/// The configuration a command runs with (what `--show-config` prints).
#[derive(Debug, Clone, Serialize)]
pub struct Effective {
    pub command: String,
    pub config_file: Option<String>,
    pub stanza: Option<String>,
    pub settings: Vec<Setting>,
    /// The stanza's repositories, for a command that takes one or several.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub repositories: Vec<RepoEntry>,
}

/// Why the arguments could not be parsed: clap's own error (usage, --help, --version),
/// or the configuration (a file refused, a stanza that is not there).
pub enum Failure {
    Usage(clap::Error),
    Config(anyhow::Error),
}

/// The path of the leaf subcommand (`key rotate`) and its matches.
fn leaf(m: &ArgMatches) -> (Vec<String>, &ArgMatches) {
    let mut names = Vec::new();
    let mut cur = m;
    while let Some((name, sub)) = cur.subcommand() {
        names.push(name.to_string());
        cur = sub;
    }
    (names, cur)
}

fn leaf_command<'a>(root: &'a Command, path: &[String]) -> &'a Command {
    let mut c = root;
    for n in path {
        c = c.find_subcommand(n).expect("a matched subcommand exists");
    }
    c
}

/// The options a command takes: its own, then the global ones.
fn options_of<'a>(root: &'a Command, path: &[String]) -> Vec<&'a clap::Arg> {
    let mut out: Vec<&clap::Arg> = leaf_command(root, path)
        .get_arguments()
        .filter(|a| a.get_long().is_some())
        .collect();
    for g in root.get_arguments().filter(|a| a.is_global_set()) {
        if !out.iter().any(|a| a.get_id() == g.get_id()) {
            out.push(g);
        }
    }
    out.retain(|a| !a.is_hide_set() && !matches!(a.get_long(), Some("help" | "version")));
    out
}

/// Every option name any command takes (what a file may set).
fn all_options(c: &Command, out: &mut std::collections::BTreeSet<String>) {
    for a in c.get_arguments() {
        if let Some(l) = a.get_long() {
            if !a.is_hide_set() && !PER_RUN.contains(&l) {
                out.insert(l.to_string());
            }
        }
    }
    for s in c.get_subcommands() {
        all_options(s, out);
    }
}

fn given(m: &ArgMatches, id: &str) -> bool {
    matches!(
        m.value_source(id),
        Some(ValueSource::CommandLine | ValueSource::EnvVariable)
    )
}

/// The stanza a repository option is left to the command line for: stripes named with
/// `--from` (and a backup's devices with `--to`) replace the stanza's repository.
fn left_to_cli(option: &str, command: &[String], m: &ArgMatches, ids: &[&str]) -> bool {
    let has = |id: &str| ids.contains(&id) && given(m, id);
    option == "repo"
        && (has("from") || (command.first().map(String::as_str) == Some("backup") && has("to")))
}

/// Parses `argv` for `root` with every layer applied.
pub fn parse(root: Command, argv: Vec<OsString>) -> Result<(ArgMatches, Effective), Failure> {
    let root = with_env(root);
    let first = root.clone().ignore_errors(true).try_get_matches_from(&argv);
    let first = match first {
        Ok(m) if m.subcommand().is_some() => m,
        // --help, --version, no command: clap says it.
        _ => {
            return Err(Failure::Usage(
                root.try_get_matches_from(&argv)
                    .err()
                    .unwrap_or_else(|| clap::Error::new(clap::error::ErrorKind::MissingSubcommand)),
            ))
        }
    };
    let (path, m) = leaf(&first);
    let get = |id: &str| m.get_raw(id).and_then(|mut v| v.next()).map(OsString::from);
    let explicit = get("config").map(std::path::PathBuf::from);
    let stanza = get("stanza").map(|s| s.to_string_lossy().into_owned());
    let mut known = Known::default();
    all_options(&root, &mut known.all);
    for c in root.get_subcommands() {
        let own = options_of(&root, &[c.get_name().to_string()]);
        let own = own
            .iter()
            .filter_map(|a| a.get_long())
            .filter(|l| !PER_RUN.contains(l));
        known
            .commands
            .insert(c.get_name().to_string(), own.map(str::to_string).collect());
    }
    let file = ConfigFile::find(explicit.as_deref(), &known).map_err(Failure::Config)?;
    if let (Some(s), None) = (&stanza, &file) {
        return Err(Failure::Config(anyhow::anyhow!(
            "--stanza {s}: no configuration file: write {DEFAULT_PATH}, or name one with --config FILE or PAGEVAULT_CONFIG"
        )));
    }
    if let (Some(f), Some(s)) = (&file, &stanza) {
        f.stanza_exists(s).map_err(Failure::Config)?;
    }
    if let Some(f) = &file {
        f.export_credentials(stanza.as_deref());
    }

    let options = options_of(&root, &path);
    let ids: Vec<&str> = options.iter().map(|a| a.get_id().as_str()).collect();
    let mut extra: Vec<OsString> = Vec::new();
    let mut from_file = std::collections::HashMap::new();
    let (mut repositories, selected) =
        stanza_repositories(file.as_ref(), stanza.as_deref(), &path, &options, m, &ids)
            .map_err(Failure::Config)?;
    if let Some(i) = selected {
        repositories[i].used = true;
    }
    if let Some(f) = &file {
        for a in &options {
            let long = a.get_long().unwrap_or_default();
            let id = a.get_id().as_str();
            if PER_RUN.contains(&long)
                || given(m, id)
                || left_to_cli(long, &path, m, &ids)
                || NOT_FROM_FILE.contains(&(path[0].as_str(), long))
            {
                continue;
            }
            if long == "repo" && !repositories.is_empty() {
                // The list for a command that takes several, else the one it uses.
                let several = matches!(a.get_action(), clap::ArgAction::Append);
                for e in repositories.iter_mut() {
                    e.used = selected.map_or(several, |i| i == e.n - 1);
                }
                let used = repositories.iter().filter(|e| e.used);
                extra.extend(used.map(|e| OsString::from(format!("--repo={}", e.path))));
                let origin = f.lookup(stanza.as_deref(), &path[0], long).map(|(o, _)| o);
                from_file.insert(id.to_string(), origin.flatten());
                continue;
            }
            // The key's variables outrank a file's key (crypt::load reads them).
            if matches!(long, "key-file" | "passphrase-file") && crate::crypt::load::key_in_env() {
                continue;
            }
            // A repository's own key replaces the stanza's, whichever option gives either.
            let used = selected.map(|i| &repositories[i]);
            if used.is_some_and(|e| e.has_own_key() && e.get(long).is_none())
                && matches!(long, "key-file" | "passphrase-file")
            {
                continue;
            }
            // The settings of the repository used win over the stanza's.
            if let Some((e, v)) = selected
                .map(|i| &repositories[i])
                .and_then(|e| Some((e, e.get(long)?)))
            {
                let origin = Some(repo_origin(stanza.as_deref(), e));
                let args =
                    file::as_args(f, origin.as_deref(), long, v, a).map_err(Failure::Config)?;
                if !args.is_empty() {
                    extra.extend(args);
                    from_file.insert(id.to_string(), origin);
                }
                continue;
            }
            let Some((origin, value)) = f.lookup(stanza.as_deref(), &path[0], long) else {
                continue;
            };
            // A name another command uses otherwise: only the command's own table.
            let own = stanza.as_ref().map(|s| format!("{s}.{}", path[0]));
            if OWN_TABLE_ONLY.contains(&(path[0].as_str(), long)) && origin != own {
                continue;
            }
            let args =
                file::as_args(f, origin.as_deref(), long, value, a).map_err(Failure::Config)?;
            if !args.is_empty() {
                extra.extend(args);
                from_file.insert(id.to_string(), origin);
            }
        }
    }
    let mut argv = argv;
    let at = argv.iter().position(|a| a == "--").unwrap_or(argv.len());
    argv.splice(at..at, extra);
    // PAGEVAULT_REPO yields, as the file's repo does, to stripes named on the command line.
    let parser = match path.as_slice() {
        [cmd]
            if m.value_source("repo") == Some(ValueSource::EnvVariable)
                && left_to_cli("repo", &path, m, &ids) =>
        {
            root.clone()
                .mut_subcommand(cmd, |c| c.mut_arg("repo", |a| a.env(None)))
        }
        _ => root.clone(),
    };
    let matches = match parser.try_get_matches_from(&argv) {
        Ok(m) => m,
        Err(e) => {
            return Err(match (&file, blamed(&e, &options, &from_file)) {
                (Some(f), Some((long, origin))) => Failure::Config(anyhow::anyhow!(
                    "{}: {}",
                    f.at(origin.as_deref(), &long),
                    e.render()
                        .to_string()
                        .lines()
                        .next()
                        .unwrap_or_default()
                        .trim_start_matches("error: ")
                )),
                _ => Failure::Usage(e),
            })
        }
    };
    let (_, fm) = leaf(&matches);
    let settings = options
        .iter()
        .map(|a| {
            let id = a.get_id().as_str();
            let long = a.get_long().unwrap_or_default().to_string();
            let values: Vec<String> = fm
                .get_raw(id)
                .map(|v| v.map(|s| file::redacted(&s.to_string_lossy())).collect())
                .unwrap_or_default();
            let origin = match (from_file.get(id), fm.value_source(id)) {
                (Some(o), _) => format!("file:{}", o.as_deref().unwrap_or("global")),
                (None, Some(ValueSource::CommandLine)) => "cli".into(),
                (None, Some(ValueSource::EnvVariable)) => format!("env:{}", env_name(&long)),
                (None, Some(ValueSource::DefaultValue)) => "default".into(),
                _ => "unset".into(),
            };
            Setting {
                option: long,
                values,
                origin,
            }
        })
        .collect();
    let effective = Effective {
        command: path.join(" "),
        config_file: file.as_ref().map(|f| f.path.display().to_string()),
        stanza,
        settings,
        repositories,
    };
    Ok((matches, effective))
}

/// Where a repository's own setting is said to come from: `main.repo.offsite`.
fn repo_origin(stanza: Option<&str>, e: &RepoEntry) -> String {
    let scope = stanza.map(|s| format!("{s}.")).unwrap_or_default();
    format!(
        "{scope}repo.{}",
        e.name.clone().unwrap_or_else(|| e.n.to_string())
    )
}

/// The repository whose own key this run loads (a command that uses one repository),
/// for messages about its key file.
pub fn key_owner(e: &Effective) -> Option<&RepoEntry> {
    let from_repo = (e.settings.iter()).any(|s| {
        matches!(s.option.as_str(), "key-file" | "passphrase-file") && s.origin.contains("repo.")
    });
    from_repo
        .then(|| e.repositories.iter().find(|r| r.used && r.has_own_key()))
        .flatten()
}

/// The stanza names several repositories and neither `--repo-index` nor `--repo` picks
/// one: a command that takes one runs over each (`expire`, `check`, `verify`, `drill`).
pub fn runs_each(e: &Effective) -> bool {
    let origin = |o: &str| {
        (e.settings.iter())
            .find(|s| s.option == o)
            .map(|s| s.origin.as_str())
    };
    e.repositories.len() > 1
        && matches!(origin("repo-index"), None | Some("unset"))
        && origin("repo").is_some_and(|o| o.starts_with("file:"))
}

/// The stanza's repositories (for a command with `--repo`), and the one this run uses
/// when it uses one: `--to-repo`'s or `--repo-index`'s, the one `--repo` names, else the
/// first (a command that takes several uses them all, and none is picked).
fn stanza_repositories(
    file: Option<&ConfigFile>,
    stanza: Option<&str>,
    path: &[String],
    options: &[&clap::Arg],
    m: &ArgMatches,
    ids: &[&str],
) -> Result<(Vec<RepoEntry>, Option<usize>)> {
    let one = |id: &str| {
        let v = m.try_get_raw(id).ok().flatten()?.next()?;
        Some(v.to_string_lossy().into_owned())
    };
    let to_repo = match path[0].as_str() {
        "backup" => one("to_repo").map(|s| (s, "to-repo")),
        _ if ids.contains(&"repo_index") => one("repo_index").map(|s| (s, "repo-index")),
        _ => None,
    };
    let Some(arg) = options.iter().find(|a| a.get_long() == Some("repo")) else {
        return Ok((vec![], None));
    };
    let mut list = vec![];
    if let Some((origin, v)) = file.and_then(|f| Some((f, f.lookup(stanza, &path[0], "repo")?))) {
        let (f, (o, v)) = (origin, v);
        list = repos::entries(v)
            .map_err(|e| anyhow::anyhow!("{}: {e}", f.at(o.as_deref(), "repo")))?;
    }
    let named = given(m, arg.get_id().as_str())
        .then(|| one(arg.get_id().as_str()))
        .flatten();
    let several = matches!(arg.get_action(), clap::ArgAction::Append);
    let picked = match (to_repo, named) {
        (Some((_, flag)), Some(r)) => bail!(
            "--{flag} picks one of the stanza's repositories and --repo {r} names one itself: give one of them"
        ),
        (Some((_, flag)), None) if left_to_cli("repo", path, m, ids) => {
            let other = match flag {
                "to-repo" => "--to names devices",
                _ => "--from names stripes",
            };
            bail!("--{flag} picks a repository and {other}: give one of them")
        }
        (Some((sel, flag)), None) if list.is_empty() => bail!(
            "--{flag} {sel} picks one of a stanza's repositories: give --stanza NAME, its repo a list (docs/CONFIG.md)"
        ),
        (Some((sel, flag)), None) => {
            Some(repos::select(&list, &sel, flag).map_err(anyhow::Error::msg)?.n - 1)
        }
        (None, Some(r)) if !several => {
            let id = crate::repo::many::identity(&r);
            list.iter()
                .position(|e| crate::repo::many::identity(&e.path) == id)
        }
        (None, None) if !several && !left_to_cli("repo", path, m, ids) && !list.is_empty() => {
            Some(0)
        }
        _ => None,
    };
    Ok((list, picked))
}

/// The option a file gave that clap refused, when it was one.
fn blamed(
    e: &clap::Error,
    options: &[&clap::Arg],
    from_file: &std::collections::HashMap<String, Option<String>>,
) -> Option<(String, Option<String>)> {
    use clap::error::{ContextKind, ContextValue};
    let Some(ContextValue::String(arg)) = e.get(ContextKind::InvalidArg) else {
        return None;
    };
    options.iter().find_map(|a| {
        let long = a.get_long()?;
        let named = arg.starts_with(&format!("--{long} "))
            || arg == &format!("--{long}")
            || arg.starts_with(&format!("--{long}="));
        from_file
            .get(a.get_id().as_str())
            .filter(|_| named)
            .map(|o| (long.to_string(), o.clone()))
    })
}

/// The text of an Effective: one line per option.
pub fn print(e: &Effective) {
    println!(
        "Configuration of '{}': file {}, stanza {}",
        e.command,
        e.config_file.as_deref().unwrap_or("(none)"),
        e.stanza.as_deref().unwrap_or("(none)")
    );
    let w = e.settings.iter().map(|s| s.option.len()).max().unwrap_or(0);
    for s in &e.settings {
        let v = if s.values.is_empty() {
            "-".to_string()
        } else {
            s.values.join(", ")
        };
        println!("  {:<w$}  {:<30}  {}", s.option, super::shown(&v), s.origin);
    }
    if !e.repositories.is_empty() {
        println!("  repositories of the stanza:");
    }
    for r in &e.repositories {
        // What it does not set itself is the stanza's: said, so none reads as "none".
        let mut shown = r.shown.clone();
        if !r.has_own_key() {
            shown.push("key=stanza's".into());
        }
        if r.get("s3-endpoint").is_none() {
            shown.push("s3-endpoint=stanza's".into());
        }
        println!(
            "    {:<14}  {:<30}  {}{}",
            r.label(),
            r.path,
            if r.used { "used " } else { "" },
            shown.join(" ")
        );
    }
}

/// Whether the chosen command was given `--json` (the document `--show-config` prints).
pub fn wants_json(e: &Effective) -> bool {
    e.settings
        .iter()
        .any(|s| s.option == "json" && s.values.first().is_some_and(|v| v == "true"))
}

/// Refused: `--stanza` with a value that is not a plain name.
pub fn check_stanza_name(s: &str) -> Result<()> {
    if s.is_empty()
        || !s
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_".contains(c))
    {
        bail!("stanza '{s}': a stanza is named with letters, digits, '-' and '_'");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn effective(list: &str, repo: &str, index: &str) -> Effective {
        let v: toml::Table = toml::from_str(list).unwrap();
        let setting = |o: &str, origin: &str| Setting {
            option: o.into(),
            values: vec![],
            origin: origin.into(),
        };
        Effective {
            command: "expire".into(),
            config_file: None,
            stanza: Some("main".into()),
            settings: vec![setting("repo", repo), setting("repo-index", index)],
            repositories: repos::entries(&v["repo"]).unwrap(),
        }
    }

    #[test]
    fn a_command_runs_over_each_repository_when_none_is_picked() {
        let two = "repo = [\"/b/one\", \"/b/two\"]";
        assert!(runs_each(&effective(two, "file:main", "unset")));
        assert!(!runs_each(&effective(two, "file:main", "cli")));
        assert!(!runs_each(&effective(two, "cli", "unset")));
        assert!(!runs_each(&effective(two, "env:PAGEVAULT_REPO", "unset")));
        assert!(!runs_each(&effective(
            "repo = \"/b/one\"",
            "file:main",
            "unset"
        )));
    }
}
