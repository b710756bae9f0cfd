//! `archive-push --async`: PostgreSQL hands each WAL file to a local spool and goes on;
//! a background pusher stores them in the repository. Nothing is lost when the store
//! goes away, the pusher is killed mid-batch, the spool's disk fills or the server
//! restarts: once things recover the repository's WAL is gap-free (a restore to the
//! newest point recovers every row) and every segment has its block summary.

mod common;

use common::pg::{check_restored, postgres_dir, restore_repo, Pg};
use common::stores::{shared, Minio};
use common::*;
use pagevault::repo::wal::summary;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

fn rows(pg: &Pg) -> String {
    pg.sql("SELECT count(*) || '/' || sum(g) FROM t")
}

/// pagevault run as postgres, whose spool it is (as root it is refused), with `--json`.
fn json_as_postgres(args: &[&str]) -> serde_json::Value {
    let mut a = args.to_vec();
    a.push("--json");
    serde_json::from_str(&common::pg::as_postgres(bin(), &a)).expect("valid JSON")
}

/// WAL files waiting in the spool (not their summaries and source identities).
fn waiting(spool: &Path) -> usize {
    fs::read_dir(spool.join("ready")).map_or(0, |d| {
        d.filter_map(|e| e.ok())
            .filter(|e| {
                let n = e.file_name().to_string_lossy().into_owned();
                !n.starts_with('.') && ![".sum", ".src", ".done"].iter().any(|s| n.ends_with(s))
            })
            .count()
    })
}

fn wait_empty(spool: &Path, secs: u64) {
    let t0 = Instant::now();
    while waiting(spool) > 0 {
        assert!(
            t0.elapsed() < Duration::from_secs(secs),
            "{} files still spooled; pusher log:\n{}",
            waiting(spool),
            fs::read_to_string(spool.join("pusher.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn pusher_state(spool: &Path) -> serde_json::Value {
    serde_json::from_slice(&fs::read(spool.join("pusher.json")).unwrap_or_default())
        .unwrap_or(serde_json::Value::Null)
}

/// Kills the spool's pusher when the test ends, passed or not: a pusher retries a dead
/// store for ever, by design, and would outlive a failed test.
struct StopPusher(PathBuf);

impl Drop for StopPusher {
    fn drop(&mut self) {
        let Some(pid) = pusher_state(&self.0)["pid"].as_u64() else {
            return;
        };
        // Only while that pid is still this spool's pusher (pids are reused).
        let cmd = fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let spool = self.0.to_string_lossy();
        if String::from_utf8_lossy(&cmd).contains(spool.as_ref()) {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
        }
    }
}

fn add(pg: &Pg, from: u32, to: u32) {
    pg.sql(&format!(
        "INSERT INTO t SELECT g FROM generate_series({from}, {to}) g"
    ));
}

#[test]
fn async_archiving_loses_nothing_through_a_store_outage_a_killed_pusher_and_a_restart() {
    let _ = shared(); // the credentials in the environment
    let mut m = Minio::start();
    m.admin(&["mkbucket", "pvas"]);
    let ep = m.endpoint();
    let repo = "s3://pvas/r";
    ok(&["init", "--repo", repo, "--s3-endpoint", &ep]);
    let dir = postgres_dir("async");
    let spool = dir.join("spool");
    let _stop = StopPusher(spool.clone());
    // Each push against a dead store gives up after 2 s (then the pusher backs off).
    std::env::set_var("PAGEVAULT_RETRY_SECONDS", "2");
    let push = format!(
        "{} archive-push %p --repo {repo} --s3-endpoint {ep} --async --spool {} --spool-max 40M",
        bin(),
        spool.display()
    );
    let mut pg = Pg::start(true, Some(&push));
    pg.sql("CREATE TABLE t AS SELECT g FROM generate_series(1, 1000) g");
    let url = format!("{}?pgdata={}", pg.url(), pg.data.display());
    ok(&[
        "backup",
        "--source",
        &url,
        "--repo",
        repo,
        "--s3-endpoint",
        &ep,
    ]);

    // Segments that waited (archiving off) are spooled ahead by the first push.
    let set_cmd = |cmd: &str| {
        pg.sql(&format!("ALTER SYSTEM SET archive_command = '{cmd}'"));
        pg.sql("SELECT pg_reload_conf()");
    };
    set_cmd("");
    let mut n = 1000;
    let mut last = String::new();
    for _ in 0..3 {
        add(&pg, n + 1, n + 1000);
        n += 1000;
        last = pg.sql("SELECT pg_walfile_name(pg_current_wal_lsn())");
        pg.sql("SELECT pg_switch_wal()");
    }
    set_cmd(&push);
    pg.wait_archived(&last);
    assert!(
        pg.log().contains("and 2 files ready after it"),
        "{}",
        pg.log()
    );

    // A batch costs two requests a file (the segment, its summary) and a few for the
    // batch: the pusher's lock held, three segments wait, then a drain by hand.
    wait_empty(&spool, 60);
    let t0 = Instant::now();
    let lock = loop {
        match pagevault::sys::lock_file(&spool.join("pusher.lock")).unwrap() {
            Some(l) => break l,
            None => assert!(t0.elapsed() < Duration::from_secs(60), "the pusher runs on"),
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    for _ in 0..3 {
        add(&pg, n + 1, n + 1000);
        n += 1000;
        pg.switch_and_wait();
    }
    assert_eq!(waiting(&spool), 3);
    drop(lock);
    let j = json_as_postgres(&[
        "archive-push",
        "--drain",
        "--spool",
        &spool.to_string_lossy(),
        "--repo",
        repo,
        "--s3-endpoint",
        &ep,
    ]);
    let requests = j["object_store"]["requests"].as_u64().unwrap();
    assert_eq!(j["pushed"], 3, "{j}");
    assert!((6..=12).contains(&requests), "{j}");

    // The store goes away: archiving goes on into the spool, the pusher fails and says so.
    m.kill();
    for _ in 0..4 {
        add(&pg, n + 1, n + 1000);
        n += 1000;
        pg.switch_and_wait();
    }
    assert!(waiting(&spool) >= 4, "{} spooled", waiting(&spool));
    let t0 = Instant::now();
    while pusher_state(&spool)["last_error"].is_null() {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "{}",
            pusher_state(&spool)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    add(&pg, n + 1, n + 1000);
    n += 1000;
    pg.switch_and_wait();
    let log = pg.log();
    assert!(
        log.contains("WARNING: the pusher has failed to archive")
            && log.contains("past its limit of 40 MiB"),
        "{log}"
    );

    // The pusher is killed mid-batch; the store comes back; the next push starts a new
    // pusher, which finishes the killed one's work.
    let pid = pusher_state(&spool)["pid"].as_u64().unwrap();
    assert!(Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap()
        .success());
    m.restart();
    // PostgreSQL restarts while files wait.
    pg.stop();
    pg.pg_ctl_start();
    add(&pg, n + 1, n + 1000);
    n += 1000;
    pg.switch_and_wait();
    wait_empty(&spool, 120);
    let state = pusher_state(&spool);
    assert_ne!(state["pid"].as_u64(), Some(pid), "{state}");
    assert!(state["last_error"].is_null(), "{state}");
    let want = rows(&pg);
    assert_eq!(want, format!("{n}/{}", (n as u64) * (n as u64 + 1) / 2));
    let last = pg.switch_and_wait();
    wait_empty(&spool, 60);
    pg.stop();

    // Every segment has its summary beside it.
    let listed = m.admin(&["ls", "pvas", &format!("r/wal/{}/", &last[..8])]);
    let keys: Vec<&str> = listed
        .lines()
        .filter_map(|l| l.split('\t').next())
        .collect();
    let segs: Vec<&str> = keys
        .iter()
        .filter_map(|k| k.rsplit('/').next()?.strip_suffix(".zst"))
        .filter(|n| n.len() == 24)
        .collect();
    let sums = keys.iter().filter(|k| k.ends_with(".sum")).count();
    assert!(
        segs.len() >= 7 && sums == segs.len(),
        "{} segments, {sums} summaries:\n{listed}",
        segs.len()
    );

    // The summaries stored are those made one after another from the archived
    // segments, though the spool made them several at once, each completed with the
    // record continued from the one before.
    let opts = pagevault::device::object::StoreOptions {
        s3_endpoint: Some(ep.clone()),
        key: None,
    };
    let r = pagevault::repo::Repo::open(repo, false, &opts).unwrap();
    let got = tempfile::tempdir().unwrap();
    let mut names: Vec<&str> = segs.clone();
    names.sort();
    let mut prev: Option<summary::Summary> = None;
    let mut covered = 0;
    for name in names {
        let to = got.path().join(name);
        ok(&[
            "archive-get",
            name,
            &s(&to),
            "--repo",
            repo,
            "--s3-endpoint",
            &ep,
            "--prefetch",
            "0",
        ]);
        let bytes = std::fs::read(&to).unwrap();
        let follows = prev.as_ref().filter(|p| {
            pagevault::pg::parse_segment_name(&p.segment, 16 << 20).map(|(t, n)| (t, n + 1))
                == pagevault::pg::parse_segment_name(name, 16 << 20)
        });
        let want = summary::summarize(
            name,
            *blake3::hash(&bytes).as_bytes(),
            &bytes,
            8192,
            15,
            follows,
        );
        let stored = summary::read(&r, name).unwrap().unwrap();
        assert_eq!(stored, want, "{name}");
        covered += usize::from(follows.is_some() && stored.usable());
        prev = Some(want);
    }
    assert!(covered >= 5, "{covered} summaries continued the one before");

    // Gap-free: the newest point has every row.
    let (target, j) = restore_repo(repo, &["--s3-endpoint", &ep]);
    assert_eq!(j["wal"]["verified"], true, "{j}");
    check_restored(&target, &want, rows);
}

/// Unmounts the small file system on drop.
struct Tmpfs(std::path::PathBuf);

impl Drop for Tmpfs {
    fn drop(&mut self) {
        // The pusher may linger a moment after its last push.
        for _ in 0..50 {
            if Command::new("umount")
                .arg(&self.0)
                .status()
                .is_ok_and(|s| s.success())
            {
                return;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

#[test]
fn a_full_spool_fails_the_push_and_pg_wal_keeps_the_segment_until_the_repository_returns() {
    let dir = postgres_dir("fullspool");
    let spool = dir.join("spool");
    let _stop = StopPusher(spool.clone());
    fs::create_dir(&spool).unwrap();
    let uid = String::from_utf8(
        Command::new("id")
            .args(["-u", "postgres"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    // Room for two segments and their summaries, not three.
    let mounted = Command::new("mount")
        .args([
            "-t",
            "tmpfs",
            "-o",
            &format!("size=40m,mode=0700,uid={}", uid.trim()),
            "tmpfs",
        ])
        .arg(&spool)
        .status()
        .unwrap();
    assert!(
        mounted.success(),
        "cannot mount a tmpfs (the tests run as root)"
    );
    let _mount = Tmpfs(spool.clone());
    let repo_dir = dir.join("repo");
    let repo = s(&repo_dir);
    ok(&["init", "--repo", &repo]);
    let push = format!(
        "{} archive-push %p --repo {repo} --async --spool {}",
        bin(),
        spool.display()
    );
    let pg = Pg::start(true, Some(&push));
    pg.sql("CREATE TABLE t AS SELECT g FROM generate_series(1, 1000) g");
    let url = format!("{}?pgdata={}", pg.url(), pg.data.display());
    ok(&["backup", "--source", &url, "--repo", &repo]);

    // The repository cannot be written (its directory closed to the server's user):
    // the spool fills, then pushes fail and pg_wal keeps what follows.
    let chmod = |mode: &str| {
        assert!(Command::new("chmod")
            .args([mode, &repo])
            .status()
            .unwrap()
            .success())
    };
    chmod("000");
    let mut n = 1000;
    for _ in 0..4 {
        add(&pg, n + 1, n + 1000);
        n += 1000;
        pg.sql("SELECT pg_switch_wal()");
    }
    let t0 = Instant::now();
    while pg.sql_num::<u64>("SELECT failed_count FROM pg_stat_archiver") == 0 {
        assert!(t0.elapsed() < Duration::from_secs(60), "{}", pg.log());
        std::thread::sleep(Duration::from_millis(200));
    }
    let log = pg.log();
    assert!(
        log.contains("is full: PostgreSQL keeps the file and retries"),
        "{log}"
    );
    let ready = fs::read_dir(pg.data.join("pg_wal/archive_status"))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .ends_with(".ready")
        })
        .count();
    assert!(ready >= 1, "no .ready file left in pg_wal");
    // status shows the backlog and the pusher's failure (read as root: the repository is
    // closed only to the server's user).
    let t0 = Instant::now();
    let st = loop {
        let st = json(&["status", "--repo", &repo, "--spool", &s(&spool)]);
        if !st["spool"]["pusher_error"].is_null() || t0.elapsed() > Duration::from_secs(30) {
            break st;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(st["spool"]["files"].as_u64().unwrap() >= 2, "{st}");
    assert!(
        st["spool"]["pusher_error"]
            .as_str()
            .unwrap()
            .contains("ermission denied"),
        "{st}"
    );
    let prom = ok(&[
        "status",
        "--repo",
        &repo,
        "--spool",
        &s(&spool),
        "--prometheus",
    ]);
    assert!(prom.contains("pagevault_spool_files{"), "{prom}");

    // The repository returns: the pusher empties the spool, PostgreSQL's retries
    // succeed, and the WAL in the repository is gap-free.
    chmod("700");
    wait_empty(&spool, 120);
    add(&pg, n + 1, n + 1000);
    n += 1000;
    let want = rows(&pg);
    assert_eq!(want, format!("{n}/{}", (n as u64) * (n as u64 + 1) / 2));
    pg.switch_and_wait();
    wait_empty(&spool, 60);
    // By hand, with nothing left: says so.
    let drain = [
        "archive-push",
        "--drain",
        "--spool",
        &s(&spool),
        "--repo",
        &repo,
    ];
    let out = common::pg::as_postgres(bin(), &drain);
    assert!(
        out.contains("pushed 0 files") && out.contains("0 files wait"),
        "{out}"
    );
    // Root may not write into the spool of postgres: refused, naming the owner and the fix.
    let r = run(&drain);
    assert_ne!(r.code, 0);
    for w in ["spool", "is refused", "(postgres)", "chown"] {
        assert!(r.stderr.contains(w), "no '{w}' in: {}", r.stderr);
    }
    let j = json_as_postgres(&drain);
    assert_eq!(
        (j["ran"].clone(), j["pushed"].clone()),
        (true.into(), 0.into()),
        "{j}"
    );
    assert_eq!(j["left"]["files"], 0, "{j}");
    drop(pg);
    let (target, j) = restore_repo(&repo, &[]);
    assert_eq!(j["wal"]["verified"], true, "{j}");
    check_restored(&target, &want, rows);
}

/// pagevault as postgres, whatever its exit: (code, stderr).
fn try_as_postgres(args: &[&str]) -> (i32, String) {
    let out = Command::new("runuser")
        .args(["-u", "postgres", "--", bin()])
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    (out.status.code().unwrap_or(-1), err)
}

/// The async spool is used only when it is a directory of the archiving user that no one
/// else may write, and nothing in it is reached through a link: a spool another user
/// made or opened wide, a `ready/` that is a link to pg_wal, a WAL file planted as a
/// link, and a `pusher.log` planted as a link are each refused (the file stays with
/// PostgreSQL, which retries) or not followed.
#[test]
fn async_archiving_refuses_a_spool_another_user_could_write_and_follows_no_link() {
    use std::os::unix::fs::{symlink, PermissionsExt};
    let dir = postgres_dir("spool_trust");
    let pg = Pg::start(true, None);
    pg.sql("CREATE TABLE t AS SELECT g FROM generate_series(1, 1000) g");
    // Two complete segments, copied out of pg_wal (a stand-in pg_wal of postgres's).
    let wal = dir.join("wal");
    fs::create_dir(&wal).unwrap();
    let mut segs = vec![];
    for _ in 0..2 {
        pg.sql("SELECT pg_logical_emit_message(false, 'pagevault-test', 'x')");
        let seg = pg.sql("SELECT pg_walfile_name(pg_current_wal_lsn())");
        pg.sql("SELECT pg_switch_wal()");
        fs::copy(pg.data.join("pg_wal").join(&seg), wal.join(&seg)).unwrap();
        segs.push(seg);
    }
    common::pg::give_to_postgres(&dir);
    let repo = s(&dir.join("repo"));
    ok(&["init", "--repo", &repo]);
    let push = |seg: &str, spool: &Path| {
        try_as_postgres(&[
            "archive-push",
            &s(&wal.join(seg)),
            "--repo",
            &repo,
            "--async",
            "--spool",
            &s(spool),
            "--look-ahead",
            "0",
        ])
    };
    let nobody = common::pg::uid_of("nobody");
    let mkdir = |name: &str, mode: u32, uid: Option<u32>| {
        let d = dir.join(name);
        fs::create_dir(&d).unwrap();
        fs::set_permissions(&d, fs::Permissions::from_mode(mode)).unwrap();
        let pg_uid = fs::metadata(&dir).unwrap().uid();
        std::os::unix::fs::chown(&d, Some(uid.unwrap_or(pg_uid)), None).unwrap();
        d
    };
    use std::os::unix::fs::MetadataExt;

    // Another user's spool, and one anyone may write (with a planted history file).
    let theirs = mkdir("theirs", 0o755, Some(nobody));
    let open = mkdir("open", 0o777, None);
    fs::create_dir(open.join("ready")).unwrap();
    fs::set_permissions(open.join("ready"), fs::Permissions::from_mode(0o777)).unwrap();
    fs::write(
        open.join("ready/00000002.history"),
        "1\t0/3000000\tforged\n",
    )
    .unwrap();
    for (d, says) in [
        (&theirs, format!("uid {nobody} (nobody) with mode 0755")),
        (&open, "with mode 0777".to_string()),
    ] {
        let (code, err) = push(&segs[0], d);
        assert_ne!(code, 0, "{err}");
        for w in [s(d).as_str(), &says, "is refused", "chown", "chmod 700"] {
            assert!(err.contains(w), "no '{w}' in: {err}");
        }
    }
    let pushed = walkdir::WalkDir::new(dir.join("repo").join("wal"))
        .into_iter()
        .filter(|e| e.as_ref().is_ok_and(|e| e.file_type().is_file()))
        .count();
    assert_eq!(pushed, 0, "nothing was pushed");
    assert!(!open.join("pusher.log").exists());

    // ready/ a link to pg_wal: refused, pg_wal untouched.
    let linked = mkdir("linked", 0o700, None);
    symlink(&wal, linked.join("ready")).unwrap();
    let (code, err) = push(&segs[0], &linked);
    assert_ne!(code, 0, "{err}");
    assert!(err.contains("symbolic link"), "{err}");
    assert!(wal.join(&segs[0]).is_file() && wal.join(&segs[1]).is_file());

    // In postgres's own spool: a WAL file planted as a link is not taken as spooled
    // (PostgreSQL keeps the segment and retries), and a pusher.log planted as a link is
    // not written through.
    let mine = mkdir("mine", 0o700, None);
    let ready = mkdir("mine/ready", 0o700, None);
    symlink(wal.join(&segs[0]), ready.join(&segs[0])).unwrap();
    let victim = dir.join("postgresql.auto.conf");
    fs::write(&victim, "keep\n").unwrap();
    symlink(&victim, mine.join("pusher.log")).unwrap();
    let (code, err) = push(&segs[0], &mine);
    assert_ne!(code, 0, "{err}");
    assert!(err.contains("not a regular file"), "{err}");
    fs::remove_file(ready.join(&segs[0])).unwrap();
    for seg in &segs {
        let (code, err) = push(seg, &mine);
        assert_eq!(code, 0, "{err}");
    }
    wait_empty(&mine, 60);
    assert_eq!(fs::read_to_string(&victim).unwrap(), "keep\n");
    assert!(fs::symlink_metadata(mine.join("pusher.log"))
        .unwrap()
        .is_file());
    for seg in &segs {
        let dest = dir.join(format!("got-{seg}"));
        let r = run(&["archive-get", seg, &s(&dest), "--repo", &repo]);
        assert_eq!(r.code, 0, "{}", r.stderr);
        assert_eq!(fs::read(&dest).unwrap(), fs::read(wal.join(seg)).unwrap());
    }
}

/// `--async --sign` into a new repository: the pusher makes it signed, as a push
/// without `--async` would, and stores every WAL file signed, not sealed (issue 52,
/// item 9a).
#[test]
fn an_async_signed_push_makes_a_new_repository_signed() {
    let dir = postgres_dir("async-sign");
    let (_, key) = common::pg::keys_for_postgres(&dir, &bytes(9, 32, false));
    let repo = dir.join("repo");
    // Made plain on purpose; the first signed push makes it signed.
    ok(&["init", "--repo", &s(&repo)]);
    let spool = dir.join("spool");
    let _stop = StopPusher(spool.clone());
    let push = format!(
        "{} archive-push %p --repo {} --async --spool {} --sign --key-file {key}",
        bin(),
        repo.display(),
        spool.display()
    );
    let pg = Pg::start(true, Some(&push));
    pg.sql("CREATE TABLE t AS SELECT g FROM generate_series(1, 1000) g");
    pg.switch_and_wait();
    wait_empty(&spool, 60);
    let marker = fs::read_to_string(repo.join("pagevault.repo")).unwrap();
    assert!(marker.contains("signing keyed-blake3"), "{marker}");
    let mut signed = 0;
    for t in fs::read_dir(repo.join("wal")).unwrap() {
        let t = t.unwrap().path();
        if !t.is_dir() || t.ends_with("damaged") {
            continue;
        }
        for f in fs::read_dir(&t).unwrap() {
            let f = f.unwrap().path();
            let b = fs::read(&f).unwrap();
            assert!(b.starts_with(b"PVWALSIG"), "{} is not signed", f.display());
            signed += 1;
        }
    }
    assert!(signed >= 2, "{signed} archived files");
}
