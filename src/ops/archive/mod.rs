//! WAL archiving as log backups: `archive-push` stores one file PostgreSQL hands to
//! `archive_command` (or, `--async`, spools it and lets the pusher store it),
//! `archive-get` restores one for `restore_command`.

pub mod many;
pub mod prefetch;
pub mod pusher;
pub mod record;
pub mod spool;

use crate::format::seal::KeyUse;
use crate::repo::{wal, Repo};
use anyhow::{bail, Context, Result};
use serde::Serialize;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Default)]
pub struct PushOptions {
    /// The file to archive (`%p`).
    pub path: PathBuf,
    /// Every repository it goes into (at least one), each with its own options.
    pub repos: Vec<crate::repo::many::RepoStore>,
    /// Archive a segment without its block summary (incrementals over it read every page).
    pub no_summaries: bool,
    /// `--sign`: the key makes a new or plain repository signed, not encrypted.
    pub sign: bool,
}

#[derive(Debug, Clone, Default)]
pub struct GetOptions {
    /// The WAL file name wanted (`%f`).
    pub name: String,
    /// Where it goes (`%p`).
    pub dest: PathBuf,
    /// The repositories, in the order they are asked (at least one), each with its own
    /// options; the fetcher reads the first.
    pub repos: Vec<crate::repo::many::RepoStore>,
    /// Segments fetched ahead (0: none), into `prefetch_dir`.
    pub prefetch: usize,
    pub prefetch_dir: PathBuf,
}

#[derive(Debug, Clone, Serialize)]
pub struct Got {
    pub bytes: u64,
    /// Handed over from the prefetch directory.
    pub prefetched: bool,
    /// The fetcher could not be started (the fetch itself succeeded).
    pub warning: Option<String>,
    /// The repositories passed over and why, and the one that served.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub passed_over: Vec<String>,
}

/// What a push did: the first repository's report, and each repository's part.
#[derive(Debug, Clone)]
pub struct PushedAll {
    pub pushed: wal::Pushed,
    pub each: Vec<many::RepoPushed>,
}

/// Archives one file: durable in every repository when this returns Ok.
pub fn push(o: &PushOptions) -> Result<PushedAll> {
    if let Some(r) = (o.repos.iter()).find(|r| o.sign && r.store.key.is_none()) {
        bail!(
            "--sign needs a key, and {} has none: {}",
            r.spec,
            crate::crypt::load::GIVE_KEY
        );
    }
    let (pushed, each) = many::push_all(&o.repos, &o.path, o.sign, !o.no_summaries)?;
    Ok(PushedAll { pushed, each })
}

/// The repository a push writes, which must exist (`Repo::open_made`): with `sign`
/// and a key, a plain one is made signed first (a key alone would make it encrypted).
pub(crate) fn open_for_push(
    spec: &str,
    sign: bool,
    store: &crate::device::object::StoreOptions,
) -> Result<Repo> {
    let repo = Repo::open_made(spec, store)?;
    if let (true, Some(source), None) = (sign, &store.key, repo.protection()) {
        repo.key_for(source, KeyUse::Sign)?;
    }
    Ok(repo)
}

/// Restores one file, every byte checked; complete at `dest` or not there at all.
/// `wal::NotArchived` (downcast) means the archive does not hold it; any other error
/// means it is there but cannot be used, or the archive cannot be read. With prefetch,
/// a segment fetched ahead is handed over with no request to the store (the repository
/// is not even opened), one being fetched is waited for, and `start(dir, seg_size)` is
/// asked to fetch the next ones when no fetcher runs and some are missing.
pub fn get(o: &GetOptions, start: impl FnOnce(&Path, u64) -> Result<()>) -> Result<Got> {
    let is_seg = crate::pg::parse_name(&o.name).is_some_and(|n| n.kind == crate::pg::Kind::Segment);
    let passed_over = std::cell::RefCell::new(vec![]);
    let direct = || -> Result<u64> {
        let (bytes, passed) = many::fetch_first(&o.repos, &o.name, &o.dest)?;
        *passed_over.borrow_mut() = passed;
        Ok(bytes)
    };
    if o.prefetch == 0 || !is_seg {
        return direct().map(|bytes| Got {
            bytes,
            prefetched: false,
            warning: None,
            passed_over: passed_over.take(),
        });
    }
    let dir = &o.prefetch_dir;
    // A directory someone else could write is not used (nor made use of by a fetcher).
    let checked = match prefetch::Dir::open(dir) {
        Ok(d) => d,
        Err(e) => {
            let bytes = direct()?;
            return Ok(Got {
                bytes,
                prefetched: false,
                warning: Some(format!("WAL prefetch is off: {e:#}")),
                passed_over: passed_over.take(),
            });
        }
    };
    let mut warnings = vec![];
    let took = checked.as_ref().map(|d| {
        d.wait_for(&o.name);
        d.take(&o.name, &o.dest)
    });
    let prefetched = match took {
        Some(Ok(t)) => t,
        Some(Err(e)) => {
            warnings.push(format!("{e:#}; fetched from the repository instead"));
            false
        }
        None => false,
    };
    let bytes = match prefetched {
        true => std::fs::metadata(&o.dest)?.len(),
        false => direct()
            .inspect_err(|e| {
                // The end of the archive: nothing ahead serves any more.
                if e.downcast_ref::<wal::NotArchived>().is_some() {
                    if let Some(d) = &checked {
                        d.clean(&o.name, &[], true);
                    }
                }
            })
            // What was discarded on the way is part of the failure's story.
            .map_err(|e| match warnings.is_empty() {
                true => e,
                false => e.context(warnings.join("; ")),
            })?,
    };
    let win = prefetch::window(&o.name, bytes, o.prefetch);
    if let Some(d) = &checked {
        d.set_wanted(&o.name);
    }
    if !checked.as_ref().is_some_and(|d| d.running()) {
        let missing = match &checked {
            Some(d) => {
                d.clean(&o.name, &win, false);
                d.missing(&win)
            }
            None => win.clone(),
        };
        if !missing.is_empty() {
            if let Err(e) = start(dir, bytes) {
                warnings.push(format!("WAL prefetch could not start: {e:#}"));
            }
        }
    }
    Ok(Got {
        bytes,
        prefetched,
        warning: (!warnings.is_empty()).then(|| warnings.join("; ")),
        passed_over: passed_over.take(),
    })
}

#[derive(Debug, Clone)]
pub struct AsyncOptions {
    /// The file to archive (`%p`).
    pub path: PathBuf,
    /// The repositories the pusher stores into (a directory must be one already): the
    /// spool keeps a file until every one holds it.
    pub repos: Vec<String>,
    pub spool: PathBuf,
    pub no_summaries: bool,
    /// Past this many bytes waiting, every push warns (and still spools).
    pub spool_max: u64,
    /// Also spool up to this many files PostgreSQL has ready to archive after this one
    /// (its archive_status/*.ready beside `path`): its next calls then find them spooled.
    pub look_ahead: usize,
}

/// The pusher, after a file was spooled.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "snake_case", tag = "state")]
pub enum Pusher {
    /// One runs already (it holds the spool's lock).
    Running,
    /// This push started one.
    Started { pid: u32 },
}

#[derive(Debug, Clone, Serialize)]
pub struct AsyncPushed {
    pub name: String,
    pub raw_bytes: u64,
    /// The spool held these bytes already (a retried archive_command, or spooled ahead).
    pub already: bool,
    /// Files PostgreSQL has ready after this one, spooled with it.
    pub spooled_ahead: usize,
    pub seconds: f64,
    pub backlog: spool::Backlog,
    pub pusher: Pusher,
    /// What PostgreSQL's log should show: the spool past its limit, the pusher failing.
    pub warnings: Vec<String>,
    /// With several repositories: what of the spool each one lacks.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub repositories: Vec<RepoLacks>,
}

/// What of the spool a repository lacks.
#[derive(Debug, Clone, Serialize)]
pub struct RepoLacks {
    pub repo: String,
    pub lacks: spool::Backlog,
}

/// `archive-push --async`: the file durable in the spool (checked, summarized) when
/// this returns; `start` starts a pusher when none runs, and returns its pid.
pub fn push_async(
    o: &AsyncOptions,
    start: impl FnOnce(&spool::Spool) -> Result<u32>,
) -> Result<AsyncPushed> {
    let t0 = std::time::Instant::now();
    crate::repo::many::refuse_repeats(&o.repos)?;
    for r in &o.repos {
        Repo::refuse_unmade_dir(r)?;
    }
    let sp = spool::Spool::open(&o.spool)?;
    let prev = sp.last_summary();
    let ahead = ready_after(&o.path, &sp.ready(), o.look_ahead);
    let mut srcs = vec![o.path.clone()];
    srcs.extend(ahead.iter().cloned());
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get().min(4));
    let spooling = sp.spooling();
    let mut results =
        wal::spooled::spool_many(&srcs, &sp.ready(), prev.as_ref(), !o.no_summaries, threads)
            .into_iter();
    drop(spooling);
    let first = results.next().expect("one result per file");
    // Files spooled ahead are a bonus: one that failed is spooled when PostgreSQL asks.
    let ahead_done: Vec<wal::spooled::Spooled> = results.filter_map(|r| r.ok()).collect();
    let got = first.map_err(|e| {
        let full = e
            .chain()
            .filter_map(|c| c.downcast_ref::<std::io::Error>())
            .any(crate::sys::is_enospc)
            || format!("{e:#}").contains("No space left");
        match full {
            true => e.context(format!(
                "the spool '{}' is full: PostgreSQL keeps the file and retries (nothing is \
                 lost); the pusher frees the spool as the repository takes its files (see \
                 its pusher.json and pusher.log)",
                sp.dir.display()
            )),
            false => e,
        }
    })?;
    (sp.ready_dir().sync()).with_context(|| format!("cannot sync '{}'", sp.ready().display()))?;
    let newest_sum = (ahead_done.iter().rev())
        .chain(std::iter::once(&got))
        .find_map(|s| s.summary.as_ref());
    if let Some(s) = newest_sum {
        (sp.top().replace(spool::LAST_SUM, &s.encode())).with_context(|| {
            format!(
                "cannot write '{}'",
                sp.top().join(spool::LAST_SUM).display()
            )
        })?;
    }
    let pusher = match sp.try_lock()? {
        None => Pusher::Running,
        Some(lock) => {
            drop(lock);
            Pusher::Started { pid: start(&sp)? }
        }
    };
    let backlog = sp.backlog()?;
    // Spooled now: this file, and those spooled ahead (their own calls find them spooled).
    let mut warnings: Vec<String> = std::iter::once(&got)
        .chain(&ahead_done)
        .filter_map(|s| s.summary.as_ref()?.damage())
        .collect();
    if backlog.bytes > o.spool_max {
        warnings.push(format!(
            "the spool '{}' holds {} files ({}), past its limit of {}: the repository does not \
             keep up or cannot be reached; nothing is dropped, the spool grows until it does",
            sp.dir.display(),
            backlog.files,
            crate::units::human(backlog.bytes),
            crate::units::human(o.spool_max)
        ));
    }
    let state = sp.state().unwrap_or_default();
    let mut repositories = vec![];
    if o.repos.len() > 1 {
        for spec in &o.repos {
            let tag = spool::repo_tag(spec);
            let lacks = sp.lacking(&tag)?;
            let failing = (state.repos.iter()).find(|r| r.tag == tag && r.failing_since.is_some());
            if let Some(r) = failing {
                warnings.push(format!(
                    "the pusher has failed to archive into {spec} for {} s: it lacks {} files \
                     ({}, the oldest {}), which stay in '{}' until it holds them: {}",
                    spool::unix_now().saturating_sub(r.failing_since.unwrap_or_default()),
                    lacks.files,
                    crate::units::human(lacks.bytes),
                    lacks.oldest.as_deref().unwrap_or("-"),
                    sp.dir.display(),
                    r.last_error.as_deref().unwrap_or("")
                ));
            }
            repositories.push(RepoLacks {
                repo: spec.clone(),
                lacks,
            });
        }
    } else if let (Some(e), Some(since)) = (state.last_error, state.failing_since) {
        warnings.push(format!(
            "the pusher has failed to archive for {} s ({} files wait in '{}'): {e}",
            spool::unix_now().saturating_sub(since),
            backlog.files,
            sp.dir.display()
        ));
    }
    Ok(AsyncPushed {
        repositories,
        spooled_ahead: ahead_done.iter().filter(|s| !s.already).count(),
        name: got.name,
        raw_bytes: got.raw_bytes,
        already: got.already,
        seconds: t0.elapsed().as_secs_f64(),
        backlog,
        pusher,
        warnings,
    })
}

/// Up to `n` WAL files the server has ready to archive after `path` (the `.ready` files of
/// `archive_status` beside it), neither in `ready_dir` nor stored from it by the pusher,
/// in WAL order.
fn ready_after(path: &Path, ready_dir: &Path, n: usize) -> Vec<PathBuf> {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name().and_then(|f| f.to_str())) else {
        return vec![];
    };
    // confined: PostgreSQL's archive_status, read only
    let Ok(rd) = std::fs::read_dir(dir.join("archive_status")) else {
        return vec![];
    };
    let mut names: Vec<String> = rd
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let f = e.file_name().to_str()?.strip_suffix(".ready")?.to_string();
            (crate::pg::parse_name(&f).is_some() && f.as_str() > name).then_some(f)
        })
        .filter(|f| !ready_dir.join(f).exists() && !wal::spooled::stored(ready_dir, f))
        .collect();
    names.sort();
    names.truncate(n);
    names.into_iter().map(|f| dir.join(f)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::repo::wal::spooled;
    use crate::repo::wal::testing::{segment, SEG};
    use std::fs;

    /// The pusher stored a file spooled ahead before PostgreSQL asked for it: the calls
    /// that look ahead neither copy it again nor take its `.done`, which the call for it
    /// answers from.
    #[test]
    fn a_file_the_pusher_stored_is_not_spooled_ahead_again() {
        let d = tempfile::tempdir().unwrap();
        let (wal, spool) = (d.path().join("pg_wal"), d.path().join("ready"));
        fs::create_dir_all(wal.join("archive_status")).unwrap();
        fs::create_dir(&spool).unwrap();
        let names: Vec<String> = (3..6)
            .map(|n| crate::pg::segment_name_for(1, n, SEG))
            .collect();
        for (i, n) in names.iter().enumerate() {
            fs::write(wal.join(n), segment(1, 3 + i as u64, 5, 40)).unwrap();
            fs::write(wal.join("archive_status").join(format!("{n}.ready")), "").unwrap();
        }
        let asked = wal.join(&names[0]);
        let ahead = ready_after(&asked, &spool, 8);
        assert_eq!(ahead, vec![wal.join(&names[1]), wal.join(&names[2])]);
        let mut srcs = vec![asked.clone()];
        srcs.extend(ahead);
        for r in spooled::spool_many(&srcs, &spool, None, true, 2) {
            assert!(!r.unwrap().already);
        }
        // The pusher stores the second file and removes it from the spool.
        spooled::mark_done(&spool, &names[1]);
        fs::remove_file(spool.join(&names[1])).unwrap();
        let done = spool.join(format!("{}{}", names[1], spooled::DONE_SUFFIX));
        assert!(done.exists());
        // The next look-ahead skips it; looked at ahead anyway, it keeps its `.done`.
        assert!(ready_after(&asked, &spool, 8).is_empty());
        let again =
            spooled::spool_many(&[asked.clone(), wal.join(&names[1])], &spool, None, true, 2);
        assert!(again.iter().all(|r| r.as_ref().unwrap().already));
        assert!(done.exists() && !spool.join(&names[1]).exists());
        // PostgreSQL's call for it: answered without a copy, and the `.done` taken.
        let own = spooled::spool_copy(&wal.join(&names[1]), &spool, None, true).unwrap();
        assert!(own.already);
        assert!(!done.exists() && !spool.join(&names[1]).exists());
    }
}
