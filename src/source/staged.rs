//! A chain merged into a new full set (`pagevault merge`): the entries the newest
//! set's manifest lists, with its facts, their chunks sent by the merge (`feed`) rather
//! than read from files. The caller builds the entries; nothing here trusts a path it
//! was not given.

use super::{Extra, Finish, Source, SourceFile, SourceInfo};
use crate::engine::backup::{ChunkFilter, Feed};
use crate::format::manifest::SourceKind;
use anyhow::Result;

pub struct Staged {
    pub info: SourceInfo,
    pub page_size: u32,
    pub entries: Vec<SourceFile>,
    /// The manifest's extra map of the set copied (PostgreSQL: its facts).
    pub extra: Extra,
    /// PostgreSQL: verify page checksums; pages torn at or after this LSN tolerated.
    pub page_check: Option<(bool, u64)>,
    /// What sends every chunk of every entry; None reads the entries' files.
    pub feed: Option<Box<dyn Feed + Send>>,
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

    fn finish(&mut self, _ok: bool) -> Result<Finish> {
        Ok(Finish {
            extra: self.extra.clone(),
            late: vec![],
        })
    }

    fn facts(&self) -> Extra {
        self.extra.clone()
    }

    fn feed(&self) -> Option<&dyn Feed> {
        self.feed.as_deref().map(|f| f as &dyn Feed)
    }

    fn filter(&self, entries: &[SourceFile]) -> Option<Box<dyn ChunkFilter>> {
        match (self.info.kind, self.page_check) {
            (SourceKind::Postgres, Some((verify, start_lsn))) => Some(Box::new(
                super::postgres::full_page_checker(entries, verify, start_lsn),
            )),
            _ => None,
        }
    }
}
