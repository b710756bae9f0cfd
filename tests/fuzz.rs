//! A mutation fuzzer (issue 20): real stripes, manifests, catalog records and archived
//! WAL files, mutated by a seeded generator for a time budget and read by the library's
//! parsers (`set::read`, verify, a restore into a sandbox, the catalog, retention and
//! chain selection, archive-get, block summaries, archive-push of a damaged segment),
//! plus a few runs of the binary under a capped address space. Nothing may panic,
//! allocate more than `ALLOC_MAX` at once, hang, or write outside a restore's target.
//!
//! PAGEVAULT_FUZZ_SECS: the time budget of all targets (default 20); PAGEVAULT_FUZZ_SEED:
//! the seed (default `SEED`); PAGEVAULT_FUZZ_CASE: run that one case of each target.
//! A failure names its target, seed and case.

mod common;
use common::forge::*;
use common::*;
use pagevault::device::object::StoreOptions;
use pagevault::ops::restore::{restore, RestoreOptions};
use pagevault::ops::verify::{quiet, verify, ReadOptions, VerifyOptions};
use pagevault::repo::{self, chain, wal, walchain, Repo};
use serde_json::Value;
use std::alloc::{GlobalAlloc, Layout, System};
use std::fs;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::{Duration, Instant};

const SEED: u64 = 0x20_2611_2420;

// ---------------------------------------------------------------------------------
// Allocation cap, watchdog, budget and seeds.

/// No single allocation may be larger: the largest any input here legitimately needs
/// is a pool buffer of a 16 MiB transfer (a forged size or length allocated up front
/// is far larger).
const ALLOC_MAX: usize = 128 << 20;

struct Capped;

static TARGET: AtomicUsize = AtomicUsize::new(0);
static CASE: AtomicU64 = AtomicU64::new(u64::MAX);
static SEED_IN_USE: AtomicU64 = AtomicU64::new(SEED);
const TARGETS: [&str; 7] = ["-", "stripe", "catalog", "wal", "binary", "sealed", "keyed"];

/// Writes to stderr without allocating (from the allocator), then aborts.
fn die(what: &str, n: u64) -> ! {
    let mut buf = [0u8; 256];
    let mut w = Cursor(&mut buf, 0);
    let _ = std::fmt::Write::write_fmt(
        &mut w,
        format_args!(
            "\nfuzz {}: {what} {n} in case {} (PAGEVAULT_FUZZ_SEED={:#x} PAGEVAULT_FUZZ_CASE={})\n",
            TARGETS[TARGET.load(Relaxed)],
            CASE.load(Relaxed),
            SEED_IN_USE.load(Relaxed),
            CASE.load(Relaxed)
        ),
    );
    let n = w.1;
    unsafe {
        libc::write(2, buf.as_ptr().cast(), n);
    }
    std::process::abort()
}

struct Cursor<'a>(&'a mut [u8], usize);

impl std::fmt::Write for Cursor<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let n = s.len().min(self.0.len() - self.1);
        self.0[self.1..self.1 + n].copy_from_slice(&s.as_bytes()[..n]);
        self.1 += n;
        Ok(())
    }
}

unsafe impl GlobalAlloc for Capped {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        if l.size() > ALLOC_MAX {
            die("an allocation of", l.size() as u64);
        }
        System.alloc(l)
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        if l.size() > ALLOC_MAX {
            die("an allocation of", l.size() as u64);
        }
        System.alloc_zeroed(l)
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        if new > ALLOC_MAX {
            die("an allocation of", new as u64);
        }
        System.realloc(p, l, new)
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        System.dealloc(p, l)
    }
}

#[global_allocator]
static ALLOC: Capped = Capped;

fn env_u64(k: &str) -> Option<u64> {
    let v = std::env::var(k).ok()?;
    let v = v.trim();
    match v.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => v.parse().ok(),
    }
}

fn budget() -> Duration {
    Duration::from_secs_f64(
        std::env::var("PAGEVAULT_FUZZ_SECS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(20.0),
    )
}

/// splitmix64.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    /// True `pct` times in 100.
    fn chance(&mut self, pct: u64) -> bool {
        self.next() % 100 < pct
    }
    fn pick<'a, T>(&mut self, v: &'a [T]) -> &'a T {
        &v[self.below(v.len())]
    }
    /// A number a length or count field should not hold, or a plausible one.
    fn interesting(&mut self, near: u64) -> u64 {
        match self.below(12) {
            0 => 0,
            1 => 1,
            2 => u64::MAX,
            3 => u32::MAX as u64,
            4 => 1 << 31,
            5 => 1 << 32,
            6 => 1 << 60,
            7 => near,
            8 => near.wrapping_add(1),
            9 => near.wrapping_sub(1),
            10 => near.wrapping_mul(2),
            _ => self.next() >> self.below(64),
        }
    }
}

/// One target at a time: the allocator's message names the case running.
static SERIAL: Mutex<()> = Mutex::new(());

/// Runs `case` for `target` with a fresh generator per case until `share` percent of
/// the budget is spent (or the one case PAGEVAULT_FUZZ_CASE names). A panic anywhere
/// in a case fails the test with the seed and case; a case running over a minute
/// aborts the process (a hang).
fn drive(target: usize, share: u32, mut case: impl FnMut(&mut Rng) -> &'static str) {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let seed = env_u64("PAGEVAULT_FUZZ_SEED").unwrap_or(SEED);
    let only = env_u64("PAGEVAULT_FUZZ_CASE");
    let budget = budget().mul_f64(share as f64 / 100.0);
    SEED_IN_USE.store(seed, Relaxed);
    TARGET.store(target, Relaxed);
    let name = TARGETS[target];
    let started = Instant::now();
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let beat = std::sync::Arc::new(AtomicU64::new(0));
    let watchdog = {
        let (done, beat) = (done.clone(), beat.clone());
        std::thread::spawn(move || {
            let (mut last, mut since) = (u64::MAX, Instant::now());
            while !done.load(Relaxed) {
                std::thread::sleep(Duration::from_millis(200));
                let b = beat.load(Relaxed);
                if b != last {
                    (last, since) = (b, Instant::now());
                } else if since.elapsed() > Duration::from_secs(60) {
                    die("a hang of over 60 s, case number", b);
                }
            }
        })
    };
    let mut n = 0u64;
    let mut seen = std::collections::BTreeMap::new();
    loop {
        let i = only.unwrap_or(n);
        CASE.store(i, Relaxed);
        beat.store(i, Relaxed);
        let mut rng = Rng(seed
            ^ (target as u64).wrapping_mul(0xA24B_AED4_963E_E407)
            ^ i.wrapping_mul(0x9FB2_1C65_1E98_DF25));
        let outcome = catch_unwind(AssertUnwindSafe(|| case(&mut rng)));
        if let Ok(o) = outcome {
            *seen.entry(o).or_insert(0u64) += 1;
        }
        if let Err(p) = outcome {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            done.store(true, Relaxed);
            panic!(
                "fuzz {name}: case {i} failed: {msg}\nreproduce: PAGEVAULT_FUZZ_SEED={seed:#x} PAGEVAULT_FUZZ_CASE={i} cargo test --release --test fuzz {name}"
            );
        }
        n += 1;
        if only.is_some() || started.elapsed() >= budget {
            break;
        }
    }
    done.store(true, Relaxed);
    watchdog.join().unwrap();
    eprintln!(
        "fuzz {name}: {n} cases in {:.1} s, seed {seed:#x}; how far they got: {seen:?}",
        started.elapsed().as_secs_f64()
    );
}

// ---------------------------------------------------------------------------------
// Mutations.

/// One random damage to `b`: bytes flipped or set, a number overwritten, a range
/// copied from elsewhere (or from `other`), cut, removed, repeated or inserted.
fn mutate_bytes(r: &mut Rng, b: &mut Vec<u8>, other: &[u8]) {
    if b.is_empty() {
        b.extend_from_slice(&other[..other.len().min(r.below(512))]);
        return;
    }
    let at = r.below(b.len());
    match r.below(9) {
        0 => {
            for _ in 0..1 + r.below(8) {
                let i = r.below(b.len());
                b[i] ^= 1 << r.below(8);
            }
        }
        1 => b[at] = *r.pick(&[0, 0xff, 0x7f, 0x80, b'"', b'/', b'.']),
        2 => {
            let v = r.interesting(b.len() as u64);
            let w = *r.pick(&[2usize, 4, 8]);
            let at = at.min(b.len().saturating_sub(w));
            let n = w.min(b.len() - at);
            b[at..at + n].copy_from_slice(&v.to_le_bytes()[..n]);
        }
        3 => {
            let src = if r.chance(50) || other.is_empty() {
                b.clone()
            } else {
                other.to_vec()
            };
            let from = r.below(src.len());
            let n = r.below(4096).min(src.len() - from).min(b.len() - at);
            b[at..at + n].copy_from_slice(&src[from..from + n]);
        }
        4 => b.truncate(at),
        5 => {
            let n = r.below(4096).min(b.len() - at);
            b.drain(at..at + n);
        }
        6 => {
            let n = r.below(4096).min(b.len() - at);
            let piece = b[at..at + n].to_vec();
            b.splice(at..at, piece);
        }
        7 => {
            let n = r.below(1024);
            let fill = r.next() as u8;
            b.splice(at..at, std::iter::repeat_n(fill, n));
        }
        _ => b.resize(b.len() + r.below(8192), 0),
    }
}

/// A value no field should hold, or one of another type.
fn odd_value(r: &mut Rng, was: &Value) -> Value {
    let n = r.interesting(was.as_u64().unwrap_or(0));
    match r.below(14) {
        0 => n.into(),
        1 => (n as i64).wrapping_neg().into(),
        2 => Value::from(n as f64 * 1.5),
        3 => Value::Null,
        4 => "".into(),
        5 => r
            .pick(&[
                "..",
                "/",
                "a/../../b",
                "/etc/passwd",
                "./x",
                "a//b",
                "x\0y",
                "000000010000000000000001",
                "00000001.history",
            ])
            .to_string()
            .into(),
        6 => "é".repeat(r.below(5000)).into(),
        7 => Value::Bool(r.chance(50)),
        8 => Value::Array(vec![]),
        9 => serde_json::json!({}),
        10 => match was {
            Value::String(s) => s
                .chars()
                .take(r.below(s.len() + 1))
                .collect::<String>()
                .into(),
            _ => Value::Null,
        },
        11 => "f".repeat(r.below(80)).into(),
        12 => Value::Array(vec![was.clone(), was.clone()]),
        _ => (r.below(70000) as u64).into(),
    }
}

/// One structural change somewhere in a JSON document: a value replaced, a key
/// removed, an array element removed, repeated or swapped.
fn mutate_json(r: &mut Rng, v: &mut Value) {
    // A random path down the document, chosen first, then followed.
    let mut path: Vec<Value> = vec![];
    let mut cur = &*v;
    for _ in 0..r.below(5) {
        let step: Option<(Value, &Value)> = match cur {
            Value::Object(m) if !m.is_empty() => {
                let (k, n) = m.iter().nth(r.below(m.len())).unwrap();
                Some((k.clone().into(), n))
            }
            Value::Array(a) if !a.is_empty() => {
                let i = r.below(a.len());
                Some((i.into(), &a[i]))
            }
            _ => None,
        };
        match step {
            Some((k, n)) if r.chance(80) => {
                path.push(k);
                cur = n;
            }
            _ => break,
        }
    }
    let mut at = v;
    for k in &path {
        at = match k {
            Value::String(k) => &mut at[k.as_str()],
            k => &mut at[k.as_u64().unwrap() as usize],
        };
    }
    match at {
        Value::Object(m) if !m.is_empty() && r.chance(50) => {
            let k = m.keys().nth(r.below(m.len())).unwrap().clone();
            if r.chance(30) {
                m.remove(&k);
            } else {
                let was = m[&k].clone();
                m.insert(k, odd_value(r, &was));
            }
        }
        Value::Array(a) if !a.is_empty() && r.chance(50) => {
            let i = r.below(a.len());
            match r.below(3) {
                0 => {
                    a.remove(i);
                }
                1 => {
                    let e = a[i].clone();
                    a.insert(r.below(a.len() + 1), e);
                }
                _ => {
                    let j = r.below(a.len());
                    a.swap(i, j);
                }
            }
        }
        other => {
            let was = other.clone();
            *other = odd_value(r, &was);
        }
    }
}

// ---------------------------------------------------------------------------------
// The stripe target: sets of files and SQLite sources, mutated, read as verify and
// a restore read them.

struct Corpus {
    _dir: tempfile::TempDir,
    /// Each set: its stripes' bytes.
    sets: Vec<Vec<Vec<u8>>>,
    /// Each set taken apart.
    parts: Vec<Vec<Parts>>,
}

/// A small tree: empty, tiny, random, compressible and all-zero files (frames of every
/// kind and codec outcome), nesting, an empty directory and a link.
fn small_tree(root: &Path) {
    fs::create_dir_all(root.join("d/e")).unwrap();
    fs::create_dir_all(root.join("emptydir")).unwrap();
    fs::write(root.join("empty"), b"").unwrap();
    fs::write(root.join("tiny"), b"seventeen bytes!!").unwrap();
    fs::write(root.join("rand"), bytes(7, 150_000, false)).unwrap();
    fs::write(root.join("text"), bytes(8, 300_000, true)).unwrap();
    fs::write(root.join("zeros"), vec![0u8; 200_000]).unwrap();
    fs::write(root.join("d/e/f"), bytes(9, 70_000, false)).unwrap();
    std::os::unix::fs::symlink("rand", root.join("ln")).unwrap();
}

fn stripe_corpus() -> &'static Corpus {
    static C: std::sync::OnceLock<Corpus> = std::sync::OnceLock::new();
    C.get_or_init(make_stripe_corpus)
}

fn make_stripe_corpus() -> Corpus {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    small_tree(&src);
    let db = dir.path().join("db.sqlite");
    {
        let c = rusqlite::Connection::open(&db).unwrap();
        c.execute_batch(
            "CREATE TABLE t(a INTEGER PRIMARY KEY, b TEXT); \
             WITH RECURSIVE g(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM g WHERE i < 2000) \
             INSERT INTO t(b) SELECT 'row ' || i || substr(hex(randomblob(60)), 1, i % 100) FROM g;",
        )
        .unwrap();
    }
    let files = format!("files:{}", s(&src));
    let sqlite = format!("sqlite:{}", s(&db));
    let mut sets = vec![];
    for (i, (source, stripes, extra)) in [
        (&files, 1, &["--compress", "none"][..]),
        (&files, 2, &["--compress", "zstd"]),
        (&files, 1, &["--compress", "lz4", "--block-size", "512"]),
        (&sqlite, 1, &["--compress", "lz4"]),
    ]
    .into_iter()
    .enumerate()
    {
        let paths: Vec<String> = (0..stripes)
            .map(|k| s(&dir.path().join(format!("set{i}-{k}.pv"))))
            .collect();
        let to: Vec<&str> = paths.iter().map(String::as_str).collect();
        let mut extra = extra.to_vec();
        extra.extend(["--max-transfer-size", "64K"]);
        ok(&backup_args(source, &to, &extra));
        sets.push(paths.iter().map(|p| fs::read(p).unwrap()).collect());
    }
    let parts = sets
        .iter()
        .map(|set: &Vec<Vec<u8>>| set.iter().map(|b| parse_stripe(b)).collect())
        .collect();
    Corpus {
        _dir: dir,
        sets,
        parts,
    }
}

/// One structural damage to one stripe: a field of the media header, the tail or a
/// frame header rewritten with its CRC made valid, a frame's payload damaged with its
/// CRC made valid, or raw bytes anywhere.
fn mutate_stripe(r: &mut Rng, b: &mut Vec<u8>, other: &[u8]) {
    if b.len() < 1024 {
        return mutate_bytes(r, b, other);
    }
    let n = b.len();
    match r.below(6) {
        0 => {
            let (at, w) = *r.pick(&[
                (8, 2),
                (10, 2),
                (12, 4),
                (16, 8),
                (32, 4),
                (36, 4),
                (40, 1),
                (41, 1),
                (44, 4),
                (48, 4),
                (52, 8),
            ]);
            let v = r.interesting(uint_at(b, at, w));
            b[at..at + w].copy_from_slice(&v.to_le_bytes()[..w]);
            fix_header(b);
        }
        1 => {
            let at = n - 64 + *r.pick(&[8, 16, 24, 32, 40, 48]);
            let v = r.interesting(u64_at(b, at));
            put_u64(b, at, v);
            fix_tail(b);
        }
        2 | 3 => {
            let frames = frames_of(b);
            if frames.is_empty() {
                return mutate_bytes(r, b, other);
            }
            let f = *r.pick(&frames);
            if r.chance(50) {
                let (at, w) = *r.pick(&[
                    (4, 1),
                    (5, 1),
                    (8, 4),
                    (12, 4),
                    (16, 8),
                    (24, 4),
                    (28, 4),
                    (64, 8),
                ]);
                let v = r.interesting(uint_at(b, f + at, w));
                b[f + at..f + at + w].copy_from_slice(&v.to_le_bytes()[..w]);
            } else {
                // Payload bytes, the stored CRC made valid again.
                let stored = u32_at(b, f + 12) as usize;
                if stored > 0 && f + 80 + stored <= n {
                    for _ in 0..1 + r.below(4) {
                        let i = f + 80 + r.below(stored);
                        b[i] ^= 1 << r.below(8);
                    }
                    let c = crc32c::crc32c(&b[f + 80..f + 80 + stored]);
                    put_u32(b, f + 28, c);
                }
            }
            fix_frame(b, f);
        }
        _ => mutate_bytes(r, b, other),
    }
}

/// One change of meaning to a set taken apart, its bytes kept well formed: a frame's
/// content, kind (pages with a bitmap, zero), file or offset changed with a valid
/// digest; frames dropped, repeated or moved between stripes; the manifest's type,
/// sizes, kinds, sparse flags, modes and times changed. Checksums are made whole again
/// most of the time, so that a restore gets to write.
fn mutate_parts(r: &mut Rng, parts: &mut [Parts]) {
    let page = parts[0].manifest["page_size"]
        .as_u64()
        .unwrap_or(8192)
        .max(1) as usize;
    let t = parts[0].manifest["transfer_size"]
        .as_u64()
        .unwrap_or(1 << 16)
        .max(1);
    let files: Vec<(u64, u64)> = parts[0].manifest["files"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|f| Some((f["id"].as_u64()?, f["size"].as_u64()?)))
                .collect()
        })
        .unwrap_or_default();
    for _ in 0..1 + r.below(3) {
        let si = r.below(parts.len());
        let n = parts[si].frames.len();
        match r.below(9) {
            0..=2 if n > 0 => {
                let f = &mut parts[si].frames[r.below(n)];
                let Some(mut raw) = f.raw() else { continue };
                match r.below(4) {
                    // Content changed.
                    0 if !raw.is_empty() => {
                        for _ in 0..1 + r.below(8) {
                            let i = r.below(raw.len());
                            raw[i] = r.next() as u8;
                        }
                        f.set_raw(1, &raw);
                    }
                    // Some pages of the chunk: bitmap, then those pages.
                    1 => {
                        let pages = raw.len().div_ceil(page);
                        let mut out = vec![0u8; pages.div_ceil(8)];
                        let mut body = vec![];
                        for i in 0..pages {
                            if r.chance(50) {
                                out[i / 8] |= 1 << (i % 8);
                                body.extend_from_slice(
                                    &raw[i * page..((i + 1) * page).min(raw.len())],
                                );
                            }
                        }
                        out.extend(body);
                        if r.chance(20) {
                            out.truncate(r.below(out.len() + 1));
                        }
                        f.set_raw(3, &out);
                    }
                    2 => f.set_raw(2, &vec![0; raw.len()]),
                    // Raw bytes cut or grown.
                    _ => {
                        raw.resize(r.below(raw.len() * 2 + 2), 7);
                        f.set_raw(1, &raw);
                    }
                }
            }
            3 if n > 0 && !files.is_empty() => {
                let f = &mut parts[si].frames[r.below(n)];
                let (id, size) = *r.pick(&files);
                if r.chance(50) {
                    put_u32(&mut f.hdr, 8, id as u32);
                }
                let chunk = r.below(size.div_ceil(t) as usize + 2) as u64;
                put_u64(&mut f.hdr, 16, chunk * t);
            }
            4 if n > 0 => {
                let f = parts[si].frames.remove(r.below(n));
                if r.chance(70) {
                    let to = r.below(parts.len());
                    let at = r.below(parts[to].frames.len() + 1);
                    parts[to].frames.insert(at, f.clone());
                    if r.chance(50) {
                        parts[si].frames.push(f);
                    }
                }
            }
            _ => {
                // The manifest, the same change in every stripe's.
                let k = r.below(files.len().max(1));
                let ty = *r.pick(&["full", "diff", "incr"]);
                let (key, v): (&str, Value) = match r.below(8) {
                    0 => ("backup_type", ty.into()),
                    1 => ("sparse", Value::Bool(r.chance(70))),
                    2 => {
                        let size = files.get(r.below(files.len().max(1))).map_or(0, |f| f.1);
                        ("size", r.interesting(size).min(1 << 40).into())
                    }
                    3 => ("kind", (*r.pick(&["file", "dir", "link"])).into()),
                    4 => (
                        "link_target",
                        (*r.pick(&["/", "..", "../../x", "a"])).into(),
                    ),
                    5 => (
                        "mode",
                        (*r.pick(&[0u64, 0o7777, 0o170777, u32::MAX as u64])).into(),
                    ),
                    6 => (
                        "mtime",
                        (*r.pick(&[i64::MIN, -1, 0, i64::MAX, 1 << 40])).into(),
                    ),
                    _ => ("id", (r.interesting(k as u64) % (1 << 32)).into()),
                };
                for p in parts.iter_mut() {
                    if key == "backup_type" {
                        p.manifest[key] = v.clone();
                    } else if let Some(e) = p.manifest["files"].get_mut(k) {
                        e[key] = v.clone();
                    }
                }
            }
        }
    }
    if r.chance(80) {
        fix_checksums(parts);
    }
}

/// Whether a (possibly damaged) stripe still has a manifest to replace.
fn can_rewrite(b: &[u8]) -> bool {
    b.len() >= 1024
        && (512..=1 << 20).contains(&block_of(b))
        && block_of(b).is_power_of_two()
        && try_manifest_json(b).is_some()
}

/// A manifest damaged in its JSON, put back into every stripe of the set as a forger
/// would (every stripe carries the manifest; they must be equal).
fn mutate_manifest(r: &mut Rng, set: &mut [Vec<u8>]) {
    let Some(json) = try_manifest_json(&set[0]) else {
        return;
    };
    let raw = match serde_json::from_slice::<Value>(&json) {
        Ok(mut v) if r.chance(85) => {
            for _ in 0..1 + r.below(3) {
                mutate_json(r, &mut v);
            }
            serde_json::to_vec(&v).unwrap()
        }
        _ => {
            let mut j = json.clone();
            mutate_bytes(r, &mut j, b"{}[]\":,");
            j
        }
    };
    for (i, b) in set.iter_mut().enumerate() {
        let mut v: Value = match serde_json::from_slice(&raw) {
            Ok(v) => v,
            Err(_) if can_rewrite(b) => {
                *b = with_manifest(b, &raw);
                continue;
            }
            Err(_) => continue,
        };
        // Each stripe's own entry keeps its tail's counts unless the damage was there.
        let mine = try_manifest_json(b).and_then(|j| serde_json::from_slice::<Value>(&j).ok());
        if let (Some(m), true) = (mine, r.chance(90)) {
            let mine = m.get("stripes").and_then(Value::as_array);
            if let (Some(a), Some(o)) = (v.get_mut("stripes").and_then(Value::as_array_mut), mine) {
                if let (Some(x), Some(y)) = (a.get_mut(i), o.get(i)) {
                    if x.get("index").is_some() && y.get("index").is_some() {
                        x["frames"] = y["frames"].clone();
                        x["body_end"] = y["body_end"].clone();
                    }
                }
            }
        }
        if can_rewrite(b) {
            *b = with_manifest(b, &serde_json::to_vec(&v).unwrap());
        }
    }
}

/// Every path under `root` (not following links), relative.
fn listing(root: &Path) -> Vec<PathBuf> {
    let mut out = vec![];
    for e in walkdir::WalkDir::new(root).min_depth(1) {
        let e = e.unwrap();
        out.push(e.path().strip_prefix(root).unwrap().to_path_buf());
    }
    out.sort();
    out
}

/// A sandbox for restores: the target four levels down, so a path climbing out of it
/// lands inside; a canary beside it.
struct Sandbox {
    dir: tempfile::TempDir,
}

impl Sandbox {
    fn new() -> Sandbox {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir_all(dir.path().join("a/b/c")).unwrap();
        fs::write(dir.path().join("canary"), b"canary").unwrap();
        Sandbox { dir }
    }
    fn target(&self) -> PathBuf {
        self.dir.path().join("a/b/c/out")
    }
    /// Nothing but the target's own tree and the canary.
    fn check(&self, what: &str) {
        assert_eq!(
            fs::read(self.dir.path().join("canary")).unwrap(),
            b"canary",
            "{what}"
        );
        for p in listing(self.dir.path()) {
            let ok = p.starts_with("a/b/c/out")
                || ["a", "a/b", "a/b/c", "canary"]
                    .iter()
                    .any(|k| p == Path::new(k));
            assert!(ok, "{what} wrote '{}' outside its target", p.display());
        }
        let _ = fs::remove_dir_all(self.target());
    }
}

fn read_options(paths: &[String]) -> ReadOptions {
    ReadOptions {
        from: paths.to_vec(),
        threads: Some(2),
        store: StoreOptions::default(),
        ..ReadOptions::default()
    }
}

#[test]
fn stripe() {
    let corpus = stripe_corpus();
    let work = tempfile::tempdir().unwrap();
    let sandbox = Sandbox::new();
    drive(1, 35, |r| {
        let which = r.below(corpus.sets.len());
        let mut set = corpus.sets[which].clone();
        let other = corpus.sets[r.below(corpus.sets.len())][0].clone();
        if r.chance(50) {
            let mut parts = corpus.parts[which].clone();
            mutate_parts(r, &mut parts);
            set = build_set(&parts);
        }
        for _ in 0..r.below(3) {
            if r.chance(30) {
                mutate_manifest(r, &mut set);
            } else {
                let i = r.below(set.len());
                mutate_stripe(r, &mut set[i], &other);
            }
        }
        let paths: Vec<String> = (0..set.len())
            .map(|i| s(&work.path().join(format!("{i}.pv"))))
            .collect();
        for (p, b) in paths.iter().zip(&set) {
            fs::write(p, b).unwrap();
        }
        // The parsers alone.
        for b in &set {
            use pagevault::format::{frame::FrameHeader, manifest::Manifest, media};
            let _ = media::MediaHeader::decode(&b[..b.len().min(512)]);
            if b.len() >= 64 {
                let _ = media::Tail::decode(&b[b.len() - 64..], b.len() as u64);
            }
            let mut at = 512;
            while at + 80 <= b.len() && at < 1 << 20 {
                let _ = FrameHeader::decode(&b[at..], at as u64);
                at += 512;
            }
            if let Some(j) = try_manifest_json(b) {
                let _ = Manifest::from_bytes(&j);
            }
        }
        let o = StoreOptions::default();
        let _ = pagevault::set::read::describe(&paths, &o);
        if pagevault::set::read::open(&paths, &o).is_err() {
            return "refused when opened";
        }
        let v = VerifyOptions {
            read: read_options(&paths),
        };
        let verified = verify(&v, &quiet).is_ok();
        if r.chance(30) {
            let ro = RestoreOptions {
                read: read_options(&paths),
                to: sandbox.target(),
                stage_only: true,
                ..RestoreOptions::default()
            };
            let restored = restore(&ro, &quiet).is_ok();
            sandbox.check("restore");
            return if restored {
                "restored"
            } else {
                "refused by restore"
            };
        }
        if verified {
            "verified"
        } else {
            "refused by verify"
        }
    });
}

// ---------------------------------------------------------------------------------
// The sealed target: encrypted stripes (AES-256-GCM frames and manifest, a key block)
// and signed ones (keyed BLAKE3 tags on frames and manifest), damaged anywhere (CRCs made valid where mutate_stripe makes them), opened and read
// with the right key: refused cleanly, never a panic, never a write outside the target.

struct Sealed {
    _dir: tempfile::TempDir,
    sets: Vec<Vec<Vec<u8>>>,
    key: String,
}

fn sealed_corpus() -> &'static Sealed {
    static C: std::sync::OnceLock<Sealed> = std::sync::OnceLock::new();
    C.get_or_init(|| {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("src");
        small_tree(&src);
        let key = dir.path().join("key");
        fs::write(&key, [0x5a; 32]).unwrap();
        fs::set_permissions(&key, fs::Permissions::from_mode(0o600)).unwrap();
        let key = s(&key);
        let files = format!("files:{}", s(&src));
        let mut sets = vec![];
        // Encrypted sets, then signed ones (keyed BLAKE3 tags on plain frames).
        let kinds = [
            (1, "none", false),
            (2, "zstd", false),
            (1, "lz4", false),
            (1, "none", true),
            (2, "lz4", true),
        ];
        for (i, (stripes, codec, sign)) in kinds.into_iter().enumerate() {
            let paths: Vec<String> = (0..stripes)
                .map(|k| s(&dir.path().join(format!("sealed{i}-{k}.pv"))))
                .collect();
            let to: Vec<&str> = paths.iter().map(String::as_str).collect();
            let extra = [
                "--compress",
                codec,
                "--max-transfer-size",
                "64K",
                "--key-file",
                &key,
                if sign { "--sign" } else { "--encrypt" },
            ];
            ok(&backup_args(&files, &to, &extra));
            sets.push(paths.iter().map(|p| fs::read(p).unwrap()).collect());
        }
        Sealed {
            _dir: dir,
            sets,
            key,
        }
    })
}

#[test]
fn sealed() {
    let corpus = sealed_corpus();
    let work = tempfile::tempdir().unwrap();
    let sandbox = Sandbox::new();
    let store = StoreOptions {
        key: Some(pagevault::crypt::load::read_key_file(Path::new(&corpus.key)).unwrap()),
        ..StoreOptions::default()
    };
    drive(5, 15, |r| {
        let which = r.below(corpus.sets.len());
        let mut set = corpus.sets[which].clone();
        let other = corpus.sets[r.below(corpus.sets.len())][0].clone();
        for _ in 0..1 + r.below(2) {
            let i = r.below(set.len());
            mutate_stripe(r, &mut set[i], &other);
        }
        let paths: Vec<String> = (0..set.len())
            .map(|i| s(&work.path().join(format!("{i}.pv"))))
            .collect();
        for (p, b) in paths.iter().zip(&set) {
            fs::write(p, b).unwrap();
        }
        let _ = pagevault::set::read::describe(&paths, &store);
        if pagevault::set::read::open(&paths, &store).is_err() {
            return "refused when opened";
        }
        let read = ReadOptions {
            store: store.clone(),
            ..read_options(&paths)
        };
        if r.chance(30) {
            let ro = RestoreOptions {
                read,
                to: sandbox.target(),
                stage_only: true,
                ..RestoreOptions::default()
            };
            let restored = restore(&ro, &quiet).is_ok();
            sandbox.check("restore");
            return if restored {
                "restored"
            } else {
                "refused by restore"
            };
        }
        match verify(&VerifyOptions { read }, &quiet).is_ok() {
            true => "verified",
            false => "refused by verify",
        }
    });
}

// ---------------------------------------------------------------------------------
// The catalog target: records of a repository, mutated, read by every command that
// lists, chooses, verifies, restores or expires sets.

struct Catalog {
    dir: tempfile::TempDir,
    /// The repository whose sets the records name.
    repo: PathBuf,
    /// The sets of the records of a chain (a full, a diff, an incr).
    chain_sets: PathBuf,
    records: Vec<Vec<u8>>,
}

fn catalog_corpus() -> &'static Catalog {
    static C: std::sync::OnceLock<Catalog> = std::sync::OnceLock::new();
    C.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("src");
        small_tree(&src);
        let repo = dir.path().join("repo");
        let source = format!("files:{}", s(&src));
        for _ in 0..3 {
            ok(&[
                "backup",
                "--source",
                &source,
                "--repo",
                &s(&repo),
                "--max-transfer-size",
                "64K",
            ]);
        }
        let mut records: Vec<Vec<u8>> = fs::read_dir(repo.join("catalog"))
            .unwrap()
            .map(|e| fs::read(e.unwrap().path()).unwrap())
            .collect();
        records.sort();
        // The same sets recorded as a chain of a PostgreSQL cluster: WAL names, LSNs,
        // a timeline, bases.
        let mut chain = vec![];
        for (i, b) in records.iter().enumerate() {
            let mut v: Value = serde_json::from_slice(b).unwrap();
            let seg = format!("0000000100000000000000{:02X}", 2 + i);
            v["timeline"] = 1.into();
            v["start_wal"] = seg.clone().into();
            v["stop_wal"] = seg.into();
            v["start_lsn"] = format!("0/{}000028", 2 + i).into();
            v["stop_lsn"] = format!("0/{}000100", 2 + i).into();
            v["system_identifier"] = "7301234567890123456".into();
            if i > 0 {
                v["backup_type"] = ["diff", "incr"][i % 2].into();
                let base: Value = serde_json::from_slice(&records[i - 1]).unwrap();
                v["base_set"] = base["set_id"].clone();
            }
            chain.push(serde_json::to_vec_pretty(&v).unwrap());
        }
        records.extend(chain);
        // The chain's sets: the full as it is, the diff and the incr made of some of
        // their frames (pages frames, a sparse file missing a chunk), checksums whole.
        let chain_sets = dir.path().join("chain-sets");
        let mut r = Rng(1);
        for (i, b) in records[..records.len() / 2].iter().enumerate() {
            let v: Value = serde_json::from_slice(b).unwrap();
            let rel = v["stripes"][0].as_str().unwrap();
            let stripe = fs::read(repo.join(rel)).unwrap();
            let to = chain_sets.join(rel.strip_prefix("sets/").unwrap());
            fs::create_dir_all(to.parent().unwrap()).unwrap();
            if i == 0 {
                fs::write(&to, stripe).unwrap();
                continue;
            }
            let mut parts = vec![parse_stripe(&stripe)];
            let p = &mut parts[0];
            p.manifest["backup_type"] = ["diff", "incr"][i % 2].into();
            let page = p.manifest["page_size"].as_u64().unwrap() as usize;
            for f in p.frames.iter_mut().filter(|f| f.kind() == 1) {
                let raw = f.raw().unwrap();
                if r.chance(50) {
                    let pages = raw.len().div_ceil(page);
                    let mut out = vec![0u8; pages.div_ceil(8)];
                    let mut body = vec![];
                    for k in (0..pages).filter(|k| k % 3 != i % 3) {
                        out[k / 8] |= 1 << (k % 8);
                        body.extend_from_slice(&raw[k * page..((k + 1) * page).min(raw.len())]);
                    }
                    out.extend(body);
                    f.set_raw(3, &out);
                }
            }
            // A sparse file: a chunk without a frame is the base's.
            let text = p.manifest["files"]
                .as_array()
                .unwrap()
                .iter()
                .position(|f| f["path"] == "text")
                .unwrap();
            p.manifest["files"][text]["sparse"] = true.into();
            let id = p.manifest["files"][text]["id"].as_u64().unwrap() as u32;
            let first = p.frames.iter().position(|f| f.file() == id).unwrap();
            p.frames.remove(first);
            fix_checksums(&mut parts);
            fs::write(&to, &build_set(&parts)[0]).unwrap();
        }
        Catalog {
            dir,
            repo,
            chain_sets,
            records,
        }
    })
}

/// One change of meaning to a record, its fields kept well formed: another set's id,
/// base, type, stripes, times, WAL names or LSNs, the damaged flag.
fn mutate_record(r: &mut Rng, recs: &mut [Vec<u8>], i: usize) {
    let vals: Vec<Value> = recs
        .iter()
        .filter_map(|b| serde_json::from_slice(b).ok())
        .collect();
    let (Ok(mut v), false) = (serde_json::from_slice::<Value>(&recs[i]), vals.is_empty()) else {
        return;
    };
    let other = vals[r.below(vals.len())].clone();
    if !v.is_object() || !other.is_object() {
        return;
    }
    match r.below(9) {
        0 => v["set_id"] = other["set_id"].clone(),
        1 => {
            v["base_set"] = if r.chance(80) {
                other["set_id"].clone()
            } else {
                Value::Null
            }
        }
        2 => v["backup_type"] = (*r.pick(&["full", "diff", "incr"])).into(),
        3 => v["damaged"] = Value::Bool(r.chance(50)),
        4 => {
            let mut st = v["stripes"].as_array().cloned().unwrap_or_default();
            let theirs = other["stripes"].as_array().cloned().unwrap_or_default();
            match r.below(3) {
                0 => st.extend(theirs),
                1 => st = theirs,
                _ => st.extend(st.clone()),
            }
            v["stripes"] = st.into();
        }
        5 => {
            let k = *r.pick(&["started", "finished"]);
            v[k] = (*r.pick(&[
                "2001-01-01T00:00:00+00:00",
                "2999-01-01T00:00:00+00:00",
                "",
                "yesterday",
            ]))
            .into();
        }
        6 => {
            let k = *r.pick(&["start_wal", "stop_wal"]);
            v[k] = (*r.pick(&[
                "000000010000000000000001",
                "000000020000000000000009",
                "FFFFFFFFFFFFFFFFFFFFFFFF",
            ]))
            .into();
        }
        7 => {
            let k = *r.pick(&["start_lsn", "stop_lsn"]);
            v[k] = (*r.pick(&["0/0", "FFFFFFFF/FFFFFFFF", "1/2", "0/9000000"])).into();
        }
        _ => v["timeline"] = (*r.pick(&[1u64, 2, u32::MAX as u64])).into(),
    }
    recs[i] = serde_json::to_vec(&v).unwrap();
}

/// A scratch repository: `records` as its catalog, and the corpus's sets (those of the
/// chain with `chain`).
fn scratch_repo(c: &Catalog, at: &Path, records: &[Vec<u8>], chain: bool) {
    let _ = fs::remove_dir_all(at);
    fs::create_dir_all(at.join("catalog")).unwrap();
    fs::create_dir_all(at.join("wal")).unwrap();
    fs::write(at.join("pagevault.repo"), b"pagevault repository 1\n").unwrap();
    // Each set linked: what a merge writes stays in the scratch repository.
    let sets = if chain {
        c.chain_sets.clone()
    } else {
        c.repo.join("sets")
    };
    fs::create_dir_all(at.join("sets")).unwrap();
    for e in fs::read_dir(&sets).unwrap() {
        let e = e.unwrap();
        std::os::unix::fs::symlink(e.path(), at.join("sets").join(e.file_name())).unwrap();
    }
    for (i, r) in records.iter().enumerate() {
        fs::write(at.join(format!("catalog/{i:02}.json")), r).unwrap();
    }
}

#[test]
fn catalog() {
    let c = catalog_corpus();
    let work = c.dir.path().join("scratch");
    let sandbox = Sandbox::new();
    drive(2, 15, |r| {
        // Some records of one kind (files, or the PostgreSQL chain), one of them damaged.
        let half = c.records.len() / 2;
        let base = if r.chance(50) { 0 } else { half };
        let mut recs: Vec<Vec<u8>> = c.records[base..base + half].to_vec();
        recs.truncate(1 + r.below(half));
        let i = r.below(recs.len());
        for _ in 0..1 + r.below(3) {
            match serde_json::from_slice::<Value>(&recs[i]) {
                Ok(_) if r.chance(60) => mutate_record(r, &mut recs, i),
                Ok(mut v) if r.chance(70) => {
                    mutate_json(r, &mut v);
                    recs[i] = serde_json::to_vec(&v).unwrap();
                }
                _ => {
                    let other = c.records[r.below(c.records.len())].clone();
                    mutate_bytes(r, &mut recs[i], &other);
                }
            }
        }
        let _ = repo::parse_record(&recs[i]);
        scratch_repo(c, &work, &recs, base > 0);
        let spec = s(&work);
        let Ok(repo) = Repo::open(&spec, false, &StoreOptions::default()) else {
            return "no repository";
        };
        let Ok(cat) = repo.catalog() else {
            return "catalog refused";
        };
        let _ = chain::select(&cat, &chain::Selector::default());
        for e in &cat {
            let prefix: String = e.set_id.chars().take(r.below(33)).collect();
            let _ = chain::find(&cat, &prefix);
            let sel = chain::Selector {
                set: Some(e.set_id.clone()),
                ..chain::Selector::default()
            };
            let _ = chain::select(&cat, &sel);
        }
        let rules = pagevault::ops::expire::Rules {
            keep_full: r.below(3) as u32,
            keep_within: Some(r.below(4) as u64 * 86400),
            keep_daily: r.below(3) as u32,
            keep_weekly: r.below(2) as u32,
            keep_monthly: r.below(2) as u32,
        };
        let _ = pagevault::ops::expire::plan(&cat, &rules, chrono::Utc::now());
        let _ = pagevault::ops::expire::expire(&pagevault::ops::expire::ExpireOptions {
            repo: spec.clone(),
            rules,
            dry_run: true,
            store: StoreOptions::default(),
        });
        let read = ReadOptions {
            repo: Some(spec.clone()),
            threads: Some(2),
            ..ReadOptions::default()
        };
        if r.chance(50) {
            match verify(&VerifyOptions { read: read.clone() }, &quiet) {
                Ok(_) => "verified",
                Err(_) => "refused by verify",
            }
        } else {
            let ro = RestoreOptions {
                read,
                to: sandbox.target(),
                stage_only: true,
                ..RestoreOptions::default()
            };
            let restored = restore(&ro, &quiet).is_ok();
            sandbox.check("restore of a repository");
            if restored {
                "restored"
            } else {
                "refused by restore"
            }
        }
    });
}

// ---------------------------------------------------------------------------------
// The WAL target: archived files (segments, history files, backup history files) and
// block summaries, mutated, read as archive-get, restore's chain check and a push's
// summary read them; and damaged segments pushed.

struct WalCorpus {
    dir: tempfile::TempDir,
    /// A repository holding every kind of archived file.
    repo: PathBuf,
    /// Archived files (relative to the repository) and their bytes.
    archived: Vec<(String, Vec<u8>)>,
    /// Raw segments, in WAL order: (name, bytes).
    segments: Vec<(String, Vec<u8>)>,
}

/// A synthetic PostgreSQL 17 segment of 1 MiB: a long header, short headers on the
/// pages that hold WAL, no records.
fn synthetic_segment(tli: u32, segno: u64) -> Vec<u8> {
    const SEG: usize = 1 << 20;
    const BLK: usize = 8192;
    let mut v = vec![0u8; SEG];
    for p in 0..4 {
        let h = &mut v[p * BLK..];
        h[0..2].copy_from_slice(&0xD116u16.to_le_bytes());
        let info: u16 = if p == 0 { 2 } else { 0 };
        h[2..4].copy_from_slice(&info.to_le_bytes());
        h[4..8].copy_from_slice(&tli.to_le_bytes());
        h[8..16].copy_from_slice(&(segno * SEG as u64 + (p * BLK) as u64).to_le_bytes());
        if p == 0 {
            h[24..32].copy_from_slice(&7u64.to_le_bytes());
            h[32..36].copy_from_slice(&(SEG as u32).to_le_bytes());
            h[36..40].copy_from_slice(&(BLK as u32).to_le_bytes());
        }
    }
    v
}

/// Real segments of 1 MiB from a PostgreSQL 15 cluster under a small load (tables,
/// an index, updates, deletes, a truncate, a vacuum), archived by the server into
/// `repo`; None without PostgreSQL.
fn real_segments(repo: &Path) -> Option<Vec<String>> {
    if !Path::new(common::pg::BIN).join("postgres").is_file() {
        return None;
    }
    let pg = common::pg::Pg::start_with(&common::pg::PgOptions {
        checksums: true,
        archive: Some(common::pg::push_cmd(repo)),
        wal_segsize_mb: Some(1),
        ..Default::default()
    });
    let mut names = vec![pg.switch_and_wait()];
    for q in [
        "CREATE TABLE t(a int PRIMARY KEY, b text)",
        "INSERT INTO t SELECT g, repeat('x', g % 100) FROM generate_series(1, 3000) g",
        "CREATE INDEX ON t(b)",
        "UPDATE t SET b = 'y' WHERE a % 7 = 0",
        "DELETE FROM t WHERE a % 11 = 0",
        "CREATE TABLE u AS SELECT * FROM t",
        "TRUNCATE u",
        "VACUUM t",
        "DROP TABLE u",
    ] {
        pg.sql(q);
    }
    names.push(pg.switch_and_wait());
    pg.sql("INSERT INTO t SELECT g, 'z' FROM generate_series(3001, 4000) g;");
    names.push(pg.switch_and_wait());
    Some(names)
}

fn wal_corpus() -> &'static WalCorpus {
    static C: std::sync::OnceLock<WalCorpus> = std::sync::OnceLock::new();
    C.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let pgdir = common::pg::postgres_dir("fuzzwal");
        let repo_dir = pgdir.join("repo");
        let real = real_segments(&repo_dir);
        let repo = Repo::open(&s(&repo_dir), true, &StoreOptions::default()).unwrap();
        eprintln!(
            "fuzz wal: {} segments",
            if real.is_some() { "PostgreSQL 15's" } else { "synthetic" }
        );
        let names = match real {
            Some(n) => n,
            None => (2..5u64)
                .map(|segno| {
                    let name = pagevault::pg::segment_name_for(1, segno, 1 << 20);
                    let p = dir.path().join(&name);
                    fs::write(&p, synthetic_segment(1, segno)).unwrap();
                    wal::push(&repo, &p).unwrap();
                    name
                })
                .collect(),
        };
        let h = dir.path().join("00000002.history");
        fs::write(&h, "1\t0/5000100\tno recovery target specified\n").unwrap();
        wal::push(&repo, &h).unwrap();
        let b = dir.path().join(format!("{}.00000028.backup", names[0]));
        fs::write(
            &b,
            format!(
                "START WAL LOCATION: 0/2000028 (file {0})\nSTOP WAL LOCATION: 0/2000100 (file {0})\n\
                 CHECKPOINT LOCATION: 0/2000060\nBACKUP METHOD: streamed\nBACKUP FROM: primary\n\
                 START TIME: 2026-11-24 10:00:00 UTC\nLABEL: fuzz\nSTART TIMELINE: 1\n",
                names[0]
            ),
        )
        .unwrap();
        wal::push(&repo, &b).unwrap();
        let segments = names
            .iter()
            .map(|n| {
                let p = dir.path().join(format!("{n}.raw"));
                wal::fetch(&repo, n, &p).unwrap();
                (n.clone(), fs::read(&p).unwrap())
            })
            .collect();
        // The corpus keeps its own copy (the server's directory goes with it).
        let copy = dir.path().join("repo");
        let out = std::process::Command::new("cp")
            .args(["-a", &s(&repo_dir), &s(&copy)])
            .status()
            .unwrap();
        assert!(out.success());
        let _ = fs::remove_dir_all(&pgdir);
        let archived = walkdir::WalkDir::new(copy.join("wal"))
            .into_iter()
            .map(|e| e.unwrap())
            .filter(|e| e.file_type().is_file())
            .map(|e| {
                let rel = e.path().strip_prefix(&copy).unwrap().display().to_string();
                (rel, fs::read(e.path()).unwrap())
            })
            .filter(|(rel, _)| rel.ends_with(".zst") || rel.ends_with(".sum"))
            .collect();
        WalCorpus {
            dir,
            repo: copy,
            archived,
            segments,
        }
    })
}

/// One structural damage to an archived file (`.zst`) or block summary (`.sum`): a
/// header field with its CRCs valid, stored bytes with their CRC valid, a summary's
/// body damaged and stored again, or raw bytes.
fn mutate_archived(r: &mut Rng, rel: &str, b: &mut Vec<u8>, other: &[u8]) {
    let zst = rel.ends_with(".zst");
    let (hdr, crc_at, stored_crc_at, fields): (usize, usize, usize, &[(usize, usize)]) = if zst {
        (
            152,
            148,
            144,
            &[
                (4, 4),
                (16, 2),
                (18, 1),
                (19, 1),
                (20, 2),
                (88, 8),
                (96, 8),
                (136, 8),
            ],
        )
    } else {
        (132, 128, 124, &[(8, 2), (10, 2), (108, 8), (116, 8)])
    };
    if b.len() < hdr || r.chance(25) {
        return mutate_bytes(r, b, other);
    }
    match r.below(3) {
        0 => {
            let (at, w) = *r.pick(fields);
            let v = r.interesting(uint_at(b, at, w));
            b[at..at + w].copy_from_slice(&v.to_le_bytes()[..w]);
        }
        1 if !zst => {
            // The summary's body, damaged where its counts and lengths are.
            let Ok(mut body) = zstd::bulk::decompress(&b[hdr..], 64 << 20) else {
                return;
            };
            if body.is_empty() {
                return;
            }
            for _ in 0..1 + r.below(3) {
                if r.chance(50) {
                    let at = r.below(body.len());
                    let w = 4.min(body.len() - at);
                    let v = r.interesting(uint_at(&body, at, w));
                    body[at..at + w].copy_from_slice(&v.to_le_bytes()[..w]);
                } else {
                    mutate_bytes(r, &mut body, other);
                }
            }
            let stored = zstd::bulk::compress(&body, 1).unwrap();
            b.truncate(hdr);
            b.extend_from_slice(&stored);
            put_u64(b, 108, body.len() as u64);
            put_u64(b, 116, stored.len() as u64);
        }
        _ => {
            if b.len() > hdr {
                for _ in 0..1 + r.below(4) {
                    let i = hdr + r.below(b.len() - hdr);
                    b[i] ^= 1 << r.below(8);
                }
            }
        }
    }
    let c = crc32c::crc32c(&b[hdr..]);
    put_u32(b, stored_crc_at, c);
    let c = crc32c::crc32c(&b[..crc_at]);
    put_u32(b, crc_at, c);
}

/// A damaged segment: mostly its records (page headers kept, so it passes the page
/// checks and reaches the summarizer), else anywhere.
fn mutate_segment(r: &mut Rng, b: &mut Vec<u8>, other: &[u8]) {
    if r.chance(20) {
        return mutate_bytes(r, b, other);
    }
    for _ in 0..1 + r.below(6) {
        // Bytes of the used pages, past their headers.
        let used = b
            .chunks(8192)
            .take_while(|p| p[..24].iter().any(|&x| x != 0))
            .count()
            .max(1);
        let page = r.below(used) * 8192;
        let at = page + 40 + r.below(8192 - 48);
        match r.below(3) {
            0 => b[at] ^= 1 << r.below(8),
            1 => {
                let v = r.interesting(uint_at(b, at, 4)) as u32;
                put_u32(b, at, v);
            }
            _ => {
                let from = r.below(b.len() - 64);
                let n = r.below(64).min(b.len() - at);
                let piece = b[from..from + n].to_vec();
                b[at..at + n].copy_from_slice(&piece);
            }
        }
    }
}

#[test]
fn wal() {
    use pagevault::repo::wal::summary;
    let c = wal_corpus();
    let scratch = c.dir.path().join("scratch");
    let _ = fs::remove_dir_all(&scratch);
    let out = std::process::Command::new("cp")
        .args(["-a", &s(&c.repo), &s(&scratch)])
        .status()
        .unwrap();
    assert!(out.success());
    let repo = Repo::open(&s(&scratch), false, &StoreOptions::default()).unwrap();
    let fresh = c.dir.path().join("fresh");
    let pg_wal = c.dir.path().join("pg_wal");
    fs::create_dir_all(&pg_wal).unwrap();
    drive(3, 25, |r| {
        if r.chance(35) {
            // A damaged segment pushed into a new repository (after its predecessor,
            // whose summary carries the record continued into it).
            let k = r.below(c.segments.len());
            let (name, good) = &c.segments[k];
            let mut b = good.clone();
            let other = &c.segments[r.below(c.segments.len())].1;
            mutate_segment(r, &mut b, other);
            let _ = fs::remove_dir_all(&fresh);
            let repo = Repo::open(&s(&fresh), true, &StoreOptions::default()).unwrap();
            if k > 0 && r.chance(50) {
                let (pn, pb) = &c.segments[k - 1];
                fs::write(pg_wal.join(pn), pb).unwrap();
                wal::push(&repo, &pg_wal.join(pn)).unwrap();
            }
            let p = pg_wal.join(name);
            fs::write(&p, &b).unwrap();
            let pushed = wal::push(&repo, &p);
            let _ = summary::read(&repo, name);
            let _ = wal::verify(&repo, name);
            return match pushed {
                Ok(p)
                    if p.summary
                        .as_deref()
                        .is_some_and(|s| s.starts_with("block summary:")) =>
                {
                    "segment pushed, summary usable"
                }
                Ok(_) => "segment pushed, summary unusable",
                Err(_) => "segment refused",
            };
        }
        // A damaged archived file, read every way it is read, then put back.
        let (rel, good) = &c.archived[r.below(c.archived.len())];
        let mut b = good.clone();
        let other = &c.archived[r.below(c.archived.len())].1;
        for _ in 0..1 + r.below(2) {
            mutate_archived(r, rel, &mut b, other);
        }
        let path = scratch.join(rel);
        fs::write(&path, &b).unwrap();
        let file = rel.rsplit('/').next().unwrap();
        let outcome;
        if let Some(name) = file.strip_suffix(".sum") {
            let _ = summary::Summary::decode(&b);
            outcome = match summary::read(&repo, name) {
                Ok(Some(_)) => "summary read",
                _ => "summary refused",
            };
            let _ = summary::block_map(&repo, 1, 0, 4 << 20, 1 << 20);
        } else if let Some(name) = file.strip_suffix(".zst") {
            outcome = match wal::verify(&repo, name) {
                Ok(_) => "archived file read",
                Err(_) => "archived file refused",
            };
            let dest = c.dir.path().join("got");
            let _ = wal::fetch(&repo, name, &dest);
            let _ = fs::remove_file(&dest);
            let _ = wal::read_history(&repo, 2);
            let from = walchain::From {
                set_id: "fuzz",
                tli: 1,
                stop_lsn: 0x200_0100,
                seg_size: 1 << 20,
            };
            if let Ok(ch) = walchain::plan(&repo, &from, walchain::End::Latest, None) {
                let _ = walchain::verify(&repo, &ch, 2);
            }
        } else {
            outcome = "-";
        }
        fs::write(&path, good).unwrap();
        outcome
    });
}

// ---------------------------------------------------------------------------------
// Keyed repositories: the marker and the WAL envelopes of a signed and an encrypted
// repository, damaged. Read with the key, nothing but the genuine bytes is accepted,
// and the marker's key and mode never change.

/// Files by relative path: (path, bytes).
type Files = Vec<(String, Vec<u8>)>;

struct Keyed {
    dir: tempfile::TempDir,
    /// Per repository: its path, its marker, its archived files.
    repos: Vec<(PathBuf, Vec<u8>, Files)>,
    segments: Vec<(String, Vec<u8>)>,
}

fn fuzz_key() -> StoreOptions {
    StoreOptions {
        key: Some(pagevault::crypt::KeySource::key([7; 32], "fuzz key")),
        ..Default::default()
    }
}

fn keyed_corpus() -> &'static Keyed {
    static C: std::sync::OnceLock<Keyed> = std::sync::OnceLock::new();
    C.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let segments: Vec<(String, Vec<u8>)> = (2..4u64)
            .map(|segno| {
                let name = pagevault::pg::segment_name_for(1, segno, 1 << 20);
                (name, synthetic_segment(1, segno))
            })
            .collect();
        let mut repos = vec![];
        for sign in [true, false] {
            let root = dir.path().join(if sign { "signed" } else { "sealed" });
            let repo = Repo::open(&s(&root), true, &fuzz_key()).unwrap();
            if sign {
                let k = fuzz_key().key.unwrap();
                repo.key_for(&k, pagevault::format::seal::KeyUse::Sign)
                    .unwrap();
            }
            for (name, b) in &segments {
                let p = dir.path().join(name);
                fs::write(&p, b).unwrap();
                wal::push(&repo, &p).unwrap();
            }
            let marker = fs::read(root.join("pagevault.repo")).unwrap();
            let archived = walkdir::WalkDir::new(root.join("wal"))
                .into_iter()
                .map(|e| e.unwrap())
                .filter(|e| e.file_type().is_file())
                .map(|e| {
                    let rel = e.path().strip_prefix(&root).unwrap().display().to_string();
                    (rel, fs::read(e.path()).unwrap())
                })
                .filter(|(rel, _)| rel.ends_with(".zst") || rel.ends_with(".sum"))
                .collect();
            repos.push((root, marker, archived));
        }
        Keyed {
            dir,
            repos,
            segments,
        }
    })
}

/// One damage to a marker: its mode, key, rotation or tag line edited, dropped or
/// swapped, the marker made plain, or raw bytes.
fn mutate_marker(r: &mut Rng, b: &mut Vec<u8>, other: &[u8]) {
    let text = String::from_utf8_lossy(b).into_owned();
    let lines: Vec<&str> = text.lines().collect();
    let edited = match r.below(6) {
        0 => Some(match text.contains("signing keyed-blake3") {
            true => text.replace("signing keyed-blake3", "encryption aes-256-gcm"),
            false => text.replace("encryption aes-256-gcm", "signing keyed-blake3"),
        }),
        1 => Some("pagevault repository 1\n".to_string()),
        2 => Some(lines[..lines.len() - 1].join("\n") + "\n"),
        3 => {
            let mut l = lines.clone();
            let i = r.below(l.len());
            l.remove(i);
            Some(l.join("\n") + "\n")
        }
        4 => Some(text.replace(
            "kdf raw",
            "rotating-to 00112233445566778899aabbccddeeff raw\nkdf raw",
        )),
        _ => None,
    };
    match edited {
        Some(t) => *b = t.into_bytes(),
        None => mutate_bytes(r, b, other),
    }
}

#[test]
fn keyed() {
    let c = keyed_corpus();
    let got = c.dir.path().join("got");
    drive(6, 10, |r| {
        let k = r.below(c.repos.len());
        let (root, marker, archived) = &c.repos[k];
        let genuine = Repo::open(&s(root), false, &fuzz_key())
            .unwrap()
            .protection();
        let on_marker = r.chance(50);
        let (path, good) = if on_marker {
            let mut b = marker.clone();
            mutate_marker(r, &mut b, &c.repos[1 - k].1);
            fs::write(root.join("pagevault.repo"), &b).unwrap();
            (root.join("pagevault.repo"), marker.clone())
        } else {
            let (rel, good) = &archived[r.below(archived.len())];
            let mut b = good.clone();
            let other = &archived[r.below(archived.len())].1;
            mutate_bytes(r, &mut b, other);
            fs::write(root.join(rel), &b).unwrap();
            (root.join(rel), good.clone())
        };
        let mut outcome = "refused on open";
        if let Ok(repo) = Repo::open(&s(root), false, &fuzz_key()) {
            assert_eq!(
                repo.protection(),
                genuine,
                "the marker's key or mode changed"
            );
            outcome = "opened, every fetch refused";
            for (name, want) in &c.segments {
                let _ = fs::remove_file(&got);
                if wal::fetch(&repo, name, &got).is_ok() {
                    assert_eq!(
                        &fs::read(&got).unwrap(),
                        want,
                        "a forged {name} was accepted"
                    );
                    outcome = "opened, genuine bytes fetched";
                }
                let _ = wal::summary::read(&repo, name);
            }
        }
        // Without the key: nothing may panic or hang (and nothing is authenticated).
        if let Ok(repo) = Repo::open(&s(root), false, &StoreOptions::default()) {
            for (name, _) in &c.segments {
                let _ = wal::fetch(&repo, name, &got);
            }
        }
        fs::write(&path, good).unwrap();
        outcome
    });
}

// ---------------------------------------------------------------------------------
// The binary: a few runs on damaged input under a capped address space.

/// Runs the binary with the address space capped and a time limit; it must end with
/// one of `codes`, without a panic.
fn run_bounded(args: &[&str], codes: &[i32]) -> Run {
    let cap = CAPPED_KIB.to_string();
    let mut a = vec!["-c", "ulimit -v $0 && exec timeout 60 \"$@\"", &cap, bin()];
    a.extend_from_slice(args);
    let out = std::process::Command::new("sh")
        .args(&a)
        .env("MALLOC_ARENA_MAX", "2")
        .output()
        .unwrap();
    let r = Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    assert!(
        codes.contains(&r.code) && !r.stderr.contains("panicked"),
        "pagevault {args:?} exited {} (expected one of {codes:?}):\n{}\n{}",
        r.code,
        r.stdout,
        r.stderr
    );
    r
}

#[test]
fn binary() {
    let (sets, cat, w) = (stripe_corpus(), catalog_corpus(), wal_corpus());
    let work = tempfile::tempdir().unwrap();
    let sandbox = Sandbox::new();
    drive(4, 15, |r| match r.below(3) {
        0 => {
            let mut set = sets.sets[r.below(sets.sets.len())].clone();
            let other = sets.sets[0][0].clone();
            if r.chance(30) {
                mutate_manifest(r, &mut set);
            } else {
                let i = r.below(set.len());
                mutate_stripe(r, &mut set[i], &other);
            }
            let paths: Vec<String> = (0..set.len())
                .map(|i| s(&work.path().join(format!("{i}.pv"))))
                .collect();
            let mut args = vec![*r.pick(&["verify", "restore", "header", "files"])];
            for (p, b) in paths.iter().zip(&set) {
                fs::write(p, b).unwrap();
                args.extend(["--from", p]);
            }
            let to = s(&sandbox.target());
            if args[0] == "restore" {
                args.extend(["--to", &to]);
            }
            let code = run_bounded(&args, &[0, 1]).code;
            sandbox.check("restore");
            ["stripe: exit 0", "stripe: exit 1"][code as usize]
        }
        1 => {
            let chain = r.chance(50);
            let half = cat.records.len() / 2;
            let mut recs = match chain {
                true => cat.records[half..].to_vec(),
                false => cat.records[..half].to_vec(),
            };
            let i = r.below(recs.len());
            match serde_json::from_slice::<Value>(&recs[i]) {
                Ok(_) if r.chance(50) => mutate_record(r, &mut recs, i),
                Ok(mut v) if r.chance(50) => {
                    mutate_json(r, &mut v);
                    recs[i] = serde_json::to_vec(&v).unwrap();
                }
                _ => {}
            }
            let at = work.path().join("repo");
            scratch_repo(cat, &at, &recs, chain);
            let spec = s(&at);
            let to = s(&sandbox.target());
            let args: &[&str] = match r.below(5) {
                0 => &["history", "--repo", &spec],
                1 => &["verify", "--repo", &spec],
                2 => &["restore", "--repo", &spec, "--to", &to],
                3 => &["merge", "--repo", &spec],
                _ => &["expire", "--repo", &spec, "--keep-full", "1", "--dry-run"],
            };
            let code = run_bounded(args, &[0, 1]).code;
            sandbox.check("restore of a repository");
            ["catalog: exit 0", "catalog: exit 1"][code as usize]
        }
        _ => {
            let (rel, good) = &w.archived[r.below(w.archived.len())];
            if !rel.ends_with(".zst") {
                return "-";
            }
            let mut b = good.clone();
            mutate_archived(r, rel, &mut b, &w.archived[0].1);
            let at = work.path().join("walrepo");
            let _ = fs::remove_dir_all(&at);
            fs::create_dir_all(at.join("wal")).unwrap();
            fs::write(at.join("pagevault.repo"), b"pagevault repository 1\n").unwrap();
            let dir = at.join(rel).parent().unwrap().to_path_buf();
            fs::create_dir_all(&dir).unwrap();
            fs::write(at.join(rel), &b).unwrap();
            let name = rel
                .rsplit('/')
                .next()
                .unwrap()
                .strip_suffix(".zst")
                .unwrap();
            let dest = work.path().join("got");
            let args = ["archive-get", "--repo", &s(&at), name, &s(&dest)];
            let code = run_bounded(&args, &[0, 1, 126]).code;
            let _ = fs::remove_file(&dest);
            match code {
                0 => "archive-get: exit 0",
                1 => "archive-get: exit 1",
                _ => "archive-get: exit 126",
            }
        }
    });
}
