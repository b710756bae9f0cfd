//! Google Cloud Storage (`gs://`) against fake-gcs-server on 127.0.0.1. pagevault
//! speaks GCS's XML API (object_store's); the emulator serves its GETs, HEADs and
//! listings, but refuses its PUTs ("invalid uploadType"), has no XML multipart upload
//! (fake-gcs-server issue 852) and ignores x-goog-if-generation-match (issue 994). So
//! sets and repositories are made elsewhere and put in the emulator through its JSON
//! API, and everything that reads is run against it: verify, restore, history,
//! archive-get during a PostgreSQL recovery. Writes (backups, archive-push, create-only
//! puts) to gs:// cannot be tested here: docs/CONFIG.md says so.

mod common;
use common::pg::{init_for_postgres, postgres_dir, promoted_at_the_second_mark, Pg};
use common::stores::{gcs, unique};
use common::*;

fn big_tree(name: &str) -> tempfile::TempDir {
    let t = tempfile::Builder::new().prefix(name).tempdir().unwrap();
    make_tree(&t.path().join("src"));
    // Read back in several ranged GETs (8 MiB each) per stripe.
    std::fs::write(
        t.path().join("src/base/big"),
        bytes(9, 23 * 1024 * 1024 + 5, false),
    )
    .unwrap();
    t
}

#[test]
fn a_striped_set_in_gcs_verifies_and_restores() {
    let g = gcs();
    let tmp = big_tree("pv-gcs-files");
    let src = tmp.path().join("src");
    let p = unique("files");
    let local: Vec<String> = (1..=2)
        .map(|i| s(&tmp.path().join(format!("{i}.pv"))))
        .collect();
    let source = format!("files:{}", s(&src));
    ok(&backup_args(
        &source,
        &[&local[0], &local[1]],
        &["--compress", "lz4"],
    ));
    for (i, f) in local.iter().enumerate() {
        g.put(
            "pvtest",
            &format!("{p}/{}.pv", i + 1),
            &std::fs::read(f).unwrap(),
        );
    }
    let (a, b) = (
        format!("gs://pvtest/{p}/1.pv"),
        format!("gs://pvtest/{p}/2.pv"),
    );
    let v = ok(&["verify", "--from", &a, "--from", &b]);
    assert!(v.contains("is valid"), "{v}");
    let target = tmp.path().join("restored");
    let r = json(&["restore", "--from", &a, "--from", &b, "--to", &s(&target)]);
    assert_same_tree(&src, &target);
    assert!(
        r["object_store"]["requests"].as_u64().unwrap() > 4,
        "ranged GETs are counted: {r}"
    );
    assert_eq!(r["object_store"]["retries"], 0, "{r}");
    let hdr = json(&["header", "--from", &a, "--from", &b]);
    assert!(hdr.to_string().contains("\"files\""), "{hdr}");

    // A short object and a missing one: each named, and restore writes nothing.
    let whole = std::fs::read(&local[1]).unwrap();
    g.put("pvtest", &format!("{p}/short.pv"), &whole[..1_000_000]);
    let short = format!("gs://pvtest/{p}/short.pv");
    let e = fails(&["verify", "--from", &a, "--from", &short], 1);
    assert!(e.contains(&short), "{e}");
    let missing = format!("gs://pvtest/{p}/none.pv");
    let never = tmp.path().join("never");
    let e = fails(
        &[
            "restore",
            "--from",
            &a,
            "--from",
            &missing,
            "--to",
            &s(&never),
        ],
        1,
    );
    assert!(e.contains(&missing) && e.contains("does not exist"), "{e}");
    assert!(!never.exists());

    // The emulator refuses the XML API's uploads: a backup to gs:// fails at once,
    // names the object, and leaves nothing.
    let w = format!("gs://pvtest/{p}/w.pv");
    let r = run(&["backup", "--source", &source, "--to", &w]);
    assert_eq!(r.code, 1, "{}\n{}", r.stdout, r.stderr);
    assert!(
        r.stderr
            .contains(&format!("cannot start the upload of '{w}'")),
        "{}",
        r.stderr
    );
    assert!(g.ls("pvtest", &format!("{p}/w")).is_empty());
}

#[test]
fn gcs_credentials_and_emulator_endpoint_are_checked_first() {
    let _g = gcs();
    let home = tempfile::tempdir().unwrap();
    let home = s(home.path());
    // No emulator, no service account, no gcloud file, not on Google Cloud: refused at
    // once (never a wait on a metadata server that is not there).
    let t0 = std::time::Instant::now();
    let r = run_env(
        &["verify", "--from", "gs://pvtest/x.pv"],
        &[("STORAGE_EMULATOR_HOST", ""), ("HOME", &home)],
    );
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(
        r.stderr.contains("gs://pvtest: no credentials")
            && r.stderr.contains("GOOGLE_APPLICATION_CREDENTIALS"),
        "{}",
        r.stderr
    );
    assert!(t0.elapsed() < std::time::Duration::from_secs(10));
    // Plain HTTP only to a loopback emulator.
    let r = run_env(
        &["verify", "--from", "gs://pvtest/x.pv"],
        &[("STORAGE_EMULATOR_HOST", "example.com:4443")],
    );
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(
        r.stderr.contains("STORAGE_EMULATOR_HOST") && r.stderr.contains("loopback"),
        "{}",
        r.stderr
    );
    // A bucket alone is no stripe; a bucket that does not exist is said so.
    let e = fails(&["verify", "--from", "gs://nosuchbucket/x.pv"], 1);
    assert!(e.contains("gs://nosuchbucket/x.pv"), "{e}");
}

/// A PostgreSQL full + diff + WAL chain made in a directory repository, put object for
/// object in the emulator, then restored from gs:// to a marked point: the recovery
/// fetches its WAL with archive-get from the emulator.
#[test]
fn a_postgres_repository_in_gcs_restores_to_a_point_with_its_wal() {
    let g = gcs();
    let dir = postgres_dir("gcs-repo");
    let local = dir.join("repo");
    init_for_postgres(&local);
    let push = format!("{} archive-push %p --repo {}", bin(), s(&local));
    let pg = Pg::start(true, Some(&push));
    pg.pgbench_init(1);
    pg.sql("CREATE TABLE marks(id int PRIMARY KEY)");
    let url = format!("{}?pgdata={}", pg.url(), s(&pg.data));
    let l = s(&local);
    ok(&["backup", "--source", &url, "--repo", &l, "--stripes", "2"]);
    pg.sql("UPDATE pgbench_accounts SET abalance = abalance + 3 WHERE aid <= 2000");
    pg.sql("INSERT INTO marks VALUES (1)");
    pg.sql("CHECKPOINT");
    ok(&["backup", "--source", &url, "--repo", &l, "--type", "diff"]);
    pg.sql("INSERT INTO marks VALUES (2)");
    let lsn = pg.sql("SELECT pg_current_wal_insert_lsn()");
    pg.sql("INSERT INTO marks VALUES (3)");
    pg.switch_and_wait();
    drop(pg);

    let p = unique("pg");
    g.put_tree("pvtest", &p, &local);
    let repo = format!("gs://pvtest/{p}");
    let sets = json(&["history", "--repo", &repo])["sets"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(sets.len(), 2, "{sets:?}");
    assert_eq!(sets[1]["backup_type"], "diff");
    let v = ok(&["verify", "--repo", &repo]);
    assert!(v.contains("is valid"), "{v}");

    let target = postgres_dir("gcs-target").join("data");
    let to = s(&target);
    let out = ok(&[
        "restore",
        "--repo",
        &repo,
        "--to",
        &to,
        "--until-lsn",
        &lsn,
        "--owner",
        "postgres",
    ]);
    assert!(out.contains("differential"), "{out}");
    let conf = std::fs::read_to_string(target.join("postgresql.auto.conf")).unwrap();
    assert!(conf.contains(&format!("--repo {repo}")), "{conf}");
    promoted_at_the_second_mark(&target);

    // archive-get straight from the emulator: the bytes archived, and a segment the
    // repository lacks is "not archived" (1).
    let seg = g
        .ls("pvtest", &format!("{p}/wal/00000001/"))
        .into_iter()
        .map(|(k, _)| k.rsplit('/').next().unwrap().to_string())
        .find(|n| n.len() == 28 && n.ends_with(".zst"))
        .expect("an archived segment");
    let name = &seg[..24];
    let got = dir.join("got");
    ok(&["archive-get", "--repo", &repo, name, &s(&got)]);
    assert_eq!(std::fs::metadata(&got).unwrap().len(), 16 << 20);
    let r = run(&[
        "archive-get",
        "--repo",
        &repo,
        "0000000100000099000000FF",
        &s(&got),
    ]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(target.parent().unwrap());
}
