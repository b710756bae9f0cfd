//! Running one profile against the test file, one I/O at a time.

use super::file::{check_interrupt, dont_need, AlignedBuf, Rng, TestFile, CHUNK, FLUSH_EVERY};
use super::measure::{Dir, Measured};
use super::profiles::{Kind, Spec, K};
use anyhow::{Context, Result};
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

impl TestFile {
    pub(super) fn run(&self, s: &Spec, secs: f64, seed: u64) -> Result<Measured> {
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
        let io = io_mode(s.kind, self.direct);
        if fallback && s.kind == Kind::Random {
            // No kernel read-ahead around random pages.
            crate::sys::fadvise(f, 0, 0, crate::sys::Advice::Random);
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

/// How a profile does its I/O, as the output names it.
fn io_mode(kind: Kind, direct: bool) -> &'static str {
    match (kind, direct) {
        (Kind::LogWrite, _) => "buffered + fdatasync",
        (_, true) => "O_DIRECT",
        (Kind::SeqRead, false) => "buffered + fadvise DONTNEED",
        (_, false) => "buffered + fadvise DONTNEED, fdatasync every 8 MiB written",
    }
}
