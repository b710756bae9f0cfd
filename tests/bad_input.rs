//! Every kind of bad input is a clear error with a non-zero exit, never a panic and
//! never a write outside the restore target.

mod common;
use common::forge::*;
use common::*;
use std::fs;
use std::path::Path;

struct Set {
    dir: tempfile::TempDir,
    a: String,
    b: String,
}

/// A backup of `make_tree` in 64K transfers, striped over the files named `names`.
fn tree_set(codec: &str, names: &[&str]) -> (tempfile::TempDir, Vec<String>) {
    let (dir, src) = tree_in_tempdir();
    let paths: Vec<String> = names.iter().map(|n| s(&dir.path().join(n))).collect();
    let source = format!("files:{}", s(&src));
    let mut args = vec!["backup", "--source", &source];
    for p in &paths {
        args.extend(["--to", p.as_str()]);
    }
    args.extend(["--compress", codec, "--max-transfer-size", "64K"]);
    ok(&args);
    (dir, paths)
}

fn two_stripes(codec: &str) -> Set {
    let (dir, mut p) = tree_set(codec, &["a.pv", "b.pv"]);
    let b = p.pop().unwrap();
    let a = p.pop().unwrap();
    Set { dir, a, b }
}

fn no_panic(e: &str) {
    assert!(!e.contains("panicked"), "panic: {e}");
}

/// Restores stripes `a` and `b` to `out`, insisting on failure; returns stderr.
fn restore_fails(a: &str, b: &str, out: &Path) -> String {
    fails(&["restore", "--from", a, "--from", b, "--to", &s(out)], 1)
}

fn both_fail(set: &Set, needle: &str) -> String {
    let e = fails(&["verify", "--from", &set.a, "--from", &set.b], 1);
    no_panic(&e);
    assert!(e.contains(needle), "verify: expected '{needle}' in: {e}");
    let out = set.dir.path().join("out");
    let e = restore_fails(&set.a, &set.b, &out);
    no_panic(&e);
    assert!(e.contains(needle), "restore: expected '{needle}' in: {e}");
    e
}

fn flip(path: &str, at: u64) {
    let mut b = fs::read(path).unwrap();
    b[at as usize] ^= 0x5a;
    fs::write(path, b).unwrap();
}

/// The first frame of a stripe with at least 64 stored bytes, and a byte in the middle of
/// them: small files' frames end early, and bytes in a frame's padding carry no content.
/// Frames go to whichever writer is free, so a stripe may hold only small ones.
fn payload_byte(path: &str) -> Option<(u64, u64)> {
    let b = fs::read(path).unwrap();
    let u32_at = |at: usize| u32::from_le_bytes(b[at..at + 4].try_into().unwrap()) as u64;
    let block = u32_at(12);
    let mut at = block;
    while &b[at as usize..at as usize + 4] == b"PVFR" {
        let stored = u32_at(at as usize + 12);
        if stored >= 64 {
            return Some((at, at + 80 + stored / 2));
        }
        at += (80 + stored).div_ceil(block) * block;
    }
    None
}

/// A stripe of `set` with a frame worth damaging, that frame's offset and a byte in it.
fn damageable(set: &Set) -> (&str, u64, u64) {
    [&set.b, &set.a]
        .into_iter()
        .find_map(|p| payload_byte(p).map(|(f, b)| (p.as_str(), f, b)))
        .expect("no frame of 64 bytes or more in either stripe")
}

/// Applies `edit` to the manifest of both stripes of `set`.
fn rewrite_both(set: &Set, edit: impl Fn(&mut serde_json::Value)) {
    for p in [&set.a, &set.b] {
        rewrite_manifest(p, &edit);
    }
}

/// The manifest's entry of `base/random`.
fn base_random(v: &mut serde_json::Value) -> &mut serde_json::Value {
    let files = v["files"].as_array_mut().unwrap();
    files
        .iter_mut()
        .find(|f| f["path"] == "base/random")
        .unwrap()
}

#[test]
fn truncated_stripe_is_incomplete() {
    let set = two_stripes("lz4");
    let len = fs::metadata(&set.a).unwrap().len();
    fs::File::options()
        .write(true)
        .open(&set.a)
        .unwrap()
        .set_len(len / 2)
        .unwrap();
    both_fail(&set, "incomplete");
    fs::File::options()
        .write(true)
        .open(&set.a)
        .unwrap()
        .set_len(10)
        .unwrap();
    both_fail(&set, "too short");
}

/// Flips a stored byte of a `codec` set; verify and restore must both name the frame.
/// Returns the damaged stripe and restore's stderr.
fn flipped_payload_fails(codec: &str) -> (String, String) {
    let set = two_stripes(codec);
    let (stripe, frame, byte) = damageable(&set);
    flip(stripe, byte);
    let e = both_fail(&set, &format!("frame at offset {frame}"));
    (stripe.to_string(), e)
}

#[test]
fn flipped_payload_byte_names_stripe_and_offset() {
    let (stripe, e) = flipped_payload_fails("none");
    assert!(e.contains(&stripe) && e.contains("damaged"), "{e}");
}

#[test]
fn flipped_compressed_byte_is_caught() {
    let (_, e) = flipped_payload_fails("zstd");
    assert!(e.contains("damaged"), "{e}");
}

#[test]
fn flipped_frame_header_byte_is_caught() {
    let set = two_stripes("lz4");
    flip(&set.a, 4096 + 20);
    both_fail(&set, "frame header checksum mismatch at offset 4096");
}

#[test]
fn flipped_manifest_and_tail_bytes_are_caught() {
    let set = two_stripes("lz4");
    let b = fs::read(&set.a).unwrap();
    let off = u64_at(&b[b.len() - 64..], 8);
    flip(&set.a, off + 3);
    both_fail(&set, "manifest at offset");
    let set = two_stripes("lz4");
    let len = fs::metadata(&set.b).unwrap().len();
    flip(&set.b, len - 30);
    both_fail(&set, "stripe tail checksum mismatch");
}

#[test]
fn flipped_media_header_byte_is_caught() {
    let set = two_stripes("none");
    flip(&set.a, 33);
    both_fail(&set, "media header checksum mismatch");
}

#[test]
fn not_a_stripe_at_all() {
    let set = two_stripes("none");
    fs::write(&set.a, vec![b'#'; 100_000]).unwrap();
    both_fail(&set, "PAGEVLT1");
}

#[test]
fn missing_extra_and_foreign_stripes_are_refused() {
    let set = two_stripes("none");
    let e = fails(&["verify", "--from", &set.a], 1);
    assert!(
        e.contains("missing stripe 2 of 2") && e.contains("b.pv"),
        "{e}"
    );
    let e = fails(
        &[
            "verify", "--from", &set.a, "--from", &set.b, "--from", &set.a,
        ],
        1,
    );
    assert!(e.contains("both stripe 1 of 2"), "{e}");
    let other = two_stripes("none");
    let e = fails(&["verify", "--from", &set.a, "--from", &other.b], 1);
    assert!(e.contains("belongs to backup set"), "{e}");
    let out = set.dir.path().join("out");
    let e = restore_fails(&set.a, &other.b, &out);
    assert!(e.contains("belongs to backup set"), "{e}");
    assert!(
        !out.exists(),
        "a refused restore must not create its target"
    );
}

#[test]
fn manifest_paths_that_escape_are_refused_and_nothing_is_written_outside() {
    for evil in [
        "../escaped",
        "/tmp/pagevault-escaped-absolute",
        "base/../../escaped",
        "link/inside",
    ] {
        let set = two_stripes("none");
        rewrite_both(&set, |v| base_random(v)["path"] = evil.into());
        let out = set.dir.path().join("deep/out");
        let e = restore_fails(&set.a, &set.b, &out);
        no_panic(&e);
        assert!(e.contains("manifest"), "{evil}: {e}");
        assert!(!set.dir.path().join("deep/escaped").exists());
        assert!(!set.dir.path().join("escaped").exists());
        assert!(!Path::new("/tmp/pagevault-escaped-absolute").exists());
        assert!(
            !out.exists(),
            "{evil}: nothing may be written for a refused set"
        );
    }
}

#[test]
fn forged_frame_count_is_caught() {
    let set = two_stripes("none");
    // A manifest that claims fewer frames than the stripe holds.
    rewrite_both(&set, |v| {
        let s = &mut v["stripes"][0];
        s["frames"] = (s["frames"].as_u64().unwrap() - 1).into();
    });
    let e = fails(&["verify", "--from", &set.a, "--from", &set.b], 1);
    assert!(e.contains("tail counts"), "{e}");
}

#[test]
fn forged_checksum_in_manifest_is_caught() {
    let set = two_stripes("none");
    rewrite_both(&set, |v| {
        base_random(v)["checksum"] = "ab".repeat(32).into()
    });
    both_fail(&set, "does not match its manifest checksum");
}

/// Sets the format version in a stripe's media header (with a valid header CRC).
fn set_header_version(path: &str, version: u16) {
    let mut b = fs::read(path).unwrap();
    b[8..10].copy_from_slice(&version.to_le_bytes());
    let c = crc32c::crc32c(&b[..60]);
    b[60..64].copy_from_slice(&c.to_le_bytes());
    fs::write(path, b).unwrap();
}

#[test]
fn format_versions_are_checked_and_choose_the_digest() {
    // A version from the future is named, not misread.
    let set = two_stripes("none");
    for p in [&set.a, &set.b] {
        set_header_version(p, 5);
    }
    both_fail(&set, "unsupported format version 5");

    // Version 4 is a signed set's: a plain header at version 4 is refused.
    let set = two_stripes("none");
    for p in [&set.a, &set.b] {
        set_header_version(p, 4);
    }
    both_fail(&set, "only 4 signed");

    // Version 3 is an encrypted set's: a plain header at version 3 is refused.
    let set = two_stripes("none");
    for p in [&set.a, &set.b] {
        set_header_version(p, 3);
    }
    both_fail(&set, "only version 3 is encrypted");

    // Header and manifest must agree.
    let set = two_stripes("none");
    for p in [&set.a, &set.b] {
        set_header_version(p, 1);
    }
    both_fail(&set, "header says format version 1, manifest 2");

    // Version 1 digests frames with BLAKE3: this set's XXH3 digests then fail as damage.
    rewrite_both(&set, |v| v["format_version"] = 1.into());
    both_fail(&set, "their BLAKE3 digest does not match");
}

/// Rewrites a one-stripe set's body, as a forger would: `dup` repeats the first frame at
/// the end of the body, otherwise the last frame is dropped. Tail and manifest follow.
fn splice_frame(path: &str, dup: bool) {
    let b = fs::read(path).unwrap();
    let block = u32::from_le_bytes(b[12..16].try_into().unwrap()) as u64;
    let mut tail = b[b.len() - 64..].to_vec();
    let (frames, body_end) = (u64_at(&tail, 32), u64_at(&tail, 40));
    // Frame offsets, walking the headers (stored length at 12, padded to the block).
    let mut at = block;
    let mut starts = vec![];
    while at < body_end {
        starts.push(at);
        let stored = u32::from_le_bytes(b[at as usize + 12..at as usize + 16].try_into().unwrap());
        at += (80 + stored as u64).div_ceil(block) * block;
    }
    assert_eq!(starts.len() as u64, frames);
    let (first, last) = (starts[0] as usize, *starts.last().unwrap() as usize);
    let (body, rest) = b[..b.len() - 64].split_at(body_end as usize);
    let mut out;
    let delta: i64;
    if dup {
        let len = starts.get(1).map_or(body_end as usize, |&s| s as usize) - first;
        out = body.to_vec();
        out.extend_from_slice(&b[first..first + len]);
        delta = len as i64;
    } else {
        out = body[..last].to_vec();
        delta = last as i64 - body_end as i64;
    }
    out.extend_from_slice(rest);
    let shift = |at: usize, by: i64| ((u64_at(&tail, at) as i64 + by) as u64).to_le_bytes();
    let (m, f, e) = (
        shift(8, delta),
        shift(32, if dup { 1 } else { -1 }),
        shift(40, delta),
    );
    tail[8..16].copy_from_slice(&m);
    tail[32..40].copy_from_slice(&f);
    tail[40..48].copy_from_slice(&e);
    // No frame index (as a stripe written before it): the frames' own checks are tested.
    tail[52..60].fill(0);
    let c = crc32c::crc32c(&tail[..60]);
    tail[60..64].copy_from_slice(&c.to_le_bytes());
    out.extend_from_slice(&tail);
    fs::write(path, out).unwrap();
    let (frames, body_end) = (u64_at(&tail, 32), u64_at(&tail, 40));
    rewrite_manifest(path, |v| {
        v["stripes"][0]["frames"] = frames.into();
        v["stripes"][0]["body_end"] = body_end.into();
    });
}

#[test]
fn duplicated_and_missing_frames_are_caught() {
    // A dropped frame leaves fewer frames than the files' chunks (a missing chunk among
    // as many frames is a unit test of engine::restore).
    for (dup, needle) in [(true, "is stored twice"), (false, "needs more frames than")] {
        let (dir, p) = tree_set("none", &["a.pv"]);
        let p = &p[0];
        splice_frame(p, dup);
        let e = fails(&["verify", "--from", p], 1);
        no_panic(&e);
        assert!(e.contains(needle), "verify: expected '{needle}' in: {e}");
        let out = dir.path().join("out");
        let e = fails(&["restore", "--from", p, "--to", &s(&out)], 1);
        no_panic(&e);
        assert!(e.contains(needle), "restore: expected '{needle}' in: {e}");
    }
}

/// A target so deep that its files' full paths pass PATH_MAX (4096) restores whole:
/// every file is made and opened relative to the target's handle (openat2 beneath
/// it), never by its full path. Created alongside the pipeline (a set stored without
/// compression) or before it (a compressed set).
#[test]
fn a_target_deeper_than_path_max_restores_whole() {
    let (dir, src) = tree_in_tempdir();
    let long = format!("base/16384/{}", "f".repeat(70));
    fs::write(src.join(&long), b"a file with a long name").unwrap();
    for codec in ["none", "lz4"] {
        let set = s(&dir.path().join(format!("{codec}.pv")));
        backup_files(&src, &set, &["--compress", codec]);
        // A target path so long that the other paths fit under PATH_MAX and `long` does not.
        let mut to = dir.path().join(codec);
        let want = 4040;
        while to.as_os_str().len() + 201 < want {
            to.push("d".repeat(200));
        }
        let rest = want - to.as_os_str().len() - 1;
        to.push("e".repeat(rest));
        assert_eq!(to.as_os_str().len(), want);
        fs::create_dir_all(&to).unwrap();
        assert!(to.join(&long).as_os_str().len() > 4096);
        ok(&["restore", "--from", &set, "--to", &s(&to)]);
        let f = fs::File::open(to.join(&long)).map(|_| ()).unwrap_err();
        assert!(f.to_string().contains("too long"), "{f}");
        assert!(
            !to.join(".pagevault-restore-incomplete").exists(),
            "{codec}"
        );
        // Read back relative to a directory inside it, as the kernel allows.
        use rustix::fs::{Mode, OFlags};
        let inner = rustix::fs::open(to.join("base/16384"), OFlags::RDONLY, Mode::empty()).unwrap();
        let f = rustix::fs::openat(&inner, "f".repeat(70), OFlags::RDONLY, Mode::empty()).unwrap();
        let mut got = vec![];
        std::io::Read::read_to_end(&mut fs::File::from(f), &mut got).unwrap();
        assert_eq!(got, b"a file with a long name");
    }
}

/// A forged catalog record (anyone who can write to the repository) naming stripes
/// outside it: expire removes the record and nothing outside the repository.
#[test]
fn expire_never_deletes_outside_the_repository() {
    let (dir, src) = tree_in_tempdir();
    let repo = dir.path().join("repo");
    let source = format!("files:{}", s(&src));
    for _ in 0..2 {
        ok(&["backup", "--source", &source, "--repo", &s(&repo)]);
    }
    let victim = dir.path().join("victim");
    fs::write(&victim, b"keep me").unwrap();
    let abs_victim = dir.path().join("abs-victim");
    fs::write(&abs_victim, b"keep me too").unwrap();
    // A copy of the oldest record, as an older full with other stripes.
    let catalog = repo.join("catalog");
    let mut names: Vec<_> = fs::read_dir(&catalog)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    names.sort();
    let mut rec: serde_json::Value = serde_json::from_slice(&fs::read(&names[0]).unwrap()).unwrap();
    let forged = "00000000000000000000000000000001";
    rec["set_id"] = forged.into();
    rec["started"] = "2001-01-01T00:00:00+00:00".into();
    rec["finished"] = "2001-01-01T00:00:01+00:00".into();
    rec["stripes"] = serde_json::json!([
        "../victim",
        s(&abs_victim),
        format!("sets/{forged}/../../../victim")
    ]);
    fs::write(
        catalog.join(format!("{forged}.json")),
        serde_json::to_vec(&rec).unwrap(),
    )
    .unwrap();
    let e = json(&["expire", "--repo", &s(&repo), "--keep-full", "1"]);
    let expired = e["expired"].as_array().unwrap();
    assert!(expired.iter().any(|v| v == forged), "{e}");
    assert_eq!(fs::read(&victim).unwrap(), b"keep me");
    assert_eq!(fs::read(&abs_victim).unwrap(), b"keep me too");
    // A record whose id is not a set id: refused, nothing removed.
    rec["set_id"] = "../../x".into();
    fs::write(catalog.join("bad.json"), serde_json::to_vec(&rec).unwrap()).unwrap();
    let out = run(&["expire", "--repo", &s(&repo), "--keep-full", "1"]);
    no_panic(&out.stderr);
    assert_eq!(fs::read(&victim).unwrap(), b"keep me");
}

/// setuid and setgid bits in a set do not come back: a restore often runs as root.
#[test]
fn setuid_bits_are_dropped_on_restore() {
    use std::os::unix::fs::PermissionsExt;
    let (dir, src) = tree_in_tempdir();
    let tool = src.join("tool");
    fs::write(&tool, b"#!/bin/sh\n").unwrap();
    fs::set_permissions(&tool, fs::Permissions::from_mode(0o6755)).unwrap();
    let set = s(&dir.path().join("s.pv"));
    ok(&[
        "backup",
        "--source",
        &format!("files:{}", s(&src)),
        "--to",
        &set,
    ]);
    let out = dir.path().join("out");
    ok(&["restore", "--from", &set, "--to", &s(&out)]);
    let mode = fs::metadata(out.join("tool")).unwrap().permissions().mode();
    assert_eq!(mode & 0o7777, 0o755, "{mode:o}");
}

/// A one-stripe set of `make_tree` stored without compression, in a scratch directory.
fn one_stripe() -> (tempfile::TempDir, String) {
    let (dir, mut p) = tree_set("none", &["a.pv"]);
    (dir, p.pop().unwrap())
}

/// Verify and restore of `stripe` refuse it cleanly (exit 1, under a capped address
/// space), saying each of `says`, and write nothing.
fn both_refuse(dir: &Path, stripe: &str, says: &[&str]) {
    refused_capped(&["verify", "--from", stripe], 1, says);
    let out = dir.join("out");
    refused_capped(&["restore", "--from", stripe, "--to", &s(&out)], 1, says);
    assert!(!out.exists(), "a refused set must not create its target");
}

/// Issue 20: a file size of 2^60 aborted verify (a digest slot per transfer-sized chunk
/// was allocated up front, 36 TB); sizes are now held against the set's frames.
#[test]
fn forged_file_sizes_are_refused_before_allocation() {
    for (size, sparse, says) in [
        (1u64 << 60, false, "more than 2^32 pages"),
        (1 << 40, false, "needs more frames than the"),
        (1 << 44, true, "a full set"),
    ] {
        let (dir, p) = one_stripe();
        rewrite_manifest(&p, |v| {
            base_random(v)["size"] = size.into();
            base_random(v)["sparse"] = sparse.into();
        });
        both_refuse(dir.path(), &p, &["base/random", says, "damaged or forged"]);
    }
}

/// Issue 20: the manifest's raw length came from the tail and was decompressed with up
/// to 4 GiB of room. Lengths are capped, tied to each other and to the zstd frame.
#[test]
fn manifest_bombs_are_refused_before_allocation() {
    let (dir, p) = one_stripe();
    let good = fs::read(&p).unwrap();
    let json = manifest_json(&good);
    let stored = zstd::bulk::compress(&json, 3).unwrap();
    // The tail lies: 1 GiB from a few hundred bytes.
    let lying = with_stored_manifest(&good, &stored, 1 << 30);
    // A real bomb: the JSON and 64 MiB of spaces (valid JSON, compressed 10,000 times).
    let mut big = json.clone();
    big.resize(json.len() + (64 << 20), b' ');
    let bomb = zstd::bulk::compress(&big, 3).unwrap();
    let bomb = with_stored_manifest(&good, &bomb, big.len() as u64);
    // Within the ratio, but the zstd frame holds more than the tail says.
    let short = with_stored_manifest(&good, &stored, json.len() as u64 - 1);
    for (bytes, says) in [
        (lying, "invalid manifest raw length"),
        (bomb, "invalid manifest raw length"),
        (short, "its zstd frame holds"),
    ] {
        fs::write(&p, bytes).unwrap();
        both_refuse(dir.path(), &p, &[&p, says, "damaged or forged"]);
    }
    // A stored length past the stripe's end.
    let mut b = good.clone();
    let n = b.len();
    put_u64(&mut b[n - 64..], 16, 1 << 40);
    fix_tail(&mut b);
    fs::write(&p, b).unwrap();
    both_refuse(
        dir.path(),
        &p,
        &["do not fit a stripe", "damaged or forged"],
    );
}

/// Issue 20: page size 0 divided by zero in restore. Sizes in the header and the
/// manifest are checked against their ranges and against each other.
#[test]
fn forged_page_and_transfer_sizes_are_refused() {
    let (dir, p) = one_stripe();
    let good = fs::read(&p).unwrap();
    rewrite_header(&p, |b| put_u32(b, 44, 0));
    rewrite_manifest(&p, |v| v["page_size"] = 0.into());
    both_refuse(
        dir.path(),
        &p,
        &["invalid page size at offset 44", "damaged or forged"],
    );
    fs::write(&p, &good).unwrap();
    rewrite_manifest(&p, |v| v["page_size"] = 0.into());
    both_refuse(dir.path(), &p, &["page size 0 is not a power of two"]);
    fs::write(&p, &good).unwrap();
    rewrite_header(&p, |b| put_u32(b, 48, 16 << 20));
    both_refuse(
        dir.path(),
        &p,
        &["transfer size 16777216", "damaged or forged"],
    );
    // A frame count no body of this size holds.
    fs::write(&p, &good).unwrap();
    let mut b = good.clone();
    let n = b.len();
    put_u64(&mut b[n - 64..], 32, 1 << 50);
    fix_tail(&mut b);
    fs::write(&p, b).unwrap();
    both_refuse(dir.path(), &p, &["frames, but its body holds at most"]);
}

/// Issue 20: an empty stripe list or a short start_wal in a catalog record panicked
/// (expire cut the WAL name at byte 8). Records are checked field by field when read.
#[test]
fn forged_catalog_records_are_refused_by_field() {
    let (dir, src) = tree_in_tempdir();
    let repo = dir.path().join("repo");
    let source = format!("files:{}", s(&src));
    for _ in 0..2 {
        ok(&["backup", "--source", &source, "--repo", &s(&repo)]);
    }
    let mut records: Vec<_> = fs::read_dir(repo.join("catalog"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    records.sort();
    let read =
        |p: &Path| -> serde_json::Value { serde_json::from_slice(&fs::read(p).unwrap()).unwrap() };
    // Both records name WAL (expire compares their names).
    for p in &records {
        let mut r = read(p);
        r["start_wal"] = "000000010000000000000002".into();
        fs::write(p, serde_json::to_vec(&r).unwrap()).unwrap();
    }
    let good = fs::read(&records[1]).unwrap();
    let out = dir.path().join("out");
    let r = s(&repo);
    for (field, value, says) in [
        (
            "stripes",
            serde_json::json!([]),
            "'stripes' lists 0 stripes",
        ),
        (
            "start_wal",
            "0001".into(),
            "'start_wal' = '0001' is not a WAL segment name",
        ),
        (
            "stop_wal",
            "00000001.history".into(),
            "is not a WAL segment name",
        ),
        ("timeline", 0.into(), "'timeline' is 0"),
        ("stop_lsn", "0/x".into(), "'stop_lsn' = '0/x' is not an LSN"),
        (
            "base_set",
            "../../x".into(),
            "'base_set' = '../../x' is not a set id",
        ),
        (
            "set_id",
            "short".into(),
            "'set_id' = 'short' is not a set id",
        ),
    ] {
        let mut rec: serde_json::Value = serde_json::from_slice(&good).unwrap();
        rec[field] = value;
        fs::write(&records[1], serde_json::to_vec(&rec).unwrap()).unwrap();
        let says = [says, "damaged or forged", &s(&records[1])];
        for args in [
            &["history", "--repo", &r][..],
            &["verify", "--repo", &r],
            &["restore", "--repo", &r, "--to", &s(&out)],
            &["expire", "--repo", &r, "--keep-full", "1"],
        ] {
            refused_capped(args, 1, &says);
        }
        assert!(!out.exists(), "{field}");
    }
}

/// Issue 20: wal_segment_size 0 divided by zero where the log chain is planned. A
/// PostgreSQL set's facts and page size are checked whenever it is opened (verify too);
/// the set here is a files set made to look like one.
#[test]
fn forged_postgres_facts_are_refused() {
    let (dir, src) = tree_in_tempdir();
    let repo = dir.path().join("repo");
    let source = format!("files:{}", s(&src));
    ok(&["backup", "--source", &source, "--repo", &s(&repo)]);
    let record = fs::read_dir(repo.join("catalog"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let mut rec: serde_json::Value = serde_json::from_slice(&fs::read(&record).unwrap()).unwrap();
    let stripe = s(&repo.join(rec["stripes"][0].as_str().unwrap()));
    let wal = "000000010000000000000002";
    for (k, v) in [
        ("source_kind", "postgres".into()),
        ("timeline", 1.into()),
        ("start_lsn", "0/2000028".into()),
        ("stop_lsn", "0/2000100".into()),
        ("start_wal", wal.into()),
        ("stop_wal", wal.into()),
    ] {
        rec[k] = v;
    }
    fs::write(&record, serde_json::to_vec(&rec).unwrap()).unwrap();
    let facts = serde_json::json!({
        "start_lsn": "0/2000028", "stop_lsn": "0/2000100", "start_wal": wal, "stop_wal": wal,
        "timeline": 1, "pg_version": "170000", "data_checksums": true,
        "system_identifier": "7", "wal_segment_size": 0,
        "backup_label": "START WAL LOCATION: 0/2000028 (file 000000010000000000000002)\n",
    });
    rewrite_manifest(&stripe, |v| {
        v["source"]["kind"] = "postgres".into();
        v["extra"] = facts.clone();
    });
    let good = fs::read(&stripe).unwrap();
    let r = s(&repo);
    let out = dir.path().join("out");
    let both = |says: &[&str]| {
        refused_capped(&["verify", "--repo", &r], 1, says);
        refused_capped(&["restore", "--repo", &r, "--to", &s(&out)], 1, says);
        assert!(!out.exists());
    };
    both(&[
        "'wal_segment_size' = 0 is not a WAL segment size",
        "damaged or forged",
    ]);
    // A page size a set may have, but not PostgreSQL.
    rewrite_manifest(&stripe, |v| {
        v["extra"]["wal_segment_size"] = (16 << 20).into();
        v["page_size"] = 512.into();
    });
    rewrite_header(&stripe, |b| put_u32(b, 44, 512));
    both(&[
        "page size 512 is not one PostgreSQL is built with",
        "damaged or forged",
    ]);
    fs::write(&stripe, good).unwrap();
}

/// Issue 20: an archived file's sizes come from the name asked for. A history file
/// whose header claims 1 TiB, or a segment's kind (1 GiB allowed), or more stored bytes
/// than zstd makes of its size, is damaged: archive-get exits 126, writes nothing and
/// reads none of it into memory.
#[test]
fn forged_archived_wal_sizes_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let repo = s(&dir.path().join("repo"));
    let name = "00000002.history";
    let h = dir.path().join(name);
    fs::write(&h, "1\t0/5000100\tno recovery target specified\n").unwrap();
    ok(&["init", "--repo", &repo]);
    ok(&["archive-push", "--repo", &repo, &s(&h)]);
    let archived = dir
        .path()
        .join("repo/wal/00000002")
        .join(format!("{name}.zst"));
    let good = fs::read(&archived).unwrap();
    let dest = dir.path().join("got");
    let get = |says: &str| {
        refused_capped(
            &["archive-get", "--repo", &repo, name, &s(&dest)],
            126,
            &[&s(&archived), says, "damaged"],
        );
        assert!(!dest.exists());
    };
    rewrite_wal_header(&archived, |b| put_u64(b, 88, 1 << 40));
    get("its header gives 1099511627776 bytes, over the 16777216");
    fs::write(&archived, &good).unwrap();
    rewrite_wal_header(&archived, |b| b[18] = 1);
    get("its header says a Segment file, its name a Some(History) one");
    // 1 MiB stored for 41 bytes, the file as long as the header says.
    fs::write(&archived, &good).unwrap();
    rewrite_wal_header(&archived, |b| put_u64(b, 96, 1 << 20));
    let mut b = fs::read(&archived).unwrap();
    b.resize(152 + (1 << 20), 0);
    fs::write(&archived, b).unwrap();
    get("more than zstd makes of 41 bytes");
    // Intact again: fetched.
    fs::write(&archived, &good).unwrap();
    ok(&["archive-get", "--repo", &repo, name, &s(&dest)]);
    assert_eq!(fs::read(&dest).unwrap(), fs::read(&h).unwrap());
}

/// Found by tests/fuzz: text from a record or manifest was cut at a byte count for
/// display (history's finish time, files' checksum column), inside a character.
#[test]
fn text_of_a_record_or_manifest_is_cut_between_characters() {
    let (dir, src) = tree_in_tempdir();
    let repo = dir.path().join("repo");
    ok(&[
        "backup",
        "--source",
        &format!("files:{}", s(&src)),
        "--repo",
        &s(&repo),
    ]);
    let record = fs::read_dir(repo.join("catalog"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let mut rec: serde_json::Value = serde_json::from_slice(&fs::read(&record).unwrap()).unwrap();
    rec["finished"] = "é".repeat(30).into();
    fs::write(&record, serde_json::to_vec(&rec).unwrap()).unwrap();
    let out = ok(&["history", "--repo", &s(&repo)]);
    assert!(out.contains(&"é".repeat(12)), "{out}");
    let (_d, p) = one_stripe();
    rewrite_manifest(&p, |v| {
        let dir = v["files"]
            .as_array_mut()
            .unwrap()
            .iter_mut()
            .find(|f| f["kind"] == "dir")
            .unwrap();
        dir["checksum"] = "x\u{e9}".into();
    });
    // A checksum is 64 hex digits wherever it stands: anything else is refused.
    let e = fails(&["files", "--from", &p], 1);
    assert!(e.contains("not 64 hex digits"), "{e}");
}
