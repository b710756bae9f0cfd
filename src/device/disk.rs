//! Disk files. A stripe is written to `NAME.partial`, synced, then renamed to NAME:
//! an interrupted backup never leaves a file under the stripe's name.

use super::{Device, StripeSink, StripeSource};
use anyhow::{bail, Context, Result};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

pub struct Disk {
    path: PathBuf,
}

impl Disk {
    pub fn new(path: &str) -> Disk {
        Disk {
            path: PathBuf::from(path),
        }
    }
    fn partial(&self) -> PathBuf {
        let mut p = self.path.clone().into_os_string();
        p.push(".partial");
        PathBuf::from(p)
    }
}

impl Device for Disk {
    fn describe(&self) -> String {
        self.path.display().to_string()
    }

    fn create(&self, hint: &super::CreateHint) -> Result<Box<dyn StripeSink>> {
        if self.path.is_dir() {
            bail!(
                "device '{}' is a directory; name a file",
                self.path.display()
            );
        }
        let partial = self.partial();
        // A stale .partial (an interrupted backup's) goes; a link planted there is
        // removed, never written through: the stripe is created new.
        match fs::remove_file(&partial) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => {
                return Err(e).with_context(|| {
                    format!("cannot remove stale stripe file '{}'", partial.display())
                })
            }
            _ => {}
        }
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&partial)
            .with_context(|| format!("cannot create stripe file '{}'", partial.display()))?;
        // Where the file system refuses O_DIRECT, through the page cache.
        let file = match hint.direct && crate::sys::set_direct(&file, true).is_ok() {
            true => Out::Direct(super::staged::Staged::new(file)?),
            false => Out::Buffered(file),
        };
        Ok(Box::new(DiskSink {
            file,
            partial,
            path: self.path.clone(),
            written: 0,
            flushed: 0,
        }))
    }

    fn write_memory(&self, hint: &super::CreateHint) -> u64 {
        if hint.direct {
            super::staged::memory()
        } else {
            0
        }
    }

    fn open(&self) -> Result<Box<dyn StripeSource>> {
        let file = crate::sys::open_regular(&self.path).with_context(|| {
            if self.partial().exists() {
                format!(
                    "cannot open stripe '{}': only '{}' exists, left by an interrupted backup",
                    self.path.display(),
                    self.partial().display()
                )
            } else {
                format!("cannot open stripe '{}'", self.path.display())
            }
        })?;
        let len = file.metadata()?.len();
        // Sequential reads of the whole stripe follow: ask the kernel for read-ahead.
        crate::sys::fadvise(&file, 0, 0, crate::sys::Advice::Sequential);
        Ok(Box::new(DiskSource { file, len }))
    }

    fn remove(&self) -> Result<()> {
        match fs::remove_file(&self.path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e).with_context(|| format!("cannot remove '{}'", self.path.display())),
        }
    }
}

/// Asks the kernel to start writing `len` bytes at `offset` to the disk now, without
/// waiting. Otherwise dirty pages wait for the background threshold (10% of RAM by
/// default), and the final fsync writes everything after the CPU work is done.
pub fn start_writeback(file: &File, offset: u64, len: u64) {
    crate::sys::start_writeback(file, offset, len);
}

/// Bytes a sequential writer lets pile up before starting their writeback.
const WRITEBACK_STEP: u64 = 8 << 20;

/// How a stripe file is written: staged with O_DIRECT, or through the page cache with
/// its writeback started every `WRITEBACK_STEP`.
enum Out {
    Direct(super::staged::Staged),
    Buffered(File),
}

struct DiskSink {
    file: Out,
    partial: PathBuf,
    path: PathBuf,
    written: u64,
    flushed: u64,
}

impl StripeSink for DiskSink {
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        // Named, so that a full disk says which file (and so which device).
        let named = |e: io::Error| {
            let at = self.partial.display();
            io::Error::new(e.kind(), format!("cannot write '{at}': {e}"))
        };
        let f = match &mut self.file {
            Out::Direct(s) => return s.write_all(buf).map_err(named),
            Out::Buffered(f) => f,
        };
        f.write_all(buf).map_err(named)?;
        self.written += buf.len() as u64;
        if self.written - self.flushed >= WRITEBACK_STEP {
            start_writeback(f, self.flushed, self.written - self.flushed);
            self.flushed = self.written;
        }
        Ok(())
    }

    fn commit(self: Box<Self>) -> Result<Option<String>> {
        let partial = self.partial.clone();
        let done = (*self).finish();
        if done.is_err() {
            // Never left half-written under any name.
            let _ = fs::remove_file(&partial);
        }
        done.map(|()| None)
    }

    fn abort(self: Box<Self>) {
        drop(self.file);
        let _ = fs::remove_file(&self.partial);
    }
}

impl DiskSink {
    /// Syncs the stripe and gives it its name.
    fn finish(self) -> Result<()> {
        let file = match self.file {
            Out::Direct(s) => s
                .finish()
                .with_context(|| format!("cannot write '{}'", self.partial.display()))?,
            Out::Buffered(f) => std::sync::Arc::new(f),
        };
        file.sync_all()
            .with_context(|| format!("fsync of '{}' failed", self.partial.display()))?;
        fs::rename(&self.partial, &self.path).with_context(|| {
            format!(
                "cannot rename '{}' to '{}'",
                self.partial.display(),
                self.path.display()
            )
        })?;
        sync_parent(&self.path);
        Ok(())
    }
}

fn sync_parent(path: &Path) {
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    if let Ok(d) = File::open(parent) {
        let _ = d.sync_all();
    }
}

struct DiskSource {
    file: File,
    len: u64,
}

impl StripeSource for DiskSource {
    fn len(&self) -> u64 {
        self.len
    }
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.file.read_exact_at(buf, offset)
    }
}
