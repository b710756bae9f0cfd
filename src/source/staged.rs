//! A copy of a set laid down in a directory, read back as a new full set (`pagevault
//! merge`): the entries the set's manifest lists, each read from where its restore put
//! it, with the set's facts. The caller builds the entries; nothing here trusts a path
//! it was not given.

use super::{Extra, Finish, Source, SourceFile, SourceInfo};
use crate::engine::backup::ChunkFilter;
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

    fn filter(&self, entries: &[SourceFile]) -> Option<Box<dyn ChunkFilter>> {
        match (self.info.kind, self.page_check) {
            (SourceKind::Postgres, Some((verify, start_lsn))) => Some(Box::new(
                super::postgres::full_page_checker(entries, verify, start_lsn),
            )),
            _ => None,
        }
    }
}
