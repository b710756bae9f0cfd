//! WAL files in a local spool (`archive-push --async`): checked and summarized as a
//! push checks them, copied durably beside nothing of the repository, and pushed from
//! there later.

use super::summary::{Summary, HEAD_SKIPPED};
use super::*;

/// A WAL file copied into a spool.
#[derive(Debug)]
pub struct Spooled {
    pub name: String,
    pub raw_bytes: u64,
    /// The spool held this file already, with the same bytes: nothing was written.
    pub already: bool,
    /// The block summary written beside it (a segment's, when asked for).
    pub summary: Option<Summary>,
}

/// The suffix of a spooled segment's block summary.
pub const SUM_SUFFIX: &str = ".sum";
/// The suffix of the identity of the file a spooled file was copied from.
pub const SRC_SUFFIX: &str = ".src";
/// The suffix of that identity once the pusher stored the file in the repository.
pub const DONE_SUFFIX: &str = ".done";
/// An identity file is one line; more is damage.
const IDENTITY_MAX: u64 = 256;

/// Which file, and which version of it: device, inode, size, modification and change
/// times to the nanosecond. Equal identities mean the same bytes: the kernel moves the
/// change time on every write and rename, and nothing can set it back. PostgreSQL writes
/// a WAL file no more once it is ready to archive, and recycles it only once archived.
fn identity(f: &File) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let m = f.metadata().ok()?;
    Some(format!(
        "{} {} {} {}.{:09} {}.{:09}\n",
        m.dev(),
        m.ino(),
        m.len(),
        m.mtime(),
        m.mtime_nsec(),
        m.ctime(),
        m.ctime_nsec()
    ))
}

/// The identity of the file at `p`.
#[cfg(test)]
pub fn identity_of(p: &Path) -> Option<String> {
    identity(&File::open(p).ok()?)
}

/// Whether `dir/NAME{suffix}` records identity `id`.
fn same_identity(dir: &Path, name: &str, suffix: &str, id: &str) -> bool {
    let Ok(f) = crate::sys::open_regular_nofollow(&dir.join(format!("{name}{suffix}"))) else {
        return false;
    };
    let mut b = String::new();
    f.take(IDENTITY_MAX).read_to_string(&mut b).is_ok() && b == id
}

/// The pusher stored spooled file `name`: its source's identity, kept, lets PostgreSQL's
/// call for it return at once. A hint only: lost, the call copies the file again.
pub fn mark_done(dir: &Path, name: &str) {
    let src = dir.join(format!("{name}{SRC_SUFFIX}"));
    let _ = fs::rename(&src, dir.join(format!("{name}{DONE_SUFFIX}")));
}

/// Copies WAL file `src` into directory `dir` as `dir/NAME`, every page checked and
/// hashed, with its block summary as `dir/NAME.sum` (summarized with `prev`, the
/// previous segment's, when given). Durable when this returns: the summary first
/// (unsynced: one lost to a crash is made again from the file), the file synced and
/// put in place last, then the directory synced. A file already there with other
/// bytes is refused, never replaced.
pub fn spool_copy(
    src: &Path,
    dir: &Path,
    prev: Option<&Summary>,
    summaries: bool,
) -> Result<Spooled> {
    let mut all = spool_many(&[src.to_path_buf()], dir, prev, summaries, 1);
    let got = all.pop().expect("one result per file")?;
    sync_dir(dir)?;
    Ok(got)
}

/// [`spool_copy`] of several files in WAL order, copied `threads` at once and
/// summarized in order (each segment's summary continues the one before it). The first
/// is the file asked for, the others are spooled ahead. One result per file; the caller
/// syncs `dir` once.
pub fn spool_many(
    srcs: &[PathBuf],
    dir: &Path,
    prev: Option<&Summary>,
    summaries: bool,
    threads: usize,
) -> Vec<Result<Spooled>> {
    let copied = crate::par::map_index(srcs.len(), threads.max(1), |i| {
        copy_in(&srcs[i], dir, summaries, i == 0)
    });
    let mut last = prev.cloned();
    let mut out = vec![];
    for c in copied {
        let r = c.and_then(|c| match c {
            Staged::Already(s) => Ok(s),
            Staged::New(c) => commit(c, dir, last.as_ref()),
        });
        if let Ok(Spooled {
            summary: Some(s), ..
        }) = &r
        {
            last = Some(s.clone());
        }
        out.push(r);
    }
    out
}

/// A file copied into a temp file of the spool, synced, not yet in place.
struct Copied {
    name: String,
    len: u64,
    tmp: Temp,
    out: File,
    map: Option<memmap2::Mmap>,
    seg: Option<SegInfo>,
    /// Its block summary, made without the previous segment's: completed at commit.
    alone: Option<Summary>,
    /// The source's identity, unchanged over the copy.
    id: Option<String>,
}

enum Staged {
    New(Copied),
    Already(Spooled),
}

/// Whether the pusher stored `dir/NAME` already (its identity kept as `NAME.done`).
pub fn stored(dir: &Path, name: &str) -> bool {
    is_file(&dir.join(format!("{name}{DONE_SUFFIX}")))
}

/// A regular file at `p` (a link is not followed).
fn is_file(p: &Path) -> bool {
    fs::symlink_metadata(p).is_ok_and(|m| m.is_file())
}

/// Anything at `p` that is not a regular file: refused, naming it (the spool holds only
/// files this user wrote).
fn not_regular(p: &Path) -> Result<()> {
    match fs::symlink_metadata(p) {
        Ok(m) if !m.is_file() => bail!(
            "'{}' in the spool is not a regular file ({}): refused; remove it",
            p.display(),
            if m.is_symlink() {
                "a symbolic link"
            } else {
                "not a file"
            }
        ),
        _ => Ok(()),
    }
}

/// `asked`: the file PostgreSQL hands over, whose call is the last to need its `.done`.
fn copy_in(src: &Path, dir: &Path, summaries: bool, asked: bool) -> Result<Staged> {
    let Opened {
        name,
        n,
        mut f,
        len,
        seg,
    } = open_checked(src)?;
    let fin = dir.join(&name);
    not_regular(&fin)?;
    let id = identity(&f);
    let already = || {
        Ok(Staged::Already(Spooled {
            name: name.clone(),
            raw_bytes: len,
            already: true,
            summary: None,
        }))
    };
    // Copied from this very file, unchanged since: spooled, or stored by the pusher.
    if let Some(id) = &id {
        if is_file(&fin) && same_identity(dir, &name, SRC_SUFFIX, id) {
            return already();
        }
        if same_identity(dir, &name, DONE_SUFFIX, id) {
            if asked {
                let _ = fs::remove_file(dir.join(format!("{name}{DONE_SUFFIX}")));
            }
            return already();
        }
    }
    // Mapped only to be read: most calls find their file spooled ahead.
    let map = map_if(summaries && n.kind == Kind::Segment, &f, len, src)?;
    // Spooled before (a retried archive_command, or fetched ahead): the same bytes are fine.
    if is_file(&fin) {
        let hash = scan(&mut f, src, len, &n, seg.as_ref(), None, map.as_deref())?;
        let have = match read_spooled_summary(&dir.join(format!("{name}{SUM_SUFFIX}"))) {
            Some(s) if s.segment == name => Some(blake3::Hash::from(s.segment_blake3)),
            _ => spooled_hash(&fin)?,
        };
        match have {
            Some(h) if h == hash => return already(),
            Some(h) => bail!(
                "'{}' is spooled already with other content than '{}' (BLAKE3 {} against {}): \
                 refused, the spooled copy is unchanged (two clusters archiving through one spool?)",
                fin.display(),
                src.display(),
                &hex::encode(h.as_bytes())[..16],
                &hex::encode(hash.as_bytes())[..16]
            ),
            // Pushed and removed meanwhile: spool it again (the push finds it archived).
            None => {}
        }
    }
    let (tmp, mut out) = match n.kind {
        Kind::Segment => recycled_beside(dir, &name)?,
        _ => temp_beside(dir, &name)?,
    };
    let werr = |e: io::Error| anyhow!("cannot write '{}': {e}", tmp.path.display());
    let hash = {
        let mut w = io::BufWriter::with_capacity(CHUNK, &mut out);
        use std::io::Seek;
        f.rewind()?;
        let h = scan(
            &mut f,
            src,
            len,
            &n,
            seg.as_ref(),
            Some(&mut w),
            map.as_deref(),
        )?;
        w.flush().map_err(werr)?;
        h
    };
    // A recycled file may have been longer.
    out.set_len(len).map_err(werr)?;
    // The disk starts now; the fsync at commit waits only for what is left.
    crate::sys::start_writeback(&out, 0, 0);
    // Kept only when the file did not change while it was read.
    let id = id.filter(|i| identity(&f).as_ref() == Some(i));
    // Summarized here, on the copying threads; only the head waits for the previous one.
    let alone = match (&map, &seg) {
        (Some(bytes), Some(s)) => Some(summary::summarize(
            &name,
            *hash.as_bytes(),
            bytes,
            s.blcksz as usize,
            crate::pg::version_of_wal_magic(s.magic).map_or(0, |v| v.major),
            None,
        )),
        _ => None,
    };
    Ok(Staged::New(Copied {
        name,
        len,
        tmp,
        out,
        map,
        seg,
        alone,
        id,
    }))
}

/// The pool of stored segments kept in a spool directory to be written over, as
/// PostgreSQL recycles its own: a new copy then allocates no blocks, and a stored one is
/// not unlinked (on a file system mounted with `discard`, about 20 ms for 16 MiB).
pub const POOL: &str = ".free";
/// Segments the pool holds at most (the rest are removed).
const POOL_MAX: usize = 8;

/// Moves stored file `dir/name` into the pool; false when the pool is full (the caller
/// removes it).
pub fn retire(dir: &Path, name: &str) -> io::Result<bool> {
    let pool = dir.join(POOL);
    let held = match fs::read_dir(&pool) {
        Ok(rd) => rd.count(),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            fs::create_dir(&pool).or_else(|e| match e.kind() {
                io::ErrorKind::AlreadyExists => Ok(()),
                _ => Err(e),
            })?;
            0
        }
        Err(e) => return Err(e),
    };
    if held >= POOL_MAX {
        return Ok(false);
    }
    fs::rename(dir.join(name), pool.join(name))?;
    Ok(true)
}

/// A temp file for `name` in `dir`: a segment from the pool, to be written over, when
/// there is one; else a new file.
fn recycled_beside(dir: &Path, name: &str) -> Result<(Temp, File)> {
    let pool = dir.join(POOL);
    let Ok(rd) = fs::read_dir(&pool) else {
        return temp_beside(dir, name);
    };
    for e in rd.flatten() {
        let (tmp, f) = temp_beside(dir, name)?;
        drop(f);
        // Another spooler may take it first: then the next one.
        if fs::rename(e.path(), &tmp.path).is_ok() {
            // A regular file only, never through a link (anything else goes with `tmp`).
            if let Ok(f) = crate::sys::open_regular_rw(&tmp.path) {
                return Ok((tmp, f));
            }
        }
    }
    temp_beside(dir, name)
}

/// Summarizes a copied file (continuing `prev` when it is the segment before), writes
/// the summary durably, then puts the file in place.
fn commit(c: Copied, dir: &Path, prev: Option<&Summary>) -> Result<Spooled> {
    c.out
        .sync_all()
        .with_context(|| format!("cannot write '{}'", c.tmp.path.display()))?;
    let summary = match (&c.map, &c.seg, c.alone) {
        (Some(bytes), Some(s), Some(alone)) => {
            let prev =
                prev.filter(|p| previous_name(&c.name, c.len).as_deref() == Some(&p.segment));
            let sum = match prev {
                Some(p) => summary::continue_from(alone, bytes, s.blcksz as usize, p),
                None => alone,
            };
            write_whole(dir, &format!("{}{SUM_SUFFIX}", c.name), &sum.encode())?;
            Some(sum)
        }
        _ => None,
    };
    let fin = dir.join(&c.name);
    // Before the file: an identity beside no file is never read.
    let src = dir.join(format!("{}{SRC_SUFFIX}", c.name));
    match &c.id {
        Some(id) => {
            let _ = crate::sys::write_nofollow(&src, id.as_bytes());
        }
        None => {
            let _ = fs::remove_file(&src);
        }
    }
    fs::rename(&c.tmp.path, &fin).with_context(|| format!("cannot create '{}'", fin.display()))?;
    Ok(Spooled {
        name: c.name,
        raw_bytes: c.len,
        already: false,
        summary,
    })
}

/// The name of the segment before segment `name` (of `seg_size` bytes), on its timeline.
fn previous_name(name: &str, seg_size: u64) -> Option<String> {
    let (tli, segno) = crate::pg::parse_segment_name(name, seg_size)?;
    Some(segment_name_for(tli, segno.checked_sub(1)?, seg_size))
}

/// BLAKE3 of a spooled file, or None when there is none.
fn spooled_hash(p: &Path) -> Result<Option<blake3::Hash>> {
    let mut f = match crate::sys::open_regular_nofollow(p) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(anyhow!("cannot open '{}': {e}", p.display())),
    };
    let mut h = blake3::Hasher::new();
    io::copy(&mut f, &mut h).with_context(|| format!("cannot read '{}'", p.display()))?;
    Ok(Some(h.finalize()))
}

/// Writes `bytes` as `dir/name` through a temp file and a rename, unsynced: for what
/// its reader checks (CRC32C) and can do without after a crash (a summary is made
/// again from its segment), so an archive_command waits on one fsync fewer.
pub fn write_whole(dir: &Path, name: &str, bytes: &[u8]) -> Result<()> {
    let (tmp, mut f) = temp_beside(dir, name)?;
    f.write_all(bytes)
        .with_context(|| format!("cannot write '{}'", tmp.path.display()))?;
    let fin = dir.join(name);
    fs::rename(&tmp.path, &fin).with_context(|| format!("cannot create '{}'", fin.display()))
}

/// Reads a spooled summary, bounded; None when absent or unreadable (the push then
/// summarizes again).
pub fn read_spooled_summary(p: &Path) -> Option<Summary> {
    let f = crate::sys::open_regular_nofollow(p).ok()?;
    let mut b = vec![];
    f.take(summary::FILE_MAX).read_to_end(&mut b).ok()?;
    Summary::decode(&b).ok()
}

/// Pushes a spooled file into the repository with the summary made when it was
/// spooled: stored when it covers its segment's head and belongs to these bytes;
/// otherwise (and, with `summaries`, when the spool holds none: lost to a crash or
/// removed) summarized again from the repository's previous summary, as a push does.
/// The caller runs [`check_still_plain`] on a batch before it removes spooled files.
pub fn push_spooled(
    repo: &Repo,
    path: &Path,
    sum: Option<Summary>,
    summaries: bool,
) -> Result<Pushed> {
    not_regular(path)?;
    // The summary made at spooling names the bytes spooled: a file that differs now was
    // damaged in the spool and is refused.
    let name = path.file_name().and_then(|n| n.to_str());
    let how = How {
        summaries: false,
        check: PlainCheck::Caller,
        blake3: (sum.as_ref())
            .filter(|s| Some(s.segment.as_str()) == name)
            .map(|s| s.segment_blake3),
    };
    let mut p = push_how(repo, path, &how)?;
    if sum.is_none() && !summaries {
        return Ok(p);
    }
    // A file archived just now has no summary yet; a retried one may have one.
    if p.outcome != Outcome::Archived && !summary::wanted(repo, &p.name, &p.blake3, p.raw_bytes) {
        return Ok(p);
    }
    let whole = sum.filter(|s| {
        s.segment == p.name && s.segment_blake3 == p.blake3 && s.flags & HEAD_SKIPPED == 0
    });
    if let Some(s) = whole {
        summary::store(repo, &s).with_context(|| {
            format!(
                "{} is archived, but its block summary could not be stored",
                p.name
            )
        })?;
        return Ok(p);
    }
    let t0 = Instant::now();
    let Opened { f, len, seg, .. } = open_checked(path)?;
    if len == p.raw_bytes {
        let bytes = map_if(true, &f, len, path)?.unwrap_or_else(|| unreachable!());
        write_summary(repo, &mut p, &bytes, seg.as_ref())?;
        p.seconds += t0.elapsed().as_secs_f64();
    }
    Ok(p)
}
