//! T-SQL `RESTORE DATABASE ... FROM URL` against a real PostgreSQL 15 repository: to a
//! point in time with STOPAT (STANDBY: paused there, open for reads; NORECOVERY: shut
//! down there), then over the same directory with REPLACE to the end of the archive;
//! each started cluster's rows compared.

mod common;
use common::pg::{give_to_postgres, postgres_dir, push_cmd, Pg};
use common::*;
use std::time::Duration;

#[test]
fn restore_database_from_url_with_stopat_then_replace() {
    let repo = postgres_dir("sql-repo");
    let repo_s = s(&repo);
    let pg = Pg::start(true, Some(&push_cmd(&repo)));
    pg.sql("CREATE TABLE marks(id int PRIMARY KEY)");
    let url = format!("{}?pgdata={}", pg.url(), s(&pg.data));
    ok(&["backup", "--source", &url, "--repo", &repo_s]);
    give_to_postgres(&repo);
    pg.sql("INSERT INTO marks VALUES (1)");
    std::thread::sleep(Duration::from_millis(1100));
    let t1 = pg.sql("SELECT to_char(clock_timestamp(), 'YYYY-MM-DD HH24:MI:SS.US+00')");
    std::thread::sleep(Duration::from_millis(1100));
    pg.sql("INSERT INTO marks VALUES (2), (3)");
    pg.switch_and_wait();

    let target = postgres_dir("sql-target").join("data");
    let stmt = |with: &str| {
        format!(
            "RESTORE DATABASE [postgres] FROM URL = '{repo_s}' WITH MOVE 'data' TO '{}', {with}",
            s(&target)
        )
    };
    let rows = |r: &Pg| r.sql("SELECT string_agg(id::text, ',' ORDER BY id) FROM marks");
    // STANDBY: recovery pauses at STOPAT, open for reads, until resumed.
    let out = ok(&[
        "sql",
        "--owner",
        "postgres",
        &stmt(&format!(
            "STOPAT = '{t1}', STATS = 50, STANDBY = 'undo.dat'"
        )),
    ]);
    assert!(
        out.contains("50 percent processed.")
            && out.contains("recovery stops before time")
            && out.contains("recovery pauses there")
            && out.contains("RESTORE DATABASE successfully processed"),
        "{out}"
    );
    let mut r = Pg::adopt(&target);
    for _ in 0..600 {
        if r.sql("SELECT pg_is_wal_replay_paused()") == "t" {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(r.sql("SELECT pg_is_in_recovery()"), "t", "{}", r.log());
    assert_eq!(rows(&r), "1", "{}", r.log());
    r.sql("SELECT pg_wal_replay_resume()");
    r.wait_promoted();
    assert_eq!(rows(&r), "1", "{}", r.log());
    r.stop();
    drop(r);

    // The same directory again: refused without REPLACE.
    let e = fails(&["sql", "--owner", "postgres", &stmt("STATS = 10")], 1);
    assert!(e.contains("REPLACE"), "{e}");
    // NORECOVERY: the server shuts down at the target, ready to replay on.
    let e = fails(
        &["sql", "--owner", "postgres", &stmt("REPLACE, NORECOVERY")],
        1,
    );
    assert!(e.contains("NORECOVERY needs STOPAT"), "{e}");
    ok(&[
        "sql",
        "--owner",
        "postgres",
        &stmt(&format!("REPLACE, NORECOVERY, STOPAT = '{t1}'")),
    ]);
    let conf = std::fs::read_to_string(target.join("postgresql.auto.conf")).unwrap();
    assert!(
        conf.contains("recovery_target_action = 'shutdown'"),
        "{conf}"
    );
    // REPLACE and no STOPAT: the whole archive, and the server opens.
    let out = ok(&["sql", "--owner", "postgres", &stmt("REPLACE, RECOVERY")]);
    assert!(!out.contains("recovery stops before"), "{out}");
    let r = Pg::adopt(&target);
    r.wait_promoted();
    assert_eq!(rows(&r), "1,2,3", "{}", r.log());
    drop(r);

    // A logical name the set does not have is refused with the ones it has.
    let e = fails(
        &[
            "sql",
            &format!("RESTORE DATABASE [postgres] FROM URL = '{repo_s}' WITH MOVE 'postgres_log' TO '/tmp/x'"),
        ],
        1,
    );
    assert!(e.contains("'postgres_log'") && e.contains("'data'"), "{e}");
    drop(pg);
    let _ = std::fs::remove_dir_all(target.parent().unwrap());
    let _ = std::fs::remove_dir_all(&repo);
}
