//! Retention: keeps the newest N full backups, every differential based on a kept
//! full, every set newer than the oldest kept full, and the WAL from the oldest kept
//! set's start on; removes the rest (the catalog record first, so a half-removed set is
//! never offered for restore).

use crate::format::manifest::BackupType;
use crate::pg::{parse_name, Kind};
use crate::repo::wal;
use crate::repo::{CatalogEntry, Repo};
use anyhow::{bail, Result};
use serde::Serialize;
use std::collections::HashSet;

/// What `expire` is asked to do.
#[derive(Debug, Clone, Default)]
pub struct ExpireOptions {
    pub repo: String,
    pub keep_full: u32,
    pub dry_run: bool,
    /// Object-store options (`--s3-endpoint`).
    pub store: crate::device::object::StoreOptions,
}

/// What it did (or, with `dry_run`, would do); `--json` prints this.
#[derive(Debug, Serialize)]
pub struct ExpireReport {
    pub command: &'static str,
    pub dry_run: bool,
    pub kept: Vec<String>,
    pub expired: Vec<String>,
    pub wal_needed_from: Option<String>,
    pub wal_expired: Vec<String>,
    pub bytes_freed: u64,
    /// The expired sets' records, for the text output.
    #[serde(skip)]
    pub expired_sets: Vec<CatalogEntry>,
}

/// What retention keeps and removes.
#[derive(Debug, PartialEq)]
pub struct Plan {
    pub keep: Vec<String>,
    pub expire: Vec<String>,
    /// WAL needed from this segment on (None: the repository holds no PostgreSQL set).
    pub wal_from: Option<String>,
}

pub fn plan(sets: &[CatalogEntry], keep_full: usize) -> Plan {
    let fulls: Vec<&CatalogEntry> = sets
        .iter()
        .filter(|c| c.backup_type == BackupType::Full && !c.damaged)
        .collect();
    let kept_fulls: HashSet<&str> = fulls
        .iter()
        .rev()
        .take(keep_full)
        .map(|c| c.set_id.as_str())
        .collect();
    let oldest = sets
        .iter()
        .find(|c| kept_fulls.contains(c.set_id.as_str()))
        .map(|c| c.started.clone());
    let mut keep = vec![];
    let mut expire = vec![];
    for c in sets {
        let kept = match c.backup_type {
            // A differential is only as good as its base.
            BackupType::Diff => c
                .base_set
                .as_deref()
                .is_some_and(|b| kept_fulls.contains(b)),
            // An incremental, as its base (any type, older: decided already).
            BackupType::Incr => c
                .base_set
                .as_deref()
                .is_some_and(|b| keep.iter().any(|k: &String| k == b)),
            BackupType::Full => {
                kept_fulls.contains(c.set_id.as_str())
                    || oldest.as_ref().is_some_and(|o| c.started >= *o)
            }
        };
        if kept {
            keep.push(c.set_id.clone());
        } else {
            expire.push(c.set_id.clone());
        }
    }
    let wal_from = sets
        .iter()
        .filter(|c| keep.contains(&c.set_id))
        .filter_map(|c| c.start_wal.clone())
        .min_by(|a, b| a.get(8..).cmp(&b.get(8..)));
    Plan {
        keep,
        expire,
        wal_from,
    }
}

/// Whether an archived WAL file is older than everything a kept set needs.
fn wal_expired(name: &str, from: &str) -> bool {
    let (Some(n), Some(f)) = (parse_name(name), parse_name(from)) else {
        return false;
    };
    // Timeline history files are tiny and needed to follow any later timeline.
    n.kind != Kind::History && n.tli <= f.tli && name.get(8..24) < from.get(8..24)
}

pub fn expire(o: &ExpireOptions) -> Result<ExpireReport> {
    if o.keep_full == 0 {
        bail!("--keep-full must be 1 or more: expire never removes the last full backup");
    }
    let repo = Repo::open(&o.repo, false, &o.store)?;
    let sets = repo.catalog()?;
    let p = plan(&sets, o.keep_full as usize);
    let expired_sets: Vec<CatalogEntry> = p
        .expire
        .iter()
        .filter_map(|id| sets.iter().find(|c| c.set_id == *id).cloned())
        .collect();
    let wal: Vec<(String, u64)> = match &p.wal_from {
        Some(from) => wal::all_archived(&repo)?
            .into_iter()
            .filter(|(n, _)| wal_expired(n, from))
            .collect(),
        None => vec![],
    };
    let bytes_freed = expired_sets.iter().map(|c| c.stored_bytes).sum::<u64>()
        + wal.iter().map(|(_, s)| s).sum::<u64>();
    if !o.dry_run {
        for c in &expired_sets {
            repo.unrecord(&c.set_id)?;
            repo.remove_set_files(c)?;
        }
        for (n, _) in &wal {
            wal::remove_archived(&repo, n)?;
        }
    }
    Ok(ExpireReport {
        command: "expire",
        dry_run: o.dry_run,
        kept: p.keep,
        expired: p.expire,
        wal_needed_from: p.wal_from,
        wal_expired: wal.into_iter().map(|(n, _)| n).collect(),
        bytes_freed,
        expired_sets,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(id: &str, ty: &str, base: Option<&str>, started: &str, wal: &str) -> CatalogEntry {
        CatalogEntry {
            set_id: id.into(),
            name: None,
            backup_type: ty.parse().unwrap(),
            copy_only: false,
            damaged: false,
            base_set: base.map(Into::into),
            source_kind: crate::format::manifest::SourceKind::Postgres,
            database: "db".into(),
            system_identifier: None,
            timeline: Some(1),
            start_lsn: None,
            stop_lsn: None,
            start_wal: Some(wal.into()),
            stop_wal: None,
            started: started.into(),
            finished: started.into(),
            seconds: 1.0,
            read_bytes: None,
            raw_bytes: 10,
            stored_bytes: 10,
            codec: "none".into(),
            stripes: vec![],
        }
    }

    #[test]
    fn keeps_newest_fulls_and_their_diffs() {
        let sets = vec![
            set("f1", "full", None, "1", "000000010000000000000002"),
            set("d1", "diff", Some("f1"), "2", "000000010000000000000004"),
            set("f2", "full", None, "3", "000000010000000000000006"),
            set("d2", "diff", Some("f2"), "4", "000000010000000000000008"),
            set("f3", "full", None, "5", "00000001000000000000000A"),
        ];
        let p = plan(&sets, 2);
        assert_eq!(p.keep, vec!["f2", "d2", "f3"]);
        assert_eq!(p.expire, vec!["f1", "d1"]);
        assert_eq!(p.wal_from.as_deref(), Some("000000010000000000000006"));
        assert!(wal_expired(
            "000000010000000000000005",
            "000000010000000000000006"
        ));
        assert!(!wal_expired(
            "000000010000000000000006",
            "000000010000000000000006"
        ));
        assert!(!wal_expired("00000001.history", "000000010000000000000006"));
        // A later timeline's old-numbered segment may still be needed.
        assert!(!wal_expired(
            "000000020000000000000005",
            "000000010000000000000006"
        ));
        let all = plan(&sets, 5);
        assert!(all.expire.is_empty());
    }

    #[test]
    fn damaged_full_does_not_count() {
        let mut sets = vec![
            set("f1", "full", None, "1", "000000010000000000000002"),
            set("f2", "full", None, "3", "000000010000000000000006"),
        ];
        sets[1].damaged = true;
        let p = plan(&sets, 1);
        assert_eq!(p.keep, vec!["f1", "f2"]);
        assert!(p.expire.is_empty());
    }
}
