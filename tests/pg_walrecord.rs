//! The WAL record decoder behind change tracking (issue 21), against PostgreSQL's own
//! pg_waldump on real WAL: the same records, and the same block references (relation,
//! fork, block, full-page image), record by record.

mod common;
use common::pg::{Pg, BIN};
use pagevault::pg::walrecord::decode_segment;
use std::collections::BTreeSet;
use std::process::Command;

type Blocks = BTreeSet<(u64, u32, u32, u32, u8, u32, bool)>;

fn parse_lsn(s: &str) -> u64 {
    let (hi, lo) = s.split_once('/').unwrap();
    (u64::from_str_radix(hi, 16).unwrap() << 32) | u64::from_str_radix(lo, 16).unwrap()
}

/// Records and block references pg_waldump prints for WAL in [from, to).
fn waldump(path: &std::path::Path, from: u64, to: u64) -> (BTreeSet<u64>, Blocks) {
    let out = Command::new(format!("{BIN}/pg_waldump"))
        .arg(path)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let (mut records, mut blocks) = (BTreeSet::new(), Blocks::new());
    for line in text.lines().filter(|l| l.starts_with("rmgr:")) {
        let lsn = parse_lsn(
            line.split("lsn: ")
                .nth(1)
                .unwrap()
                .split(',')
                .next()
                .unwrap(),
        );
        if !(from..to).contains(&lsn) {
            continue;
        }
        records.insert(lsn);
        for b in line.split("blkref #").skip(1) {
            // "0: rel 1663/5/16384 fork vm blk 0 FPW, ..."
            let words: Vec<&str> = b.split([' ', ',', ';']).filter(|w| !w.is_empty()).collect();
            let rel: Vec<u32> = words[2].split('/').map(|x| x.parse().unwrap()).collect();
            let (fork, at) = match words[3] {
                "fork" => (
                    match words[4] {
                        "fsm" => 1,
                        "vm" => 2,
                        "init" => 3,
                        _ => 0,
                    },
                    5,
                ),
                _ => (0, 3),
            };
            assert_eq!(words[at], "blk", "{line}");
            let blk: u32 = words[at + 1].parse().unwrap();
            let fpw = words.get(at + 2).is_some_and(|w| *w == "FPW");
            blocks.insert((lsn, rel[0], rel[1], rel[2], fork, blk, fpw));
        }
    }
    (records, blocks)
}

#[test]
fn block_references_match_pg_waldump() {
    let pg = Pg::start(true, None);
    pg.pgbench_init(2);
    pg.sql("CREATE TABLE t(id int PRIMARY KEY, v text)");
    pg.sql("INSERT INTO t SELECT g, repeat(md5(g::text), 40) FROM generate_series(1, 30000) g");
    pg.sql("CHECKPOINT");
    pg.sql("UPDATE pgbench_accounts SET abalance = abalance + 1 WHERE aid % 7 = 0");
    pg.sql("UPDATE t SET v = 'short' WHERE id % 3 = 0");
    pg.sql("VACUUM t");
    pg.sql("CREATE INDEX ON t (v)");
    pg.sql("TRUNCATE pgbench_history");
    let last = pg.sql("SELECT pg_walfile_name(pg_current_wal_lsn())");
    pg.sql("SELECT pg_switch_wal()");
    let wal = pg.data.join("pg_wal");
    let mut names: Vec<String> = std::fs::read_dir(&wal)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.len() == 24 && n.as_str() <= last.as_str())
        .collect();
    names.sort();
    assert!(names.len() >= 3, "{names:?}");
    let (mut total_records, mut total_blocks, mut images) = (0, 0, 0);
    for name in &names {
        let path = wal.join(name);
        let bytes = std::fs::read(&path).unwrap();
        let d = decode_segment(&bytes, 8192).unwrap_or_else(|e| panic!("{name}: {e}"));
        let start = u64::from_le_bytes(bytes[8..16].try_into().unwrap());
        let end = d.unfinished_at.unwrap_or(start + bytes.len() as u64);
        let (want_records, want_blocks) = waldump(&path, start, end);
        let got_records: BTreeSet<u64> = d.records.iter().map(|r| r.lsn).collect();
        assert_eq!(got_records, want_records, "{name}: records differ");
        let got_blocks: Blocks = d
            .records
            .iter()
            .flat_map(|r| {
                r.blocks.iter().map(move |b| {
                    (
                        r.lsn, b.file.spc, b.file.db, b.file.rel, b.fork, b.block, b.image,
                    )
                })
            })
            .collect();
        assert_eq!(got_blocks, want_blocks, "{name}: block references differ");
        total_records += got_records.len();
        total_blocks += got_blocks.len();
        images += got_blocks.iter().filter(|b| b.6).count();
    }
    eprintln!(
        "{} segments: {total_records} records, {total_blocks} block references ({images} with a full page image) match pg_waldump",
        names.len()
    );
    assert!(
        total_blocks > 10_000 && images > 100,
        "too little WAL to compare"
    );
}
