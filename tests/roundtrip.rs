//! Round trips through the real binary: codecs, stripe counts, transfer and block sizes.

mod common;
use common::*;

fn round_trip(codec: &str, stripes: usize, transfer: &str, block: &str) {
    let (dir, src) = tree_in_tempdir();
    let devs: Vec<String> = (0..stripes)
        .map(|i| s(&dir.path().join(format!("s{i}.pv"))))
        .collect();
    let mut args = vec![
        "backup".to_string(),
        "--source".into(),
        format!("files:{}", s(&src)),
    ];
    for d in &devs {
        args.extend(["--to".into(), d.clone()]);
    }
    args.extend([
        "--compress".into(),
        codec.into(),
        "--max-transfer-size".into(),
        transfer.into(),
    ]);
    args.extend(["--block-size".into(), block.into()]);
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let b = json(&a);
    assert_eq!(b["stripes"].as_array().unwrap().len(), stripes);
    assert_eq!(b["copy_only"], false);
    for d in &devs {
        assert!(std::path::Path::new(d).exists(), "stripe {d} missing");
        assert!(!std::path::Path::new(&format!("{d}.partial")).exists());
    }

    // Stripes in reverse order: order on the command line must not matter.
    let mut from = vec![];
    for d in devs.iter().rev() {
        from.extend(["--from", d.as_str()]);
    }
    let mut v = vec!["verify"];
    v.extend(&from);
    let vj = json(&v);
    assert_eq!(vj["valid"], true);
    let out = dir.path().join("out");
    let mut r = vec!["restore", "--to"];
    let outs = s(&out);
    r.push(&outs);
    r.extend(&from);
    let rj = json(&r);
    assert_eq!(rj["raw_bytes"], b["raw_bytes"]);
    assert_same_tree(&src, &out);
}

// One test per case: codec, stripes, transfer size, block size.
macro_rules! round_trips {
    ($($name:ident: $codec:expr, $stripes:expr, $transfer:expr, $block:expr;)*) => {$(
        #[test]
        fn $name() {
            round_trip($codec, $stripes, $transfer, $block);
        }
    )*};
}

round_trips! {
    none_one_stripe_default_sizes: "none", 1, "1M", "4K";
    lz4_two_stripes_small_transfer_small_block: "lz4", 2, "64K", "512";
    zstd_five_stripes_large_block: "zstd:5", 5, "128K", "64K";
    zstd_two_stripes_block_as_large_as_transfer: "zstd", 2, "1M", "1M";
    none_five_stripes_64k: "none", 5, "64K", "4K";
}

#[test]
fn single_file_source_and_direct_io_off() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("data.bin");
    std::fs::write(&f, bytes(9, 3_000_000, true)).unwrap();
    let st = s(&dir.path().join("x.pv"));
    backup_files(&f, &st, &["--direct-io", "off", "--compress", "lz4"]);
    let out = dir.path().join("out");
    ok(&["restore", "--from", &st, "--to", &s(&out)]);
    assert_eq!(
        std::fs::read(out.join("data.bin")).unwrap(),
        std::fs::read(&f).unwrap()
    );
}

#[test]
fn sparse_file_stays_sparse_and_zero_frames_are_counted() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir(&src).unwrap();
    let f = std::fs::File::create(src.join("hole")).unwrap();
    f.set_len(64 << 20).unwrap();
    let st = s(&dir.path().join("x.pv"));
    let b = backup_files_json(&src, &st, &[]);
    assert_eq!(b["zero_frames"], 64);
    assert!(
        std::fs::metadata(&st).unwrap().len() < 1 << 20,
        "zero transfers must not be stored"
    );
    let out = dir.path().join("out");
    ok(&["restore", "--from", &st, "--to", &s(&out)]);
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(out.join("hole")).unwrap();
    assert_eq!(m.len(), 64 << 20);
    assert!(m.blocks() * 512 < 1 << 20, "restored file should be sparse");
}

#[test]
fn merged_adjacent_reads_restore_the_same_bytes_as_single_reads() {
    // 64 KiB transfers: adaptive readers merge up to 16 of them per vectored read.
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir(&src).unwrap();
    std::fs::write(src.join("odd"), bytes(41, 3 * 1024 * 1024 + 12_345, false)).unwrap();
    std::fs::write(src.join("text"), bytes(42, 2 * 1024 * 1024, true)).unwrap();
    for mode in ["on", "off"] {
        let stripe = s(&dir.path().join(format!("{mode}.pv")));
        let b = backup_files_json(
            &src,
            &stripe,
            &["--max-transfer-size", "64K", "--adaptive-readers", mode],
        );
        let a = &b["adaptive_readers"];
        assert_eq!(a["enabled"], mode == "on");
        // Reads in flight start at the default 16 and stay within the cap of 64;
        // fixed when off, with nothing tried.
        let settled = a["settled_in_flight"].as_u64().unwrap();
        if mode == "on" {
            assert!((16..=64).contains(&settled), "{a}");
        } else {
            assert_eq!((settled, a["raises"].as_u64()), (16, Some(0)), "{a}");
            assert_eq!(a["held"], "not_tried", "{a}");
        }
        let target = dir.path().join(format!("r-{mode}"));
        ok(&["restore", "--from", &stripe, "--to", &s(&target)]);
        assert_same_tree(&src, &target);
    }
}

#[test]
fn small_files_read_ahead_give_way_to_a_low_open_files_limit_and_one_too_low_is_named() {
    // 300 small files: the cursor would open 64 of them ahead of the readers.
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir(&src).unwrap();
    for i in 0..300u64 {
        std::fs::write(
            src.join(format!("f{i:03}")),
            bytes(i, 3000 + i as usize, false),
        )
        .unwrap();
    }
    let source = format!("files:{}", s(&src));
    let backup = |limit: &str, stripe: &str| {
        let out = std::process::Command::new("sh")
            .args(["-c", "ulimit -n $0 && exec \"$@\"", limit, bin()])
            .args(["backup", "--source", &source, "--to", stripe])
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    // Under 64 descriptors: files opened ahead stop where none is left, and the backup
    // goes on with the readers'.
    let stripe = s(&dir.path().join("a.pv"));
    let (code, err) = backup("48", &stripe);
    assert_eq!(code, Some(0), "{err}");
    let out = dir.path().join("out");
    ok(&["restore", "--from", &stripe, "--to", &s(&out)]);
    assert_same_tree(&src, &out);
    // Too few for the readers themselves: an error that names the limit and the way out.
    let (code, err) = backup("12", &s(&dir.path().join("b.pv")));
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("Too many open files")
            && err.contains("ulimit -n")
            && err.contains("--read-depth"),
        "{err}"
    );
    assert!(!dir.path().join("b.pv").exists() && !dir.path().join("b.pv.partial").exists());
}

/// Drops `path`'s pages from the page cache; false where they stay (or the kernel
/// cannot say).
fn drop_cached(path: &std::path::Path) -> bool {
    use pagevault::sys;
    let f = std::fs::File::open(path).unwrap();
    f.sync_all().unwrap();
    sys::fadvise(&f, 0, 0, sys::Advice::DontNeed);
    sys::cached(&f).is_some_and(|c| c.pages == 0)
}

#[test]
fn a_large_file_missing_from_the_page_cache_is_read_with_o_direct_within_the_memory_budget() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir(&src).unwrap();
    // Not a multiple of the transfer: the last O_DIRECT read is cut short by the end.
    let big = src.join("big");
    std::fs::write(&big, bytes(45, (72 << 20) + 12_345, false)).unwrap();
    std::fs::write(src.join("small"), bytes(46, 3 << 20, false)).unwrap();
    if !drop_cached(&big) {
        eprintln!("skipped: the page cache keeps this file (or the kernel has no cachestat)");
        return;
    }
    let stripe = s(&dir.path().join("cold.pv"));
    let b = backup_files_json(&src, &stripe, &["--memory-budget", "40M", "--threads", "2"]);
    let c = &b["config"];
    assert_eq!(c["direct_io"], "auto", "{c}");
    assert_eq!(c["direct_files"], 1, "{c}");
    assert_eq!(c["direct_bytes"], (72 << 20) + 12_345, "{c}");
    assert_eq!(c["huge_pages"], true, "{c}");
    // Huge-page buffers count whole 2 MiB pages, and still fit the budget.
    let count = c["buffer_count"].as_u64().unwrap();
    assert_eq!(c["total_buffer_memory"], count * (2 << 20), "{c}");
    assert!(
        c["total_buffer_memory"].as_u64().unwrap() + 2 * (2 << 20) <= 40 << 20,
        "{c}"
    );
    let pool = b["pool_bytes"].as_u64().unwrap();
    assert!(
        pool > 0 && pool <= 40 << 20,
        "pool {pool} within the budget"
    );
    assert_eq!(b["adaptive_readers"]["started_in_flight"], 4, "{b}");
    let out = dir.path().join("r1");
    ok(&["restore", "--from", &stripe, "--to", &s(&out)]);
    assert_same_tree(&src, &out);

    // Read through the cache once, the same file stays there: no O_DIRECT, and its
    // volume's reads are copies, one per core, held there.
    std::fs::read(&big).unwrap();
    let warm = s(&dir.path().join("warm.pv"));
    let b = backup_files_json(&src, &warm, &["--threads", "3"]);
    let c = &b["config"];
    assert_eq!(c["direct_files"], 0, "{c}");
    assert_eq!(c["huge_pages"], false, "{c}");
    assert_eq!(c["cached_files"], 1, "{c}");
    assert_eq!(
        c["buffer_count"],
        3 + 2 * 3 + 2,
        "3 reads, 2 per compressor and stripe"
    );
    let a = &b["adaptive_readers"];
    assert_eq!(
        (&a["started_in_flight"], &a["peak_in_flight"]),
        (&3.into(), &3.into()),
        "{a}"
    );
    let out = dir.path().join("r3");
    ok(&["restore", "--from", &warm, "--to", &s(&out)]);
    assert_same_tree(&src, &out);
    // A read depth given holds for it as for any volume.
    let b = backup_files_json(&src, &s(&dir.path().join("w2.pv")), &["--read-depth", "5"]);
    assert_eq!(b["adaptive_readers"]["started_in_flight"], 5, "{b}");

    // Off: never, cold or not; on: every file (the small one too).
    assert!(drop_cached(&big));
    let b = backup_files_json(
        &src,
        &s(&dir.path().join("off.pv")),
        &["--direct-io", "off"],
    );
    assert_eq!(b["config"]["direct_files"], 0, "{b}");
    let on = s(&dir.path().join("on.pv"));
    let b = backup_files_json(&src, &on, &["--direct-io", "on", "--read-depth", "2"]);
    assert_eq!(b["config"]["direct_files"], 2, "{b}");
    assert_eq!(b["adaptive_readers"]["started_in_flight"], 2, "{b}");
    let out = dir.path().join("r2");
    ok(&["restore", "--from", &on, "--to", &s(&out)]);
    assert_same_tree(&src, &out);
}

#[test]
fn a_memory_budget_bounds_the_buffers_and_refuses_one_too_small_to_run() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir(&src).unwrap();
    std::fs::write(src.join("big"), bytes(43, 24 << 20, false)).unwrap();
    std::fs::write(src.join("text"), bytes(44, 3 << 20, true)).unwrap();
    let stripe = s(&dir.path().join("b.pv"));
    let b = backup_files_json(&src, &stripe, &["--memory-budget", "40M", "--threads", "2"]);
    let c = &b["config"];
    let (count, each) = (
        c["buffer_count"].as_u64().unwrap(),
        c["buffer_bytes"].as_u64().unwrap(),
    );
    assert_eq!(c["memory_budget"], 40 << 20, "{c}");
    assert!((count + 2) * each <= 40 << 20, "{c}");
    assert!(
        count < 70,
        "the default pool (room for 64 reads) does not fit: {c}"
    );
    let pool = b["pool_bytes"].as_u64().unwrap();
    assert!(
        pool > 0 && pool <= 40 << 20,
        "pool {pool} within the budget"
    );
    let target = dir.path().join("r");
    ok(&["restore", "--from", &stripe, "--to", &s(&target)]);
    assert_same_tree(&src, &target);
    // Too small for the first reads in flight: refused before anything is written.
    let small = s(&dir.path().join("small.pv"));
    let source = format!("files:{}", s(&src));
    let err = backup_fails(&source, &small, &["--memory-budget", "8M"], 1);
    assert!(
        err.contains("--memory-budget 8 MiB holds") && err.contains("raise the budget"),
        "{err}"
    );
    assert!(!dir.path().join("small.pv").exists());
    let err = backup_fails(
        &source,
        &small,
        &["--memory-budget", "40M", "--buffer-count", "100"],
        1,
    );
    assert!(err.contains("--buffer-count 100 needs"), "{err}");
}

/// `restore --delta` over a copy changed since the set (issue 39, item 3): only what
/// differs is written, what the set does not hold removed, links never followed out;
/// a missing or empty target restores as without --delta.
fn delta_over_a_changed_copy(extra: &[&str]) {
    use std::os::unix::fs::FileExt;
    let (dir, src) = tree_in_tempdir();
    // A large file of which one page will change.
    std::fs::write(src.join("base/16384/big"), bytes(9, 8 << 20, false)).unwrap();
    let set = s(&dir.path().join("set.pv"));
    let mut b = vec!["--compress", "zstd"];
    b.extend_from_slice(extra);
    backup_files(&src, &set, &b);
    let out = dir.path().join("out");
    let outs = s(&out);
    let restore = |more: &[&str]| {
        let mut a = vec!["restore", "--from", &set, "--to", &outs];
        a.extend_from_slice(extra);
        a.extend_from_slice(more);
        json(&a)
    };
    // Into a missing directory, as a normal restore: every file created.
    let first = restore(&["--delta"]);
    assert_eq!(first["delta"]["created"], first["files"], "{first}");
    assert_eq!(first["delta"]["kept"], 0, "{first}");
    assert_same_tree(&src, &out);

    // Again over itself: nothing written.
    let again = restore(&["--delta"]);
    assert_eq!(again["delta"]["written_bytes"], 0, "{again}");
    assert_eq!(again["delta"]["kept"], again["files"], "{again}");
    // A plain set's chunks are found in place by their frames' digests, undecompressed;
    // an encrypted set's frames carry none: each is opened, then compared.
    let held = again["chain"][0]["held_bytes"].as_u64().unwrap();
    match extra.is_empty() {
        true => assert!(held >= 8 << 20, "{again}"),
        false => assert_eq!(held, 0, "{again}"),
    }
    assert_same_tree(&src, &out);

    // The copy drifts: a page changed, a file cut, one grown, one gone, new files and
    // directories, a link to a directory outside and a link in place of a file.
    let outside = dir.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("precious"), b"keep me").unwrap();
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(out.join("base/16384/big"))
        .unwrap();
    f.write_all_at(&[0xAB; 8192], 5 * 8192 * 64).unwrap();
    drop(f);
    std::fs::OpenOptions::new()
        .write(true)
        .open(out.join("base/random"))
        .unwrap()
        .set_len(1000)
        .unwrap();
    std::fs::write(out.join("one_byte"), b"xyz").unwrap();
    std::fs::remove_file(out.join("empty")).unwrap();
    std::fs::write(out.join("base/16384/new"), b"not in the set").unwrap();
    std::fs::create_dir_all(out.join("newdir/sub")).unwrap();
    std::fs::write(out.join("newdir/sub/f"), b"x").unwrap();
    std::os::unix::fs::symlink(&outside, out.join("base/evil")).unwrap();
    std::fs::remove_file(out.join("base/16384/1259")).unwrap();
    std::os::unix::fs::symlink(outside.join("precious"), out.join("base/16384/1259")).unwrap();
    std::fs::write(out.join(".pagevault-restore-incomplete"), b"").unwrap();

    let r = restore(&["--delta"]);
    assert_same_tree(&src, &out);
    assert_eq!(std::fs::read(outside.join("precious")).unwrap(), b"keep me");
    assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 1);
    let d = &r["delta"];
    // big (one page), random (cut), one_byte; empty and 1259 (a link) created.
    assert_eq!(d["rewritten"], 3, "{r}");
    assert_eq!(d["created"], 2, "{r}");
    // new, newdir/sub/f, base/evil, the link at 1259; newdir and newdir/sub.
    assert_eq!(
        (d["removed"].as_u64(), d["removed_dirs"].as_u64()),
        (Some(4), Some(2)),
        "{r}"
    );
    let written = d["written_bytes"].as_u64().unwrap();
    // One block of big, random's cut-off part, one_byte, 1259.
    assert!(
        written <= 1_300_001 + 8192 + 1 + (3 * 8192 + 17) + 8192,
        "{r}"
    );
    assert!(written >= 1_300_001 - 1000 + 8192, "{r}");
    assert!(d["compared_bytes"].as_u64().unwrap() >= 8 << 20, "{r}");
    let text = ok(&["restore", "--from", &set, "--to", &outs, "--delta"]
        .into_iter()
        .chain(extra.iter().copied())
        .collect::<Vec<_>>());
    assert!(
        text.contains("Delta: 7 files kept, 0 rewritten, 0 created, 0 removed"),
        "{text}"
    );

    // An empty directory: everything created; --replace with --delta is a usage error.
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let e = s(&empty);
    let mut a = vec!["restore", "--from", &set, "--to", &e, "--delta"];
    a.extend_from_slice(extra);
    let j = json(&a);
    assert_eq!(j["delta"]["created"], j["files"], "{j}");
    assert_same_tree(&src, &empty);
    a.push("--replace");
    let err = fails(&a, 2);
    assert!(
        err.contains("--replace") && err.contains("--delta"),
        "{err}"
    );
}

#[test]
fn a_delta_restore_writes_only_what_differs() {
    delta_over_a_changed_copy(&[]);
}

#[test]
fn a_delta_restore_of_an_encrypted_set_compares_after_opening_each_frame() {
    let keys = tempfile::tempdir().unwrap();
    let key = key_file(keys.path(), "key", 7, false);
    delta_over_a_changed_copy(&["--key-file", &key]);
}

#[test]
fn large_aligned_writes_skip_the_page_cache_and_the_rest_goes_through_it() {
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    // Chunks of 1 MiB: a whole chunk and a 100-byte tail, a 300 KiB file, a small
    // file, eight whole chunks.
    let sizes = [(1 << 20) + 100, 300 << 10, 5000, 8 << 20];
    for (i, n) in sizes.iter().enumerate() {
        std::fs::write(src.join(format!("f{i}")), bytes(i as u64, *n, false)).unwrap();
    }
    // All zeros: Zero frames, nothing written.
    std::fs::write(src.join("zeros"), vec![0u8; 4 << 20]).unwrap();
    let set = s(&t.path().join("set.pv"));
    backup_files(
        &src,
        &set,
        &["--compress", "lz4", "--max-transfer-size", "1M"],
    );
    let direct = (1u64 << 20) + (300 << 10) + (8 << 20);
    let buffered = 100 + 5000;
    for (mode, want_direct, want_buffered) in [
        ("auto", direct, buffered),
        // Every aligned write: the small file's first 4 KiB too.
        ("on", direct + 4096, buffered - 4096),
        ("off", 0, direct + buffered),
    ] {
        let to = t.path().join(format!("out-{mode}"));
        let r = json(&[
            "restore",
            "--from",
            &set,
            "--to",
            &s(&to),
            "--direct-writes",
            mode,
        ]);
        let w = &r["writes"];
        assert_eq!(w["direct_writes"], mode, "{w}");
        assert_eq!(w["direct_bytes"], want_direct, "{mode}: {w}");
        assert_eq!(w["buffered_bytes"], want_buffered, "{mode}: {w}");
        assert!(w["depth"].as_u64().unwrap() >= 4, "{w}");
        assert_same_tree(&src, &to);
        // A large file's blocks are allocated when it is made where writes go direct
        // (they then run several at once); its zero chunks are holes again after.
        use std::os::unix::fs::MetadataExt;
        let blocks = std::fs::metadata(to.join("zeros")).unwrap().blocks() * 512;
        assert!(blocks < 1 << 20, "{mode}: {blocks} bytes allocated");
    }
    // One writer, as asked.
    let to = t.path().join("out-1");
    let r = json(&[
        "restore",
        "--from",
        &set,
        "--to",
        &s(&to),
        "--write-depth",
        "1",
    ]);
    assert_eq!(r["writes"]["depth"], 1);
    assert_same_tree(&src, &to);
}
