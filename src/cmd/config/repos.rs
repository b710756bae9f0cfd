//! A stanza's repositories: `repo` is one path, a list of paths, or a list of tables
//! (`[[stanza.main.repo]]`) each with `path`, an optional `name` and the settings that
//! belong to where sets go, which win over the stanza's for the repository a command
//! uses (`backup --to-repo`, `--repo-index`, or the one `--repo` names): codec, stripes,
//! retention, and the key and endpoint it opens with.

use serde::Serialize;
use toml::{Table, Value};

/// Settings a repository of the list may hold besides `path` and `name`.
pub const REPO_KEYS: &[&str] = &[
    "compress",
    "stripes",
    "keep-full",
    "keep-within",
    "keep-daily",
    "keep-weekly",
    "keep-monthly",
    "key-file",
    "passphrase-file",
    "s3-endpoint",
];

/// Settings of a repository that must be strings (paths, a URL).
const STRING_KEYS: &[&str] = &["key-file", "passphrase-file", "s3-endpoint"];

/// One repository of a stanza's list.
#[derive(Debug, Clone, Serialize)]
pub struct RepoEntry {
    /// Its place in the list, from 1.
    pub n: usize,
    pub name: Option<String>,
    pub path: String,
    /// Its own settings, keys spelled as the long options.
    #[serde(skip)]
    pub settings: Table,
    /// Its settings as `key=value`, as --show-config prints them.
    pub shown: Vec<String>,
    /// The repository this run uses, when it uses one of several.
    pub used: bool,
}

impl RepoEntry {
    /// How messages name it: `'offsite' (2)`, or `2`.
    pub fn label(&self) -> String {
        match &self.name {
            Some(n) => format!("'{n}' ({})", self.n),
            None => self.n.to_string(),
        }
    }

    pub fn get(&self, option: &str) -> Option<&Value> {
        self.settings.get(option)
    }

    /// Its table names its own key (key-file or passphrase-file), which replaces the
    /// stanza's whichever option that one is given by.
    pub fn has_own_key(&self) -> bool {
        self.get("key-file").is_some() || self.get("passphrase-file").is_some()
    }
}

fn norm(k: &str) -> String {
    k.replace('_', "-").to_lowercase()
}

/// The repositories of a `repo` value, checked: each has a path, names are plain and
/// not numbers (N picks by place), no name and no repository twice.
pub fn entries(v: &Value) -> Result<Vec<RepoEntry>, String> {
    let items: Vec<&Value> = match v {
        Value::String(_) => vec![v],
        Value::Array(a) => a.iter().collect(),
        _ => return Err(SHAPE.into()),
    };
    if items.is_empty() {
        return Err("an empty list: name at least one repository".into());
    }
    let mut out: Vec<RepoEntry> = Vec::new();
    for (i, item) in items.into_iter().enumerate() {
        let n = i + 1;
        let mut e = RepoEntry {
            n,
            name: None,
            path: String::new(),
            settings: Table::new(),
            shown: vec![],
            used: false,
        };
        match item {
            Value::String(s) => e.path = s.clone(),
            Value::Table(t) => {
                for (k, v) in t {
                    match (norm(k).as_str(), v) {
                        ("path", Value::String(s)) => e.path = s.clone(),
                        ("name", Value::String(s)) => e.name = Some(checked_name(s, n)?),
                        ("path" | "name", _) => {
                            return Err(format!("repository {n}: '{k}' is a string"))
                        }
                        (key, v) if STRING_KEYS.contains(&key) && !v.is_str() => {
                            return Err(format!(
                                "repository {n}: '{k}' is a string, e.g. {key} = \"{}\"",
                                match key {
                                    "s3-endpoint" => "https://s3.example.net",
                                    _ => "/etc/pagevault/offsite.key",
                                }
                            ))
                        }
                        (key, v) if REPO_KEYS.contains(&key) => {
                            let text = match v {
                                Value::String(s) => s.clone(),
                                Value::Integer(i) => i.to_string(),
                                Value::Float(x) => x.to_string(),
                                Value::Boolean(b) => b.to_string(),
                                v => format!("{v:?}"),
                            };
                            e.shown.push(format!("{key}={text}"));
                            e.settings.insert(key.to_string(), v.clone());
                        }
                        ("credentials-env", _) => {
                            return Err(format!(
                                "repository {n}: credentials-env is the stanza's, for all its \
                                 repositories (they are the process's variables); give this \
                                 repository its own s3-endpoint, key-file or passphrase-file"
                            ))
                        }
                        _ => {
                            return Err(format!(
                                "repository {n}: '{k}' is not a repository's setting (path, name, {}); \
                                 the stanza's other options apply to all its repositories",
                                REPO_KEYS.join(", ")
                            ))
                        }
                    }
                }
            }
            _ => return Err(SHAPE.into()),
        }
        if e.get("key-file").is_some() && e.get("passphrase-file").is_some() {
            return Err(format!(
                "repository {n}: give it key-file or passphrase-file, not both"
            ));
        }
        if e.path.is_empty() {
            return Err(format!(
                "repository {n} has no path: write path = \"/backup/repo\""
            ));
        }
        if let Some(dup) = e
            .name
            .as_ref()
            .and_then(|m| out.iter().find(|o| o.name.as_ref() == Some(m)).map(|o| o.n))
        {
            return Err(format!(
                "repositories {dup} and {n} are both named '{}'",
                e.name.as_deref().unwrap_or_default()
            ));
        }
        out.push(e);
    }
    let paths: Vec<String> = out.iter().map(|e| e.path.clone()).collect();
    crate::repo::many::refuse_repeats(&paths).map_err(|e| e.to_string())?;
    Ok(out)
}

const SHAPE: &str = "a repository is a path (repo = \"/backup/repo\"), a list of them \
    (repo = [\"/backup/repo\", \"s3://bucket/repo\"]) or tables with path = ... ([[stanza.NAME.repo]])";

fn checked_name(s: &str, n: usize) -> Result<String, String> {
    let plain = !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_".contains(c));
    if !plain || s.chars().all(|c| c.is_ascii_digit()) {
        return Err(format!(
            "repository {n}: name '{s}' is letters, digits, '-' and '_', and not a number (a number picks by place)"
        ));
    }
    Ok(s.to_string())
}

/// The repository `sel` picks (given as `--FLAG`): its name, or its place N (from 1).
pub fn select<'a>(list: &'a [RepoEntry], sel: &str, flag: &str) -> Result<&'a RepoEntry, String> {
    let by_place = sel
        .parse::<usize>()
        .ok()
        .and_then(|n| list.get(n.wrapping_sub(1)));
    by_place
        .or_else(|| list.iter().find(|e| e.name.as_deref() == Some(sel)))
        .ok_or_else(|| {
            let names: Vec<String> = list
                .iter()
                .map(|e| format!("{} {}", e.label(), e.path))
                .collect();
            format!(
                "--{flag} {sel}: the stanza has no such repository; it has {}",
                names.join(", ")
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(t: &str) -> Result<Vec<RepoEntry>, String> {
        let v: Table = toml::from_str(t).unwrap();
        entries(&v["repo"])
    }

    #[test]
    fn lists_of_paths_and_tables_are_read_and_checked() {
        let one = parse("repo = \"/b/main\"").unwrap();
        assert_eq!((one.len(), one[0].path.as_str()), (1, "/b/main"));
        let two = parse(
            "[[repo]]\npath = \"/b/main\"\n[[repo]]\nname = \"offsite\"\npath = \"s3://b/main\"\nkeep_full = 8\n",
        )
        .unwrap();
        assert_eq!(two[1].get("keep-full").and_then(Value::as_integer), Some(8));
        assert_eq!(select(&two, "offsite", "to-repo").unwrap().n, 2);
        assert_eq!(select(&two, "1", "to-repo").unwrap().path, "/b/main");
        assert!(select(&two, "3", "repo-index")
            .unwrap_err()
            .contains("no such repository"));
        assert!(select(&two, "0", "to-repo").is_err());
        let e = parse("repo = [\"/b/main\", \"/b/main/\"]").unwrap_err();
        assert!(e.contains("same repository"), "{e}");
        assert!(parse("repo = []").unwrap_err().contains("empty"));
        let e = parse("[[repo]]\npath = \"/a\"\nkey = \"x\"\n").unwrap_err();
        assert!(e.contains("'key' is not a repository's setting"), "{e}");
        assert!(parse("[[repo]]\nname = \"x\"\n")
            .unwrap_err()
            .contains("no path"));
        assert!(parse("[[repo]]\nname = \"2\"\npath = \"/a\"\n").is_err());
        let e = parse("repo = [{ path = \"/a\", name = \"x\" }, { path = \"/b\", name = \"x\" }]");
        assert!(e.unwrap_err().contains("both named 'x'"));
    }

    #[test]
    fn a_repository_may_hold_its_own_key_and_endpoint() {
        let two = parse(
            "[[repo]]\npath = \"/b/main\"\n[[repo]]\nname = \"off\"\npath = \"s3://b/main\"\n\
             key_file = \"/k/off.key\"\ns3-endpoint = \"https://s3.example.net\"\n",
        )
        .unwrap();
        assert!(!two[0].has_own_key() && two[1].has_own_key());
        assert_eq!(
            two[1].get("s3-endpoint").and_then(Value::as_str),
            Some("https://s3.example.net")
        );
        assert!(two[1].shown.contains(&"key-file=/k/off.key".to_string()));
        let p = parse("[[repo]]\npath = \"/a\"\npassphrase-file = \"/k/p\"\n").unwrap();
        assert!(p[0].has_own_key());
        let e = parse("[[repo]]\npath = \"/a\"\nkey-file = \"/k\"\npassphrase-file = \"/p\"\n");
        assert!(e.unwrap_err().contains("not both"));
        let e = parse("[[repo]]\npath = \"/a\"\nkey-file = 3\n").unwrap_err();
        assert!(e.contains("'key-file' is a string"), "{e}");
        let e =
            parse("[[repo]]\npath = \"/a\"\ncredentials-env = { AWS_SECRET_ACCESS_KEY = \"X\" }\n");
        assert!(e.unwrap_err().contains("credentials-env is the stanza's"));
    }
}
