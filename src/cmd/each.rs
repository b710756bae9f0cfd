//! A command over each repository of a stanza (`expire`, `check`, `verify` with
//! `--stanza` and no `--repo-index`): each run as `--repo-index N` runs it, with that
//! repository's own settings, key and endpoint; one failing stops no other.

use crate::device::object::StoreOptions;
use anyhow::Result;
use serde::Serialize;
use serde_json::{json, Value};

/// One repository of the stanza, with the arguments and the options `--repo-index N`
/// gives the command.
pub struct EachRepo<A> {
    /// How messages name it: `'offsite' (2)`, or `2`.
    pub label: String,
    pub name: Option<String>,
    pub path: String,
    /// Its arguments (an error when its settings are refused), and the options it opens
    /// with (an error when its key does not load).
    pub run: Result<(A, Result<StoreOptions>)>,
}

impl<A> EachRepo<A> {
    /// `repository 'offsite' (2) s3://backups/main`
    pub fn heading(&self) -> String {
        format!("repository {} {}", self.label, super::shown(&self.path))
    }

    /// Its arguments and options, an error naming no repository (the caller does).
    pub fn take(self) -> Result<(A, StoreOptions)> {
        let (a, store) = self.run?;
        Ok((a, store?))
    }
}

/// What a run over each repository found.
pub struct Outcome {
    /// One JSON object per repository: `repo`, `name` and its report's fields, or `error`.
    pub json: Vec<Value>,
    /// The repositories that failed, each `'offsite' (2) PATH: why`.
    pub failed: Vec<String>,
    /// Every failure may pass on a later run (a store that did not answer, a lock).
    pub transient: bool,
}

impl Outcome {
    /// The command's JSON: `{"command": ..., "repositories": [...]}`.
    pub fn print_json(&self, command: &str) {
        super::print_json(&json!({ "command": command, "repositories": self.json }));
    }

    /// Ok when none failed; else an error naming each that did, transient when every
    /// failure is (the run may pass later: exit 3).
    pub fn verdict(self, command: &str, of: usize) -> Result<()> {
        let n = self.failed.len();
        if n == 0 {
            return Ok(());
        }
        let msg = format!(
            "{command} failed in {n} of {of} repositories: {}",
            self.failed.join("; ")
        );
        match self.transient {
            true => Err(crate::fault::transient(msg)),
            false => Err(anyhow::Error::msg(msg)),
        }
    }
}

/// Runs `one` for each repository in turn: with `json` false a heading, then `print`'s
/// lines (given the repository's label); `failed` says why a report is a failure.
pub fn each<A, R: Serialize>(
    list: Vec<EachRepo<A>>,
    json: bool,
    mut one: impl FnMut(A, StoreOptions) -> Result<R>,
    print: impl Fn(&str, &R),
    failed: impl Fn(&R) -> Option<String>,
) -> Outcome {
    let mut out = Outcome {
        json: vec![],
        failed: vec![],
        transient: true,
    };
    for e in list {
        let (label, name, path) = (e.label.clone(), e.name.clone(), e.path.clone());
        if !json {
            println!("{}", e.heading());
        }
        let r = e.take().and_then(|(a, store)| one(a, store));
        let mut v = json!({});
        match r {
            Ok(r) => {
                v = serde_json::to_value(&r).unwrap_or_default();
                if !json {
                    print(&label, &r);
                }
                if let Some(why) = failed(&r) {
                    out.failed.push(format!("{label} {path}: {why}"));
                    out.transient = false;
                }
            }
            Err(e) => {
                v["error"] = json!(format!("{e:#}"));
                if !json {
                    println!("  error: {}", super::shown(&format!("{e:#}")));
                }
                out.failed.push(format!("{label} {path}: {e:#}"));
                out.transient &= crate::fault::is_transient(&e);
            }
        }
        // The repository's path and name win over a report's own `repo`.
        if let Some(o) = v.as_object_mut() {
            o.insert("repo".into(), json!(path));
            o.insert("name".into(), json!(name));
        }
        out.json.push(v);
    }
    out
}
