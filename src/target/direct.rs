//! Which of a restore's writes skip the page cache (O_DIRECT), and what became of
//! each byte. A large aligned write goes straight to the device; small files, file
//! tails and an incremental's scattered pages go through the page cache, started
//! towards the disk as each frame ends.

use serde::Serialize;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

/// `--direct-writes`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DirectWrites {
    /// Aligned writes of at least `AUTO_MIN` bytes, where the file system allows it.
    #[default]
    Auto,
    /// Every aligned write, where the file system allows it.
    On,
    /// None: every write through the page cache.
    Off,
}

impl std::str::FromStr for DirectWrites {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(DirectWrites::Auto),
            "on" => Ok(DirectWrites::On),
            "off" => Ok(DirectWrites::Off),
            _ => Err(format!("'{s}': give auto, on or off")),
        }
    }
}

/// O_DIRECT wants the memory, the offset and the length aligned to the device's
/// logical block; 4 KiB covers every block size a disk has.
pub const ALIGN: usize = 4096;
/// Smallest write `auto` sends with O_DIRECT: below it, one synchronous device write
/// per call costs more than the page cache's copy.
pub const AUTO_MIN: usize = 128 << 10;

/// What a restore's writes did (`--json`: `writes`).
#[derive(Clone, Debug, Default, Serialize)]
pub struct WriteReport {
    /// The mode asked for.
    pub direct_writes: DirectWrites,
    /// Whether any write could go direct, and why (not).
    pub direct: bool,
    pub why: String,
    /// Bytes written with O_DIRECT, and through the page cache.
    pub direct_bytes: u64,
    pub buffered_bytes: u64,
    /// Writer threads (writes in flight at most).
    pub depth: usize,
}

/// The rule and its counters, shared by every writer of one target.
pub struct Direct {
    mode: DirectWrites,
    on: AtomicBool,
    why: Mutex<String>,
    direct_bytes: AtomicU64,
    buffered_bytes: AtomicU64,
}

impl Direct {
    /// `why_not`: a reason this restore writes through the page cache whatever the mode.
    pub fn new(mode: DirectWrites, why_not: Option<&str>) -> Direct {
        let (on, why) = match (mode, why_not) {
            (DirectWrites::Off, _) => (false, "--direct-writes off".to_string()),
            (_, Some(w)) => (false, w.to_string()),
            (DirectWrites::On, None) => (true, "--direct-writes on: every aligned write".into()),
            (DirectWrites::Auto, None) => (
                true,
                format!(
                    "aligned writes of {} KiB or more; small files, file tails and scattered pages through the page cache",
                    AUTO_MIN >> 10
                ),
            ),
        };
        Direct {
            mode,
            on: AtomicBool::new(on),
            why: Mutex::new(why),
            direct_bytes: AtomicU64::new(0),
            buffered_bytes: AtomicU64::new(0),
        }
    }

    pub fn wanted(&self) -> bool {
        self.on.load(Relaxed)
    }

    /// Bytes at the front of `data` (to be written at `offset`) to write with O_DIRECT.
    pub fn head(&self, data: &[u8], offset: u64) -> usize {
        if !self.wanted()
            || !(data.as_ptr() as usize).is_multiple_of(ALIGN)
            || !offset.is_multiple_of(ALIGN as u64)
        {
            return 0;
        }
        let head = data.len() / ALIGN * ALIGN;
        let min = match self.mode {
            DirectWrites::Auto => AUTO_MIN,
            _ => ALIGN,
        };
        if head >= min {
            head
        } else {
            0
        }
    }

    /// Adds `note` to what the report says of the writes.
    pub fn note(&self, note: &str) {
        let mut why = self.why.lock().unwrap();
        *why = format!("{why}; {note}");
    }

    /// The file system refused O_DIRECT: every later write goes through the page cache.
    pub fn refused(&self, path: &str, e: &io::Error) {
        if self.on.swap(false, Relaxed) {
            *self.why.lock().unwrap() =
                format!("the file system of '{path}' refused O_DIRECT ({e}): page cache");
        }
    }

    /// Writes `data` at `offset`: its first `head` bytes (`Direct::head`) through
    /// `direct` when given, the rest through `buffered`. Returns bytes written direct.
    pub fn put(
        &self,
        buffered: &File,
        direct: Option<(&File, usize)>,
        path: &dyn Fn() -> String,
        data: &[u8],
        offset: u64,
    ) -> io::Result<usize> {
        let mut done = 0;
        if let Some((d, head)) = direct {
            while done < head {
                match d.write_at(&data[done..head], offset + done as u64) {
                    Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                    Ok(n) => done += n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    // Refused late (a short write's unaligned rest, a stacked file
                    // system): the page cache takes the rest.
                    Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                        self.refused(&path(), &e);
                        break;
                    }
                    Err(e) => return Err(e),
                }
            }
        }
        self.direct_bytes.fetch_add(done as u64, Relaxed);
        if done < data.len() {
            buffered.write_all_at(&data[done..], offset + done as u64)?;
            self.buffered_bytes
                .fetch_add((data.len() - done) as u64, Relaxed);
        }
        Ok(done)
    }

    pub fn report(&self, depth: usize) -> WriteReport {
        WriteReport {
            direct_writes: self.mode,
            direct: self.direct_bytes.load(Relaxed) > 0 || self.wanted(),
            why: self.why.lock().unwrap().clone(),
            direct_bytes: self.direct_bytes.load(Relaxed),
            buffered_bytes: self.buffered_bytes.load(Relaxed),
            depth,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::OpenOptionsExt;

    #[repr(align(4096))]
    struct Page([u8; 3 * ALIGN + 100]);

    #[test]
    fn only_aligned_heads_of_the_minimum_go_direct() {
        let p = Box::new(Page([7; 3 * ALIGN + 100]));
        let on = Direct::new(DirectWrites::On, None);
        assert_eq!(on.head(&p.0, 0), 3 * ALIGN, "the tail stays buffered");
        assert_eq!(on.head(&p.0, 512), 0, "an unaligned offset");
        assert_eq!(on.head(&p.0[1..], 0), 0, "unaligned memory");
        assert_eq!(on.head(&p.0[..100], 0), 0, "less than a block");
        let auto = Direct::new(DirectWrites::Auto, None);
        assert_eq!(auto.head(&p.0, 0), 0, "below AUTO_MIN");
        let off = Direct::new(DirectWrites::Off, None);
        assert_eq!(off.head(&p.0, 0), 0);
        let not = Direct::new(DirectWrites::On, Some("a delta restore compares in place"));
        assert_eq!(not.head(&p.0, 0), 0);
        assert_eq!(not.report(1).why, "a delta restore compares in place");
    }

    #[test]
    fn a_write_splits_into_a_direct_head_and_a_buffered_tail() {
        let t = tempfile::tempdir().unwrap();
        let path = t.path().join("f");
        let f = File::create(&path).unwrap();
        let p = Box::new(Page([7; 3 * ALIGN + 100]));
        let on = Direct::new(DirectWrites::On, None);
        // Where the file system refuses O_DIRECT (tmpfs), all of it goes buffered.
        let d = std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(crate::sys::O_DIRECT)
            .open(&path)
            .ok();
        let head = d.as_ref().map(|d| (d, on.head(&p.0, 0)));
        let n = on.put(&f, head, &|| "f".into(), &p.0, 0).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), p.0);
        let r = on.report(2);
        assert_eq!(r.direct_bytes + r.buffered_bytes, p.0.len() as u64);
        if d.is_some() && r.direct {
            assert_eq!((n, r.buffered_bytes), (3 * ALIGN, 100));
        }
    }
}
