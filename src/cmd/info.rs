//! `pagevault header` (RESTORE HEADERONLY) and `pagevault files` (FILELISTONLY).

use super::print_json;
use crate::device::object::StoreOptions;
use crate::format::manifest::{EntryKind, Manifest};
use crate::format::ContentHash;
use crate::pg::{facts::PgFacts, format_lsn};
use crate::set::read as set;
use crate::units::human;
use anyhow::Result;
use clap::Args;
use serde_json::json;

#[derive(Args)]
pub struct InfoArgs {
    /// A stripe of the set. Any one stripe describes the whole set; name all to check them.
    #[arg(long = "from", required_unless_present = "repo")]
    pub from: Vec<String>,
    /// Describe a set of this repository instead (the newest, or --set).
    #[arg(long)]
    pub repo: Option<String>,
    /// Of the stanza's repositories (--stanza), use this one: its name or its place N
    /// (1 the first), as backup's --to-repo picks; its own key, endpoint and settings
    /// apply. Instead of --repo.
    #[arg(long, value_name = "NAME|N")]
    pub repo_index: Option<String>,
    /// The set of --repo to describe (an id or its first characters).
    #[arg(long, requires = "repo")]
    pub set: Option<String>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
pub struct FilesArgs {
    #[command(flatten)]
    pub info: InfoArgs,
    /// PostgreSQL: mark the files `restore --db-include NAME` would leave out. Repeatable.
    #[arg(long, value_name = "NAME", conflicts_with = "db_exclude")]
    pub db_include: Vec<String>,
    /// PostgreSQL: mark the files `restore --db-exclude NAME` would leave out. Repeatable.
    #[arg(long, value_name = "NAME")]
    pub db_exclude: Vec<String>,
}

/// The stripes named, or those of the chosen set of --repo (with the versions its
/// record pins them to).
fn stripes_of(a: &InfoArgs, store: &StoreOptions) -> Result<(Vec<String>, Vec<Option<String>>)> {
    let Some(r) = &a.repo else {
        return Ok((a.from.clone(), vec![]));
    };
    let repo = crate::repo::Repo::open(r, false, store)?;
    let catalog = repo.catalog()?;
    let entry = match &a.set {
        Some(id) => catalog.iter().find(|c| c.set_id.starts_with(id.as_str())),
        None => catalog.last(),
    }
    .ok_or_else(|| {
        anyhow::anyhow!(
            "repository '{r}' has no such set; `pagevault history --repo {r}` lists them"
        )
    })?;
    Ok(repo.stripes_of(entry))
}

/// The manifest of the set `a` names.
fn described(a: &InfoArgs, store: &StoreOptions) -> Result<crate::format::manifest::Manifest> {
    let (specs, pins) = stripes_of(a, store)?;
    set::describe_pinned(&specs, &pins, store)
}

pub fn run_header(a: InfoArgs, store: &StoreOptions) -> Result<()> {
    print_header(&described(&a, store)?, a.json)
}

/// A set's header: one row per fact, or its manifest without the file list as JSON.
pub fn print_header(m: &Manifest, json: bool) -> Result<()> {
    if json {
        let mut v = serde_json::to_value(m)?;
        v.as_object_mut().unwrap().remove("files");
        print_json(&json!({"sets": [v]}));
        return Ok(());
    }
    let pg = PgFacts::from_extra(&m.extra).ok().flatten();
    let rows: Vec<(&str, String)> = vec![
        ("BackupSetId", m.set_id.clone()),
        ("BackupName", m.name.clone().unwrap_or_default()),
        ("BackupType", m.backup_type.to_string()),
        ("IsCopyOnly", m.copy_only.to_string()),
        ("IsDamaged", m.damaged.to_string()),
        ("SourceKind", m.source.kind.to_string()),
        ("DatabaseName", m.source.database.clone()),
        ("SourceLocation", m.source.location.clone()),
        ("BackupStartDate", m.started.clone()),
        ("BackupFinishDate", m.finished.clone()),
        ("Seconds", format!("{:.3}", m.seconds)),
        ("Codec", m.codec.clone()),
        (
            "Encryption",
            match m.format_version {
                crate::format::SEALED_VERSION => "AES-256-GCM (frames and manifest)".into(),
                _ => "none".into(),
            },
        ),
        (
            "Signature",
            match m.format_version {
                crate::format::SIGNED_VERSION => "keyed BLAKE3 (frames and manifest)".into(),
                crate::format::SEALED_VERSION => "none (AES-256-GCM authenticates)".into(),
                _ => "none".into(),
            },
        ),
        (
            "FormatVersion",
            format!(
                "{} (frame digests: {})",
                m.format_version,
                match m.format_version {
                    crate::format::SIGNED_VERSION =>
                        "keyed BLAKE3 tags, XXH3-128 in file checksums",
                    v => ContentHash::of_version(v).name(),
                }
            ),
        ),
        (
            "BackupSize",
            format!(
                "{} ({} bytes)",
                human(m.totals.raw_bytes),
                m.totals.raw_bytes
            ),
        ),
        (
            "CompressedBackupSize",
            format!(
                "{} ({} bytes)",
                human(m.totals.stored_bytes),
                m.totals.stored_bytes
            ),
        ),
        ("Pages", m.totals.pages.to_string()),
        ("PageSize", m.page_size.to_string()),
        ("Files", m.totals.files.to_string()),
        (
            "Stripes",
            m.stripes
                .iter()
                .map(|s| s.device.clone())
                .collect::<Vec<_>>()
                .join(", "),
        ),
        ("BlockSize", m.block_size.to_string()),
        ("MaxTransferSize", m.transfer_size.to_string()),
        (
            "FirstLSN",
            pg.as_ref()
                .map(|f| format_lsn(f.start_lsn))
                .unwrap_or_default(),
        ),
        (
            "LastLSN",
            pg.as_ref()
                .and_then(|f| f.stop.as_ref())
                .map(|s| format_lsn(s.lsn))
                .unwrap_or_default(),
        ),
        (
            "Timeline",
            pg.as_ref()
                .map(|f| f.timeline.to_string())
                .unwrap_or_default(),
        ),
        (
            "Databases",
            (pg.iter().flat_map(|f| f.databases.iter()))
                .map(|(oid, name)| format!("{name} ({oid})"))
                .collect::<Vec<_>>()
                .join(", "),
        ),
    ];
    for (k, v) in rows {
        println!("{k:<22} {}", super::shown(&v));
    }
    Ok(())
}

pub fn run_files(a: FilesArgs, store: &StoreOptions) -> Result<()> {
    let m = described(&a.info, store)?;
    let left = crate::ops::restore::LeftOut::choose(&a.db_include, &a.db_exclude, &m)?;
    print_files_left(&m, left.as_ref(), a.info.json)
}

/// A set's files: path, kind, size, pages and checksum (or link target).
pub fn print_files(m: &Manifest, json: bool) -> Result<()> {
    print_files_left(m, None, json)
}

/// [`print_files`], marking the files `left` leaves out.
fn print_files_left(
    m: &Manifest,
    left: Option<&crate::ops::restore::LeftOut>,
    json: bool,
) -> Result<()> {
    let out = left.map(|l| l.ids(m)).unwrap_or_default();
    if json {
        let mut files = serde_json::to_value(&m.files)?;
        for f in files.as_array_mut().into_iter().flatten() {
            let id = f["id"].as_u64().unwrap_or(u64::MAX);
            f["left_out"] = out.contains(&(id as u32)).into();
        }
        print_json(&json!({"set_id": m.set_id, "files": files, "left_out": left}));
        return Ok(());
    }
    if let Some(l) = left {
        println!("{}", l.summary());
    }
    println!(
        "{:<50} {:>6} {:>14} {:>10} checksum",
        "path", "kind", "size", "pages"
    );
    for f in &m.files {
        let kind = match f.kind {
            EntryKind::File => "file",
            EntryKind::Dir => "dir",
            EntryKind::Link => "link",
        };
        let ck = match f.checksum {
            None => super::shown(f.link_target.as_deref().unwrap_or_default()),
            Some(c) => c.to_string()[..16].to_string(),
        };
        let note = if out.contains(&f.id) {
            "  (left out)"
        } else {
            ""
        };
        println!(
            "{:<50} {kind:>6} {:>14} {:>10} {ck}{note}",
            super::shown(&f.path),
            f.size,
            f.pages
        );
    }
    Ok(())
}
