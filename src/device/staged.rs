//! A file written sequentially with O_DIRECT: bytes are copied into aligned staging
//! buffers, each full buffer written by one of a few I/O threads while the next fills
//! (writes in flight without the page cache), the last one padded to a whole block and
//! the file cut back to its length.

use crossbeam_channel::{bounded, Receiver, Sender};
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// O_DIRECT's alignment of memory, offsets and lengths (every disk's logical block fits).
const ALIGN: usize = 4096;
/// One staging buffer: a write of this size keeps a disk streaming.
pub const STAGE: usize = 4 << 20;
/// Writes in flight.
pub const DEPTH: usize = 2;

/// Bytes of memory one staged file takes.
pub const fn memory() -> u64 {
    ((DEPTH + 1) * STAGE) as u64
}

struct Stage {
    mem: memmap2::MmapMut,
    len: usize,
}

pub struct Staged {
    file: Arc<File>,
    cur: Stage,
    /// Where `cur` goes in the file.
    at: u64,
    to_write: Option<Sender<(Stage, u64)>>,
    free: Receiver<Stage>,
    threads: Vec<JoinHandle<()>>,
    failed: Arc<Mutex<Option<io::Error>>>,
}

impl Staged {
    /// `file` must be open with O_DIRECT (and empty).
    pub fn new(file: File) -> io::Result<Staged> {
        let file = Arc::new(file);
        let (to_write, jobs) = bounded::<(Stage, u64)>(DEPTH);
        let (give_back, free) = bounded::<Stage>(DEPTH + 1);
        for _ in 0..DEPTH {
            give_back
                .send(Stage {
                    mem: memmap2::MmapMut::map_anon(STAGE)?,
                    len: 0,
                })
                .expect("room for every buffer");
        }
        let failed = Arc::new(Mutex::new(None));
        let threads = (0..DEPTH)
            .map(|_| {
                let (file, jobs, give_back, failed) = (
                    file.clone(),
                    jobs.clone(),
                    give_back.clone(),
                    failed.clone(),
                );
                std::thread::spawn(move || {
                    for (mut s, at) in jobs {
                        if failed.lock().unwrap().is_none() {
                            if let Err(e) = file.write_all_at(&s.mem[..s.len], at) {
                                failed.lock().unwrap().get_or_insert(e);
                            }
                        }
                        s.len = 0;
                        let _ = give_back.send(s);
                    }
                })
            })
            .collect();
        Ok(Staged {
            file,
            cur: Stage {
                mem: memmap2::MmapMut::map_anon(STAGE)?,
                len: 0,
            },
            at: 0,
            to_write: Some(to_write),
            free,
            threads,
            failed,
        })
    }

    fn failure(&self) -> io::Result<()> {
        match self.failed.lock().unwrap().take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    pub fn write_all(&mut self, mut data: &[u8]) -> io::Result<()> {
        while !data.is_empty() {
            let n = (STAGE - self.cur.len).min(data.len());
            self.cur.mem[self.cur.len..self.cur.len + n].copy_from_slice(&data[..n]);
            self.cur.len += n;
            data = &data[n..];
            if self.cur.len == STAGE {
                // A buffer back is a write done: its failure shows here at the latest.
                let next = self
                    .free
                    .recv()
                    .map_err(|_| io::Error::other("writer gone"))?;
                self.failure()?;
                let full = std::mem::replace(&mut self.cur, next);
                let tx = self.to_write.as_ref().expect("open until finished");
                tx.send((full, self.at))
                    .map_err(|_| io::Error::other("writer gone"))?;
                self.at += STAGE as u64;
            }
        }
        Ok(())
    }

    /// Writes what is staged, waits for every write, and cuts the file to the bytes
    /// given; returns the file (not yet synced).
    pub fn finish(mut self) -> io::Result<Arc<File>> {
        let len = self.at + self.cur.len as u64;
        let pad = self.cur.len.next_multiple_of(ALIGN);
        if pad > 0 {
            self.cur.mem[self.cur.len..pad].fill(0);
            self.file.write_all_at(&self.cur.mem[..pad], self.at)?;
        }
        self.join();
        self.failure()?;
        if pad as u64 + self.at != len {
            self.file.set_len(len)?;
        }
        Ok(self.file.clone())
    }

    fn join(&mut self) {
        drop(self.to_write.take());
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        self.join();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::OpenOptionsExt;

    #[test]
    fn bytes_come_back_as_written_whatever_the_sizes() {
        let t = tempfile::tempdir().unwrap();
        for total in [0, 1, 4095, 4096, STAGE - 1, STAGE, STAGE * 3 + 12_345] {
            let p = t.path().join(format!("f{total}"));
            let f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .custom_flags(crate::sys::O_DIRECT)
                .open(&p)
                .unwrap();
            let mut s = Staged::new(f).unwrap();
            let data: Vec<u8> = (0..total).map(|i| (i * 7 % 251) as u8).collect();
            // Pieces of odd sizes, as frames come.
            for piece in data.chunks(70_001) {
                s.write_all(piece).unwrap();
            }
            s.finish().unwrap();
            assert!(std::fs::read(&p).unwrap() == data, "{total} bytes");
        }
    }
}
