//! Object storage for real: MinIO (S3) and Azurite (Azure Blob) on 127.0.0.1. Striped
//! round trips over one store and over both, a PostgreSQL full + diff + WAL chain
//! through object-store repositories, retention, a server killed mid-upload, and
//! the bad inputs (credentials, bucket, damaged or missing stripe objects).

mod common;
use common::pg::{give_to_postgres, postgres_dir, promoted_at_the_second_mark, Pg};
use common::stores::{shared, unique, Minio, AZ_KEY, S3_SECRET};
use common::*;
use pagevault::repo::wal::summary;
use std::time::{Duration, Instant};

fn source_tree(name: &str) -> tempfile::TempDir {
    let t = tempfile::Builder::new().prefix(name).tempdir().unwrap();
    make_tree(&t.path().join("src"));
    // Large enough for several parts (S3's minimum part is 5 MiB).
    std::fs::write(
        t.path().join("src/base/big"),
        bytes(7, 23 * 1024 * 1024 + 5, false),
    )
    .unwrap();
    t
}

fn no_secrets(text: &str) {
    assert!(!text.contains(S3_SECRET), "the S3 secret leaked: {text}");
    assert!(!text.contains(AZ_KEY), "the Azure key leaked: {text}");
}

fn round_trip(devices: &[String], tmp: &std::path::Path) {
    let src = tmp.join("src");
    let mut args = vec!["backup", "--source"];
    let src_spec = format!("files:{}", s(&src));
    args.push(&src_spec);
    for d in devices {
        args.extend(["--to", d.as_str()]);
    }
    args.extend(["--compress", "lz4", "--json"]);
    let r = run(&args);
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    no_secrets(&r.stdout);
    no_secrets(&r.stderr);
    let out: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(out["stripes"].as_array().unwrap().len(), devices.len());
    assert_eq!(out["object_store"]["retries"], 0, "{out}");
    // Upload parts in flight are bounded and reported: at most 72 MiB per stripe here.
    let upload = out["config"]["device_buffer_memory"].as_u64().unwrap();
    assert!(
        upload > 0 && upload <= devices.len() as u64 * (72 << 20),
        "{upload}"
    );

    let mut from = vec![];
    for d in devices {
        from.extend(["--from", d.as_str()]);
    }
    let mut v = vec!["verify"];
    v.extend(&from);
    assert!(ok(&v).contains("is valid"));
    let target = tmp.join("restored");
    let t = s(&target);
    let mut r = vec!["restore", "--to", t.as_str()];
    r.extend(&from);
    ok(&r);
    assert_same_tree(&src, &target);
    std::fs::remove_dir_all(&target).unwrap();
    let mut h = vec!["header", "--json"];
    h.extend(&from[..2]);
    let hdr = ok(&h);
    no_secrets(&hdr);
}

#[test]
fn striped_round_trips_over_s3_and_over_both_stores() {
    let st = shared();
    let tmp = source_tree("pv-os-rt");
    let p = unique("rt");
    let s3: Vec<String> = (1..=3)
        .map(|i| format!("s3://pvtest/{p}/s3-{i}.pv"))
        .collect();
    round_trip(&s3, tmp.path());
    let listed = st.minio.admin(&["ls", "pvtest", &p]);
    assert_eq!(listed.lines().count(), 3, "{listed}");
    for l in listed.lines() {
        let size: u64 = l.split('\t').nth(1).unwrap().parse().unwrap();
        assert!(size > 4096, "{l}");
    }

    let both = vec![
        format!("s3://pvtest/{p}/both-1.pv"),
        format!("azure://pvtest/{p}/both-2.pv"),
        format!("azure://pvtest/{p}/both-3.pv"),
    ];
    round_trip(&both, tmp.path());
    assert_eq!(st.azurite.admin(&["ls", "pvtest", &p]).lines().count(), 2);
    // Every upload was completed: no parts or uncommitted blocks left anywhere.
    assert_eq!(st.minio.admin(&["uploads", "pvtest"]), "");
    assert_eq!(st.azurite.admin(&["uploads", "pvtest"]), "");
}

#[test]
fn damaged_missing_and_unreachable_objects_are_clear_errors() {
    let st = shared();
    let tmp = source_tree("pv-os-bad");
    let p = unique("bad");
    let a = format!("s3://pvtest/{p}/a.pv");
    let b = format!("azure://pvtest/{p}/b.pv");
    let src = format!("files:{}", s(&tmp.path().join("src")));
    ok(&["backup", "--source", &src, "--to", &a, "--to", &b]);

    // Truncated, then deleted: each named, and restore writes nothing.
    st.azurite
        .admin(&["truncate", "pvtest", &format!("{p}/b.pv"), "1000000"]);
    let e = fails(&["verify", "--from", &a, "--from", &b], 1);
    assert!(e.contains(&b), "{e}");
    st.minio.admin(&["rm", "pvtest", &format!("{p}/a.pv")]);
    let target = tmp.path().join("never");
    let e = fails(
        &["restore", "--from", &a, "--from", &b, "--to", &s(&target)],
        1,
    );
    assert!(e.contains(&a) && e.contains("does not exist"), "{e}");
    assert!(!target.exists());

    // Wrong credentials: refused before anything is read, and the secret never shown.
    let r = run_env(
        &["backup", "--source", &src, "--to", &a],
        &[("AWS_SECRET_ACCESS_KEY", "not-the-secret")],
    );
    assert_eq!(r.code, 1);
    assert!(r.stderr.contains("refused the credentials"), "{}", r.stderr);
    assert!(!r.stderr.contains("not-the-secret"), "{}", r.stderr);
    let bad_az = std::env::var("AZURE_STORAGE_CONNECTION_STRING")
        .unwrap()
        .replace(AZ_KEY, &AZ_KEY.replace("Eby8", "Xby8"));
    let r = run_env(
        &["backup", "--source", &src, "--to", &b],
        &[("AZURE_STORAGE_CONNECTION_STRING", &bad_az)],
    );
    assert_eq!(r.code, 1);
    assert!(r.stderr.contains("refused the credentials"), "{}", r.stderr);
    assert!(!r.stderr.contains("Xby8"), "{}", r.stderr);

    // Missing bucket and container.
    let e = backup_fails(&src, "s3://no-such-bucket/x.pv", &[], 1);
    assert!(e.contains("bucket does not exist"), "{e}");
    let e = backup_fails(&src, "azure://nosuchcontainer/x.pv", &[], 1);
    assert!(e.contains("container does not exist"), "{e}");
    // Plain HTTP to a remote endpoint is refused; a bucket alone is no stripe name.
    let endpoint = ["--s3-endpoint", "http://example.com:9000"];
    let e = backup_fails(&src, "s3://pvtest/x.pv", &endpoint, 1);
    assert!(e.contains("only to a loopback address"), "{e}");
    let e = backup_fails(&src, "s3://pvtest", &[], 1);
    assert!(e.contains("names a bucket, not an object"), "{e}");
}

/// Issue 20: an archived object is streamed to a temp file, never held whole in memory,
/// and one larger than the largest file its name's kind allows is refused before a byte
/// of it is read (archive-get exits 126: damage, not the archive's end).
#[test]
fn archived_objects_over_their_kind_s_limit_are_refused() {
    let _st = shared();
    let tmp = tempfile::tempdir().unwrap();
    let repo = format!("s3://pvtest/{}/repo", unique("walsize"));
    let h = tmp.path().join("00000002.history");
    std::fs::write(&h, "1\t0/5000100\tno recovery target specified\n").unwrap();
    ok(&["init", "--repo", &repo]);
    ok(&["archive-push", "--repo", &repo, &s(&h)]);
    // Into the repository: the marker read once at the opening, the put, the marker
    // read again (still plain).
    let h4 = tmp.path().join("00000004.history");
    std::fs::write(&h4, "1\t0/5000100\tx\n2\t0/6000100\ty\n").unwrap();
    let j: serde_json::Value =
        serde_json::from_str(&ok(&["archive-push", "--repo", &repo, &s(&h4), "--json"])).unwrap();
    assert_eq!(j["outcome"], "archived", "{j}");
    assert_eq!(j["object_store"]["requests"], 3, "{j}");
    let got = tmp.path().join("got");
    ok(&["archive-get", "--repo", &repo, "00000002.history", &s(&got)]);
    assert_eq!(std::fs::read(&got).unwrap(), std::fs::read(&h).unwrap());
    // 20 MB where a history file (at most 16 MiB) is archived.
    let big = tmp.path().join("big");
    std::fs::create_dir(&big).unwrap();
    std::fs::write(big.join("f"), bytes(5, 20 << 20, false)).unwrap();
    let object = format!("{repo}/wal/00000003/00000003.history.zst");
    let source = format!("files:{}", s(&big));
    ok(&[
        "backup",
        "--source",
        &source,
        "--to",
        &object,
        "--compress",
        "none",
    ]);
    let dest = tmp.path().join("dest");
    refused_capped(
        &[
            "archive-get",
            "--repo",
            &repo,
            "00000003.history",
            &s(&dest),
        ],
        126,
        &[&object, "more than the 16842904 it may hold"],
    );
    assert!(!dest.exists());
}

fn history(repo: &str) -> Vec<serde_json::Value> {
    json(&["history", "--repo", repo])["sets"]
        .as_array()
        .unwrap()
        .clone()
}

/// `restore --repo REPO --to TARGET --until-lsn LSN --owner postgres [EXTRA]`: stdout.
fn restore_to_lsn(repo: &str, target: &std::path::Path, lsn: &str, extra: Option<&str>) -> String {
    let to = s(target);
    let mut a = vec!["restore", "--repo", repo, "--to", &to, "--until-lsn", lsn];
    a.extend(["--owner", "postgres"]);
    a.extend(extra);
    ok(&a)
}

/// Full + diff + WAL through an object-store repository, restored to a marked
/// point, then retention. `extra` adds stripes outside the repository.
fn postgres_chain(repo: &str, stripes: &str, extra: &[String]) {
    let st = shared();
    ok(&[
        "init",
        "--repo",
        repo,
        "--s3-endpoint",
        &st.minio.endpoint(),
    ]);
    let archive = format!(
        "{} archive-push %p --repo {repo} --s3-endpoint {}",
        bin(),
        st.minio.endpoint()
    );
    let pg = Pg::start(true, Some(&archive));
    pg.pgbench_init(2);
    pg.sql("CREATE TABLE marks(id int PRIMARY KEY)");
    let url = format!("{}?pgdata={}", pg.url(), s(&pg.data));
    let mut full = vec![
        "backup",
        "--source",
        &url,
        "--repo",
        repo,
        "--stripes",
        stripes,
        "--compress",
        "zstd",
    ];
    for e in extra {
        full.extend(["--to", e.as_str()]);
    }
    let out = ok(&full);
    no_secrets(&out);
    pg.sql("UPDATE pgbench_accounts SET abalance = abalance + 3 WHERE aid <= 2000");
    pg.sql("INSERT INTO marks VALUES (1)");
    pg.sql("CHECKPOINT");
    ok(&[
        "backup",
        "--source",
        &url,
        "--repo",
        repo,
        "--type",
        "diff",
        "--stripes",
        stripes,
    ]);
    pg.sql("INSERT INTO marks VALUES (2)");
    let lsn = pg.sql("SELECT pg_current_wal_insert_lsn()");
    pg.sql("INSERT INTO marks VALUES (3)");
    let seg = pg.sql("SELECT pg_walfile_name(pg_current_wal_lsn())");
    pg.sql("SELECT pg_switch_wal()");
    pg.wait_archived(&seg);
    assert_eq!(pg.sql("SELECT failed_count FROM pg_stat_archiver"), "0");
    let sets = history(repo);
    assert_eq!(sets.len(), 2);
    assert_eq!(sets[1]["backup_type"], "diff");
    assert_eq!(sets[1]["base_set"], sets[0]["set_id"]);
    no_secrets(&serde_json::to_string(&sets).unwrap());

    let target = postgres_dir("os-target").join("data");
    let out = restore_to_lsn(repo, &target, &lsn, None);
    assert!(out.contains("differential"), "{out}");
    let conf = std::fs::read_to_string(target.join("postgresql.auto.conf")).unwrap();
    assert!(conf.contains(&format!("--repo {repo}")), "{conf}");
    no_secrets(&conf);
    promoted_at_the_second_mark(&target);
    let _ = std::fs::remove_dir_all(target.parent().unwrap());

    // Merge inside the object store (stripes read with ranged GETs): a full with the
    // diff's end that restores alone to the same point.
    // No --scratch: a private directory in TMPDIR, removed after.
    let tmp = postgres_dir("os-scratch");
    let r = run_env(
        &["merge", "--repo", repo, "--compress", "lz4", "--json"],
        &[("TMPDIR", &s(&tmp))],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let m: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(
        std::fs::read_dir(&tmp).unwrap().count(),
        0,
        "the scratch directory is removed"
    );
    // Another codec than the full's: every chunk compressed again.
    assert_eq!(m["backup"]["kept_frames"], 0, "{m}");
    let merged = m["set_id"].as_str().unwrap().to_string();
    let sets = history(repo);
    assert_eq!(sets.len(), 3);
    assert_eq!(sets[2]["set_id"], merged.as_str());
    assert_eq!(sets[2]["backup_type"], "full");
    assert_eq!(sets[2]["stop_lsn"], sets[1]["stop_lsn"]);
    let target = postgres_dir("os-merged").join("data");
    let out = restore_to_lsn(repo, &target, &lsn, Some("--json"));
    let r: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(r["chain"][0]["set_id"], merged.as_str(), "{r}");
    let r = Pg::adopt(&target);
    r.wait_promoted();
    assert_eq!(
        r.sql("SELECT string_agg(id::text, ',' ORDER BY id) FROM marks"),
        "1,2"
    );
    drop(r);
    let _ = std::fs::remove_dir_all(target.parent().unwrap());

    // Retention: a second full; keeping one full expires the first, its diff and the
    // merged full, and the WAL before the kept full's start.
    ok(&["backup", "--source", &url, "--repo", repo, "--stripes", "1"]);
    let sets = history(repo);
    let kept_start = sets[3]["start_wal"].as_str().unwrap().to_string();
    let dry = json(&["expire", "--repo", repo, "--keep-full", "1", "--dry-run"]);
    assert_eq!(dry["expired"].as_array().unwrap().len(), 3, "{dry}");
    assert_eq!(history(repo).len(), 4, "a dry run removes nothing");
    let e = json(&["expire", "--repo", repo, "--keep-full", "1"]);
    let wal_gone: Vec<&str> = e["wal_expired"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert!(!wal_gone.is_empty(), "{e}");
    assert!(wal_gone.iter().all(|w| w[8..] < kept_start[8..]), "{e}");
    let sets = history(repo);
    assert_eq!(sets.len(), 1);
    assert_eq!(sets[0]["backup_type"], "full");
    // What is kept still restores and verifies.
    ok(&["verify", "--repo", repo]);
}

#[test]
fn postgres_chain_through_an_s3_repository_striped_over_three_objects() {
    let repo = format!("s3://pvtest/{}", unique("pg-s3"));
    postgres_chain(&repo, "3", &[]);
    // The expired sets' objects are gone too: only the kept set's stripe remains.
    let prefix = repo.trim_start_matches("s3://pvtest/");
    let sets_objs: Vec<String> = shared()
        .minio
        .admin(&["ls", "pvtest", &format!("{prefix}/sets/")])
        .lines()
        .map(str::to_string)
        .collect();
    assert_eq!(sets_objs.len(), 1, "{sets_objs:?}");
    // Block summaries: one beside each kept segment, read back with a ranged GET of the
    // segment's header; the expired segments' went with them.
    let r = pagevault::repo::Repo::open(&repo, false, &Default::default()).unwrap();
    let segs = pagevault::repo::wal::list(&r, 1).unwrap();
    assert!(!segs.is_empty());
    for n in &segs {
        let sum = summary::read(&r, n)
            .unwrap()
            .unwrap_or_else(|| panic!("{n} has no block summary"));
        assert!(sum.usable() && &sum.segment == n, "{n}: {}", sum.note);
    }
    let wal_objs = shared()
        .minio
        .admin(&["ls", "pvtest", &format!("{prefix}/wal/00000001/")]);
    let names: Vec<&str> = wal_objs
        .lines()
        .map(|l| l.split('\t').next().unwrap().rsplit('/').next().unwrap())
        .collect();
    for n in names.iter().filter_map(|n| n.strip_suffix(".sum")) {
        assert!(
            names.contains(&format!("{n}.zst").as_str()),
            "{n}.sum without its segment: {names:?}"
        );
    }
    assert_eq!(
        names.iter().filter(|n| n.ends_with(".sum")).count(),
        segs.len(),
        "{names:?}"
    );
}

#[test]
fn postgres_chain_through_an_azure_repository_and_both_stores() {
    let repo = format!("azure://pvtest/{}", unique("pg-az"));
    let other = format!("s3://pvtest/{}/outside.pv", unique("pg-both"));
    postgres_chain(&repo, "2", &[other]);
}

/// Starts a backup of a large random file to `dev` and kills MinIO as soon as the
/// first part of the upload has landed; restarts it after `down`.
fn backup_with_server_killed(
    m: &mut Minio,
    src: &std::path::Path,
    repo: &str,
    retry_seconds: &str,
    down: Duration,
) -> Run {
    let endpoint = m.endpoint();
    // MinIO clears a finished upload's staging files in the background: wait for that,
    // so the kill below follows this backup's first part, not an earlier upload.
    let t0 = Instant::now();
    while m.staging_files() > 0 {
        // Slower when other tests load the machine (seen once at 30 s).
        if t0.elapsed() > Duration::from_secs(90) {
            let left = std::process::Command::new("find")
                .arg(m.dir.join("data/.minio.sys/multipart"))
                .args(["-type", "f", "-printf", "%p %s %TT\\n"])
                .output()
                .unwrap();
            panic!(
                "staging never cleared:\n{}",
                String::from_utf8_lossy(&left.stdout)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let child = std::process::Command::new(bin())
        .args([
            "backup",
            "--source",
            &format!("files:{}", s(src)),
            "--repo",
            repo,
            "--s3-endpoint",
            &endpoint,
            "--json",
        ])
        .env("PAGEVAULT_RETRY_SECONDS", retry_seconds)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while m.staging_parts() == 0 {
        assert!(t0.elapsed() < Duration::from_secs(60), "no upload started");
        std::thread::sleep(Duration::from_millis(5));
    }
    m.kill();
    std::thread::sleep(down);
    m.restart();
    let out = child.wait_with_output().unwrap();
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

#[test]
fn server_killed_mid_upload_retries_or_fails_cleanly() {
    shared();
    let mut m = Minio::start();
    m.admin(&["mkbucket", "crash"]);
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    std::fs::create_dir(&src).unwrap();
    std::fs::write(src.join("data"), bytes(11, 320 << 20, false)).unwrap();
    let repo_of = |name: &str| format!("s3://crash/{name}");

    // Down for a second: the retries carry the backup through.
    let repo = repo_of("survives");
    let r = backup_with_server_killed(&mut m, &src, &repo, "60", Duration::from_secs(1));
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    let out: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    assert!(
        out["object_store"]["retries"].as_u64().unwrap() > 0,
        "the kill should have cost retries: {out}"
    );
    let endpoint = m.endpoint();
    let e = ["--s3-endpoint", endpoint.as_str()];
    let v = ok(&["verify", "--repo", &repo, e[0], e[1]]);
    assert!(v.contains("is valid"), "{v}");

    // Down longer than the retry budget: the backup fails, aborts its upload once the
    // server is back, and records nothing.
    let repo = repo_of("fails");
    let r = backup_with_server_killed(&mut m, &src, &repo, "2", Duration::from_secs(6));
    // A store that did not answer: exit 3, try again later (docs/PROGRAMS.md).
    assert_eq!(r.code, 3, "{}\n{}", r.stdout, r.stderr);
    assert!(r.stderr.contains("s3://crash/fails"), "{}", r.stderr);
    assert_eq!(m.admin(&["uploads", "crash"]), "", "orphaned parts");
    let listed = m.admin(&["ls", "crash", "fails/sets/"]);
    assert_eq!(listed, "", "no stripe object may be left: {listed}");
    // Either the repository holds no set, or (killed before its marker) is none at all.
    let h = run(&["history", "--repo", &repo, e[0], e[1], "--json"]);
    if h.code == 0 {
        assert!(h.stdout.contains("\"sets\": []"), "{}", h.stdout);
    } else {
        assert!(
            h.stderr.contains("not a pagevault repository"),
            "{}",
            h.stderr
        );
    }
    let _ = give_to_postgres;
}

#[test]
fn interrupted_backups_abort_their_uploads_and_record_nothing() {
    let st = shared();
    // A MinIO of its own (its staging directory shows when a part is stored) and an
    // Azure container of its own: other tests' uploads stay out of the counts.
    let m = Minio::start();
    m.admin(&["mkbucket", "sig"]);
    st.azurite.admin(&["mkbucket", "sigtest"]);
    let endpoint = m.endpoint();
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    std::fs::create_dir(&src).unwrap();
    // Incompressible, at zstd:19 on one thread: the upload lasts well past the signal.
    std::fs::write(src.join("data"), bytes(21, 96 << 20, false)).unwrap();
    let spawn = |to: &[&str]| {
        let mut c = std::process::Command::new(bin());
        c.args(["backup", "--source", &format!("files:{}", s(&src))])
            .args(to)
            .args(["--compress", "zstd:19", "--threads", "1"])
            .args(["--s3-endpoint", &endpoint]);
        c.stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };

    // Ctrl-C during a backup into an S3 repository of 2 stripes, once a part is stored.
    let repo = "s3://sig/repo";
    let child = spawn(&["--repo", repo, "--stripes", "2"]);
    let (r, _) = signal_when(child, "-INT", || m.staging_parts() > 0);
    assert_eq!(r.code, 130, "128 + SIGINT\n{}\n{}", r.stdout, r.stderr);
    assert!(r.stderr.contains("interrupted by SIGINT"), "{}", r.stderr);
    assert!(r.stderr.contains("no set was recorded"), "{}", r.stderr);
    assert_eq!(
        m.admin(&["uploads", "sig"]),
        "",
        "orphaned multipart uploads"
    );
    let left = m.admin(&["ls", "sig", "repo/sets/"]);
    assert_eq!(left, "", "no stripe object may be left: {left}");
    let h = run(&[
        "history",
        "--repo",
        repo,
        "--s3-endpoint",
        &endpoint,
        "--json",
    ]);
    if h.code == 0 {
        let v: serde_json::Value = serde_json::from_str(&h.stdout).unwrap();
        assert_eq!(v["sets"].as_array().map(Vec::len), Some(0), "{v}");
    }

    // SIGTERM (a service manager stopping us) during a block upload to Azure.
    let staged = || !st.azurite.admin(&["uploads", "sigtest"]).is_empty();
    let child = spawn(&["--to", "azure://sigtest/x.pv"]);
    let (r, _) = signal_when(child, "-TERM", staged);
    assert_eq!(r.code, 143, "128 + SIGTERM\n{}\n{}", r.stdout, r.stderr);
    assert!(r.stderr.contains("interrupted by SIGTERM"), "{}", r.stderr);
    assert_eq!(
        st.azurite.admin(&["uploads", "sigtest"]),
        "",
        "staged blocks left"
    );
    assert_eq!(st.azurite.admin(&["ls", "sigtest"]), "", "a blob was left");

    // An interrupted backup over an earlier one of the same name leaves the earlier one.
    let small = tmp.path().join("small");
    std::fs::create_dir(&small).unwrap();
    std::fs::write(small.join("a"), bytes(3, 100_000, true)).unwrap();
    let kept = "azure://sigtest/kept.pv";
    ok(&[
        "backup",
        "--source",
        &format!("files:{}", s(&small)),
        "--to",
        kept,
    ]);
    let child = spawn(&["--to", kept]);
    let (r, _) = signal_when(child, "-INT", staged);
    assert_eq!(r.code, 130, "{}", r.stderr);
    let v = ok(&["verify", "--from", kept]);
    assert!(v.contains("is valid"), "{v}");
}

#[test]
fn encrypted_sets_and_repositories_round_trip_over_s3() {
    let _st = shared();
    let tmp = source_tree("pv-os-crypt");
    let key = tmp.path().join("key");
    std::fs::write(&key, bytes(11, 32, false)).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let key = s(&key);
    let src = tmp.path().join("src");
    let source = format!("files:{}", s(&src));
    let p = unique("crypt");
    // Two encrypted stripes in S3: round trip, and no key is one clear error.
    let (a, b) = (
        format!("s3://pvtest/{p}/e-1.pv"),
        format!("s3://pvtest/{p}/e-2.pv"),
    );
    ok(&backup_args(
        &source,
        &[&a, &b],
        &["--compress", "zstd", "--key-file", &key],
    ));
    let e = fails(&["verify", "--from", &a, "--from", &b], 1);
    assert!(e.contains("is encrypted: give --key-file"), "{e}");
    let target = tmp.path().join("restored");
    ok(&[
        "restore",
        "--from",
        &a,
        "--from",
        &b,
        "--to",
        &s(&target),
        "--key-file",
        &key,
    ]);
    assert_same_tree(&src, &target);
    std::fs::remove_dir_all(&target).unwrap();
    // An S3 repository made encrypted by its first backup refuses a plain one.
    let repo = format!("s3://pvtest/{p}/repo");
    ok(&[
        "backup",
        "--source",
        &source,
        "--repo",
        &repo,
        "--key-file",
        &key,
        "--stripes",
        "2",
    ]);
    let e = fails(&["backup", "--source", &source, "--repo", &repo], 1);
    assert!(e.contains("is encrypted") && e.contains("refused"), "{e}");
    ok(&[
        "restore",
        "--repo",
        &repo,
        "--to",
        &s(&target),
        "--key-file",
        &key,
    ]);
    assert_same_tree(&src, &target);
    std::fs::remove_dir_all(&target).unwrap();

    // key rotate in both stores: every stripe written anew with its key block
    // rewrapped and every byte after its first 512 the same; the new key opens the
    // repository, the old one is refused, and no upload is left behind.
    let new_key = tmp.path().join("new-key");
    std::fs::write(&new_key, bytes(12, 32, false)).unwrap();
    std::fs::set_permissions(&new_key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let new_key = s(&new_key);
    let st = shared();
    let azure_repo = format!("azure://pvtest/{p}/repo");
    ok(&[
        "backup",
        "--source",
        &source,
        "--repo",
        &azure_repo,
        "--key-file",
        &key,
        "--stripes",
        "2",
    ]);
    type Admin<'a> = &'a dyn Fn(&[&str]) -> String;
    let stores: [(&str, Admin); 2] = [
        (&repo, &|a| st.minio.admin(a)),
        (&azure_repo, &|a| st.azurite.admin(a)),
    ];
    for (repo, admin) in stores {
        let prefix = format!("{p}/repo/sets/");
        let objects: Vec<(String, String)> = admin(&["ls", "pvtest", &prefix])
            .lines()
            .map(|l| {
                let (k, size) = l.split_once('\t').unwrap();
                (k.to_string(), size.to_string())
            })
            .collect();
        assert_eq!(objects.len(), 2, "{repo}: {objects:?}");
        let sha = |k: &str, from: &str| admin(&["sha", "pvtest", k, from]);
        let before: Vec<(String, String)> = objects
            .iter()
            .map(|(k, _)| (sha(k, "0"), sha(k, "512")))
            .collect();
        let r = rotate(repo, &key, ["--new-key-file", &new_key]);
        assert_eq!(
            (r["stripes"].as_u64(), r["stripes_already"].as_u64()),
            (Some(2), Some(0)),
            "{r}"
        );
        let after = admin(&["ls", "pvtest", &prefix]);
        for ((k, size), (whole, tail)) in objects.iter().zip(&before) {
            assert!(
                after.contains(&format!("{k}\t{size}")),
                "{repo}: {k} {size}: {after}"
            );
            assert_ne!(&sha(k, "0"), whole, "{repo}: {k}'s key block changed");
            assert_eq!(&sha(k, "512"), tail, "{repo}: {k}'s data is untouched");
        }
        assert_eq!(
            admin(&["uploads", "pvtest"]),
            "",
            "{repo}: an upload left behind"
        );
        let e = fails(&["verify", "--repo", repo, "--key-file", &key], 1);
        assert!(e.contains("wrong key"), "{repo}: {e}");
        ok(&[
            "restore",
            "--repo",
            repo,
            "--to",
            &s(&target),
            "--key-file",
            &new_key,
        ]);
        assert_same_tree(&src, &target);
        std::fs::remove_dir_all(&target).unwrap();
    }
}

/// Issue 55: every round trip of a store costs a restore its time. A stripe is opened
/// with its first and last bytes GET at once (their answers tell its size: no HEAD),
/// which hold the header, the tail and the manifest; then its body in one read-ahead GET
/// from the first frame on. A stripe shorter than those ranges is read the same way.
#[test]
fn a_restore_from_an_object_store_makes_only_the_requests_it_needs() {
    let _st = shared();
    let t = tempfile::tempdir().unwrap();
    let small = t.path().join("small");
    std::fs::create_dir_all(&small).unwrap();
    std::fs::write(small.join("one"), b"a file of a few bytes").unwrap();
    let big = t.path().join("big");
    make_tree(&big);
    for (name, src) in [("big", &big), ("small", &small)] {
        let dev = format!("s3://pvtest/{}/one.pv", unique("requests"));
        let source = format!("files:{}", s(src));
        ok(&["backup", "--source", &source, "--to", &dev]);
        let to = t.path().join(format!("out-{name}"));
        let j: serde_json::Value =
            serde_json::from_str(&ok(&["restore", "--from", &dev, "--to", &s(&to), "--json"]))
                .unwrap();
        assert_same_tree(src, &to);
        assert_eq!(j["object_store"]["requests"], 3, "{name}: {j}");
    }
}
