//! Helpers shared by the integration tests: run the real binary, build trees, compare.
#![allow(dead_code)]

pub mod delay;
pub mod forge;
pub mod oracle;
pub mod pagemask;
pub mod pg;
pub mod stores;
pub mod summaries;

/// Removes the scratch directories (`TMP/PREFIX-PID-...`) of test runs that ended over an
/// hour ago (a failed run's stay a while for a look). The shared servers are statics,
/// never dropped: each run left its MinIO, Azurite and PostgreSQL data, 12 GB in days.
pub fn sweep_ended_runs(prefix: &str) {
    let Ok(dir) = fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for e in dir.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix(prefix)
            .and_then(|r| r.strip_prefix('-'))
            .and_then(|r| r.split('-').next())
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        let ended = !Path::new(&format!("/proc/{pid}")).exists();
        let idle = e
            .metadata()
            .and_then(|m| m.modified())
            .is_ok_and(|t| t.elapsed().unwrap_or_default() > std::time::Duration::from_secs(3600));
        if ended && idle {
            let _ = fs::remove_dir_all(e.path());
        }
    }
}

/// A TCP port on 127.0.0.1 that nothing listens on right now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_pagevault")
}

pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// Sends `sig` (as `kill` takes it: -INT, -TERM) to a running pagevault once `ready`
/// holds; returns how it ended and how long it took after the signal.
pub fn signal_when(
    mut child: std::process::Child,
    sig: &str,
    ready: impl Fn() -> bool,
) -> (Run, std::time::Duration) {
    let t0 = std::time::Instant::now();
    while !ready() {
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(60),
            "the moment to signal never came"
        );
        assert!(
            child.try_wait().unwrap().is_none(),
            "ended before the signal"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let sent = std::time::Instant::now();
    let st = Command::new("kill")
        .args([sig, &child.id().to_string()])
        .status();
    assert!(st.unwrap().success());
    let out = child.wait_with_output().unwrap();
    (Run::of(&out), sent.elapsed())
}

impl Run {
    fn of(out: &Output) -> Run {
        Run {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
}

pub fn run(args: &[&str]) -> Run {
    run_env(args, &[])
}

/// Runs with extra environment variables.
pub fn run_env(args: &[&str], env: &[(&str, &str)]) -> Run {
    let out: Output = Command::new(bin())
        .args(args)
        .envs(env.iter().copied())
        .output()
        .expect("run pagevault");
    Run::of(&out)
}

/// Address space of a run of hostile input (`run_capped`): a forged size or length
/// that is allocated fails the run instead of passing unseen.
pub const CAPPED_KIB: u64 = 512 << 10;

/// Runs with the address space capped at `CAPPED_KIB` (and few malloc arenas, so the
/// cap does not depend on the number of cores).
pub fn run_capped(args: &[&str]) -> Run {
    let cap = CAPPED_KIB.to_string();
    let mut a = vec!["-c", "ulimit -v $0 && exec \"$@\"", &cap, bin()];
    a.extend_from_slice(args);
    let out: Output = Command::new("sh")
        .args(&a)
        .env("MALLOC_ARENA_MAX", "2")
        .output()
        .expect("run pagevault");
    Run::of(&out)
}

/// Runs with the address space capped and insists on a clean refusal: exit `code`, no
/// panic, and stderr holding every one of `says`. Returns stderr.
pub fn refused_capped(args: &[&str], code: i32, says: &[&str]) -> String {
    let r = run_capped(args);
    assert!(
        r.code == code && !r.stderr.contains("panicked"),
        "pagevault {args:?} should exit {code} cleanly, exited {}:\n{}\n{}",
        r.code,
        r.stdout,
        r.stderr
    );
    for s in says {
        assert!(
            r.stderr.contains(s),
            "pagevault {args:?}: expected '{s}' in: {}",
            r.stderr
        );
    }
    r.stderr
}

/// Runs and insists on success, returning stdout.
pub fn ok(args: &[&str]) -> String {
    let r = run(args);
    assert_eq!(
        r.code, 0,
        "pagevault {args:?} failed:\n{}\n{}",
        r.stdout, r.stderr
    );
    r.stdout
}

/// Runs and insists on failure with `code`, returning stderr.
pub fn fails(args: &[&str], code: i32) -> String {
    let r = run(args);
    assert_eq!(
        r.code, code,
        "pagevault {args:?} should exit {code}:\n{}\n{}",
        r.stdout, r.stderr
    );
    r.stderr
}

/// Runs `pagevault CMD --source SOURCE EXTRA...` and insists on failure with `code`,
/// returning stderr.
pub fn source_fails(cmd: &str, source: &str, extra: &[&str], code: i32) -> String {
    let mut a = vec![cmd, "--source", source];
    a.extend_from_slice(extra);
    fails(&a, code)
}

/// Runs `pagevault backup --source SOURCE --to TO EXTRA...` and insists on failure with
/// `code`, returning stderr.
pub fn backup_fails(source: &str, to: &str, extra: &[&str], code: i32) -> String {
    let mut a = vec!["--to", to];
    a.extend_from_slice(extra);
    source_fails("backup", source, &a, code)
}

/// The arguments of `pagevault backup --source SOURCE`, a `--to` for each of `to`, and
/// `extra`.
pub fn backup_args<'a>(source: &'a str, to: &[&'a str], extra: &[&'a str]) -> Vec<&'a str> {
    let mut a = vec!["backup", "--source", source];
    for t in to {
        a.extend(["--to", t]);
    }
    a.extend_from_slice(extra);
    a
}

/// Backs up `src` (a directory or one file) to the stripe file `set` with `extra` options;
/// insists on success.
pub fn backup_files(src: &Path, set: &str, extra: &[&str]) -> String {
    let source = format!("files:{}", s(src));
    let mut a = vec!["backup", "--source", &source, "--to", set];
    a.extend_from_slice(extra);
    ok(&a)
}

/// `backup --source files:SRC --to SET EXTRA... --json`, parsed.
pub fn backup_files_json(src: &Path, set: &str, extra: &[&str]) -> serde_json::Value {
    let source = format!("files:{}", s(src));
    json(&backup_args(&source, &[set], extra))
}

pub fn json(args: &[&str]) -> serde_json::Value {
    let mut a = args.to_vec();
    a.push("--json");
    serde_json::from_str(&ok(&a)).expect("valid JSON")
}

/// Deterministic pseudo-random bytes (xorshift), `text` makes them compressible.
pub fn bytes(seed: u64, n: usize, text: bool) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            if text {
                b"abcdefgh ijklmnop\n"[(x % 18) as usize]
            } else {
                x as u8
            }
        })
        .collect()
}

/// A tree with what a backup must get right: empty files, sizes that are not a
/// multiple of the page or transfer size, a sparse file, nesting, a link, modes.
/// A scratch directory holding `src/`, a sample tree (make_tree); returns both.
pub fn tree_in_tempdir() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    make_tree(&src);
    (dir, src)
}

pub fn make_tree(root: &Path) {
    fs::create_dir_all(root.join("base/16384")).unwrap();
    fs::create_dir_all(root.join("empty_dir")).unwrap();
    fs::write(root.join("empty"), b"").unwrap();
    fs::write(root.join("one_byte"), b"x").unwrap();
    fs::write(root.join("base/16384/1259"), bytes(1, 3 * 8192 + 17, false)).unwrap();
    fs::write(root.join("base/16384/2608"), bytes(2, 2_500_000, true)).unwrap();
    fs::write(root.join("base/random"), bytes(3, 1_300_001, false)).unwrap();
    let sparse = fs::File::create(root.join("sparse")).unwrap();
    sparse.set_len(5 << 20).unwrap();
    use std::os::unix::fs::FileExt;
    sparse.write_all_at(b"middle", 2 << 20).unwrap();
    fs::set_permissions(root.join("one_byte"), fs::Permissions::from_mode(0o600)).unwrap();
    // An old mtime, which a restore must bring back.
    let old = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_500_000_000);
    fs::File::options()
        .write(true)
        .open(root.join("base/random"))
        .unwrap()
        .set_modified(old)
        .unwrap();
    std::os::unix::fs::symlink("base/random", root.join("link")).unwrap();
}

/// Asserts two trees hold the same entries, bytes, modes, file mtimes and link targets.
pub fn assert_same_tree(a: &Path, b: &Path) {
    let list = |r: &Path| -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = walk(r)
            .into_iter()
            .map(|p| p.strip_prefix(r).unwrap().to_path_buf())
            .collect();
        v.sort();
        v
    };
    let (la, lb) = (list(a), list(b));
    assert_eq!(la, lb, "different entries");
    for rel in la {
        let (pa, pb) = (a.join(&rel), b.join(&rel));
        let (ma, mb) = (
            fs::symlink_metadata(&pa).unwrap(),
            fs::symlink_metadata(&pb).unwrap(),
        );
        assert_eq!(
            ma.file_type().is_symlink(),
            mb.file_type().is_symlink(),
            "{rel:?}"
        );
        if ma.file_type().is_symlink() {
            assert_eq!(
                fs::read_link(&pa).unwrap(),
                fs::read_link(&pb).unwrap(),
                "{rel:?}"
            );
            continue;
        }
        assert_eq!(
            ma.permissions().mode() & 0o7777,
            mb.permissions().mode() & 0o7777,
            "mode of {rel:?}"
        );
        if ma.is_file() {
            assert!(
                fs::read(&pa).unwrap() == fs::read(&pb).unwrap(),
                "content of {rel:?} differs"
            );
            // The manifest keeps whole seconds.
            let secs = |m: &fs::Metadata| {
                m.modified()
                    .unwrap()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_secs()
            };
            assert_eq!(secs(&ma), secs(&mb), "mtime of {rel:?}");
        }
    }
}

fn walk(r: &Path) -> Vec<PathBuf> {
    let mut out = vec![];
    for e in fs::read_dir(r).unwrap() {
        let p = e.unwrap().path();
        out.push(p.clone());
        if p.is_dir() && !p.is_symlink() {
            out.extend(walk(&p));
        }
    }
    out
}

/// The JSON a `--report` page embeds for tests and users.
pub fn report_data(page: &Path) -> serde_json::Value {
    let html = fs::read_to_string(page).expect("report written");
    let open = "<script type=\"application/json\" id=\"pagevault-data\">";
    let at = html.find(open).expect("the page embeds pagevault-data") + open.len();
    let end = at + html[at..].find("</script>").unwrap();
    serde_json::from_str(&html[at..end]).expect("pagevault-data is JSON")
}

/// The sum of a report series of integers.
pub fn series_sum(v: &serde_json::Value) -> u64 {
    v.as_array()
        .unwrap_or_else(|| panic!("not a series: {v}"))
        .iter()
        .map(|x| x.as_u64().unwrap())
        .sum()
}

pub fn s(p: &Path) -> String {
    p.display().to_string()
}

/// A private key file of 32 random bytes (raw, or base64 with a newline).
pub fn key_file(dir: &Path, name: &str, seed: u64, base64: bool) -> String {
    let p = dir.join(name);
    let key = bytes(seed, 32, false);
    if base64 {
        use base64::Engine;
        let t = base64::engine::general_purpose::STANDARD.encode(&key);
        fs::write(&p, format!("{t}\n")).unwrap();
    } else {
        fs::write(&p, &key).unwrap();
    }
    fs::set_permissions(&p, fs::Permissions::from_mode(0o600)).unwrap();
    s(&p)
}

/// `key rotate --json` of `repo` from key file `old` to `new` (`["--new-key-file", K]`
/// or `["--new-passphrase-file", P]`), which must pass: its report.
pub fn rotate(repo: &str, old: &str, new: [&str; 2]) -> serde_json::Value {
    let args = ["key", "rotate", "--repo", repo, "--old-key-file", old];
    json(&[&args[..], &new[..]].concat())
}

/// `key rotate --repo REPO --old-key-file OLD NEW_FLAG NEW` refused: exit 1, a message
/// holding each of `says`, and each of `unchanged` (the marker, stripes) byte for byte as
/// it was. Returns the message.
pub fn rotate_refused(
    repo: &str,
    old: &str,
    new: [&str; 2],
    says: &[&str],
    unchanged: &[PathBuf],
) -> String {
    let before: Vec<Vec<u8>> = unchanged.iter().map(|p| fs::read(p).unwrap()).collect();
    let args = ["key", "rotate", "--repo", repo, "--old-key-file", old];
    let e = fails(&[&args[..], &new[..]].concat(), 1);
    for w in says {
        assert!(e.contains(w), "key rotate should say '{w}': {e}");
    }
    for (p, b) in unchanged.iter().zip(&before) {
        assert!(&fs::read(p).unwrap() == b, "{} changed: {e}", p.display());
    }
    e
}

/// `--from S` for each stripe.
pub fn from_args(stripes: &[String]) -> Vec<&str> {
    stripes
        .iter()
        .flat_map(|s| ["--from", s.as_str()])
        .collect()
}

/// The set ids `history` lists, oldest first.
pub fn history_ids(repo: &str) -> Vec<String> {
    json(&["history", "--repo", repo])["sets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["set_id"].as_str().unwrap().to_string())
        .collect()
}

/// Waits (up to 60 s) for the removal a delta restore left running (`removal_pid` of its
/// report) to end.
pub fn wait_removed(r: &serde_json::Value) {
    let Some(pid) = r["delta"]["removal_pid"].as_u64() else {
        return;
    };
    // Running: its stat exists and is not a zombie's (state Z) awaiting a reaper.
    let alive = || {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .is_ok_and(|st| st.rsplit(')').next().is_some_and(|r| !r.starts_with(" Z")))
    };
    let t0 = std::time::Instant::now();
    while alive() && t0.elapsed().as_secs() < 60 {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}
