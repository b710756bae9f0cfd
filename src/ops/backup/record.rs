//! What a backup leaves: the set's manifest, its catalog record and the --report page.

use super::*;
use crate::format::manifest::SourceKind;
use crate::pg::{self, facts::PgFacts, walsummary};

/// Records the committed set in its repository, or removes it: a set whose record
/// cannot be written, whose plain write raced a first keyed one, or whose base an
/// expire removed while it ran (checked after recording: expire checks for new sets
/// after unrecording) is not kept.
pub(super) fn record_set(
    repo: &Repo,
    entry: &CatalogEntry,
    dest: &Dest,
    plain: bool,
) -> Result<()> {
    // Every stripe, wherever it went; what cannot be removed is named.
    let remove = |e: anyhow::Error, why: &str| {
        let left: Vec<String> = (dest.devices.iter())
            .filter_map(|d| d.remove().err().map(|r| format!("{r:#}")))
            .collect();
        match left.is_empty() {
            true => e.context(format!(
                "backup stopped: {why}, so its stripes were removed"
            )),
            false => e.context(format!(
                "backup stopped: {why}, but stripes were left behind: {}",
                left.join("; ")
            )),
        }
    };
    if let Err(e) = repo.record(entry) {
        return Err(remove(e, "its catalog record could not be written"));
    }
    let base_gone = |b: &str| -> Result<()> {
        match repo.recorded(b)? {
            true => Ok(()),
            false => Err(crate::fault::transient(format!(
                "its base set {b} was removed (expire) while it ran; run the backup again: it takes the newest set as its base"
            ))),
        }
    };
    // A first keyed write may have raced this plain one: then the set goes.
    let kept = match plain {
        true => repo.check_still_plain(),
        false => Ok(()),
    }
    .and_then(|()| entry.base_set.as_deref().map_or(Ok(()), base_gone));
    kept.map_err(|e| {
        let _ = repo.unrecord(&entry.set_id);
        remove(e, "it is not kept")
    })
}

/// What the text shows besides the manifest: warnings, pages per volume and file.
pub(super) struct Text {
    pub(super) warnings: Vec<String>,
    pub(super) vol_pages: Vec<u64>,
    pub(super) file_pages: Vec<(String, u64)>,
}

/// Entries a list taken apart from its end may have spare before it is shrunk.
const SHRINK_EVERY: usize = 1 << 16;

/// What the manifest needs of a source entry while its file is read (64 bytes, not
/// the source's 104: the plan holds its path to open and its volume).
pub(super) struct Held {
    rel_path: Box<str>,
    link_target: Option<Box<str>>,
    size: u64,
    mtime: i64,
    dev: u64,
    mode: u32,
    kind: EntryKind,
}

impl From<SourceFile> for Held {
    fn from(e: SourceFile) -> Held {
        Held {
            rel_path: e.rel_path.into_boxed_str(),
            link_target: e.link_target,
            size: e.size,
            mtime: e.mtime,
            dev: e.dev,
            mode: e.mode,
            kind: e.kind,
        }
    }
}

/// The entries as `Held`, in order; the source's list shrinks as the new one grows.
pub(super) fn held_of(mut entries: Vec<SourceFile>) -> Vec<Held> {
    let mut held = Vec::with_capacity(entries.len());
    while let Some(e) = entries.pop() {
        if entries.capacity() - entries.len() >= SHRINK_EVERY {
            entries.shrink_to_fit();
        }
        held.push(Held::from(e));
    }
    held.reverse();
    held
}

/// The set's manifest: every entry with its checksum and pages (a file that vanished
/// is left out), the stripes and totals.
#[allow(clippy::too_many_arguments)]
pub(super) fn manifest(
    o: &BackupOptions,
    set_hex: &str,
    dest: &Dest,
    input: &mut Input,
    out: &mut Outcome,
    params: &Params,
    extra: BTreeMap<String, serde_json::Value>,
    problems: &[String],
    started: chrono::DateTime<chrono::Utc>,
) -> (Manifest, Text) {
    let finished = chrono::Utc::now();
    let page_size = params.page_size as u64;
    let kind = input.info.kind;
    // The walk, the plan and the results are taken apart as the entries are made:
    // memory holds each file once. Plan ids increase with the entries, and the results
    // follow the plan (then the late files': PostgreSQL's last WAL, ids after the
    // walk's), so one cursor walks them beside the entries, from the end: the walk's
    // list shrinks as the manifest's grows.
    let mut entries = std::mem::take(&mut input.held);
    let plan_ids = std::mem::take(&mut input.plan_ids);
    debug_assert!(plan_ids.is_sorted_by(|a, b| a < b), "plan ids increase");
    let sparse: Vec<bool> = input.plan.iter().map(|f| f.pages.is_some()).collect();
    drop(std::mem::take(&mut input.plan));
    let results = std::mem::take(&mut out.files);
    let mut next = plan_ids.len();
    let mut files: Vec<FileEntry> = Vec::with_capacity(entries.len());
    let mut text = Text {
        warnings: vec![],
        vol_pages: vec![0u64; input.vols.names.len().max(1)],
        file_pages: vec![],
    };
    let mut pages = 0u64;
    while let Some(e) = entries.pop() {
        let i = entries.len();
        if entries.capacity() - i >= SHRINK_EVERY {
            entries.shrink_to_fit();
        }
        let (mut checksum, mut is_sparse) = (None, false);
        let mut result = None;
        if next > 0 && plan_ids[next - 1] == i as u32 {
            next -= 1;
            is_sparse = sparse.get(next).copied().unwrap_or(false);
            result = (next < results.len()).then(|| results.get(next));
        }
        if let Some(r) = result {
            if r.vanished {
                if kind != SourceKind::Postgres {
                    text.warnings.push(format!(
                        "'{}' vanished during the backup and is not in the set",
                        e.rel_path
                    ));
                }
                continue;
            }
            if r.shrank && kind != SourceKind::Postgres {
                text.warnings.push(format!(
                    "'{}' shrank while it was read; its end is stored as zeros",
                    e.rel_path
                ));
            }
            checksum = r.checksum;
        }
        let p = e.size.div_ceil(page_size);
        pages += p;
        if e.kind == EntryKind::File {
            text.vol_pages[input.vols.index[&e.dev]] += p;
            if o.file_pages {
                text.file_pages.push((e.rel_path.to_string(), p));
            }
        }
        files.push(FileEntry {
            id: i as u32,
            path: e.rel_path,
            kind: e.kind,
            size: e.size,
            mode: e.mode,
            mtime: e.mtime,
            pages: p,
            checksum,
            sparse: is_sparse,
            link_target: e.link_target,
        });
    }
    files.reverse();
    text.warnings.reverse();
    text.file_pages.reverse();
    let manifest = Manifest {
        format_version: match (&params.seal, &params.sign) {
            (Some(_), _) => SEALED_VERSION,
            (None, Some(_)) => SIGNED_VERSION,
            (None, None) => FORMAT_VERSION,
        },
        set_id: set_hex.to_string(),
        name: o.name.clone(),
        backup_type: o.backup_type,
        copy_only: o.copy_only || dest.discard,
        damaged: !problems.is_empty(),
        source: input.info.clone(),
        codec: params.codec.describe(),
        block_size: o.block_size as u32,
        transfer_size: o.max_transfer_size as u32,
        page_size: page_size as u32,
        started: started.to_rfc3339(),
        finished: (o.data_finished.clone()).unwrap_or_else(|| finished.to_rfc3339()),
        seconds: out.wall.as_secs_f64(),
        stripes: (out.stripes.iter().zip(&dest.devices).enumerate())
            .map(|(i, (s, d))| StripeInfo {
                index: i as u32,
                device: d.describe(),
                frames: s.frames,
                body_end: s.body_end,
            })
            .collect(),
        totals: Totals {
            files: files.iter().filter(|f| f.kind == EntryKind::File).count() as u64,
            read_bytes: out.read_bytes,
            raw_bytes: out.raw_bytes,
            stored_bytes: out.stored_bytes,
            pages,
            frames: out.stripes.iter().map(|s| s.frames).sum(),
        },
        files,
        extra,
    };
    (manifest, text)
}

/// The set's line in the repository's catalog.
pub(super) fn catalog_entry(
    o: &BackupOptions,
    dest: &Dest,
    repo: &Repo,
    manifest: &Manifest,
    info: &SourceInfo,
    committed: &[crate::set::write::Committed],
) -> CatalogEntry {
    // The facts were made by this backup's source: they read back.
    let pg = PgFacts::from_extra(&manifest.extra).ok().flatten();
    let stop = pg.as_ref().and_then(|f| f.stop.as_ref());
    CatalogEntry {
        set_id: manifest.set_id.clone(),
        name: o.name.clone(),
        backup_type: manifest.backup_type,
        copy_only: manifest.copy_only,
        damaged: manifest.damaged,
        base_set: dest.base.as_ref().map(|(e, _)| e.set_id.clone()),
        source_kind: info.kind,
        database: info.database.clone(),
        system_identifier: info.identity.get("system_identifier").cloned(),
        timeline: pg.as_ref().map(|f| f.timeline),
        start_lsn: pg.as_ref().map(|f| pg::format_lsn(f.start_lsn)),
        stop_lsn: stop.map(|s| pg::format_lsn(s.lsn)),
        start_wal: pg.as_ref().map(|f| f.start_wal.clone()),
        stop_wal: stop.map(|s| s.wal.clone()),
        started: manifest.started.clone(),
        finished: manifest.finished.clone(),
        seconds: manifest.seconds,
        read_bytes: Some(manifest.totals.read_bytes),
        raw_bytes: manifest.totals.raw_bytes,
        stored_bytes: manifest.totals.stored_bytes,
        codec: manifest.codec.clone(),
        stripes: dest.specs.iter().map(|p| repo.relative(p)).collect(),
        base_version: (dest.base.as_ref()).and_then(|(e, _)| repo.record_version(&e.set_id)),
        stripe_versions: match committed.iter().any(|c| c.version.is_some()) {
            true => committed.iter().map(|c| c.version.clone()).collect(),
            false => vec![],
        },
        change_rules: (info.kind == SourceKind::Postgres).then(|| {
            (manifest.extra.get(CHANGE_RULES))
                .and_then(|v| v.as_u64())
                .map_or(walsummary::RULES, |r| r as u32)
        }),
    }
}

/// The manifest's record of the change rules that chose its pages.
pub const CHANGE_RULES: &str = "change_rules";
/// The manifest's `extra` key naming the keyed repository the set was written into
/// (its marker's `repository-id`).
pub const REPOSITORY: &str = "repository";

/// The HTML page (--report): the configuration, the summary and the timeline.
pub(super) fn write_report(
    path: &Path,
    r: &BackupReport,
    series: report::Series,
    devices: &[Box<dyn Device>],
) -> Result<()> {
    let summary = serde_json::to_value(r)?;
    // The source as every output shows it: never the --source given (a password).
    let mut config = serde_json::json!({"source": r.source.location});
    config
        .as_object_mut()
        .unwrap()
        .extend(summary["config"].as_object().cloned().unwrap_or_default());
    let page = report::Report {
        command: "backup",
        config,
        summary: &summary,
        series,
        read_names: r
            .volumes
            .iter()
            .map(|v| v.name.display().to_string())
            .collect(),
        write_names: devices.iter().map(|d| d.describe()).collect(),
    };
    report::write(path, &page)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn held_entries_keep_their_order_and_what_the_manifest_needs() {
        let n = SHRINK_EVERY * 2 + 3;
        let entries: Vec<SourceFile> = (0..n)
            .map(|i| SourceFile {
                rel_path: format!("d/f{i}"),
                abs_path: PathBuf::from(format!("/src/d/f{i}")).into(),
                kind: [EntryKind::File, EntryKind::Dir, EntryKind::Link][i % 3],
                size: i as u64 * 7,
                mode: 0o640,
                mtime: -(i as i64),
                dev: 9,
                missing_ok: true,
                link_target: (i % 3 == 2).then(|| format!("t{i}").into()),
            })
            .collect();
        let held = held_of(entries);
        assert_eq!(held.len(), n);
        for (i, h) in held.iter().enumerate() {
            assert_eq!(&*h.rel_path, format!("d/f{i}"));
            assert_eq!(
                h.kind,
                [EntryKind::File, EntryKind::Dir, EntryKind::Link][i % 3]
            );
            assert_eq!(
                (h.size, h.mtime, h.dev, h.mode),
                (i as u64 * 7, -(i as i64), 9, 0o640)
            );
            assert_eq!(
                h.link_target.as_deref(),
                (i % 3 == 2).then(|| format!("t{i}")).as_deref()
            );
        }
        // What a file costs while it is read, beside its plan and results.
        assert_eq!(std::mem::size_of::<Held>(), 64);
    }
}
