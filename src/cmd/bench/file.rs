//! The test file: aligned buffers, O_DIRECT where allowed, removal on every way out.

use crate::sys;
use crate::units::human;
use anyhow::{anyhow, bail, Context, Result};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Instant;

pub(super) fn check_interrupt() -> Result<()> {
    if let Some(sig) = crate::interrupt::received() {
        bail!(
            "interrupted by {}; the test file was removed",
            crate::interrupt::name(sig)
        );
    }
    Ok(())
}

/// Memory aligned for O_DIRECT (4 KiB covers every logical block size in use).
pub(super) struct AlignedBuf {
    pub(super) ptr: *mut u8,
    pub(super) len: usize,
}

impl AlignedBuf {
    pub(super) fn new(len: usize) -> AlignedBuf {
        let layout = std::alloc::Layout::from_size_align(len, 4096).expect("layout");
        // SAFETY: len > 0 (the callers ask for at least 1 MiB).
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        if ptr.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        AlignedBuf { ptr, len }
    }
    pub(super) fn as_slice(&self) -> &[u8] {
        // SAFETY: ptr is a live allocation of len bytes owned by self.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
    pub(super) fn as_mut_slice(&mut self) -> &mut [u8] {
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
pub(super) struct Removal(PathBuf);

impl Drop for Removal {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

pub(super) struct Rng(pub(super) u64);

impl Rng {
    pub(super) fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub(super) fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    pub(super) fn pick(&mut self, mix: &[(u64, u32)]) -> u64 {
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

pub(super) fn dont_need(f: &File, off: u64, len: u64) {
    sys::fadvise(f, off, len, sys::Advice::DontNeed);
}

pub(super) fn filesystem(path: &Path) -> String {
    let Some(t) = sys::fs_type(path) else {
        return "unknown".into();
    };
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

pub(super) fn free_bytes(path: &Path) -> Option<u64> {
    let (blocks, free) = sys::fs_space(path)?;
    // Pseudo filesystems (proc, sysfs) have no blocks at all: nothing to check.
    (blocks > 0).then_some(free)
}

pub(super) struct TestFile {
    pub(super) path: PathBuf,
    pub(super) size: u64,
    pub(super) direct: bool,
    pub(super) buf: AlignedBuf,
}

pub(super) const CHUNK: u64 = 1 << 20;
/// Buffered (fallback) write profiles flush after this many bytes.
pub(super) const FLUSH_EVERY: u64 = 8 << 20;

/// Creates the test file and fills it with 1 MiB writes of incompressible data (so that
/// reads hit real blocks and no storage layer can cheat by compressing or skipping
/// zeros), then syncs it. Tries O_DIRECT first and keeps whether it works.
pub(super) fn prepare(
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
            o.custom_flags(sys::O_DIRECT);
        }
        o.open(&path)
    };
    let (file, mut direct) = match create(want_direct) {
        Ok(f) => (f, want_direct),
        Err(e) if want_direct && sys::is_einval(&e) => {
            // Some filesystems create the file and then refuse O_DIRECT.
            let _ = std::fs::remove_file(&path);
            (create(false).map_err(|e| create_error(dir, e))?, false)
        }
        Err(e) => return Err(create_error(dir, e)),
    };
    *guard = Some(Removal(path.clone()));
    // Only a lack of space matters: the writes below allocate anyway.
    if sys::posix_fallocate(&file, size).is_err_and(|e| sys::is_enospc(&e)) {
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
            Err(e) if direct && sys::is_einval(&e) => {
                // Accepted at open, refused at write: go buffered.
                set_direct(&file, false)?;
                direct = false;
            }
            Err(e) if sys::is_enospc(&e) => bail!(
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
    Ok(sys::set_direct(f, on)?)
}

fn create_error(dir: &Path, e: io::Error) -> anyhow::Error {
    anyhow!(
        "cannot create a test file in '{}': {e}; --path must be a directory you can write to, on the storage to measure",
        dir.display()
    )
}

impl TestFile {
    pub(super) fn open(&self, direct: bool) -> Result<File> {
        let mut o = OpenOptions::new();
        o.read(true).write(true);
        if direct {
            o.custom_flags(sys::O_DIRECT);
        }
        o.open(&self.path)
            .with_context(|| format!("cannot open the test file {}", self.path.display()))
    }
}
