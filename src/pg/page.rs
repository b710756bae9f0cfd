//! PostgreSQL's page format, as far as backup needs it: the page LSN, the
//! "new page" test and the data checksum (FNV-1a variant over 32 lanes; see
//! PostgreSQL's storage/checksum_impl.h for the algorithm this implements).

pub const BLCKSZ: usize = 8192;
/// Blocks per relation segment file (1 GiB / 8 KiB).
pub const RELSEG_SIZE: u32 = 131072;

const N_SUMS: usize = 32;
const FNV_PRIME: u32 = 16777619;
const BASE_OFFSETS: [u32; N_SUMS] = [
    0x5B1F36E9, 0xB8525960, 0x02AB50AA, 0x1DE66D2A, 0x79FF467A, 0x9BB9F8A3, 0x217E7CD2, 0x83E13D2C,
    0xF8D4474F, 0xE39EB970, 0x42C6AE16, 0x993216FA, 0x7B093B5D, 0x98DAFF3C, 0xF718902A, 0x0B1C9CDB,
    0xE58F764B, 0x187636BC, 0x5D7B3BB1, 0xE73DE7DE, 0x92BEC979, 0xCCA6C0B2, 0x304A0979, 0x85AA43D4,
    0x783125BB, 0x6CA8EAA2, 0xE407EAC6, 0x4B5CFC3E, 0x9FBF8C76, 0x15CA20BE, 0xF2CA9FD3, 0x959BD756,
];

#[inline(always)]
fn comp(sum: &mut u32, value: u32) {
    let t = *sum ^ value;
    *sum = t.wrapping_mul(FNV_PRIME) ^ (t >> 17);
}

/// One 128-byte row of the page into the 32 lanes. Fixed-size arrays so that the
/// compiler turns the lanes into vector registers.
#[inline(always)]
fn comp_row(sums: &mut [u32; N_SUMS], row: &[u8; 4 * N_SUMS]) {
    let mut vals = [0u32; N_SUMS];
    for (v, b) in vals.iter_mut().zip(row.chunks_exact(4)) {
        *v = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    }
    for (sum, v) in sums.iter_mut().zip(vals) {
        comp(sum, v);
    }
}

#[inline(always)]
fn checksum_lanes(page: &[u8], blkno: u32) -> u16 {
    let page: &[u8; BLCKSZ] = page.try_into().expect("a page is BLCKSZ bytes");
    let mut sums = BASE_OFFSETS;
    // pd_checksum (bytes 8..10) counts as zero.
    let mut first: [u8; 4 * N_SUMS] = page[..4 * N_SUMS].try_into().unwrap();
    first[8..10].fill(0);
    comp_row(&mut sums, &first);
    for row in page[4 * N_SUMS..].chunks_exact(4 * N_SUMS) {
        comp_row(&mut sums, row.try_into().unwrap());
    }
    for _ in 0..2 {
        for sum in sums.iter_mut() {
            comp(sum, 0);
        }
    }
    let folded = sums.iter().fold(0u32, |a, s| a ^ s) ^ blkno;
    ((folded % 65535) + 1) as u16
}

/// The same code built for AVX2: 32-bit lane multiplies need more than the SSE2 that
/// x86-64 builds assume, and the scalar loop was 40% of a backup's CPU.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn checksum_avx2(page: &[u8], blkno: u32) -> u16 {
    checksum_lanes(page, blkno)
}

/// The checksum PostgreSQL stores in pd_checksum for `page` at block `blkno`.
pub fn checksum(page: &[u8], blkno: u32) -> u16 {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2.
        return unsafe { checksum_avx2(page, blkno) };
    }
    checksum_lanes(page, blkno)
}

pub fn stored_checksum(page: &[u8]) -> u16 {
    u16::from_le_bytes([page[8], page[9]])
}

/// The LSN of the last change to the page.
pub fn lsn(page: &[u8]) -> u64 {
    let hi = u32::from_le_bytes(page[0..4].try_into().unwrap()) as u64;
    let lo = u32::from_le_bytes(page[4..8].try_into().unwrap()) as u64;
    (hi << 32) | lo
}

/// A page never initialized (pd_upper == 0): PostgreSQL does not checksum it.
pub fn is_new(page: &[u8]) -> bool {
    u16::from_le_bytes([page[14], page[15]]) == 0
}

/// True for relation data files (`1234`, `1234_fsm`, `1234.7`): the files with pages
/// and checksums. `rel_path` is the path inside the data directory.
pub fn is_relation_file(rel_path: &str) -> bool {
    let in_rel_dir = rel_path.starts_with("base/")
        || rel_path.starts_with("global/")
        || rel_path.starts_with("pg_tblspc/");
    if !in_rel_dir {
        return false;
    }
    let name = rel_path.rsplit('/').next().unwrap_or("");
    let (stem, seg) = match name.split_once('.') {
        Some((s, g)) => (s, Some(g)),
        None => (name, None),
    };
    let (node, fork) = match stem.split_once('_') {
        Some((n, f)) => (n, Some(f)),
        None => (stem, None),
    };
    !node.is_empty()
        && node.bytes().all(|c| c.is_ascii_digit())
        && fork.is_none_or(|f| matches!(f, "fsm" | "vm" | "init"))
        && seg.is_none_or(|g| !g.is_empty() && g.bytes().all(|c| c.is_ascii_digit()))
}

/// The segment number of a relation file (`1234.7` -> 7).
pub fn segment_number(rel_path: &str) -> u32 {
    rel_path
        .rsplit('/')
        .next()
        .and_then(|n| n.split_once('.'))
        .and_then(|(_, s)| s.parse().ok())
        .unwrap_or(0)
}

/// pg_default's OID: relations under `base/`.
pub const DEFAULT_TABLESPACE: u32 = 1663;
/// pg_global's OID: shared relations under `global/` (database 0).
pub const GLOBAL_TABLESPACE: u32 = 1664;

/// Fork numbers, as WAL block references name them.
pub const MAIN_FORK: u8 = 0;
pub const FSM_FORK: u8 = 1;
pub const VM_FORK: u8 = 2;
pub const INIT_FORK: u8 = 3;

/// Which relation fork, and which 1 GiB segment of it, a data directory path holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RelPath {
    pub spc: u32,
    pub db: u32,
    pub rel: u32,
    pub fork: u8,
    pub segno: u32,
}

impl RelPath {
    /// `base/DB/REL[_fork][.seg]`, `global/REL...` or
    /// `pg_tblspc/SPC/PG_VERSION_CATALOG/DB/REL...`; None for any other path.
    pub fn parse(rel_path: &str) -> Option<RelPath> {
        if !is_relation_file(rel_path) {
            return None;
        }
        let parts: Vec<&str> = rel_path.split('/').collect();
        let num = |s: &str| s.parse::<u32>().ok();
        let (spc, db, name) = match parts.as_slice() {
            ["base", db, name] => (DEFAULT_TABLESPACE, num(db)?, *name),
            ["global", name] => (GLOBAL_TABLESPACE, 0, *name),
            ["pg_tblspc", spc, v, db, name] if v.starts_with("PG_") => (num(spc)?, num(db)?, *name),
            _ => return None,
        };
        let stem = name.split('.').next()?;
        let (node, fork) = match stem.split_once('_') {
            None => (stem, MAIN_FORK),
            Some((n, "fsm")) => (n, FSM_FORK),
            Some((n, "vm")) => (n, VM_FORK),
            Some((n, "init")) => (n, INIT_FORK),
            Some(_) => return None,
        };
        Some(RelPath {
            spc,
            db,
            rel: num(node)?,
            fork,
            segno: segment_number(rel_path),
        })
    }

    /// The first block of the relation this segment file holds.
    pub fn first_block(&self) -> u32 {
        self.segno.saturating_mul(RELSEG_SIZE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relation_paths_name_their_fork_and_segment() {
        let p = |s: &str| RelPath::parse(s).map(|r| (r.spc, r.db, r.rel, r.fork, r.segno));
        assert_eq!(p("base/5/16384"), Some((1663, 5, 16384, 0, 0)));
        assert_eq!(p("base/5/16384.3"), Some((1663, 5, 16384, 0, 3)));
        assert_eq!(p("base/5/16384_vm"), Some((1663, 5, 16384, 2, 0)));
        assert_eq!(p("global/1262_fsm.1"), Some((1664, 0, 1262, 1, 1)));
        assert_eq!(
            p("pg_tblspc/16390/PG_15_202209061/5/16391_init"),
            Some((16390, 5, 16391, 3, 0))
        );
        for bad in [
            "base/5/PG_VERSION",
            "base/x/1",
            "pg_tblspc/1/other/5/7",
            "global/pg_control",
        ] {
            assert_eq!(p(bad), None, "{bad}");
        }
        assert_eq!(
            RelPath::parse("base/5/1.2").unwrap().first_block(),
            2 * RELSEG_SIZE
        );
    }

    #[test]
    fn relation_files() {
        for p in [
            "base/1/1259",
            "base/16384/2608_fsm",
            "global/1262.3",
            "pg_tblspc/16390/PG_15_202209061/5/16391_vm",
        ] {
            assert!(is_relation_file(p), "{p}");
        }
        for p in [
            "base/1/PG_VERSION",
            "global/pg_control",
            "global/pg_filenode.map",
            "pg_wal/000000010000000000000001",
            "base/1/1259_xyz",
            "base/1/12.",
            "postgresql.conf",
        ] {
            assert!(!is_relation_file(p), "{p}");
        }
        assert_eq!(segment_number("base/1/1259.12"), 12);
    }

    /// PostgreSQL's loop as written in checksum_impl.h, word by word.
    fn reference(page: &[u8], blkno: u32) -> u16 {
        let mut sums = BASE_OFFSETS;
        for i in 0..BLCKSZ / (4 * N_SUMS) {
            for (j, sum) in sums.iter_mut().enumerate() {
                let at = (i * N_SUMS + j) * 4;
                let mut v = u32::from_le_bytes(page[at..at + 4].try_into().unwrap());
                if at == 8 {
                    v &= 0xFFFF_0000;
                }
                comp(sum, v);
            }
        }
        for _ in 0..2 {
            for sum in sums.iter_mut() {
                comp(sum, 0);
            }
        }
        let folded = sums.iter().fold(0u32, |a, s| a ^ s) ^ blkno;
        ((folded % 65535) + 1) as u16
    }

    #[test]
    fn fast_checksum_matches_the_reference_loop() {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut page = vec![0u8; BLCKSZ];
        for blkno in 0..200u32 {
            for b in page.iter_mut() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                *b = x as u8;
            }
            assert_eq!(
                checksum(&page, blkno),
                reference(&page, blkno),
                "block {blkno}"
            );
            assert_eq!(checksum_lanes(&page, blkno), reference(&page, blkno));
        }
    }

    #[test]
    fn checksum_depends_on_block_and_content_but_not_on_its_own_field() {
        let mut page = vec![0u8; BLCKSZ];
        page[14] = 0x20; // pd_upper
        for (i, b) in page.iter_mut().enumerate().skip(24) {
            *b = (i * 7) as u8;
        }
        let c = checksum(&page, 3);
        page[8] = 0xAB;
        page[9] = 0xCD;
        assert_eq!(
            checksum(&page, 3),
            c,
            "pd_checksum must not feed the checksum"
        );
        assert_ne!(checksum(&page, 4), c);
        page[5000] ^= 1;
        assert_ne!(checksum(&page, 3), c);
        assert!(c >= 1);
    }
}
