//! A chain restored in one pass. The sets are read newest first, and every page of a
//! restored file is written once, by the newest set that holds it. Rules:
//! - the restored files are the newest set's, at its sizes; a file only older sets
//!   hold is not restored, and nothing past a restored file's size is written;
//! - a Data or Zero frame supplies every page of its chunk, a Pages frame the pages of
//!   its bitmap, a chunk without a frame (a sparse file) none;
//! - a page already written by a newer set is skipped (superseded).
//!
//! `Written` keeps the pages written so far per restored file; a `LayerSink` puts one
//! set's checked frames into the target through it.

use super::{FrameSink, Held};
use crate::format::manifest::IdIndex;
use roaring::RoaringBitmap;
use std::collections::HashMap;
use std::io;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

/// The pages of a file written so far: a prefix while they come in order (one set of
/// one stripe: most files), a bitmap from the first gap on.
#[derive(Debug)]
pub(super) enum Pages {
    Prefix(u32),
    Map(Box<RoaringBitmap>),
}

impl Default for Pages {
    fn default() -> Self {
        Pages::Prefix(0)
    }
}

impl Pages {
    pub(super) fn range_cardinality(&self, r: Range<u32>) -> u64 {
        match self {
            Pages::Prefix(n) => r.end.min(*n).saturating_sub(r.start) as u64,
            Pages::Map(m) => m.range_cardinality(r),
        }
    }

    pub(super) fn contains(&self, p: u32) -> bool {
        match self {
            Pages::Prefix(n) => p < *n,
            Pages::Map(m) => m.contains(p),
        }
    }

    pub(super) fn insert_range(&mut self, r: Range<u32>) {
        match self {
            Pages::Prefix(n) if r.start <= *n => *n = (*n).max(r.end),
            Pages::Prefix(_) if r.is_empty() => {}
            Pages::Prefix(n) => {
                let mut m = RoaringBitmap::new();
                m.insert_range(0..*n);
                m.insert_range(r);
                *self = Pages::Map(Box::new(m));
            }
            Pages::Map(m) => {
                m.insert_range(r);
            }
        }
    }

    #[cfg(test)]
    pub(super) fn insert(&mut self, p: u32) {
        self.insert_range(p..p + 1);
    }

    pub(super) fn len(&self) -> u64 {
        match self {
            Pages::Prefix(n) => *n as u64,
            Pages::Map(m) => m.len(),
        }
    }

    /// The pages of `r` written, in order.
    pub(super) fn range(&self, r: Range<u32>) -> Vec<u32> {
        match self {
            Pages::Prefix(n) => (r.start..r.end.min(*n)).collect(),
            Pages::Map(m) => m.range(r).collect(),
        }
    }

    fn bitmap(&self) -> RoaringBitmap {
        match self {
            Pages::Prefix(n) => {
                let mut m = RoaringBitmap::new();
                m.insert_range(0..*n);
                m
            }
            Pages::Map(m) => (**m).clone(),
        }
    }
}

/// The files a chain restores and the pages of each written so far.
pub struct Written {
    pub(super) page: u64,
    /// Restored file id -> its size and the pages written.
    pub(super) files: Files,
}

/// Restored files by id: each one's size and pages written, found by its id.
pub(super) struct Files {
    index: IdIndex,
    entries: Vec<(u64, Mutex<Pages>)>,
}

impl Files {
    pub(super) fn get(&self, id: &u32) -> Option<&(u64, Mutex<Pages>)> {
        Some(&self.entries[self.index.get(*id)?])
    }

    pub(super) fn keys(&self) -> impl Iterator<Item = u32> + '_ {
        self.index.iter().map(|e| e.0)
    }

    pub(super) fn values(&self) -> impl Iterator<Item = &(u64, Mutex<Pages>)> {
        self.entries.iter()
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = (u32, &(u64, Mutex<Pages>))> {
        self.index.iter().map(|(id, k)| (id, &self.entries[k]))
    }
}

impl std::ops::Index<&u32> for Files {
    type Output = (u64, Mutex<Pages>);
    fn index(&self, id: &u32) -> &Self::Output {
        self.get(id).expect("a restored file")
    }
}

impl Written {
    /// `files`: the id and size of every regular file restored; `page`: the page size.
    pub fn new(files: impl IntoIterator<Item = (u32, u64)>, page: u64) -> io::Result<Written> {
        let (mut ids, mut entries) = (vec![], vec![]);
        for (id, size) in files {
            if size.div_ceil(page) > u32::MAX as u64 {
                return Err(io::Error::other(format!(
                    "file {id} of {size} bytes has more pages than a chain restore tracks"
                )));
            }
            ids.push(id);
            entries.push((size, Mutex::new(Pages::default())));
        }
        if !ids.is_sorted_by(|a, b| a < b) {
            // One entry per id, the first listed.
            let mut both: Vec<_> = ids.into_iter().zip(entries).collect();
            both.sort_by_key(|e| e.0);
            both.dedup_by_key(|e| e.0);
            (ids, entries) = both.into_iter().unzip();
        }
        entries.shrink_to_fit();
        Ok(Written {
            page,
            files: Files {
                index: IdIndex::new(ids),
                entries,
            },
        })
    }

    /// The byte ranges of each restored file that no set wrote (a fresh file reads as
    /// zeros there; a delta restore must make them so).
    pub fn unwritten_ranges(&self) -> Vec<(u32, Range<u64>)> {
        let mut out = vec![];
        for (id, (size, bm)) in self.files.iter() {
            let mut gaps = RoaringBitmap::new();
            gaps.insert_range(0..size.div_ceil(self.page) as u32);
            gaps -= bm.lock().unwrap().bitmap();
            let mut runs: Vec<Range<u64>> = vec![];
            for p in gaps {
                let (s, e) = (
                    p as u64 * self.page,
                    ((p as u64 + 1) * self.page).min(*size),
                );
                match runs.last_mut() {
                    Some(r) if r.end == s => r.end = e,
                    _ => runs.push(s..e),
                }
            }
            out.extend(runs.into_iter().map(|r| (id, r)));
        }
        out
    }

    /// Pages of restored files that no set wrote so far (they read as zeros).
    pub fn unwritten(&self) -> u64 {
        self.files
            .values()
            .map(|(size, bm)| size.div_ceil(self.page) - bm.lock().unwrap().len())
            .sum()
    }
}

/// What one set's frames did to the target.
#[derive(Default, Debug)]
pub struct LayerStats {
    /// Bytes the set supplied (zero ranges included: the fresh file holds them).
    pub written_bytes: AtomicU64,
    /// Pages of its frames not written: a newer set wrote them, or dropped or cut them.
    pub skipped_pages: AtomicU64,
    /// Bytes of its chunks the target already held (a delta restore): not written.
    pub held_bytes: AtomicU64,
}

/// One set of a chain writing into the target: its file ids mapped to the restored
/// files' (a file not mapped is not restored: a newer set dropped it).
pub struct LayerSink<'a> {
    inner: &'a dyn FrameSink,
    /// None: a set restored alone, nothing to layer (its frames fit its files, checked).
    written: Option<&'a Written>,
    /// None: the set's ids are the restored files' (the newest set's).
    map: Option<HashMap<u32, u32>>,
    pub stats: LayerStats,
}

impl<'a> LayerSink<'a> {
    pub fn new(inner: &'a dyn FrameSink, written: &'a Written, map: HashMap<u32, u32>) -> Self {
        LayerSink {
            inner,
            written: Some(written),
            map: Some(map),
            stats: LayerStats::default(),
        }
    }

    /// The newest set's layer: its file ids are the restored files'.
    pub fn same_ids(inner: &'a dyn FrameSink, written: &'a Written) -> Self {
        LayerSink {
            inner,
            written: Some(written),
            map: None,
            stats: LayerStats::default(),
        }
    }

    /// A set restored alone (no chain, no delta): every frame goes through, counted,
    /// and no page is tracked.
    pub fn alone(inner: &'a dyn FrameSink) -> Self {
        LayerSink {
            inner,
            written: None,
            map: None,
            stats: LayerStats::default(),
        }
    }

    /// The restored file that set file `file` is, if it is restored.
    fn to(&self, file: u32) -> Option<u32> {
        match &self.map {
            Some(m) => m.get(&file).copied(),
            None => Some(file),
        }
    }

    /// Marks the pages of `[offset, offset + len)` of set file `file` not yet written as
    /// written, and returns the restored file and the byte ranges to write (clipped to
    /// its size); the other pages count as skipped.
    fn claim(&self, file: u32, offset: u64, len: u64) -> Option<(u32, Vec<Range<u64>>)> {
        let Some(written) = self.written else {
            return Some((file, std::iter::once(offset..offset + len).collect()));
        };
        let page = written.page;
        let frame_pages = (offset + len).div_ceil(page) - offset / page;
        let target = self.to(file).and_then(|to| {
            let (size, bm) = written.files.get(&to)?;
            Some((to, *size, bm))
        });
        let Some((to, size, bm)) = target else {
            self.stats.skipped_pages.fetch_add(frame_pages, Relaxed);
            return None;
        };
        let end = (offset + len).min(size);
        let (first, last) = (offset / page, end.div_ceil(page));
        let mut runs: Vec<Range<u64>> = vec![];
        if first < last {
            let mut bm = bm.lock().unwrap();
            let pages = first as u32..last as u32;
            if bm.range_cardinality(pages.clone()) == 0 {
                runs.push(offset..end);
            } else {
                for p in pages.clone().filter(|&p| !bm.contains(p)) {
                    let (s, e) = (
                        (p as u64 * page).max(offset),
                        ((p as u64 + 1) * page).min(end),
                    );
                    match runs.last_mut() {
                        Some(r) if r.end == s => r.end = e,
                        _ => runs.push(s..e),
                    }
                }
            }
            bm.insert_range(pages);
        }
        let claimed: u64 = runs
            .iter()
            .map(|r| r.end.div_ceil(page) - r.start / page)
            .sum();
        self.stats
            .skipped_pages
            .fetch_add(frame_pages - claimed, Relaxed);
        Some((to, runs))
    }
}

impl FrameSink for LayerSink<'_> {
    fn write(&self, file: u32, offset: u64, data: &[u8]) -> io::Result<()> {
        let Some((to, runs)) = self.claim(file, offset, data.len() as u64) else {
            return Ok(());
        };
        for r in runs {
            let bytes = &data[(r.start - offset) as usize..(r.end - offset) as usize];
            self.inner.write(to, r.start, bytes)?;
            self.stats
                .written_bytes
                .fetch_add(bytes.len() as u64, Relaxed);
        }
        Ok(())
    }

    fn write_zeros(&self, file: u32, offset: u64, len: usize) -> io::Result<()> {
        let Some((to, runs)) = self.claim(file, offset, len as u64) else {
            return Ok(());
        };
        for r in runs {
            let n = r.end - r.start;
            self.inner.write_zeros(to, r.start, n as usize)?;
            self.stats.written_bytes.fetch_add(n, Relaxed);
        }
        Ok(())
    }

    fn proven(&self, file: u32, offset: u64, len: usize) -> io::Result<bool> {
        match self.to(file) {
            Some(to) => self.inner.proven(to, offset, len),
            None => Ok(false),
        }
    }

    fn differs(&self, file: u32, offset: u64, len: usize) -> io::Result<Option<Vec<(u32, u32)>>> {
        // The target's pages that can differ; of them a write here puts those no newer
        // set wrote (`claim`), so no page outside them is written.
        match self.to(file) {
            Some(to) => self.inner.differs(to, offset, len),
            None => Ok(None),
        }
    }

    fn holds(&self, q: Held, scratch: &mut [u8]) -> io::Result<bool> {
        // Only a chunk this frame gives whole: no newer set wrote a page of it.
        let Some(to) = self.to(q.file) else {
            return Ok(false);
        };
        let Some(written) = self.written else {
            let held = self.inner.holds(Held { file: to, ..q }, scratch)?;
            if held {
                self.stats.held_bytes.fetch_add(q.len as u64, Relaxed);
            }
            return Ok(held);
        };
        let Some((size, bm)) = written.files.get(&to) else {
            return Ok(false);
        };
        let (page, end) = (written.page, q.offset + q.len as u64);
        if end > *size || q.len == 0 {
            return Ok(false);
        }
        let pages = (q.offset / page) as u32..end.div_ceil(page) as u32;
        if bm.lock().unwrap().range_cardinality(pages.clone()) != 0 {
            return Ok(false);
        }
        if !self.inner.holds(Held { file: to, ..q }, scratch)? {
            return Ok(false);
        }
        // One frame per chunk in a set, and the newer sets are done: nothing races.
        bm.lock().unwrap().insert_range(pages);
        self.stats.held_bytes.fetch_add(q.len as u64, Relaxed);
        Ok(true)
    }

    fn parallel(&self, file: u32) -> bool {
        self.to(file).is_some_and(|to| self.inner.parallel(to))
    }
    fn written(&self, file: u32, offset: u64, len: u64) {
        let Some(to) = self.to(file) else {
            return;
        };
        let Some(written) = self.written else {
            return self.inner.written(to, offset, len);
        };
        if let Some((size, _)) = written.files.get(&to) {
            let end = (offset + len).min(*size);
            if offset < end {
                self.inner.written(to, offset, end - offset);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Files in memory; zero ranges are not written (fresh files read as zeros).
    #[derive(Default)]
    struct Mem(Mutex<HashMap<u32, Vec<u8>>>, Mutex<Vec<(u32, u64, u64)>>);

    impl FrameSink for Mem {
        fn write(&self, file: u32, offset: u64, data: &[u8]) -> io::Result<()> {
            let mut m = self.0.lock().unwrap();
            let f = m.entry(file).or_insert_with(|| vec![b'.'; 20]);
            f[offset as usize..offset as usize + data.len()].copy_from_slice(data);
            Ok(())
        }
        fn written(&self, file: u32, offset: u64, len: u64) {
            self.1.lock().unwrap().push((file, offset, len));
        }
    }

    fn stats(l: &LayerSink) -> (u64, u64) {
        (
            l.stats.written_bytes.load(Relaxed),
            l.stats.skipped_pages.load(Relaxed),
        )
    }

    #[test]
    fn each_page_is_written_once_by_the_newest_set_that_holds_it() {
        let mem = Mem::default();
        // Restored file 10: 20 bytes, five pages of 4; file 11 no set writes.
        let w = Written::new([(10, 20), (11, 8)], 4).unwrap();
        // The newest set (its file 1 is file 10): page 1, and page 3 as zeros.
        let newest = LayerSink::new(&mem, &w, HashMap::from([(1, 10)]));
        newest.write(1, 4, b"BBBB").unwrap();
        newest.write_zeros(1, 12, 4).unwrap();
        assert_eq!(stats(&newest), (8, 0));
        // An older set held the file at 24 bytes (cut to 20) and a file since dropped.
        let older = LayerSink::new(&mem, &w, HashMap::from([(7, 10)]));
        older.write(7, 0, &[b'A'; 24]).unwrap();
        older.written(7, 0, 24);
        older.write(8, 0, b"dropped!").unwrap();
        // Pages 0, 2 and 4 written; 1 and 3 superseded, 5 cut, 2 of the dropped file.
        assert_eq!(stats(&older), (12, 5));
        assert_eq!(mem.0.lock().unwrap()[&10], b"AAAABBBBAAAA....AAAA");
        assert_eq!(mem.1.lock().unwrap().as_slice(), &[(10, 0, 20)]);
        assert!(!mem.0.lock().unwrap().contains_key(&8));
        // The oldest set writes nothing of a file already whole.
        let oldest = LayerSink::new(&mem, &w, HashMap::from([(3, 10)]));
        oldest.write(3, 0, &[b'Z'; 20]).unwrap();
        oldest.write(3, 16, b"ZZZZ").unwrap();
        assert_eq!(stats(&oldest), (0, 6));
        assert_eq!(mem.0.lock().unwrap()[&10], b"AAAABBBBAAAA....AAAA");
        // File 11's two pages were never written.
        assert_eq!(w.unwritten(), 2);
    }

    #[test]
    fn a_set_alone_goes_through_counted_and_tracks_nothing() {
        let mem = Mem::default();
        let alone = LayerSink::alone(&mem);
        alone.write(3, 4, b"abcd").unwrap();
        alone.write(3, 4, b"efgh").unwrap();
        alone.written(3, 4, 4);
        assert_eq!(stats(&alone), (8, 0));
        assert_eq!(&mem.0.lock().unwrap()[&3][4..8], b"efgh");
        assert_eq!(mem.1.lock().unwrap().as_slice(), &[(3, 4, 4)]);
    }

    #[test]
    fn partial_pages_and_page_runs() {
        let mem = Mem::default();
        // 18 bytes: the last page holds 2.
        let w = Written::new([(5, 18)], 4).unwrap();
        let newest = LayerSink::new(&mem, &w, HashMap::from([(0, 5)]));
        newest.write(0, 16, b"xy").unwrap();
        newest.write(0, 4, b"pppp").unwrap();
        let older = LayerSink::new(&mem, &w, HashMap::from([(0, 5)]));
        // Page runs 0 and 2..4 of an older, shorter file (14 bytes).
        older.write(0, 0, b"aaaabbbbccccdd").unwrap();
        assert_eq!(stats(&older), (10, 1));
        let got = mem.0.lock().unwrap()[&5].clone();
        assert_eq!(&got[..18], b"aaaappppccccdd..xy");
        assert_eq!(w.unwritten(), 0);
    }
}
