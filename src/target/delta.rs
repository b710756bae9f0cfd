//! A delta restore (`restore --delta`): the target keeps what already matches the set.
//! Before anything is written, `sweep` removes what the set does not hold (files, links,
//! directories, anything of another kind where the set has a file or directory, and a
//! file with a second hard link, which a write in place would carry elsewhere). Then
//! each chunk a frame gives whole is compared by digest before the frame is
//! decompressed (`holds`), and every other write reads the bytes there first and
//! writes only the blocks that differ.

use crate::engine::restore::Held;
use crate::format::manifest::{EntryKind, Manifest};
use anyhow::{Context, Result};
use roaring::RoaringBitmap;
use rustix::fs::{Mode, OFlags, RenameFlags};
use serde::Serialize;
use std::cell::RefCell;
use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::os::unix::fs::{DirBuilderExt, FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};

/// Compared and written in blocks of this size: a changed page rewrites its block only.
const BLOCK: usize = 4096;
/// Bytes of a file in place asked of the disk ahead of the comparisons, once every
/// `COMPARE_STRIDE` bytes read: the kernel walks every page of a range asked, cached or
/// not, so a range asked again at each small read costs more than the reads.
const COMPARE_AHEAD: u64 = 8 << 20;
const COMPARE_STRIDE: u64 = COMPARE_AHEAD / 2;

/// What a delta restore did to the target (`restore --json`'s `delta`).
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct DeltaReport {
    /// Files of the set found in place with the set's content: not written.
    pub kept: u64,
    /// Files of the set found in place, of which some bytes (or the size) differed.
    pub rewritten: u64,
    /// Files of the set the target did not hold (or held as something else).
    pub created: u64,
    /// Files and links the target held that the set does not (directories' content included).
    pub removed: u64,
    /// Directories removed with their content.
    pub removed_dirs: u64,
    /// Bytes of the target read to compare with the set.
    pub compared_bytes: u64,
    /// Bytes written into the target.
    pub written_bytes: u64,
    /// `--delta wal`: bytes of files in place that the WAL proves the set's: neither
    /// read nor written.
    pub proven_bytes: u64,
    /// `--delta wal`: stored bytes of the frames of those, stepped over unread.
    pub stored_bytes_not_read: u64,
    /// `--delta wal`: uncompressed frames of which only the pages that can differ were
    /// read, each page checked by the frame's page checks.
    pub frames_read_in_part: u64,
    /// What the sweep moved aside and was not yet removed when the data was in place:
    /// its removal goes on in a process of its own (`removal_pid`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub still_removing: Vec<PathBuf>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub removal_pid: Option<u32>,
}

/// Per restored file: whether any byte of it changed; and the byte counts.
pub struct Delta {
    changed: Vec<AtomicBool>,
    compared: AtomicU64,
    written: AtomicU64,
    by_wal: Option<ByWal>,
}

/// `--delta wal`: per file, the pages that can differ from the set's (None: the file is
/// compared as without it), and the length each file in place had.
struct ByWal {
    page: u64,
    pages: Vec<Option<RoaringBitmap>>,
    /// Each file's size in the set.
    sizes: Vec<u64>,
    old_len: Vec<AtomicU64>,
}

/// What a thread last read of a file in place: a chunk `holds` found different is
/// written next, on the same thread mostly, and compared from here, not read again.
#[derive(Default)]
struct There {
    /// File index, offset and length of the bytes in `buf`, while they serve.
    key: Option<(usize, u64, usize)>,
    /// Bytes the file held there (fewer than the length at its end).
    n: usize,
    buf: Vec<u8>,
}

thread_local! {
    static THERE: RefCell<There> = RefCell::new(There::default());
}

impl Delta {
    pub(super) fn new(files: usize) -> Delta {
        Delta {
            changed: (0..files).map(|_| AtomicBool::new(false)).collect(),
            compared: AtomicU64::new(0),
            written: AtomicU64::new(0),
            by_wal: None,
        }
    }

    /// Only `pages` (per file, in `page`-byte pages) of the files in place can differ
    /// from the set's: the others are neither read nor written.
    pub(super) fn by_wal(&mut self, page: u64, pages: Vec<Option<RoaringBitmap>>, sizes: Vec<u64>) {
        let old_len = pages.iter().map(|_| AtomicU64::new(0)).collect();
        self.by_wal = Some(ByWal {
            page,
            pages,
            sizes,
            old_len,
        });
    }

    /// Whether `--delta wal` gave the pages that can differ.
    pub(super) fn by_wal_set(&self) -> bool {
        self.by_wal.is_some()
    }

    /// File `i` in place was `len` bytes long before it was cut or extended.
    pub(super) fn found_len(&self, i: usize, len: u64) {
        if let Some(w) = &self.by_wal {
            w.old_len[i].store(len, Relaxed);
        }
    }

    /// The pages of file `i` that can differ, and the length it had, under `--delta wal`.
    fn plan(&self, i: usize) -> Option<(&RoaringBitmap, u64, u64)> {
        let w = self.by_wal.as_ref()?;
        let bm = w.pages[i].as_ref()?;
        Some((bm, w.page, w.old_len[i].load(Relaxed)))
    }

    /// Whether the WAL proves that file `i` in place holds the set's bytes at
    /// `offset..offset + len`: no page there can differ, and the file had them.
    pub(super) fn proven(&self, i: usize, offset: u64, len: usize) -> bool {
        let Some((bm, page, old_len)) = self.plan(i) else {
            return false;
        };
        let end = offset + len as u64;
        let pages = (offset / page) as u32..end.div_ceil(page) as u32;
        end <= old_len && bm.range_cardinality(pages) == 0
    }

    /// Bytes of file `i` in place that the WAL proves the set's: its pages within both
    /// its old length and the set's size that no WAL record changed.
    fn proven_in(&self, i: usize) -> u64 {
        let (Some(w), Some((bm, page, old_len))) = (&self.by_wal, self.plan(i)) else {
            return 0;
        };
        let pages = old_len.min(w.sizes[i]) / page;
        (pages - bm.range_cardinality(0..pages.min(u32::MAX as u64) as u32)) * page
    }

    pub(super) fn mark_changed(&self, i: usize) {
        self.changed[i].store(true, Relaxed);
    }

    /// Whether `f` holds bytes of the digest asked at its range (see `FrameSink::holds`).
    /// File index `i`'s bytes read there stay for the write that follows a mismatch.
    pub(super) fn holds(&self, f: &File, i: usize, q: &Held) -> io::Result<bool> {
        THERE.with_borrow_mut(|t| {
            t.key = None;
            t.buf.resize(q.len, 0);
            let n = read_full(f, q.offset, &mut t.buf[..q.len])?;
            self.compared.fetch_add(n as u64, Relaxed);
            let same = n == q.len && q.hash.digest(&t.buf[..n]) == *q.digest;
            t.n = n;
            t.key = (!same).then_some((i, q.offset, q.len));
            Ok(same)
        })
    }

    /// Writes `data` at `offset` of file `i` (`f`): only the blocks that differ from what
    /// the file holds there; everything when the file was created by this restore.
    pub(super) fn put(
        &self,
        f: &File,
        i: usize,
        found: bool,
        offset: u64,
        data: &[u8],
    ) -> io::Result<()> {
        if let Some((bm, page, old_len)) = self.plan(i).filter(|_| found) {
            return self.put_pages(f, i, offset, data, bm, page, old_len);
        }
        // Created by this restore, or under `--delta wal` a file the WAL gives no pages
        // of: written whole, nothing read first.
        if !found || self.by_wal.is_some() {
            if found {
                self.mark_changed(i);
            }
            f.write_all_at(data, offset)?;
            self.written.fetch_add(data.len() as u64, Relaxed);
            return Ok(());
        }
        THERE.with_borrow_mut(|t| {
            let n = match t.key.take() {
                Some(k) if k == (i, offset, data.len()) => t.n,
                _ => {
                    t.buf.resize(data.len(), 0);
                    let n = read_full(f, offset, &mut t.buf[..data.len()])?;
                    self.compared.fetch_add(n as u64, Relaxed);
                    n
                }
            };
            let there = &t.buf[..data.len()];
            let same = |s: usize, e: usize| e <= n && there[s..e] == data[s..e];
            let mut at = 0;
            let mut wrote = 0;
            while at < data.len() {
                let end = |s: usize| (s + BLOCK).min(data.len());
                if same(at, end(at)) {
                    at = end(at);
                    continue;
                }
                // A run of differing blocks, written at once.
                let start = at;
                while at < data.len() && !same(at, end(at)) {
                    at = end(at);
                }
                f.write_all_at(&data[start..at], offset + start as u64)?;
                wrote += at - start;
            }
            if wrote > 0 {
                self.mark_changed(i);
                self.written.fetch_add(wrote as u64, Relaxed);
            }
            Ok(())
        })
    }

    /// `--delta wal`: writes the pages of `data` that can differ (`runs`), without
    /// reading what is there.
    #[allow(clippy::too_many_arguments)]
    fn put_pages(
        &self,
        f: &File,
        i: usize,
        offset: u64,
        data: &[u8],
        bm: &RoaringBitmap,
        page: u64,
        old_len: u64,
    ) -> io::Result<()> {
        let mut wrote = 0u64;
        for (s, e) in runs(bm, page, old_len, offset, offset + data.len() as u64) {
            f.write_all_at(&data[(s - offset) as usize..(e - offset) as usize], s)?;
            wrote += e - s;
        }
        if wrote > 0 {
            self.mark_changed(i);
            self.written.fetch_add(wrote, Relaxed);
        }
        Ok(())
    }

    /// `--delta wal`: the byte ranges of file `i` at `offset..offset + len` that a write
    /// there puts (`runs`), from `offset`; None when the file is not patched page by page.
    pub(super) fn differs(&self, i: usize, offset: u64, len: usize) -> Option<Vec<(u32, u32)>> {
        let (bm, page, old_len) = self.plan(i)?;
        let r = runs(bm, page, old_len, offset, offset + len as u64);
        Some(
            r.map(|(s, e)| ((s - offset) as u32, (e - offset) as u32))
                .collect(),
        )
    }

    /// Makes `len` bytes at `offset` zeros, writing only the blocks that are not.
    pub(super) fn zeros(
        &self,
        f: &File,
        i: usize,
        found: bool,
        offset: u64,
        len: usize,
    ) -> io::Result<()> {
        // A file this restore created reads as zeros wherever nothing was written.
        if !found {
            return Ok(());
        }
        static ZEROS: [u8; 1 << 16] = [0; 1 << 16];
        let mut done = 0;
        while done < len {
            let n = (len - done).min(ZEROS.len());
            self.put(f, i, true, offset + done as u64, &ZEROS[..n])?;
            done += n;
        }
        Ok(())
    }

    /// The report, from which files were found in place (`found`, per file).
    pub(super) fn report(&self, found: impl Iterator<Item = bool>, swept: Swept) -> DeltaReport {
        let mut r = DeltaReport {
            removed: swept.files,
            removed_dirs: swept.dirs,
            compared_bytes: self.compared.load(Relaxed),
            written_bytes: self.written.load(Relaxed),
            ..DeltaReport::default()
        };
        for (i, (found, changed)) in found.zip(&self.changed).enumerate() {
            r.proven_bytes += match found {
                true => self.proven_in(i),
                false => 0,
            };
            match (found, changed.load(Relaxed)) {
                (false, _) => r.created += 1,
                (true, true) => r.rewritten += 1,
                (true, false) => r.kept += 1,
            }
        }
        r
    }
}

/// Reads up to `buf.len()` bytes at `offset`; fewer only at the end of the file.
fn read_full(f: &File, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
    // Frames of a file come in offset order: the next reads are asked of the disk now,
    // many at once, where the kernel's own read-ahead would wait for each.
    let end = offset + buf.len() as u64;
    if offset.is_multiple_of(COMPARE_STRIDE) || offset / COMPARE_STRIDE != end / COMPARE_STRIDE {
        crate::sys::fadvise(f, end, COMPARE_AHEAD, crate::sys::Advice::WillNeed);
    }
    let mut done = 0;
    while done < buf.len() {
        match f.read_at(&mut buf[done..], offset + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

/// What `sweep` removed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Swept {
    pub files: u64,
    pub dirs: u64,
    /// Where it moved them, one directory per root (`trash::Emptying` removes them).
    pub trash: Vec<PathBuf>,
}

/// In each root, where `sweep` moves what goes: a rename is instant, and unlinking the
/// old files (a stale pg_wal's segments) happens on a thread of its own.
pub const TRASH: &str = ".pagevault-swept";

/// A root's trash, made new (or an interrupted restore's, emptied with the rest) and
/// held open: nothing is moved through a link planted there.
struct Trash {
    path: PathBuf,
    fd: std::os::fd::OwnedFd,
    next: u64,
}

impl Trash {
    fn open(root: &Path) -> Result<Trash> {
        let path = root.join(TRASH);
        let cannot = |e: &dyn std::fmt::Display| {
            anyhow::anyhow!("--delta: cannot make '{}': {e}", path.display())
        };
        match std::fs::symlink_metadata(&path) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => std::fs::remove_file(&path).map_err(|e| cannot(&e))?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(cannot(&e)),
        }
        match std::fs::DirBuilder::new().mode(0o700).create(&path) {
            Err(e) if e.kind() != io::ErrorKind::AlreadyExists => return Err(cannot(&e)),
            _ => {}
        }
        let flags = OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::RDONLY | OFlags::CLOEXEC;
        let fd = rustix::fs::open(&path, flags, Mode::empty()).map_err(|e| cannot(&e))?;
        Ok(Trash { path, fd, next: 0 })
    }

    /// Moves `p` into the trash; false where it cannot (another file system), and the
    /// caller removes it in place.
    fn take(&mut self, p: &Path) -> bool {
        self.next += 1;
        // The process's id first: an interrupted restore's trash may hold "1", "2" ...
        let name = format!("{}-{}", std::process::id(), self.next);
        let (from, to) = (rustix::fs::CWD, &self.fd);
        rustix::fs::renameat_with(from, p, to, name, RenameFlags::NOREPLACE).is_ok()
    }
}

/// Removes from `roots` (the target, tablespace directories) everything a fresh restore
/// of `m` would not leave there, except `keep` (the incomplete marker): entries the set
/// does not list, entries of another kind than the set's, every link (the set's links
/// are made again, as a fresh restore makes them) and regular files with more than one
/// hard link. No link is followed: a link is removed, never what it points to.
pub fn sweep(
    m: &Manifest,
    place: &dyn Fn(&str) -> PathBuf,
    roots: &[PathBuf],
    keep: &Path,
) -> Result<Swept> {
    let mut want: HashMap<PathBuf, EntryKind> = HashMap::new();
    for f in &m.files {
        let p = place(&f.path);
        for a in p.ancestors().skip(1) {
            if roots.iter().any(|r| a == r) || !roots.iter().any(|r| a.starts_with(r)) {
                break;
            }
            want.entry(a.to_path_buf()).or_insert(EntryKind::Dir);
        }
        want.insert(p, f.kind);
    }
    for r in roots {
        want.insert(r.clone(), EntryKind::Dir);
    }
    let mut swept = Swept::default();
    for root in roots {
        let mut trash = Trash::open(root)?;
        swept.trash.push(trash.path.clone());
        let mut it = walkdir::WalkDir::new(root).min_depth(1).into_iter();
        while let Some(e) = it.next() {
            let e = e.with_context(|| format!("--delta: cannot read '{}'", root.display()))?;
            let (p, ft) = (e.path(), e.file_type());
            if p == keep {
                continue;
            }
            if p == trash.path {
                it.skip_current_dir();
                continue;
            }
            let stays = match want.get(p) {
                Some(EntryKind::Dir) => ft.is_dir(),
                Some(EntryKind::File) => {
                    ft.is_file()
                        && e.metadata()
                            .with_context(|| format!("--delta: cannot stat '{}'", p.display()))?
                            .nlink()
                            == 1
                }
                _ => false,
            };
            if stays {
                continue;
            }
            let gone =
                |e: io::Error| anyhow::anyhow!("--delta: cannot remove '{}': {e}", p.display());
            if ft.is_dir() {
                for c in walkdir::WalkDir::new(p).min_depth(1).into_iter().flatten() {
                    match c.file_type().is_dir() {
                        true => swept.dirs += 1,
                        false => swept.files += 1,
                    }
                }
                swept.dirs += 1;
                if !trash.take(p) {
                    std::fs::remove_dir_all(p).map_err(gone)?;
                }
                it.skip_current_dir();
            } else {
                if !trash.take(p) {
                    std::fs::remove_file(p).map_err(gone)?;
                }
                // A link the set lists is made again: not counted as removed.
                let relisted = ft.is_symlink() && want.get(p) == Some(&EntryKind::Link);
                swept.files += u64::from(!relisted);
            }
        }
    }
    Ok(swept)
}

/// The runs of pages in `offset..end` that can differ under `--delta wal`: listed in `bm`,
/// or past the file's old length. Byte ranges, cut to `offset..end`.
fn runs(
    bm: &RoaringBitmap,
    page: u64,
    old_len: u64,
    offset: u64,
    end: u64,
) -> impl Iterator<Item = (u64, u64)> + '_ {
    let differs = move |p: u64| bm.contains(p as u32) || (p + 1) * page > old_len;
    let mut p = offset / page;
    std::iter::from_fn(move || {
        while p * page < end && !differs(p) {
            p += 1;
        }
        if p * page >= end {
            return None;
        }
        let first = p;
        while p * page < end && differs(p) {
            p += 1;
        }
        Some(((first * page).max(offset), (p * page).min(end)))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::manifest::{tests::sample, FileEntry};
    use crate::format::ContentHash;

    fn entry(id: u32, path: &str, kind: EntryKind) -> FileEntry {
        FileEntry {
            id,
            path: path.into(),
            kind,
            size: 0,
            mode: 0o644,
            mtime: 0,
            pages: 0,
            checksum: None,
            sparse: false,
            link_target: (kind == EntryKind::Link).then(|| "x".into()),
        }
    }

    #[test]
    fn sweep_removes_what_the_set_does_not_hold_and_follows_no_link() {
        let t = tempfile::tempdir().unwrap();
        let (root, outside) = (t.path().join("root"), t.path().join("outside"));
        std::fs::create_dir_all(root.join("d/old")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("keep"), b"x").unwrap();
        std::fs::write(root.join("d/a"), b"a").unwrap();
        std::fs::write(root.join("d/old/x"), b"x").unwrap();
        std::fs::write(root.join("gone"), b"x").unwrap();
        std::fs::write(root.join(".marker"), b"").unwrap();
        std::fs::create_dir(root.join("f")).unwrap(); // the set has a file there
        std::os::unix::fs::symlink(&outside, root.join("d/evil")).unwrap();
        std::os::unix::fs::symlink("x", root.join("l")).unwrap();
        std::fs::hard_link(outside.join("keep"), root.join("d/b")).unwrap();
        // A link planted where the sweep moves things aside leads nothing outside.
        std::os::unix::fs::symlink(&outside, root.join(TRASH)).unwrap();
        let mut m = sample();
        m.files = vec![
            entry(0, "d/a", EntryKind::File),
            entry(1, "d/b", EntryKind::File),
            entry(2, "d/evil", EntryKind::File),
            entry(3, "f", EntryKind::File),
            entry(4, "l", EntryKind::Link),
        ];
        let place = |rel: &str| root.join(rel);
        let s = sweep(
            &m,
            &place,
            std::slice::from_ref(&root),
            &root.join(".marker"),
        )
        .unwrap();
        // d/old/x, gone, f, d/evil, d/b; l (listed) is made again; d/old and f dirs.
        assert_eq!((s.files, s.dirs), (4, 2));
        // Moved aside, then removed.
        assert_eq!(s.trash, vec![root.join(TRASH)]);
        let first = format!("{}-1", std::process::id());
        assert!(root.join(TRASH).join(first).exists());
        let out: Vec<_> = std::fs::read_dir(&outside).unwrap().flatten().collect();
        assert_eq!(out.len(), 1, "only 'keep' outside: {out:?}");
        super::super::trash::remove_swept(&s.trash, &AtomicBool::new(false)).unwrap();
        assert!(!root.join(TRASH).exists());
        let mut left: Vec<String> = walkdir::WalkDir::new(&root)
            .min_depth(1)
            .into_iter()
            .map(|e| {
                e.unwrap()
                    .path()
                    .strip_prefix(&root)
                    .unwrap()
                    .display()
                    .to_string()
            })
            .collect();
        left.sort();
        assert_eq!(left, [".marker", "d", "d/a"]);
        assert_eq!(std::fs::read(outside.join("keep")).unwrap(), b"x");
        assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 1);
    }

    #[test]
    fn an_interrupted_restores_trash_takes_more() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("root");
        std::fs::create_dir_all(root.join(TRASH)).unwrap();
        // Left by a remover that was killed, named as an older release named them.
        std::fs::write(root.join(TRASH).join("1"), b"old").unwrap();
        std::fs::write(root.join("gone"), b"x").unwrap();
        let mut m = sample();
        m.files = vec![];
        let place = |rel: &str| root.join(rel);
        let s = sweep(&m, &place, std::slice::from_ref(&root), &root.join(".m")).unwrap();
        assert_eq!(s.files, 1);
        let moved = root.join(TRASH).join(format!("{}-1", std::process::id()));
        assert_eq!(
            std::fs::read(moved).unwrap(),
            b"x",
            "moved aside, not unlinked in place"
        );
        assert_eq!(std::fs::read(root.join(TRASH).join("1")).unwrap(), b"old");
    }

    #[test]
    fn only_differing_blocks_are_written_and_digests_compared() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("f");
        let mut old = vec![7u8; 3 * BLOCK + 100];
        std::fs::write(&p, &old).unwrap();
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&p)
            .unwrap();
        let d = Delta::new(1);
        d.put(&f, 0, true, 0, &old).unwrap();
        assert_eq!(d.written.load(Relaxed), 0);
        assert!(!d.changed[0].load(Relaxed));
        old[BLOCK + 5] = 1;
        old[3 * BLOCK + 99] = 2;
        d.put(&f, 0, true, 0, &old).unwrap();
        assert_eq!(d.written.load(Relaxed), BLOCK as u64 + 100);
        assert_eq!(std::fs::read(&p).unwrap(), old);
        // Past the end: written.
        d.put(&f, 0, true, old.len() as u64, b"tail").unwrap();
        assert!(std::fs::read(&p).unwrap().ends_with(b"tail"));
        d.zeros(&f, 0, true, 0, BLOCK).unwrap();
        assert!(std::fs::read(&p).unwrap()[..BLOCK].iter().all(|&b| b == 0));
        let digest = ContentHash::Xxh3.digest(&vec![0u8; BLOCK]);
        let q = |offset, len, digest| Held {
            file: 0,
            offset,
            len,
            hash: ContentHash::Xxh3,
            digest,
        };
        assert!(d.holds(&f, 0, &q(0, BLOCK, &digest)).unwrap());
        assert!(!d.holds(&f, 0, &q(BLOCK as u64, BLOCK, &digest)).unwrap());
        // The write after a mismatch compares the bytes read, not read again.
        let compared = d.compared.load(Relaxed);
        let mut other = vec![0u8; BLOCK];
        other[7] = 1;
        d.put(&f, 0, true, BLOCK as u64, &other).unwrap();
        assert_eq!(d.compared.load(Relaxed), compared);
        let now = std::fs::read(&p).unwrap();
        assert_eq!(&now[BLOCK..2 * BLOCK], &other[..]);
        // Another range is read.
        d.put(&f, 0, true, 0, &vec![0u8; BLOCK]).unwrap();
        assert_eq!(d.compared.load(Relaxed), compared + BLOCK as u64);
        // A range the file does not reach is never held.
        assert!(!d
            .holds(&f, 0, &q(3 * BLOCK as u64, 2 * BLOCK, &digest))
            .unwrap());
        let r = d.report([true].into_iter(), Swept::default());
        assert_eq!((r.kept, r.rewritten, r.created), (0, 1, 0));
    }
}
