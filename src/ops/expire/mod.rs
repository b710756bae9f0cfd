//! Retention (the rules and what they keep: plan.rs): removes every set no rule keeps
//! (the catalog record first, so a half-removed set is never offered for restore) and
//! the WAL older than the kept window's first full. In an immutable repository a set
//! or WAL file the retention still holds is kept (and named, with until when), a set's
//! stripes go before its record, and a removal the store refuses keeps the rest.

pub mod plan;

use crate::ops::drill::record::{self as drill, DrillExpiry};
use crate::pg::{parse_name, Kind};
use crate::repo::wal;
use crate::repo::{CatalogEntry, Lock, Repo};
use anyhow::{bail, Result};
pub use plan::{plan, Decision, Plan, Rules};
use serde::Serialize;
use std::collections::HashSet;

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

/// A set the rules expire that an immutable repository still holds whole.
#[derive(Debug, Serialize)]
pub struct LockedSet {
    pub set_id: String,
    /// Until when the repository's retention holds its newest object (RFC 3339).
    pub locked_until: Option<String>,
    /// The store's refusal of a removal (the set stays listed; expire tries again).
    pub refused: Option<String>,
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
    /// Expired by the rules but kept: the retention still holds them.
    pub locked: Vec<LockedSet>,
    /// WAL files the rules expire that the retention still holds (from the first of
    /// them on, every later one is kept too), and until when the first is held.
    pub wal_locked: usize,
    pub wal_locked_until: Option<String>,
    pub wal_refused: Option<String>,
    /// Drill records older than the oldest set left (the newest is always kept).
    pub drills: DrillExpiry,
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
    // One expire or merge at a time (a dry run removes nothing).
    let _lock = match o.dry_run {
        true => None,
        false => Some(repo.lock("expire")?),
    };
    let sets = repo.catalog()?;
    let mut p = plan(&sets, &o.rules, now);
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
    // Damaged segments' markers, from one listing: each goes after its segment.
    let marked: HashSet<String> = match &p.wal_from {
        Some(_) => wal::damaged::names(&repo)?.into_iter().collect(),
        None => HashSet::new(),
    };
    let (mut expired_sets, mut expired) = (expired_sets, p.expire.clone());
    let mut locked = vec![];
    let mut wal = wal;
    let (mut wal_locked, mut wal_locked_until, mut wal_refused) = (0, None, None);
    if repo.immutable().is_some() {
        // Ages from the objects' last-modified times in the store, against this clock.
        let clock = std::time::SystemTime::now();
        let mut gone = vec![];
        for c in expired_sets {
            let lock = match o.dry_run {
                true => repo
                    .locked_until(&repo.set_objects(&c), clock)?
                    .map(|u| Lock {
                        until: Some(u),
                        refusal: None,
                    }),
                false => repo.remove_set_unless_locked(&c, clock)?,
            };
            match lock {
                Some(l) => locked.push(LockedSet {
                    set_id: c.set_id.clone(),
                    locked_until: l.until.map(rfc3339),
                    refused: l.refusal,
                }),
                None => gone.push(c),
            }
        }
        expired_sets = gone;
        expired.retain(|id| expired_sets.iter().any(|c| c.set_id == *id));
        // Oldest first; the first one held keeps every later one (no gap is made), and
        // so does the first a set still held needs (it stays listed: restorable).
        let needed: Vec<(&str, &LockedSet)> = (sets.iter())
            .filter_map(|c| {
                let l = locked.iter().find(|l| l.set_id == c.set_id)?;
                Some((c.start_wal.as_deref()?, l))
            })
            .collect();
        let mut done = 0;
        for (n, _) in &wal {
            if let Some((_, l)) = needed.iter().find(|(from, _)| !wal_expired(n, from)) {
                wal_locked_until = l.locked_until.clone();
                wal_refused = l.refused.as_ref().map(|_| {
                    format!(
                        "set {} is still held (its removal was refused) and needs it",
                        l.set_id
                    )
                });
                break;
            }
            let marker = marked.contains(n).then(|| wal::damaged::marker_rel(n));
            let objects: Vec<String> = [
                wal::archived_rel(n),
                wal::summary::summary_rel(n),
                marker.flatten(),
            ]
            .into_iter()
            .flatten()
            .collect();
            if let Some(u) = repo.locked_until(&objects, clock)? {
                wal_locked_until = Some(rfc3339(u));
                break;
            }
            if !o.dry_run {
                let removed =
                    wal::remove_archived(&repo, n).and_then(|()| match marked.contains(n) {
                        true => wal::damaged::remove(&repo, n),
                        false => Ok(()),
                    });
                if let Err(e) = removed {
                    wal_refused = Some(format!("{e:#}"));
                    break;
                }
            }
            done += 1;
        }
        wal_locked = wal.len() - done;
        wal.truncate(done);
    } else if !o.dry_run {
        for c in &expired_sets {
            repo.unrecord(&c.set_id)?;
        }
        // A diff or incr recorded since the catalog was read keeps its chain: its
        // backup checks its base after recording, this after unrecording, so one of
        // them sees the other (docs/PROGRAMS.md).
        for id in chains_of_new(&repo, &sets, &expired_sets)? {
            let c = expired_sets
                .iter()
                .find(|c| c.set_id == id)
                .expect("expired");
            repo.record(c)?;
            expired.retain(|e| *e != id);
            p.keep.push(id.clone());
            if let Some(d) = p.decisions.iter_mut().find(|d| d.set_id == id) {
                d.keep = true;
                d.why = "a backup recorded while expire ran is based on it".into();
            }
        }
        expired_sets.retain(|c| expired.contains(&c.set_id));
        for c in &expired_sets {
            repo.remove_set_files(c)?;
        }
        for (n, _) in &wal {
            wal::remove_archived(&repo, n)?;
        }
        // Markers after their segments; also one an expire interrupted between the two left.
        if let Some(from) = &p.wal_from {
            for n in marked.iter().filter(|n| wal_expired(n, from)) {
                wal::damaged::remove(&repo, n)?;
            }
        }
    }
    // A drill of a set no longer held proves nothing about what can be restored.
    let left = |c: &&CatalogEntry| {
        p.keep.contains(&c.set_id) || locked.iter().any(|l| l.set_id == c.set_id)
    };
    let oldest_left = (sets.iter().filter(left))
        .filter_map(|c| chrono::DateTime::parse_from_rfc3339(&c.started).ok())
        .min();
    let drills = match oldest_left {
        Some(t) => drill::expire(&repo, t.with_timezone(&chrono::Utc), o.dry_run)?,
        None => DrillExpiry::default(),
    };
    let bytes_freed = expired_sets.iter().map(|c| c.stored_bytes).sum::<u64>()
        + wal.iter().map(|(_, s)| s).sum::<u64>();
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
        expired,
        sets: p.decisions,
        wal_needed_from: p.wal_from,
        wal_expired: wal.into_iter().map(|(n, _)| n).collect(),
        wal: wal_decision,
        recovery_window_set: p.window_set,
        recovery_window_start: p.window_start,
        bytes_freed,
        locked,
        wal_locked,
        wal_locked_until,
        wal_refused,
        drills,
        expired_sets,
    })
}

/// The expired sets that a set recorded since `sets` were listed needs (its base, its
/// base's base ...).
fn chains_of_new(
    repo: &Repo,
    sets: &[CatalogEntry],
    expired: &[CatalogEntry],
) -> Result<Vec<String>> {
    let mut needed: Vec<String> = vec![];
    for n in repo.catalog()? {
        if sets.iter().any(|c| c.set_id == n.set_id) {
            continue;
        }
        let mut base = n.base_set.clone();
        while let Some(b) = base {
            let Some(c) = expired.iter().find(|c| c.set_id == b) else {
                break;
            };
            if !needed.contains(&b) {
                needed.push(b);
            }
            base = c.base_set.clone();
        }
    }
    Ok(needed)
}

#[cfg(test)]
mod tests;

/// A time as RFC 3339, to the second, UTC.
fn rfc3339(t: std::time::SystemTime) -> String {
    chrono::DateTime::<chrono::Utc>::from(t).to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}
