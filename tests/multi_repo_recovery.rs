//! A real recovery through several repositories (issue 54): PostgreSQL 15 archives into
//! two directory repositories at once; one segment recovery needs is damaged in the
//! first. A restore from the first alone is refused before anything is written; with
//! the second named after it, the restore says which file the second serves, and the
//! restored server's restore_command reads it there: it reaches the newest point and
//! PostgreSQL's checkers find nothing.

mod common;

use common::pg::{check_restored, init_for_postgres, postgres_dir, restore_repo, Pg};
use common::*;
use std::fs;
use std::path::Path;

fn rows(pg: &Pg) -> String {
    pg.sql("SELECT count(*) || ':' || sum(g) FROM t")
}

#[test]
fn recovery_reads_a_segment_damaged_in_the_first_repository_from_the_second() {
    let a = postgres_dir("first").join("repo");
    let b = postgres_dir("second").join("repo");
    init_for_postgres(&a);
    init_for_postgres(&b);
    let (ra, rb) = (s(&a), s(&b));
    let push = format!("{} archive-push %p --repo {ra} --repo {rb}", bin());
    let pg = Pg::start(true, Some(&push));
    pg.sql("CREATE TABLE t AS SELECT g FROM generate_series(1, 1000) g");
    let url = format!("{}?pgdata={}", pg.url(), pg.data.display());
    ok(&["backup", "--source", &url, "--repo", &ra]);
    pg.sql("INSERT INTO t SELECT g FROM generate_series(1001, 50000) g");
    let damaged = pg.switch_and_wait();
    pg.sql("INSERT INTO t SELECT g FROM generate_series(50001, 60000) g");
    pg.sql("SELECT pg_create_restore_point('newest')");
    let want = rows(&pg);
    pg.switch_and_wait();

    // Both hold it; bytes flipped in the middle of the first's copy.
    let copy = |repo: &Path| repo.join(format!("wal/{}/{damaged}.zst", &damaged[..8]));
    assert!(copy(&b).is_file(), "{damaged}");
    let mut bytes = fs::read(copy(&a)).unwrap();
    let mid = bytes.len() / 2;
    for x in &mut bytes[mid..mid + 8] {
        *x ^= 0x5a;
    }
    fs::write(copy(&a), &bytes).unwrap();

    let nowhere = s(&postgres_dir("nowhere").join("data"));
    let e = fails(
        &[
            "restore",
            "--repo",
            &ra,
            "--to",
            &nowhere,
            "--until-name",
            "newest",
        ],
        1,
    );
    assert!(
        e.contains("the log chain is damaged") && e.contains(&damaged),
        "{e}"
    );

    let (target, r) = restore_repo(&ra, &["--repo", &rb, "--until-name", "newest"]);
    let served = r["wal"]["served_elsewhere"].as_array().unwrap();
    assert_eq!(served.len(), 1, "{r}");
    let note = served[0].as_str().unwrap();
    assert!(note.contains(&damaged) && note.contains(&rb), "{note}");
    assert!(
        r["warnings"].as_array().unwrap().iter().any(|w| w == note),
        "{r}"
    );
    check_restored(&target, &want, rows);
}
