//! WAL file names and LSNs (PostgreSQL's xlog_internal.h), for any segment size.

/// What kind of file PostgreSQL archives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `TTTTTTTTLLLLLLLLSSSSSSSS`: a complete WAL segment.
    Segment,
    /// `...SSSSSSSS.partial`: the last, incomplete segment of a timeline left at promotion.
    Partial,
    /// `TTTTTTTT.history`: a timeline history file.
    History,
    /// `...SSSSSSSS.OOOOOOOO.backup`: a backup history file written by pg_backup_stop.
    Backup,
}

impl Kind {
    pub fn code(self) -> u8 {
        match self {
            Kind::Segment => 1,
            Kind::Partial => 2,
            Kind::History => 3,
            Kind::Backup => 4,
        }
    }
    pub fn from_code(c: u8) -> Option<Kind> {
        Some(match c {
            1 => Kind::Segment,
            2 => Kind::Partial,
            3 => Kind::History,
            4 => Kind::Backup,
            _ => return None,
        })
    }
    pub fn is_segment(self) -> bool {
        matches!(self, Kind::Segment | Kind::Partial)
    }
}

/// A parsed WAL file name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WalName {
    pub kind: Kind,
    pub tli: u32,
    /// The "log" and "seg" parts of a segment name (0 for history files).
    pub log: u32,
    pub seg: u32,
}

pub(crate) fn hex_upper(s: &str) -> bool {
    s.bytes()
        .all(|b| b.is_ascii_digit() || (b'A'..=b'F').contains(&b))
}

pub(crate) fn hex32(s: &str) -> u32 {
    u32::from_str_radix(s, 16).unwrap_or(0)
}

/// Parses a name PostgreSQL gives to files it archives (upper-case hex, as it writes them).
pub fn parse_name(name: &str) -> Option<WalName> {
    let segment = |s: &str, kind| -> Option<WalName> {
        if s.len() != 24 || !hex_upper(s) {
            return None;
        }
        let tli = hex32(&s[0..8]);
        (tli != 0).then(|| WalName {
            kind,
            tli,
            log: hex32(&s[8..16]),
            seg: hex32(&s[16..24]),
        })
    };
    if !name.is_ascii() {
        return None;
    }
    match name.len() {
        24 => segment(name, Kind::Segment),
        32 => segment(name.strip_suffix(".partial")?, Kind::Partial),
        16 => {
            let t = name.strip_suffix(".history")?;
            if !hex_upper(t) || t.len() != 8 || hex32(t) == 0 {
                return None;
            }
            Some(WalName {
                kind: Kind::History,
                tli: hex32(t),
                log: 0,
                seg: 0,
            })
        }
        40 => {
            let rest = name.strip_suffix(".backup")?;
            let (seg, off) = (&rest[..24], &rest[24..]);
            let off = off.strip_prefix('.')?;
            if off.len() != 8 || !hex_upper(off) {
                return None;
            }
            segment(seg, Kind::Backup)
        }
        _ => None,
    }
}

/// The name of the WAL segment holding `lsn` on timeline `tli` (PostgreSQL's
/// XLByteToSeg + XLogFileName). `seg_size` is the cluster's WAL segment size
/// (16 MiB by default), a power of two.
pub fn segment_name(tli: u32, lsn: u64, seg_size: u64) -> String {
    assert!(seg_size.is_power_of_two(), "WAL segment size {seg_size}");
    segment_name_for(tli, lsn / seg_size, seg_size)
}

/// The segment holding the byte before `lsn`, as pg_walfile_name names it
/// (XLByteToPrevSeg: an LSN on a segment boundary is the end of the one before).
pub fn walfile_name(tli: u32, lsn: u64, seg_size: u64) -> String {
    segment_name_for(tli, lsn.saturating_sub(1) / seg_size, seg_size)
}

/// The name of segment number `segno` (XLogFileName).
pub fn segment_name_for(tli: u32, segno: u64, seg_size: u64) -> String {
    let per_id = 0x1_0000_0000 / seg_size;
    format!(
        "{tli:08X}{:08X}{:08X}",
        (segno / per_id) as u32,
        (segno % per_id) as u32
    )
}

/// Timeline and segment number of a segment name (XLogFromFileName), or None when it
/// is not a name PostgreSQL would give a segment of `seg_size` bytes.
pub fn parse_segment_name(name: &str, seg_size: u64) -> Option<(u32, u64)> {
    let n = parse_name(name)?;
    if !n.kind.is_segment() || !valid_seg_size(seg_size) {
        return None;
    }
    let per_id = 0x1_0000_0000 / seg_size;
    if n.seg as u64 >= per_id {
        return None;
    }
    Some((n.tli, n.log as u64 * per_id + n.seg as u64))
}

/// Parses an LSN as PostgreSQL prints it (`16/B374D848`).
pub fn parse_lsn(s: &str) -> Option<u64> {
    let (hi, lo) = s.trim().split_once('/')?;
    if hi.is_empty() || lo.is_empty() || hi.len() > 8 || lo.len() > 8 {
        return None;
    }
    let hi = u32::from_str_radix(hi, 16).ok()?;
    let lo = u32::from_str_radix(lo, 16).ok()?;
    Some(((hi as u64) << 32) | lo as u64)
}

/// Formats an LSN as PostgreSQL does.
pub fn format_lsn(lsn: u64) -> String {
    format!("{:X}/{:X}", lsn >> 32, lsn as u32)
}

/// A WAL segment size initdb allows (`--wal-segsize`): a power of two from 1 MiB to 1 GiB.
pub fn valid_seg_size(s: u64) -> bool {
    s.is_power_of_two() && (super::WAL_SEG_MIN..=super::WAL_SEG_MAX).contains(&s)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEG: u64 = 16 << 20;

    #[test]
    fn pg_walfile_name_takes_the_segment_before_a_boundary() {
        assert_eq!(
            walfile_name(1, 0x0300_0028, SEG),
            "000000010000000000000003"
        );
        assert_eq!(
            walfile_name(1, 0x0400_0000, SEG),
            "000000010000000000000003"
        );
        assert_eq!(
            walfile_name(2, 0x0400_0001, SEG),
            "000000020000000000000004"
        );
    }

    #[test]
    fn names() {
        for (tli, lsn, seg, name) in [
            (1, 0x0300_0028, SEG, "000000010000000000000003"),
            (1, 0x1_0000_0000, SEG, "000000010000000100000000"),
            (2, 0x1_FF00_0000, SEG, "0000000200000001000000FF"),
            (0x1A, 0x16_B374_D848, SEG, "0000001A00000016000000B3"),
            // 64 MiB segments: 64 per "log" id.
            (1, 0x1_4000_0000, 64 << 20, "000000010000000100000010"),
        ] {
            assert_eq!(segment_name(tli, lsn, seg), name);
        }
        assert_eq!(segment_name(3, 0, 1 << 30), "000000030000000000000000");
        for lsn in [
            0u64,
            0x0300_0028,
            0x1_0000_0000,
            0x16_B374_D848,
            u64::MAX >> 1,
        ] {
            for ss in [1u64 << 20, SEG, 64 << 20, 1 << 30] {
                let n = segment_name(7, lsn, ss);
                assert_eq!(parse_segment_name(&n, ss), Some((7, lsn / ss)));
            }
        }
        assert_eq!(parse_segment_name("000000010000000000000100", SEG), None);
        assert_eq!(parse_segment_name("00000001000000000000000a", SEG), None);
        assert_eq!(parse_lsn("16/B374D848"), Some(0x16_B374_D848));
        assert_eq!(parse_lsn("0/3000028"), Some(0x0300_0028));
        assert_eq!(parse_lsn("0/"), None);
        assert_eq!(parse_lsn("x/1"), None);
        assert_eq!(format_lsn(0x16_B374_D848), "16/B374D848");
        let k = |n: &str| parse_name(n).map(|w| w.kind);
        assert_eq!(k("000000010000000000000003"), Some(Kind::Segment));
        assert_eq!(k("000000010000000000000003.partial"), Some(Kind::Partial));
        assert_eq!(k("00000002.history"), Some(Kind::History));
        assert_eq!(
            k("000000010000000000000002.00000028.backup"),
            Some(Kind::Backup)
        );
        for bad in [
            "",
            "00000000.history",
            "000000000000000000000003",
            "000000010000000000000003.zst",
            "../../etc/passwd",
            "0000000100000000000000g3",
            "000000010000000000000002.0000002.backup",
        ] {
            assert_eq!(parse_name(bad), None, "{bad}");
        }
    }
}
