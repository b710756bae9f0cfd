//! `pagevault bench`: the I/O patterns a database puts on storage, measured.
//!
//! Each profile replays one row of the SQL Server I/O pattern table (log writes, random
//! data pages, bulk insert, read-ahead, backup, restore, CHECKDB) against one test file
//! in the directory to measure, one I/O at a time, for a fixed time, and reports MB/s,
//! IOPS and latency percentiles with a plain rating against stated rules of thumb.
//!
//! Reads and the large writes use O_DIRECT where the filesystem allows it, so the
//! figures are the storage's and not the page cache's; otherwise buffered I/O with
//! `posix_fadvise(DONTNEED)` after every read (and an fdatasync at the end of a write
//! profile, inside the timed window). Log writes are always buffered and followed by
//! an fdatasync each, as a database commits. The test file is filled once (so reads
//! hit real blocks and writes overwrite allocated ones) and removed at the end, also
//! on error and on Ctrl-C / SIGTERM.

use super::print_json;
use crate::units::{self, human, mb_per_sec};
use anyhow::{anyhow, bail, Context, Result};
use clap::builder::PossibleValuesParser;
use clap::Args;
use serde_json::{json, Value};
use std::fs::{File, OpenOptions};
use std::io::{self, IsTerminal};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The profile names, in the order they run.
pub const PROFILES: [&str; 7] = [
    "oltp-log",
    "oltp-data",
    "bulk-insert",
    "read-ahead",
    "backup",
    "restore",
    "checkdb",
];

fn bench_size(s: &str) -> Result<u64, String> {
    units::parse_in_range(s, 1, 1 << 44, "test file size", false)
}

fn duration(s: &str) -> Result<f64, String> {
    let d: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("'{s}' is not a number of seconds (try 5 or 0.5)"))?;
    if !d.is_finite() || !(0.05..=3600.0).contains(&d) {
        return Err(format!(
            "duration {s} is out of range: allowed 0.05 to 3600 seconds"
        ));
    }
    Ok(d)
}

#[derive(Args)]
#[command(
    after_help = "Profiles (SQL Server's I/O patterns; all run when none is given):\n  \
oltp-log     sequential write, 512 B to 64 KiB, fdatasync after each write\n  \
oltp-data    random 8 KiB reads and writes, 70% reads\n  \
bulk-insert  sequential write, 8 KiB to 128 KiB\n  \
read-ahead   sequential read, 8 KiB to 256 KiB\n  \
backup       sequential 1 MiB reads and 1 MiB writes, alternating\n  \
restore      sequential 64 KiB writes\n  \
checkdb      sequential read, 8 KiB to 64 KiB\n\n\
Examples:\n  pagevault bench --path /var/lib/postgresql\n  \
pagevault bench --path /mnt/backup --profile backup --profile restore --size 4G --duration 10\n  \
pagevault bench --path /data --profile oltp-log,oltp-data --json"
)]
pub struct BenchArgs {
    /// Directory on the storage to measure (a test file is created there and removed).
    #[arg(long)]
    pub path: PathBuf,
    /// Profile to run; repeat it or separate names with commas. Default: all of them.
    #[arg(long = "profile", value_name = "NAME", value_delimiter = ',',
          value_parser = PossibleValuesParser::new(PROFILES))]
    pub profiles: Vec<String>,
    /// Size of the test file (64M, 1G, 1GiB ...). Larger than the storage's caches gives
    /// truer figures; each profile needs a minimum (backup 16 MiB).
    #[arg(long, default_value = "1G", value_parser = bench_size)]
    pub size: u64,
    /// Seconds each profile runs (fractions allowed, 0.05 to 3600).
    #[arg(long, default_value = "5", value_parser = duration)]
    pub duration: f64,
    /// Buffered I/O with posix_fadvise(DONTNEED) instead of O_DIRECT (what the bench falls
    /// back to where the filesystem refuses O_DIRECT; PostgreSQL's own way of doing I/O).
    #[arg(long)]
    pub buffered: bool,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

// ---------------------------------------------------------------------------------------
// Profiles and ratings

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    /// Sequential buffered writes, each followed by fdatasync.
    LogWrite,
    /// Random 8 KiB reads and writes over the whole file.
    Random,
    SeqWrite,
    SeqRead,
    /// Sequential reads from the first half alternating with sequential writes to the second.
    Backup,
}

#[derive(Clone, Copy)]
enum Basis {
    /// Mean latency per I/O in ms; lower is better.
    MeanLatency,
    /// MB/s of all the I/O; higher is better.
    MBps,
    /// MB/s read (the backup rate); higher is better.
    ReadMBps,
}

struct Rule {
    basis: Basis,
    /// Limits for excellent, good and fair (latency: below; throughput: at least).
    limits: [f64; 3],
    what: &'static str,
}

const LATENCY_LOG: Rule = Rule {
    basis: Basis::MeanLatency,
    limits: [1.0, 5.0, 20.0],
    what: "mean latency of a write plus its fdatasync (a commit)",
};
const LATENCY_DATA: Rule = Rule {
    basis: Basis::MeanLatency,
    limits: [5.0, 10.0, 20.0],
    what: "mean latency of an 8 KiB read or write",
};
// The backup-to-NUL article's customers: 25-35 MB/s bad, 110 a concern, 143-360 good, 412 great.
const THROUGHPUT: Rule = Rule {
    basis: Basis::MBps,
    limits: [400.0, 150.0, 50.0],
    what: "MB/s",
};
const THROUGHPUT_BACKUP: Rule = Rule {
    basis: Basis::ReadMBps,
    limits: [400.0, 150.0, 50.0],
    what: "MB/s read, the backup rate (as much again is written)",
};

struct Spec {
    name: &'static str,
    kind: Kind,
    pattern: &'static str,
    short: &'static str,
    /// (bytes, percent) of the I/O sizes; the percents add up to 100.
    mix: &'static [(u64, u32)],
    read_percent: u32,
    rule: Rule,
}

const K: u64 = 1024;

const SPECS: [Spec; 7] = [
    Spec {
        name: "oltp-log",
        kind: Kind::LogWrite,
        pattern: "sequential write, 512 B to 64 KiB, fdatasync after each write",
        short: "seq W 512B-64K+sync",
        mix: &[
            (512, 20),
            (K, 10),
            (2 * K, 10),
            (4 * K, 20),
            (8 * K, 15),
            (16 * K, 10),
            (32 * K, 10),
            (64 * K, 5),
        ],
        read_percent: 0,
        rule: LATENCY_LOG,
    },
    Spec {
        name: "oltp-data",
        kind: Kind::Random,
        pattern: "random 8 KiB reads and writes, 70% reads",
        short: "rand R/W 8K 70/30",
        mix: &[(8 * K, 100)],
        read_percent: 70,
        rule: LATENCY_DATA,
    },
    Spec {
        name: "bulk-insert",
        kind: Kind::SeqWrite,
        pattern: "sequential write, 8 KiB to 128 KiB",
        short: "seq W 8K-128K",
        mix: &[
            (8 * K, 10),
            (16 * K, 10),
            (32 * K, 20),
            (64 * K, 30),
            (128 * K, 30),
        ],
        read_percent: 0,
        rule: THROUGHPUT,
    },
    Spec {
        name: "read-ahead",
        kind: Kind::SeqRead,
        pattern: "sequential read, 8 KiB to 256 KiB",
        short: "seq R 8K-256K",
        mix: &[
            (8 * K, 10),
            (16 * K, 10),
            (32 * K, 10),
            (64 * K, 20),
            (128 * K, 20),
            (256 * K, 30),
        ],
        read_percent: 100,
        rule: THROUGHPUT,
    },
    Spec {
        name: "backup",
        kind: Kind::Backup,
        pattern: "sequential 1 MiB reads and 1 MiB writes, alternating",
        short: "seq R+W 1M",
        mix: &[(1024 * K, 100)],
        read_percent: 50,
        rule: THROUGHPUT_BACKUP,
    },
    Spec {
        name: "restore",
        kind: Kind::SeqWrite,
        pattern: "sequential 64 KiB writes",
        short: "seq W 64K",
        mix: &[(64 * K, 100)],
        read_percent: 0,
        rule: THROUGHPUT,
    },
    Spec {
        name: "checkdb",
        kind: Kind::SeqRead,
        pattern: "sequential read, 8 KiB to 64 KiB",
        short: "seq R 8K-64K",
        mix: &[(8 * K, 20), (16 * K, 20), (32 * K, 20), (64 * K, 40)],
        read_percent: 100,
        rule: THROUGHPUT,
    },
];

impl Spec {
    fn max_io(&self) -> u64 {
        self.mix.iter().map(|m| m.0).max().unwrap_or(0)
    }
    /// The smallest test file the profile runs on: 16 of its largest I/O, at least 1 MiB.
    fn min_size(&self) -> u64 {
        (16 * self.max_io()).max(1 << 20)
    }
}

fn spec(name: &str) -> &'static Spec {
    SPECS
        .iter()
        .find(|s| s.name == name)
        .expect("known profile")
}

impl Rule {
    fn figure(&self, m: &Measured) -> f64 {
        match self.basis {
            Basis::MeanLatency => m.all.mean_ns() / 1e6,
            Basis::MBps => mb_per_sec(m.all.bytes, m.seconds),
            Basis::ReadMBps => mb_per_sec(m.read.bytes, m.seconds),
        }
    }
    fn unit(&self) -> &'static str {
        match self.basis {
            Basis::MeanLatency => "ms",
            _ => "MB/s",
        }
    }
    fn rate(&self, v: f64) -> &'static str {
        let [a, b, c] = self.limits;
        let better = |x: f64, lim: f64| match self.basis {
            Basis::MeanLatency => x < lim,
            _ => x >= lim,
        };
        if better(v, a) {
            "excellent"
        } else if better(v, b) {
            "good"
        } else if better(v, c) {
            "fair"
        } else {
            "slow"
        }
    }
    fn text(&self) -> String {
        let [a, b, c] = self.limits;
        match self.basis {
            Basis::MeanLatency => format!(
                "{}: < {a} ms excellent, < {b} ms good, < {c} ms fair, else slow",
                self.what
            ),
            _ => format!(
                "{}: >= {a} excellent, >= {b} good, >= {c} fair, else slow",
                self.what
            ),
        }
    }
    fn json(&self) -> Value {
        let [a, b, c] = self.limits;
        match self.basis {
            Basis::MeanLatency => json!({
                "basis": "mean_latency_ms", "excellent_below": a, "good_below": b, "fair_below": c,
                "text": self.text(),
            }),
            Basis::MBps | Basis::ReadMBps => json!({
                "basis": if matches!(self.basis, Basis::MBps) { "mb_per_sec" } else { "read_mb_per_sec" },
                "excellent_from": a, "good_from": b, "fair_from": c,
                "text": self.text(),
            }),
        }
    }
}

// ---------------------------------------------------------------------------------------
// Latency histogram: log-linear buckets (64 per power of two, under 1.6% error), exact
// count, sum, min and max. Bounded memory however long a profile runs.

const SUB_BITS: u32 = 6;
const SUB: u64 = 1 << SUB_BITS;

#[derive(Clone)]
struct Hist {
    counts: Vec<u64>,
    n: u64,
    sum_ns: u128,
    min_ns: u64,
    max_ns: u64,
}

impl Hist {
    fn new() -> Hist {
        Hist {
            counts: vec![0; ((64 - SUB_BITS as u64 + 1) * SUB) as usize],
            n: 0,
            sum_ns: 0,
            min_ns: u64::MAX,
            max_ns: 0,
        }
    }
    fn index(v: u64) -> usize {
        if v < SUB {
            return v as usize;
        }
        let e = 63 - v.leading_zeros() as u64;
        let shift = e - SUB_BITS as u64;
        (((e - SUB_BITS as u64 + 1) * SUB) + ((v >> shift) - SUB)) as usize
    }
    /// The largest value that falls into bucket `i`.
    fn upper(i: usize) -> u64 {
        let i = i as u64;
        if i < SUB {
            return i;
        }
        let e = i / SUB + SUB_BITS as u64 - 1;
        let shift = e - SUB_BITS as u64;
        let lower = (SUB + i % SUB) << shift;
        lower + (1u64 << shift) - 1
    }
    fn record(&mut self, ns: u64) {
        self.counts[Self::index(ns)] += 1;
        self.n += 1;
        self.sum_ns += ns as u128;
        self.min_ns = self.min_ns.min(ns);
        self.max_ns = self.max_ns.max(ns);
    }
    fn merge(&mut self, o: &Hist) {
        for (a, b) in self.counts.iter_mut().zip(&o.counts) {
            *a += b;
        }
        self.n += o.n;
        self.sum_ns += o.sum_ns;
        self.min_ns = self.min_ns.min(o.min_ns);
        self.max_ns = self.max_ns.max(o.max_ns);
    }
    fn mean_ns(&self) -> f64 {
        if self.n == 0 {
            0.0
        } else {
            self.sum_ns as f64 / self.n as f64
        }
    }
    fn percentile_ns(&self, q: f64) -> u64 {
        if self.n == 0 {
            return 0;
        }
        let rank = ((q * self.n as f64).ceil() as u64).clamp(1, self.n);
        let mut seen = 0;
        for (i, c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Self::upper(i).clamp(self.min_ns, self.max_ns);
            }
        }
        self.max_ns
    }
}

#[derive(Clone)]
struct Dir {
    ops: u64,
    bytes: u64,
    hist: Hist,
}

impl Dir {
    fn new() -> Dir {
        Dir {
            ops: 0,
            bytes: 0,
            hist: Hist::new(),
        }
    }
    fn record(&mut self, bytes: u64, lat: Duration) {
        self.ops += 1;
        self.bytes += bytes;
        self.hist
            .record(lat.as_nanos().min(u64::MAX as u128) as u64);
    }
    fn mean_ns(&self) -> f64 {
        self.hist.mean_ns()
    }
    fn json(&self, seconds: f64) -> Value {
        let us = |ns: u64| (ns as f64 / 100.0).round() / 10.0;
        json!({
            "ops": self.ops,
            "bytes": self.bytes,
            "mb_per_sec": round3(mb_per_sec(self.bytes, seconds)),
            "iops": round3(self.ops as f64 / seconds.max(1e-9)),
            "latency_us": {
                "mean": (self.mean_ns() / 100.0).round() / 10.0,
                "min": us(if self.ops == 0 { 0 } else { self.hist.min_ns }),
                "p50": us(self.hist.percentile_ns(0.50)),
                "p95": us(self.hist.percentile_ns(0.95)),
                "p99": us(self.hist.percentile_ns(0.99)),
                "max": us(self.hist.max_ns),
            },
        })
    }
}

fn round3(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}

struct Measured {
    seconds: f64,
    read: Dir,
    write: Dir,
    all: Dir,
    syncs: u64,
    io: String,
}

// ---------------------------------------------------------------------------------------
// The test file: aligned buffers, O_DIRECT where allowed, removal on every way out.

fn check_interrupt() -> Result<()> {
    if let Some(sig) = crate::interrupt::received() {
        bail!(
            "interrupted by {}; the test file was removed",
            crate::interrupt::name(sig)
        );
    }
    Ok(())
}

/// Memory aligned for O_DIRECT (4 KiB covers every logical block size in use).
struct AlignedBuf {
    ptr: *mut u8,
    len: usize,
}

impl AlignedBuf {
    fn new(len: usize) -> AlignedBuf {
        let layout = std::alloc::Layout::from_size_align(len, 4096).expect("layout");
        // SAFETY: len > 0 (the callers ask for at least 1 MiB).
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        if ptr.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        AlignedBuf { ptr, len }
    }
    fn as_slice(&self) -> &[u8] {
        // SAFETY: ptr is a live allocation of len bytes owned by self.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
    fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above, and &mut self makes the access unique.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        let layout = std::alloc::Layout::from_size_align(self.len, 4096).expect("layout");
        // SAFETY: allocated in new() with this layout.
        unsafe { std::alloc::dealloc(self.ptr, layout) }
    }
}

/// Removes the test file when dropped: on success, on error and after a signal.
struct Removal(PathBuf);

impl Drop for Removal {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn pick(&mut self, mix: &[(u64, u32)]) -> u64 {
        let mut r = self.below(100) as u32;
        for &(size, pct) in mix {
            if r < pct {
                return size;
            }
            r -= pct;
        }
        mix[mix.len() - 1].0
    }
}

fn dont_need(f: &File, off: u64, len: u64) {
    // SAFETY: plain syscall on a valid descriptor.
    unsafe {
        libc::posix_fadvise(
            f.as_raw_fd(),
            off as libc::off_t,
            len as libc::off_t,
            libc::POSIX_FADV_DONTNEED,
        );
    }
}

fn is_einval(e: &io::Error) -> bool {
    e.raw_os_error() == Some(libc::EINVAL)
}

fn filesystem(path: &Path) -> String {
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()) else {
        return "unknown".into();
    };
    // SAFETY: statfs fills the zeroed struct; c is a valid C string.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statfs(c.as_ptr(), &mut st) } != 0 {
        return "unknown".into();
    }
    #[allow(clippy::unnecessary_cast)]
    let t = st.f_type as i64 as u64 & 0xffff_ffff;
    match t {
        0xEF53 => "ext4",
        0x5846_5342 => "xfs",
        0x9123_683E => "btrfs",
        0x0102_1994 => "tmpfs (memory, not storage)",
        0x794C_7630 => "overlayfs",
        0x2FC1_2FC1 => "zfs",
        0xF2F5_2010 => "f2fs",
        0x6969 => "nfs",
        0xFF53_4D42 | 0xFE53_4D42 => "cifs/smb",
        0x6573_5546 => "fuse",
        0x0102_1997 => "9p",
        0x4d44 => "vfat",
        _ => return format!("0x{t:x}"),
    }
    .into()
}

fn free_bytes(path: &Path) -> Option<u64> {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).ok()?;
    // SAFETY: statvfs fills the zeroed struct; c is a valid C string.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return None;
    }
    // Pseudo filesystems (proc, sysfs) have no blocks at all: nothing to check.
    if st.f_blocks == 0 {
        return None;
    }
    #[allow(clippy::unnecessary_cast)]
    Some(st.f_bavail as u64 * st.f_frsize as u64)
}

struct TestFile {
    path: PathBuf,
    size: u64,
    direct: bool,
    buf: AlignedBuf,
}

const CHUNK: u64 = 1 << 20;
/// Buffered (fallback) write profiles flush after this many bytes.
const FLUSH_EVERY: u64 = 8 << 20;

/// Creates the test file and fills it with 1 MiB writes of incompressible data (so that
/// reads hit real blocks and no storage layer can cheat by compressing or skipping
/// zeros), then syncs it. Tries O_DIRECT first and keeps whether it works.
fn prepare(
    dir: &Path,
    size: u64,
    want_direct: bool,
    guard: &mut Option<Removal>,
) -> Result<(TestFile, f64)> {
    let mut tag = Rng(std::process::id() as u64 ^ 0x9E37_79B9_7F4A_7C15);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(1);
    tag.0 ^= nanos | 1;
    let path = dir.join(format!(
        "pagevault-bench-{}-{:08x}.tmp",
        std::process::id(),
        tag.next() as u32
    ));
    let create = |direct: bool| {
        let mut o = OpenOptions::new();
        o.read(true).write(true).create_new(true).mode(0o600);
        if direct {
            o.custom_flags(libc::O_DIRECT);
        }
        o.open(&path)
    };
    let (file, mut direct) = match create(want_direct) {
        Ok(f) => (f, want_direct),
        Err(e) if want_direct && is_einval(&e) => {
            // Some filesystems create the file and then refuse O_DIRECT.
            let _ = std::fs::remove_file(&path);
            (create(false).map_err(|e| create_error(dir, e))?, false)
        }
        Err(e) => return Err(create_error(dir, e)),
    };
    *guard = Some(Removal(path.clone()));
    // SAFETY: plain syscall on a valid descriptor.
    let rc = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, size as libc::off_t) };
    if rc == libc::ENOSPC {
        bail!(
            "no space for a {} test file in '{}': free some or give a smaller --size",
            human(size),
            dir.display()
        );
    }
    let mut buf = AlignedBuf::new(CHUNK as usize);
    let mut rng = Rng(nanos | 1);
    for w in buf.as_mut_slice().chunks_exact_mut(8) {
        w.copy_from_slice(&rng.next().to_le_bytes());
    }
    let t0 = Instant::now();
    let mut off = 0;
    while off < size {
        check_interrupt()?;
        let len = CHUNK.min(size - off) as usize;
        // A different stamp in every 4 KiB block: no two blocks alike.
        for b in buf.as_mut_slice().chunks_exact_mut(4096) {
            b[..8].copy_from_slice(&(off ^ rng.next()).to_le_bytes());
        }
        match file.write_all_at(&buf.as_slice()[..len], off) {
            Ok(()) => off += len as u64,
            Err(e) if direct && is_einval(&e) => {
                // Accepted at open, refused at write: go buffered.
                set_direct(&file, false)?;
                direct = false;
            }
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => bail!(
                "no space for a {} test file in '{}': free some or give a smaller --size",
                human(size),
                dir.display()
            ),
            Err(e) => {
                return Err(anyhow!(e).context(format!(
                    "cannot write the test file {} at offset {off}",
                    path.display()
                )))
            }
        }
    }
    file.sync_data()
        .with_context(|| format!("cannot fsync the test file {}", path.display()))?;
    let secs = t0.elapsed().as_secs_f64();
    dont_need(&file, 0, 0);
    Ok((
        TestFile {
            path,
            size,
            direct,
            buf,
        },
        secs,
    ))
}

fn set_direct(f: &File, on: bool) -> Result<()> {
    // SAFETY: fcntl on a valid descriptor.
    unsafe {
        let fl = libc::fcntl(f.as_raw_fd(), libc::F_GETFL);
        let fl = if on {
            fl | libc::O_DIRECT
        } else {
            fl & !libc::O_DIRECT
        };
        if libc::fcntl(f.as_raw_fd(), libc::F_SETFL, fl) != 0 {
            return Err(io::Error::last_os_error().into());
        }
    }
    Ok(())
}

fn create_error(dir: &Path, e: io::Error) -> anyhow::Error {
    anyhow!(
        "cannot create a test file in '{}': {e}; --path must be a directory you can write to, on the storage to measure",
        dir.display()
    )
}

// ---------------------------------------------------------------------------------------
// Running one profile

impl TestFile {
    fn open(&self, direct: bool) -> Result<File> {
        let mut o = OpenOptions::new();
        o.read(true).write(true);
        if direct {
            o.custom_flags(libc::O_DIRECT);
        }
        o.open(&self.path)
            .with_context(|| format!("cannot open the test file {}", self.path.display()))
    }

    fn run(&self, s: &Spec, secs: f64, seed: u64) -> Result<Measured> {
        let buffered = self.open(false)?;
        let data = if self.direct && s.kind != Kind::LogWrite {
            Some(self.open(true)?)
        } else {
            None
        };
        // Nothing of the file may be in the page cache when a profile starts.
        dont_need(&buffered, 0, 0);
        let f = data.as_ref().unwrap_or(&buffered);
        let fallback = data.is_none() && s.kind != Kind::LogWrite;
        let io = match (s.kind, self.direct) {
            (Kind::LogWrite, _) => "buffered + fdatasync",
            (_, true) => "O_DIRECT",
            (Kind::SeqRead, false) => "buffered + fadvise DONTNEED",
            (_, false) => "buffered + fadvise DONTNEED, fdatasync every 8 MiB written",
        };
        if fallback && s.kind == Kind::Random {
            // No kernel read-ahead around random pages.
            // SAFETY: plain syscall on a valid descriptor.
            unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_RANDOM) };
        }
        let mut unflushed = 0u64;
        let mut read_since_drop = 0u64;
        let mut dropped = 0u64;
        let mut rng = Rng(seed | 1);
        let mut read = Dir::new();
        let mut write = Dir::new();
        let mut syncs = 0u64;
        let buf = self.buf.as_slice();
        let mut rbuf = AlignedBuf::new(buf.len());
        let size = self.size;
        // Sequential cursors; backup reads the first half and writes the second.
        let half = (size / 2) / CHUNK * CHUNK;
        let (mut rpos, mut wpos) = match s.kind {
            Kind::Backup => (0, half),
            _ => (0, 0),
        };
        let (rend, wend) = match s.kind {
            Kind::Backup => (half, 2 * half),
            _ => (size, size),
        };
        let (rstart, wstart) = (0, if s.kind == Kind::Backup { half } else { 0 });
        let blocks = size / (8 * K);
        let deadline = Duration::from_secs_f64(secs);
        let mut turn_read = true;
        let start = Instant::now();
        loop {
            check_interrupt()?;
            let len = rng.pick(s.mix);
            let is_read = match s.kind {
                Kind::LogWrite | Kind::SeqWrite => false,
                Kind::SeqRead => true,
                Kind::Random => rng.below(100) < s.read_percent as u64,
                Kind::Backup => {
                    turn_read = !turn_read;
                    !turn_read
                }
            };
            let off = if s.kind == Kind::Random {
                rng.below(blocks) * 8 * K
            } else if is_read {
                if rpos + len > rend {
                    rpos = rstart;
                    if fallback {
                        // Nothing read in the last pass may be found in the cache.
                        dont_need(f, 0, 0);
                        dropped = rstart;
                    }
                }
                rpos += len;
                rpos - len
            } else {
                if wpos + len > wend {
                    wpos = wstart;
                }
                wpos += len;
                wpos - len
            };
            let n = len as usize;
            let t0 = Instant::now();
            if is_read {
                f.read_exact_at(&mut rbuf.as_mut_slice()[..n], off)
                    .with_context(|| format!("{}: read of {n} bytes at {off}", s.name))?;
                let lat = t0.elapsed();
                read.record(len, lat);
                if fallback {
                    // The page cache keeps large folios (up to 2 MiB) whole: dropping
                    // just the range read leaves most of it cached. Random pages are
                    // dropped one by one and all of them every 8 MiB read; sequential
                    // reads drop everything behind them in whole 2 MiB units, which
                    // leaves the kernel's read-ahead ahead of the reader alone.
                    if s.kind == Kind::Random {
                        dont_need(f, off, len);
                        read_since_drop += len;
                        if read_since_drop >= FLUSH_EVERY {
                            dont_need(f, 0, 0);
                            read_since_drop = 0;
                        }
                    } else {
                        let behind = (off + len) / (2 << 20) * (2 << 20);
                        if behind > dropped {
                            dont_need(f, rstart, behind - rstart);
                            dropped = behind;
                        }
                    }
                }
            } else {
                f.write_all_at(&buf[..n], off)
                    .with_context(|| format!("{}: write of {n} bytes at {off}", s.name))?;
                unflushed += len;
                // A log write commits at once; buffered data writes are flushed every
                // 8 MiB, and the write that triggers the flush waits for it (a checkpoint
                // stall), so that MB/s and latency are the storage's, not the page cache's.
                if s.kind == Kind::LogWrite || (fallback && unflushed >= FLUSH_EVERY) {
                    f.sync_data()
                        .with_context(|| format!("{}: fdatasync", s.name))?;
                    syncs += 1;
                    unflushed = 0;
                    if fallback {
                        dont_need(f, 0, 0);
                    }
                }
                write.record(len, t0.elapsed());
            }
            if start.elapsed() >= deadline {
                break;
            }
        }
        if fallback && unflushed > 0 {
            // Buffered writes count only once they are on the storage.
            f.sync_data()
                .with_context(|| format!("{}: fdatasync", s.name))?;
            syncs += 1;
        }
        let seconds = start.elapsed().as_secs_f64();
        dont_need(&buffered, 0, 0);
        let mut all = read.clone();
        all.ops += write.ops;
        all.bytes += write.bytes;
        all.hist.merge(&write.hist);
        Ok(Measured {
            seconds,
            read,
            write,
            all,
            syncs,
            io: io.to_string(),
        })
    }
}

// ---------------------------------------------------------------------------------------

fn usage_error(msg: String) -> ! {
    clap::Error::raw(clap::error::ErrorKind::ValueValidation, format!("{msg}\n")).exit()
}

pub fn run(a: BenchArgs) -> Result<()> {
    let mut names: Vec<&str> = Vec::new();
    for p in &a.profiles {
        if !names.contains(&p.as_str()) {
            names.push(p.as_str());
        }
    }
    if names.is_empty() {
        names = PROFILES.to_vec();
    }
    let specs: Vec<&Spec> = names.iter().map(|n| spec(n)).collect();
    for s in &specs {
        if a.size < s.min_size() {
            usage_error(format!(
                "--size {} is too small for profile {}: it needs at least {} (16 of its largest I/O of {}, and 1 MiB)",
                human(a.size),
                s.name,
                human(s.min_size()),
                human(s.max_io())
            ));
        }
    }
    // Whole 64 KiB units, so every O_DIRECT I/O stays aligned up to the end of the file.
    let size = a.size / (64 * K) * (64 * K);

    let dir = &a.path;
    let md = std::fs::metadata(dir).map_err(|e| {
        anyhow!(
            "cannot use --path '{}': {e}; give an existing directory on the storage to measure",
            dir.display()
        )
    })?;
    if !md.is_dir() {
        bail!(
            "--path '{}' is not a directory; give a directory on the storage to measure",
            dir.display()
        );
    }
    if let Some(free) = free_bytes(dir) {
        if free < size + (64 << 20) {
            bail!(
                "not enough free space in '{}': the test file needs {} and 64 MiB to spare, {} are free; give a smaller --size",
                dir.display(),
                human(size),
                human(free)
            );
        }
    }
    let fs = filesystem(dir);
    let chatty = !a.json && std::io::stderr().is_terminal();

    let _signals = crate::interrupt::catch();
    let mut guard: Option<Removal> = None;
    if chatty {
        eprintln!(
            "bench: writing a {} test file in {} ...",
            human(size),
            dir.display()
        );
    }
    let (tf, prep_secs) = prepare(dir, size, !a.buffered, &mut guard)?;
    let file = tf.path.clone();
    let direct_io = tf.direct;
    let mut results = Vec::new();
    for (i, s) in specs.iter().enumerate() {
        if chatty {
            eprintln!("bench: {} ({} s) ...", s.name, a.duration);
        }
        let m = tf.run(s, a.duration, 0x5EED + i as u64)?;
        results.push((*s, m));
    }
    drop(tf);
    drop(guard);
    let removed = !file.exists();
    let read_mode = if direct_io {
        "O_DIRECT"
    } else {
        "buffered + fadvise DONTNEED"
    };
    let why = if direct_io {
        "the page cache is bypassed"
    } else if a.buffered {
        "--buffered"
    } else {
        "this filesystem refuses O_DIRECT"
    };

    if a.json {
        let profiles: Vec<Value> = results
            .iter()
            .map(|(s, m)| {
                let fig = s.rule.figure(m);
                let mut p = m.all.json(m.seconds);
                let o = p.as_object_mut().unwrap();
                let mut head = serde_json::Map::new();
                head.insert("name".into(), json!(s.name));
                head.insert("pattern".into(), json!(s.pattern));
                head.insert(
                    "access".into(),
                    json!(if s.kind == Kind::Random {
                        "random"
                    } else {
                        "sequential"
                    }),
                );
                head.insert("io".into(), json!(m.io));
                head.insert("direct".into(), json!(m.io == "O_DIRECT"));
                head.insert(
                    "sizes".into(),
                    json!(s
                        .mix
                        .iter()
                        .map(|(b, p)| json!({"bytes": b, "percent": p}))
                        .collect::<Vec<_>>()),
                );
                head.insert("read_percent".into(), json!(s.read_percent));
                head.insert("sync_each_write".into(), json!(s.kind == Kind::LogWrite));
                head.insert("queue_depth".into(), json!(1));
                head.insert("seconds".into(), json!((m.seconds * 1e6).round() / 1e6));
                head.insert("syncs".into(), json!(m.syncs));
                for (k, v) in std::mem::take(o) {
                    head.insert(k, v);
                }
                head.insert("read".into(), m.read.json(m.seconds));
                head.insert("write".into(), m.write.json(m.seconds));
                head.insert(
                    "rating".into(),
                    json!({
                        "value": s.rule.rate(fig),
                        "figure": round3(fig),
                        "unit": s.rule.unit(),
                        "thresholds": s.rule.json(),
                    }),
                );
                Value::Object(head)
            })
            .collect();
        print_json(&json!({
            "path": dir.display().to_string(),
            "filesystem": fs,
            "file_size": size,
            "direct_io": direct_io,
            "read_io": read_mode,
            "read_io_reason": why,
            "duration_s": a.duration,
            "queue_depth": 1,
            "mb": 1_048_576,
            "prepare": {
                "bytes": size,
                "seconds": (prep_secs * 1e6).round() / 1e6,
                "mb_per_sec": round3(mb_per_sec(size, prep_secs)),
            },
            "file": file.display().to_string(),
            "test_file_removed": removed,
            "profiles": profiles,
        }));
        return Ok(());
    }
    let mode = format!("{read_mode} ({why})");
    print_table(dir, &fs, size, a.duration, &mode, prep_secs, &results);
    Ok(())
}

fn ms(ns: f64) -> String {
    let v = ns / 1e6;
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.3}")
    }
}

fn print_table(
    dir: &Path,
    fs: &str,
    size: u64,
    secs: f64,
    read_mode: &str,
    prep_secs: f64,
    results: &[(&Spec, Measured)],
) {
    println!(
        "pagevault bench on {} ({fs}): test file {}, {secs} s per profile, one I/O at a time (queue depth 1)",
        dir.display(),
        human(size)
    );
    println!(
        "reads: {read_mode}; test file written at {:.1} MB/s (1 MiB writes) and removed",
        mb_per_sec(size, prep_secs)
    );
    println!();
    println!(
        "{:<11} {:<20} {:<9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}  rating",
        "profile",
        "pattern",
        "io",
        "MB/s",
        "IOPS",
        "mean ms",
        "p50 ms",
        "p95 ms",
        "p99 ms",
        "max ms"
    );
    for (s, m) in results {
        let h = &m.all.hist;
        let fig = s.rule.figure(m);
        let io = match m.io.as_str() {
            "O_DIRECT" => "direct",
            "buffered + fdatasync" => "buf+sync",
            _ => "buffered",
        };
        println!(
            "{:<11} {:<20} {:<9} {:>9.1} {:>9.0} {:>9} {:>9} {:>9} {:>9} {:>9}  {} ({} {})",
            s.name,
            s.short,
            io,
            mb_per_sec(m.all.bytes, m.seconds),
            m.all.ops as f64 / m.seconds,
            ms(h.mean_ns()),
            ms(h.percentile_ns(0.50) as f64),
            ms(h.percentile_ns(0.95) as f64),
            ms(h.percentile_ns(0.99) as f64),
            ms(h.max_ns as f64),
            s.rule.rate(fig),
            if fig >= 100.0 {
                format!("{fig:.0}")
            } else {
                format!("{fig:.2}")
            },
            s.rule.unit()
        );
    }
    println!();
    println!("Ratings (DBA rules of thumb; MB = 1,048,576 bytes):");
    // Profiles under the same rule share a line.
    let mut rules: Vec<(Vec<&str>, String)> = Vec::new();
    for (s, _) in results {
        let t = s.rule.text();
        match rules.iter_mut().find(|r| r.1 == t) {
            Some(r) => r.0.push(s.name),
            None => rules.push((vec![s.name], t)),
        }
    }
    for (names, text) in rules {
        println!("  {}: {text}", names.join(", "));
    }
    println!(
        "Latency is per I/O from issue to completion (oltp-log: the write and its fdatasync). \
MB/s and IOPS count reads and writes together."
    );
    if results.iter().any(|(_, m)| m.io.contains("every 8 MiB")) {
        println!(
            "Buffered writes are flushed with fdatasync every 8 MiB and at the end; the write \
that triggers a flush counts its time."
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_and_percentiles() {
        for v in [
            0u64,
            1,
            63,
            64,
            65,
            127,
            128,
            1000,
            123_456,
            1 << 40,
            u64::MAX / 3,
        ] {
            let i = Hist::index(v);
            assert!(Hist::upper(i) >= v, "{v}");
            assert!(i == 0 || Hist::upper(i - 1) < v, "{v}");
            assert!(Hist::upper(i) - v <= v / 64 + 1, "{v}");
        }
        let mut h = Hist::new();
        for v in 1..=1000u64 {
            h.record(v * 1000);
        }
        let p50 = h.percentile_ns(0.5) as f64;
        assert!((p50 - 500_000.0).abs() / 500_000.0 < 0.02, "{p50}");
        assert_eq!(h.percentile_ns(1.0), 1_000_000);
        assert!(h.percentile_ns(0.99) <= h.max_ns);
    }

    #[test]
    fn mixes_add_up_and_ratings() {
        for s in &SPECS {
            assert_eq!(s.mix.iter().map(|m| m.1).sum::<u32>(), 100, "{}", s.name);
        }
        assert_eq!(LATENCY_LOG.rate(0.5), "excellent");
        assert_eq!(LATENCY_LOG.rate(4.0), "good");
        assert_eq!(LATENCY_LOG.rate(25.0), "slow");
        assert_eq!(THROUGHPUT.rate(412.0), "excellent");
        assert_eq!(THROUGHPUT.rate(110.0), "fair");
        assert_eq!(THROUGHPUT.rate(31.0), "slow");
    }
}
