//! Keyed repositories: the marker and the WAL envelopes of a signed and an encrypted
//! repository, damaged. Read with the key, nothing but the genuine bytes is accepted,
//! and the marker's key and mode never change.

use super::*;

/// Files by relative path: (path, bytes).
pub(crate) type Files = Vec<(String, Vec<u8>)>;

pub(crate) struct Keyed {
    pub(crate) dir: tempfile::TempDir,
    /// Per repository: its path, its marker, its archived files.
    pub(crate) repos: Vec<(PathBuf, Vec<u8>, Files)>,
    pub(crate) segments: Vec<(String, Vec<u8>)>,
}

pub(crate) fn fuzz_key() -> StoreOptions {
    StoreOptions {
        key: Some(pagevault::crypt::KeySource::key([7; 32], "fuzz key")),
        ..Default::default()
    }
}

pub(crate) fn keyed_corpus() -> &'static Keyed {
    static C: std::sync::OnceLock<Keyed> = std::sync::OnceLock::new();
    C.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let segments: Vec<(String, Vec<u8>)> = (2..4u64)
            .map(|segno| {
                let name = pagevault::pg::segment_name_for(1, segno, 1 << 20);
                (name, synthetic_segment(1, segno))
            })
            .collect();
        let mut repos = vec![];
        for sign in [true, false] {
            let root = dir.path().join(if sign { "signed" } else { "sealed" });
            let repo = Repo::open(&s(&root), true, &fuzz_key()).unwrap();
            if sign {
                let k = fuzz_key().key.unwrap();
                repo.key_for(&k, pagevault::format::seal::KeyUse::Sign)
                    .unwrap();
            }
            for (name, b) in &segments {
                let p = dir.path().join(name);
                fs::write(&p, b).unwrap();
                wal::push(&repo, &p).unwrap();
            }
            let marker = fs::read(root.join("pagevault.repo")).unwrap();
            let archived = walkdir::WalkDir::new(root.join("wal"))
                .into_iter()
                .map(|e| e.unwrap())
                .filter(|e| e.file_type().is_file())
                .map(|e| {
                    let rel = e.path().strip_prefix(&root).unwrap().display().to_string();
                    (rel, fs::read(e.path()).unwrap())
                })
                .filter(|(rel, _)| rel.ends_with(".zst") || rel.ends_with(".sum"))
                .collect();
            repos.push((root, marker, archived));
        }
        Keyed {
            dir,
            repos,
            segments,
        }
    })
}

/// One damage to a marker: its mode, key, rotation or tag line edited, dropped or
/// swapped, the marker made plain, or raw bytes.
pub(crate) fn mutate_marker(r: &mut Rng, b: &mut Vec<u8>, other: &[u8]) {
    let text = String::from_utf8_lossy(b).into_owned();
    let lines: Vec<&str> = text.lines().collect();
    let edited = match r.below(6) {
        0 => Some(match text.contains("signing keyed-blake3") {
            true => text.replace("signing keyed-blake3", "encryption aes-256-gcm"),
            false => text.replace("encryption aes-256-gcm", "signing keyed-blake3"),
        }),
        1 => Some("pagevault repository 1\n".to_string()),
        2 => Some(lines[..lines.len() - 1].join("\n") + "\n"),
        3 => {
            let mut l = lines.clone();
            let i = r.below(l.len());
            l.remove(i);
            Some(l.join("\n") + "\n")
        }
        4 => Some(text.replace(
            "kdf raw",
            "rotating-to 00112233445566778899aabbccddeeff raw\nkdf raw",
        )),
        _ => None,
    };
    match edited {
        Some(t) => *b = t.into_bytes(),
        None => mutate_bytes(r, b, other),
    }
}

#[test]
fn keyed() {
    let c = keyed_corpus();
    let got = c.dir.path().join("got");
    drive(6, 10, |r| {
        let k = r.below(c.repos.len());
        let (root, marker, archived) = &c.repos[k];
        let genuine = Repo::open(&s(root), false, &fuzz_key())
            .unwrap()
            .protection();
        let on_marker = r.chance(50);
        let (path, good) = if on_marker {
            let mut b = marker.clone();
            mutate_marker(r, &mut b, &c.repos[1 - k].1);
            fs::write(root.join("pagevault.repo"), &b).unwrap();
            (root.join("pagevault.repo"), marker.clone())
        } else {
            let (rel, good) = &archived[r.below(archived.len())];
            let mut b = good.clone();
            let other = &archived[r.below(archived.len())].1;
            mutate_bytes(r, &mut b, other);
            fs::write(root.join(rel), &b).unwrap();
            (root.join(rel), good.clone())
        };
        let mut outcome = "refused on open";
        if let Ok(repo) = Repo::open(&s(root), false, &fuzz_key()) {
            assert_eq!(
                repo.protection(),
                genuine,
                "the marker's key or mode changed"
            );
            outcome = "opened, every fetch refused";
            for (name, want) in &c.segments {
                let _ = fs::remove_file(&got);
                if wal::fetch(&repo, name, &got).is_ok() {
                    assert_eq!(
                        &fs::read(&got).unwrap(),
                        want,
                        "a forged {name} was accepted"
                    );
                    outcome = "opened, genuine bytes fetched";
                }
                let _ = wal::summary::read(&repo, name);
            }
        }
        // Without the key: nothing may panic or hang (and nothing is authenticated).
        if let Ok(repo) = Repo::open(&s(root), false, &StoreOptions::default()) {
            for (name, _) in &c.segments {
                let _ = wal::fetch(&repo, name, &got);
            }
        }
        fs::write(&path, good).unwrap();
        outcome
    });
}
