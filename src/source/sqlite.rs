//! `sqlite:PATH`: a consistent copy of a live SQLite database. SQLite's online
//! backup API copies it, in one step under one read transaction, to a spool file
//! that the pipeline then reads: writers keep going in WAL mode and wait on their
//! busy timeout in rollback-journal mode.

use super::{Source, SourceFile};
use crate::format::manifest::SourceKind;
use crate::format::manifest::{EntryKind, SourceInfo};
use anyhow::{bail, Context, Result};
use rusqlite::{Connection, OpenFlags};
use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

pub struct Sqlite {
    path: PathBuf,
    spool_dir: Option<PathBuf>,
    spool: Option<tempfile_path::Spool>,
    page_size: u32,
    facts: BTreeMap<String, serde_json::Value>,
}

impl Sqlite {
    pub fn new(path: PathBuf, spool_dir: Option<PathBuf>) -> Sqlite {
        Sqlite {
            path,
            spool_dir,
            spool: None,
            page_size: 4096,
            facts: BTreeMap::new(),
        }
    }
}

/// A spool file removed when dropped.
mod tempfile_path {
    use std::path::PathBuf;
    pub struct Spool(pub PathBuf);
    impl Drop for Spool {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }
}

impl Source for Sqlite {
    fn info(&self) -> SourceInfo {
        let database = self
            .path
            .file_stem()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "main".into());
        SourceInfo::plain(
            SourceKind::Sqlite,
            self.path.display().to_string(),
            database,
        )
    }

    fn page_size(&self) -> u32 {
        self.page_size
    }

    fn prepare(&mut self) -> Result<Vec<SourceFile>> {
        let mut head = [0u8; 100];
        {
            use std::io::Read;
            let mut f = std::fs::File::open(&self.path).with_context(|| {
                format!("cannot open SQLite database '{}'", self.path.display())
            })?;
            f.read_exact(&mut head).with_context(|| {
                format!(
                    "'{}' is too short to be a SQLite database",
                    self.path.display()
                )
            })?;
        }
        if &head[..16] != b"SQLite format 3\0" {
            bail!(
                "'{}' is not a SQLite database (no 'SQLite format 3' header)",
                self.path.display()
            );
        }
        let src = Connection::open_with_flags(
            &self.path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .with_context(|| format!("cannot open SQLite database '{}'", self.path.display()))?;
        src.busy_timeout(Duration::from_secs(60))?;
        let journal: String = src.query_row("PRAGMA journal_mode", [], |r| r.get(0))?;
        let dir = self
            .spool_dir
            .clone()
            .or_else(|| self.path.parent().map(|p| p.to_path_buf()))
            .unwrap_or_else(std::env::temp_dir);
        let name = format!(
            ".{}.pagevault-spool-{}",
            self.path.file_name().unwrap_or_default().to_string_lossy(),
            std::process::id()
        );
        let path = dir.join(name);
        // Created new (a link planted at the name is removed, never written through),
        // private by the process's umask.
        let _ = std::fs::remove_file(&path);
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .with_context(|| format!("cannot create spool file '{}'", path.display()))?;
        let spool = tempfile_path::Spool(path);
        let t = Instant::now();
        {
            let mut dst = Connection::open_with_flags(
                &spool.0,
                OpenFlags::SQLITE_OPEN_READ_WRITE
                    | OpenFlags::SQLITE_OPEN_NO_MUTEX
                    | OpenFlags::SQLITE_OPEN_NOFOLLOW,
            )
            .with_context(|| format!("cannot create spool file '{}'", spool.0.display()))?;
            let b = rusqlite::backup::Backup::new(&src, &mut dst)?;
            // One step copies every page under a single read transaction: a snapshot.
            b.step(-1).context("SQLite online backup failed")?;
        }
        let copy_seconds = t.elapsed().as_secs_f64();
        let m = std::fs::metadata(&spool.0)?;
        let orig = std::fs::metadata(&self.path)?;
        let ps = u16::from_be_bytes([head[16], head[17]]);
        self.page_size = if ps == 1 { 65536 } else { ps as u32 };
        self.facts
            .insert("sqlite_journal_mode".into(), journal.into());
        self.facts
            .insert("sqlite_snapshot_seconds".into(), copy_seconds.into());
        let file = SourceFile {
            rel_path: self
                .path
                .file_name()
                .unwrap()
                .to_string_lossy()
                .into_owned(),
            abs_path: spool.0.clone().into(),
            kind: EntryKind::File,
            size: m.len(),
            mode: orig.mode() & 0o7777,
            mtime: orig.mtime(),
            dev: m.dev(),
            missing_ok: false,
            link_target: None,
        };
        self.spool = Some(spool);
        Ok(vec![file])
    }

    fn finish(&mut self, _ok: bool) -> Result<super::Finish> {
        self.spool = None;
        Ok(super::Finish {
            extra: std::mem::take(&mut self.facts),
            late: vec![],
        })
    }
}
