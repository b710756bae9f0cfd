//! The binary: a few runs on damaged input under a capped address space.

use super::*;

/// Runs the binary with the address space capped and a time limit; it must end with
/// one of `codes`, without a panic.
pub(crate) fn run_bounded(args: &[&str], codes: &[i32]) -> Run {
    let cap = CAPPED_KIB.to_string();
    let mut a = vec!["-c", "ulimit -v $0 && exec timeout 60 \"$@\"", &cap, bin()];
    a.extend_from_slice(args);
    let out = std::process::Command::new("sh")
        .args(&a)
        .env("MALLOC_ARENA_MAX", "2")
        .output()
        .unwrap();
    let r = Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    assert!(
        codes.contains(&r.code) && !r.stderr.contains("panicked"),
        "pagevault {args:?} exited {} (expected one of {codes:?}):\n{}\n{}",
        r.code,
        r.stdout,
        r.stderr
    );
    r
}

#[test]
fn binary() {
    let (sets, cat, w) = (stripe_corpus(), catalog_corpus(), wal_corpus());
    let work = tempfile::tempdir().unwrap();
    let sandbox = Sandbox::new();
    drive(4, 15, |r| match r.below(3) {
        0 => {
            let mut set = sets.sets[r.below(sets.sets.len())].clone();
            let other = sets.sets[0][0].clone();
            if r.chance(30) {
                mutate_manifest(r, &mut set);
            } else {
                let i = r.below(set.len());
                mutate_stripe(r, &mut set[i], &other);
            }
            let paths: Vec<String> = (0..set.len())
                .map(|i| s(&work.path().join(format!("{i}.pv"))))
                .collect();
            let mut args = vec![*r.pick(&["verify", "restore", "header", "files"])];
            for (p, b) in paths.iter().zip(&set) {
                fs::write(p, b).unwrap();
                args.extend(["--from", p]);
            }
            let to = s(&sandbox.target());
            if args[0] == "restore" {
                args.extend(["--to", &to]);
            }
            let code = run_bounded(&args, &[0, 1]).code;
            sandbox.check("restore");
            ["stripe: exit 0", "stripe: exit 1"][code as usize]
        }
        1 => {
            let chain = r.chance(50);
            let half = cat.records.len() / 2;
            let mut recs = match chain {
                true => cat.records[half..].to_vec(),
                false => cat.records[..half].to_vec(),
            };
            let i = r.below(recs.len());
            match serde_json::from_slice::<Value>(&recs[i]) {
                Ok(_) if r.chance(50) => mutate_record(r, &mut recs, i),
                Ok(mut v) if r.chance(50) => {
                    mutate_json(r, &mut v);
                    recs[i] = serde_json::to_vec(&v).unwrap();
                }
                _ => {}
            }
            let at = work.path().join("repo");
            scratch_repo(cat, &at, &recs, chain);
            let spec = s(&at);
            let to = s(&sandbox.target());
            let args: &[&str] = match r.below(5) {
                0 => &["history", "--repo", &spec],
                1 => &["verify", "--repo", &spec],
                2 => &["restore", "--repo", &spec, "--to", &to],
                3 => &["merge", "--repo", &spec],
                _ => &["expire", "--repo", &spec, "--keep-full", "1", "--dry-run"],
            };
            let code = run_bounded(args, &[0, 1]).code;
            sandbox.check("restore of a repository");
            ["catalog: exit 0", "catalog: exit 1"][code as usize]
        }
        _ => {
            let (rel, good) = &w.archived[r.below(w.archived.len())];
            if !rel.ends_with(".zst") {
                return "-";
            }
            let mut b = good.clone();
            mutate_archived(r, rel, &mut b, &w.archived[0].1);
            let at = work.path().join("walrepo");
            let _ = fs::remove_dir_all(&at);
            fs::create_dir_all(at.join("wal")).unwrap();
            fs::write(at.join("pagevault.repo"), b"pagevault repository 1\n").unwrap();
            let dir = at.join(rel).parent().unwrap().to_path_buf();
            fs::create_dir_all(&dir).unwrap();
            fs::write(at.join(rel), &b).unwrap();
            let name = rel
                .rsplit('/')
                .next()
                .unwrap()
                .strip_suffix(".zst")
                .unwrap();
            let dest = work.path().join("got");
            let args = ["archive-get", "--repo", &s(&at), name, &s(&dest)];
            let code = run_bounded(&args, &[0, 1, 126]).code;
            let _ = fs::remove_file(&dest);
            match code {
                0 => "archive-get: exit 0",
                1 => "archive-get: exit 1",
                _ => "archive-get: exit 126",
            }
        }
    });
}
