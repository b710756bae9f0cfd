//! The configuration file (`/etc/pagevault/pagevault.toml`, `--config`, `PAGEVAULT_CONFIG`):
//! options at the top level for every stanza, `[stanza.NAME]` tables of options (and
//! `[stanza.NAME.COMMAND]` tables of one command's), and
//! `credentials-env` tables naming the variables that hold a store's credentials. Refused
//! whole, naming the file, line and key: writable by group or others, owned by another
//! user than root or the running one, an unknown key, a secret written inline.

use anyhow::{anyhow, bail, Context, Result};
use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use toml::{Table, Value};

pub const DEFAULT_PATH: &str = "/etc/pagevault/pagevault.toml";

/// A configuration file is a few KiB; refuse anything absurd.
const FILE_MAX: u64 = 1 << 20;

/// The variables a `credentials-env` table may fill, each from a variable it names.
const CREDENTIALS: &[&str] = &[
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AZURE_STORAGE_CONNECTION_STRING",
    "AZURE_STORAGE_ACCOUNT_NAME",
    "AZURE_STORAGE_ACCOUNT_KEY",
];

/// Keys that would hold a secret, and what to write instead.
fn secret_advice(key: &str) -> Option<&'static str> {
    Some(match key {
        "key" | "master-key" | "encryption-key" => {
            "key-file = \"/etc/pagevault/main.key\" (32 random bytes, mode 0600)"
        }
        "passphrase" => "passphrase-file = \"/etc/pagevault/main.pass\" (mode 0600)",
        "password" | "pgpassword" => {
            "password-file = \"/etc/pagevault/pg.pass\" (mode 0600), or a ~/.pgpass line"
        }
        "secret-access-key" | "aws-secret-access-key" | "access-key-id" | "aws-access-key-id"
        | "session-token" | "aws-session-token" | "secret" | "token" => {
            "credentials-env = { AWS_SECRET_ACCESS_KEY = \"NAME_OF_A_VARIABLE_HOLDING_IT\" }, or AWS_SECRET_ACCESS_KEY in the service's environment"
        }
        "account-key" | "azure-storage-account-key" | "connection-string"
        | "azure-storage-connection-string" | "sas" | "sas-key" | "sas-token" => {
            "credentials-env = { AZURE_STORAGE_CONNECTION_STRING = \"NAME_OF_A_VARIABLE_HOLDING_IT\" }, or the variable in the service's environment"
        }
        _ => return None,
    })
}

/// The options a file may set: any command's, and each command's own (for a stanza's
/// `[stanza.NAME.COMMAND]` table).
#[derive(Default)]
pub struct Known {
    pub all: BTreeSet<String>,
    pub commands: BTreeMap<String, BTreeSet<String>>,
}

pub struct ConfigFile {
    pub path: PathBuf,
    text: String,
    global: Table,
    stanzas: Table,
}

/// `[stanza.main]` or `the top level`, as an error names where a key is.
pub fn section(stanza: Option<&str>) -> String {
    stanza.map_or("the top level".to_string(), |s| format!("[stanza.{s}]"))
}

/// `v` with the password of a postgres URL in it hidden: the one of its user info and
/// every `password` query parameter (the text is otherwise kept).
pub fn redacted(v: &str) -> String {
    let Some(u) = url_parts(v) else {
        return v.to_string();
    };
    let mut out = String::with_capacity(v.len());
    let mut at = 0;
    for r in u.secrets {
        out.push_str(&v[at..r.start]);
        out.push_str("***");
        at = r.end;
    }
    out.push_str(&v[at..]);
    out
}

/// A postgres URL's secrets, as the driver reads it: the user info runs to the first
/// `@` after the scheme (a password may hold `/` or `?`), and query keys are
/// percent-decoded (`pass%77ord=` is `password=`).
struct UrlParts {
    /// Byte ranges of `v` holding a password.
    secrets: Vec<std::ops::Range<usize>>,
}

fn url_parts(v: &str) -> Option<UrlParts> {
    let rest = v
        .strip_prefix("postgres://")
        .or_else(|| v.strip_prefix("postgresql://"))?;
    let start = v.len() - rest.len();
    let mut secrets = vec![];
    let mut after_auth = start;
    if let Some(at) = rest.find('@') {
        if let Some(colon) = rest[..at].find(':') {
            secrets.push(start + colon + 1..start + at);
        }
        after_auth = start + at + 1;
    }
    if let Some(q) = v[after_auth..].find('?') {
        let mut pos = after_auth + q + 1;
        for param in v[after_auth + q + 1..].split('&') {
            if let Some(eq) = param.find('=') {
                if percent_decoded(&param[..eq]).eq_ignore_ascii_case("password") {
                    secrets.push(pos + eq + 1..pos + param.len());
                }
            }
            pos += param.len() + 1;
        }
    }
    Some(UrlParts { secrets })
}

/// `%XX` sequences decoded (others kept as they are).
fn percent_decoded(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        match (
            b[i],
            b.get(i + 1).and_then(|&c| hex(c)),
            b.get(i + 2).and_then(|&c| hex(c)),
        ) {
            (b'%', Some(h), Some(l)) => {
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            (c, _, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn url_has_password(v: &str) -> bool {
    url_parts(v).is_some_and(|u| !u.secrets.is_empty())
}

impl ConfigFile {
    /// The file named, or the default one when it exists; None when there is none.
    pub fn find(explicit: Option<&Path>, known: &Known) -> Result<Option<ConfigFile>> {
        let path = match explicit {
            Some(p) => p.to_path_buf(),
            None if Path::new(DEFAULT_PATH).exists() => PathBuf::from(DEFAULT_PATH),
            None => return Ok(None),
        };
        Self::load(&path, known).map(Some)
    }

    fn load(path: &Path, known: &Known) -> Result<ConfigFile> {
        Self::load_as(path, Some(known))
    }

    /// The file at `path` (or the default one) read to look one value up, its keys not
    /// checked against the options (another command's file): the `key` (`repo`,
    /// `async`, `spool`) `archive-push --stanza STANZA` runs with. A `spool` counts only
    /// in the stanza's archive-push table (elsewhere it is a backup's SQLite spool).
    /// A list of repositories gives their paths, one a line.
    pub fn archive_push_value(
        path: Option<&Path>,
        stanza: &str,
        key: &str,
    ) -> Result<Option<String>> {
        let path = path.unwrap_or(Path::new(DEFAULT_PATH));
        let file = Self::load_as(path, None)?;
        file.stanza_exists(stanza)?;
        let own = format!("{stanza}.archive-push");
        Ok(match file.lookup(Some(stanza), "archive-push", key) {
            Some((origin, _)) if key == "spool" && origin.as_deref() != Some(own.as_str()) => None,
            Some((_, Value::String(s))) => Some(s.clone()),
            // A list of repositories: their paths, one a line.
            Some((_, v @ Value::Array(_))) if key == "repo" => {
                super::repos::entries(v).ok().map(|es| {
                    es.into_iter()
                        .map(|e| e.path)
                        .collect::<Vec<_>>()
                        .join("\n")
                })
            }
            Some((_, Value::Boolean(b))) => Some(b.to_string()),
            Some((_, Value::Integer(n))) => Some(n.to_string()),
            _ => None,
        })
    }

    fn load_as(path: &Path, known: Option<&Known>) -> Result<ConfigFile> {
        use std::io::Read;
        let shown = path.display();
        let f = crate::sys::open_regular(path)
            .with_context(|| format!("cannot open the configuration file '{shown}'"))?;
        let meta = f.metadata()?;
        let mode = meta.mode();
        if mode & 0o022 != 0 {
            bail!(
                "the configuration file '{shown}' may be written by group or others (mode {:04o}): \
                 anyone who can edit it chooses where backups go and which key they use; chmod go-w it",
                mode & 0o7777
            );
        }
        // As OpenSSH: root's or the running user's, or its owner chooses for them.
        let uid = meta.uid();
        if !crate::sys::trusted_owner(uid) {
            let owner = crate::sys::user_name(uid);
            bail!(
                "the configuration file '{shown}' is owned by {owner} (uid {uid}, mode {:04o}), not by root or by the user running pagevault ({}): \
                 its owner chooses the repository, where this user writes and which key it uses; chown root '{shown}', or run as {owner}",
                mode & 0o7777,
                crate::sys::effective_user_name(),
            );
        }
        let mut text = String::new();
        f.take(FILE_MAX + 1)
            .read_to_string(&mut text)
            .with_context(|| {
                format!("cannot read the configuration file '{shown}' (UTF-8 text)")
            })?;
        if text.len() as u64 > FILE_MAX {
            bail!("the configuration file '{shown}' is longer than {FILE_MAX} bytes");
        }
        let mut global: Table = toml::from_str(&text)
            .map_err(|e| anyhow!("the configuration file '{shown}' is not valid TOML: {e}"))?;
        let stanzas = match global.remove("stanza") {
            None => Table::new(),
            Some(Value::Table(t)) => t,
            Some(_) => bail!(
                "{shown}:{}: 'stanza' is a table of stanzas: write [stanza.main] then its options",
                line_of(&text, None, "stanza")
            ),
        };
        let file = ConfigFile {
            path: path.to_path_buf(),
            text,
            global,
            stanzas,
        };
        let Some(known) = known else {
            return Ok(file);
        };
        file.check(None, &file.global, &known.all, None)?;
        for (name, t) in &file.stanzas {
            super::check_stanza_name(name).with_context(|| format!("{shown}"))?;
            let Value::Table(t) = t else {
                bail!(
                    "{shown}:{}: 'stanza.{name}' is a value, not a table of options: write [stanza.{name}] and its options below it",
                    line_of(&file.text, None, name)
                );
            };
            file.check(Some(name), t, &known.all, Some(&known.commands))?;
        }
        Ok(file)
    }

    /// Every key of a table known, no secret inline.
    fn check(
        &self,
        stanza: Option<&str>,
        t: &Table,
        known: &BTreeSet<String>,
        commands: Option<&BTreeMap<String, BTreeSet<String>>>,
    ) -> Result<()> {
        let shown = self.path.display();
        for (raw, v) in t {
            let key = raw.replace('_', "-").to_lowercase();
            let line = line_of(&self.text, stanza, raw);
            let at = format!("{shown}:{line}: {} '{raw}'", section(stanza));
            // [stanza.NAME.COMMAND]: options for one command only.
            if let (Some(c), Value::Table(sub), Some(s)) = (commands, v, stanza) {
                if let Some(own) = c.get(&key) {
                    self.check(Some(&format!("{s}.{raw}")), sub, own, None)?;
                    continue;
                }
            }
            if let Some(instead) = secret_advice(&key) {
                bail!("{at}: a secret is never written in the configuration file; write {instead}");
            }
            if key == "credentials-env" {
                self.check_credentials(&at, v)?;
                continue;
            }
            if key == "stanza" {
                bail!("{at}: stanzas are tables at the top level ([stanza.NAME]), not inside one");
            }
            if !known.contains(&key) {
                let near = known
                    .iter()
                    .map(|k| (distance(k, &key), k))
                    .min()
                    .filter(|(d, _)| *d <= 3)
                    .map(|(_, k)| format!(" (did you mean '{k}'?)"))
                    .unwrap_or_default();
                let why = if super::PER_RUN.contains(&key.as_str()) {
                    " is given on the command line of each run, not in the file".to_string()
                } else if stanza.is_some_and(|s| s.contains('.')) {
                    format!(" is not an option of this command{near}; see its --help")
                } else if matches!(v, Value::Table(_)) {
                    format!(" is a table: options for one command go in a stanza's [stanza.NAME.COMMAND] (backup, archive-push ...){near}")
                } else {
                    format!(" is not an option of any command{near}; see `pagevault COMMAND --help` for the options")
                };
                bail!("{at}{why}");
            }
            if key == "repo" {
                super::repos::entries(v).map_err(|m| anyhow!("{at}: {m}"))?;
            }
            let strings: Vec<&str> = match v {
                Value::String(s) => vec![s],
                Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
                _ => vec![],
            };
            if strings.iter().any(|s| url_has_password(s)) {
                bail!(
                    "{at}: the URL holds a password; a secret is never written in the configuration file: \
                     drop it from the URL and write password-file = \"/etc/pagevault/pg.pass\" (mode 0600), \
                     or give it in ~/.pgpass or PGPASSFILE"
                );
            }
        }
        Ok(())
    }

    fn check_credentials(&self, at: &str, v: &Value) -> Result<()> {
        let Value::Table(t) = v else {
            bail!("{at}: a table: credentials-env = {{ AWS_SECRET_ACCESS_KEY = \"VARIABLE\" }}");
        };
        for (target, name) in t {
            if !CREDENTIALS.contains(&target.as_str()) {
                bail!(
                    "{at}: '{target}' is not a credential variable; one of {}",
                    CREDENTIALS.join(", ")
                );
            }
            let ok = name.as_str().is_some_and(|n| {
                !n.is_empty()
                    && !n.starts_with(|c: char| c.is_ascii_digit())
                    && n.chars()
                        .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
            });
            if !ok {
                bail!(
                    "{at}: {target} names the environment variable that holds the secret \
                     (letters A-Z, digits and '_', e.g. \"MAIN_S3_SECRET\"), never the secret itself"
                );
            }
        }
        Ok(())
    }

    /// `FILE:LINE: [stanza.main] 'key'`, where an error about a key points.
    pub fn at(&self, stanza: Option<&str>, key: &str) -> String {
        format!(
            "{}:{}: {} '{key}'",
            self.path.display(),
            line_of(&self.text, stanza, key),
            section(stanza)
        )
    }

    pub fn stanza_exists(&self, s: &str) -> Result<()> {
        if self.stanzas.contains_key(s) {
            return Ok(());
        }
        let names: Vec<&str> = self.stanzas.keys().map(String::as_str).collect();
        bail!(
            "{}: no [stanza.{s}] (stanzas: {}); add one or give another --stanza",
            self.path.display(),
            if names.is_empty() {
                "none".to_string()
            } else {
                names.join(", ")
            }
        )
    }

    /// The value of `option`: the stanza's, else the top level's; with the stanza's name
    /// (None: the top level).
    pub fn lookup(
        &self,
        stanza: Option<&str>,
        command: &str,
        option: &str,
    ) -> Option<(Option<String>, &Value)> {
        fn find<'t>(t: &'t Table, option: &str) -> Option<&'t Value> {
            t.iter()
                .find(|(k, v)| k.replace('_', "-").to_lowercase() == option && !v.is_table())
                .map(|(_, v)| v)
        }
        if let Some(s) = stanza {
            if let Some(Value::Table(t)) = self.stanzas.get(s) {
                let own = t
                    .iter()
                    .find(|(k, v)| k.as_str() == command && v.is_table());
                if let Some((k, Value::Table(c))) = own {
                    if let Some(v) = find(c, option) {
                        return Some((Some(format!("{s}.{k}")), v));
                    }
                }
                if let Some(v) = find(t, option) {
                    return Some((Some(s.to_string()), v));
                }
            }
        }
        find(&self.global, option).map(|v| (None, v))
    }

    /// The stanza's credentials-env table, else the top level's.
    fn credentials(&self, stanza: Option<&str>) -> Option<(Option<String>, &Value)> {
        fn get(t: &Table) -> Option<&Value> {
            t.iter()
                .find(|(k, _)| k.replace('_', "-") == "credentials-env")
                .map(|(_, v)| v)
        }
        if let Some(Value::Table(t)) = stanza.and_then(|s| self.stanzas.get(s)) {
            if let Some(v) = get(t) {
                return Some((stanza.map(str::to_string), v));
            }
        }
        get(&self.global).map(|v| (None, v))
    }

    /// Sets each credential variable the file names a source for, unless it is set.
    pub fn export_credentials(&self, stanza: Option<&str>) {
        for target in CREDENTIALS {
            if std::env::var_os(target).is_some() {
                continue;
            }
            let Some((_, Value::Table(t))) = self.credentials(stanza) else {
                continue;
            };
            let value = t
                .get(*target)
                .and_then(Value::as_str)
                .and_then(std::env::var_os);
            if let Some(v) = value {
                // Before any thread starts (main's first step).
                std::env::set_var(target, v);
            }
        }
    }
}

/// A file's value as command-line arguments for `arg` (`--compress=lz4`; a switch set
/// true: `--copy-only`; an array: the option repeated).
pub fn as_args(
    f: &ConfigFile,
    stanza: Option<&str>,
    long: &str,
    v: &Value,
    arg: &clap::Arg,
) -> Result<Vec<OsString>> {
    let at = || f.at(stanza, long);
    if !arg.get_action().takes_values() {
        return match v {
            Value::Boolean(true) => Ok(vec![format!("--{long}").into()]),
            Value::Boolean(false) => Ok(vec![]),
            _ => bail!("{}: a switch: write {long} = true (or false)", at()),
        };
    }
    let one = |v: &Value| -> Result<String> {
        Ok(match v {
            Value::String(s) => s.clone(),
            Value::Integer(i) => i.to_string(),
            Value::Float(x) => x.to_string(),
            Value::Boolean(b) => b.to_string(),
            _ => bail!("{}: a string or a number, e.g. {long} = \"value\"", at()),
        })
    };
    let values = match v {
        Value::Array(a) if matches!(arg.get_action(), clap::ArgAction::Append) => {
            a.iter().map(one).collect::<Result<Vec<_>>>()?
        }
        Value::Array(_) => bail!("{}: takes one value, not a list", at()),
        v => vec![one(v)?],
    };
    Ok(values
        .into_iter()
        .map(|s| format!("--{long}={s}").into())
        .collect())
}

/// The line of `key` in `[stanza.NAME]` (or at the top level), 1-based; 0 when not found.
fn line_of(text: &str, stanza: Option<&str>, key: &str) -> usize {
    let mut inside = stanza.is_none();
    let header = stanza.map(|s| format!("[stanza.{s}]"));
    for (i, line) in text.lines().enumerate() {
        let t = line.trim();
        if t.starts_with('[') {
            let h: String = t.chars().filter(|c| !c.is_whitespace()).collect();
            inside = header.as_deref().is_some_and(|hd| h.starts_with(hd))
                || (stanza.is_none() && !h.starts_with("[stanza"));
            if stanza.is_none() && t.contains(key) {
                return i + 1;
            }
            continue;
        }
        let k = t.split('=').next().unwrap_or("").trim().trim_matches('"');
        let norm = |k: &str| k.replace('_', "-").to_lowercase();
        if inside && norm(k) == norm(key) {
            return i + 1;
        }
    }
    0
}

/// Levenshtein distance, for the key a typo meant.
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            cur.push(
                (prev[j] + usize::from(ca != *cb))
                    .min(prev[j + 1] + 1)
                    .min(cur[j] + 1),
            );
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_in_urls_are_found_and_hidden() {
        assert!(url_has_password("postgres://u:pw@h:5432/db"));
        assert!(url_has_password(
            "postgresql://u@h/db?sslmode=require&password=x"
        ));
        assert!(!url_has_password("postgres://u@h/db?pgdata=/a:b@c"));
        assert!(!url_has_password("postgres://postgres@/postgres"));
        assert_eq!(redacted("postgres://u:pw@h/db"), "postgres://u:***@h/db");
        // As the driver reads them: a password holding '/' or '?', a key spelled with
        // percent escapes, a password parameter among others.
        assert!(url_has_password("postgres://u:ab/cd@h"));
        assert_eq!(redacted("postgres://u:ab/cd@h/db"), "postgres://u:***@h/db");
        assert_eq!(redacted("postgres://u:a?b@h/db"), "postgres://u:***@h/db");
        assert!(url_has_password("postgres://u@h/db?pass%77ord=x"));
        assert_eq!(
            redacted("postgres://u@h/db?sslmode=require&pass%77ord=secret&pgdata=/d"),
            "postgres://u@h/db?sslmode=require&pass%77ord=***&pgdata=/d"
        );
        assert_eq!(
            redacted("postgresql://u@h/db?password=x"),
            "postgresql://u@h/db?password=***"
        );
        assert_eq!(redacted("/backup/repo"), "/backup/repo");
        assert_eq!(distance("compres", "compress"), 1);
    }

    #[test]
    fn files_of_another_user_are_refused() {
        if !crate::sys::is_root() {
            eprintln!("skipped: only root gives a file to another user");
            return;
        }
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("pagevault.toml");
        std::fs::write(&p, "").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(ConfigFile::load(&p, &Known::default()).is_ok());
        std::os::unix::fs::chown(&p, Some(4242), Some(4242)).unwrap();
        let e = format!(
            "{:#}",
            ConfigFile::load(&p, &Known::default()).err().unwrap()
        );
        let file = format!("'{}'", p.display());
        for w in [
            &file,
            "owned by uid 4242",
            "0644",
            "chown root",
            "run as uid 4242",
        ] {
            assert!(e.contains(w), "{w}: {e}");
        }
    }

    #[test]
    fn lines_are_found_in_their_stanza() {
        let t = "repo = \"/a\"\n[stanza.main]\nrepo = \"/b\"\n[stanza.other]\nrepo = \"/c\"\n";
        assert_eq!(line_of(t, None, "repo"), 1);
        assert_eq!(line_of(t, Some("main"), "repo"), 3);
        assert_eq!(line_of(t, Some("other"), "repo"), 5);
    }
}
