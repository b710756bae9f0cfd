//! A copy of a set laid down in a directory, read back as a new full set (`pagevault
//! merge`): the entries the set's manifest lists, each read from where its restore put
//! it, with the set's facts. The caller builds the entries; nothing here trusts a path
//! it was not given. With a gate, the copy is still being written: each file is read
//! once the gate opens it, and the backup ends only once the whole copy was checked.

use super::{Extra, Finish, Source, SourceFile, SourceInfo};
use crate::engine::backup::{ChunkFilter, PageSet, ReadFile};
use crate::engine::gate::Gate;
use crate::format::manifest::SourceKind;
use anyhow::{anyhow, Result};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

pub struct Staged {
    pub info: SourceInfo,
    pub page_size: u32,
    pub entries: Vec<SourceFile>,
    /// The manifest's extra map of the set copied (PostgreSQL: its facts).
    pub extra: Extra,
    /// PostgreSQL: verify page checksums; pages torn at or after this LSN tolerated.
    pub page_check: Option<(bool, u64)>,
    /// The copy being written, and each entry's id in the gate (its id in the set
    /// copied); None when the copy is complete.
    pub gate: Option<(Arc<Gate>, Vec<u32>)>,
}

/// The source's filter, reading each file only once the gate opens it, and removing
/// it once every byte was read (its pages then need never reach the disk).
struct Gated {
    inner: Option<Box<dyn ChunkFilter>>,
    gate: Arc<Gate>,
    ids: Vec<u32>,
    /// Bytes read per entry.
    read: Vec<AtomicU64>,
}

impl ChunkFilter for Gated {
    fn check(
        &self,
        file: &ReadFile,
        offset: u64,
        data: &[u8],
        sel: Option<&PageSet>,
    ) -> Result<(), String> {
        self.inner
            .as_ref()
            .map_or(Ok(()), |f| f.check(file, offset, data, sel))?;
        if let Some(n) = self.read.get(file.id as usize) {
            let len = data.len() as u64;
            if n.fetch_add(len, Relaxed) + len == file.size {
                let _ = std::fs::remove_file(&file.path);
            }
        }
        Ok(())
    }
    fn problems(&self) -> Vec<String> {
        self.inner.as_ref().map_or(vec![], |f| f.problems())
    }
    fn notes(&self) -> Vec<String> {
        self.inner.as_ref().map_or(vec![], |f| f.notes())
    }
    fn ready(&self, file: &ReadFile, wait: Duration) -> Result<bool, String> {
        match self.ids.get(file.id as usize) {
            Some(&id) => self.gate.ready(id, wait),
            None => Err(format!("file {} is not in the copy", file.id)),
        }
    }
    fn select(&self, file: &ReadFile, offset: u64, data: &[u8]) -> Option<PageSet> {
        self.inner.as_ref()?.select(file, offset, data)
    }
}

impl Source for Staged {
    fn info(&self) -> SourceInfo {
        self.info.clone()
    }

    fn page_size(&self) -> u32 {
        self.page_size
    }

    fn prepare(&mut self) -> Result<Vec<SourceFile>> {
        Ok(std::mem::take(&mut self.entries))
    }

    fn finish(&mut self, ok: bool) -> Result<Finish> {
        // The set is committed only once every frame and file of the copy was checked.
        if let (true, Some((gate, _))) = (ok, &self.gate) {
            gate.wait_done()
                .map_err(|e| anyhow!("the chain's copy failed: {e}"))?;
        }
        Ok(Finish {
            extra: self.extra.clone(),
            late: vec![],
        })
    }

    fn facts(&self) -> Extra {
        self.extra.clone()
    }

    fn filter(&self, entries: &[SourceFile]) -> Option<Box<dyn ChunkFilter>> {
        let inner: Option<Box<dyn ChunkFilter>> = match (self.info.kind, self.page_check) {
            (SourceKind::Postgres, Some((verify, start_lsn))) => Some(Box::new(
                super::postgres::full_page_checker(entries, verify, start_lsn),
            )),
            _ => None,
        };
        match &self.gate {
            Some((gate, ids)) => Some(Box::new(Gated {
                inner,
                gate: gate.clone(),
                ids: ids.clone(),
                read: ids.iter().map(|_| AtomicU64::new(0)).collect(),
            })),
            None => inner,
        }
    }
}
