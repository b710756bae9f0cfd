//! `files:PATH`: a file or a directory tree read as pages. No consistency promise:
//! for cold files and snapshots, and to benchmark any storage.

use super::{Source, SourceFile};
use crate::engine::backup::{Dirs, FilePath};
use crate::format::manifest::SourceKind;
use crate::format::manifest::{EntryKind, SourceInfo};
use anyhow::{bail, Context, Result};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

pub struct Files {
    root: PathBuf,
    page_size: u32,
}

impl Files {
    pub fn new(root: PathBuf, page_size: u32) -> Files {
        Files { root, page_size }
    }
}

/// Lists a tree (or one file) as source entries, directories first, in a stable order.
pub fn walk(root: &Path) -> Result<Vec<SourceFile>> {
    let meta = std::fs::symlink_metadata(root)
        .with_context(|| format!("cannot read source '{}'", root.display()))?;
    let entry = |path: &Path,
                 abs_path: FilePath,
                 rel: String,
                 m: &std::fs::Metadata|
     -> Result<Option<SourceFile>> {
        let ft = m.file_type();
        let (kind, size, link_target) = if ft.is_file() {
            (EntryKind::File, m.len(), None)
        } else if ft.is_dir() {
            (EntryKind::Dir, 0, None)
        } else if ft.is_symlink() {
            let t = std::fs::read_link(path)?;
            (EntryKind::Link, 0, Some(t.to_string_lossy().into()))
        } else {
            return Ok(None); // sockets, fifos, devices: nothing to back up
        };
        Ok(Some(SourceFile {
            rel_path: rel,
            abs_path,
            kind,
            size,
            mode: m.mode() & 0o7777,
            mtime: m.mtime(),
            dev: m.dev(),
            missing_ok: false,
            link_target,
        }))
    };
    if meta.is_file() {
        let name = root
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "file".into());
        let abs = root.to_path_buf().into();
        return Ok(entry(root, abs, name, &meta)?.into_iter().collect());
    }
    if !meta.is_dir() {
        bail!(
            "source '{}' is neither a file nor a directory",
            root.display()
        );
    }
    // Stat in batches: memory holds the entries made and one batch, never every
    // walked entry with its metadata. The batch and its stat slots are made once.
    const BATCH: usize = 4096;
    let mut out = vec![];
    let mut dirs = Dirs::default();
    let mut batch: Vec<(String, walkdir::DirEntry)> = Vec::with_capacity(BATCH);
    let mut stats: Vec<super::StatSlot> = Vec::with_capacity(BATCH);
    let mut flush = |batch: &mut Vec<(String, walkdir::DirEntry)>| -> Result<()> {
        super::stat_into(batch.len(), |i| batch[i].1.path(), &mut stats);
        for ((rel, e), slot) in batch.drain(..).zip(stats.iter_mut()) {
            let m = slot.take().expect("every path is stat'ed");
            let m = m.with_context(|| format!("cannot stat '{}'", e.path().display()))?;
            if let Some(f) = entry(e.path(), dirs.file(e.path()), rel, &m)? {
                out.push(f);
            }
        }
        Ok(())
    };
    for e in walkdir::WalkDir::new(root).min_depth(1).sort_by_file_name() {
        let e = e.with_context(|| format!("cannot walk '{}'", root.display()))?;
        let Some(rel) = e.path().strip_prefix(root).unwrap().to_str() else {
            bail!(
                "'{}' is not valid UTF-8; pagevault stores UTF-8 paths",
                e.path().display()
            );
        };
        batch.push((rel.to_string(), e));
        if batch.len() == BATCH {
            flush(&mut batch)?;
        }
    }
    flush(&mut batch)?;
    Ok(out)
}

impl Source for Files {
    fn info(&self) -> SourceInfo {
        let database = self
            .root
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| self.root.display().to_string());
        SourceInfo::plain(SourceKind::Files, self.root.display().to_string(), database)
    }
    fn page_size(&self) -> u32 {
        self.page_size
    }
    fn prepare(&mut self) -> Result<Vec<SourceFile>> {
        walk(&self.root)
    }
    fn finish(&mut self, _ok: bool) -> Result<super::Finish> {
        Ok(super::Finish::default())
    }
}
