//! Takes stored files out of the spool off the pusher's path.

use super::super::spool::pushed_name;
use crate::pg::{parse_name, Kind};
use crate::repo::wal::spooled::retire;
use std::path::{Path, PathBuf};
use std::sync::mpsc;

/// A segment goes into the pool of files to write over while it has room ([`retire`]);
/// any other file is renamed out of the listing and unlinked on a thread of its own (on
/// a file system mounted with `discard`, about 20 ms for 16 MiB). A file a killed pusher
/// left so is removed by the next ([`super::Spool::pushed_leftovers`]).
pub(super) struct Unlinker {
    tx: Option<mpsc::Sender<PathBuf>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Unlinker {
    pub(super) fn start() -> Unlinker {
        let (tx, rx) = mpsc::channel::<PathBuf>();
        let thread = std::thread::spawn(move || {
            for p in rx {
                let _ = std::fs::remove_file(p);
            }
        });
        Unlinker {
            tx: Some(tx),
            thread: Some(thread),
        }
    }

    pub(super) fn send(&self, p: PathBuf) {
        if let Some(tx) = &self.tx {
            let _ = tx.send(p);
        }
    }

    /// Takes `dir/name` out of the spool at once: into the pool of segments to write
    /// over, or its bytes go later.
    pub(super) fn remove(&self, dir: &Path, name: &str) -> std::io::Result<()> {
        if parse_name(name).is_some_and(|n| n.kind == Kind::Segment) && retire(dir, name)? {
            return Ok(());
        }
        let gone = dir.join(pushed_name(name));
        std::fs::rename(dir.join(name), &gone)?;
        self.send(gone);
        Ok(())
    }
}

impl Drop for Unlinker {
    /// Waits for the removals asked for: the spool's room is back when the pusher ends.
    fn drop(&mut self) {
        drop(self.tx.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::super::spool::Spool;
    use super::*;
    use crate::repo::wal::spooled::POOL;

    fn seg(n: u64) -> String {
        format!("0000000100000000{n:08X}")
    }

    #[test]
    fn a_stored_file_leaves_the_listing_at_once_into_the_pool_or_removed() {
        let d = tempfile::tempdir().unwrap();
        let spool = Spool::open(d.path()).unwrap();
        let ready = spool.ready();
        let pool = ready.join(POOL);
        let u = Unlinker::start();
        // Eight go into the pool to be written over; the ninth and a history file go.
        for i in 1..=9 {
            std::fs::write(ready.join(seg(i)), b"x").unwrap();
            u.remove(&ready, &seg(i)).unwrap();
        }
        std::fs::write(ready.join("00000002.history"), b"1\t0/1\tx\n").unwrap();
        u.remove(&ready, "00000002.history").unwrap();
        assert!(spool.waiting().unwrap().is_empty());
        drop(u);
        assert_eq!(std::fs::read_dir(&pool).unwrap().count(), 8);
        assert!(!ready.join(pushed_name(&seg(9))).exists());
        assert!(!ready.join(pushed_name("00000002.history")).exists());
        // A pusher killed between the rename and the unlink leaves the file hidden; only
        // such names are swept.
        std::fs::write(ready.join(pushed_name(&seg(10))), b"x").unwrap();
        std::fs::write(ready.join(".notwal.pushed"), b"x").unwrap();
        assert_eq!(
            spool.pushed_leftovers(),
            [ready.join(pushed_name(&seg(10)))]
        );
    }
}
