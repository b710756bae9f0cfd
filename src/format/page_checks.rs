//! Page checks: the CRC32C of each page of a plain set's uncompressed Data frame, kept in
//! the frame's padding when they fit, so that a restore reading only some of its pages
//! (`--delta wal`) checks each page it reads.
//!
//! ```text
//!  0  magic "PVPC"                     4
//!  4  pages n u32 (ceil(raw / page))   4
//!  8  CRC32C of page i, i < n          4n   (the last page: its bytes within the raw length)
//!  .  CRC32C of the frame's 80-byte header, then bytes 0..8+4n   4
//! ```
//!
//! The closing CRC binds the table to its frame: a table moved to another frame fails.
//! Readers older than the table never read a frame's padding.

use super::{get_u32, put_u32};

pub const MAGIC: &[u8; 4] = b"PVPC";

/// The table's length for `raw_len` bytes of `page`-byte pages.
pub fn len(raw_len: usize, page: usize) -> usize {
    12 + 4 * raw_len.div_ceil(page)
}

/// Writes the table of `raw` (its frame's encoded `header`) at the start of `pad` when it
/// fits there; returns whether it did.
pub fn write(header: &[u8], raw: &[u8], page: usize, pad: &mut [u8]) -> bool {
    let n = len(raw.len(), page);
    if raw.is_empty() || page == 0 || pad.len() < n {
        return false;
    }
    let t = &mut pad[..n];
    t[..4].copy_from_slice(MAGIC);
    put_u32(t, 4, raw.len().div_ceil(page) as u32);
    for (i, p) in raw.chunks(page).enumerate() {
        put_u32(t, 8 + 4 * i, crc32c::crc32c(p));
    }
    let bind = crc32c::crc32c_append(crc32c::crc32c(header), &t[..n - 4]);
    put_u32(t, n - 4, bind);
    true
}

/// The page CRCs in `region` (the frame's padding, at least `len(raw_len, page)` bytes of
/// it) for the frame whose encoded header is `header`: None when it holds no table (a set
/// written before them); an error when it holds a damaged one.
pub fn read(
    header: &[u8],
    raw_len: usize,
    page: usize,
    region: &[u8],
) -> Result<Option<Vec<u32>>, String> {
    let n = len(raw_len, page);
    if region.len() < 4 || &region[..4] != MAGIC {
        return Ok(None);
    }
    if region.len() < n {
        return Err(format!(
            "its page checks run past its padding ({n} bytes in {})",
            region.len()
        ));
    }
    let t = &region[..n];
    let pages = get_u32(t, 4) as usize;
    if pages != raw_len.div_ceil(page) {
        return Err(format!(
            "its page checks count {pages} pages of {} bytes",
            raw_len
        ));
    }
    let bind = crc32c::crc32c_append(crc32c::crc32c(header), &t[..n - 4]);
    if bind != get_u32(t, n - 4) {
        return Err(
            "its page checks are damaged or belong to another frame (their CRC32C does not match)"
                .into(),
        );
    }
    Ok(Some((0..pages).map(|i| get_u32(t, 8 + 4 * i)).collect()))
}

/// The first page of `bytes` (pages `first..` of the frame, the last one possibly short)
/// whose CRC32C is not the table's.
pub fn first_bad(checks: &[u32], first: usize, bytes: &[u8], page: usize) -> Option<usize> {
    bytes
        .chunks(page)
        .enumerate()
        .find(|(i, p)| checks.get(first + i) != Some(&crc32c::crc32c(p)))
        .map(|(i, _)| first + i)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(raw: &[u8]) -> ([u8; 80], Vec<u8>) {
        let mut h = [0u8; 80];
        h[..4].copy_from_slice(b"PVFR");
        h[8] = 7;
        let mut pad = vec![0u8; 4016];
        assert!(write(&h, raw, 8192, &mut pad));
        (h, pad)
    }

    #[test]
    fn a_table_reads_back_and_checks_each_page() {
        let raw: Vec<u8> = (0..8192 * 3 + 100).map(|i| (i * 7 % 251) as u8).collect();
        let (h, pad) = frame(&raw);
        let checks = read(&h, raw.len(), 8192, &pad).unwrap().unwrap();
        assert_eq!(checks.len(), 4);
        assert_eq!(first_bad(&checks, 0, &raw, 8192), None);
        assert_eq!(first_bad(&checks, 1, &raw[8192..8192 * 3], 8192), None);
        let mut bad = raw.clone();
        bad[8192 * 2 + 5] ^= 1;
        assert_eq!(first_bad(&checks, 0, &bad, 8192), Some(2));
        assert_eq!(first_bad(&checks, 3, &bad[8192 * 3..], 8192), None);
    }

    #[test]
    fn a_damaged_moved_or_absent_table_is_told() {
        let raw = vec![3u8; 8192 * 2];
        let (h, mut pad) = frame(&raw);
        assert!(read(&h, raw.len(), 8192, &[0u8; 4016]).unwrap().is_none());
        let mut other = h;
        other[8] = 8;
        assert!(read(&other, raw.len(), 8192, &pad)
            .unwrap_err()
            .contains("another frame"));
        assert!(read(&h, raw.len() + 8192, 8192, &pad)
            .unwrap_err()
            .contains("count 2 pages"));
        pad[9] ^= 1;
        assert!(read(&h, raw.len(), 8192, &pad).is_err());
        assert!(read(&h, raw.len(), 8192, &pad[..10]).is_err());
    }

    #[test]
    fn a_table_too_large_for_the_padding_is_not_written() {
        let raw = vec![1u8; 8192 * 2000];
        assert!(!write(&[0u8; 80], &raw, 8192, &mut [0u8; 4016]));
    }
}
