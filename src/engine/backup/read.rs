//! The read stage: each volume's files in order, chunk by chunk, into pool buffers;
//! adjacent chunks merged into one vectored read when adaptive.

use super::{FileResults, Item, PageSet, ReadFile, Shared};
use crate::engine::adapt::Adapt;
use crate::engine::pool::{self, Buf};
use crate::engine::stats::Lane;
use crate::format::{ContentHash, FORMAT_VERSION};
use crate::sys;
use anyhow::{anyhow, bail, Context, Result};
use roaring::RoaringBitmap;
use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io::{self, IoSliceMut};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::PathBuf;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// One cursor per volume over the files it holds, in plan order.
pub(super) fn cursors(plan: &[ReadFile], volumes: usize) -> Vec<Mutex<Cursor>> {
    let mut cursors: Vec<Mutex<Cursor>> = (0..volumes)
        .map(|_| {
            Mutex::new(Cursor {
                files: vec![],
                next_file: 0,
                current: None,
                opened: VecDeque::new(),
                opened_bytes: 0,
                ahead: 0,
                ahead_pages: 0,
                asks: vec![],
            })
        })
        .collect();
    for (i, f) in plan.iter().enumerate() {
        cursors[f.volume].get_mut().unwrap().files.push(i as u32);
    }
    cursors
}

/// One reader thread (`k` of its volume): takes chunks from the volume's cursor while
/// its adaptive gate admits it, reads them and hands them to the compressors.
pub(super) fn reader(
    sh: &Shared,
    vol: &Mutex<Cursor>,
    lane: &Lane,
    adapt: &Adapt,
    k: usize,
    ctx: &crossbeam_channel::Sender<Item>,
) {
    let (p, plan, abort, pool) = (sh.p, sh.plan, sh.abort, &sh.pool);
    let t = p.transfer_size;
    let hash = ContentHash::of_version(FORMAT_VERSION);
    // Reused for every read: no allocation per read.
    let mut run: Vec<(Chunk, Buf)> = Vec::with_capacity(MAX_MERGE);
    let mut extra: Vec<Buf> = Vec::with_capacity(MAX_MERGE);
    let mut asks: Vec<Ask> = Vec::new();
    while !abort.aborted() {
        if !adapt.admit(k, abort) {
            break;
        }
        let next = {
            let mut v = vol.lock().unwrap();
            let next = v.next(sh, (t, p.page_size));
            v.take_asks(&mut asks);
            next
        };
        // Outside the lock: each is a syscall that queues reads.
        for (h, offset, len) in asks.drain(..) {
            sys::fadvise(&*h, offset, len, sys::Advice::WillNeed);
        }
        let chunk = match next {
            Ok(Some(c)) => c,
            Ok(None) => {
                adapt.finish();
                break;
            }
            Err(e) => return abort.fail(e),
        };
        let Some((buf, waited)) = pool.get(abort) else {
            break;
        };
        sh.read_st.wait_in(waited);
        // Adjacent ranges of the file, while buffers are free: one vectored read
        // instead of several small ones.
        run.push((chunk, buf));
        let merge = adapt.span();
        if merge > 1 && run[0].0.len == t && run[0].0.sel.is_none() {
            while extra.len() + 1 < merge {
                match pool.try_get() {
                    Some(b) => extra.push(b),
                    None => break,
                }
            }
            if !extra.is_empty() {
                let (file, end) = (run[0].0.file, run[0].0.offset + t as u64);
                vol.lock()
                    .unwrap()
                    .more_of(file, end, plan, t, extra.len(), |c| {
                        run.push((c, extra.pop().unwrap()))
                    });
                extra.drain(..).for_each(|b| pool.put(b));
            }
        }
        if let Err(e) = read_into(sh, &mut run, lane, adapt) {
            return abort.fail(e);
        }
        for (c, buf) in run.drain(..) {
            sh.read_st.op(c.read_len(p.page_size) as u64);
            // A whole chunk is digested here, while the read's copy is in this core's
            // cache: the frame stage, later and maybe on another core, would read it
            // again from memory. Not a chunk whose pages the filter will choose: its
            // digest is of the pages kept.
            let whole =
                c.sel.is_none() && !sh.filter.is_some_and(|f| f.selects(&plan[c.file as usize]));
            let digest = whole.then(|| hash.digest(buf.payload()));
            let item = Item {
                file: c.file,
                offset: c.offset,
                sel: c.sel,
                buf,
                digest,
                frame_len: 0,
                stored: None,
            };
            match pool::send(ctx, item, abort) {
                Some(w) => sh.read_st.wait_out(w),
                None => return,
            }
        }
    }
}

/// Reads the chunks of `run` (one call when several), marks files that ended early,
/// and counts the read.
fn read_into(sh: &Shared, run: &mut [(Chunk, Buf)], lane: &Lane, adapt: &Adapt) -> Result<()> {
    let t0 = Instant::now();
    let page = sh.p.page_size;
    let bytes: usize = run.iter().map(|(c, _)| c.read_len(page)).sum();
    let read = if run.len() > 1 {
        read_run(sh.plan, page, run)
    } else {
        let (c, b) = &mut run[0];
        read_one(sh.plan, c, page, b).map(u32::from)
    };
    match read {
        Ok(shorts) => {
            for (i, (c, _)) in run.iter().enumerate() {
                if shorts & (1 << i) != 0 {
                    sh.state.set_shrank(c.file as usize);
                }
            }
        }
        Err(e) => {
            let c = &run[0].0;
            let f = &sh.plan[c.file as usize];
            return Err(anyhow!(
                "read of '{}' at offset {} failed: {e}",
                f.path,
                c.offset
            ));
        }
    }
    let took = t0.elapsed();
    sh.read_st.busy(took);
    lane.op(bytes as u64, took);
    let room = (sh.progress.live.pool_in_use.load(Relaxed) as usize) + 2 < sh.p.buffer_count;
    adapt.tick(lane, room);
    sh.progress.done.fetch_add(bytes as u64, Relaxed);
    pace(sh, bytes as u64);
    Ok(())
}

/// `--max-rate`: holds the reader until the run's reads so far fit the rate (all
/// readers share one count, so the rate is the backup's, not each reader's).
fn pace(sh: &Shared, bytes: u64) {
    let Some(rate) = sh.p.max_rate.filter(|&r| r > 0) else {
        return;
    };
    let total = sh.paced.fetch_add(bytes, Relaxed) + bytes;
    let due = std::time::Duration::from_secs_f64(total as f64 / rate as f64);
    while !sh.abort.aborted() {
        let now = sh.started.elapsed();
        if now >= due {
            break;
        }
        std::thread::sleep((due - now).min(std::time::Duration::from_millis(100)));
    }
}

enum Opened {
    File(u32, Arc<File>),
    /// It vanished, as it may.
    Gone,
    /// The process has no descriptor left (only ahead of the readers).
    NoRoom,
}

/// A range of an open file (offset, length) to ask of the kernel ahead of the readers.
type Ask = (Arc<File>, u64, u64);

/// Hands out the chunks of one volume's files in order, opening each file once.
pub(super) struct Cursor {
    files: Vec<u32>,
    /// The next file of `files` not yet opened.
    next_file: usize,
    current: Option<(u32, Arc<File>, u64)>,
    /// Files opened ahead of the readers, their first bytes asked of the kernel, and
    /// how many bytes were asked.
    opened: VecDeque<(u32, Arc<File>)>,
    opened_bytes: u64,
    /// In the current sparse file: the first page not yet asked for ahead of the
    /// readers, and how many listed pages are asked for and not yet handed out.
    ahead: u32,
    ahead_pages: u32,
    /// Ranges asked for, to be issued outside the lock.
    asks: Vec<Ask>,
}

/// Listed pages of a sparse file asked of the kernel ahead of the readers: scattered
/// pages read one run per reader leave the device's queue short of what it can take.
const AHEAD_PAGES: u32 = 512;

/// Small files opened, and their first transfer asked of the kernel, ahead of the
/// readers (at most this many, of at most `AHEAD_BYTES`): one read in flight per reader
/// leaves the device's queue short of what a tree of small files needs, and the kernel
/// reads what is asked without a thread waiting for each.
const AHEAD_FILES: usize = 64;
const AHEAD_BYTES: u64 = 4 << 20;

struct Chunk {
    file: u32,
    handle: Arc<File>,
    offset: u64,
    len: usize,
    /// A sparse file's chunk: the pages to read.
    sel: Option<PageSet>,
}

impl Chunk {
    /// Bytes this chunk reads from the file.
    fn read_len(&self, page: usize) -> usize {
        match &self.sel {
            None => self.len,
            Some(sel) => {
                let n = sel.iter().map(|w| w.count_ones() as usize).sum::<usize>();
                (n * page).min(self.len)
            }
        }
    }
}

/// The chunk of a sparse file holding its next listed page at or after `offset`
/// (chunks start at multiples of `transfer`), with the pages it reads; None when no
/// listed page is left before `size`.
fn sparse_chunk(
    pages: &RoaringBitmap,
    offset: u64,
    size: u64,
    transfer: usize,
    page: usize,
) -> Option<(u64, usize, PageSet)> {
    let (t, pg) = (transfer as u64, page as u64);
    // Rounded up: `offset` is a chunk's start or the file's end, which need not be a
    // page boundary (a listed last page cut short would otherwise be handed out again).
    let next = pages.range(offset.div_ceil(pg) as u32..).next()? as u64;
    if next * pg >= size {
        return None;
    }
    let start = next * pg / t * t;
    let len = (size - start).min(t);
    let first = (start / pg) as u32;
    let last = (start + len).div_ceil(pg) as u32;
    let mut sel = [0u64; 32];
    for q in pages.range(first..last) {
        let i = (q - first) as usize;
        sel[i / 64] |= 1 << (i % 64);
    }
    Some((start, len as usize, sel))
}

/// Opens a file the walk listed as regular: never through a link put in its place,
/// never a FIFO or device (which could hang the backup or read another file).
pub(super) fn open_for_read(path: &PathBuf, direct: bool) -> io::Result<File> {
    let open = |flags| {
        OpenOptions::new()
            .read(true)
            .custom_flags(sys::O_NOFOLLOW | flags)
            .open(path)
    };
    let (f, direct) = match direct.then(|| open(sys::O_DIRECT)) {
        Some(Ok(f)) => (f, true),
        _ => (open(0)?, false),
    };
    if !f.metadata()?.is_file() {
        return Err(io::Error::other(
            "is no longer a regular file (it was when the backup listed it)",
        ));
    }
    if !direct {
        sys::fadvise(&f, 0, 0, sys::Advice::Sequential);
    }
    Ok(f)
}

impl Cursor {
    /// After a sparse chunk of `n` pages ending at page `end` was handed out: asks for
    /// the listed pages after it, in runs, until `AHEAD_PAGES` are asked for.
    fn ask_ahead(&mut self, plan: &[ReadFile], n: u32, end: u32, page: usize) {
        let Some((id, h, _)) = &self.current else {
            return;
        };
        let f = &plan[*id as usize];
        let Some(pages) = &f.pages else { return };
        self.ahead_pages = self.ahead_pages.saturating_sub(n);
        if self.ahead < end {
            // The readers are past what was asked for (the first chunk of a file).
            (self.ahead, self.ahead_pages) = (end, 0);
        }
        let last = f.size.div_ceil(page as u64).min(u32::MAX as u64) as u32;
        let mut it = pages.range(self.ahead..last).peekable();
        while self.ahead_pages < AHEAD_PAGES {
            let Some(first) = it.next() else {
                self.ahead = last;
                break;
            };
            let mut next = first + 1;
            while self.ahead_pages + (next - first) < AHEAD_PAGES && it.next_if_eq(&next).is_some()
            {
                next += 1;
            }
            self.asks.push((
                h.clone(),
                first as u64 * page as u64,
                (next - first) as u64 * page as u64,
            ));
            self.ahead_pages += next - first;
            self.ahead = next;
        }
    }

    /// Moves the ranges asked for into `out` (empty).
    fn take_asks(&mut self, out: &mut Vec<Ask>) {
        out.clear();
        if !self.asks.is_empty() {
            std::mem::swap(&mut self.asks, out);
        }
    }

    /// Opens the volume's next file (Gone: it vanished, as it may; it is skipped). Ahead of the readers, a process out of descriptors
    /// is no error: the file is opened when its turn comes.
    fn open_next(
        &mut self,
        (plan, state): (&[ReadFile], &FileResults),
        ahead: bool,
    ) -> Result<Opened> {
        let id = self.files[self.next_file];
        let f = &plan[id as usize];
        let opened = match open_for_read(&f.path.full(), f.direct) {
            Ok(h) => Opened::File(id, Arc::new(h)),
            Err(e) if e.kind() == io::ErrorKind::NotFound && f.missing_ok => {
                state.set_vanished(id as usize);
                Opened::Gone
            }
            Err(e) if ahead && sys::is_out_of_descriptors(&e) => return Ok(Opened::NoRoom),
            Err(e) if sys::is_out_of_descriptors(&e) => bail!(
                "cannot open '{}': {e}; the process may hold {} open files (ulimit -n): raise \
                 the limit, or lower --read-depth and --readers",
                f.path,
                sys::open_files_limit()
            ),
            Err(e) => return Err(anyhow!(e)).with_context(|| format!("cannot open '{}'", f.path)),
        };
        self.next_file += 1;
        Ok(opened)
    }

    /// Opens files after the current one and asks for their first transfer, while they
    /// are small enough to fit `AHEAD_FILES` and `AHEAD_BYTES` and read through the page
    /// cache in whole.
    fn open_ahead(
        &mut self,
        (plan, state): (&[ReadFile], &FileResults),
        transfer: usize,
    ) -> Result<()> {
        while self.opened.len() < AHEAD_FILES && self.next_file < self.files.len() {
            let f = &plan[self.files[self.next_file] as usize];
            let want = f.size.min(transfer as u64);
            if f.pages.is_some() || f.direct || self.opened_bytes + want > AHEAD_BYTES {
                break;
            }
            if f.size == 0 {
                self.next_file += 1;
                continue;
            }
            match self.open_next((plan, state), true)? {
                Opened::File(id, h) => {
                    self.asks.push((h.clone(), 0, want));
                    self.opened_bytes += want;
                    self.opened.push_back((id, h));
                }
                Opened::Gone => {}
                Opened::NoRoom => break,
            }
        }
        Ok(())
    }

    /// Hands `add` up to `n` chunks of `file` from `end` on, if that is where the file
    /// being read stands (called per read: nothing allocated).
    fn more_of(
        &mut self,
        file: u32,
        end: u64,
        plan: &[ReadFile],
        transfer: usize,
        n: usize,
        mut add: impl FnMut(Chunk),
    ) {
        let Some((id, handle, offset)) = &mut self.current else {
            return;
        };
        if *id != file || *offset != end || plan[*id as usize].pages.is_some() {
            return;
        }
        let size = plan[*id as usize].size;
        for _ in 0..n {
            if *offset >= size {
                break;
            }
            let len = (size - *offset).min(transfer as u64) as usize;
            add(Chunk {
                file: *id,
                handle: handle.clone(),
                offset: *offset,
                len,
                sel: None,
            });
            *offset += len as u64;
        }
    }

    fn next(&mut self, sh: &Shared, (transfer, page): (usize, usize)) -> Result<Option<Chunk>> {
        let plan = sh.plan;
        loop {
            if let Some((id, handle, offset)) = &mut self.current {
                let size = plan[*id as usize].size;
                if let Some(pages) = &plan[*id as usize].pages {
                    if let Some((start, len, sel)) =
                        sparse_chunk(pages, *offset, size, transfer, page)
                    {
                        *offset = start + len as u64;
                        let c = Chunk {
                            file: *id,
                            handle: handle.clone(),
                            offset: start,
                            len,
                            sel: Some(sel),
                        };
                        if !plan[*id as usize].direct {
                            let n = sel.iter().map(|w| w.count_ones()).sum::<u32>();
                            let end = (*offset).div_ceil(page as u64) as u32;
                            self.ask_ahead(plan, n, end, page);
                        }
                        return Ok(Some(c));
                    }
                } else if *offset < size {
                    let len = (size - *offset).min(transfer as u64) as usize;
                    let c = Chunk {
                        file: *id,
                        handle: handle.clone(),
                        offset: *offset,
                        len,
                        sel: None,
                    };
                    *offset += len as u64;
                    return Ok(Some(c));
                }
                self.current = None;
            }
            if let Some((id, h)) = self.opened.pop_front() {
                let size = sh.plan[id as usize].size;
                self.opened_bytes -= size.min(transfer as u64);
                self.current = Some((id, h, 0));
            } else {
                let Some(&id) = self.files.get(self.next_file) else {
                    return Ok(None);
                };
                if plan[id as usize].size == 0 {
                    self.next_file += 1;
                    continue;
                }
                if let Opened::File(id, h) = self.open_next((plan, &sh.state), false)? {
                    self.current = Some((id, h, 0));
                }
            }
            (self.ahead, self.ahead_pages) = (0, 0);
            self.open_ahead((plan, &sh.state), transfer)?;
        }
    }
}

/// Reads `len` bytes at `offset`; a short file reads as zeros past its end.
/// Returns whether the file ended early.
fn read_chunk(c: &Chunk, buf: &mut Buf) -> io::Result<bool> {
    let space = buf.space();
    // O_DIRECT wants whole sectors: ask for a rounded length, keep `len`.
    let want = c.len.next_multiple_of(pool::ALIGN).min(space.len());
    let mut got = 0;
    while got < c.len {
        match c
            .handle
            .read_at(&mut space[got..want], c.offset + got as u64)
        {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    let short = got < c.len;
    if short {
        space[got..c.len].fill(0);
    }
    buf.len = c.len;
    Ok(short)
}

/// Reads one chunk; retries without O_DIRECT where a filesystem refuses it late.
fn read_one(plan: &[ReadFile], c: &Chunk, page: usize, buf: &mut Buf) -> io::Result<bool> {
    let read = |c: &Chunk, buf: &mut Buf| match &c.sel {
        Some(sel) => read_sparse(c, sel, page, buf),
        None => read_chunk(c, buf),
    };
    read(c, buf).or_else(|e| {
        if sys::is_einval(&e) {
            let f = &plan[c.file as usize];
            let h = Arc::new(open_for_read(&f.path.full(), false)?);
            read(
                &Chunk {
                    handle: h,
                    ..chunk_clone(c)
                },
                buf,
            )
        } else {
            Err(e)
        }
    })
}

/// Most chunks one merged read takes.
const MAX_MERGE: usize = 16;

/// Transfers one read merges, adaptive: (where it starts, the most the controller may
/// try). Transfers under 1 MiB start merged up to 1 MiB; probing goes up to 16 MiB.
pub(super) fn spans(transfer: usize, adaptive: bool) -> (usize, usize) {
    if !adaptive {
        return (1, 1);
    }
    let base = ((1usize << 20) / transfer).clamp(1, MAX_MERGE);
    (base, ((16usize << 20) / transfer).clamp(base, MAX_MERGE))
}

/// Reads adjacent chunks of one file with one preadv; a chunk the call did not fill
/// (end of file, a short read, a refusal) is read on its own. Bit i of the result:
/// chunk i was short.
fn read_run(plan: &[ReadFile], page: usize, run: &mut [(Chunk, Buf)]) -> io::Result<u32> {
    let handle = run[0].0.handle.clone();
    let offset = run[0].0.offset;
    let last = run.len() - 1;
    let mut iov: [IoSliceMut; MAX_MERGE] = std::array::from_fn(|_| IoSliceMut::new(&mut []));
    for (i, (c, b)) in run.iter_mut().enumerate() {
        let space = b.space();
        // O_DIRECT wants whole sectors; only the last chunk can be short.
        let len = if i == last {
            c.len.next_multiple_of(pool::ALIGN).min(space.len())
        } else {
            c.len
        };
        iov[i] = IoSliceMut::new(&mut space[..len]);
    }
    // A failed call reads nothing: each chunk is then read on its own.
    let n = sys::preadv(&*handle, &mut iov[..=last], offset).unwrap_or(0);
    let mut got = n;
    let mut shorts = 0u32;
    for (i, (c, b)) in run.iter_mut().enumerate() {
        let filled = got.min(c.len);
        got -= filled;
        if filled == c.len {
            b.len = c.len;
        } else if read_one(plan, c, page, b)? {
            shorts |= 1 << i;
        }
    }
    Ok(shorts)
}

fn chunk_clone(c: &Chunk) -> Chunk {
    Chunk {
        file: c.file,
        handle: c.handle.clone(),
        offset: c.offset,
        len: c.len,
        sel: c.sel,
    }
}

/// Reads the selected pages of a sparse chunk in place (one read per run of adjacent
/// pages); the rest of the buffer is left as it was: nothing downstream looks at it, and
/// zeroing a whole chunk per page or two read would cost more than the reads. A selected
/// page past the file's end reads as zeros. Returns whether the file ended early.
fn read_sparse(c: &Chunk, sel: &PageSet, page: usize, buf: &mut Buf) -> io::Result<bool> {
    let space = buf.space();
    let npages = c.len.div_ceil(page);
    let bit = |i: usize| sel[i / 64] >> (i % 64) & 1 == 1;
    let mut short = false;
    let mut i = 0;
    while i < npages {
        if !bit(i) {
            i += 1;
            continue;
        }
        let mut j = i;
        while j < npages && bit(j) {
            j += 1;
        }
        let (from, to) = (i * page, (j * page).min(c.len));
        let mut got = 0;
        while from + got < to {
            match c
                .handle
                .read_at(&mut space[from + got..to], c.offset + (from + got) as u64)
            {
                Ok(0) => {
                    short = true;
                    space[from + got..to].fill(0);
                    break;
                }
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        i = j;
    }
    buf.len = c.len;
    Ok(short)
}

#[cfg(test)]
mod tests;
