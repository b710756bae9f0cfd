//! What a WAL record changes, for block summaries (issue 21): PostgreSQL 17's WAL
//! summarizer rules (walsummarizer.c, blkreftable.c), for the WAL of PostgreSQL 14-18.
//!
//! - every block reference marks its block, except in the free space map (not fully
//!   WAL-logged: a consumer copies FSM forks whole);
//! - smgr CREATE sets limit block 0 for the fork it creates (not the FSM);
//! - smgr TRUNCATE sets the limit to the new length for the main fork (HEAP flag) and to
//!   the visibility map's new length in map pages (VM flag), which is also how VACUUM's
//!   heap truncation is logged (17.x servers give the VM limit in map pages: checked
//!   against 17.11);
//! - xact COMMIT, ABORT and their PREPARED forms set limit 0 on every fork but the FSM of
//!   each relation they drop;
//! - dbase CREATE (FILE_COPY and WAL_LOG) and DROP mark the whole database in each
//!   tablespace named: every relation file of that (tablespace, database) is new or gone;
//! - XLOG_PARAMETER_CHANGE, and on 17+ shutdown checkpoints, redo points and end of
//!   recovery, state the wal_level: WAL written at `minimal` does not log every change.
//!
//! Beyond PostgreSQL's rules (rules 2, [`RULES`]): redo of a heap insert, update, delete
//! or row lock clears visibility-map bits without a block reference to the map page
//! before 17, so every main-fork block a heap record references also marks the map page
//! covering it; a truncation that keeps part of a map page marks that page.

use super::walpage::get_u32;
use super::walrecord::{RecordView, RelFile};

pub use super::page::{FSM_FORK, INIT_FORK, MAIN_FORK, VM_FORK};

/// Where the rules put what a record changes.
pub trait Changes {
    /// A block of a relation fork was modified.
    fn block(&mut self, file: RelFile, fork: u8, block: u32);
    /// The fork was created (0) or truncated to `limit` blocks; blocks from `limit` on
    /// that were marked before are gone.
    fn limit(&mut self, file: RelFile, fork: u8, limit: u32);
    /// Every relation file of database `db` in tablespace `spc` was created or removed.
    fn database(&mut self, spc: u32, db: u32);
    /// The record states the wal_level from here on.
    fn wal_level_minimal(&mut self, minimal: bool);
}

const RM_XLOG: u8 = 0;
const RM_XACT: u8 = 1;
const RM_SMGR: u8 = 2;
const RM_DBASE: u8 = 4;
const RM_HEAP2: u8 = 9;
const RM_HEAP: u8 = 10;

/// The version of these rules a summary was made with. 1: PostgreSQL's rules alone
/// (visibility-map pages cleared by heap records on 14-16 were not marked); 2: every heap
/// main-fork block marks its map page too.
pub const RULES: u32 = 2;

const XLOG_CHECKPOINT_SHUTDOWN: u8 = 0x00;
const XLOG_PARAMETER_CHANGE: u8 = 0x60;
const XLOG_END_OF_RECOVERY: u8 = 0x90;
const XLOG_CHECKPOINT_REDO: u8 = 0xE0;
const WAL_LEVEL_MINIMAL: u32 = 0;

const XLOG_SMGR_CREATE: u8 = 0x10;
const XLOG_SMGR_TRUNCATE: u8 = 0x20;
const SMGR_TRUNCATE_HEAP: u32 = 0x1;
const SMGR_TRUNCATE_VM: u32 = 0x2;
/// Heap blocks one visibility map page covers: 2 bits each over the page after its
/// 24-byte header (visibilitymap.c's HEAPBLOCKS_PER_PAGE), for 8 KiB pages.
const HEAPBLOCKS_PER_VM_PAGE: u32 = (super::page::BLCKSZ as u32 - 24) * 4;

const XLOG_XACT_OPMASK: u8 = 0x70;
const XLOG_XACT_COMMIT: u8 = 0x00;
const XLOG_XACT_ABORT: u8 = 0x20;
const XLOG_XACT_COMMIT_PREPARED: u8 = 0x30;
const XLOG_XACT_ABORT_PREPARED: u8 = 0x40;
const XLOG_XACT_HAS_INFO: u8 = 0x80;
const XACT_XINFO_HAS_DBINFO: u32 = 1 << 0;
const XACT_XINFO_HAS_SUBXACTS: u32 = 1 << 1;
const XACT_XINFO_HAS_RELFILELOCATORS: u32 = 1 << 2;

const XLOG_DBASE_CREATE_FILE_COPY: u8 = 0x00;
const XLOG_DBASE_CREATE_WAL_LOG: u8 = 0x10;
const XLOG_DBASE_DROP: u8 = 0x20;
/// XLOG_DBASE_DROP before 15.
const XLOG_DBASE_DROP_14: u8 = 0x10;

/// The oldest and newest major versions whose record layouts these rules were checked
/// against (xl_smgr_*, xl_xact_*, xl_dbase_*, CheckPoint).
pub const MIN_MAJOR: u32 = 14;
pub const MAX_MAJOR: u32 = 18;

fn rel_at(d: &[u8], at: usize) -> RelFile {
    RelFile {
        spc: get_u32(d, at),
        db: get_u32(d, at + 4),
        rel: get_u32(d, at + 8),
    }
}

/// Applies the rules to one record of PostgreSQL `major` (MIN_MAJOR..=MAX_MAJOR).
/// An error says which record's main data is shorter than its layout.
pub fn summarize(major: u32, r: &RecordView, out: &mut impl Changes) -> Result<(), String> {
    let info = r.info & 0xF0;
    let d = r.main_data;
    let short = |what: &str, need: usize| {
        if d.len() < need {
            Err(format!(
                "the {what} record at {} has {} bytes of main data, its layout needs {need}",
                super::format_lsn(r.lsn),
                d.len()
            ))
        } else {
            Ok(())
        }
    };
    match r.rmid {
        RM_XLOG => {
            let level_at = match info {
                XLOG_PARAMETER_CHANGE => Some(20), // xl_parameter_change.wal_level
                XLOG_CHECKPOINT_SHUTDOWN if major >= 17 => Some(20), // CheckPoint.wal_level
                XLOG_END_OF_RECOVERY if major >= 17 => Some(16), // xl_end_of_recovery.wal_level
                XLOG_CHECKPOINT_REDO if major >= 17 => Some(0), // the payload is wal_level
                _ => None,
            };
            if let Some(at) = level_at {
                short("XLOG", at + 4)?;
                out.wal_level_minimal(get_u32(d, at) == WAL_LEVEL_MINIMAL);
            }
        }
        RM_SMGR if info == XLOG_SMGR_CREATE => {
            // xl_smgr_create: RelFileLocator, ForkNumber.
            short("smgr create", 16)?;
            let fork = get_u32(d, 12);
            if fork != FSM_FORK as u32 && fork <= INIT_FORK as u32 {
                out.limit(rel_at(d, 0), fork as u8, 0);
            }
        }
        RM_SMGR if info == XLOG_SMGR_TRUNCATE => {
            // xl_smgr_truncate: BlockNumber blkno, RelFileLocator, int flags.
            short("smgr truncate", 20)?;
            let (blkno, file, flags) = (get_u32(d, 0), rel_at(d, 4), get_u32(d, 16));
            if flags & SMGR_TRUNCATE_HEAP != 0 {
                out.limit(file, MAIN_FORK, blkno);
            }
            if flags & SMGR_TRUNCATE_VM != 0 {
                // The map keeps the pages that still cover a heap block (a partial last one too).
                out.limit(file, VM_FORK, blkno.div_ceil(HEAPBLOCKS_PER_VM_PAGE));
                // Redo clears the bits past the new end on that partial page.
                if blkno % HEAPBLOCKS_PER_VM_PAGE != 0 {
                    out.block(file, VM_FORK, vm_page_of(blkno));
                }
            }
        }
        RM_XACT => {
            let op = r.info & XLOG_XACT_OPMASK;
            if matches!(
                op,
                XLOG_XACT_COMMIT
                    | XLOG_XACT_ABORT
                    | XLOG_XACT_COMMIT_PREPARED
                    | XLOG_XACT_ABORT_PREPARED
            ) {
                for file in dropped_relations(r.info, d)
                    .map_err(|m| format!("the xact record at {}: {m}", super::format_lsn(r.lsn)))?
                {
                    for fork in [MAIN_FORK, VM_FORK, INIT_FORK] {
                        out.limit(file, fork, 0);
                    }
                }
            }
        }
        RM_DBASE => {
            // Before 15: XLOG_DBASE_CREATE (0x00, xl_dbase_create_rec) and DROP (0x10).
            let (creates, drop): (&[u8], u8) = match major >= 15 {
                true => (
                    &[XLOG_DBASE_CREATE_FILE_COPY, XLOG_DBASE_CREATE_WAL_LOG],
                    XLOG_DBASE_DROP,
                ),
                false => (&[XLOG_DBASE_CREATE_FILE_COPY], XLOG_DBASE_DROP_14),
            };
            if creates.contains(&info) {
                // Every create record starts with db_id, tablespace_id.
                short("dbase create", 8)?;
                out.database(get_u32(d, 4), get_u32(d, 0));
            } else if info == drop {
                // xl_dbase_drop_rec: db_id, int ntablespaces, Oid tablespace_ids[].
                short("dbase drop", 8)?;
                let (db, n) = (get_u32(d, 0), get_u32(d, 4) as usize);
                short("dbase drop", 8 + n.saturating_mul(4))?;
                for i in 0..n {
                    out.database(get_u32(d, 8 + 4 * i), db);
                }
            }
        }
        _ => {}
    }
    let heap = matches!(r.rmid, RM_HEAP | RM_HEAP2);
    for b in r.blocks {
        if b.fork != FSM_FORK {
            out.block(b.file, b.fork, b.block);
        }
        if heap && b.fork == MAIN_FORK {
            out.block(b.file, VM_FORK, vm_page_of(b.block));
        }
    }
    Ok(())
}

/// The visibility-map page holding heap block `block`'s bits.
pub fn vm_page_of(block: u32) -> u32 {
    block / HEAPBLOCKS_PER_VM_PAGE
}

/// The relations a commit or abort record drops (ParseCommitRecord, ParseAbortRecord):
/// after xact_time, the optional xinfo, then in order dbinfo, subxacts, relfilelocators
/// (what follows, dropped stats and invalidations, is not needed).
fn dropped_relations(info: u8, d: &[u8]) -> Result<impl Iterator<Item = RelFile> + '_, String> {
    let need = |at: usize, n: usize| {
        if d.len() < at + n {
            Err(format!(
                "its main data ({} bytes) ends inside its layout (needs {})",
                d.len(),
                at + n
            ))
        } else {
            Ok(())
        }
    };
    let mut at = 8; // TimestampTz xact_time
    let mut xinfo = 0;
    if info & XLOG_XACT_HAS_INFO != 0 {
        need(at, 4)?;
        xinfo = get_u32(d, at);
        at += 4;
    }
    if xinfo & XACT_XINFO_HAS_DBINFO != 0 {
        at += 8;
    }
    if xinfo & XACT_XINFO_HAS_SUBXACTS != 0 {
        need(at, 4)?;
        at += 4 + 4 * get_u32(d, at) as usize;
    }
    let mut n = 0;
    if xinfo & XACT_XINFO_HAS_RELFILELOCATORS != 0 {
        need(at, 4)?;
        n = get_u32(d, at) as usize;
        at += 4;
        need(at, n.saturating_mul(12))?;
    }
    Ok((0..n).map(move |i| rel_at(d, at + 12 * i)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pg::walrecord::BlockRef;

    #[derive(Default, Debug, PartialEq)]
    struct Log(Vec<String>);

    impl Changes for Log {
        fn block(&mut self, f: RelFile, fork: u8, block: u32) {
            self.0
                .push(format!("b {}/{}/{} {fork} {block}", f.spc, f.db, f.rel));
        }
        fn limit(&mut self, f: RelFile, fork: u8, limit: u32) {
            self.0
                .push(format!("l {}/{}/{} {fork} {limit}", f.spc, f.db, f.rel));
        }
        fn database(&mut self, spc: u32, db: u32) {
            self.0.push(format!("d {spc}/{db}"));
        }
        fn wal_level_minimal(&mut self, minimal: bool) {
            self.0.push(format!("m {minimal}"));
        }
    }

    fn words(v: &[u32]) -> Vec<u8> {
        v.iter().flat_map(|w| w.to_le_bytes()).collect()
    }

    /// A reference to block `block` of fork `fork` of relation 1663/5/16384.
    fn b(fork: u8, block: u32) -> BlockRef {
        BlockRef {
            file: RelFile {
                spc: 1663,
                db: 5,
                rel: 16384,
            },
            fork,
            block,
            image: false,
        }
    }

    fn run(major: u32, rmid: u8, info: u8, data: &[u8], blocks: &[BlockRef]) -> Vec<String> {
        let r = RecordView {
            lsn: 0x1000,
            rmid,
            info,
            xid: 0,
            blocks,
            main_data: data,
        };
        let mut log = Log::default();
        summarize(major, &r, &mut log).unwrap();
        log.0
    }

    #[test]
    fn blocks_but_not_the_fsm() {
        // A btree record (rmid 11): its blocks alone.
        let got = run(17, 11, 0, &[], &[b(0, 7), b(1, 2), b(2, 0)]);
        assert_eq!(got, ["b 1663/5/16384 0 7", "b 1663/5/16384 2 0"]);
    }

    #[test]
    fn heap_blocks_mark_their_visibility_map_page() {
        // A 15 update: old and new heap page, no map reference; both map pages marked.
        let got = run(15, RM_HEAP, 0x20, &[], &[b(0, 40000), b(0, 5)]);
        assert_eq!(
            got,
            [
                "b 1663/5/16384 0 40000",
                "b 1663/5/16384 2 1",
                "b 1663/5/16384 0 5",
                "b 1663/5/16384 2 0"
            ]
        );
        // heap2 (multi-insert, prune, visible) too; the map page's own reference stays.
        let got = run(16, RM_HEAP2, 0x40, &[], &[b(2, 0), b(0, 32671)]);
        assert_eq!(
            got,
            [
                "b 1663/5/16384 2 0",
                "b 1663/5/16384 0 32671",
                "b 1663/5/16384 2 0"
            ]
        );
        assert_eq!(vm_page_of(32672), 1);
    }

    #[test]
    fn smgr_create_and_truncate() {
        let create = words(&[1663, 5, 16384, 0]);
        assert_eq!(run(16, RM_SMGR, 0x10, &create, &[]), ["l 1663/5/16384 0 0"]);
        let fsm = words(&[1663, 5, 16384, 1]);
        assert!(run(16, RM_SMGR, 0x10, &fsm, &[]).is_empty());
        // Truncate to 3 blocks: heap and VM flags (one map page covers 32672 heap
        // blocks); the FSM flag alone sets nothing.
        let t = words(&[3, 1663, 5, 16384, 0x1 | 0x2 | 0x4]);
        // The partial map page kept is marked: redo clears its bits past the end.
        assert_eq!(
            run(15, RM_SMGR, 0x20, &t, &[]),
            [
                "l 1663/5/16384 0 3",
                "l 1663/5/16384 2 1",
                "b 1663/5/16384 2 0"
            ]
        );
        let t = words(&[32672 * 2 + 1, 1663, 5, 16384, 0x2]);
        assert_eq!(
            run(15, RM_SMGR, 0x20, &t, &[]),
            ["l 1663/5/16384 2 3", "b 1663/5/16384 2 2"]
        );
        let t = words(&[32672, 1663, 5, 16384, 0x2]);
        assert_eq!(run(15, RM_SMGR, 0x20, &t, &[]), ["l 1663/5/16384 2 1"]);
        let t = words(&[3, 1663, 5, 16384, 0x4]);
        assert!(run(15, RM_SMGR, 0x20, &t, &[]).is_empty());
    }

    #[test]
    fn commit_and_abort_drop_relations_after_dbinfo_and_subxacts() {
        // xact_time, xinfo (dbinfo | subxacts | relfilelocators | invals), dbinfo,
        // 2 subxacts, 2 relations, then invalidation bytes that must not be read.
        let mut d = vec![0u8; 8];
        d.extend(words(&[
            0b1111, 5, 1663, 2, 900, 901, 2, 1663, 5, 111, 1663, 5, 222,
        ]));
        d.extend([0xEE; 40]);
        let want = [
            "l 1663/5/111 0 0",
            "l 1663/5/111 2 0",
            "l 1663/5/111 3 0",
            "l 1663/5/222 0 0",
            "l 1663/5/222 2 0",
            "l 1663/5/222 3 0",
        ];
        for op in [0x00, 0x20, 0x30, 0x40] {
            assert_eq!(run(18, RM_XACT, op | 0x80, &d, &[]), want, "op {op:#x}");
        }
        // Without XLOG_XACT_HAS_INFO a commit drops nothing; PREPARE is not a drop.
        assert!(run(18, RM_XACT, 0x00, &d, &[]).is_empty());
        assert!(run(18, RM_XACT, 0x10 | 0x80, &d, &[]).is_empty());
        // Relations without dbinfo or subxacts.
        let mut d = vec![0u8; 8];
        d.extend(words(&[0b100, 1, 1663, 5, 333]));
        assert_eq!(run(15, RM_XACT, 0x80, &d, &[]).len(), 3);
        // A count past the data is an error naming the record, not a panic.
        let mut d = vec![0u8; 8];
        d.extend(words(&[0b100, 1000, 1663, 5, 333]));
        let r = RecordView {
            lsn: 0x1_0000_0028,
            rmid: RM_XACT,
            info: 0x80,
            xid: 0,
            blocks: &[],
            main_data: &d,
        };
        let e = summarize(17, &r, &mut Log::default()).unwrap_err();
        assert!(e.contains("1/28") && e.contains("ends inside"), "{e}");
    }

    #[test]
    fn databases_created_and_dropped() {
        let file_copy = words(&[16400, 1663, 1, 1663]);
        assert_eq!(run(15, RM_DBASE, 0x00, &file_copy, &[]), ["d 1663/16400"]);
        // 14: 0x00 creates (laid out as FILE_COPY), 0x10 drops.
        assert_eq!(run(14, RM_DBASE, 0x00, &file_copy, &[]), ["d 1663/16400"]);
        let wal_log = words(&[16401, 1663]);
        assert_eq!(run(17, RM_DBASE, 0x10, &wal_log, &[]), ["d 1663/16401"]);
        let drop = words(&[16400, 2, 1663, 16500]);
        assert_eq!(
            run(16, RM_DBASE, 0x20, &drop, &[]),
            ["d 1663/16400", "d 16500/16400"]
        );
        assert_eq!(
            run(14, RM_DBASE, 0x10, &drop, &[]),
            ["d 1663/16400", "d 16500/16400"]
        );
        // 0x10 is no create before 15, 0x20 no drop.
        assert!(run(14, RM_DBASE, 0x20, &drop, &[]).is_empty());
        assert_eq!(run(15, RM_DBASE, 0x10, &wal_log, &[]), ["d 1663/16401"]);
    }

    #[test]
    fn wal_level() {
        let mut pc = words(&[100, 8, 10, 0, 64, 0]);
        pc.extend([0, 0]);
        assert_eq!(run(15, RM_XLOG, 0x60, &pc, &[]), ["m true"]);
        pc[20] = 1;
        assert_eq!(run(15, RM_XLOG, 0x60, &pc, &[]), ["m false"]);
        // A shutdown checkpoint states wal_level from 17 on (offset 20 is nextXid before).
        let mut ck = vec![0u8; 88];
        ck[20] = 0;
        assert_eq!(run(17, RM_XLOG, 0x00, &ck, &[]), ["m true"]);
        assert!(run(16, RM_XLOG, 0x00, &ck, &[]).is_empty());
        assert_eq!(run(17, RM_XLOG, 0xE0, &words(&[1]), &[]), ["m false"]);
        assert_eq!(
            run(18, RM_XLOG, 0x90, &words(&[0, 0, 1, 1, 0]), &[]),
            ["m true"]
        );
        // An online checkpoint says nothing.
        assert!(run(17, RM_XLOG, 0x10, &ck, &[]).is_empty());
    }
}
