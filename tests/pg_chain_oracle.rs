//! A page-level oracle for chains (issue 51, item 3). A randomized workload (inserts,
//! HOT and non-HOT updates, upserts, deletes, row locks committed and aborted,
//! multixacts, VACUUM, VACUUM FREEZE, VACUUM FULL, TRUNCATE, CREATE/DROP INDEX
//! CONCURRENTLY, ADD COLUMN, CREATE/DROP TABLE, a table's tail deleted and cut by
//! VACUUM) runs in rounds against PostgreSQL with checksums, autovacuum off, archiving
//! into two repositories. After each round, with the source quiet, the chain takes its
//! set (incr, diff, or a new full), a second repository takes a full, and both are
//! restored to one LSN after both. Every relation file of the workload's database must
//! then be equal page for page in the two clusters once masked as
//! wal_consistency_checking masks (tests/common/pagemask.rs); visibility-map pages are
//! compared bit for bit. The chain's copy passes pg_amcheck and pg_visibility too.
//!
//! PAGEVAULT_ORACLE_ROUNDS (default 3), PAGEVAULT_ORACLE_MAJORS (default 15),
//! PAGEVAULT_ORACLE_SEED (default: from the clock, printed). PAGEVAULT_ORACLE_STRIP_VM=1
//! drops every visibility-map entry from the chain repository's block summaries before
//! each incremental or differential: summaries as the rules before issue 51 made them,
//! less also the map blocks records name; the oracle must then fail on 14-16.

mod common;

use common::oracle::{compare, relations, Rel};
use common::pagemask::{self, Kind, BLCKSZ};
use common::pg::{
    check_database, connect_args, postgres_dir, push_cmd, restore_repo, Pg, PgOptions,
};
use common::*;
use serde_json::Value;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

/// The workload's database: the restored clusters are only ever connected to `postgres`,
/// so nothing but replay touches its pages.
const DB: &str = "oracle";
/// Differences named in a failure.
const SHOWN: usize = 20;

/// splitmix64: one stream per seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// In lo..=hi.
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

struct Table {
    name: String,
    next_id: u64,
    indexes: Vec<String>,
}

struct Workload {
    rng: Rng,
    tables: Vec<Table>,
    serial: u32,
}

impl Workload {
    fn new(seed: u64) -> Workload {
        Workload {
            rng: Rng(seed),
            tables: vec![],
            serial: 0,
        }
    }

    fn serial(&mut self) -> u32 {
        self.serial += 1;
        self.serial
    }

    /// A new table (id, k indexed, v, pad stored out of line when long) and its rows.
    fn create_table(&mut self, out: &mut Vec<String>) {
        let name = format!("t{}", self.serial());
        let ff = [50, 70, 100][self.rng.range(0, 2) as usize];
        out.push(format!(
            "CREATE TABLE {name} (id int PRIMARY KEY, k int, v text, pad text) \
             WITH (fillfactor = {ff}, autovacuum_enabled = off)"
        ));
        out.push(format!("ALTER TABLE {name} ALTER pad SET STORAGE EXTERNAL"));
        out.push(format!("CREATE INDEX {name}_k ON {name} (k)"));
        self.tables.push(Table {
            name,
            next_id: 1,
            indexes: vec![],
        });
        let t = self.tables.len() - 1;
        let n = self.rng.range(500, 3000);
        self.insert(t, n, out);
    }

    fn insert(&mut self, t: usize, n: u64, out: &mut Vec<String>) {
        let (a, m, w) = (
            self.rng.range(1, 97),
            self.rng.range(10, 5000),
            self.rng.range(10, 200),
        );
        let (p, q) = (self.rng.range(5, 60), self.rng.range(70, 120));
        let tb = &mut self.tables[t];
        let (from, to) = (tb.next_id, tb.next_id + n - 1);
        tb.next_id = to + 1;
        out.push(format!(
            "INSERT INTO {} (id, k, v, pad) SELECT g, (g * {a}) % {m}, repeat(chr(97 + g % 26), {w}), \
             CASE WHEN g % {p} = 0 THEN repeat(md5(g::text), {q}) END FROM generate_series({from}, {to}) g",
            tb.name
        ));
    }

    /// `WHERE id % M = R` for a share of the rows.
    fn some_rows(&mut self) -> String {
        let m = self.rng.range(2, 60);
        format!("id % {m} = {}", self.rng.range(0, m - 1))
    }

    /// A statement that changes rows of `t` (for an aborted transaction or a subtransaction).
    fn dml(&mut self, t: usize) -> String {
        let name = self.tables[t].name.clone();
        let rows = self.some_rows();
        match self.rng.range(0, 2) {
            0 => format!("UPDATE {name} SET k = k + 1 WHERE {rows}"),
            1 => format!(
                "UPDATE {name} SET v = translate(v, 'abcdefghijklmnopqrstuvwxyz', 'bcdefghijklmnopqrstuvwxyza') WHERE {rows}"
            ),
            _ => format!("DELETE FROM {name} WHERE {rows}"),
        }
    }

    fn op(&mut self, out: &mut Vec<String>) {
        if self.tables.len() < 2 {
            return self.create_table(out);
        }
        let t = self.rng.range(0, self.tables.len() as u64 - 1) as usize;
        let name = self.tables[t].name.clone();
        let lock = [
            "FOR UPDATE",
            "FOR NO KEY UPDATE",
            "FOR SHARE",
            "FOR KEY SHARE",
        ][self.rng.range(0, 3) as usize];
        match self.rng.range(0, 99) {
            0..=14 => {
                let n = self.rng.range(50, 1500);
                self.insert(t, n, out)
            }
            15..=26 => {
                let rows = self.some_rows();
                out.push(format!("UPDATE {name} SET k = k + 7 WHERE {rows}"))
            }
            27..=38 => {
                // In place where the page has room and no index covers v.
                let rows = self.some_rows();
                out.push(format!(
                    "UPDATE {name} SET v = translate(v, 'abcdefghijklmnopqrstuvwxyz', 'bcdefghijklmnopqrstuvwxyza') WHERE {rows}"
                ))
            }
            39..=46 => {
                let rows = self.some_rows();
                out.push(format!("DELETE FROM {name} WHERE {rows}"))
            }
            47..=50 => {
                // Speculative insertions: some conflict, some are new.
                let next = self.tables[t].next_id;
                let from = next.saturating_sub(self.rng.range(1, 300)).max(1);
                let to = next + self.rng.range(0, 200);
                self.tables[t].next_id = to + 1;
                out.push(format!(
                    "INSERT INTO {name} (id, k, v) SELECT g, g, 'upsert' FROM generate_series({from}, {to}) g \
                     ON CONFLICT (id) DO UPDATE SET k = excluded.k + 1, v = 'upserted'"
                ))
            }
            51..=58 => {
                let rows = self.some_rows();
                let end = if self.rng.chance(60) {
                    "COMMIT"
                } else {
                    "ROLLBACK"
                };
                out.push(format!(
                    "BEGIN; SELECT count(*) FROM (SELECT 1 FROM {name} WHERE {rows} {lock}) s; {end}"
                ))
            }
            59..=62 => {
                // A lock and an update by a subtransaction of the same rows: a multixact.
                let rows = self.some_rows();
                let sub = if self.rng.chance(50) {
                    "RELEASE a"
                } else {
                    "ROLLBACK TO a"
                };
                out.push(format!(
                    "BEGIN; SELECT count(*) FROM (SELECT 1 FROM {name} WHERE {rows} {lock}) s; SAVEPOINT a; \
                     UPDATE {name} SET k = k - 1 WHERE {rows}; {sub}; COMMIT"
                ))
            }
            63..=67 => {
                let dml = self.dml(t);
                out.push(format!("BEGIN; {dml}; ROLLBACK"))
            }
            68..=73 => out.push(format!("VACUUM {name}")),
            74..=77 => out.push(format!("VACUUM (FREEZE) {name}")),
            78 => out.push(format!("VACUUM FULL {name}")),
            79..=80 => {
                out.push(format!("TRUNCATE {name}"));
                let n = self.rng.range(100, 1500);
                self.insert(t, n, out)
            }
            81..=84 => {
                // The tail's pages emptied, then cut off by VACUUM.
                out.push(format!(
                    "DELETE FROM {name} WHERE (ctid::text::point)[0] >= (SELECT pg_relation_size('{name}') / 8192 / 2)"
                ));
                out.push(format!("VACUUM {name}"))
            }
            85..=88 => {
                if !self.tables[t].indexes.is_empty() && self.rng.chance(40) {
                    let ix = self.tables[t].indexes.remove(0);
                    out.push(format!("DROP INDEX CONCURRENTLY {ix}"))
                } else {
                    let ix = format!("{name}_i{}", self.serial());
                    let cols = ["v", "k, id", "id DESC"][self.rng.range(0, 2) as usize];
                    out.push(format!("CREATE INDEX CONCURRENTLY {ix} ON {name} ({cols})"));
                    self.tables[t].indexes.push(ix)
                }
            }
            89..=91 => {
                let c = self.serial();
                let d = self.rng.range(0, 1000);
                out.push(format!(
                    "ALTER TABLE {name} ADD COLUMN c{c} int DEFAULT {d}"
                ))
            }
            92..=95 => self.create_table(out),
            96..=97 if self.tables.len() > 2 => {
                out.push(format!("DROP TABLE {name}"));
                self.tables.remove(t);
            }
            _ => out.push(format!("ANALYZE {name}")),
        }
    }

    /// Three tables, frozen: every map page all-visible and all-frozen at the first full.
    fn setup(&mut self) -> Vec<String> {
        let mut out = vec![];
        for _ in 0..3 {
            self.create_table(&mut out);
        }
        out.push("VACUUM (FREEZE, ANALYZE)".into());
        out
    }

    /// One round's statements; some tables vacuumed at its end, some left as changed.
    fn round(&mut self) -> Vec<String> {
        let mut out = vec![];
        for _ in 0..self.rng.range(10, 24) {
            self.op(&mut out);
        }
        for i in 0..self.tables.len() {
            if self.rng.chance(35) {
                let freeze = if self.rng.chance(40) { "(FREEZE) " } else { "" };
                out.push(format!("VACUUM {freeze}{}", self.tables[i].name));
            }
        }
        out
    }
}

/// Runs `statements` in the workload's database, each in its own transaction.
fn run_script(pg: &Pg, statements: &[String]) {
    let mut script = String::new();
    for s in statements {
        script.push_str(s);
        script.push_str(";\n");
    }
    let mut child = Command::new(pg.bin.join("psql"))
        .args(connect_args(pg.port))
        .args(["-d", DB, "-XAtq", "-v", "ON_ERROR_STOP=1", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(script.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "workload: {}\n{script}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn backup(url: &str, repo: &str, ty: &str) -> Value {
    json(&["backup", "--source", url, "--repo", repo, "--type", ty])
}

/// Restores the chain's set and the full, both to `lsn`; starts each until it promotes,
/// stops it, and compares them; the chain's copy then passes the database checks.
/// Returns the pages compared and those equal only once masked.
fn check_round(
    major: u32,
    chain: (&str, &str),
    full: (&str, &str),
    lsn: &str,
    db: u32,
    rels: &BTreeMap<String, Rel>,
    what: &str,
) -> (u64, u64) {
    let (ta, ra) = restore_repo(chain.0, &["--set", chain.1, "--until-lsn", lsn]);
    let (tb, _) = restore_repo(full.0, &["--set", full.1, "--until-lsn", lsn]);
    let mut a = Pg::adopt_with(&ta, major);
    let mut b = Pg::adopt_with(&tb, major);
    a.wait_promoted();
    b.wait_promoted();
    a.stop();
    b.stop();
    let base = format!("base/{db}");
    let (bad, pages, masked) = compare(&ta.join(&base), &tb.join(&base), rels);
    assert!(
        bad.is_empty(),
        "{what}: the chain's restore ({} sets, {}) and the full's ({}) differ in {} page(s) or file(s) \
         of {base}:\n{}",
        ra["chain"].as_array().map_or(0, Vec::len),
        ta.display(),
        tb.display(),
        bad.len(),
        bad.iter().take(SHOWN).cloned().collect::<Vec<_>>().join("\n")
    );
    a.pg_ctl_start();
    check_database(&a);
    a.stop();
    drop((a, b));
    for t in [ta, tb] {
        let _ = std::fs::remove_dir_all(t.parent().unwrap());
    }
    (pages, masked)
}

fn oracle_on(major: u32, rounds: u32, seed: u64, strip: bool) {
    let t0 = Instant::now();
    eprintln!("oracle on PostgreSQL {major}: seed {seed}, {rounds} round(s), strip {strip}");
    let chain_repo = s(&postgres_dir("repo").join("repo"));
    let full_repo = s(&postgres_dir("fullrepo").join("repo"));
    let pg = Pg::start_with(&PgOptions {
        major,
        checksums: true,
        archive: Some(format!(
            "{} && {}",
            push_cmd(&chain_repo),
            push_cmd(&full_repo)
        )),
        extra_conf: "autovacuum = off\n".into(),
        ..PgOptions::default()
    });
    let url = format!("{}?pgdata={}", pg.url(), s(&pg.data));
    pg.sql(&format!("CREATE DATABASE {DB}"));
    let mut w = Workload::new(seed);
    run_script(&pg, &w.setup());
    pg.switch_and_wait();
    backup(&url, &chain_repo, "full");
    let mut rng = Rng(seed ^ 0x5EED);
    for round in 1..=rounds {
        let tr = Instant::now();
        let statements = w.round();
        run_script(&pg, &statements);
        let ty = match rng.range(0, 99) {
            _ if round == 1 => "incr",
            0..=14 => "full",
            15..=49 => "diff",
            _ => "incr",
        };
        let (db, rels) = relations(&pg, DB);
        pg.switch_and_wait();
        if strip && ty != "full" {
            common::summaries::strip_vm_marks(Path::new(&chain_repo));
        }
        let set = backup(&url, &chain_repo, ty);
        if ty != "full" {
            assert_eq!(set["change_map"]["method"], "summaries", "{set}");
        }
        let full = backup(&url, &full_repo, "full");
        pg.sql("CHECKPOINT");
        let lsn = pg.sql("SELECT pg_current_wal_insert_lsn()");
        pg.switch_and_wait();
        let what = format!("PostgreSQL {major}, seed {seed}, round {round} ({ty})");
        let (pages, masked) = check_round(
            major,
            (&chain_repo, set["set_id"].as_str().unwrap()),
            (&full_repo, full["set_id"].as_str().unwrap()),
            &lsn,
            db,
            &rels,
            &what,
        );
        eprintln!(
            "{what}: {} statements, {} tables, {pages} pages equal ({masked} once masked) at {lsn}, {:.1} s",
            statements.len(),
            w.tables.len(),
            tr.elapsed().as_secs_f64()
        );
    }
    eprintln!(
        "oracle on PostgreSQL {major}: {rounds} round(s) in {:.1} s",
        t0.elapsed().as_secs_f64()
    );
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .filter(|v| !v.is_empty())
        .map(|v| v.parse().unwrap_or_else(|_| panic!("{name}={v}")))
        .unwrap_or(default)
}

#[test]
fn a_chain_restores_page_for_page_what_a_full_restores() {
    let rounds = env_or("PAGEVAULT_ORACLE_ROUNDS", 3u32);
    let majors = env_or("PAGEVAULT_ORACLE_MAJORS", "15".to_string());
    let clock = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    let seed = env_or("PAGEVAULT_ORACLE_SEED", clock % 1_000_000_007);
    let strip = env_or("PAGEVAULT_ORACLE_STRIP_VM", 0u32) == 1;
    for (i, m) in majors.split(',').enumerate() {
        oracle_on(m.trim().parse().unwrap(), rounds, seed + i as u64, strip);
    }
}

/// The masks leave what PostgreSQL keeps: a heap tuple's frozen xmin and its data, the
/// map's bits; and hide what it hides: hints, the LSN, the command id.
#[test]
fn the_masks_hide_hints_only() {
    // A heap page: one tuple of 40 bytes at 8152 (28 = 24 + 4: one line pointer).
    let mut p = vec![0u8; BLCKSZ];
    p[12..14].copy_from_slice(&28u16.to_le_bytes());
    p[14..16].copy_from_slice(&8152u16.to_le_bytes());
    p[16..18].copy_from_slice(&8192u16.to_le_bytes());
    let lp: u32 = 8152 | (1 << 15) | (37 << 17);
    p[24..28].copy_from_slice(&lp.to_le_bytes());
    p[8152 + 24..8152 + 37].copy_from_slice(b"row data here");
    let masked = |p: &[u8]| {
        let mut m = p.to_vec();
        pagemask::mask(Kind::Heap, &mut m, 0);
        m
    };
    let base = masked(&p);
    let mut hinted = p.clone();
    hinted[0..10].copy_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
    hinted[10] |= 0x6; // PD_PAGE_FULL, PD_ALL_VISIBLE
    hinted[20] = 7; // pd_prune_xid
    hinted[8152 + 21] |= 0x09; // HEAP_XMIN_COMMITTED | HEAP_XMAX_INVALID
    hinted[8152 + 8] = 3; // t_cid
    hinted[8152 + 37] = 0xAA; // padding
    hinted[100] = 1; // the hole
    assert_eq!(masked(&hinted), base);
    let mut data = p.clone();
    data[8152 + 30] ^= 1;
    assert_ne!(masked(&data), base);
    // A frozen xmin's bits are kept: freezing is logged.
    let mut frozen = p.clone();
    frozen[8152 + 21] |= 0x03;
    assert_ne!(masked(&frozen), base);
    // Two pages with different line pointer flags differ on heap, not on a btree leaf.
    let mut dead = p.clone();
    dead[24..28].copy_from_slice(&(lp | (1 << 16)).to_le_bytes());
    assert_ne!(masked(&dead), base);
    let leaf = |p: &[u8]| {
        let mut m = p.to_vec();
        m[16..18].copy_from_slice(&8176u16.to_le_bytes());
        m[8176 + 12] = 1; // BTP_LEAF
        pagemask::mask(Kind::Btree, &mut m, 1);
        m
    };
    assert_eq!(leaf(&dead), leaf(&p));
    // A map page: one bit more is a difference.
    let mut vm = vec![0u8; BLCKSZ];
    vm[12..14].copy_from_slice(&24u16.to_le_bytes());
    vm[14..18].copy_from_slice(&[0, 0x20, 0, 0x20]);
    let mut set = vm.clone();
    set[30] = 0b01;
    let (mut a, mut b) = (vm.clone(), set.clone());
    pagemask::mask(Kind::VisibilityMap, &mut a, 0);
    pagemask::mask(Kind::VisibilityMap, &mut b, 0);
    assert_ne!(a, b);
    assert_eq!(
        pagemask::vm_bit_differences(&a, &b, 1),
        [(32672 + 24, 0, 1)]
    );
}
