//! The test file's system calls, traced with strace, and checks over them.

use super::*;

/// strace, installed with apt-get when it is missing (the tests run as root).
pub(crate) fn strace() -> &'static str {
    static FOUND: OnceLock<bool> = OnceLock::new();
    let have = || {
        Command::new("strace")
            .arg("-V")
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false)
    };
    let ok = *FOUND.get_or_init(|| {
        if have() {
            return true;
        }
        let apt = |args: &[&str]| {
            Command::new("apt-get")
                .args(args)
                .env("DEBIAN_FRONTEND", "noninteractive")
                .output()
                .map(|o| o.status.success())
                .unwrap_or(false)
        };
        if !apt(&["install", "-y", "-qq", "strace"]) {
            apt(&["update", "-qq"]);
            apt(&["install", "-y", "-qq", "strace"]);
        }
        have()
    });
    assert!(
        ok,
        "these tests need strace: apt-get install -y strace (scripts/setup.sh)"
    );
    "strace"
}

/// One system call on the test file, from a `strace -y -s 0` line.
#[derive(Debug, Clone)]
pub(crate) struct Ev {
    pub(crate) call: String,
    /// Bytes asked for (pread64/pwrite64/read/write).
    pub(crate) count: u64,
    pub(crate) offset: u64,
    pub(crate) ret: i64,
    /// openat flags.
    pub(crate) flags: String,
}

pub(crate) fn parse_trace(text: &str) -> Vec<Ev> {
    let mut evs = vec![];
    for line in text.lines() {
        // "-f" puts the pid first.
        let line = line.trim_start_matches(|c: char| c.is_ascii_digit() || c == ' ');
        if !line.contains("pagevault-bench-") || line.contains("unfinished") {
            continue;
        }
        let Some(paren) = line.find('(') else {
            continue;
        };
        let call = line[..paren].to_string();
        let ret: i64 = line
            .rsplit_once(") = ")
            .and_then(|(_, r)| r.split([' ', '<']).next()?.parse().ok())
            .unwrap_or(-1);
        let mut ev = Ev {
            call: call.clone(),
            count: 0,
            offset: 0,
            ret,
            flags: String::new(),
        };
        match call.as_str() {
            "openat" => {
                let args = &line[paren + 1..line.rfind(") = ").unwrap()];
                ev.flags = args.split(", ").nth(2).unwrap_or("").to_string();
            }
            "pread64" | "pwrite64" | "read" | "write" => {
                // pwrite64(3</dir/pagevault-bench-1-ab.tmp>, ""..., 65536, 0) = 65536
                let Some(gt) = line.find(">, ") else {
                    continue;
                };
                let args = &line[gt + 3..line.rfind(") = ").unwrap()];
                let parts: Vec<&str> = args.split(", ").collect();
                ev.count = parts.get(1).and_then(|s| s.parse().ok()).unwrap_or(0);
                ev.offset = parts.get(2).and_then(|s| s.parse().ok()).unwrap_or(0);
            }
            "fdatasync" | "fsync" => {}
            _ => continue,
        }
        evs.push(ev);
    }
    evs
}

pub(crate) struct Traced {
    /// The system calls on the test file while the profile ran (after the fill).
    pub(crate) phase: Vec<Ev>,
    /// All of them, the fill included.
    pub(crate) all: Vec<Ev>,
    pub(crate) json: Value,
}

pub(crate) fn traced(profile: &str) -> Traced {
    traced_with(profile, &[])
}

pub(crate) fn traced_with(profile: &str, extra: &[&str]) -> Traced {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("storage");
    std::fs::create_dir(&work).unwrap();
    let trace = dir.path().join("trace");
    let out = Command::new(strace())
        .args([
            "-f",
            "-y",
            "-s",
            "0",
            "-e",
            "trace=openat,pread64,pwrite64,read,write,fdatasync,fsync",
            "-o",
        ])
        .arg(&trace)
        .args([bin(), "bench", "--path"])
        .arg(&work)
        .args([
            "--profile",
            profile,
            "--size",
            "16M",
            "--duration",
            "0.3",
            "--json",
        ])
        .args(extra)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "bench --profile {profile} under strace failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: Value = serde_json::from_slice(&out.stdout).expect("valid JSON");
    assert_empty(&work);
    let all = parse_trace(&std::fs::read_to_string(&trace).unwrap());
    let first_open = all
        .iter()
        .position(|e| e.call == "openat")
        .expect("the test file is opened");
    assert!(
        all[first_open].flags.contains("O_CREAT") && all[first_open].flags.contains("O_EXCL"),
        "the test file is created anew: {:?}",
        all[first_open]
    );
    // The profile starts where the test file is opened again (without O_CREAT).
    let start = all
        .iter()
        .position(|e| e.call == "openat" && !e.flags.contains("O_CREAT"))
        .expect("the profile opens the test file");
    let phase = all[start..].to_vec();
    for e in &phase {
        assert!(e.ret >= 0, "{profile}: a failed call {e:?}");
        if e.call == "pread64" || e.call == "pwrite64" {
            assert_eq!(e.ret as u64, e.count, "{profile}: a short I/O {e:?}");
        }
        assert!(
            e.call != "read" && e.call != "write",
            "{profile}: I/O on the test file without an offset {e:?}"
        );
    }
    let p = &json["profiles"][0];
    assert_eq!(p["name"], profile);
    // The figures count exactly the calls issued.
    let n = |c: &str| phase.iter().filter(|e| e.call == c).count() as u64;
    assert_eq!(p["read"]["ops"], n("pread64"), "{profile}: reads counted");
    assert_eq!(
        p["write"]["ops"],
        n("pwrite64"),
        "{profile}: writes counted"
    );
    let sum = |c: &str| -> u64 { phase.iter().filter(|e| e.call == c).map(|e| e.count).sum() };
    assert_eq!(p["read"]["bytes"], sum("pread64"));
    assert_eq!(p["write"]["bytes"], sum("pwrite64"));
    // O_DIRECT when the JSON says so (and then on the data descriptor).
    let direct_open = phase
        .iter()
        .any(|e| e.call == "openat" && e.flags.contains("O_DIRECT"));
    assert_eq!(
        p["direct"].as_bool().unwrap(),
        direct_open,
        "{profile}: O_DIRECT in the JSON and in the openat flags"
    );
    Traced { phase, all, json }
}

pub(crate) fn assert_empty(dir: &Path) {
    let left: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "the test file was left behind: {left:?}");
}

pub(crate) fn ios<'a>(phase: &'a [Ev], call: &str) -> Vec<&'a Ev> {
    phase.iter().filter(|e| e.call == call).collect()
}

/// Each I/O starts where the previous one ended, or wraps to `start`.
pub(crate) fn assert_sequential(evs: &[&Ev], start: u64, what: &str) {
    let mut wraps = 0;
    for w in evs.windows(2) {
        let next = w[0].offset + w[0].count;
        if w[1].offset != next {
            assert_eq!(w[1].offset, start, "{what}: not sequential at {:?}", w[1]);
            wraps += 1;
        }
    }
    assert!(
        wraps * 4 <= evs.len().max(8),
        "{what}: wraps too often ({wraps} in {})",
        evs.len()
    );
}

pub(crate) fn sizes_between(evs: &[&Ev], lo: u64, hi: u64, multiple: u64, what: &str) -> usize {
    let mut distinct = std::collections::BTreeSet::new();
    for e in evs {
        assert!(
            e.count >= lo && e.count <= hi && e.count % multiple == 0,
            "{what}: size {} outside {lo}..{hi} (multiples of {multiple})",
            e.count
        );
        distinct.insert(e.count);
    }
    distinct.len()
}
