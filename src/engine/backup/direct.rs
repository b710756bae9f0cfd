//! Which files are read with O_DIRECT. A large file none of whose pages is in the page
//! cache reads faster around it: the device takes whole transfers into buffers on huge
//! pages, in few segments, where buffered reads pay the page cache's copy and its
//! readahead's request sizes. A cached or changing file reads through the cache, which
//! holds it or is about to.

use super::ReadFile;
use std::fs::OpenOptions;
use std::os::unix::fs::OpenOptionsExt;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

/// `--direct-io`: which files bypass the page cache.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DirectIo {
    /// Every file through the page cache.
    Off,
    /// Every file with O_DIRECT, where the file system allows it.
    On,
    /// Large whole files with no page in the page cache.
    #[default]
    Auto,
}

impl DirectIo {
    pub fn name(self) -> &'static str {
        match self {
            DirectIo::Off => "off",
            DirectIo::On => "on",
            DirectIo::Auto => "auto",
        }
    }
}

/// Smallest file `auto` reads with O_DIRECT: below it a file's reads are too few for
/// the request sizes to matter, and the cache may serve the next run.
pub const AUTO_MIN: u64 = 64 << 20;

/// Reads in flight per reader where a volume read mostly with O_DIRECT starts, unless
/// `--read-depth` says otherwise: without readahead each read is one request, and
/// devices that merge a few sequential requests gain nothing from a deep queue.
pub const DIRECT_DEPTH: usize = 4;

/// Files looked at together.
const THREADS: usize = 8;

/// Files and bytes to read with O_DIRECT.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Chosen {
    pub files: u64,
    pub bytes: u64,
}

/// Marks the files of `plan` to read with O_DIRECT (`ReadFile::direct`) as `mode` says.
/// `auto`: whole files of at least `AUTO_MIN` whose pages the page cache holds none of,
/// and none dirty (cachestat); a kernel without cachestat, or a file that cannot be
/// opened now (its read reports that), keeps the page cache.
pub fn choose(plan: &mut [ReadFile], mode: DirectIo) -> Chosen {
    match mode {
        DirectIo::Off => plan.iter_mut().for_each(|f| f.direct = false),
        DirectIo::On => plan.iter_mut().for_each(|f| f.direct = true),
        DirectIo::Auto => {
            let candidates: Vec<usize> = (0..plan.len())
                .filter(|&i| plan[i].size >= AUTO_MIN && plan[i].pages.is_none())
                .collect();
            let cold: Vec<AtomicBool> = candidates.iter().map(|_| AtomicBool::new(false)).collect();
            let files = &*plan;
            crate::par::each_index(candidates.len(), THREADS, |k| {
                let f = &files[candidates[k]];
                let open = OpenOptions::new()
                    .read(true)
                    .custom_flags(crate::sys::O_NOFOLLOW)
                    .open(&f.path);
                let Ok(h) = open else { return };
                if crate::sys::cached(&h).is_some_and(|c| c.pages == 0 && c.dirty == 0) {
                    cold[k].store(true, Relaxed);
                }
            });
            plan.iter_mut().for_each(|f| f.direct = false);
            for (k, &i) in candidates.iter().enumerate() {
                plan[i].direct = cold[k].load(Relaxed);
            }
        }
    }
    plan.iter()
        .filter(|f| f.direct)
        .fold(Chosen::default(), |c, f| Chosen {
            files: c.files + 1,
            bytes: c.bytes + f.size,
        })
}

/// Whether a volume's reads start at `DIRECT_DEPTH`: half its bytes or more are direct.
pub fn mostly_direct(plan: &[ReadFile], volume: usize) -> bool {
    let (mut direct, mut all) = (0u64, 0u64);
    for f in plan.iter().filter(|f| f.volume == volume) {
        all += f.size;
        if f.direct {
            direct += f.size;
        }
    }
    all > 0 && direct * 2 >= all
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn file(dir: &std::path::Path, name: &str, size: u64) -> ReadFile {
        let path = dir.join(name);
        let mut f = std::fs::File::create(&path).unwrap();
        let block = vec![7u8; 1 << 20];
        for _ in 0..size >> 20 {
            f.write_all(&block).unwrap();
        }
        f.sync_all().unwrap();
        ReadFile {
            id: 0,
            path,
            size,
            volume: 0,
            missing_ok: false,
            pages: None,
            direct: false,
        }
    }

    #[test]
    fn auto_reads_only_large_files_the_page_cache_holds_none_of_with_o_direct() {
        if crate::sys::cached(std::fs::File::open("/proc/self/exe").unwrap()).is_none() {
            eprintln!("skipped: the kernel has no cachestat");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let mut plan = vec![
            file(dir.path(), "cold", AUTO_MIN),
            file(dir.path(), "warm", AUTO_MIN),
            file(dir.path(), "small", 1 << 20),
        ];
        // Written and synced: every page is clean in the cache. Dropped: none is.
        for f in [&plan[0], &plan[2]] {
            let h = std::fs::File::open(&f.path).unwrap();
            crate::sys::fadvise(&h, 0, 0, crate::sys::Advice::DontNeed);
        }
        let cold = std::fs::File::open(&plan[0].path).unwrap();
        if crate::sys::cached(&cold).unwrap().pages != 0 {
            eprintln!("skipped: this file system keeps no page cache to drop");
            return;
        }
        let chosen = choose(&mut plan, DirectIo::Auto);
        assert_eq!(
            chosen,
            Chosen {
                files: 1,
                bytes: AUTO_MIN
            }
        );
        assert_eq!(
            plan.iter().map(|f| f.direct).collect::<Vec<_>>(),
            [true, false, false]
        );
        assert!(!mostly_direct(&plan, 0), "64 MiB of 129 is under half");
        plan[2].volume = 1;
        assert!(mostly_direct(&plan, 0), "64 MiB of 128 is half");

        // A sparse read (a differential's pages) keeps the cache's readahead asks.
        plan[0].pages = Some(Default::default());
        assert_eq!(choose(&mut plan, DirectIo::Auto).files, 0);
        assert_eq!(choose(&mut plan, DirectIo::On).files, 3);
        assert_eq!(choose(&mut plan, DirectIo::Off).files, 0);
        assert!(!mostly_direct(&plan, 0));
    }
}
