//! Which files are read with O_DIRECT. A large file none of whose pages is in the page
//! cache reads faster around it: the device takes whole transfers into buffers on huge
//! pages, in few segments, where buffered reads pay the page cache's copy and its
//! readahead's request sizes. A cached or changing file reads through the cache, which
//! holds it or is about to.

use super::ReadFile;

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

/// Smallest file `auto` reads with O_DIRECT: below it a file's reads are too few for
/// the request sizes to matter, and the cache may serve the next run.
pub const AUTO_MIN: u64 = 64 << 20;

/// Reads in flight per reader where a volume read mostly with O_DIRECT starts, unless
/// `--read-depth` says otherwise: without readahead each read is one request, and
/// devices that merge a few sequential requests gain nothing from a deep queue.
pub const DIRECT_DEPTH: usize = 4;

/// Files looked at together.
const THREADS: usize = 8;

/// Files and bytes to read with O_DIRECT, and large files found (almost) whole in the
/// page cache.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Chosen {
    pub files: u64,
    pub bytes: u64,
    pub cached_files: u64,
    pub cached_bytes: u64,
}

/// Where a large file's pages are, by cachestat when planned.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Residence {
    Unknown,
    /// No page in the page cache, none dirty.
    Cold,
    /// At least 15 of every 16 pages in the page cache.
    Cached,
}

/// Marks the files of `plan` to read with O_DIRECT (`ReadFile::direct`) as `mode` says,
/// and the large ones found in the page cache (`ReadFile::cached`). `auto`: whole
/// files of at least `AUTO_MIN` whose pages the page cache holds none of, and none
/// dirty (cachestat); a kernel without cachestat, or a file that cannot be opened now
/// (its read reports that), keeps the page cache.
pub fn choose(plan: &mut [ReadFile], mode: DirectIo) -> Chosen {
    let candidates: Vec<usize> = (0..plan.len())
        .filter(|&i| plan[i].size >= AUTO_MIN && plan[i].pages.is_none())
        .collect();
    let files = &*plan;
    let found = crate::par::map_index(candidates.len(), THREADS, |k| {
        let f = &files[candidates[k]];
        // As its read will open it: never through a link, never a FIFO.
        let open = super::read::open_for_read(&f.path.full(), false);
        match open.ok().and_then(crate::sys::cached) {
            None => Residence::Unknown,
            Some(c) if c.pages == 0 && c.dirty == 0 => Residence::Cold,
            Some(c) if c.pages * crate::sys::page_size() * 16 >= f.size * 15 => Residence::Cached,
            Some(_) => Residence::Unknown,
        }
    });
    for f in plan.iter_mut() {
        f.direct = mode == DirectIo::On;
        f.cached = false;
    }
    for (&i, &r) in candidates.iter().zip(&found) {
        plan[i].direct |= mode == DirectIo::Auto && r == Residence::Cold;
        plan[i].cached = r == Residence::Cached;
    }
    plan.iter().fold(Chosen::default(), |c, f| Chosen {
        files: c.files + f.direct as u64,
        bytes: c.bytes + if f.direct { f.size } else { 0 },
        cached_files: c.cached_files + f.cached as u64,
        cached_bytes: c.cached_bytes + if f.cached { f.size } else { 0 },
    })
}

/// Whether pool buffers go on huge pages: some file is read with O_DIRECT, in transfers
/// of 1 MiB or more (256 pages of 4 KiB: more than a request's segments on many
/// devices, so the read is split). Smaller transfers fit a request as they are, and a
/// huge page would hold little of them.
pub fn huge_pages(chosen: Chosen, transfer: usize) -> bool {
    chosen.files > 0 && transfer >= 1 << 20
}

/// How a volume is read, by where half its bytes or more are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mostly {
    /// Read with O_DIRECT: reads start at `DIRECT_DEPTH`.
    Direct,
    /// In the page cache: reads are copies, as many as the cores can make.
    Cached,
    /// Anything else: the buffered default.
    Buffered,
}

pub fn mostly(plan: &[ReadFile], volume: usize) -> Mostly {
    let (mut direct, mut cached, mut all) = (0u64, 0u64, 0u64);
    for f in plan.iter().filter(|f| f.volume == volume) {
        all += f.size;
        direct += if f.direct { f.size } else { 0 };
        cached += if f.cached { f.size } else { 0 };
    }
    if all > 0 && direct * 2 >= all {
        Mostly::Direct
    } else if all > 0 && cached * 2 >= all {
        Mostly::Cached
    } else {
        Mostly::Buffered
    }
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
        ReadFile::new(0, path, size, 0)
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
            let h = std::fs::File::open(f.path.full()).unwrap();
            crate::sys::fadvise(&h, 0, 0, crate::sys::Advice::DontNeed);
        }
        let cold = std::fs::File::open(plan[0].path.full()).unwrap();
        if crate::sys::cached(&cold).unwrap().pages != 0 {
            eprintln!("skipped: this file system keeps no page cache to drop");
            return;
        }
        let chosen = choose(&mut plan, DirectIo::Auto);
        assert_eq!(
            chosen,
            Chosen {
                files: 1,
                bytes: AUTO_MIN,
                cached_files: 1,
                cached_bytes: AUTO_MIN,
            }
        );
        assert!(
            plan[1].cached && !plan[0].cached && !plan[2].cached,
            "small: not looked at"
        );
        assert_eq!(
            plan.iter().map(|f| f.direct).collect::<Vec<_>>(),
            [true, false, false]
        );
        assert!(huge_pages(chosen, 1 << 20) && huge_pages(chosen, 16 << 20));
        assert!(
            !huge_pages(chosen, 512 << 10),
            "a small transfer fits a request as it is"
        );
        assert!(!huge_pages(Chosen::default(), 1 << 20));
        assert_eq!(
            mostly(&plan, 0),
            Mostly::Buffered,
            "64 MiB of 129 is under half"
        );
        plan[2].volume = 1;
        assert_eq!(mostly(&plan, 0), Mostly::Direct, "64 MiB of 128 is half");
        assert_eq!(mostly(&plan, 1), Mostly::Buffered);

        // A sparse read (a differential's pages) keeps the cache's readahead asks.
        plan[0].pages = Some(Default::default());
        assert_eq!(choose(&mut plan, DirectIo::Auto).files, 0);
        assert_eq!(choose(&mut plan, DirectIo::On).files, 3);
        let off = choose(&mut plan, DirectIo::Off);
        assert_eq!(
            (off.files, off.cached_files),
            (0, 1),
            "cached or not, whatever the mode"
        );
        assert_eq!(mostly(&plan, 0), Mostly::Cached);
    }
}
