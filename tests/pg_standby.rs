//! Backups from a streaming standby (issue 38, item 2): a full and an incremental taken
//! on a standby of a primary under pgbench load, the files read from the standby, the
//! primary's WAL switched at each end (`--primary`) and its archive waited for; the
//! chain restores and recovers as one taken on the primary would.

mod common;

use common::pg::{
    as_postgres, assert_pgbench_consistent, pgbench_load, postgres_dir, push_cmd, Pg,
};
use common::*;

#[test]
fn a_full_and_an_incremental_from_a_standby_under_load_restore() {
    let dir = postgres_dir("standby");
    let repo = s(&dir.join("repo"));
    let primary = Pg::start(true, Some(&push_cmd(&repo)));
    primary.pgbench_init(5);
    let sdata = dir.join("standby");
    as_postgres(
        &s(&primary.bin.join("pg_basebackup")),
        &[
            "-D",
            &s(&sdata),
            "-R",
            "-X",
            "stream",
            "-h",
            "127.0.0.1",
            "-p",
            &primary.port.to_string(),
            "-U",
            "postgres",
            "--no-sync",
            "--checkpoint=fast",
        ],
    );
    let standby = Pg::adopt(&sdata);
    assert_eq!(standby.sql("SELECT pg_is_in_recovery()"), "t");
    let surl = format!("{}?pgdata={}", standby.url(), s(&sdata));
    let purl = primary.url();
    let backup = |ty: &str| {
        json(&[
            "backup",
            "--source",
            &surl,
            "--primary",
            &purl,
            "--repo",
            &repo,
            "--type",
            ty,
            "--compress",
            "lz4",
            "--archive-timeout",
            "60",
        ])
    };
    let load = pgbench_load(&primary, 10, 300);
    std::thread::sleep(std::time::Duration::from_secs(1));
    let full = backup("full");
    std::thread::sleep(std::time::Duration::from_secs(1));
    let incr = backup("incr");
    let mut load = load;
    assert!(load.wait().unwrap().success());
    assert_eq!(incr["change_map"]["method"], "summaries", "{incr}");
    // The sets name the standby's backup and the archive holds their stop segments.
    for set in [&full, &incr] {
        let id = set["set_id"].as_str().unwrap();
        let h = json(&["history", "--repo", &repo]);
        let e = (h["sets"].as_array().unwrap().iter())
            .find(|e| e["set_id"] == id)
            .unwrap()
            .clone();
        let stop = e["stop_wal"].as_str().unwrap();
        assert!(
            dir.join("repo/wal")
                .join(&stop[..8])
                .join(format!("{stop}.zst"))
                .exists(),
            "{stop} not archived: {e}"
        );
    }
    // A primary named for a server that is no standby is refused.
    let purl_data = format!("{}?pgdata={}", primary.url(), s(&primary.data));
    let e = fails(
        &[
            "backup",
            "--source",
            &purl_data,
            "--primary",
            &purl,
            "--to",
            "NUL",
        ],
        1,
    );
    assert!(e.contains("is not in recovery"), "{e}");

    let want = primary.sql("SELECT count(*) FROM pgbench_history");
    primary.switch_and_wait();
    drop(standby);
    let (target, j) = common::pg::restore_repo(&repo, &[]);
    assert_eq!(j["chain"].as_array().unwrap().len(), 2, "{j}");
    let label = std::fs::read_to_string(target.join("backup_label")).unwrap();
    assert!(label.contains("BACKUP FROM: standby"), "{label}");
    let r = Pg::adopt(&target);
    r.wait_promoted();
    assert_pgbench_consistent(&r);
    assert_eq!(r.sql("SELECT count(*) FROM pgbench_history"), want);
    common::pg::amcheck(&r);
}
