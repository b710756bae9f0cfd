//! Retention (the rules and what they keep: plan.rs): removes every set no rule keeps
//! (the catalog record first, so a half-removed set is never offered for restore) and
//! the WAL older than the kept window's first full.

pub mod plan;

use crate::pg::{parse_name, Kind};
use crate::repo::wal;
use crate::repo::{CatalogEntry, Repo};
use anyhow::{bail, Result};
pub use plan::{plan, Decision, Plan, Rules};
use serde::Serialize;

/// What `expire` is asked to do.
#[derive(Debug, Clone, Default)]
pub struct ExpireOptions {
    pub repo: String,
    pub rules: Rules,
    pub dry_run: bool,
    /// Object-store options (`--s3-endpoint`).
    pub store: crate::device::object::StoreOptions,
}

/// The archived WAL removed (or that would be), and why.
#[derive(Debug, Serialize)]
pub struct WalDecision {
    /// Kept from this segment on, because ...
    pub kept_from: Option<String>,
    pub kept_because: Option<String>,
    pub removed: usize,
    pub removed_first: Option<String>,
    pub removed_last: Option<String>,
    pub removed_because: Option<String>,
}

/// What it did (or, with `dry_run`, would do); `--json` prints this.
#[derive(Debug, Serialize)]
pub struct ExpireReport {
    pub command: &'static str,
    pub dry_run: bool,
    /// The time ages are measured from (PAGEVAULT_NOW, else the clock).
    pub now: String,
    pub kept: Vec<String>,
    pub expired: Vec<String>,
    /// Every set, oldest first: kept or removed, and why.
    pub sets: Vec<Decision>,
    pub wal_needed_from: Option<String>,
    pub wal_expired: Vec<String>,
    pub wal: WalDecision,
    /// The kept window: a restore reaches any point from the end of this full on
    /// (`status` reports the same start once expire ran).
    pub recovery_window_set: Option<String>,
    pub recovery_window_start: Option<String>,
    pub bytes_freed: u64,
    /// The expired sets' records, for the text output.
    #[serde(skip)]
    pub expired_sets: Vec<CatalogEntry>,
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
    if !o.rules.any() {
        bail!("say what to keep: --keep-full N, --keep-within D (14d), --keep-daily/--keep-weekly/--keep-monthly N, or several (their union is kept)");
    }
    let now = super::now()?;
    let repo = Repo::open(&o.repo, false, &o.store)?;
    let sets = repo.catalog()?;
    let p = plan(&sets, &o.rules, now);
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
    let from_set = p.wal_from_set.clone().unwrap_or_default();
    let wal_decision = WalDecision {
        kept_because: p.wal_from.as_ref().map(|_| {
            format!("set {from_set} starts there: a restore replays the WAL from the kept window's first full on")
        }),
        kept_from: p.wal_from.clone(),
        removed: wal.len(),
        removed_first: wal.first().map(|w| w.0.clone()),
        removed_last: wal.last().map(|w| w.0.clone()),
        removed_because: (!wal.is_empty()).then(|| {
            format!(
                "older than {}, the first segment set {from_set} needs, on its timeline or an earlier one",
                p.wal_from.as_deref().unwrap_or("-")
            )
        }),
    };
    Ok(ExpireReport {
        command: "expire",
        dry_run: o.dry_run,
        now: now.to_rfc3339(),
        kept: p.keep,
        expired: p.expire,
        sets: p.decisions,
        wal_needed_from: p.wal_from,
        wal_expired: wal.into_iter().map(|(n, _)| n).collect(),
        wal: wal_decision,
        recovery_window_set: p.window_set,
        recovery_window_start: p.window_start,
        bytes_freed,
        expired_sets,
    })
}

#[cfg(test)]
mod tests;
