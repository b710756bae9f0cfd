//! Listing the data directory and its tablespaces: what is copied and what is not
//! (the directories kept empty, the files never copied), each tablespace under
//! pg_tblspc/OID read on its own volume.

use super::{Postgres, SourceFile};
use crate::format::manifest::EntryKind;
use anyhow::{Context, Result};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Directories whose contents are never copied (the directory itself is kept).
pub(in crate::source) const EMPTY_DIRS: &[&str] = &[
    "pg_wal",
    "pg_replslot",
    "pg_dynshmem",
    "pg_notify",
    "pg_serial",
    "pg_snapshots",
    "pg_stat_tmp",
    "pg_subtrans",
];
/// Files never copied.
const SKIP_FILES: &[&str] = &[
    "postmaster.pid",
    "postmaster.opts",
    "backup_label",
    "tablespace_map",
    "backup_label.old",
    "backup_manifest",
    "current_logfiles",
    "recovery.signal",
    "standby.signal",
];

impl Postgres {
    /// Lists the data directory (or a tablespace) below `root`, as `prefix/...`.
    pub(super) fn walk(&self, root: &Path, prefix: &str, out: &mut Vec<SourceFile>) -> Result<()> {
        let mut it = walkdir::WalkDir::new(root)
            .min_depth(1)
            .sort_by_file_name()
            .into_iter();
        // Listed first, then stat'ed many at once (`stat_all`): a cold cluster's inodes.
        let mut listed = vec![];
        while let Some(e) = it.next() {
            let e = match e {
                Ok(e) => e,
                // Files and directories vanish under a running server (dropped tables).
                Err(err)
                    if err
                        .io_error()
                        .is_some_and(|io| io.kind() == std::io::ErrorKind::NotFound) =>
                {
                    continue
                }
                Err(err) => {
                    return Err(err).with_context(|| format!("cannot list '{}'", root.display()))
                }
            };
            let name = e.file_name().to_string_lossy();
            let depth1 = e.depth() == 1 && prefix.is_empty();
            let skip = name.starts_with("pgsql_tmp")
                || name == "pg_internal.init"
                || (depth1 && SKIP_FILES.contains(&name.as_ref()));
            if (skip || depth1 && EMPTY_DIRS.contains(&name.as_ref())) && e.file_type().is_dir() {
                it.skip_current_dir();
            }
            if !skip {
                listed.push(e);
            }
        }
        let paths: Vec<&Path> = listed.iter().map(|e| e.path()).collect();
        let mut dirs = crate::engine::backup::Dirs::default();
        for (e, m) in listed.iter().zip(crate::source::stat_all(&paths)) {
            let rel = e
                .path()
                .strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            let rel_full = if prefix.is_empty() {
                rel.clone()
            } else {
                format!("{prefix}/{rel}")
            };
            let name = e.file_name().to_string_lossy();
            let depth1 = e.depth() == 1 && prefix.is_empty();
            let m = match m {
                Ok(m) => m,
                Err(_) => continue, // vanished between listing and stat
            };
            let ft = e.file_type();
            if ft.is_symlink() && prefix.is_empty() && rel.starts_with("pg_tblspc/") {
                // A tablespace: store its contents under pg_tblspc/OID, read on its own volume.
                let target = std::fs::read_link(e.path())?;
                self.walk(&target, &rel_full, out)?;
                out.push(private_dir(rel_full.clone(), target.clone(), &m));
                continue;
            }
            if ft.is_symlink() && depth1 && EMPTY_DIRS.contains(&name.as_ref()) {
                // pg_wal elsewhere (initdb --waldir): restored as a directory of the
                // copy's own, never as a link into the source's live WAL.
                out.push(private_dir(rel_full.clone(), e.path().to_path_buf(), &m));
                if name == "pg_wal" {
                    let status = e.path().join("archive_status");
                    out.push(private_dir("pg_wal/archive_status".into(), status, &m));
                }
                continue;
            }
            let kind = if ft.is_dir() {
                EntryKind::Dir
            } else if ft.is_file() {
                EntryKind::File
            } else if ft.is_symlink() {
                EntryKind::Link
            } else {
                continue;
            };
            out.push(SourceFile {
                rel_path: rel_full.clone(),
                abs_path: dirs.file(e.path()),
                kind,
                size: if kind == EntryKind::File { m.len() } else { 0 },
                mode: m.mode() & 0o7777,
                mtime: m.mtime(),
                dev: m.dev(),
                missing_ok: true,
                link_target: if kind == EntryKind::Link {
                    std::fs::read_link(e.path())
                        .ok()
                        .map(|t| t.to_string_lossy().into())
                } else {
                    None
                },
            });
            if ft.is_dir() && depth1 && name == "pg_wal" {
                let status = e.path().join("archive_status");
                out.push(private_dir("pg_wal/archive_status".into(), status, &m));
            }
        }
        Ok(())
    }
}

/// A directory stored as PostgreSQL creates it (0700), with `m`'s time and device.
fn private_dir(rel_path: String, abs_path: PathBuf, m: &std::fs::Metadata) -> SourceFile {
    SourceFile {
        rel_path,
        abs_path: abs_path.into(),
        kind: EntryKind::Dir,
        size: 0,
        mode: 0o700,
        mtime: m.mtime(),
        dev: m.dev(),
        missing_ok: true,
        link_target: None,
    }
}
