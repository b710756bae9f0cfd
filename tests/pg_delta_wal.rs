//! `restore --delta wal` (issue 55) against a real PostgreSQL 15 archiving into the
//! repository. A full and an incremental of a pgbench cluster; the cluster runs on past
//! the incremental (pages changed before and after a checkpoint, a table added), then
//! crashes. The delta by WAL over its data directory reads no relation page in place,
//! writes a small part of them, and leaves every relation file equal page for page
//! (masked as wal_consistency_checking masks) to a fresh restore of the same chain;
//! started, it recovers to the restore point and PostgreSQL's checkers find nothing.
//! What it cannot prove is refused, untouched: a copy whose pg_wal lost the WAL it
//! wrote past the set's end. And a failover: the old primary ran on past the point where
//! a restored copy was promoted (timeline 2), checkpointed and crashed; a delta by WAL of
//! the new primary's set over it reads its timeline-1 WAL from the switch point, and the
//! result equals a fresh restore page for page and recovers along timeline 2. A frame
//! it reads through without needing it, damaged, is told as a warning naming the set,
//! the stripe and the offset (the restore itself whole), as verify names it, and so is
//! its header damaged; its frame index entry forged (CRCs valid) is refused, naming the
//! frame.

mod common;

use common::forge::{frames_of, manifest_json, u32_at, u64_at, with_index_entry, READ_THROUGH_GAP};
use common::oracle::{compare, relations, Rel};
use common::pg::{amcheck, check_restored, check_restored_with, push_cmd, restore_repo};
use common::pg::{as_postgres, postgres_dir, Pg, PgOptions};
use common::*;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;

fn backup(url: &str, repo: &str, ty: &str) -> Value {
    json(&["backup", "--source", url, "--repo", repo, "--type", ty])
}

fn rows(pg: &Pg) -> String {
    pg.sql(
        "SELECT (SELECT count(*) || '/' || sum(abalance) FROM pgbench_accounts) || ' ' || \
         (SELECT md5(string_agg(aid || ':' || abalance, ',' ORDER BY aid)) FROM pgbench_accounts) || ' ' || \
         (to_regclass('added_later') IS NOT NULL)::text",
    )
}

/// Changes the rows of every `n`th page of pgbench_accounts.
fn change_pages(pg: &Pg, n: u32) {
    pg.sql(&format!(
        "UPDATE pgbench_accounts SET abalance = abalance + 3 WHERE (ctid::text::point)[0]::bigint % {n} = 0"
    ));
}

/// Sum of the sizes of the relation files under `dir/base`.
fn relation_bytes(dir: &Path) -> u64 {
    let mut t = 0;
    for db in std::fs::read_dir(dir.join("base")).unwrap() {
        for f in std::fs::read_dir(db.unwrap().path()).unwrap() {
            let f = f.unwrap();
            if f.file_name()
                .to_string_lossy()
                .starts_with(|c: char| c.is_ascii_digit())
            {
                t += f.metadata().unwrap().len();
            }
        }
    }
    t
}

#[test]
fn a_delta_by_wal_writes_only_changed_pages_and_equals_a_full_restore() {
    let repo = s(&postgres_dir("repo").join("repo"));
    // Few buffers: pages changed after the last checkpoint reach the files before the
    // crash. Small segments: the copy's WAL spans several.
    let mut pg = Pg::start_with(&PgOptions {
        checksums: true,
        archive: Some(push_cmd(&repo)),
        wal_segsize_mb: Some(1),
        extra_conf: "shared_buffers = 1MB\n".into(),
        ..PgOptions::default()
    });
    pg.pgbench_init(5);
    let url = format!("{}?pgdata={}", pg.url(), pg.data.display());
    backup(&url, &repo, "full");
    change_pages(&pg, 97);
    pg.sql("VACUUM pgbench_accounts");
    let incr = backup(&url, &repo, "incr");
    let (db, rels) = relations(&pg, "postgres");
    pg.sql("SELECT pg_create_restore_point('wal_point')");
    let want = rows(&pg);
    pg.switch_and_wait();

    // The cluster runs on: pages changed before a checkpoint and after it, a table added.
    change_pages(&pg, 53);
    pg.sql("CREATE TABLE added_later AS SELECT g FROM generate_series(1, 20000) g");
    let added = pg.sql("SELECT pg_relation_filepath('added_later')");
    pg.sql("CHECKPOINT");
    change_pages(&pg, 41);
    // It crashes: what it changed after the checkpoint is in its pg_wal only.
    let pg_ctl = pg.tool("pg_ctl");
    as_postgres(
        &pg_ctl,
        &["-D", &s(&pg.data), "-m", "immediate", "-w", "stop"],
    );
    pg.stop();
    let data = pg.data.clone();
    let to = s(&data);

    // The copy's pg_wal lost the WAL it wrote past the set's end, up to and with its
    // last checkpoint's redo segment: refused, naming a segment, nothing written.
    let controldata = pg.tool("pg_controldata");
    let cd = as_postgres(&controldata, &["-D", &to]);
    let field = |k: &str| -> String {
        let l = cd
            .lines()
            .find(|l| l.starts_with(k))
            .unwrap_or_else(|| panic!("{k}: {cd}"));
        l.split(':').nth(1).unwrap().trim().to_string()
    };
    let redo_wal = field("Latest checkpoint's REDO WAL file");
    let redo_lsn = field("Latest checkpoint's REDO location");
    let control = std::fs::read(data.join("global/pg_control")).unwrap();
    let wal = data.join("pg_wal");
    let aside = postgres_dir("aside");
    let moved: Vec<String> = (std::fs::read_dir(&wal).unwrap())
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .filter(|n| n.len() == 24 && *n <= redo_wal)
        .collect();
    assert!(moved.contains(&redo_wal), "{moved:?}");
    for n in &moved {
        std::fs::rename(wal.join(n), aside.join(n)).unwrap();
    }
    let e = fails(&delta_wal(&repo, &to, "wal_point"), 1);
    assert!(
        e.contains("--delta wal cannot tell") && e.contains("no longer holds"),
        "{e}"
    );
    assert!(e.contains("Nothing was written"), "{e}");
    assert_eq!(
        std::fs::read(data.join("global/pg_control")).unwrap(),
        control
    );
    for n in &moved {
        std::fs::rename(aside.join(n), wal.join(n)).unwrap();
    }

    // The delta by WAL.
    let before = relation_bytes(&data);
    let r = json(&delta_wal(&repo, &to, "wal_point"));
    let d = &r["delta"];
    let n = |k: &str| d[k].as_u64().unwrap();
    assert!(
        r["delta_wal"]["copy_segments"].as_u64().unwrap() >= 3,
        "{r}"
    );
    assert_eq!(r["delta_wal"]["copy_state"], "in production", "{r}");
    assert!(n("proven_bytes") > before / 2, "{before}: {r}");
    assert!(n("proven_bytes") <= before, "{before}: {r}");
    // Frames no page of which can differ were stepped over by their headers (most
    // chunks of pgbench_accounts hold a changed page here, the catalogs' do not).
    assert!(n("stored_bytes_not_read") > 4 << 20, "{r}");
    // The full's uncompressed frames that hold a changed page: only those pages read.
    assert!(n("frames_read_in_part") > 10, "{r}");
    assert!(n("written_bytes") < before / 4, "{before}: {r}");
    // Only what is not a relation's main or map fork was read to compare.
    assert!(n("compared_bytes") < before / 20, "{before}: {r}");
    assert!(n("compared_bytes") < 8 << 20, "{r}");
    assert!(!data.join(&added).exists(), "{added}: not in the chain");
    // The copy's control file as pg_controldata reads it.
    assert_eq!(r["delta_wal"]["copy_redo"], redo_lsn.as_str(), "{r}");

    // Page for page what a fresh restore of the same chain holds.
    let (fresh, full) = restore_repo(&repo, &["--until-name", "wal_point"]);
    assert_eq!(full["chain"].as_array().unwrap().len(), 2, "{full}");
    assert_eq!(full["chain"][1]["set_id"], incr["set_id"], "{full}");
    same_pages(&data, &fresh, db, &rels, 1000);
    check_restored(&fresh, &want, rows);
    check_restored_with(Path::new(&data), &want, rows, amcheck);
}

/// Every relation file of database `db` in `a` equals `b`'s page for page, masked as
/// wal_consistency_checking masks, over more than `min` pages.
fn same_pages(a: &Path, b: &Path, db: u32, rels: &BTreeMap<String, Rel>, min: u64) {
    let base = format!("base/{db}");
    let (bad, pages, _) = compare(&a.join(&base), &b.join(&base), rels);
    assert!(pages > min, "{pages}");
    let shown = bad.join("\n");
    assert!(bad.is_empty(), "{} page(s) differ:\n{shown}", bad.len());
}

/// A cluster archiving into `repo` whose changed pages reach its files before a crash,
/// with small segments, keeping its WAL (`wal_keep_size`).
fn small_buffers(repo: &str) -> Pg {
    let pg = Pg::start_with(&PgOptions {
        checksums: true,
        archive: Some(push_cmd(repo)),
        wal_segsize_mb: Some(1),
        extra_conf: "shared_buffers = 1MB\nwal_keep_size = 1GB\n".into(),
        ..PgOptions::default()
    });
    pg.pgbench_init(3);
    pg
}

fn crash(pg: &mut Pg) {
    let pg_ctl = pg.tool("pg_ctl");
    as_postgres(
        &pg_ctl,
        &["-D", &s(&pg.data), "-m", "immediate", "-w", "stop"],
    );
    pg.stop();
}

#[test]
fn an_old_primary_that_ran_past_the_failover_is_restored_page_for_page() {
    let repo = s(&postgres_dir("repo").join("repo"));
    let mut a = small_buffers(&repo);
    let a_url = format!("{}?pgdata={}", a.url(), a.data.display());
    backup(&a_url, &repo, "full");
    change_pages(&a, 31);
    a.sql("SELECT pg_create_restore_point('failover')");
    a.switch_and_wait();

    // The failover: a copy restored to that point is promoted onto timeline 2.
    let (b_data, _) = restore_repo(&repo, &["--until-name", "failover"]);
    let mut b = Pg::adopt_archiving(&b_data, &push_cmd(&repo));
    b.wait_promoted();
    // The old primary runs on, on timeline 1, checkpoints and crashes.
    change_pages(&a, 23);
    a.sql("CHECKPOINT");
    change_pages(&a, 19);
    crash(&mut a);

    change_pages(&b, 13);
    let b_url = format!("{}?pgdata={}", b.url(), b.data.display());
    let set = backup(&b_url, &repo, "full");
    let (db, rels) = relations(&b, "postgres");
    let accounts = b.sql("SELECT pg_relation_filepath('pgbench_accounts')");
    b.sql("SELECT pg_create_restore_point('after')");
    let want = rows(&b);
    b.switch_and_wait();
    b.stop();

    // One byte damaged in a frame the delta reads through without needing it: the
    // restore is whole and says the set is not; verify names the same frame.
    let set_id = set["set_id"].as_str().unwrap();
    let stripe = Path::new(&repo).join("sets").join(set_id).join("1.pv");
    let kept = std::fs::read(&stripe).unwrap();
    let (i, at) = unneeded_frame(&kept);
    let mut bad = kept.clone();
    bad[at + 80 + 100] ^= 0x5A;
    std::fs::write(&stripe, &bad).unwrap();

    // The old primary as it crashed, for the trials of page checks below.
    let stale = postgres_dir("stale").join("data");
    cp_a(&a.data, &stale);
    let to = s(&a.data);
    let r = json(&delta_wal(&repo, &to, "after"));
    wait_removed(&r);
    // The warnings that name a frame of the set.
    let told = format!("set {set_id} (full): stripe");
    let warned = |r: &Value| -> Vec<String> {
        (r["warnings"].as_array().unwrap().iter())
            .filter_map(Value::as_str)
            .filter(|w| w.contains(&told))
            .map(str::to_string)
            .collect()
    };
    let w = warned(&r);
    assert_eq!(w.len(), 1, "{r}");
    assert!(
        w[0].contains(&format!("frame at offset {at}: stored bytes are damaged"))
            && w[0].contains("not needed by this restore")
            && w[0].contains("pagevault verify"),
        "{r}"
    );
    let e = fails(&["verify", "--repo", &repo, "--set", set_id], 1);
    assert!(
        e.contains(&format!("frame at offset {at}: stored bytes")),
        "{e}"
    );

    // Each trial below on a copy of the old primary, the stripe as it gives.
    let on_copy_of = |from: &Path, stripe_bytes: &[u8], want_ok: bool| {
        std::fs::write(&stripe, stripe_bytes).unwrap();
        let copy = postgres_dir("forged").join("data");
        cp_a(from, &copy);
        let copy_to = s(&copy);
        let args = delta_wal(&repo, &copy_to, "after");
        let out = match want_ok {
            true => Ok(json(&args)),
            false => Err(fails(&args, 1)),
        };
        let _ = std::fs::remove_dir_all(copy.parent().unwrap());
        out
    };
    let on_copy = |stripe_bytes: &[u8], want_ok: bool| on_copy_of(&a.data, stripe_bytes, want_ok);
    // That frame's header damaged instead (its own CRC fails, the index is whole): the
    // frame's damage, told as a warning; the restore whole.
    let mut bad = kept.clone();
    bad[at + 40] ^= 0xff;
    let r2 = on_copy(&bad, true).unwrap();
    let w = warned(&r2);
    assert_eq!(w.len(), 1, "{r2}");
    assert!(
        w[0].contains(&format!(
            "frame at offset {at}: frame header checksum mismatch"
        )) && w[0].contains("not needed by this restore"),
        "{r2}"
    );

    // The index forged, its CRCs made valid again (a writer of a set without a key can):
    // that frame's entry differs from its header, or its length is not its frame's.
    // Refused, naming the frame.
    let seq: &dyn Fn(&mut [u8]) = &|e| e[64] ^= 1;
    let long: &dyn Fn(&mut [u8]) = &|e| e[12..16].copy_from_slice(&(256u32 << 20).to_le_bytes());
    for (edit, says) in [
        (
            seq,
            format!("frame {i} at offset {at} differs from its frame index entry"),
        ),
        (
            long,
            format!("invalid frame stored length at offset {}: uncompressed frame stores 268435456 bytes", at + 12),
        ),
    ] {
        let e = on_copy(&with_index_entry(&kept, i, edit), false).unwrap_err();
        assert!(e.contains(&says) && e.contains(set_id), "{says}: {e}");
    }
    page_checks(&kept, &accounts, set_id, &repo, &|b, ok| {
        on_copy_of(&stale, b, ok)
    });
    std::fs::write(&stripe, &kept).unwrap();
    assert!(
        r["delta"]["frames_read_in_part"].as_u64().unwrap() > 0,
        "{r}"
    );
    assert_eq!(r["chain"][0]["set_id"], set["set_id"], "{r}");
    let w = &r["delta_wal"];
    assert_eq!(w["copy_timeline"], 1, "{r}");
    // The copy's WAL is read from where timeline 2 left timeline 1, before its redo.
    assert!(w["copy_wal_from"].as_str() < w["copy_redo"].as_str(), "{r}");
    assert!(r["delta"]["written_bytes"].as_u64().unwrap() > 0, "{r}");

    let (fresh, _) = restore_repo(&repo, &["--until-name", "after"]);
    same_pages(&a.data, &fresh, db, &rels, 500);
    check_restored(&fresh, &want, rows);
    check_restored_with(&a.data, &want, rows, amcheck);
}

/// A delta restore over a copy of the old primary, the stripe as given: its report, or
/// (asked to fail) its error.
type OnCopy<'a> = dyn Fn(&[u8], bool) -> Result<Value, String> + 'a;

/// `cp -a from to`.
fn cp_a(from: &Path, to: &Path) {
    let cp = std::process::Command::new("cp")
        .args(["-a", &s(from), &s(to)])
        .status()
        .unwrap();
    assert!(cp.success());
}

/// Trials of the page checks of the frame of `path`'s first chunk in stripe `kept`, which
/// the delta reads in part (page 0 changed, most pages not): a byte of page 0 damaged is
/// refused, naming the page; its page checks damaged, the frame is read whole and the
/// restore is whole, with a warning, and verify names them; a set without page checks
/// (written before them) is read whole, frame by frame, and nothing is told.
fn page_checks(kept: &[u8], path: &str, set_id: &str, repo: &str, on_copy: &OnCopy) {
    let m: Value = serde_json::from_slice(&manifest_json(kept)).unwrap();
    let id = (m["files"].as_array().unwrap().iter())
        .find(|f| f["path"] == path)
        .and_then(|f| f["id"].as_u64())
        .unwrap_or_else(|| panic!("{path} is not in the set"));
    let frames = frames_of(kept);
    let at = *(frames.iter())
        .find(|&&a| u32_at(kept, a + 8) as u64 == id && u64_at(kept, a + 16) == 0)
        .unwrap_or_else(|| panic!("no frame of {path} at offset 0"));
    let (kind, codec, raw) = (kept[at + 4], kept[at + 5], u32_at(kept, at + 24) as usize);
    assert_eq!((kind, codec), (1, 0), "an uncompressed data frame");
    assert_eq!(
        &kept[at + 80 + raw..at + 84 + raw],
        b"PVPC",
        "its page checks"
    );

    let mut bad = kept.to_vec();
    bad[at + 80 + 100] ^= 0x5A;
    let e = on_copy(&bad, false).unwrap_err();
    assert!(
        e.contains(&format!("frame at offset {at}: page 0 of the frame (file offset 0) does not match its page check"))
            && e.contains(set_id),
        "{e}"
    );

    let mut bad = kept.to_vec();
    bad[at + 80 + raw + 10] ^= 0x5A;
    let r = on_copy(&bad, true).unwrap();
    let w = r["warnings"].to_string();
    assert!(
        w.contains(&format!(
            "frame at offset {at}: its page checks are damaged"
        )) && w.contains("read whole"),
        "{r}"
    );
    let e = fails(&["verify", "--repo", repo, "--set", set_id], 1);
    assert!(
        e.contains(&format!(
            "frame at offset {at}: its page checks are damaged"
        )),
        "{e}"
    );

    // Every frame's padding zeroed, as a set written before page checks has it.
    let mut old = kept.to_vec();
    let body_end = u64_at(&kept[kept.len() - 64..], 40) as usize;
    for (k, &a) in frames.iter().enumerate() {
        let end = frames.get(k + 1).copied().unwrap_or(body_end);
        let stored = u32_at(kept, a + 12) as usize;
        if end > a + 80 + stored {
            old[a + 80 + stored..end].fill(0);
        }
    }
    let r = on_copy(&old, true).unwrap();
    assert_eq!(r["delta"]["frames_read_in_part"], 0, "{r}");
    assert!(
        !r["warnings"].to_string().contains("frame at offset"),
        "{r}"
    );
}

/// The number and offset of a frame of stripe `b` that a delta restore over a copy of the same
/// cluster reads through without needing it: a template database's catalog main fork
/// (nothing changes it) in a run of such frames between two frames the restore reads
/// (files it writes whole: free space maps and non-relation files), the run shorter than
/// the 256 KiB the reader reads through.
fn unneeded_frame(b: &[u8]) -> (usize, usize) {
    let m: Value = serde_json::from_slice(&manifest_json(b)).unwrap();
    let paths: BTreeMap<u64, &str> = (m["files"].as_array().unwrap().iter())
        .filter_map(|f| Some((f["id"].as_u64()?, f["path"].as_str()?)))
        .collect();
    let at = frames_of(b);
    let path = |i: usize| {
        paths
            .get(&(u32_at(b, at[i] + 8) as u64))
            .copied()
            .unwrap_or("")
    };
    let relation = |p: &str| {
        let name = p.rsplit('/').next().unwrap_or("");
        (p.starts_with("base/") || p.starts_with("global/"))
            && name.starts_with(|c: char| c.is_ascii_digit())
    };
    let read = |i: usize| path(i).ends_with("_fsm") || !relation(path(i));
    let template_main = |i: usize| {
        let p = path(i);
        (p.starts_with("base/1/") || p.starts_with("base/4/")) && !p.contains('_')
    };
    (1..at.len() - 1)
        .find(|&i| {
            let Some(j) = (0..i).rev().find(|&j| !template_main(j)) else {
                return false;
            };
            let Some(k) = (i + 1..at.len()).find(|&k| !template_main(k)) else {
                return false;
            };
            let gap = at[k] - at[j + 1];
            read(j) && read(k) && gap <= READ_THROUGH_GAP && u32_at(b, at[i] + 12) > 1000
        })
        .map(|i| (i, at[i]))
        .unwrap_or_else(|| {
            let order: Vec<_> = (0..at.len()).map(path).collect();
            panic!("no template catalog frame read through between frames read: {order:?}")
        })
}

/// `restore --delta wal` from `repo` over `to`, to the restore point `until`.
fn delta_wal<'a>(repo: &'a str, to: &'a str, until: &'a str) -> Vec<&'a str> {
    let a = ["restore", "--repo", repo, "--to", to, "--owner", "postgres"];
    a.into_iter()
        .chain(["--delta", "wal", "--until-name", until])
        .collect()
}
