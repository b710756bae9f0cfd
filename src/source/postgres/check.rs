//! Page checksums verified, and a differential's changed pages chosen, as chunks pass
//! through the pipeline.

use super::*;
use crate::engine::backup::page_selected;

/// Verifies page checksums of relation files as chunks pass through the pipeline.
pub struct PageChecker {
    /// Entry id -> segment number, for relation files only.
    pub(super) segments: HashMap<u32, u32>,
    pub(super) verify: bool,
    pub(super) start_lsn: u64,
    /// Differential: pages at or after this LSN (the base's start) are stored.
    pub(super) base_lsn: Option<u64>,
    pub(super) diff_ids: HashSet<u32>,
    pub(super) continue_after_error: bool,
    pub failures: Mutex<Vec<String>>,
    /// The start of the first segment the change map summarized (the base's start
    /// rounded down to its segment): a listed page older than it was listed by no
    /// record the map read.
    pub(super) summarized_from: u64,
    /// Pages the change map listed whose LSN is before `summarized_from`: how many,
    /// and the first few by name.
    pub(super) stale: Mutex<(u64, Vec<String>)>,
}

/// Stale pages named at most.
const STALE_NAMED: usize = 5;

impl PageChecker {
    /// A page read because the change map listed it carries an LSN at or after the
    /// first summarized segment's start, or is new; any other is counted and the first
    /// few named. The summaries cover whole segments, so records just before the
    /// base's start list pages too: those mean nothing. Without data checksums (or
    /// wal_log_hints) a record may set a visibility bit without moving the page's LSN,
    /// so nothing is counted then.
    fn stale_pages(&self, file: &ReadFile, offset: u64, data: &[u8], sel: &PageSet) {
        if !self.verify {
            return;
        }
        for (i, page) in data.chunks_exact(pgpage::BLCKSZ).enumerate() {
            if !page_selected(Some(sel), i)
                || pgpage::is_new(page)
                || pgpage::lsn(page) >= self.summarized_from
            {
                continue;
            }
            let mut s = self.stale.lock().unwrap();
            s.0 += 1;
            if s.1.len() < STALE_NAMED {
                s.1.push(format!(
                    "'{}' block {}: LSN {}",
                    file.path,
                    offset as usize / pgpage::BLCKSZ + i,
                    crate::pg::format_lsn(pgpage::lsn(page))
                ));
            }
        }
    }
}

impl ChunkFilter for PageChecker {
    fn selects(&self, file: &ReadFile) -> bool {
        self.base_lsn.is_some() && self.diff_ids.contains(&file.id)
    }

    fn select(&self, file: &ReadFile, _offset: u64, data: &[u8]) -> Option<PageSet> {
        let base = self.base_lsn?;
        if !self.selects(file) {
            return None;
        }
        let mut sel = [0u64; 32];
        for (i, page) in data.chunks(pgpage::BLCKSZ).enumerate() {
            // New pages are kept too: the base may hold older content at that place.
            if page.len() < pgpage::BLCKSZ || pgpage::is_new(page) || pgpage::lsn(page) >= base {
                sel[i / 64] |= 1 << (i % 64);
            }
        }
        Some(sel)
    }

    fn check(
        &self,
        file: &ReadFile,
        offset: u64,
        data: &[u8],
        sel: Option<&PageSet>,
    ) -> Result<(), String> {
        if let (Some(_), Some(sel)) = (self.base_lsn, sel) {
            self.stale_pages(file, offset, data, sel);
        }
        if !self.verify {
            return Ok(());
        }
        let Some(&seg) = self.segments.get(&file.id) else {
            return Ok(());
        };
        for (i, page) in data.chunks_exact(pgpage::BLCKSZ).enumerate() {
            if !page_selected(sel, i) || pgpage::is_new(page) {
                continue;
            }
            let block = ((offset as usize / pgpage::BLCKSZ) + i) as u32;
            let blkno = seg * pgpage::RELSEG_SIZE + block;
            if pgpage::checksum(page, blkno) == pgpage::stored_checksum(page) {
                continue;
            }
            // Pages changed after the backup started are replayed from WAL; a torn read
            // of a page being written is read again before it is called damage.
            if pgpage::lsn(page) >= self.start_lsn {
                continue;
            }
            let mut again = vec![0u8; pgpage::BLCKSZ];
            let reread = std::fs::File::open(file.path.full())
                .and_then(|f| f.read_exact_at(&mut again, offset + (i * pgpage::BLCKSZ) as u64));
            if reread.is_ok()
                && (pgpage::lsn(&again) >= self.start_lsn
                    || pgpage::checksum(&again, blkno) == pgpage::stored_checksum(&again))
            {
                continue;
            }
            let msg = format!(
                "page checksum failure in '{}', block {block}: stored {:#06x}, computed {:#06x}",
                file.path,
                pgpage::stored_checksum(page),
                pgpage::checksum(page, blkno)
            );
            if !self.continue_after_error {
                return Err(format!("{msg}; the backup stops (use --continue-after-error to store the set marked damaged)"));
            }
            self.failures.lock().unwrap().push(msg);
        }
        Ok(())
    }

    fn problems(&self) -> Vec<String> {
        self.failures.lock().unwrap().clone()
    }

    fn notes(&self) -> Vec<String> {
        let s = self.stale.lock().unwrap();
        match s.0 {
            0 => vec![],
            n => vec![format!(
                "{n} page(s) the block summaries listed carry an LSN before the first summarized segment, which no summarized record explains (they are stored; report it if it recurs): {}",
                s.1.join(", ")
            )],
        }
    }
}

/// The relation files among `entries`, with their entry ids.
pub(super) fn relation_files(
    entries: &[SourceFile],
) -> impl Iterator<Item = (usize, &SourceFile)> + Clone {
    entries
        .iter()
        .enumerate()
        .filter(|(_, e)| e.kind == EntryKind::File && pgpage::is_relation_file(&e.rel_path))
}

/// The page check of a full set of `entries` taken from another copy of a cluster
/// (a merge): checksums verified when `verify`, pages torn at or after `start_lsn`
/// tolerated as in a hot backup.
pub fn full_page_checker(entries: &[SourceFile], verify: bool, start_lsn: u64) -> PageChecker {
    PageChecker {
        segments: relation_files(entries)
            .map(|(i, e)| (i as u32, pgpage::segment_number(&e.rel_path)))
            .collect(),
        verify,
        start_lsn,
        base_lsn: None,
        summarized_from: 0,
        diff_ids: HashSet::new(),
        continue_after_error: false,
        failures: Mutex::new(vec![]),
        stale: Mutex::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(lsn: u64) -> Vec<u8> {
        let mut p = vec![0u8; pgpage::BLCKSZ];
        p[0..4].copy_from_slice(&((lsn >> 32) as u32).to_le_bytes());
        p[4..8].copy_from_slice(&(lsn as u32).to_le_bytes());
        p[14..16].copy_from_slice(&512u16.to_le_bytes());
        p
    }

    /// Issue 53, item 8: pages a record in the base's first segment changed before the
    /// base's start are listed by its summary and mean nothing; older ones are named.
    #[test]
    fn only_pages_no_summarized_record_explains_are_noted() {
        const SEG: u64 = 16 << 20;
        let base = 5 * SEG + 0x2000;
        let checker = |verify| PageChecker {
            segments: HashMap::new(),
            verify,
            start_lsn: 6 * SEG,
            base_lsn: Some(base),
            summarized_from: base - base % SEG,
            diff_ids: HashSet::from([0]),
            continue_after_error: false,
            failures: Mutex::new(vec![]),
            stale: Mutex::default(),
        };
        let file = ReadFile::new(
            0,
            PathBuf::from("base/5/16384"),
            3 * pgpage::BLCKSZ as u64,
            0,
        );
        // In the base's segment before its start, after it, and in an older segment.
        let data = [page(5 * SEG + 0x100), page(base + 8), page(4 * SEG + 0x100)].concat();
        let all = [u64::MAX; 32];
        let c = checker(true);
        c.stale_pages(&file, 0, &data, &all);
        let notes = c.notes();
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(
            notes[0].starts_with("1 page(s)") && notes[0].contains("block 2"),
            "{notes:?}"
        );
        // Without checksums a visibility record may leave a page's LSN behind.
        let c = checker(false);
        c.stale_pages(&file, 0, &data, &all);
        assert!(c.notes().is_empty());
    }
}
