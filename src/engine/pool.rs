//! The buffer pool: at most `count` page-aligned buffers, the only large memory of a
//! run. A buffer is made the first time none is free and fewer than `count` exist, so
//! the pool holds what the run used at its busiest, never more; buffers then circulate
//! between stages through channels and nothing allocates per read. Free buffers are
//! handed out last in, first out: the one given back last is still in a core's cache,
//! and the next read's copy into it does not go to memory.

use super::Abort;
use crate::format::frame::FRAME_HEADER_LEN;
use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

pub const ALIGN: usize = 4096;
/// Room in front of the payload for a frame header, keeping the payload aligned
/// for O_DIRECT reads.
pub const PREFIX: usize = ALIGN;

/// A buffer's memory: from the heap, or on its own transparent huge pages (for
/// O_DIRECT reads, which the device then takes in few segments).
enum Mem {
    Heap(Vec<u8>),
    Huge(memmap2::MmapMut),
}

impl Mem {
    fn bytes(&self) -> &[u8] {
        match self {
            Mem::Heap(v) => v,
            Mem::Huge(m) => m,
        }
    }
    fn bytes_mut(&mut self) -> &mut [u8] {
        match self {
            Mem::Heap(v) => v,
            Mem::Huge(m) => m,
        }
    }
}

/// Bytes one buffer of `cap` payload bytes takes: heap (prefix and alignment slack
/// included) or whole huge pages.
pub fn footprint(cap: usize, huge: bool) -> usize {
    let cap = cap.next_multiple_of(ALIGN);
    if huge {
        (cap + PREFIX).next_multiple_of(crate::sys::HUGE_PAGE)
    } else {
        cap + PREFIX + ALIGN
    }
}

pub struct Buf {
    mem: Mem,
    base: usize,
    cap: usize,
    /// Bytes of payload in use.
    pub len: usize,
}

impl Buf {
    fn new(cap: usize, huge: bool) -> Buf {
        let cap = cap.next_multiple_of(ALIGN);
        // Header and payload on the same huge pages; without them (the kernel refused
        // the mapping), the heap.
        if let Some((map, base)) = huge
            .then(|| crate::sys::huge_memory(cap + PREFIX).ok())
            .flatten()
        {
            return Buf {
                mem: Mem::Huge(map),
                base,
                cap,
                len: 0,
            };
        }
        // Zeroed allocation: pages are only backed by memory once touched.
        let mem = vec![0u8; cap + PREFIX + ALIGN];
        let base = mem.as_ptr().align_offset(ALIGN);
        Buf {
            mem: Mem::Heap(mem),
            base,
            cap,
            len: 0,
        }
    }
    /// Whether the buffer is on huge pages.
    #[cfg(test)]
    fn is_huge(&self) -> bool {
        matches!(self.mem, Mem::Huge(_))
    }
    pub fn capacity(&self) -> usize {
        self.cap
    }
    /// The whole payload area (aligned to 4096 bytes).
    pub fn space(&mut self) -> &mut [u8] {
        let s = self.base + PREFIX;
        &mut self.mem.bytes_mut()[s..s + self.cap]
    }
    pub fn payload(&self) -> &[u8] {
        let s = self.base + PREFIX;
        &self.mem.bytes()[s..s + self.len]
    }
    pub fn header_mut(&mut self) -> &mut [u8] {
        let s = self.base + PREFIX;
        &mut self.mem.bytes_mut()[s - FRAME_HEADER_LEN..s]
    }
    /// Header and the first `total - header` payload bytes, contiguous.
    pub fn frame(&self, total: usize) -> &[u8] {
        let s = self.base + PREFIX - FRAME_HEADER_LEN;
        &self.mem.bytes()[s..s + total]
    }
}

pub struct Pool {
    free: Mutex<Vec<Buf>>,
    given_back: Condvar,
    pub count: usize,
    pub buf_size: usize,
    /// Buffers on huge pages.
    huge: bool,
    /// Buffers made so far (at most `count`).
    made: AtomicUsize,
    /// Buffers handed out and not given back yet, for the report's occupancy.
    in_use: Arc<AtomicU64>,
}

impl Pool {
    pub fn new(count: usize, buf_size: usize) -> Pool {
        Pool {
            free: Mutex::new(Vec::with_capacity(count)),
            given_back: Condvar::new(),
            count,
            buf_size: buf_size.next_multiple_of(ALIGN),
            huge: false,
            made: AtomicUsize::new(0),
            in_use: Arc::default(),
        }
    }

    /// Makes its buffers on huge pages (for O_DIRECT reads).
    pub fn on_huge_pages(mut self, huge: bool) -> Pool {
        self.huge = huge;
        self
    }

    /// Counts buffers in use into `gauge` (shared with a sampler).
    pub fn counted(mut self, gauge: Arc<AtomicU64>) -> Pool {
        self.in_use = gauge;
        self
    }

    /// Bytes the pool holds: the buffers made, at most `count`.
    pub fn bytes(&self) -> u64 {
        (self.made() * footprint(self.buf_size, self.huge)) as u64
    }

    /// Buffers made so far: the most the run had in use at once.
    pub fn made(&self) -> usize {
        self.made.load(Relaxed)
    }

    /// A new buffer while fewer than `count` exist.
    fn make(&self) -> Option<Buf> {
        self.made
            .fetch_update(Relaxed, Relaxed, |m| (m < self.count).then_some(m + 1))
            .ok()
            .map(|_| Buf::new(self.buf_size, self.huge))
    }

    /// A buffer free now, or a new one while the pool may grow.
    fn free_now(&self) -> Option<Buf> {
        let last = self.free.lock().unwrap().pop();
        last.or_else(|| self.make())
    }

    /// A free buffer and how long we waited for it; None once the run is aborted.
    pub fn get(&self, abort: &Abort) -> Option<(Buf, Duration)> {
        let t = Instant::now();
        let mut free = self.free.lock().unwrap();
        loop {
            if let Some(b) = free.pop().or_else(|| self.make()) {
                return Some((self.take(b), t.elapsed()));
            }
            if abort.aborted() {
                return None;
            }
            free = self
                .given_back
                .wait_timeout(free, Duration::from_millis(50))
                .unwrap()
                .0;
        }
    }

    /// A free buffer if one is free now (for merged reads, which never wait for more).
    pub fn try_get(&self) -> Option<Buf> {
        self.free_now().map(|b| self.take(b))
    }

    /// An empty buffer, counted in use.
    fn take(&self, mut b: Buf) -> Buf {
        b.len = 0;
        self.in_use.fetch_add(1, Relaxed);
        b
    }

    pub fn put(&self, b: Buf) {
        self.in_use.fetch_sub(1, Relaxed);
        self.free.lock().unwrap().push(b);
        self.given_back.notify_one();
    }

    /// A buffer outside the pool, for a compressor's scratch space: made as the pool's
    /// are, since a compressor swaps it with the buffers it frames.
    pub fn extra(&self) -> Buf {
        Buf::new(self.buf_size, self.huge)
    }
}

/// Sends with abort polling so a stage never blocks forever on a dead consumer.
/// Returns the time spent waiting, or None when aborted or disconnected.
pub fn send<T>(tx: &Sender<T>, mut item: T, abort: &Abort) -> Option<Duration> {
    let t = Instant::now();
    loop {
        match tx.send_timeout(item, Duration::from_millis(50)) {
            Ok(()) => return Some(t.elapsed()),
            Err(crossbeam_channel::SendTimeoutError::Timeout(back)) if !abort.aborted() => {
                item = back
            }
            Err(_) => return None,
        }
    }
}

/// Receives with abort polling: the item and the wait, or None at the end of input.
pub fn recv<T>(rx: &Receiver<T>, abort: &Abort) -> Option<(T, Duration)> {
    let t = Instant::now();
    loop {
        match rx.recv_timeout(Duration::from_millis(50)) {
            Ok(v) => return Some((v, t.elapsed())),
            Err(RecvTimeoutError::Timeout) if !abort.aborted() => continue,
            Err(_) => return None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payload_is_aligned_and_header_adjacent() {
        let mut b = Buf::new(70_000, false);
        assert_eq!(b.capacity() % ALIGN, 0);
        assert_eq!(b.space().as_ptr() as usize % ALIGN, 0);
        b.header_mut().fill(7);
        b.space()[0] = 9;
        b.len = 1;
        let f = b.frame(FRAME_HEADER_LEN + 1);
        assert!(f[..FRAME_HEADER_LEN].iter().all(|&x| x == 7));
        assert_eq!(f[FRAME_HEADER_LEN], 9);
    }

    #[test]
    fn huge_buffers_keep_header_and_payload_on_one_huge_page_and_count_whole_pages() {
        let pool = Pool::new(1, 1 << 20).on_huge_pages(true);
        let a = Abort::default();
        let mut b = pool.get(&a).unwrap().0;
        assert!(
            b.is_huge(),
            "an anonymous mapping is refused only without memory"
        );
        let p = b.space().as_ptr() as usize;
        assert_eq!(p % ALIGN, 0);
        let page = p / crate::sys::HUGE_PAGE;
        assert_eq!(page, (p + (1 << 20) - 1) / crate::sys::HUGE_PAGE);
        assert_eq!(
            (p - FRAME_HEADER_LEN) / crate::sys::HUGE_PAGE,
            page,
            "the header shares the payload's huge page"
        );
        b.header_mut().fill(7);
        b.space()[..3].copy_from_slice(&[1, 2, 3]);
        b.len = 3;
        assert_eq!(b.payload(), [1, 2, 3]);
        assert_eq!(
            b.frame(FRAME_HEADER_LEN + 1)[FRAME_HEADER_LEN - 1..],
            [7, 1]
        );
        assert_eq!(pool.bytes(), crate::sys::HUGE_PAGE as u64);
        assert_eq!(footprint(1 << 20, false), (1 << 20) + PREFIX + ALIGN);
        assert_eq!(footprint(4 << 20, true), 6 << 20);
    }

    #[test]
    fn pool_is_bounded() {
        let p = Pool::new(2, 4096);
        let a = Abort::default();
        let x = p.get(&a).unwrap().0;
        let _y = p.get(&a).unwrap().0;
        a.fail(anyhow::anyhow!("stop"));
        assert!(
            p.get(&a).is_none(),
            "an empty pool must not hand out a third buffer"
        );
        p.put(x);
        assert!(p.get(&a).is_some(), "a returned buffer is handed out again");
    }

    #[test]
    fn pool_makes_a_buffer_only_when_none_is_free() {
        let (p, a) = (Pool::new(8, 4096), Abort::default());
        assert_eq!((p.made(), p.bytes()), (0, 0), "nothing made up front");
        for _ in 0..5 {
            let b = p.get(&a).unwrap().0;
            p.put(b);
        }
        assert_eq!(p.made(), 1, "one buffer in use at a time: one made");
        let held: Vec<Buf> = (0..3).map(|_| p.try_get().unwrap()).collect();
        assert_eq!(p.made(), 3);
        held.into_iter().for_each(|b| p.put(b));
        let all: Vec<Buf> = (0..8).map(|_| p.get(&a).unwrap().0).collect();
        assert_eq!(p.made(), 8);
        assert!(p.try_get().is_none(), "never more than count");
        assert_eq!(p.bytes(), 8 * (p.buf_size + PREFIX + ALIGN) as u64);
        // Last in, first out: the buffer given back last (still in cache) comes next.
        let mut all = all.into_iter();
        let (mut x, y) = (all.next().unwrap(), all.next().unwrap());
        let at = x.space().as_ptr();
        p.put(y);
        p.put(x);
        x = p.get(&a).unwrap().0;
        assert_eq!(x.space().as_ptr(), at);
    }
}
