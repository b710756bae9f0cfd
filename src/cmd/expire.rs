//! `pagevault expire`: retention (see ops::expire).

use super::each::{each, EachRepo};
use super::{print_json, shown};
use crate::device::object::StoreOptions;
use crate::ops::expire::plan::parse_duration;
use crate::ops::expire::{expire, ExpireOptions, ExpireReport, Rules};
use crate::units::human;
use anyhow::Result;
use clap::Args;

#[derive(Args)]
#[command(after_help = "\
The rules combine: what any of them keeps is kept. The newest full always is.

Examples:
  # Point-in-time restore to any moment of the last 14 days, and 4 fulls at least:
  pagevault expire --repo /backups/main --keep-within 14d --keep-full 4 --dry-run
  # Two weeks of PITR, plus a full of each of the last 7 days, 5 weeks and 12 months:
  pagevault expire --repo s3://bucket/main --keep-within 14d \\
      --keep-daily 7 --keep-weekly 5 --keep-monthly 12
  # What a nightly expire will do on the 1st of next month:
  PAGEVAULT_NOW=2026-06-01T02:00:00Z pagevault expire --repo /backups/main --keep-within 14d --dry-run

--keep-within D keeps the newest full that ended at or before now - D, every set
after it and all WAL from its start: a restore reaches any point from that full's
end to the newest archived WAL (what `status` shows as the recovery window).
--keep-daily/--keep-weekly/--keep-monthly N keep the newest full of each of the last
N calendar days, ISO weeks (Monday to Sunday) or months in UTC, this one included;
such a full restores to its own end, not to a point in time (its older WAL goes).
PAGEVAULT_NOW (RFC 3339) replaces the clock for the ages, nothing else.
In an immutable repository (`pagevault init --immutable --retain D`) nothing younger
than D (by its last-modified time in the store) is removed: a set the rules expire is
kept, listed and named \"locked until ...\" (`locked` in --json), and so is the WAL
from the first file still held; a removal the store refuses keeps the set listed and
names the refusal.
Drill records (drills/) older than the oldest set left go too, never the newest
(`drills` in --json); the retention holds them as it holds sets.
A stanza naming several repositories (--stanza, no --repo-index): each expired with
its own settings, key and endpoint, a heading per repository (`repositories` in
--json); one that fails stops no other, and the exit is non-zero naming it.")]
pub struct ExpireArgs {
    /// The repository (a directory, s3://BUCKET/PREFIX, azure://CONTAINER/PREFIX or gs://BUCKET/PREFIX).
    #[arg(long)]
    pub repo: String,
    /// Of the stanza's repositories (--stanza), use this one: its name or its place N
    /// (1 the first), as backup's --to-repo picks; its own key, endpoint and settings
    /// apply. Instead of --repo. Without either, each repository with its own.
    #[arg(long, value_name = "NAME|N")]
    pub repo_index: Option<String>,
    /// Keep the N newest full backups that are not damaged, every set after the oldest
    /// of them and the WAL from its start.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub keep_full: Option<u32>,
    /// Keep what a point-in-time restore to any moment of the last D needs (14d, 36h,
    /// 2w; units s, m, h, d, w).
    #[arg(long, value_name = "D", value_parser = parse_duration)]
    pub keep_within: Option<u64>,
    /// Keep the newest full of each of the last N days (UTC).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub keep_daily: u32,
    /// Keep the newest full of each of the last N ISO weeks (UTC).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub keep_weekly: u32,
    /// Keep the newest full of each of the last N months (UTC).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub keep_monthly: u32,
    /// Say what would be removed and why, remove nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

fn options(a: ExpireArgs, store: StoreOptions) -> ExpireOptions {
    ExpireOptions {
        repo: a.repo,
        rules: Rules {
            keep_full: a.keep_full.unwrap_or(0),
            keep_within: a.keep_within,
            keep_daily: a.keep_daily,
            keep_weekly: a.keep_weekly,
            keep_monthly: a.keep_monthly,
        },
        dry_run: a.dry_run,
        store,
    }
}

pub fn run(a: ExpireArgs, store: &StoreOptions) -> Result<()> {
    let json = a.json;
    let r = expire(&options(a, store.clone()))?;
    if json {
        print_json(&serde_json::to_value(&r)?);
        return Ok(());
    }
    print_text(&r);
    Ok(())
}

/// Each repository of the stanza with its own retention, key and endpoint: a heading
/// per repository, then its lines (`--json`: `repositories`); one failing stops no other.
pub fn run_each(json: bool, list: Vec<EachRepo<ExpireArgs>>) -> Result<()> {
    let of = list.len();
    let out = each(
        list,
        json,
        |a, store| expire(&options(a, store)),
        |_, r| print_text(r),
        |_| None,
    );
    if json {
        out.print_json("expire");
    }
    out.verdict("expire", of)
}

fn print_text(r: &ExpireReport) {
    let (kept, gone) = match r.dry_run {
        true => ("would be kept", "would be removed"),
        false => ("kept", "removed"),
    };
    for d in &r.sets {
        let stored = (r.expired_sets.iter())
            .find(|c| c.set_id == d.set_id)
            .map(|c| format!(", {}", human(c.stored_bytes)))
            .unwrap_or_default();
        let held = r.locked.iter().find(|l| l.set_id == d.set_id);
        let fate = match held {
            _ if d.keep => kept,
            Some(_) => "expired",
            None => gone,
        };
        println!(
            "set {} ({}, finished {}{stored}) {fate} because {}",
            shown(&d.set_id),
            d.backup_type,
            shown(&d.finished),
            d.why
        );
        match held {
            Some(l) if l.refused.is_some() => println!(
                "  its objects are locked: the store refused their removal ({}); it stays listed until a later expire removes it",
                shown(l.refused.as_deref().unwrap_or_default())
            ),
            Some(l) => println!(
                "  its objects are locked until {} (the repository's retention): it stays listed until a later expire removes it",
                l.locked_until.as_deref().unwrap_or("-")
            ),
            None => {}
        }
    }
    if let (Some(from), Some(why)) = (&r.wal.kept_from, &r.wal.kept_because) {
        println!("WAL from {from} on {kept} because {why}");
    }
    if let (Some(first), Some(last), Some(why)) = (
        &r.wal.removed_first,
        &r.wal.removed_last,
        &r.wal.removed_because,
    ) {
        println!(
            "{} WAL file(s) from {first} to {last} {gone} because {why}",
            r.wal.removed
        );
    }
    if r.wal_locked > 0 {
        let why = match (&r.wal_locked_until, &r.wal_refused) {
            (Some(u), _) => format!("locked until {u} (the repository's retention)"),
            (None, Some(e)) => format!("locked: the store refused a removal ({})", shown(e)),
            (None, None) => "locked".to_string(),
        };
        println!(
            "{} expired WAL file(s) kept: {why}; a later expire removes them",
            r.wal_locked
        );
    }
    if !r.drills.removed.is_empty() {
        println!(
            "{} drill record(s) {gone} because they are older than the oldest set kept",
            r.drills.removed.len()
        );
    }
    if r.drills.locked > 0 {
        let why = match (&r.drills.locked_until, &r.drills.refused) {
            (Some(u), _) => format!("locked until {u} (the repository's retention)"),
            (None, Some(e)) => format!("the store refused a removal ({})", shown(e)),
            (None, None) => "locked".to_string(),
        };
        println!("{} expired drill record(s) kept: {why}", r.drills.locked);
    }
    if let Some(start) = &r.recovery_window_start {
        println!(
            "recovery window   from {start} (the end of set {}) on",
            r.recovery_window_set
                .as_deref()
                .map(shown)
                .unwrap_or_default()
        );
    }
    let held = match r.locked.len() {
        0 => String::new(),
        n => format!(", {n} expired but locked"),
    };
    println!(
        "{} set(s) kept{held}, {} {}, {} {}.",
        r.kept.len(),
        r.expired.len(),
        if r.dry_run {
            "would be expired"
        } else {
            "expired"
        },
        human(r.bytes_freed),
        if r.dry_run { "would be freed" } else { "freed" }
    );
}
