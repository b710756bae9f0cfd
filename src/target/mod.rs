//! The directory a restore writes into: created or emptied, its directories laid out,
//! its files created at their sizes once (before or alongside the pipeline), frames
//! written in place, then links, modes and times, ownership and one syncfs.

use crate::engine::restore::FrameSink;
use crate::format::manifest::{EntryKind, FileEntry, IdIndex, Manifest};
use anyhow::{anyhow, bail, Context, Result};
use roaring::RoaringBitmap;
use std::collections::HashMap;
use std::fs::{self, File};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{
    AtomicBool, AtomicU8, Ordering::Acquire, Ordering::Relaxed, Ordering::Release,
};
use std::sync::{Arc, Mutex, OnceLock};

mod delta;
mod direct;
mod roots;
mod trash;
pub use delta::{sweep, DeltaReport, Swept};
pub use direct::{DirectWrites, WriteReport};
pub use roots::Roots;
use rustix::fs::OFlags;
pub use trash::{check_swept, remove_swept, Emptying};

/// Writes frames into the restored files, opened lazily and kept open while they last.
pub struct Target {
    /// With `files.delta`, what the target holds is compared before it is written.
    pub files: Files,
    open: Mutex<HashMap<u32, Arc<Open>>>,
    /// Start writing each frame back at once (not for a copy read back and removed
    /// before it needs to reach the disk: a merge's).
    writeback: bool,
    direct: direct::Direct,
}

/// A restored file open for writing, and opened a second time with O_DIRECT when a
/// write first goes direct.
struct Open {
    f: File,
    direct: OnceLock<Option<File>>,
}

impl std::ops::Deref for Open {
    type Target = File;
    fn deref(&self) -> &File {
        &self.f
    }
}

impl Target {
    /// A target written by `mode`'s rule (a delta restore's always through the page
    /// cache: it compares what is in place).
    pub fn new(files: Files, mode: DirectWrites) -> Target {
        let why_not = files
            .delta
            .is_some()
            .then_some("a delta restore reads and compares what is in place: page cache");
        let direct = direct::Direct::new(mode, why_not);
        let mut allocate = direct.wanted();
        if let (true, Some(note)) = (allocate, files.beyond_free_space()) {
            direct.note(&note);
            allocate = false;
        }
        files.allocate.store(allocate, Relaxed);
        Target {
            direct,
            files,
            open: Mutex::new(HashMap::new()),
            writeback: true,
        }
    }

    /// A target whose frames are left to the kernel to write back, through the page
    /// cache (a merge's copy, read back soon).
    pub fn without_writeback(mut self) -> Target {
        self.writeback = false;
        self.files.allocate.store(false, Relaxed);
        self.direct = direct::Direct::new(
            DirectWrites::Off,
            Some("a merge's copy is read back at once: page cache"),
        );
        self
    }

    /// What the writes did, `depth` writing at most at once.
    pub fn write_report(&self, depth: usize) -> WriteReport {
        self.direct.report(depth)
    }

    fn file(&self, id: u32) -> io::Result<Arc<Open>> {
        let mut open = self.open.lock().unwrap();
        if let Some(f) = open.get(&id) {
            return Ok(f.clone());
        }
        if open.len() >= 256 {
            open.clear(); // in-flight writers keep their Arc
        }
        let path = self.files.ensure(id)?;
        let f = self.files.roots.open_file(&path, OFlags::RDWR, 0)?;
        let f = Arc::new(Open {
            f,
            direct: OnceLock::new(),
        });
        open.insert(id, f.clone());
        Ok(f)
    }

    /// File `id`'s O_DIRECT handle, opened on its first direct write (None: the file
    /// system refused it, and from then on every write is buffered).
    fn direct_file<'a>(&self, id: u32, o: &'a Open) -> Option<&'a File> {
        let d = o.direct.get_or_init(|| {
            let path = self.files.ensure(id).ok()?;
            match (self.files.roots).open_file(&path, OFlags::WRONLY | OFlags::DIRECT, 0) {
                Ok(f) => Some(f),
                Err(e) => {
                    self.direct.refused(&path.display().to_string(), &e);
                    None
                }
            }
        });
        d.as_ref()
    }

    /// Writes `data` at `offset` of file `id`: its aligned head with O_DIRECT where
    /// the rule says so, the rest through the page cache.
    fn put(&self, id: u32, o: &Open, offset: u64, data: &[u8]) -> io::Result<()> {
        let direct = match self.direct.head(data, offset) {
            0 => None,
            head => self.direct_file(id, o).map(|d| (d, head)),
        };
        let path = || match self.files.index.get(id) {
            Some(i) => self.files.path(i).display().to_string(),
            None => format!("file {id}"),
        };
        self.direct.put(o, direct, &path, data, offset).map(|_| ())
    }
}

impl Target {
    /// Under `--delta wal`, file `file`'s delta and index when it was found in place
    /// (opened, so that its length in place is known).
    fn by_wal_kept(&self, file: u32) -> io::Result<Option<(&delta::Delta, usize)>> {
        if (self.files.delta_of(file)).is_none_or(|(d, _, _)| !d.by_wal_set()) {
            return Ok(None);
        }
        self.files.ensure(file)?;
        Ok(match self.files.delta_of(file) {
            Some((d, i, true)) => Some((d, i)),
            _ => None,
        })
    }

    /// An I/O error that names the file it happened to (the engine knows only ids).
    fn named(&self, id: u32, e: io::Error) -> io::Error {
        match self.files.index.get(id) {
            Some(i) => io::Error::new(e.kind(), format!("'{}': {e}", self.files.path(i).display())),
            None => e,
        }
    }
}

impl FrameSink for Target {
    fn write(&self, file: u32, offset: u64, data: &[u8]) -> io::Result<()> {
        let f = self.file(file)?;
        let r = match self.files.delta_of(file) {
            Some((d, i, found)) => d.put(&f, i, found, offset, data),
            None => self.put(file, &f, offset, data),
        };
        r.map_err(|e| self.named(file, e))
    }
    fn write_zeros(&self, file: u32, offset: u64, len: usize) -> io::Result<()> {
        // A fresh file reads as zeros there once it exists: it exists when this returns.
        self.files.ensure(file)?;
        if self.files.allocated(file) {
            // Its blocks were allocated for the writes: a hole again, as the source had.
            let f = self.file(file)?;
            let _ = crate::sys::punch_hole(&**f, offset, len as u64);
        }
        if let Some((d, i, found)) = self.files.delta_of(file) {
            let f = self.file(file)?;
            d.zeros(&f, i, found, offset, len)
                .map_err(|e| self.named(file, e))?;
        }
        Ok(())
    }
    fn proven(&self, file: u32, offset: u64, len: usize) -> io::Result<bool> {
        Ok(self
            .by_wal_kept(file)?
            .is_some_and(|(d, i)| d.proven(i, offset, len)))
    }
    fn differs(&self, file: u32, offset: u64, len: usize) -> io::Result<Option<Vec<(u32, u32)>>> {
        Ok(self
            .by_wal_kept(file)?
            .and_then(|(d, i)| d.differs(i, offset, len)))
    }
    fn holds(&self, q: crate::engine::restore::Held, _scratch: &mut [u8]) -> io::Result<bool> {
        self.files.ensure(q.file)?;
        match self.files.delta_of(q.file) {
            // `--delta wal`: the read stage stepped over what the WAL proves; the pages
            // that can differ are written from the frame, none compared. A file it gives
            // no pages of (a free space map, pg_xact ...) is written whole: a cold read
            // to compare costs more than the write.
            Some((d, _, true)) if d.by_wal_set() => Ok(false),
            Some((d, i, true)) => {
                let f = self.file(q.file)?;
                d.holds(&f, i, &q).map_err(|e| self.named(q.file, e))
            }
            _ => Ok(false),
        }
    }
    fn whole(&self, file: u32) {
        self.open.lock().unwrap().remove(&file);
    }
    fn parallel(&self, file: u32) -> bool {
        // Aligned O_DIRECT writes into allocated (unwritten) extents take the inode
        // lock shared: several at once into one file.
        self.direct.wanted() && self.files.allocated(file)
    }
    fn written(&self, file: u32, offset: u64, len: u64) {
        if !self.writeback {
            return;
        }
        // A kept file patched in place (--delta) takes scattered pages: starting their
        // writeback frame by frame costs more than the final sync that writes them.
        if matches!(self.files.delta_of(file), Some((_, _, true))) {
            return;
        }
        // Once per frame, not per page of a differential's frame.
        if let Ok(f) = self.file(file) {
            crate::device::disk::start_writeback(&f, offset, len);
        }
    }
}

impl crate::engine::restore::merge::ReadBack for Target {
    fn read_at(&self, file: u32, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let f = self.file(file)?;
        let mut done = 0;
        while done < buf.len() {
            match f.read_at(&mut buf[done..], offset + done as u64) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.named(file, e)),
            }
        }
        // Past the end: what no set wrote reads as zeros.
        buf[done..].fill(0);
        Ok(())
    }
}

/// What a target directory was before a restore claimed it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Before {
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
}

/// What `prepare` does with a directory that holds something.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Prepare {
    /// Refuse it.
    Empty,
    /// Delete what it holds (`--replace`).
    Replace,
    /// Keep what it holds (`--delta`: `sweep` removes what the set does not hold).
    Keep,
}

/// Makes `dir` a directory that only this process's user may enter before anything is
/// written into it: created, emptied (`Replace`), refused unless empty (`Empty`) or
/// kept (`Keep`); 0700, and owned by root when root restores (another user owning it
/// could plant links in it while the restore writes). Returns what it was, if it existed.
pub fn prepare(dir: &Path, how: Prepare) -> Result<Option<Before>> {
    use std::os::unix::fs::MetadataExt;
    let before = fs::metadata(dir).ok().map(|m| Before {
        mode: m.mode() & 0o7777,
        uid: m.uid(),
        gid: m.gid(),
    });
    match fs::read_dir(dir) {
        Ok(mut it) => {
            if it.next().is_some() && how != Prepare::Keep {
                if how == Prepare::Empty {
                    bail!(
                        "target '{}' is not empty: restore into an empty directory, or add --replace to delete what it holds",
                        dir.display()
                    );
                }
                for e in fs::read_dir(dir)? {
                    let p = e?.path();
                    let r = if p.is_dir() && !p.is_symlink() {
                        fs::remove_dir_all(&p)
                    } else {
                        fs::remove_file(&p)
                    };
                    r.with_context(|| format!("--replace: cannot remove '{}'", p.display()))?;
                }
            }
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => fs::create_dir_all(dir)
            .with_context(|| format!("cannot create target '{}'", dir.display()))?,
        Err(e) => return Err(e).with_context(|| format!("cannot read target '{}'", dir.display())),
    }
    claim(dir).with_context(|| format!("cannot make target '{}' private", dir.display()))?;
    Ok(before)
}

/// Makes an existing directory 0700 and, when root runs, root's.
pub fn claim(dir: &Path) -> io::Result<()> {
    fs::set_permissions(dir, fs::Permissions::from_mode(0o700))?;
    if crate::sys::is_root() {
        std::os::unix::fs::chown(dir, Some(0), Some(0))?;
    }
    Ok(())
}

/// Gives a claimed directory back its mode and owner.
pub fn give_back(dir: &Path, b: Before) -> Result<()> {
    if crate::sys::is_root() {
        std::os::unix::fs::chown(dir, Some(b.uid), Some(b.gid))
            .with_context(|| format!("cannot give '{}' back to its owner", dir.display()))?;
    }
    fs::set_permissions(dir, fs::Permissions::from_mode(b.mode))
        .with_context(|| format!("cannot give '{}' back its mode", dir.display()))
}

/// The regular files of a restore, each created at its size exactly once: by
/// `create_first` before the pipeline, by `create_all` alongside it, or by the first
/// frame that needs it. Creating a file costs about 15 us of CPU here, up to 400 us
/// where many inodes were just freed (ext4 without a journal skips each of them), so a
/// cluster's thousands of files matter.
pub struct Files {
    /// Each file's manifest id.
    index: IdIndex,
    /// Each file's directory (an index in `dirs`), the end of its name in `names`, its
    /// size: flat, a few bytes a file.
    dir: Vec<u32>,
    name_end: Vec<u32>,
    names: Vec<u8>,
    sizes: Vec<u64>,
    dirs: Vec<Box<Path>>,
    /// How far each file is made: NOT_MADE, MADE, KEPT (a delta restore's, in place) or
    /// FAILED (why in `failed`).
    made: Vec<AtomicU8>,
    /// Held while a file is made, by file index modulo their count: a file is made once.
    making: Box<[Mutex<()>]>,
    failed: Mutex<HashMap<usize, Box<str>>>,
    /// A delta restore: files in place are kept and compared before they are written.
    delta: Option<delta::Delta>,
    /// Where files are made and opened, beneath these handles only.
    roots: Arc<Roots>,
    /// Allocate a large file's blocks when it is made (direct writes then go several at
    /// once into it), but not those of `sparse` (files left out, kept at their size).
    allocate: AtomicBool,
    sparse: Mutex<std::collections::HashSet<usize>>,
}

const NOT_MADE: u8 = 0;
const MADE: u8 = 1;
const KEPT: u8 = 2;
const FAILED: u8 = 3;
/// Made, its blocks allocated.
const ALLOCATED: u8 = 4;
const MAKING_LOCKS: usize = 1024;

impl Files {
    /// Where file `i` goes.
    fn path(&self, i: usize) -> PathBuf {
        let start = i.checked_sub(1).map_or(0, |k| self.name_end[k] as usize);
        let name = &self.names[start..self.name_end[i] as usize];
        self.dirs[self.dir[i] as usize].join(std::ffi::OsStr::from_bytes(name))
    }

    /// Where file `id` goes, once it exists at its size.
    fn ensure(&self, id: u32) -> io::Result<PathBuf> {
        let i = (self.index.get(id))
            .ok_or_else(|| io::Error::other(format!("file {id} is not in the manifest")))?;
        self.make(i).map_err(io::Error::other)?;
        Ok(self.path(i))
    }

    /// Whether file `i` is made (Some(kept)), or why it cannot be.
    fn state(&self, i: usize) -> Option<Result<bool, String>> {
        match self.made[i].load(Acquire) {
            MADE | ALLOCATED => Some(Ok(false)),
            KEPT => Some(Ok(true)),
            FAILED => Some(Err(self.failed.lock().unwrap()[&i].to_string())),
            _ => None,
        }
    }

    fn make(&self, i: usize) -> Result<(), String> {
        if let Some(r) = self.state(i) {
            return r.map(|_| ());
        }
        let _making = self.making[i % self.making.len()].lock().unwrap();
        if let Some(r) = self.state(i) {
            return r.map(|_| ());
        }
        let r = self.made_now(&self.path(i), self.sizes[i], i);
        let state = match &r {
            Ok(s) => *s,
            Err(e) => {
                self.failed.lock().unwrap().insert(i, e.as_str().into());
                FAILED
            }
        };
        self.made[i].store(state, Release);
        r.map(|_| ())
    }

    /// Makes file `i` at its size: MADE, ALLOCATED (its blocks too) or KEPT (a delta
    /// restore's, in place).
    fn made_now(&self, p: &Path, size: u64, i: usize) -> Result<u8, String> {
        if let Some(d) = &self.delta {
            // A regular file in place is kept (never opened through a link, never
            // waited on as a FIFO would be), cut or extended to the set's size.
            let kept = self
                .roots
                .open_file(p, OFlags::WRONLY | OFlags::NONBLOCK, 0);
            match kept {
                Ok(f) => {
                    let r = f.metadata().and_then(|m| {
                        if !m.is_file() || m.nlink() != 1 {
                            return Err(io::Error::other("not a regular file of one link"));
                        }
                        d.found_len(i, m.len());
                        if m.len() != size {
                            d.mark_changed(i);
                            f.set_len(size)?;
                        }
                        Ok(KEPT)
                    });
                    return r.map_err(|e| {
                        format!("cannot keep '{}' at {size} bytes: {e}", p.display())
                    });
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(format!("cannot open '{}': {e}", p.display())),
            }
        }
        let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL;
        let allocate = self.worth_allocating(i);
        let r = (self.roots.open_file(p, flags, 0o666)).and_then(|f| {
            // Where the file system cannot allocate, the file is made sparse.
            if allocate && crate::sys::allocate(&f, size).is_ok() {
                return Ok(ALLOCATED);
            }
            f.set_len(size)?;
            Ok(MADE)
        });
        r.map_err(|e| format!("cannot create '{}' at {size} bytes: {e}", p.display()))
    }

    /// Why the large files are not allocated ahead (None: they are): a set's sizes are
    /// only its word, and a forged one must not reserve the target's free space.
    fn beyond_free_space(&self) -> Option<String> {
        let large = (0..self.sizes.len())
            .filter(|&i| self.sizes[i] >= direct::AUTO_MIN as u64)
            .filter(|i| !self.sparse.lock().unwrap().contains(i));
        let want = large.fold(0u64, |t, i| t.saturating_add(self.sizes[i]));
        let free = self.roots.free_bytes().ok()?;
        (want > free).then(|| {
            format!(
                "large files not allocated ahead: they need {}, the target has {} free",
                crate::units::human(want),
                crate::units::human(free)
            )
        })
    }

    fn worth_allocating(&self, i: usize) -> bool {
        self.allocate.load(Relaxed)
            && self.sizes[i] >= direct::AUTO_MIN as u64
            && !self.sparse.lock().unwrap().contains(&i)
    }

    /// Whether file `id` is made with its blocks allocated.
    fn allocated(&self, id: u32) -> bool {
        (self.index.get(id)).is_some_and(|i| self.made[i].load(Acquire) == ALLOCATED)
    }

    /// Files made at their size without their blocks (a restore's left-out databases).
    pub fn keep_sparse(&self, ids: impl IntoIterator<Item = u32>) {
        let found = ids.into_iter().filter_map(|id| self.index.get(id));
        self.sparse.lock().unwrap().extend(found);
    }

    /// `--delta wal`: the pages of each file in place that can differ from the set's,
    /// by its manifest path and size (None: compared whole); `page` bytes a page.
    pub fn by_wal(
        &mut self,
        m: &Manifest,
        page: u64,
        pages: impl Fn(&str, u64) -> Option<RoaringBitmap>,
    ) {
        let Some(d) = &mut self.delta else {
            return;
        };
        let files: Vec<_> = (m.files.iter().filter(|f| f.kind == EntryKind::File)).collect();
        let sizes = files.iter().map(|f| f.size).collect();
        d.by_wal(
            page,
            files.iter().map(|f| pages(&f.path, f.size)).collect(),
            sizes,
        );
    }

    /// A delta restore's state for file `id`: its index and whether it was in place.
    fn delta_of(&self, id: u32) -> Option<(&delta::Delta, usize, bool)> {
        let d = self.delta.as_ref()?;
        let i = self.index.get(id)?;
        Some((d, i, self.made[i].load(Acquire) == KEPT))
    }

    /// What a delta restore did (None for another restore), once every file is written.
    pub fn delta_report(&self, swept: Swept) -> Option<DeltaReport> {
        let found = self.made.iter().map(|m| m.load(Acquire) == KEPT);
        Some(self.delta.as_ref()?.report(found, swept))
    }

    /// Creates every file, `threads` at a time, one directory per lane: a directory's
    /// creations queue on its lock, different directories' go in parallel.
    pub fn create_first(&self, threads: usize) -> Result<()> {
        // The files by directory (a counting sort), then whole directories dealt to
        // lanes, the largest first, each to the lane with the fewest files.
        let mut start = vec![0u32; self.dirs.len() + 1];
        for &d in &self.dir {
            start[d as usize + 1] += 1;
        }
        for d in 0..self.dirs.len() {
            start[d + 1] += start[d];
        }
        let mut by_dir = vec![0u32; self.dir.len()];
        let mut next = start.clone();
        for (i, &d) in self.dir.iter().enumerate() {
            by_dir[next[d as usize] as usize] = i as u32;
            next[d as usize] += 1;
        }
        let files = |d: usize| &by_dir[start[d] as usize..start[d + 1] as usize];
        let mut dirs: Vec<usize> = (0..self.dirs.len()).collect();
        dirs.sort_by_key(|&d| std::cmp::Reverse(files(d).len()));
        let mut lanes: Vec<(usize, Vec<usize>)> = vec![(0, vec![]); threads.max(1)];
        for d in dirs {
            let lane = lanes.iter_mut().min_by_key(|l| l.0).unwrap();
            lane.0 += files(d).len();
            lane.1.push(d);
        }
        std::thread::scope(|s| {
            let running: Vec<_> = lanes
                .iter()
                .map(|(_, l)| {
                    s.spawn(|| {
                        (l.iter().flat_map(|&d| files(d))).try_for_each(|&i| self.make(i as usize))
                    })
                })
                .collect();
            running
                .into_iter()
                .try_for_each(|h| h.join().expect("file creation panicked"))
        })
        .map_err(|e| anyhow!(e))
    }

    /// Creates every file not yet created, in the manifest's order, until `stop` is set.
    pub fn create_all(&self, stop: &AtomicBool) -> Result<(), String> {
        (0..self.sizes.len())
            .take_while(|_| !stop.load(Relaxed))
            .try_for_each(|i| self.make(i))
    }
}

/// Creates the directories of a manifest and returns its regular files, not yet created,
/// every one beneath `roots`; with `delta`, files in place are kept and compared.
pub fn lay_out(
    m: &Manifest,
    place: &dyn Fn(&str) -> PathBuf,
    delta: bool,
    roots: Arc<Roots>,
) -> Result<Files> {
    let (mut ids, mut dir, mut name_end, mut names, mut sizes) =
        (vec![], vec![], vec![], vec![], vec![]);
    let mut dirs: Vec<Box<Path>> = vec![];
    let mut dir_of: HashMap<PathBuf, u32> = HashMap::new();
    let mut made_dirs = std::collections::HashSet::new();
    for f in &m.files {
        let p = place(&f.path);
        match f.kind {
            EntryKind::Dir => {
                roots.create_dir_all(&p)?;
                made_dirs.insert(p);
            }
            EntryKind::File => {
                let (Some(parent), Some(name)) = (p.parent(), p.file_name()) else {
                    bail!("'{}' has no directory to be made in", p.display());
                };
                let d = match dir_of.get(parent) {
                    Some(&d) => d,
                    None => {
                        if !made_dirs.contains(parent) {
                            roots.create_dir_all(parent)?;
                        }
                        dirs.push(parent.into());
                        dir_of.insert(parent.to_path_buf(), dirs.len() as u32 - 1);
                        dirs.len() as u32 - 1
                    }
                };
                names.extend_from_slice(name.as_bytes());
                let end = u32::try_from(names.len())
                    .map_err(|_| anyhow!("the file names of the set exceed 4 GiB in all"))?;
                ids.push(f.id);
                dir.push(d);
                name_end.push(end);
                sizes.push(f.size);
            }
            EntryKind::Link => {}
        }
    }
    drop((dir_of, made_dirs));
    names.shrink_to_fit();
    let n = sizes.len();
    Ok(Files {
        index: IdIndex::new(ids),
        dir,
        name_end,
        names,
        sizes,
        dirs,
        made: (0..n).map(|_| AtomicU8::new(NOT_MADE)).collect(),
        making: (0..MAKING_LOCKS.min(n.max(1)))
            .map(|_| Mutex::new(()))
            .collect(),
        failed: Mutex::default(),
        delta: delta.then(|| delta::Delta::new(n)),
        roots,
        allocate: AtomicBool::new(false),
        sparse: Mutex::default(),
    })
}

/// Links last (nothing is written through them), then owners (`owner`), modes and
/// times: files several at once, then directories deepest first, all beneath `roots`.
pub fn finish_entries(
    m: &Manifest,
    place: &dyn Fn(&str) -> PathBuf,
    roots: &Roots,
    owner: Option<(u32, u32)>,
) -> Result<()> {
    for f in m.files.iter().filter(|f| f.kind == EntryKind::Link) {
        let p = place(&f.path);
        if let Some(parent) = p.parent() {
            roots.create_dir_all(parent)?;
        }
        roots
            .symlink(f.link_target.as_deref().unwrap_or(""), &p)
            .with_context(|| format!("cannot create link '{}'", p.display()))?;
        owner.map(|o| roots.chown(&p, o)).transpose()?;
    }
    // setuid and setgid bits from a set are dropped: a set is data, and a restore
    // often runs as root.
    let finish = |p: &Path, f: &FileEntry| roots.settle(p, owner, f.mode & 0o1777, f.mtime);
    let files: Vec<(PathBuf, &FileEntry)> = (m.files.iter())
        .filter(|f| f.kind == EntryKind::File)
        .map(|f| (place(&f.path), f))
        .collect();
    let failed = Mutex::new(None);
    crate::par::each_index(files.len(), FINISH_THREADS, |i| {
        if let Err(e) = finish(&files[i].0, files[i].1) {
            failed.lock().unwrap().get_or_insert(e);
        }
    });
    if let Some(e) = failed.into_inner().unwrap() {
        return Err(e.into());
    }
    (m.files.iter().rev())
        .filter(|f| !matches!(f.kind, EntryKind::Link | EntryKind::File))
        .try_for_each(|f| finish(&place(&f.path), f))?;
    Ok(())
}

/// Threads that set owners, modes and times: each file takes a few system calls.
const FINISH_THREADS: usize = 4;

/// Makes every file of the file system holding `dir` durable (one syncfs). An error
/// is a write the disk did not take (syncfs reports writeback errors): the restore
/// then fails rather than say its files are there.
pub fn sync_fs(dir: &Path) -> Result<()> {
    let d = File::open(dir).with_context(|| format!("cannot open '{}'", dir.display()))?;
    crate::sys::syncfs(&d).with_context(|| {
        format!(
            "syncfs of the file system holding '{}' failed: restored data did not reach the disk",
            dir.display()
        )
    })
}

/// The uid and gid of user `name` (`--owner`).
pub fn lookup_user(name: &str) -> Result<(u32, u32)> {
    let c = std::ffi::CString::new(name)?;
    match crate::sys::user_ids(&c) {
        Ok(Some(ids)) => Ok(ids),
        Ok(None) => bail!("--owner: no user named '{name}'"),
        Err(e) => bail!("--owner: cannot look up user '{name}': {e}"),
    }
}

/// Gives `root` and everything under it to uid:gid, links included (what is theirs
/// already is left as it is).
pub fn chown_tree(root: &Path, uid: u32, gid: u32) -> Result<()> {
    // What a delta moved aside stays its remover's.
    let swept = |e: &walkdir::DirEntry| e.depth() == 1 && e.file_name() == delta::TRASH;
    for e in walkdir::WalkDir::new(root)
        .into_iter()
        .filter_entry(|e| !swept(e))
    {
        let e = e?;
        let m = e.metadata()?;
        if (m.uid(), m.gid()) == (uid, gid) {
            continue;
        }
        std::os::unix::fs::lchown(e.path(), Some(uid), Some(gid))
            .with_context(|| format!("--owner: cannot chown '{}'", e.path().display()))?;
    }
    Ok(())
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
