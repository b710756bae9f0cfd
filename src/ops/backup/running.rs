//! A running backup's progress in the repository (`running/SET.json`): written when the
//! backup starts, rewritten every two seconds with the bytes read and expected, removed
//! when it ends, in success or failure. `status` lists them (SQL Server's
//! `percent_complete`); a record whose process is gone (this host, its pid dead) or that
//! has not been rewritten for a minute is stale; the next backup on the host removes
//! one whose process is gone. A record is data from storage: read bounded, every field
//! checked.

use crate::engine::stats::Progress;
use crate::format::manifest::BackupType;
use crate::repo::Repo;
use anyhow::Result;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::mpsc::{channel, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

pub const DIR: &str = "running";
/// How often a running backup rewrites its record.
pub const EVERY: Duration = Duration::from_secs(2);
/// A record not rewritten for this long belongs to a backup that is gone.
pub const STALE_SECONDS: f64 = 60.0;
const MAX: u64 = 4 << 10;

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunningRecord {
    pub set_id: String,
    pub kind: BackupType,
    /// RFC 3339.
    pub started: String,
    /// When the record was last rewritten (RFC 3339).
    pub updated: String,
    pub pid: i32,
    pub host: String,
    pub bytes_done: u64,
    pub bytes_total: u64,
}

impl RunningRecord {
    /// Percent of the expected bytes read, 0 to 100 (one decimal).
    pub fn percent(&self) -> f64 {
        if self.bytes_total == 0 {
            return 0.0;
        }
        let p = self.bytes_done.min(self.bytes_total) as f64 * 100.0 / self.bytes_total as f64;
        (p * 10.0).floor() / 10.0
    }

    fn check(&self, name: &str) -> Result<(), String> {
        if format!("{}.json", self.set_id) != name || !is_set_id(&self.set_id) {
            return Err(format!("its set id '{}' is not its name", self.set_id));
        }
        for (what, t) in [("started", &self.started), ("updated", &self.updated)] {
            DateTime::parse_from_rfc3339(t).map_err(|_| format!("{what} is not a time"))?;
        }
        if self.host.len() > 255 || self.host.chars().any(char::is_control) {
            return Err("its host is not a host name".into());
        }
        Ok(())
    }
}

fn is_set_id(s: &str) -> bool {
    s.len() == 32 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Keeps a backup's record up to date until dropped, then removes it.
pub struct Running {
    waker: Option<Sender<()>>,
    handle: Option<JoinHandle<()>>,
}

impl Running {
    /// Starts recording the backup `o` of set `set_id` into its repository (opened
    /// again: the record is written beside the backup's own work). A record that cannot
    /// be written never fails the backup: status then just does not list it.
    pub fn start(o: &super::BackupOptions, set_id: &str, progress: Arc<Progress>) -> Running {
        let (waker, wake) = channel::<()>();
        let mut rec = RunningRecord {
            set_id: set_id.to_string(),
            kind: o.backup_type,
            started: Utc::now().to_rfc3339(),
            updated: String::new(),
            pid: std::process::id() as i32,
            host: crate::sys::hostname(),
            bytes_done: 0,
            bytes_total: 0,
        };
        let (spec, store) = (o.repo.clone().unwrap_or_default(), o.store.clone());
        let handle = std::thread::spawn(move || {
            let Ok(repo) = Repo::open(&spec, false, &store) else {
                return;
            };
            let rel = format!("{DIR}/{}.json", rec.set_id);
            if repo.store().create_dir(DIR).is_err() {
                return;
            }
            // Records that backups killed on this host left behind go.
            for f in list(&repo, Utc::now()).unwrap_or_default() {
                if let Found::Stale {
                    name, dead: true, ..
                } = f
                {
                    let _ = repo.delete_rewritable(&name);
                }
            }
            loop {
                rec.updated = Utc::now().to_rfc3339();
                // What the walk found to read; a second pass (the WAL a PostgreSQL
                // backup's end adds) counts as the last stretch, at 100 percent.
                if rec.bytes_total == 0 {
                    rec.bytes_total = progress.total.load(Relaxed);
                }
                rec.bytes_done = progress.done.load(Relaxed).min(rec.bytes_total);
                if let Ok(b) = serde_json::to_vec(&rec) {
                    // An immutable repository skips it (Repo::put_rewritable).
                    let _ = repo.put_rewritable(&rel, &b);
                }
                // Wakes at once when the backup ends (the sender dropped).
                if wake.recv_timeout(EVERY) != Err(std::sync::mpsc::RecvTimeoutError::Timeout) {
                    break;
                }
            }
            let _ = repo.delete_rewritable(&rel);
        });
        Running {
            waker: Some(waker),
            handle: Some(handle),
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.waker.take();
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// One record as `status` reads it.
pub enum Found {
    /// Its backup runs.
    Live(RunningRecord),
    /// Its process is gone, or it was not rewritten for a minute, or it does not read
    /// as a record: why.
    Stale {
        name: String,
        record: Option<RunningRecord>,
        why: String,
        /// Its process is gone from this host: the next backup here removes it.
        dead: bool,
    },
}

/// Every record in the repository, live or stale.
pub fn list(repo: &Repo, now: DateTime<Utc>) -> Result<Vec<Found>> {
    let host = crate::sys::hostname();
    let mut names: Vec<String> = (repo.store().list(DIR)?.into_iter())
        .map(|(n, _)| n)
        .filter(|n| n.ends_with(".json"))
        .collect();
    names.sort();
    let mut out = vec![];
    for name in names {
        let stale = |record, why: String| Found::Stale {
            name: format!("{DIR}/{name}"),
            record,
            why,
            dead: false,
        };
        let rec: RunningRecord = match repo.store().get(&format!("{DIR}/{name}"), MAX) {
            Ok(Some(b)) => match serde_json::from_slice::<RunningRecord>(&b) {
                Ok(r) => match r.check(&name) {
                    Ok(()) => r,
                    Err(e) => {
                        out.push(stale(None, format!("it does not read as a record: {e}")));
                        continue;
                    }
                },
                Err(e) => {
                    out.push(stale(None, format!("it does not read as a record: {e}")));
                    continue;
                }
            },
            // Removed since the listing: the backup ended.
            Ok(None) => continue,
            Err(e) => {
                out.push(stale(None, format!("it cannot be read: {e:#}")));
                continue;
            }
        };
        let updated = DateTime::parse_from_rfc3339(&rec.updated)
            .map(|t| t.with_timezone(&Utc))
            .expect("checked");
        let quiet = (now - updated).num_milliseconds() as f64 / 1000.0;
        if rec.host == host && !crate::sys::process_alive(rec.pid) {
            out.push(Found::Stale {
                name: format!("{DIR}/{name}"),
                why: format!("process {} on this host is gone", rec.pid),
                record: Some(rec),
                dead: true,
            });
        } else if quiet > STALE_SECONDS {
            let why = format!("not updated for {quiet:.0} seconds");
            out.push(stale(Some(rec), why));
        } else {
            out.push(Found::Live(rec));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_are_checked_and_staleness_found() {
        let (_d, repo) = crate::repo::temp_repo();
        let id = "0123456789abcdef0123456789abcdef";
        let now = Utc::now();
        let rec = |pid: i32, updated: DateTime<Utc>| RunningRecord {
            set_id: id.into(),
            kind: BackupType::Full,
            started: now.to_rfc3339(),
            updated: updated.to_rfc3339(),
            pid,
            host: crate::sys::hostname(),
            bytes_done: 50,
            bytes_total: 200,
        };
        repo.store().create_dir(DIR).unwrap();
        let put = |r: &RunningRecord, name: &str| {
            repo.store()
                .put(&format!("{DIR}/{name}"), &serde_json::to_vec(r).unwrap())
                .unwrap()
        };
        put(&rec(std::process::id() as i32, now), &format!("{id}.json"));
        let found = list(&repo, now).unwrap();
        assert!(matches!(&found[..], [Found::Live(r)] if r.percent() == 25.0));
        // A pid that is gone on this host; a record not rewritten for long.
        put(&rec(i32::MAX, now), &format!("{id}.json"));
        let stale_why = |f: &[Found]| match f {
            [Found::Stale { why, dead, .. }] => format!("{why} dead={dead}"),
            _ => panic!("not one stale record"),
        };
        assert!(stale_why(&list(&repo, now).unwrap()).contains("is gone dead=true"));
        let old = now - chrono::Duration::seconds(300);
        put(&rec(std::process::id() as i32, old), &format!("{id}.json"));
        assert!(stale_why(&list(&repo, now).unwrap())
            .contains("not updated for 300 seconds dead=false"));
        // A record under another set's name is not believed.
        repo.store().delete(&format!("{DIR}/{id}.json")).unwrap();
        put(
            &rec(std::process::id() as i32, now),
            "fedcba9876543210fedcba9876543210.json",
        );
        assert!(stale_why(&list(&repo, now).unwrap()).contains("not its name"));
    }
}
