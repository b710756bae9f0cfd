//! WAL page headers (PostgreSQL's xlog_internal.h): the checks a segment passes before
//! it is archived, so a truncated, recycled, misnamed or foreign file never is.

use super::{format_lsn, segment_name, valid_seg_size, WalName};

pub const XLP_LONG_HEADER: u16 = 0x0002;
const XLP_ALL_FLAGS: u16 = 0x0007;
/// sizeof(XLogPageHeaderData) after MAXALIGN, and of the long variant.
pub const SHORT_PHD: usize = 24;
pub const LONG_PHD: usize = 40;

pub(super) fn get_u16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}
pub(super) fn get_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}
pub(super) fn get_u64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

/// What the first page of a segment says about it.
#[derive(Debug, Clone, Copy)]
pub struct SegInfo {
    pub magic: u16,
    pub sysid: u64,
    pub blcksz: u64,
    pub seg_start: u64,
    pub name_tli: u32,
}

/// Checks the long page header of a segment's first page against the file's name and
/// size. The error says what is wrong, for "'PATH' is not a valid WAL segment: ...".
pub fn check_first_page(name: &str, n: &WalName, len: u64, page: &[u8]) -> Result<SegInfo, String> {
    if page.len() < LONG_PHD {
        return Err(format!(
            "it is only {len} bytes (a WAL segment is 16 MiB unless initdb chose another size)"
        ));
    }
    let magic = get_u16(page, 0);
    if super::version_of_wal_magic(magic).is_none() {
        return Err(super::unknown_wal_magic(magic));
    }
    let info = get_u16(page, 2);
    if info & !XLP_ALL_FLAGS != 0 || info & XLP_LONG_HEADER == 0 {
        return Err(format!(
            "its first page has flags 0x{info:04X}, not a segment's first page (long header)"
        ));
    }
    let tli = get_u32(page, 4);
    let pageaddr = get_u64(page, 8);
    let sysid = get_u64(page, 24);
    let seg_size = get_u32(page, 32) as u64;
    let blcksz = get_u32(page, 36) as u64;
    if !valid_seg_size(seg_size) {
        return Err(format!(
            "its first page gives a segment size of {seg_size} bytes, which PostgreSQL never uses"
        ));
    }
    if !blcksz.is_power_of_two()
        || !(super::WAL_BLCKSZ_MIN..=super::WAL_BLCKSZ_MAX).contains(&blcksz)
    {
        return Err(format!(
            "its first page gives a WAL block size of {blcksz} bytes, which PostgreSQL never uses"
        ));
    }
    if len != seg_size {
        let how = if len < seg_size {
            "truncated"
        } else {
            "too long"
        };
        return Err(format!(
            "it is {how}: {len} bytes, but its first page says segments are {seg_size} bytes"
        ));
    }
    let per_id = 0x1_0000_0000 / seg_size;
    if n.seg as u64 >= per_id {
        return Err(format!(
            "its name is not one PostgreSQL gives a segment of {} MiB (last part {:08X} must be \
             below {per_id:08X})",
            seg_size >> 20,
            n.seg
        ));
    }
    let seg_start = (n.log as u64 * per_id + n.seg as u64) * seg_size;
    if pageaddr != seg_start {
        let holds = if pageaddr.is_multiple_of(seg_size) {
            format!(
                ", which belongs in file {}",
                segment_name(n.tli, pageaddr, seg_size)
            )
        } else {
            String::new()
        };
        return Err(format!(
            "its first page is for WAL position {}{holds}, but the file is named {name} (position {})",
            format_lsn(pageaddr),
            format_lsn(seg_start)
        ));
    }
    // The first page of a new timeline's first segment was copied from the old
    // timeline, so its header may carry an older timeline, never a newer one.
    if tli == 0 || tli > n.tli {
        return Err(format!(
            "its first page is from timeline {tli}, but its name says timeline {}",
            n.tli
        ));
    }
    Ok(SegInfo {
        magic,
        sysid,
        blcksz,
        seg_start,
        name_tli: n.tli,
    })
}

/// Checks the header of page `off / blcksz` (not the first) of a complete segment:
/// either zeroed (the tail after pg_switch_wal) or a page of this segment.
pub fn check_page(s: &SegInfo, off: u64, h: &[u8]) -> Result<(), String> {
    if h[..SHORT_PHD].iter().all(|&b| b == 0) {
        return Ok(());
    }
    let page = off / s.blcksz;
    let magic = get_u16(h, 0);
    if magic != s.magic {
        return Err(format!(
            "page {page} (offset {off}) has magic 0x{magic:04X}, the first page 0x{:04X}",
            s.magic
        ));
    }
    let info = get_u16(h, 2);
    if info & !XLP_ALL_FLAGS != 0 || info & XLP_LONG_HEADER != 0 {
        return Err(format!("page {page} (offset {off}) has flags 0x{info:04X}"));
    }
    let tli = get_u32(h, 4);
    if tli == 0 || tli > s.name_tli {
        return Err(format!(
            "page {page} (offset {off}) is from timeline {tli}, but the file is of timeline {}",
            s.name_tli
        ));
    }
    let addr = get_u64(h, 8);
    if addr != s.seg_start + off {
        return Err(format!(
            "page {page} (offset {off}) is for WAL position {} instead of {} \
             (a stale page of a recycled segment?)",
            format_lsn(addr),
            format_lsn(s.seg_start + off)
        ));
    }
    Ok(())
}

/// The head of segment `name` while the server still writes it (`bytes`, read from
/// pg_wal up to at least `upto`): its first page checked as [`check_first_page`], every
/// later page before `upto` written and of this segment ([`check_page`]), and every byte
/// from `upto` on zeroed, so that a walk of it ends at `upto` (a record boundary: the
/// redo point of a checkpoint). `bytes` becomes a whole segment.
pub fn live_head(name: &str, bytes: &mut Vec<u8>, upto: u64) -> Result<SegInfo, String> {
    let n = super::parse_name(name).ok_or_else(|| format!("'{name}' is not a segment name"))?;
    let first = bytes.get(..LONG_PHD).unwrap_or(bytes);
    let seg_size = if first.len() >= LONG_PHD {
        get_u32(first, 32) as u64
    } else {
        0
    };
    let s = check_first_page(name, &n, seg_size, first)?;
    if upto < s.seg_start + LONG_PHD as u64 || upto >= s.seg_start + seg_size {
        return Err(format!("{} is not inside segment {name}", format_lsn(upto)));
    }
    let end = (upto - s.seg_start) as usize;
    if bytes.len() < end {
        return Err(format!(
            "only {} bytes of {name} could be read, {end} were wanted",
            bytes.len()
        ));
    }
    let mut off = s.blcksz;
    while off < end as u64 {
        let h = &bytes[off as usize..off as usize + SHORT_PHD];
        if h.iter().all(|&b| b == 0) {
            return Err(format!(
                "page {} of {name} (before {}) is not written yet",
                off / s.blcksz,
                format_lsn(upto)
            ));
        }
        check_page(&s, off, h)?;
        off += s.blcksz;
    }
    bytes.truncate(end);
    bytes.resize(seg_size as usize, 0);
    Ok(s)
}
