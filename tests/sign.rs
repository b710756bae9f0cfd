//! Signed sets (issue 20, item 1): a plain set whose every frame and manifest carry a
//! keyed BLAKE3 tag. Round trips, a missing or wrong key, and the attacks of someone who
//! can write the storage but has no key: each is refused with one clear error and
//! nothing is written outside the restore target. A signed repository refuses unsigned
//! sets, and key rotate keeps its sets readable.

mod common;
use common::forge::*;
use common::*;
use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// Every path under `root` but `skip`, with its size: what a failed restore must leave.
fn snapshot(root: &Path, skip: &Path) -> BTreeMap<String, u64> {
    walkdir::WalkDir::new(root)
        .into_iter()
        .filter_entry(|e| e.path() != skip)
        .map(|e| e.unwrap())
        .map(|e| (s(e.path()), e.metadata().unwrap().len()))
        .collect()
}

/// A signed stripe's manifest JSON: the zstd bytes before the 32-byte tag.
fn signed_manifest(b: &[u8]) -> serde_json::Value {
    let t = &b[b.len() - 64..];
    let (off, len, raw) = (
        u64_at(t, 8) as usize,
        u64_at(t, 16) as usize,
        u64_at(t, 24) as usize,
    );
    let json = zstd::bulk::decompress(&b[off..off + len - 32], raw).unwrap();
    serde_json::from_slice(&json).unwrap()
}

#[test]
fn signed_sets_round_trip_in_every_codec_and_name_their_key() {
    let (dir, src) = tree_in_tempdir();
    let key = key_file(dir.path(), "key", 1, false);
    let other = key_file(dir.path(), "other", 2, false);
    let source = format!("files:{}", s(&src));
    for codec in ["none", "lz4", "zstd"] {
        let stripes: Vec<String> = (0..2)
            .map(|i| s(&dir.path().join(format!("{codec}{i}.pv"))))
            .collect();
        let to: Vec<&str> = stripes.iter().map(String::as_str).collect();
        ok(&backup_args(
            &source,
            &to,
            &["--compress", codec, "--key-file", &key, "--sign"],
        ));
        for st in &stripes {
            let b = fs::read(st).unwrap();
            assert_eq!(u32_at(&b, 8) & 0xffff, 4, "format version 4");
            assert_eq!((b[41], b[42]), (0, 1), "not encrypted, keyed BLAKE3");
            assert_eq!(&b[64..68], b"PVKB");
            assert_eq!(signed_manifest(&b)["format_version"], 4);
        }
        let mut v = vec!["verify", "--key-file", &key];
        v.extend(from_args(&stripes));
        assert_eq!(json(&v)["valid"], true);
        let out = dir.path().join(format!("out-{codec}"));
        let outs = s(&out);
        let mut r = vec!["restore", "--to", &outs, "--key-file", &key];
        r.extend(from_args(&stripes));
        ok(&r);
        assert_same_tree(&src, &out);
        let mut h = vec!["header", "--key-file", &key];
        h.extend(from_args(&stripes));
        assert!(ok(&h).contains("keyed BLAKE3"));
        let mut f = vec!["files", "--key-file", &key];
        f.extend(from_args(&stripes));
        assert!(ok(&f).contains("base/16384/1259"));
    }
    // Without a key every reader stops at once, naming the key id; with another key
    // it names both ids.
    let stripes = vec![
        s(&dir.path().join("lz40.pv")),
        s(&dir.path().join("lz41.pv")),
    ];
    let outs = s(&dir.path().join("refused"));
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
            e.contains("is signed: give --key-file")
                && e.contains("key id")
                && e.trim().lines().count() == 1,
            "{cmd:?}: {e}"
        );
        a.extend(["--key-file", &other]);
        let e = fails(&a, 1);
        assert!(
            e.contains("signed with key id")
                && e.contains("wrong key or passphrase")
                && e.trim().lines().count() == 1,
            "{cmd:?}: {e}"
        );
    }
    assert!(!dir.path().join("refused").exists());
    // --sign without a key fails before anything is written; with --encrypt the set
    // is encrypted (authenticated already).
    let set = s(&dir.path().join("x.pv"));
    let e = backup_fails(&source, &set, &["--sign"], 1);
    assert!(e.contains("--sign needs a key"), "{e}");
    assert!(!Path::new(&set).exists());
    backup_files(&src, &set, &["--sign", "--encrypt", "--key-file", &key]);
    assert_eq!(fs::read(&set).unwrap()[41], 2, "AES-256-GCM");
}

/// A single-stripe signed set of one file of 4 MiB of incompressible data: four
/// frames of the same stored length.
fn four_frames(dir: &Path, key: &str, name: &str) -> String {
    // A source of its own: a second set's write of the same file would move its mtime.
    let src = dir.join(format!("src-{name}"));
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("data"), bytes(7, 4 << 20, false)).unwrap();
    let set = s(&dir.join(name));
    backup_files(&src, &set, &["--key-file", key, "--sign"]);
    set
}

/// Makes a frame look intact to a reader of plain sets: its stored CRC, its content
/// digest as version 2 writes it (XXH3-128 of the raw bytes) and its header CRC.
fn fix_plain(b: &mut [u8], at: usize) {
    let n = u32_at(b, at + 12) as usize;
    let stored = b[at + 80..at + 80 + n].to_vec();
    put_u32(b, at + 28, crc32c::crc32c(&stored));
    b[at + 32..at + 64].copy_from_slice(&digest(&stored));
    fix_frame(b, at);
}

#[test]
fn forged_frames_and_manifests_of_a_signed_set_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let key = key_file(dir.path(), "key", 3, false);
    let set = four_frames(dir.path(), &key, "f.pv");
    let other = four_frames(dir.path(), &key, "g.pv");
    let pristine = fs::read(&set).unwrap();
    let replay = fs::read(&other).unwrap();
    assert_eq!(frames_of(&pristine).len(), 4);
    assert_eq!(
        pristine[5 + frames_of(&pristine)[0]],
        0,
        "stored uncompressed"
    );
    let out = dir.path().join("out");
    let outs = s(&out);
    // The pristine set edited by `edit`, then verified and restored: the verify's error.
    let forge = |edit: &dyn Fn(&mut Vec<u8>)| {
        fs::write(&set, &pristine).unwrap();
        let mut b = pristine.clone();
        edit(&mut b);
        fs::write(&set, b).unwrap();
        let before = snapshot(dir.path(), &out);
        let e = fails(&["verify", "--from", &set, "--key-file", &key], 1);
        let r = fails(
            &["restore", "--from", &set, "--to", &outs, "--key-file", &key],
            1,
        );
        assert_eq!(
            snapshot(dir.path(), &out),
            before,
            "written outside the target"
        );
        let _ = fs::remove_dir_all(&out);
        assert!(r.trim().lines().count() == 1, "{r}");
        e
    };
    let forged = |e: &str| e.contains("signature does not match") && e.contains("forged");

    // A payload byte changed, its CRC and plain digest recomputed.
    let e = forge(&|b| {
        let at = frames_of(b)[1];
        b[at + 80 + 1000] ^= 0x40;
        fix_plain(b, at);
    });
    assert!(forged(&e) && e.contains("frame at offset"), "{e}");

    // Without the CRCs fixed, damage reads as damage.
    let e = forge(&|b| {
        let at = frames_of(b)[1];
        b[at + 80 + 1000] ^= 0x40;
    });
    assert!(e.contains("damaged (CRC32C"), "{e}");

    // Two frames' payloads swapped (same length), CRCs and digests recomputed.
    let e = forge(&|b| {
        let f = frames_of(b);
        let (x, y) = (f[0], f[2]);
        let n = u32_at(b, x + 12) as usize;
        assert_eq!(n, u32_at(b, y + 12) as usize);
        let a = b[x + 80..x + 80 + n].to_vec();
        let c = b[y + 80..y + 80 + n].to_vec();
        b[x + 80..x + 80 + n].copy_from_slice(&c);
        b[y + 80..y + 80 + n].copy_from_slice(&a);
        fix_plain(b, x);
        fix_plain(b, y);
    });
    assert!(forged(&e), "{e}");

    // Two frames moved by their headers (offsets swapped), header CRCs fixed.
    let e = forge(&|b| {
        let f = frames_of(b);
        let (x, y) = (f[0], f[3]);
        let (ox, oy) = (u64_at(b, x + 16), u64_at(b, y + 16));
        put_u64(b, x + 16, oy);
        put_u64(b, y + 16, ox);
        fix_frame(b, x);
        fix_frame(b, y);
    });
    assert!(forged(&e), "{e}");

    // A frame of another signed set (same key, same bytes at the same offset) put in
    // its place: bound to its set, it does not match here.
    let e = forge(&|b| {
        let (x, y) = (frames_of(b)[1], frames_of(&replay)[1]);
        let n = 80 + u32_at(b, x + 12) as usize;
        b[x..x + n].copy_from_slice(&replay[y..y + n]);
    });
    assert!(forged(&e), "{e}");

    // A frame dropped, the tail's count and body end made to match: the signed
    // manifest still counts it.
    let e = forge(&|b| {
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

    // A frame replaced by a copy of another of the set (its tag is valid): the chunk
    // it held is missing and the copied one is stored twice.
    let e = forge(&|b| {
        let f = frames_of(b);
        let n = f[1] - f[0];
        let first = b[f[0]..f[0] + n].to_vec();
        b[f[1]..f[1] + n].copy_from_slice(&first);
    });
    assert!(e.contains("stored twice"), "{e}");

    // The manifest edited (a file's mode), recompressed, its tag kept, its CRCs and
    // lengths fixed.
    let e = forge(&|b| {
        let mut m = signed_manifest(b);
        m["files"][0]["mode"] = 0o777.into();
        let raw = serde_json::to_vec(&m).unwrap();
        let mut stored = zstd::bulk::compress(&raw, 3).unwrap();
        let t = &b[b.len() - 64..];
        let (off, len) = (u64_at(t, 8) as usize, u64_at(t, 16) as usize);
        stored.extend_from_slice(&b[off + len - 32..off + len]);
        *b = with_stored_manifest(b, &stored, raw.len() as u64);
    });
    assert!(forged(&e) && e.contains("manifest"), "{e}");

    // The manifest's tag alone changed, CRCs fixed.
    let e = forge(&|b| {
        let t = &b[b.len() - 64..];
        let (off, len) = (u64_at(t, 8) as usize, u64_at(t, 16) as usize);
        b[off + len - 1] ^= 1;
        let c = crc32c::crc32c(&b[off..off + len]);
        let n = b.len();
        put_u32(b, n - 64 + 48, c);
        fix_tail(b);
    });
    assert!(forged(&e) && e.contains("manifest"), "{e}");

    // A media header field the manifest's tag binds (the creation time), CRC fixed.
    let e = forge(&|b| {
        let t = u64_at(b, 52);
        put_u64(b, 52, t + 1);
        fix_header(b);
    });
    assert!(forged(&e) && e.contains("manifest"), "{e}");

    // The pristine set still verifies and restores.
    fs::write(&set, &pristine).unwrap();
    ok(&["verify", "--from", &set, "--key-file", &key]);
    ok(&["restore", "--from", &set, "--to", &outs, "--key-file", &key]);
    assert_same_tree(&dir.path().join("src-f.pv"), &out);
}

/// A signed stripe made a plain (version 2) set that a reader of plain sets takes
/// whole: flags and key block cleared, every frame's digest the XXH3 of its raw bytes,
/// the manifest's version 2 and stored without a tag, every CRC valid.
fn downgrade(path: &Path) {
    let b = fs::read(path).unwrap();
    let mut head = b[..block_of(&b)].to_vec();
    put_u32(&mut head, 8, 2 | (64 << 16));
    head[42] = 0;
    head[64..180].fill(0);
    fix_header(&mut head);
    let frames = frames_of(&b)
        .into_iter()
        .map(|at| {
            let n = u32_at(&b, at + 12) as usize;
            let mut f = Frame {
                hdr: b[at..at + 80].to_vec(),
                stored: b[at + 80..at + 80 + n].to_vec(),
            };
            let raw = f.raw().unwrap();
            f.hdr[32..64].copy_from_slice(&digest(&raw));
            f
        })
        .collect();
    let mut manifest = signed_manifest(&b);
    manifest["format_version"] = 2.into();
    let mut parts = vec![Parts {
        head,
        frames,
        manifest,
    }];
    fix_checksums(&mut parts);
    fs::write(path, &build_set(&parts)[0]).unwrap();
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// The stripes of every set of a repository.
fn repo_stripes(repo: &Path) -> Vec<std::path::PathBuf> {
    let mut v: Vec<_> = fs::read_dir(repo.join("sets"))
        .unwrap()
        .flat_map(|d| fs::read_dir(d.unwrap().path()).unwrap())
        .map(|f| f.unwrap().path())
        .collect();
    v.sort();
    v
}

#[test]
fn a_signed_repository_refuses_unsigned_sets_and_downgrades() {
    let (dir, src) = tree_in_tempdir();
    let key = key_file(dir.path(), "key", 1, false);
    let repo = dir.path().join("repo");
    let repos = s(&repo);
    let source = format!("files:{}", s(&src));
    let backup = |extra: &[&str]| {
        let mut a = vec!["backup", "--source", &source, "--repo", &repos];
        a.extend_from_slice(extra);
        a.iter().map(|x| x.to_string()).collect::<Vec<String>>()
    };
    // A plain repository with a set becomes signed by its first signed write, and says
    // what that means for the set it held.
    ok(&strs(&backup(&[])));
    let b = json(&strs(&backup(&["--key-file", &key, "--sign"])));
    let w = b["warnings"].to_string();
    assert!(
        w.contains("signed from now on") && w.contains("1 unsigned sets"),
        "{w}"
    );
    let marker = fs::read_to_string(repo.join("pagevault.repo")).unwrap();
    assert!(marker.contains("signing keyed-blake3"), "{marker}");
    // verify --repo names the unsigned set as a failure.
    let e = fails(&["verify", "--repo", &repos, "--key-file", &key], 1);
    assert!(
        e.contains("1 of its 2 sets") && e.contains("is not encrypted or signed"),
        "{e}"
    );
    let e = fails(&["verify", "--repo", &repos], 1);
    assert!(e.contains("is signed: give --key-file"), "{e}");
    // The old set removed, every set is signed; a key alone signs into it; a write
    // without a key is refused and records nothing.
    let old = repo_stripes(&repo)
        .into_iter()
        .find(|p| fs::read(p).unwrap()[8] == 2)
        .unwrap();
    let old_id = old.parent().unwrap().file_name().unwrap().to_owned();
    fs::remove_file(
        repo.join("catalog")
            .join(format!("{}.json", old_id.to_string_lossy())),
    )
    .unwrap();
    fs::remove_dir_all(old.parent().unwrap()).unwrap();
    ok(&strs(&backup(&["--key-file", &key])));
    for st in repo_stripes(&repo) {
        assert_eq!(fs::read(st).unwrap()[8], 4, "signed");
    }
    let e = fails(&strs(&backup(&[])), 1);
    assert!(
        e.contains("is signed") && e.contains("unsigned backups are refused"),
        "{e}"
    );
    assert_eq!(fs::read_dir(repo.join("catalog")).unwrap().count(), 2);
    let r = json(&["verify", "--repo", &repos, "--key-file", &key]);
    assert_eq!(r["repo_sets_checked"], 2, "{r}");

    // The newest set downgraded to a valid plain set: a reader of plain sets takes it
    // (the forgery is complete), the repository and any reader with the key do not.
    let newest = json(&["history", "--repo", &repos])["sets"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()["set_id"]
        .as_str()
        .unwrap()
        .to_string();
    let stripe = repo.join("sets").join(&newest).join("1.pv");
    downgrade(&stripe);
    ok(&["verify", "--from", &s(&stripe)]);
    let out = dir.path().join("out");
    let outs = s(&out);
    let before = snapshot(dir.path(), &out);
    let e = fails(&["restore", "--repo", &repos, "--to", &outs], 1);
    assert!(
        e.contains("is not signed, but the repository is") && e.contains("forged"),
        "{e}"
    );
    let with_key = [
        "restore",
        "--repo",
        &repos,
        "--to",
        &outs,
        "--key-file",
        &key,
    ];
    let e = fails(&with_key, 1);
    assert!(e.contains("is not encrypted or signed"), "{e}");
    let e = fails(&["verify", "--repo", &repos, "--key-file", &key], 1);
    assert!(e.contains("1 of its 2 sets"), "{e}");
    // The marker made plain as well: a reader with the key refuses the repository.
    assert_eq!(snapshot(dir.path(), &out), before, "nothing written");
    fs::write(repo.join("pagevault.repo"), "pagevault repository 1\n").unwrap();
    let before = snapshot(dir.path(), &out);
    let e = fails(&with_key, 1);
    assert!(
        e.contains("neither encrypted nor signed") && e.contains("forged"),
        "{e}"
    );
    assert!(!out.exists(), "nothing restored");
    assert_eq!(snapshot(dir.path(), &out), before, "nothing written");
}

#[test]
fn key_rotate_keeps_signed_sets_restorable_without_rewriting_data() {
    let (dir, src) = tree_in_tempdir();
    let key = key_file(dir.path(), "key", 1, false);
    let phrase = dir.path().join("phrase");
    fs::write(&phrase, "a new passphrase\n").unwrap();
    fs::set_permissions(&phrase, fs::Permissions::from_mode(0o600)).unwrap();
    let phrase = s(&phrase);
    let repo = dir.path().join("repo");
    let repos = s(&repo);
    let source = format!("files:{}", s(&src));
    for _ in 0..2 {
        ok(&[
            "backup",
            "--source",
            &source,
            "--repo",
            &repos,
            "--key-file",
            &key,
            "--sign",
            "--stripes",
            "2",
            "--compress",
            "lz4",
        ]);
    }
    let stripes = repo_stripes(&repo);
    assert_eq!(stripes.len(), 4);
    let before: Vec<Vec<u8>> = stripes.iter().map(|p| fs::read(p).unwrap()).collect();
    let r = rotate(&repos, &key, ["--new-passphrase-file", &phrase]);
    assert_eq!(
        (r["stripes"].as_u64(), r["wal_files"].as_u64()),
        (Some(4), Some(0)),
        "{r}"
    );
    for (p, b) in stripes.iter().zip(&before) {
        let a = fs::read(p).unwrap();
        assert_eq!(
            a[..64],
            b[..64],
            "the header the manifest's tag binds is kept"
        );
        assert_ne!(a[64..180], b[64..180], "the key block changed");
        assert_eq!(a[512..], b[512..], "frames and manifest untouched");
    }
    let marker = fs::read_to_string(repo.join("pagevault.repo")).unwrap();
    assert!(
        marker.contains("signing keyed-blake3") && marker.contains("argon2id"),
        "{marker}"
    );
    let out = dir.path().join("out");
    ok(&[
        "restore",
        "--repo",
        &repos,
        "--to",
        &s(&out),
        "--passphrase-file",
        &phrase,
    ]);
    assert_same_tree(&src, &out);
    ok(&["verify", "--repo", &repos, "--passphrase-file", &phrase]);
    let e = fails(&["verify", "--repo", &repos, "--key-file", &key], 1);
    assert!(e.contains("passphrase"), "{e}");
    // A backup after the rotation is signed with the new key.
    ok(&[
        "backup",
        "--source",
        &source,
        "--repo",
        &repos,
        "--passphrase-file",
        &phrase,
    ]);
    assert_eq!(
        json(&["verify", "--repo", &repos, "--passphrase-file", &phrase])["repo_sets_checked"],
        3
    );
}

#[test]
fn sign_into_an_encrypted_repository_encrypts() {
    let (dir, src) = tree_in_tempdir();
    let key = key_file(dir.path(), "key", 1, false);
    let repo = dir.path().join("repo");
    let repos = s(&repo);
    let source = format!("files:{}", s(&src));
    ok(&[
        "backup",
        "--source",
        &source,
        "--repo",
        &repos,
        "--key-file",
        &key,
    ]);
    ok(&[
        "backup",
        "--source",
        &source,
        "--repo",
        &repos,
        "--key-file",
        &key,
        "--sign",
    ]);
    for st in repo_stripes(&repo) {
        assert_eq!(fs::read(st).unwrap()[8], 3, "encrypted");
    }
    let r = json(&["verify", "--repo", &repos, "--key-file", &key]);
    assert_eq!(r["repo_sets_checked"], 2, "{r}");
}

/// `archive-push --sign` needs a key, and writes nothing without one.
#[test]
fn archive_push_sign_needs_a_key() {
    let (dir, _src) = tree_in_tempdir();
    let wal = dir.path().join("000000010000000000000001");
    fs::write(&wal, vec![0u8; 8192]).unwrap();
    let repo = dir.path().join("repo");
    let e = fails(
        &["archive-push", &s(&wal), "--repo", &s(&repo), "--sign"],
        1,
    );
    assert!(e.contains("--sign needs a key"), "{e}");
    assert!(!repo.exists(), "no repository is created");
}
