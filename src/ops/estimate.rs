//! `estimate`: from the block summaries beside the archived WAL alone (the database is
//! not read), how much of the cluster changed since the newest full set and since the
//! newest set of any type, per database: when the next full (or merge) pays off.

use crate::format::manifest::{BackupType, EntryKind, SourceKind};
use crate::pg::facts::PgFacts;
use crate::pg::page::{RelPath, BLCKSZ};
use crate::pg::{self, parse_segment_name};
use crate::repo::wal::{self, summary};
use crate::repo::{CatalogEntry, Repo};
use anyhow::{anyhow, bail, Result};
use serde::Serialize;
use std::collections::BTreeMap;

/// Gaps listed in the report at most (the rest are counted).
const GAPS_SHOWN: usize = 5;

#[derive(Debug, Clone, Default)]
pub struct EstimateOptions {
    pub repo: String,
    /// Object-store options (`--s3-endpoint`).
    pub store: crate::device::object::StoreOptions,
}

/// What `--json` prints.
#[derive(Debug, Serialize)]
pub struct EstimateReport {
    pub command: &'static str,
    /// The newest archived segment the estimate reaches.
    pub through_wal: String,
    pub since_full: Since,
    /// None when the newest set is the newest full.
    pub since_newest: Option<Since>,
}

/// Changes since one set's start.
#[derive(Debug, Serialize)]
pub struct Since {
    pub set_id: String,
    pub backup_type: BackupType,
    pub start_lsn: String,
    /// The summaries cover every record from the set's start on.
    pub complete: bool,
    /// Why not, when not (the first few).
    pub gaps: Vec<String>,
    pub gap_count: usize,
    pub changed_blocks: u64,
    /// Blocks of relation files in the set.
    pub total_blocks: u64,
    pub percent: f64,
    pub databases: Vec<DbChange>,
}

#[derive(Debug, Serialize)]
pub struct DbChange {
    pub tablespace: u32,
    pub database: u32,
    /// The database's name when the set records it (not for the shared catalogs,
    /// database 0).
    pub name: Option<String>,
    pub changed_blocks: u64,
    pub total_blocks: u64,
    pub percent: f64,
    /// Created or dropped since the set: every block of it counts as changed.
    pub whole: bool,
}

pub fn estimate(o: &EstimateOptions) -> Result<EstimateReport> {
    let repo = Repo::open(&o.repo, false, &o.store)?;
    let catalog: Vec<CatalogEntry> = repo
        .catalog()?
        .into_iter()
        .filter(|c| c.source_kind == SourceKind::Postgres && !c.damaged)
        .collect();
    let full = catalog
        .iter()
        .rev()
        .find(|c| c.backup_type == BackupType::Full)
        .ok_or_else(|| {
            anyhow!(
                "repository '{}' holds no full PostgreSQL set: take one with pagevault backup --repo",
                repo.describe()
            )
        })?;
    let newest = catalog.last().expect("the full is in it");
    let tli = full
        .timeline
        .ok_or_else(|| anyhow!("set {} records no timeline", full.set_id))?;
    let through_wal = wal::list(&repo, tli)?.pop().ok_or_else(|| {
        anyhow!(
            "no WAL of timeline {tli} is archived in '{}'",
            repo.describe()
        )
    })?;
    let since_full = since(&repo, full, &through_wal)?;
    let since_newest = match newest.set_id == full.set_id {
        true => None,
        false => Some(since(&repo, newest, &through_wal)?),
    };
    Ok(EstimateReport {
        command: "estimate",
        through_wal,
        since_full,
        since_newest,
    })
}

/// The summaries' union from `set`'s start to the end of `through`, against the
/// relation blocks `set` holds.
fn since(repo: &Repo, set: &CatalogEntry, through: &str) -> Result<Since> {
    let manifest = super::set_manifest(repo, set)?;
    let facts = PgFacts::from_extra(&manifest.extra)
        .map_err(|e| anyhow!("set {}: {e}", set.set_id))?
        .ok_or_else(|| anyhow!("set {} holds no PostgreSQL facts", set.set_id))?;
    let seg_size = facts.wal_segment_size;
    let (tli, last) = parse_segment_name(through, seg_size)
        .ok_or_else(|| anyhow!("'{through}' is not a segment name"))?;
    if tli != facts.timeline {
        bail!(
            "set {} is of timeline {}, the archive's newest WAL of timeline {tli}: estimates across a timeline switch are not made",
            set.set_id,
            facts.timeline
        );
    }
    let map = summary::block_map(repo, tli, facts.start_lsn, last * seg_size, seg_size)?;
    let mut total: BTreeMap<(u32, u32), u64> = BTreeMap::new();
    for f in manifest.files.iter().filter(|f| f.kind == EntryKind::File) {
        if let Some(r) = RelPath::parse(&f.path) {
            *total.entry((r.spc, r.db)).or_default() += f.size.div_ceil(BLCKSZ as u64);
        }
    }
    let mut changed: BTreeMap<(u32, u32), u64> = BTreeMap::new();
    for (k, e) in &map.rels {
        *changed.entry((k.file.spc, k.file.db)).or_default() += e.blocks.len();
    }
    let mut dbs: Vec<(u32, u32)> = total.keys().chain(changed.keys()).copied().collect();
    dbs.extend(map.databases.iter().copied());
    dbs.sort();
    dbs.dedup();
    let databases: Vec<DbChange> = dbs
        .into_iter()
        .map(|k| {
            let whole = map.databases.contains(&k);
            let t = total.get(&k).copied().unwrap_or(0);
            let c = match whole {
                true => t.max(changed.get(&k).copied().unwrap_or(0)),
                false => changed.get(&k).copied().unwrap_or(0),
            };
            DbChange {
                tablespace: k.0,
                database: k.1,
                name: facts.databases.get(&k.1).cloned(),
                changed_blocks: c,
                total_blocks: t,
                percent: percent(c, t),
                whole,
            }
        })
        .collect();
    let changed_blocks = databases.iter().map(|d| d.changed_blocks).sum();
    let total_blocks = databases.iter().map(|d| d.total_blocks).sum();
    Ok(Since {
        set_id: set.set_id.clone(),
        backup_type: set.backup_type,
        start_lsn: pg::format_lsn(facts.start_lsn),
        complete: map.complete(),
        gaps: map.gaps.iter().take(GAPS_SHOWN).cloned().collect(),
        gap_count: map.gaps.len(),
        changed_blocks,
        total_blocks,
        percent: percent(changed_blocks, total_blocks),
        databases,
    })
}

fn percent(part: u64, whole: u64) -> f64 {
    match whole {
        0 => 0.0,
        w => 100.0 * part as f64 / w as f64,
    }
}
