//! Block summaries (issue 21) against PostgreSQL 17's own WAL summarizer: a cluster with
//! `summarize_wal = on` archiving through `pagevault archive-push`, a workload of every
//! kind of change the rules know, then
//! - per server summary file, the rules applied to exactly its LSN range give exactly
//!   its blocks and limits (the rules and the record decoder are PostgreSQL's), plus the
//!   visibility-map page of each heap block marked (change rules 2) and nothing else;
//! - the union of pagevault's stored summaries over the segments holding that range
//!   contains every block and limit of the server's (it covers whole segments, so it
//!   holds more at both ends: that is the only difference allowed);
//! - the rules the consumer relies on, one by one, and damaged or foreign summaries
//!   refused by name.

mod common;
use common::pg::{postgres_dir, push_cmd, Pg, PgOptions};
use pagevault::pg::walrecord::{walk_segment, Carry, RelFile};
use pagevault::pg::walsummary::{summarize, Changes};
use pagevault::repo::wal::summary::{self, Summary};
use pagevault::repo::{wal, Repo};
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

const SEG: u64 = 16 << 20;
/// Heap blocks one visibility-map page covers (8 KiB pages).
const HEAPBLOCKS_PER_VM_PAGE: u32 = (8192 - 24) * 4;

type Key = (u32, u32, u32, u8); // spc, db, rel, fork

/// A block reference table with blkreftable.c's rules, fed in LSN order.
#[derive(Default, Debug, PartialEq)]
struct Table {
    limits: BTreeMap<Key, u32>,
    blocks: BTreeMap<Key, BTreeSet<u32>>,
}

impl Table {
    fn limit(&mut self, k: Key, l: u32) {
        if self.limits.get(&k).is_none_or(|&old| l < old) {
            self.limits.insert(k, l);
            if let Some(b) = self.blocks.get_mut(&k) {
                b.retain(|&x| x < l);
            }
        }
    }
    fn block(&mut self, k: Key, b: u32) {
        self.blocks.entry(k).or_default().insert(b);
    }
    fn block_count(&self) -> usize {
        self.blocks.values().map(BTreeSet::len).sum()
    }
    fn relations(&self) -> BTreeSet<Key> {
        self.limits
            .keys()
            .chain(
                self.blocks
                    .iter()
                    .filter(|(_, b)| !b.is_empty())
                    .map(|(k, _)| k),
            )
            .copied()
            .collect()
    }
}

/// What the rules say of each record, with its LSN.
#[derive(Debug)]
enum Ev {
    Block(Key, u32),
    Limit(Key, u32),
    Database(u32, u32),
}

struct Events {
    lsn: u64,
    out: Vec<(u64, Ev)>,
}

impl Changes for Events {
    fn block(&mut self, f: RelFile, fork: u8, block: u32) {
        self.out
            .push((self.lsn, Ev::Block((f.spc, f.db, f.rel, fork), block)));
    }
    fn limit(&mut self, f: RelFile, fork: u8, limit: u32) {
        self.out
            .push((self.lsn, Ev::Limit((f.spc, f.db, f.rel, fork), limit)));
    }
    fn database(&mut self, spc: u32, db: u32) {
        self.out.push((self.lsn, Ev::Database(spc, db)));
    }
    fn wal_level_minimal(&mut self, minimal: bool) {
        assert!(!minimal, "this cluster runs at wal_level=replica");
    }
}

/// The server's summary files in [from, to): (tli, start, end).
fn server_summaries(pg: &Pg, from: u64, to: u64) -> Vec<(u32, u64, u64)> {
    let rows = pg.sql(
        "SELECT tli || ' ' || (start_lsn - '0/0') || ' ' || (end_lsn - '0/0') \
         FROM pg_available_wal_summaries() ORDER BY start_lsn",
    );
    rows.lines()
        .map(|l| {
            let v: Vec<u64> = l.split(' ').map(|x| x.parse().unwrap()).collect();
            (v[0] as u32, v[1], v[2])
        })
        .filter(|&(_, s, e)| s >= from && e <= to)
        .collect()
}

/// One server summary file read back through pg_wal_summary_contents, applied to `t`.
fn server_contents(pg: &Pg, (tli, s, e): (u32, u64, u64), t: &mut Table) {
    let lsn = |x: u64| format!("{:X}/{:X}", x >> 32, x as u32);
    let rows = pg.sql(&format!(
        "SELECT reltablespace || ' ' || reldatabase || ' ' || relfilenode || ' ' || relforknumber \
         || ' ' || relblocknumber || ' ' || is_limit_block \
         FROM pg_wal_summary_contents({tli}, '{}', '{}')",
        lsn(s),
        lsn(e)
    ));
    // Limits first: within one file they are the lowest limit, and its blocks are all
    // below it already.
    let mut blocks = vec![];
    for l in rows.lines() {
        let v: Vec<&str> = l.split(' ').collect();
        let k: Key = (
            v[0].parse().unwrap(),
            v[1].parse().unwrap(),
            v[2].parse().unwrap(),
            v[3].parse().unwrap(),
        );
        let b: u32 = v[4].parse().unwrap();
        if v[5] == "true" {
            t.limit(k, b);
        } else {
            blocks.push((k, b));
        }
    }
    for (k, b) in blocks {
        t.block(k, b);
    }
}

fn wait_summarized(pg: &Pg, lsn: u64) {
    let t0 = Instant::now();
    loop {
        let got: u64 =
            pg.sql_num("SELECT summarized_lsn - '0/0' FROM pg_get_wal_summarizer_state()");
        if got >= lsn {
            return;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(90),
            "the WAL summarizer is at {got}, wanted {lsn}:\n{}",
            pg.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn lsn_now(pg: &Pg) -> u64 {
    pg.sql("SELECT pg_current_wal_insert_lsn() - '0/0'")
        .parse()
        .unwrap()
}

fn filenode(pg: &Pg, db: &str, rel: &str) -> u32 {
    pg.sql_db(db, &format!("SELECT pg_relation_filenode('{rel}')"))
        .parse()
        .unwrap()
}

#[test]
fn summaries_hold_what_postgres_17_summarizes() {
    let dir = postgres_dir("sum17");
    let repo_dir = dir.join("repo");
    let pg = Pg::start_with(&PgOptions {
        major: 17,
        archive: Some(push_cmd(&repo_dir)),
        extra_conf: "summarize_wal = on\nmax_wal_size = 1GB\ncheckpoint_timeout = 1h".into(),
        ..PgOptions::default()
    });
    pg.sql("CREATE TABLE a(id int PRIMARY KEY, v text)");
    pg.sql("CREATE TABLE c(id int, v text) WITH (autovacuum_enabled = off)");
    pg.sql("CREATE TABLE f(id int, v text)");
    pg.switch_and_wait();
    // A redo point early in a fresh segment: the server's summaries start there.
    pg.sql("CHECKPOINT");
    let start = lsn_now(&pg);

    // Inserts and updates over several segments; one record (a 40 MB logical message)
    // spanning at least two segment boundaries.
    pg.sql("INSERT INTO a SELECT g, repeat(md5(g::text), 12) FROM generate_series(1, 40000) g");
    pg.sql("SELECT pg_logical_emit_message(true, 'pv', repeat('x', 40000000))");
    pg.sql("INSERT INTO c SELECT g, repeat('c', 200) FROM generate_series(1, 20000) g");
    pg.sql("INSERT INTO f SELECT g, repeat('f', 100) FROM generate_series(1, 5000) g");
    pg.sql("CHECKPOINT");
    pg.sql("UPDATE a SET v = 'u' || v WHERE id % 5 = 0");
    // VACUUM that truncates the heap: the tail of c is empty.
    pg.sql("DELETE FROM c WHERE id > 2000");
    pg.sql("VACUUM c");
    let c_node = filenode(&pg, "postgres", "c");
    let c_blocks: u32 = pg.sql_num("SELECT pg_relation_size('c') / 8192");
    // TRUNCATE: a new relation file; the old one is dropped at commit.
    let f_old = filenode(&pg, "postgres", "f");
    pg.sql("TRUNCATE f");
    pg.sql("INSERT INTO f VALUES (1, 'after')");
    pg.sql("VACUUM FULL a");
    pg.sql("CREATE INDEX ON a (v)");
    // Many relations dropped in one commit: a commit record over several pages.
    pg.sql("DO $$ BEGIN FOR i IN 1..300 LOOP EXECUTE format('CREATE TABLE d%s(x int)', i); END LOOP; END $$");
    pg.sql("DO $$ DECLARE s text; BEGIN SELECT string_agg(format('d%s', i), ',') INTO s FROM generate_series(1, 300) i; EXECUTE 'DROP TABLE ' || s; END $$");
    pg.sql("CREATE TABLE g(id int)");
    pg.sql("BEGIN; CREATE TABLE rolled(x int); INSERT INTO rolled VALUES (1); ROLLBACK");
    pg.sql("CREATE DATABASE d_copy STRATEGY FILE_COPY");
    pg.sql("CREATE DATABASE d_wal STRATEGY WAL_LOG");
    let db_oid = |name: &str| -> u32 {
        pg.sql(&format!(
            "SELECT oid FROM pg_database WHERE datname = '{name}'"
        ))
        .parse()
        .unwrap()
    };
    let (copy_oid, wal_oid) = (db_oid("d_copy"), db_oid("d_wal"));
    pg.sql("DROP DATABASE d_copy");
    pg.sql("UPDATE a SET v = 'w' WHERE id % 97 = 0");
    // The server ends a summary at each redo point: this one closes the range compared.
    pg.sql("CHECKPOINT");
    let redo: u64 = pg.sql_num("SELECT redo_lsn - '0/0' FROM pg_control_checkpoint()");
    let end = lsn_now(&pg);
    pg.switch_and_wait();
    wait_summarized(&pg, redo);

    let servers = server_summaries(&pg, start - (start % SEG), end);
    assert!(servers.len() >= 2, "server summaries: {servers:?}");
    let (s_from, s_to) = (servers[0].1, servers.last().unwrap().2);

    // Every archived segment of the range, decoded with the carry chained, as events.
    let repo = Repo::open(repo_dir.to_str().unwrap(), false, &Default::default()).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let mut events = Events {
        lsn: 0,
        out: vec![],
    };
    let mut carry: Option<Carry> = None;
    let (first_seg, last_seg) = (s_from / SEG, (s_to - 1) / SEG);
    for segno in first_seg..=last_seg {
        let name = pagevault::pg::segment_name_for(1, segno, SEG);
        let p = tmp.path().join(&name);
        wal::fetch(&repo, &name, &p).unwrap();
        let bytes = std::fs::read(&p).unwrap();
        let w = walk_segment(&bytes, 8192, carry.as_ref(), 1 << 30, |r| {
            events.lsn = r.lsn;
            summarize(17, r, &mut events).unwrap();
        })
        .unwrap();
        carry = w.carry;
    }

    // (1) Exactly the server's summaries, file by file.
    let mut server_union = Table::default();
    for &sv in &servers {
        let mut theirs = Table::default();
        server_contents(&pg, sv, &mut theirs);
        server_contents(&pg, sv, &mut server_union);
        let mut ours = Table::default();
        for (lsn, e) in &events.out {
            if !(sv.1..sv.2).contains(lsn) {
                continue;
            }
            match *e {
                Ev::Block(k, b) => ours.block(k, b),
                Ev::Limit(k, l) => ours.limit(k, l),
                // The server marks a database as relation file 0 with limit 0.
                Ev::Database(spc, db) => ours.limit((spc, db, 0, 0), 0),
            }
        }
        let only = |a: &Table, b: &Table| -> Vec<String> {
            let mut v: Vec<String> = a
                .limits
                .iter()
                .filter(|(k, l)| b.limits.get(k) != Some(l))
                .map(|(k, l)| format!("limit {k:?}={l}"))
                .collect();
            for (k, bs) in &a.blocks {
                let other = b.blocks.get(k);
                v.extend(
                    bs.iter()
                        .filter(|x| other.is_none_or(|o| !o.contains(x)))
                        .map(|x| format!("block {k:?} {x}")),
                );
            }
            v
        };
        let (mut mine, server) = (only(&ours, &theirs), only(&theirs, &ours));
        // Change rules 2 add, beyond PostgreSQL's, the map page of every heap block
        // marked (17's heap records mostly name it too): those extras, and only those.
        let heap_map_page = |k: &Key, vm_block: u32| {
            let main = (k.0, k.1, k.2, 0u8);
            ours.blocks
                .get(&main)
                .is_some_and(|bs| bs.iter().any(|&b| b / HEAPBLOCKS_PER_VM_PAGE == vm_block))
                || (ours.limits.get(&main)).is_some_and(|&l| l / HEAPBLOCKS_PER_VM_PAGE == vm_block)
        };
        let extras_explained = (ours.blocks.iter())
            .filter(|(k, _)| k.3 == 2)
            .flat_map(|(k, bs)| bs.iter().map(move |b| (*k, *b)))
            .filter(|(k, b)| theirs.blocks.get(k).is_none_or(|t| !t.contains(b)))
            .filter(|(k, b)| heap_map_page(k, *b))
            .map(|(k, b)| format!("block {k:?} {b}"))
            .collect::<BTreeSet<String>>();
        assert!(
            extras_explained.len() <= mine.len(),
            "{extras_explained:?} {mine:?}"
        );
        mine.retain(|m| !extras_explained.contains(m));
        assert!(
            mine.is_empty() && server.is_empty(),
            "server summary {sv:?}: only ours ({}): {:?}; only the server's ({}): {:?}",
            mine.len(),
            &mine[..mine.len().min(20)],
            server.len(),
            &server[..server.len().min(20)]
        );
    }

    // (2) The stored summaries' union over the segments holding the range.
    let map = summary::block_map(&repo, 1, s_from, s_to - 1, SEG).unwrap();
    assert!(map.complete(), "gaps: {:?}", map.gaps);
    assert!(
        map.from <= s_from && map.end >= s_to,
        "{:X}..{:X}",
        map.from,
        map.end
    );
    let ours_blocks: u64 = map.rels.values().map(|e| e.blocks.len()).sum();
    let ours_limits = map.rels.values().filter(|e| e.limit.is_some()).count();
    let mut missing = vec![];
    for (k, bs) in &server_union.blocks {
        let f = RelFile {
            spc: k.0,
            db: k.1,
            rel: k.2,
        };
        missing.extend(
            bs.iter()
                .filter(|&&b| !map.may_have_changed(f, k.3, b))
                .map(|b| (*k, *b)),
        );
    }
    assert!(
        missing.is_empty(),
        "server blocks the summaries miss: {missing:?}"
    );
    for (k, &l) in &server_union.limits {
        if k.2 == 0 {
            assert!(
                map.databases.contains(&(k.0, k.1)),
                "database {k:?} not marked"
            );
            continue;
        }
        let c = map.changed(
            RelFile {
                spc: k.0,
                db: k.1,
                rel: k.2,
            },
            k.3,
        );
        assert!(
            c.whole || c.limit.is_some_and(|ours| ours <= l),
            "{k:?}: server limit {l}, ours {:?}",
            c.limit
        );
    }
    let server_rels = server_union.relations().len();
    eprintln!(
        "range {:X}..{:X}, {} server summaries, {} segments: server {} blocks, {} limits, {} relation forks; \
         pagevault {ours_blocks} blocks, {ours_limits} limits, {} relation forks, {} whole databases",
        s_from,
        s_to,
        servers.len(),
        last_seg - first_seg + 1,
        server_union.block_count(),
        server_union.limits.len(),
        server_rels,
        map.rels.len(),
        map.databases.len()
    );
    // Close: the extra WAL at both ends is less than two segments' worth of changes.
    assert!(server_union.block_count() > 3000, "too little WAL compared");
    assert!(
        ours_blocks as usize <= server_union.block_count() * 2 + 2000,
        "far more blocks than the server's"
    );

    // (3) The rules the consumer relies on.
    let main = |rel: u32| RelFile {
        spc: 1663,
        db: 5,
        rel,
    };
    assert_eq!(
        map.changed(main(f_old), 0).limit,
        Some(0),
        "TRUNCATE's old file"
    );
    assert_eq!(
        map.changed(main(c_node), 0).limit,
        Some(c_blocks),
        "VACUUM's heap truncation"
    );
    assert!(
        map.databases.contains(&(1663, copy_oid)),
        "CREATE DATABASE FILE_COPY"
    );
    assert!(
        map.databases.contains(&(1663, wal_oid)),
        "CREATE DATABASE WAL_LOG"
    );
    assert!(map.may_have_changed(
        RelFile {
            spc: 1663,
            db: wal_oid,
            rel: 1259
        },
        0,
        12345
    ));
    // The 40 MB record's carry crossed two segments: every summary's head is covered.
    let sums: Vec<Summary> = (first_seg..=last_seg)
        .map(|s| {
            summary::read(&repo, &pagevault::pg::segment_name_for(1, s, SEG))
                .unwrap()
                .unwrap()
        })
        .collect();
    assert!(
        sums.iter().all(Summary::usable),
        "{:?}",
        sums.iter().map(|s| &s.note).collect::<Vec<_>>()
    );
    assert!(
        sums.iter().any(|s| s
            .carry
            .as_ref()
            .is_some_and(|c| c.bytes.len() > SEG as usize)),
        "no summary carried a record over a whole segment"
    );

    // (4) A damaged summary and one of another segment are refused, by name.
    let name = &sums[1].segment;
    let rel = repo_dir.join(format!("wal/00000001/{name}.sum"));
    let good = std::fs::read(&rel).unwrap();
    let mut bad = good.clone();
    let at = bad.len() - 3;
    bad[at] ^= 0x20;
    std::fs::write(&rel, &bad).unwrap();
    let e = format!("{:#}", summary::read(&repo, name).unwrap_err());
    assert!(
        e.contains(&rel.display().to_string()) && e.contains("CRC32C"),
        "{e}"
    );
    let m = summary::block_map(&repo, 1, s_from, s_to - 1, SEG).unwrap();
    assert!(
        !m.complete() && m.gaps.iter().any(|g| g.contains(name.as_str())),
        "{:?}",
        m.gaps
    );
    let mut other = sums[0].clone();
    other.segment = name.clone();
    std::fs::write(&rel, other.encode()).unwrap();
    let e = format!("{:#}", summary::read(&repo, name).unwrap_err());
    assert!(
        e.contains(&rel.display().to_string()) && e.contains("BLAKE3"),
        "{e}"
    );
    std::fs::write(&rel, &good).unwrap();
    assert!(summary::read(&repo, name).unwrap().is_some());
    // A retried archive-push of a segment whose summary is missing writes it again.
    std::fs::remove_file(&rel).unwrap();
    let out = common::ok(&[
        "archive-push",
        &common::s(&tmp.path().join(name)),
        "--repo",
        &common::s(&repo_dir),
    ]);
    assert!(
        out.contains("already archived") && out.contains("block summary: "),
        "{out}"
    );
    assert_eq!(&summary::read(&repo, name).unwrap().unwrap(), &sums[1]);
    assert_eq!(
        pg.sql("SELECT failed_count FROM pg_stat_archiver"),
        "0",
        "{}",
        pg.log()
    );
}

/// PostgreSQL 15 and 18 (no server summaries to compare with before 17; 18 changed
/// the dropped-stats items that follow the dropped relations): every summary decodes
/// and is usable, and the rules hold on their WAL.
#[test]
fn summaries_of_postgres_15_and_18() {
    for major in [15, 18] {
        let dir = postgres_dir(&format!("sum{major}"));
        let repo_dir = dir.join("repo");
        let pg = Pg::start_with(&PgOptions {
            major,
            archive: Some(push_cmd(&repo_dir)),
            ..PgOptions::default()
        });
        pg.switch_and_wait();
        let start = lsn_now(&pg);
        pg.sql("CREATE TABLE t(id int PRIMARY KEY, v text)");
        pg.sql("INSERT INTO t SELECT g, repeat('t', 300) FROM generate_series(1, 20000) g");
        let old = filenode(&pg, "postgres", "t");
        pg.sql("TRUNCATE t");
        pg.sql("INSERT INTO t VALUES (1, 'x')");
        let new = filenode(&pg, "postgres", "t");
        pg.sql("CREATE TABLE gone(x int); INSERT INTO gone VALUES (1)");
        let gone = filenode(&pg, "postgres", "gone");
        pg.sql("DROP TABLE gone");
        pg.sql("CREATE DATABASE dw STRATEGY WAL_LOG");
        let dw: u32 = pg.sql_num("SELECT oid FROM pg_database WHERE datname = 'dw'");
        let end = lsn_now(&pg);
        pg.switch_and_wait();
        let repo = Repo::open(repo_dir.to_str().unwrap(), false, &Default::default()).unwrap();
        let map = summary::block_map(&repo, 1, start, end, SEG).unwrap();
        assert!(map.complete(), "PostgreSQL {major}: {:?}", map.gaps);
        let f = |rel| RelFile {
            spc: 1663,
            db: 5,
            rel,
        };
        assert_eq!(map.changed(f(old), 0).limit, Some(0), "PostgreSQL {major}");
        assert_eq!(map.changed(f(gone), 0).limit, Some(0), "PostgreSQL {major}");
        assert_eq!(map.changed(f(new), 0).limit, Some(0), "PostgreSQL {major}");
        assert!(map.may_have_changed(f(new), 0, 0), "PostgreSQL {major}");
        assert!(map.databases.contains(&(1663, dw)), "PostgreSQL {major}");
        let blocks: u64 = map.rels.values().map(|e| e.blocks.len()).sum();
        eprintln!(
            "PostgreSQL {major}: {blocks} blocks, {} relation forks, {} databases",
            map.rels.len(),
            map.databases.len()
        );
        assert!(blocks > 500, "PostgreSQL {major}: {blocks} blocks");
    }
}
