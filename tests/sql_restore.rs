//! T-SQL `RESTORE DATABASE` in `pagevault sql`: a SQLite set backed up to two stripes
//! restored by MOVE, refused over a non-empty directory without REPLACE, restored over
//! it with REPLACE; unsupported options and unknown logical names refused by name;
//! `sql --json` prints the report of what each statement ran.

mod common;
use common::*;
use rusqlite::Connection;

fn rows(db: &std::path::Path) -> i64 {
    let c = Connection::open(db).unwrap();
    assert_eq!(
        c.query_row("PRAGMA integrity_check", [], |r| r.get::<_, String>(0))
            .unwrap(),
        "ok"
    );
    c.query_row("SELECT count(*) FROM t", [], |r| r.get(0))
        .unwrap()
}

/// A SQLite database of 3000 rows at `db`.
fn make_db(db: &std::path::Path) {
    {
        let c = Connection::open(db).unwrap();
        c.execute_batch("CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT NOT NULL)")
            .unwrap();
        let tx = c.unchecked_transaction().unwrap();
        for i in 1..=3000i64 {
            tx.execute(
                "INSERT INTO t VALUES (?1, ?2)",
                rusqlite::params![i, "v".repeat(100 + (i % 50) as usize)],
            )
            .unwrap();
        }
        tx.commit().unwrap();
    }
}

#[test]
fn restore_database_from_stripes_with_move_and_replace() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("app.db");
    make_db(&db);
    let source = format!("sqlite:{}", s(&db));
    let (a, b) = (s(&dir.path().join("a.pv")), s(&dir.path().join("b.pv")));
    ok(&[
        "sql",
        "--source",
        &source,
        &format!("BACKUP DATABASE [app] TO DISK = '{a}', DISK = '{b}' WITH COMPRESSION"),
    ]);
    let files = ok(&[
        "sql",
        &format!("RESTORE FILELISTONLY FROM DISK = '{a}', DISK = '{b}'"),
    ]);
    assert!(
        files.contains("WITH MOVE takes the set's logical names: 'data', 'app', 'app.db'"),
        "{files}"
    );

    // MOVE the database file (its logical name as FILELISTONLY lists it) to a new place.
    let out_dir = dir.path().join("restored");
    let out_db = out_dir.join("app.db");
    let stmt = |extra: &str| {
        format!(
            "RESTORE DATABASE [app] FROM DISK = '{b}', DISK = '{a}' WITH MOVE 'app.db' TO '{}', STATS = 25{extra}",
            s(&out_db)
        )
    };
    let out = ok(&["sql", &stmt("")]);
    assert!(
        out.contains("25 percent processed.")
            && out.contains("100 percent processed.")
            && out.contains("RESTORE DATABASE successfully processed"),
        "{out}"
    );
    assert_eq!(rows(&out_db), 3000);

    // Over a directory that holds something: refused without REPLACE, naming it.
    Connection::open(&db)
        .unwrap()
        .execute("DELETE FROM t WHERE id > 10", [])
        .unwrap();
    std::fs::write(out_dir.join("stray.txt"), b"left over").unwrap();
    let e = fails(&["sql", &stmt("")], 1);
    assert!(e.contains("is not empty") && e.contains("REPLACE"), "{e}");
    assert!(
        out_dir.join("stray.txt").exists(),
        "a refused restore writes nothing"
    );
    // The logical name 'data' names the whole set's directory.
    let out = ok(&[
        "sql",
        &format!(
            "RESTORE DATABASE [app] FROM DISK = '{a}', DISK = '{b}' WITH MOVE 'data' TO '{}', REPLACE, CHECKSUM",
            s(&out_dir)
        ),
    ]);
    assert!(
        out.contains("RESTORE DATABASE successfully processed"),
        "{out}"
    );
    assert!(!out_dir.join("stray.txt").exists());
    assert_eq!(
        rows(&out_db),
        3000,
        "the set's rows, not the source's newer state"
    );

    // Refusals, each naming what is wrong.
    let e = fails(&["sql", &stmt(", PARTIAL, KEEP_REPLICATION, REPLACE")], 1);
    assert!(
        e.contains("PARTIAL") && e.contains("KEEP_REPLICATION") && e.contains("supported: MOVE"),
        "{e}"
    );
    let e = fails(&["sql", &stmt(", NORECOVERY")], 1);
    assert!(e.contains("NORECOVERY"), "{e}");
    let e = fails(
        &[
            "sql",
            &format!("RESTORE DATABASE [app] FROM DISK = '{a}', DISK = '{b}' WITH MOVE 'app_log' TO '/tmp/x'"),
        ],
        1,
    );
    assert!(e.contains("'app_log'") && e.contains("'app.db'"), "{e}");
    let e = fails(
        &[
            "sql",
            &format!("RESTORE DATABASE [app] FROM DISK = '{a}', DISK = '{b}' WITH REPLACE"),
        ],
        1,
    );
    assert!(e.contains("needs WITH MOVE"), "{e}");
    let e = fails(
        &[
            "sql",
            &format!(
                "RESTORE DATABASE [app] FROM DISK = '{a}' WITH MOVE 'data' TO '{}'",
                s(&dir.path().join("one"))
            ),
        ],
        1,
    );
    assert!(e.contains("stripe"), "one stripe of two is refused: {e}");
    assert!(!dir.path().join("one").exists());
    assert_eq!(rows(&out_db), 3000);
}

/// `sql --json` prints, for each kind of statement, the document its command's --json
/// prints, and its figures are the repository's and the set's.
#[test]
fn sql_json_prints_the_report_of_what_it_ran() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("app.db");
    make_db(&db);
    let source = format!("sqlite:{}", s(&db));
    let repo = s(&dir.path().join("repo"));
    let (a, b) = (s(&dir.path().join("a.pv")), s(&dir.path().join("b.pv")));
    let from = format!("FROM DISK = '{a}', DISK = '{b}'");
    let sql = |stmt: &str| json(&["sql", "--source", &source, "--repo", &repo, stmt]);

    let backup = sql(&format!(
        "BACKUP DATABASE [app] TO DISK = '{a}', DISK = '{b}' WITH COMPRESSION, STATS = 10"
    ));
    let h = json(&["history", "--repo", &repo]);
    let [set] = &h["sets"].as_array().unwrap()[..] else {
        panic!("one set recorded: {h:#}")
    };
    let id = set["set_id"].as_str().unwrap();
    assert_eq!(backup["command"], "backup", "{backup:#}");
    assert_eq!(backup["set_id"], id, "{backup:#}");
    assert_eq!(backup["stored_bytes"], set["stored_bytes"], "{backup:#}");
    assert_eq!(backup["raw_bytes"], set["raw_bytes"], "{backup:#}");
    assert_eq!(backup["stripes"].as_array().unwrap().len(), 2, "{backup:#}");
    assert_eq!(
        set["codec"].as_str().unwrap().split(':').next(),
        Some("zstd")
    );

    let header = sql(&format!("RESTORE HEADERONLY {from}"));
    assert_eq!(header["sets"][0]["set_id"], id, "{header:#}");
    assert_eq!(header["sets"][0]["source"]["kind"], "sqlite", "{header:#}");
    let files = sql(&format!("RESTORE FILELISTONLY {from}"));
    assert_eq!(files["set_id"], id, "{files:#}");
    let listed = files["files"].as_array().unwrap();
    let app = listed.iter().find(|f| f["path"] == "app.db").unwrap();
    assert_eq!(
        app["size"],
        std::fs::metadata(&db).unwrap().len(),
        "{files:#}"
    );
    let verify = sql(&format!("RESTORE VERIFYONLY {from}"));
    assert_eq!(verify["command"], "verify", "{verify:#}");
    assert_eq!(verify["valid"], true, "{verify:#}");
    assert_eq!(verify["set_id"], id, "{verify:#}");
    assert_eq!(verify["raw_bytes"], set["raw_bytes"], "{verify:#}");

    // From the repository (FROM URL): its newest chain, the same set.
    let out = dir.path().join("out");
    let restored = sql(&format!(
        "RESTORE DATABASE [app] FROM URL = '{repo}' WITH MOVE 'data' TO '{}', STATS = 10",
        s(&out)
    ));
    assert_eq!(restored["command"], "restore", "{restored:#}");
    assert_eq!(restored["set_id"], id, "{restored:#}");
    assert_eq!(restored["raw_bytes"], set["raw_bytes"], "{restored:#}");
    assert_eq!(restored["target"], s(&out), "{restored:#}");
    assert_eq!(rows(&out.join("app.db")), 3000);

    // One document per run: several statements with --json are a usage error.
    let e = fails(
        &[
            "sql",
            "--json",
            &format!("RESTORE HEADERONLY {from}; RESTORE VERIFYONLY {from}"),
        ],
        2,
    );
    assert!(e.contains("one statement per run (2 given)"), "{e}");
}

/// BACKUP TO DISK over a file that is not a pagevault stripe: refused, naming it, and
/// the file kept, unless WITH FORMAT; INIT alone keeps the refusal; a stripe is
/// written over as before (issue 52, item 9c).
#[test]
fn backup_to_disk_refuses_a_foreign_file_without_format() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("app.db");
    make_db(&db);
    let source = format!("sqlite:{}", s(&db));
    let (a, b) = (s(&dir.path().join("a.pv")), s(&dir.path().join("b.pv")));
    std::fs::write(&b, b"quarterly report\n").unwrap();
    let backup = |with: &str| {
        let stmt = format!("BACKUP DATABASE [app] TO DISK = '{a}', DISK = '{b}' {with}");
        run(&["sql", "--source", &source, &stmt])
    };
    for with in ["", "WITH INIT"] {
        let r = backup(with);
        assert_eq!(r.code, 1, "{with}: {}", r.stderr);
        for w in [b.as_str(), "not a pagevault stripe", "WITH FORMAT"] {
            assert!(r.stderr.contains(w), "{w}: {}", r.stderr);
        }
        assert_eq!(std::fs::read(&b).unwrap(), b"quarterly report\n");
        assert!(!std::path::Path::new(&a).exists());
    }
    let r = backup("WITH FORMAT");
    assert_eq!(r.code, 0, "{}", r.stderr);
    // Both are stripes now: written over without FORMAT.
    let r = backup("WITH INIT");
    assert_eq!(r.code, 0, "{}", r.stderr);
    let r = backup("");
    assert_eq!(r.code, 0, "{}", r.stderr);
}
