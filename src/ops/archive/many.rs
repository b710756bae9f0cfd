//! archive-push and archive-get over several repositories: a segment stored into every
//! one at once (archived only when all hold it), and fetched from the first that has an
//! intact copy, the others passed over and named.

use super::open_for_push;
use crate::repo::many::{self, RepoStore};
use crate::repo::{wal, Repo};
use anyhow::{anyhow, Result};
use serde::Serialize;
use std::path::Path;

/// One repository's part of a push.
#[derive(Debug, Clone, Serialize)]
pub struct RepoPushed {
    pub repo: String,
    pub outcome: wal::Outcome,
    pub stored_bytes: u64,
    pub seconds: f64,
}

/// Stores `src` into every repository of `repos` at once (each opened with its own
/// options), each on its own thread, so one slow or unreachable store delays no other. Ok only when every one holds it; else the
/// error names each that failed, what it said, and those that hold it.
pub fn push_all(
    repos: &[RepoStore],
    src: &Path,
    sign: bool,
    summaries: bool,
) -> Result<(wal::Pushed, Vec<RepoPushed>)> {
    many::refuse_repeats(&many::specs(repos))?;
    let one = |r: &RepoStore| -> Result<wal::Pushed> {
        let repo = open_for_push(&r.spec, sign, &r.store)?;
        wal::push_with(&repo, src, summaries)
    };
    if let [r] = repos {
        let p = one(r)?;
        let each = vec![part(&r.spec, &p)];
        return Ok((p, each));
    }
    let results: Vec<Result<wal::Pushed>> = std::thread::scope(|s| {
        let handles: Vec<_> = repos.iter().map(|r| s.spawn(move || one(r))).collect();
        (handles.into_iter())
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow!("its push panicked")))
            })
            .collect()
    });
    let mut first = None;
    let (mut held, mut failed) = (vec![], vec![]);
    for (rs, r) in repos.iter().zip(results) {
        match r {
            Ok(p) => {
                held.push(part(&rs.spec, &p));
                first.get_or_insert(p);
            }
            Err(e) => failed.push((&rs.spec, e)),
        }
    }
    if failed.is_empty() {
        let first = first.expect("every repository pushed");
        return Ok((first, held));
    }
    let name = src
        .file_name()
        .map_or(String::new(), |n| n.to_string_lossy().into_owned());
    let holding = match held.len() {
        0 => "no repository holds it".to_string(),
        _ => {
            let r: Vec<&str> = held.iter().map(|p| p.repo.as_str()).collect();
            format!("it is archived in {}", r.join(", "))
        }
    };
    let bad: Vec<&str> = failed.iter().map(|(r, _)| r.as_str()).collect();
    let bad = bad.join(", ");
    let mut failed = failed.into_iter();
    let (spec, e) = failed.next().expect("a failure");
    let others: String = failed.map(|(r, e)| format!("; into {r}: {e:#}")).collect();
    Err(e.context(format!(
        "{name} is not archived into every repository ({holding}): make {bad} reachable and \
         writable again (or take it out of the stanza's repo list); PostgreSQL keeps the \
         segment and retries, and the next try completes it{others}; into {spec}"
    )))
}

fn part(spec: &str, p: &wal::Pushed) -> RepoPushed {
    RepoPushed {
        repo: spec.to_string(),
        outcome: p.outcome,
        stored_bytes: p.stored_bytes,
        seconds: p.seconds,
    }
}

/// Fetches `name` to `dest` from the first repository of `repos` holding an intact copy.
/// Returns the bytes and, when one was passed over, a line per repository passed over
/// (unreachable, lacking it, damaged) and one naming the repository that served.
/// `wal::NotArchived` only when every repository says it does not hold the file: one that
/// could not be asked may hold it, and recovery must not end on a guess.
pub fn fetch_first(repos: &[RepoStore], name: &str, dest: &Path) -> Result<(u64, Vec<String>)> {
    let one = |r: &RepoStore| -> Result<u64> {
        let repo = Repo::open(&r.spec, false, &r.store)?;
        wal::fetch(&repo, name, dest)
    };
    if let [r] = repos {
        return one(r).map(|b| (b, vec![]));
    }
    many::refuse_repeats(&many::specs(repos))?;
    let mut passed: Vec<String> = vec![];
    let mut all_absent = true;
    for r in repos {
        let spec = &r.spec;
        match one(r) {
            Ok(bytes) => {
                if !passed.is_empty() {
                    passed.push(format!("{name} served by {spec}"));
                }
                return Ok((bytes, passed));
            }
            Err(e) => {
                let absent = e.downcast_ref::<wal::NotArchived>().is_some();
                all_absent &= absent;
                let why = match absent {
                    true => "it does not hold it".to_string(),
                    false => format!("{e:#}"),
                };
                passed.push(format!("{name}: passed over {spec}: {why}"));
            }
        }
    }
    let tried = passed.join("; ");
    match all_absent {
        true => {
            Err(wal::NotArchived(format!("{name} is in none of the repositories: {tried}")).into())
        }
        false => Err(anyhow!(
            "{name} could not be fetched from any repository: {tried}"
        )),
    }
}
