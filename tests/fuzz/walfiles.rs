//! The WAL target: archived files (segments, history files, backup history files) and
//! block summaries, mutated, read as archive-get, restore's chain check and a push's
//! summary read them; and damaged segments pushed.

use super::*;

pub(crate) struct WalCorpus {
    pub(crate) dir: tempfile::TempDir,
    /// A repository holding every kind of archived file.
    pub(crate) repo: PathBuf,
    /// Archived files (relative to the repository) and their bytes.
    pub(crate) archived: Vec<(String, Vec<u8>)>,
    /// Raw segments, in WAL order: (name, bytes).
    pub(crate) segments: Vec<(String, Vec<u8>)>,
}

/// A synthetic PostgreSQL 17 segment of 1 MiB: a long header, short headers on the
/// pages that hold WAL, no records.
pub(crate) fn synthetic_segment(tli: u32, segno: u64) -> Vec<u8> {
    const SEG: usize = 1 << 20;
    const BLK: usize = 8192;
    let mut v = vec![0u8; SEG];
    for p in 0..4 {
        let h = &mut v[p * BLK..];
        h[0..2].copy_from_slice(&0xD116u16.to_le_bytes());
        let info: u16 = if p == 0 { 2 } else { 0 };
        h[2..4].copy_from_slice(&info.to_le_bytes());
        h[4..8].copy_from_slice(&tli.to_le_bytes());
        h[8..16].copy_from_slice(&(segno * SEG as u64 + (p * BLK) as u64).to_le_bytes());
        if p == 0 {
            h[24..32].copy_from_slice(&7u64.to_le_bytes());
            h[32..36].copy_from_slice(&(SEG as u32).to_le_bytes());
            h[36..40].copy_from_slice(&(BLK as u32).to_le_bytes());
        }
    }
    v
}

/// Real segments of 1 MiB from a PostgreSQL 15 cluster under a small load (tables,
/// an index, updates, deletes, a truncate, a vacuum), archived by the server into
/// `repo`; None without PostgreSQL.
pub(crate) fn real_segments(repo: &Path) -> Option<Vec<String>> {
    if !Path::new(common::pg::BIN).join("postgres").is_file() {
        return None;
    }
    let pg = common::pg::Pg::start_with(&common::pg::PgOptions {
        checksums: true,
        archive: Some(common::pg::push_cmd(repo)),
        wal_segsize_mb: Some(1),
        ..Default::default()
    });
    let mut names = vec![pg.switch_and_wait()];
    for q in [
        "CREATE TABLE t(a int PRIMARY KEY, b text)",
        "INSERT INTO t SELECT g, repeat('x', g % 100) FROM generate_series(1, 3000) g",
        "CREATE INDEX ON t(b)",
        "UPDATE t SET b = 'y' WHERE a % 7 = 0",
        "DELETE FROM t WHERE a % 11 = 0",
        "CREATE TABLE u AS SELECT * FROM t",
        "TRUNCATE u",
        "VACUUM t",
        "DROP TABLE u",
    ] {
        pg.sql(q);
    }
    names.push(pg.switch_and_wait());
    pg.sql("INSERT INTO t SELECT g, 'z' FROM generate_series(3001, 4000) g;");
    names.push(pg.switch_and_wait());
    Some(names)
}

pub(crate) fn wal_corpus() -> &'static WalCorpus {
    static C: std::sync::OnceLock<WalCorpus> = std::sync::OnceLock::new();
    C.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let pgdir = common::pg::postgres_dir("fuzzwal");
        let repo_dir = pgdir.join("repo");
        let real = real_segments(&repo_dir);
        let repo = Repo::open(&s(&repo_dir), true, &StoreOptions::default()).unwrap();
        eprintln!(
            "fuzz wal: {} segments",
            if real.is_some() { "PostgreSQL 15's" } else { "synthetic" }
        );
        let names = match real {
            Some(n) => n,
            None => (2..5u64)
                .map(|segno| {
                    let name = pagevault::pg::segment_name_for(1, segno, 1 << 20);
                    let p = dir.path().join(&name);
                    fs::write(&p, synthetic_segment(1, segno)).unwrap();
                    wal::push(&repo, &p).unwrap();
                    name
                })
                .collect(),
        };
        let h = dir.path().join("00000002.history");
        fs::write(&h, "1\t0/5000100\tno recovery target specified\n").unwrap();
        wal::push(&repo, &h).unwrap();
        let b = dir.path().join(format!("{}.00000028.backup", names[0]));
        fs::write(
            &b,
            format!(
                "START WAL LOCATION: 0/2000028 (file {0})\nSTOP WAL LOCATION: 0/2000100 (file {0})\n\
                 CHECKPOINT LOCATION: 0/2000060\nBACKUP METHOD: streamed\nBACKUP FROM: primary\n\
                 START TIME: 2026-11-24 10:00:00 UTC\nLABEL: fuzz\nSTART TIMELINE: 1\n",
                names[0]
            ),
        )
        .unwrap();
        wal::push(&repo, &b).unwrap();
        let segments = names
            .iter()
            .map(|n| {
                let p = dir.path().join(format!("{n}.raw"));
                wal::fetch(&repo, n, &p).unwrap();
                (n.clone(), fs::read(&p).unwrap())
            })
            .collect();
        // The corpus keeps its own copy (the server's directory goes with it).
        let copy = dir.path().join("repo");
        let out = std::process::Command::new("cp")
            .args(["-a", &s(&repo_dir), &s(&copy)])
            .status()
            .unwrap();
        assert!(out.success());
        let _ = fs::remove_dir_all(&pgdir);
        let archived = walkdir::WalkDir::new(copy.join("wal"))
            .into_iter()
            .map(|e| e.unwrap())
            .filter(|e| e.file_type().is_file())
            .map(|e| {
                let rel = e.path().strip_prefix(&copy).unwrap().display().to_string();
                (rel, fs::read(e.path()).unwrap())
            })
            .filter(|(rel, _)| rel.ends_with(".zst") || rel.ends_with(".sum"))
            .collect();
        WalCorpus {
            dir,
            repo: copy,
            archived,
            segments,
        }
    })
}

/// One structural damage to an archived file (`.zst`) or block summary (`.sum`): a
/// header field with its CRCs valid, stored bytes with their CRC valid, a summary's
/// body damaged and stored again, or raw bytes.
pub(crate) fn mutate_archived(r: &mut Rng, rel: &str, b: &mut Vec<u8>, other: &[u8]) {
    let zst = rel.ends_with(".zst");
    let (hdr, crc_at, stored_crc_at, fields): (usize, usize, usize, &[(usize, usize)]) = if zst {
        (
            152,
            148,
            144,
            &[
                (4, 4),
                (16, 2),
                (18, 1),
                (19, 1),
                (20, 2),
                (88, 8),
                (96, 8),
                (136, 8),
            ],
        )
    } else {
        (132, 128, 124, &[(8, 2), (10, 2), (108, 8), (116, 8)])
    };
    if b.len() < hdr || r.chance(25) {
        return mutate_bytes(r, b, other);
    }
    match r.below(3) {
        0 => {
            let (at, w) = *r.pick(fields);
            let v = r.interesting(uint_at(b, at, w));
            b[at..at + w].copy_from_slice(&v.to_le_bytes()[..w]);
        }
        1 if !zst => {
            // The summary's body, damaged where its counts and lengths are.
            let Ok(mut body) = zstd::bulk::decompress(&b[hdr..], 64 << 20) else {
                return;
            };
            if body.is_empty() {
                return;
            }
            for _ in 0..1 + r.below(3) {
                if r.chance(50) {
                    let at = r.below(body.len());
                    let w = 4.min(body.len() - at);
                    let v = r.interesting(uint_at(&body, at, w));
                    body[at..at + w].copy_from_slice(&v.to_le_bytes()[..w]);
                } else {
                    mutate_bytes(r, &mut body, other);
                }
            }
            let stored = zstd::bulk::compress(&body, 1).unwrap();
            b.truncate(hdr);
            b.extend_from_slice(&stored);
            put_u64(b, 108, body.len() as u64);
            put_u64(b, 116, stored.len() as u64);
        }
        _ => {
            if b.len() > hdr {
                for _ in 0..1 + r.below(4) {
                    let i = hdr + r.below(b.len() - hdr);
                    b[i] ^= 1 << r.below(8);
                }
            }
        }
    }
    let c = crc32c::crc32c(&b[hdr..]);
    put_u32(b, stored_crc_at, c);
    let c = crc32c::crc32c(&b[..crc_at]);
    put_u32(b, crc_at, c);
}

/// A damaged segment: mostly its records (page headers kept, so it passes the page
/// checks and reaches the summarizer), else anywhere.
pub(crate) fn mutate_segment(r: &mut Rng, b: &mut Vec<u8>, other: &[u8]) {
    if r.chance(20) {
        return mutate_bytes(r, b, other);
    }
    for _ in 0..1 + r.below(6) {
        // Bytes of the used pages, past their headers.
        let used = b
            .chunks(8192)
            .take_while(|p| p[..24].iter().any(|&x| x != 0))
            .count()
            .max(1);
        let page = r.below(used) * 8192;
        let at = page + 40 + r.below(8192 - 48);
        match r.below(3) {
            0 => b[at] ^= 1 << r.below(8),
            1 => {
                let v = r.interesting(uint_at(b, at, 4)) as u32;
                put_u32(b, at, v);
            }
            _ => {
                let from = r.below(b.len() - 64);
                let n = r.below(64).min(b.len() - at);
                let piece = b[from..from + n].to_vec();
                b[at..at + n].copy_from_slice(&piece);
            }
        }
    }
}

#[test]
fn wal() {
    use pagevault::repo::wal::summary;
    let c = wal_corpus();
    let scratch = c.dir.path().join("scratch");
    let _ = fs::remove_dir_all(&scratch);
    let out = std::process::Command::new("cp")
        .args(["-a", &s(&c.repo), &s(&scratch)])
        .status()
        .unwrap();
    assert!(out.success());
    let repo = Repo::open(&s(&scratch), false, &StoreOptions::default()).unwrap();
    let fresh = c.dir.path().join("fresh");
    let pg_wal = c.dir.path().join("pg_wal");
    fs::create_dir_all(&pg_wal).unwrap();
    drive(3, 25, |r| {
        if r.chance(35) {
            // A damaged segment pushed into a new repository (after its predecessor,
            // whose summary carries the record continued into it).
            let k = r.below(c.segments.len());
            let (name, good) = &c.segments[k];
            let mut b = good.clone();
            let other = &c.segments[r.below(c.segments.len())].1;
            mutate_segment(r, &mut b, other);
            let _ = fs::remove_dir_all(&fresh);
            let repo = Repo::open(&s(&fresh), true, &StoreOptions::default()).unwrap();
            if k > 0 && r.chance(50) {
                let (pn, pb) = &c.segments[k - 1];
                fs::write(pg_wal.join(pn), pb).unwrap();
                wal::push(&repo, &pg_wal.join(pn)).unwrap();
            }
            let p = pg_wal.join(name);
            fs::write(&p, &b).unwrap();
            let pushed = wal::push(&repo, &p);
            let _ = summary::read(&repo, name);
            let _ = wal::verify(&repo, name);
            return match pushed {
                Ok(p)
                    if p.summary
                        .as_deref()
                        .is_some_and(|s| s.starts_with("block summary:")) =>
                {
                    "segment pushed, summary usable"
                }
                Ok(_) => "segment pushed, summary unusable",
                Err(_) => "segment refused",
            };
        }
        // A damaged archived file, read every way it is read, then put back.
        let (rel, good) = &c.archived[r.below(c.archived.len())];
        let mut b = good.clone();
        let other = &c.archived[r.below(c.archived.len())].1;
        for _ in 0..1 + r.below(2) {
            mutate_archived(r, rel, &mut b, other);
        }
        let path = scratch.join(rel);
        fs::write(&path, &b).unwrap();
        let file = rel.rsplit('/').next().unwrap();
        let outcome;
        if let Some(name) = file.strip_suffix(".sum") {
            let _ = summary::Summary::decode(&b);
            outcome = match summary::read(&repo, name) {
                Ok(Some(_)) => "summary read",
                _ => "summary refused",
            };
            let _ = summary::block_map(&repo, 1, 0, 4 << 20, 1 << 20);
        } else if let Some(name) = file.strip_suffix(".zst") {
            outcome = match wal::verify(&repo, name) {
                Ok(_) => "archived file read",
                Err(_) => "archived file refused",
            };
            let dest = c.dir.path().join("got");
            let _ = wal::fetch(&repo, name, &dest);
            let _ = fs::remove_file(&dest);
            let _ = wal::read_history(&repo, 2);
            let from = walchain::From {
                set_id: "fuzz",
                tli: 1,
                stop_lsn: 0x200_0100,
                seg_size: 1 << 20,
            };
            if let Ok(ch) = walchain::plan(&repo, &from, walchain::End::Latest, None) {
                let _ = walchain::verify(&repo, &ch, 2);
            }
        } else {
            outcome = "-";
        }
        fs::write(&path, good).unwrap();
        outcome
    });
}
