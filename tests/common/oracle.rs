//! The page oracle: two restored copies of a database compared page for page, each
//! page masked as wal_consistency_checking masks it (pagemask.rs).

use super::pagemask::{self, Kind, BLCKSZ};
use super::pg::Pg;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Blocks of a relation segment file (RELSEG_SIZE).
const RELSEG_BLOCKS: u32 = 131072;

/// A relation of the workload's database: its kind and name, by file name.
pub struct Rel {
    pub kind: Kind,
    pub name: String,
}

/// Database `db`'s oid and its relations with storage, by relfilenode, from
/// pg_class and pg_am (mapped catalogs by pg_relation_filepath).
pub fn relations(pg: &Pg, db: &str) -> (u32, BTreeMap<String, Rel>) {
    let oid = pg.sql_num(&format!(
        "SELECT oid FROM pg_database WHERE datname = '{db}'"
    ));
    let rows = pg.sql_db(
        db,
        "SELECT pg_relation_filepath(c.oid), c.relkind, coalesce(a.amname, '-'), c.oid::regclass \
         FROM pg_class c LEFT JOIN pg_am a ON a.oid = c.relam \
         WHERE pg_relation_filepath(c.oid) LIKE 'base/%' ORDER BY 1",
    );
    let mut rels = BTreeMap::new();
    for line in rows.lines() {
        let f: Vec<&str> = line.splitn(4, '|').collect();
        let kind = match (f[1], f[2]) {
            ("r" | "t" | "m", "heap") => Kind::Heap,
            ("i", "btree") => Kind::Btree,
            _ => Kind::Other,
        };
        let file = f[0].rsplit('/').next().unwrap().to_string();
        rels.insert(
            file,
            Rel {
                kind,
                name: f[3].to_string(),
            },
        );
    }
    (oid, rels)
}

/// The relation files of a database directory (all but free space maps): name, size.
pub fn relation_files(dir: &Path) -> BTreeMap<String, u64> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| {
            let n = e.file_name().to_string_lossy().to_string();
            n.starts_with(|c: char| c.is_ascii_digit()) && !n.ends_with("_fsm")
        })
        .map(|e| {
            (
                e.file_name().to_string_lossy().to_string(),
                e.metadata().unwrap().len(),
            )
        })
        .collect()
}

/// Compares the database directories `a` (the chain's restore) and `b` (the full's)
/// page by page; returns the differences (file, block, offsets), the pages compared and
/// those equal only once masked.
pub fn compare(a: &Path, b: &Path, rels: &BTreeMap<String, Rel>) -> (Vec<String>, u64, u64) {
    let (fa, fb) = (relation_files(a), relation_files(b));
    let mut bad = vec![];
    let names: BTreeSet<&String> = fa.keys().chain(fb.keys()).collect();
    let (mut pages, mut masked) = (0, 0);
    for name in names {
        let (node, fork) = match name.split_once(['_', '.']) {
            Some((n, f)) => (n, f),
            None => (name.as_str(), ""),
        };
        let rel = rels.get(node);
        let what = rel.map_or("not in pg_class", |r| r.name.as_str());
        let (sa, sb) = (fa.get(name), fb.get(name));
        if sa != sb {
            bad.push(format!(
                "{name} ({what}): chain's {sa:?} bytes, full's {sb:?}"
            ));
            continue;
        }
        let Some(rel) = rel else { continue };
        let (kind, first) = if name.ends_with("_vm") {
            (Kind::VisibilityMap, 0)
        } else if name.contains('_') {
            (Kind::Other, 0)
        } else {
            let seg: u32 = fork.parse().unwrap_or(0);
            (rel.kind, seg * RELSEG_BLOCKS)
        };
        let (da, db) = (
            std::fs::read(a.join(name)).unwrap(),
            std::fs::read(b.join(name)).unwrap(),
        );
        if da.len() % BLCKSZ != 0 {
            if da != db {
                bad.push(format!("{name} ({what}): not whole pages, and differs"));
            }
            continue;
        }
        for (i, (pa, pb)) in da.chunks(BLCKSZ).zip(db.chunks(BLCKSZ)).enumerate() {
            pages += 1;
            if pa == pb {
                continue;
            }
            let block = first + i as u32;
            let (mut ma, mut mb) = (pa.to_vec(), pb.to_vec());
            pagemask::mask(kind, &mut ma, block);
            pagemask::mask(kind, &mut mb, block);
            if ma == mb {
                masked += 1;
                continue;
            }
            let offsets = pagemask::differing_offsets(&ma, &mb, 8);
            let lsn = |p: &[u8]| {
                let hi = u32::from_le_bytes(p[0..4].try_into().unwrap());
                let lo = u32::from_le_bytes(p[4..8].try_into().unwrap());
                format!("{hi:X}/{lo:X}")
            };
            let mut line = format!(
                "{name} ({what}, {kind:?}) block {block}: masked bytes differ at offsets {offsets:?} \
                 (page LSN chain's {}, full's {})",
                lsn(pa),
                lsn(pb)
            );
            if kind == Kind::VisibilityMap {
                let bits = pagemask::vm_bit_differences(&ma, &mb, block);
                let shown: Vec<String> = (bits.iter().take(8))
                    .map(|(h, x, y)| {
                        format!("heap block {h}: chain's bits {x:02b}, full's {y:02b}")
                    })
                    .collect();
                line.push_str(&format!(
                    "; {} heap block(s): {}",
                    bits.len(),
                    shown.join(", ")
                ));
            }
            bad.push(line);
        }
    }
    (bad, pages, masked)
}
