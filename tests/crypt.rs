//! Encryption at rest (issue 20): encrypted sets round trip, hold no plaintext, refuse
//! a missing or wrong key with one clear error, and refuse forged frames; an encrypted
//! repository refuses plain writes and other keys.

mod common;
use common::forge::*;
use common::*;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// 1 MiB of a recognisable pattern, and the pattern.
const MARK: &[u8] = b"PAGEVAULT-PLAINTEXT-MARKER-0123456789";
fn marker_file(src: &Path) {
    let m: Vec<u8> = MARK.iter().copied().cycle().take(1 << 20).collect();
    fs::write(src.join("marker"), m).unwrap();
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// An encrypted two-stripe backup of a tree with the marker file; returns the stripes.
fn encrypted_set(dir: &Path, src: &Path, key: &str, codec: &str) -> Vec<String> {
    let stripes: Vec<String> = (0..2).map(|i| s(&dir.join(format!("e{i}.pv")))).collect();
    let source = format!("files:{}", s(src));
    let to: Vec<&str> = stripes.iter().map(String::as_str).collect();
    let b = json(&backup_args(
        &source,
        &to,
        &["--compress", codec, "--key-file", key, "--encrypt"],
    ));
    assert_eq!(b["stripes"].as_array().unwrap().len(), 2);
    stripes
}

#[test]
fn encrypted_sets_round_trip_and_hold_no_plaintext() {
    for codec in ["none", "lz4", "zstd"] {
        let (dir, src) = tree_in_tempdir();
        marker_file(&src);
        let key = key_file(dir.path(), "key", 1, codec == "lz4");
        let stripes = encrypted_set(dir.path(), &src, &key, codec);
        for st in &stripes {
            let b = fs::read(st).unwrap();
            assert_eq!(u32_at(&b, 8) & 0xffff, 3, "format version 3");
            assert_eq!(b[41], 2, "AES-256-GCM, frames without a CRC32C");
            assert!(!contains(&b, MARK), "{codec}: plaintext marker in {st}");
            assert!(!contains(&b, b"base/16384"), "{codec}: a file name in {st}");
        }
        let mut v = vec!["verify", "--key-file", &key];
        v.extend(from_args(&stripes));
        assert_eq!(json(&v)["valid"], true);
        let out = dir.path().join("out");
        let outs = s(&out);
        let mut r = vec!["restore", "--to", &outs, "--key-file", &key];
        r.extend(from_args(&stripes));
        ok(&r);
        assert_same_tree(&src, &out);
        let mut h = vec!["files", "--key-file", &key];
        h.extend(from_args(&stripes));
        assert!(ok(&h).contains("marker"));
        let mut h = vec!["header", "--key-file", &key];
        h.extend(from_args(&stripes));
        assert!(ok(&h).contains("AES-256-GCM"));
    }
}

#[test]
fn a_passphrase_round_trips_and_a_wrong_one_is_named() {
    let (dir, src) = tree_in_tempdir();
    let set = s(&dir.path().join("p.pv"));
    let source = format!("files:{}", s(&src));
    let good = [("PAGEVAULT_PASSPHRASE", "correct horse battery")];
    let r = run_env(&backup_args(&source, &[&set], &[]), &good);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let out = dir.path().join("out");
    let r = run_env(&["restore", "--from", &set, "--to", &s(&out)], &good);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_same_tree(&src, &out);
    let r = run_env(
        &["verify", "--from", &set],
        &[("PAGEVAULT_PASSPHRASE", "wrong")],
    );
    assert_eq!(r.code, 1);
    assert!(
        r.stderr.contains("wrong key or passphrase") && r.stderr.contains("PAGEVAULT_PASSPHRASE"),
        "{}",
        r.stderr
    );
    // A passphrase file works too, and a key file is told it is the wrong kind.
    let pf = dir.path().join("phrase");
    fs::write(&pf, "correct horse battery\n").unwrap();
    fs::set_permissions(&pf, fs::Permissions::from_mode(0o600)).unwrap();
    ok(&["verify", "--from", &set, "--passphrase-file", &s(&pf)]);
    let key = key_file(dir.path(), "key", 1, false);
    let e = fails(&["verify", "--from", &set, "--key-file", &key], 1);
    assert!(e.contains("passphrase"), "{e}");
}

#[test]
fn a_missing_or_wrong_key_is_one_clear_error() {
    let (dir, src) = tree_in_tempdir();
    let key = key_file(dir.path(), "key", 1, false);
    let other = key_file(dir.path(), "other", 2, true);
    let stripes = encrypted_set(dir.path(), &src, &key, "lz4");
    let outs = s(&dir.path().join("out"));
    for cmd in [
        vec!["verify"],
        vec!["header"],
        vec!["files"],
        vec!["restore", "--to", &outs],
    ] {
        let mut a = cmd.clone();
        a.extend(from_args(&stripes));
        let e = fails(&a, 1);
        assert!(
            e.contains("is encrypted: give --key-file or --passphrase-file")
                && e.trim().lines().count() == 1,
            "{cmd:?}: {e}"
        );
        a.extend(["--key-file", &other]);
        let e = fails(&a, 1);
        assert!(
            e.contains("wrong key or passphrase")
                && e.contains("encrypted with key id")
                && e.trim().lines().count() == 1,
            "{cmd:?}: {e}"
        );
    }
    assert!(!dir.path().join("out").join("marker").exists());
    // A plain set read with a key is refused: it cannot be authenticated.
    let plain = s(&dir.path().join("plain.pv"));
    backup_files(&src, &plain, &[]);
    let e = fails(&["verify", "--from", &plain, "--key-file", &key], 1);
    assert!(e.contains("is not encrypted"), "{e}");
    ok(&["verify", "--from", &plain]);
}

#[test]
fn key_files_must_be_private_and_32_bytes() {
    let (dir, src) = tree_in_tempdir();
    let key = key_file(dir.path(), "key", 1, false);
    fs::set_permissions(&key, fs::Permissions::from_mode(0o644)).unwrap();
    let set = s(&dir.path().join("a.pv"));
    let e = backup_fails(
        &format!("files:{}", s(&src)),
        &set,
        &["--key-file", &key],
        1,
    );
    assert!(
        e.contains("may be read by group or others") && e.contains("chmod 600"),
        "{e}"
    );
    let short = dir.path().join("short");
    fs::write(&short, [1u8; 16]).unwrap();
    fs::set_permissions(&short, fs::Permissions::from_mode(0o600)).unwrap();
    let e = backup_fails(
        &format!("files:{}", s(&src)),
        &set,
        &["--key-file", &s(&short)],
        1,
    );
    assert!(e.contains("32 bytes"), "{e}");
    let e = backup_fails(&format!("files:{}", s(&src)), &set, &["--encrypt"], 1);
    assert!(e.contains("--encrypt needs a key"), "{e}");
    assert!(!Path::new(&set).exists());
}

/// Reads a stripe, applies `edit` to its bytes, writes it back.
fn edit_stripe(path: &str, edit: impl FnOnce(&mut Vec<u8>)) {
    let mut b = fs::read(path).unwrap();
    edit(&mut b);
    fs::write(path, b).unwrap();
}

/// The frame's CRC32C of its stored bytes made valid again (sets of encryption method 1;
/// method 2's frames carry none) and its header's.
fn fix_stored(b: &mut [u8], at: usize) {
    if b[41] == 1 {
        let n = u32_at(b, at + 12) as usize;
        let c = crc32c::crc32c(&b[at + 80..at + 80 + n]);
        put_u32(b, at + 28, c);
    }
    fix_frame(b, at);
}

/// A single-stripe encrypted set of one file of 4 MiB of incompressible data: four
/// frames of the same stored length.
fn four_frames(dir: &Path) -> (String, String) {
    let src = dir.join("src");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("data"), bytes(7, 4 << 20, false)).unwrap();
    let key = key_file(dir, "key", 3, false);
    let set = s(&dir.join("f.pv"));
    backup_files(&src, &set, &["--key-file", &key]);
    (set, key)
}

#[test]
fn a_forged_frame_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (set, key) = four_frames(dir.path());
    let pristine = fs::read(&set).unwrap();
    assert_eq!(frames_of(&pristine).len(), 4);
    // The pristine set edited by `edit`, then verified: the error.
    let forge = |edit: fn(&mut Vec<u8>)| {
        fs::write(&set, &pristine).unwrap();
        edit_stripe(&set, edit);
        fails(&["verify", "--from", &set, "--key-file", &key], 1)
    };
    let forged = |e: &str| e.contains("does not authenticate") && e.contains("forged");

    // A ciphertext byte flipped, its CRCs made valid again.
    let e = forge(|b| {
        let at = frames_of(b)[1];
        b[at + 80 + 1000] ^= 0x40;
        fix_stored(b, at);
    });
    assert!(forged(&e), "{e}");

    // New sets' frames carry no CRC32C (encryption method 2): the tag is their check,
    // and a flipped byte reads as damaged or forged.
    assert_eq!(pristine[41], 2, "a new encrypted set is of method 2");
    let e = forge(|b| {
        let at = frames_of(b)[1];
        b[at + 80 + 1000] ^= 0x40;
    });
    assert!(forged(&e) && e.contains("damaged"), "{e}");
    // Their CRC field must stay zero.
    let e = forge(|b| {
        let at = frames_of(b)[1];
        put_u32(b, at + 28, 1);
        fix_frame(b, at);
    });
    assert!(e.contains("CRC32C field") && e.contains("forged"), "{e}");

    // Two frames' stored bytes swapped (same length), CRCs fixed.
    let e = forge(|b| {
        let f = frames_of(b);
        let (x, y) = (f[0], f[2]);
        let n = u32_at(b, x + 12) as usize;
        assert_eq!(n, u32_at(b, y + 12) as usize);
        let a = b[x + 80..x + 80 + n].to_vec();
        let c = b[y + 80..y + 80 + n].to_vec();
        b[x + 80..x + 80 + n].copy_from_slice(&c);
        b[y + 80..y + 80 + n].copy_from_slice(&a);
        fix_stored(b, x);
        fix_stored(b, y);
    });
    assert!(forged(&e), "{e}");

    // A frame moved to another offset by its header (offsets swapped), CRCs fixed.
    let e = forge(|b| {
        let f = frames_of(b);
        let (x, y) = (f[0], f[3]);
        let (ox, oy) = (u64_at(b, x + 16), u64_at(b, y + 16));
        put_u64(b, x + 16, oy);
        put_u64(b, y + 16, ox);
        fix_frame(b, x);
        fix_frame(b, y);
    });
    assert!(forged(&e), "{e}");

    // A frame removed, the tail's count and body end made to match: the sealed
    // manifest still counts it.
    let e = forge(|b| {
        let f = frames_of(b);
        let (x, len) = (f[3], f[3] - f[2]);
        b.drain(x..x + len);
        let n = b.len();
        let t = &mut b[n - 64..];
        let (off, end, frames) = (u64_at(t, 8), u64_at(t, 40), u64_at(t, 32));
        put_u64(t, 8, off - len as u64);
        put_u64(t, 40, end - len as u64);
        put_u64(t, 32, frames - 1);
        fix_tail(b);
    });
    assert!(e.contains("tail counts 3 frames"), "{e}");

    // The manifest's bytes changed, its CRC fixed: it no longer authenticates.
    let e = forge(|b| {
        let n = b.len();
        let (off, len) = (
            u64_at(&b[n - 64..], 8) as usize,
            u64_at(&b[n - 64..], 16) as usize,
        );
        b[off + 5] ^= 1;
        let c = crc32c::crc32c(&b[off..off + len]);
        put_u32(b, n - 64 + 48, c);
        fix_tail(b);
    });
    assert!(
        e.contains("manifest") && e.contains("does not authenticate"),
        "{e}"
    );

    // The pristine set still verifies.
    fs::write(&set, &pristine).unwrap();
    ok(&["verify", "--from", &set, "--key-file", &key]);
}

/// A set of encryption method 1 (written before commit 4a18ceb: every sealed frame under a
/// CRC32C too) still verifies, and a flipped byte in it reads as damage.
#[test]
fn a_set_of_method_1_still_reads() {
    let dir = tempfile::tempdir().unwrap();
    let (set, key) = four_frames(dir.path());
    let to_method_1 = |b: &mut Vec<u8>| {
        b[41] = 1;
        let c = crc32c::crc32c(&b[..60]);
        put_u32(b, 60, c);
        for at in frames_of(b) {
            fix_stored(b, at);
        }
    };
    edit_stripe(&set, to_method_1);
    let b = fs::read(&set).unwrap();
    assert!(frames_of(&b).iter().all(|&at| u32_at(&b, at + 28) != 0));
    ok(&["verify", "--from", &set, "--key-file", &key]);
    edit_stripe(&set, |b| {
        let at = frames_of(b)[2];
        b[at + 80 + 10] ^= 1;
    });
    let e = fails(&["verify", "--from", &set, "--key-file", &key], 1);
    assert!(e.contains("damaged (CRC32C"), "{e}");
}

/// Four first backups, each with its own key, race into a new repository, four times:
/// the marker's compare and swap lets exactly one key win; the others fail naming the
/// wrong key, and every set the repository holds opens with the winner's key.
#[test]
fn first_writers_with_different_keys_race_and_one_key_wins() {
    let (dir, src) = tree_in_tempdir();
    let source = format!("files:{}", s(&src));
    let keys: Vec<String> = (0..4)
        .map(|i| key_file(dir.path(), &format!("k{i}"), 40 + i, false))
        .collect();
    for round in 0..4 {
        let repo = s(&dir.path().join(format!("repo-{round}")));
        let runs: Vec<Run> = std::thread::scope(|sc| {
            let hs: Vec<_> = keys
                .iter()
                .map(|k| {
                    let (source, repo) = (&source, &repo);
                    sc.spawn(move || {
                        run(&[
                            "backup",
                            "--source",
                            source,
                            "--repo",
                            repo,
                            "--key-file",
                            k,
                        ])
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let won: Vec<usize> = (0..4).filter(|&i| runs[i].code == 0).collect();
        assert_eq!(
            won.len(),
            1,
            "round {round}: {:?}",
            runs.iter().map(|r| &r.stderr).collect::<Vec<_>>()
        );
        for (i, r) in runs.iter().enumerate().filter(|(i, _)| *i != won[0]) {
            assert!(
                r.stderr.contains("wrong key"),
                "round {round}, key {i}: {}",
                r.stderr
            );
        }
        let v = json(&["verify", "--repo", &repo, "--key-file", &keys[won[0]]]);
        assert_eq!(v["valid"], true, "{v}");
        assert_eq!(
            fs::read_dir(dir.path().join(format!("repo-{round}/catalog")))
                .unwrap()
                .count(),
            1
        );
    }
}

#[test]
fn an_encrypted_repository_refuses_plain_writes_and_other_keys() {
    let (dir, src) = tree_in_tempdir();
    marker_file(&src);
    let key = key_file(dir.path(), "key", 1, false);
    let other = key_file(dir.path(), "other", 2, false);
    let repo = s(&dir.path().join("repo"));
    let source = format!("files:{}", s(&src));
    ok(&[
        "backup",
        "--source",
        &source,
        "--repo",
        &repo,
        "--key-file",
        &key,
    ]);
    let marker = fs::read_to_string(dir.path().join("repo/pagevault.repo")).unwrap();
    assert!(marker.contains("encryption aes-256-gcm"), "{marker}");
    let e = fails(&["backup", "--source", &source, "--repo", &repo], 1);
    assert!(e.contains("is encrypted") && e.contains("refused"), "{e}");
    let e = fails(
        &[
            "backup",
            "--source",
            &source,
            "--repo",
            &repo,
            "--key-file",
            &other,
        ],
        1,
    );
    assert!(e.contains("wrong key") && e.contains("key id"), "{e}");
    assert_eq!(
        fs::read_dir(dir.path().join("repo/catalog"))
            .unwrap()
            .count(),
        1,
        "the refused backups recorded nothing"
    );
    let out = dir.path().join("out");
    ok(&[
        "restore",
        "--repo",
        &repo,
        "--to",
        &s(&out),
        "--key-file",
        &key,
    ]);
    assert_same_tree(&src, &out);
    ok(&["verify", "--repo", &repo, "--key-file", &key]);
    let e = fails(&["verify", "--repo", &repo], 1);
    assert!(e.contains("is encrypted: give --key-file"), "{e}");
    for st in fs::read_dir(dir.path().join("repo/sets")).unwrap() {
        for f in fs::read_dir(st.unwrap().path()).unwrap() {
            assert!(!contains(&fs::read(f.unwrap().path()).unwrap(), MARK));
        }
    }
    // The marker's mode changed by someone without the key: keyed writes and reads
    // refuse it, and nothing is stored.
    let marker_path = dir.path().join("repo/pagevault.repo");
    // As markers were before they were authenticated: no tag, no repository id.
    let untag = |m: &str| -> String {
        (m.lines()
            .filter(|l| !l.starts_with("mac ") && !l.starts_with("repository-id ")))
        .map(|l| format!("{l}\n"))
        .collect()
    };
    let swapped = marker.replace("encryption aes-256-gcm", "signing keyed-blake3");
    let backup_with = |k: &str| {
        run(&[
            "backup",
            "--source",
            &source,
            "--repo",
            &repo,
            "--key-file",
            k,
        ])
    };
    fs::write(&marker_path, &swapped).unwrap();
    let r = backup_with(&key);
    assert!(
        r.code == 1 && r.stderr.contains("damaged or forged"),
        "{}",
        r.stderr
    );
    let e = fails(&["verify", "--repo", &repo, "--key-file", &key], 1);
    assert!(e.contains("damaged or forged"), "{e}");
    // Swapped and stripped of its tag (as markers were before they were
    // authenticated): a keyed write does not take up a mode its sets contradict.
    fs::write(&marker_path, untag(&swapped)).unwrap();
    let r = backup_with(&key);
    assert!(
        r.code == 1 && r.stderr.contains("says the repository is signed"),
        "{}",
        r.stderr
    );
    assert_eq!(
        fs::read_dir(dir.path().join("repo/catalog"))
            .unwrap()
            .count(),
        1
    );
    // The genuine marker without its tag: refused to a read; a keyed write refuses
    // it too, since it names a repository id (only tagged markers do: a forger could
    // name another repository's); `key rotate` to the same key authenticates it.
    let no_tag: String = (marker.lines().filter(|l| !l.starts_with("mac ")))
        .map(|l| format!("{l}\n"))
        .collect();
    for authenticate in [false, true] {
        fs::write(&marker_path, &no_tag).unwrap();
        let e = fails(&["verify", "--repo", &repo, "--key-file", &key], 1);
        assert!(e.contains("is not authenticated"), "{e}");
        match authenticate {
            false => {
                let r = backup_with(&key);
                assert!(
                    r.code == 1 && r.stderr.contains("names a repository id"),
                    "{}",
                    r.stderr
                );
                fs::write(&marker_path, &marker).unwrap();
            }
            true => {
                ok(&[
                    "key",
                    "rotate",
                    "--repo",
                    &repo,
                    "--old-key-file",
                    &key,
                    "--new-key-file",
                    &key,
                ]);
            }
        }
        assert_eq!(fs::read_to_string(&marker_path).unwrap(), marker);
    }
    ok(&["verify", "--repo", &repo, "--key-file", &key]);

    // A plain repository with sets is not turned into an encrypted one.
    let plain = s(&dir.path().join("plain"));
    ok(&["backup", "--source", &source, "--repo", &plain]);
    let e = fails(
        &[
            "backup",
            "--source",
            &source,
            "--repo",
            &plain,
            "--key-file",
            &key,
        ],
        1,
    );
    assert!(e.contains("is not encrypted and holds 1 sets"), "{e}");
}

#[test]
fn key_rotate_rewraps_every_set_without_rewriting_data() {
    let (dir, src) = tree_in_tempdir();
    marker_file(&src);
    let key = key_file(dir.path(), "key", 1, false);
    let phrase = dir.path().join("phrase");
    fs::write(&phrase, "a new passphrase\n").unwrap();
    fs::set_permissions(&phrase, fs::Permissions::from_mode(0o600)).unwrap();
    let phrase = s(&phrase);
    let repo = s(&dir.path().join("repo"));
    let source = format!("files:{}", s(&src));
    for _ in 0..2 {
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
    }
    let stripes: Vec<std::path::PathBuf> = fs::read_dir(dir.path().join("repo/sets"))
        .unwrap()
        .flat_map(|d| fs::read_dir(d.unwrap().path()).unwrap())
        .map(|f| f.unwrap().path())
        .collect();
    assert_eq!(stripes.len(), 4);
    let before: Vec<Vec<u8>> = stripes.iter().map(|p| fs::read(p).unwrap()).collect();

    // A forged catalog record (its stripe missing) stops the rotation before it
    // starts: the marker and every stripe are as they were.
    let catalog = dir.path().join("repo/catalog");
    let first = fs::read_dir(&catalog)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let mut rec: serde_json::Value = serde_json::from_slice(&fs::read(&first).unwrap()).unwrap();
    let forged_id = "0123456789abcdef0123456789abcdef";
    rec["set_id"] = forged_id.into();
    rec["stripes"] = serde_json::json!([format!("sets/{forged_id}/1.pv")]);
    let forged = catalog.join(format!("{forged_id}.json"));
    fs::write(&forged, serde_json::to_vec(&rec).unwrap()).unwrap();
    let marker_path = dir.path().join("repo/pagevault.repo");
    let kept = [&[marker_path.clone()][..], &stripes[..]].concat();
    let to_phrase = ["--new-passphrase-file", phrase.as_str()];
    rotate_refused(
        &repo,
        &key,
        to_phrase,
        &["nothing was rotated", forged_id],
        &kept,
    );
    fs::remove_file(&forged).unwrap();

    let r = rotate(&repo, &key, ["--new-passphrase-file", &phrase]);
    assert_eq!(r["stripes"], 4, "{r}");
    for (p, b) in stripes.iter().zip(&before) {
        let a = fs::read(p).unwrap();
        assert_eq!(a.len(), b.len());
        assert_ne!(a[64..180], b[64..180], "the key block changed");
        assert_eq!(a[512..], b[512..], "the data is untouched");
    }
    let marker = fs::read_to_string(dir.path().join("repo/pagevault.repo")).unwrap();
    assert!(
        marker.contains("argon2id") && !marker.contains("rotating-to"),
        "{marker}"
    );

    // The new passphrase opens everything; the old key is refused by key id.
    let out = dir.path().join("out");
    ok(&[
        "restore",
        "--repo",
        &repo,
        "--to",
        &s(&out),
        "--passphrase-file",
        &phrase,
    ]);
    assert_same_tree(&src, &out);
    let e = fails(&["verify", "--repo", &repo, "--key-file", &key], 1);
    assert!(e.contains("encrypted with a passphrase"), "{e}");
    ok(&[
        "backup",
        "--source",
        &source,
        "--repo",
        &repo,
        "--passphrase-file",
        &phrase,
    ]);
    // Rotating again from the old key is refused: it is no longer the repository's.
    let kept = [&[marker_path][..], &stripes[..]].concat();
    let to_key = ["--new-key-file", key.as_str()];
    rotate_refused(&repo, &key, to_key, &["the old key", "passphrase"], &kept);
}

#[test]
fn an_encrypted_sqlite_backup_restores_intact_and_holds_no_rows_in_clear() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("app.db");
    {
        let c = rusqlite::Connection::open(&db).unwrap();
        c.pragma_update(None, "journal_mode", "wal").unwrap();
        c.execute_batch("CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT NOT NULL);")
            .unwrap();
        let tx = c.unchecked_transaction().unwrap();
        for i in 1..=20_000i64 {
            tx.execute(
                "INSERT INTO t VALUES (?1, ?2)",
                rusqlite::params![i, format!("SECRET-ROW-{i:08}")],
            )
            .unwrap();
        }
        tx.commit().unwrap();
    }
    let key = key_file(dir.path(), "key", 5, true);
    let set = s(&dir.path().join("db.pv"));
    let source = format!("sqlite:{}", s(&db));
    ok(&backup_args(
        &source,
        &[&set],
        &["--compress", "lz4", "--key-file", &key],
    ));
    assert!(!contains(&fs::read(&set).unwrap(), b"SECRET-ROW-"));
    let out = dir.path().join("out");
    ok(&[
        "restore",
        "--from",
        &set,
        "--to",
        &s(&out),
        "--key-file",
        &key,
    ]);
    let c = rusqlite::Connection::open(out.join("app.db")).unwrap();
    let check: String = c
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(check, "ok");
    let n: i64 = c
        .query_row(
            "SELECT count(*) FROM t WHERE v LIKE 'SECRET-ROW-%'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(n, 20_000);
}
