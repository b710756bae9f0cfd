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

mod binary;
mod catalog;
#[path = "../common/mod.rs"]
mod common;
mod keyed;
mod mutate;
mod sealed;
mod stripe;
mod walfiles;
use catalog::*;
use mutate::*;
use stripe::*;
use walfiles::*;

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
