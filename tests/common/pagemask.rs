//! PostgreSQL's page masks, as wal_consistency_checking applies them
//! (src/backend/access/common/bufmask.c, heapam.c heap_mask, nbtxlog.c btree_mask):
//! two copies of a page that WAL replay may leave different only in hints compare
//! equal once masked. Nothing is masked that PostgreSQL does not mask; a visibility-map
//! page is masked less (its LSN and checksum only: its bits must be equal).
#![allow(dead_code)]

pub const BLCKSZ: usize = 8192;
/// SizeOfPageHeaderData.
const HEADER: usize = 24;
const PD_HAS_FREE_LINES: u16 = 0x1;
const PD_PAGE_FULL: u16 = 0x2;
const PD_ALL_VISIBLE: u16 = 0x4;
const LP_UNUSED: u32 = 0;
const LP_NORMAL: u32 = 1;
/// t_infomask bits.
const HEAP_XMIN_COMMITTED: u16 = 0x0100;
const HEAP_XMIN_INVALID: u16 = 0x0200;
const HEAP_XMIN_FROZEN: u16 = HEAP_XMIN_COMMITTED | HEAP_XMIN_INVALID;
const HEAP_XMAX_COMMITTED: u16 = 0x0400;
const HEAP_XMAX_INVALID: u16 = 0x0800;
const HEAP_XACT_MASK: u16 = 0xFFF0;
/// HeapTupleHeaderData: t_cid (t_field3) at 8, t_ctid at 12, t_infomask at 20.
const T_CID: usize = 8;
const T_CTID: usize = 12;
const T_INFOMASK: usize = 20;
const SPEC_TOKEN_OFFSET: u16 = 0xfffe;
/// BTPageOpaqueData at pd_special: prev, next, level (u32 each), flags, cycle id.
const BTP_LEAF: u16 = 1 << 0;
const BTP_SPLIT_END: u16 = 1 << 5;
const BTP_HAS_GARBAGE: u16 = 1 << 6;
const BT_OPAQUE: usize = 16;
const MAXALIGN: usize = 8;
/// Heap blocks a visibility-map page covers (two bits each after the header).
pub const HEAPBLOCKS_PER_VM_PAGE: u32 = ((BLCKSZ - HEADER) * 4) as u32;

/// What a relation fork's pages are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Heap,
    Btree,
    VisibilityMap,
    /// Anything else: its LSN and checksum masked only.
    Other,
}

fn u16_at(p: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([p[at], p[at + 1]])
}

fn put_u16(p: &mut [u8], at: usize, v: u16) {
    p[at..at + 2].copy_from_slice(&v.to_le_bytes());
}

fn u32_at(p: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(p[at..at + 4].try_into().unwrap())
}

/// PageIsNew: pd_upper is zero (a page extended but never initialized).
pub fn page_is_new(p: &[u8]) -> bool {
    u16_at(p, 14) == 0
}

/// mask_page_lsn_and_checksum.
pub fn mask_lsn_and_checksum(p: &mut [u8]) {
    p[0..10].fill(0);
}

/// mask_page_hint_bits: pd_prune_xid, PD_PAGE_FULL, PD_HAS_FREE_LINES, PD_ALL_VISIBLE.
pub fn mask_hint_bits(p: &mut [u8]) {
    p[20..24].fill(0);
    let flags = u16_at(p, 10) & !(PD_HAS_FREE_LINES | PD_PAGE_FULL | PD_ALL_VISIBLE);
    put_u16(p, 10, flags);
}

/// pd_lower, pd_upper and pd_special when they make sense (bufmask.c's check; where
/// PostgreSQL would raise an error, nothing more is masked).
fn bounds(p: &[u8]) -> Option<(usize, usize, usize)> {
    let (lower, upper, special) = (
        u16_at(p, 12) as usize,
        u16_at(p, 14) as usize,
        u16_at(p, 16) as usize,
    );
    let bad = lower > upper || special < upper || lower < HEADER || special > BLCKSZ;
    (!bad).then_some((lower, upper, special))
}

/// mask_unused_space: the hole between pd_lower and pd_upper.
fn mask_unused_space(p: &mut [u8]) -> bool {
    match bounds(p) {
        Some((lower, upper, _)) => {
            p[lower..upper].fill(0);
            true
        }
        None => false,
    }
}

/// PageGetMaxOffsetNumber.
fn max_offset(p: &[u8]) -> usize {
    let lower = u16_at(p, 12) as usize;
    if lower <= HEADER {
        0
    } else {
        (lower - HEADER) / 4
    }
}

/// Line pointer `off` (from 1): lp_off, lp_flags, lp_len.
fn item(p: &[u8], off: usize) -> (usize, u32, usize) {
    let w = u32_at(p, HEADER + 4 * (off - 1));
    ((w & 0x7fff) as usize, (w >> 15) & 3, (w >> 17) as usize)
}

/// heap_mask.
pub fn heap_mask(p: &mut [u8], blkno: u32) {
    mask_lsn_and_checksum(p);
    mask_hint_bits(p);
    if !mask_unused_space(p) {
        return;
    }
    for off in 1..=max_offset(p) {
        let (at, flags, len) = item(p, off);
        if flags == LP_NORMAL && at + T_INFOMASK + 2 <= BLCKSZ {
            let mut infomask = u16_at(p, at + T_INFOMASK);
            if infomask & HEAP_XMIN_FROZEN != HEAP_XMIN_FROZEN {
                // Hint bits of a tuple whose xmin is not frozen are set without WAL.
                infomask &= !HEAP_XACT_MASK;
            } else {
                infomask &= !(HEAP_XMAX_INVALID | HEAP_XMAX_COMMITTED);
            }
            put_u16(p, at + T_INFOMASK, infomask);
            // Replay sets the command id to FirstCommandId.
            p[at + T_CID..at + T_CID + 4].fill(0);
            // A speculative insertion's token is never logged: redo sets ctid to itself.
            if u16_at(p, at + T_CTID + 4) == SPEC_TOKEN_OFFSET {
                put_u16(p, at + T_CTID, (blkno >> 16) as u16);
                put_u16(p, at + T_CTID + 2, blkno as u16);
                put_u16(p, at + T_CTID + 4, off as u16);
            }
        }
        // Padding after an item whose length is not MAXALIGNed.
        if len > 0 {
            let pad = len.next_multiple_of(MAXALIGN) - len;
            let from = (at + len).min(BLCKSZ);
            p[from..(from + pad).min(BLCKSZ)].fill(0);
        }
    }
}

/// mask_lp_flags: every used line pointer's flags read as LP_UNUSED.
fn mask_lp_flags(p: &mut [u8]) {
    for off in 1..=max_offset(p) {
        let at = HEADER + 4 * (off - 1);
        let w = u32_at(p, at);
        if (w >> 15) & 3 != LP_UNUSED {
            p[at..at + 4].copy_from_slice(&(w & !(3 << 15)).to_le_bytes());
        }
    }
}

/// btree_mask.
pub fn btree_mask(p: &mut [u8]) {
    mask_lsn_and_checksum(p);
    mask_hint_bits(p);
    if !mask_unused_space(p) {
        return;
    }
    let special = u16_at(p, 16) as usize;
    if special + BT_OPAQUE > BLCKSZ {
        return;
    }
    let flags = u16_at(p, special + 12);
    if flags & BTP_LEAF != 0 {
        // LP_DEAD is set on leaf items without WAL (_bt_killitems, _bt_check_unique).
        mask_lp_flags(p);
    }
    // BTP_HAS_GARBAGE is an unlogged hint; a split's replay sets neither BTP_SPLIT_END
    // nor the cycle id of the right sibling.
    put_u16(p, special + 12, flags & !(BTP_HAS_GARBAGE | BTP_SPLIT_END));
    put_u16(p, special + 14, 0);
}

/// The page masked as its kind is by PostgreSQL; a new (all-zero header) page as is.
pub fn mask(kind: Kind, p: &mut [u8], blkno: u32) {
    if page_is_new(p) {
        return;
    }
    match kind {
        Kind::Heap => heap_mask(p, blkno),
        Kind::Btree => btree_mask(p),
        Kind::VisibilityMap | Kind::Other => mask_lsn_and_checksum(p),
    }
}

/// Where two masked pages differ: the first `max` byte offsets.
pub fn differing_offsets(a: &[u8], b: &[u8], max: usize) -> Vec<usize> {
    (0..a.len().min(b.len()))
        .filter(|&i| a[i] != b[i])
        .take(max)
        .collect()
}

/// The heap blocks whose visibility-map bits (all-visible, all-frozen) differ between
/// two copies of visibility-map page `vm_block`: (heap block, bits in a, bits in b).
pub fn vm_bit_differences(a: &[u8], b: &[u8], vm_block: u32) -> Vec<(u32, u8, u8)> {
    let mut out = vec![];
    for i in HEADER..BLCKSZ {
        if a[i] == b[i] {
            continue;
        }
        for k in 0..4 {
            let (x, y) = ((a[i] >> (2 * k)) & 3, (b[i] >> (2 * k)) & 3);
            if x != y {
                let heap = vm_block * HEAPBLOCKS_PER_VM_PAGE + ((i - HEADER) * 4 + k) as u32;
                out.push((heap, x, y));
            }
        }
    }
    out
}
