//! `pagevault expire`: retention. Keeps the newest N full backups, every differential
//! based on a kept full, every set newer than the oldest kept full, and the WAL from
//! the oldest kept set's start on; removes the rest.

use super::print_json;
use crate::pg::{parse_name, Kind};
use crate::repo::wal;
use crate::repo::{CatalogEntry, Repo};
use crate::units::human;
use anyhow::{bail, Result};
use clap::Args;
use serde_json::json;
use std::collections::HashSet;

#[derive(Args)]
#[command(
    after_help = "Examples:\n  pagevault expire --repo /backups/main --keep-full 2 --dry-run\n  pagevault expire --repo s3://bucket/main --keep-full 4"
)]
pub struct ExpireArgs {
    /// The repository (a directory, s3://BUCKET/PREFIX or azure://CONTAINER/PREFIX).
    #[arg(long)]
    pub repo: String,
    /// How many full backups to keep (the newest ones that are not damaged).
    #[arg(long, value_name = "N")]
    pub keep_full: u32,
    /// Say what would be removed, remove nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
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
        .filter(|c| c.backup_type == "full" && !c.damaged)
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
        let kept = match c.backup_type.as_str() {
            // A differential is only as good as its base.
            "diff" => c
                .base_set
                .as_deref()
                .is_some_and(|b| kept_fulls.contains(b)),
            _ => {
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
        .min_by(|a, b| a[8..].cmp(&b[8..]));
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
    n.kind != Kind::History && n.tli <= f.tli && name[8..24] < from[8..24]
}

pub fn run(a: ExpireArgs) -> Result<()> {
    if a.keep_full == 0 {
        bail!("--keep-full must be 1 or more: expire never removes the last full backup");
    }
    let repo = Repo::open(&a.repo, false)?;
    let sets = repo.catalog()?;
    let p = plan(&sets, a.keep_full as usize);
    let by_id = |id: &str| sets.iter().find(|c| c.set_id == id).unwrap();
    let wal: Vec<(String, u64)> = match &p.wal_from {
        Some(from) => wal::all_archived(&repo)?
            .into_iter()
            .filter(|(n, _)| wal_expired(n, from))
            .collect(),
        None => vec![],
    };
    let mut freed: u64 = p.expire.iter().map(|id| by_id(id).stored_bytes).sum();
    freed += wal.iter().map(|(_, s)| s).sum::<u64>();
    if !a.dry_run {
        for id in &p.expire {
            // The record goes first: a half-removed set is never offered for restore.
            repo.unrecord(id)?;
            repo.remove_set_files(by_id(id))?;
        }
        for (n, _) in &wal {
            wal::remove_archived(&repo, n)?;
        }
    }
    if a.json {
        print_json(&json!({
            "command": "expire",
            "dry_run": a.dry_run,
            "kept": p.keep,
            "expired": p.expire,
            "wal_needed_from": p.wal_from,
            "wal_expired": wal.iter().map(|(n, _)| n).collect::<Vec<_>>(),
            "bytes_freed": freed,
        }));
        return Ok(());
    }
    let verb = if a.dry_run { "Would expire" } else { "Expired" };
    for id in &p.expire {
        let c = by_id(id);
        println!(
            "{verb} set {id} ({}, finished {}, {})",
            c.backup_type,
            c.finished,
            human(c.stored_bytes)
        );
    }
    if !wal.is_empty() {
        println!(
            "{verb} {} WAL file(s) from {} to {} (every kept set needs WAL from {} on).",
            wal.len(),
            wal[0].0,
            wal[wal.len() - 1].0,
            p.wal_from.as_deref().unwrap_or("-")
        );
    }
    println!(
        "{} set(s) kept, {} expired, {} {}.",
        p.keep.len(),
        p.expire.len(),
        human(freed),
        if a.dry_run { "would be freed" } else { "freed" }
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(id: &str, ty: &str, base: Option<&str>, started: &str, wal: &str) -> CatalogEntry {
        CatalogEntry {
            set_id: id.into(),
            name: None,
            backup_type: ty.into(),
            copy_only: false,
            damaged: false,
            base_set: base.map(Into::into),
            source_kind: "postgres".into(),
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
