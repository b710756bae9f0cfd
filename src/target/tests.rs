//! Tests of the target: layout, writes, finishing, delta.
use super::*;
use crate::format::manifest::tests::sample;
use std::os::unix::fs::MetadataExt;

#[test]
fn a_target_another_user_owns_is_claimed_then_given_back() {
    let d = tempfile::tempdir().unwrap();
    let to = d.path().join("t");
    fs::create_dir(&to).unwrap();
    fs::set_permissions(&to, fs::Permissions::from_mode(0o755)).unwrap();
    let root = crate::sys::is_root();
    if root {
        std::os::unix::fs::chown(&to, Some(65534), Some(65534)).unwrap();
    }
    let b = prepare(&to, Prepare::Empty).unwrap().unwrap();
    assert_eq!(b.mode, 0o755);
    let m = fs::metadata(&to).unwrap();
    assert_eq!(m.mode() & 0o7777, 0o700);
    if root {
        assert_eq!((b.uid, m.uid(), m.gid()), (65534, 0, 0));
    }
    give_back(&to, b).unwrap();
    let m = fs::metadata(&to).unwrap();
    assert_eq!((m.mode() & 0o7777, m.uid()), (0o755, b.uid));
    // A new one is made private too, and has nothing to give back.
    assert_eq!(
        prepare(&d.path().join("new"), Prepare::Empty).unwrap(),
        None
    );
}

fn entry(id: u32, path: &str, kind: EntryKind, size: u64) -> FileEntry {
    FileEntry {
        id,
        path: path.into(),
        kind,
        size,
        mode: if kind == EntryKind::Dir { 0o750 } else { 0o640 },
        mtime: 1_600_000_000,
        pages: 0,
        checksum: None,
        sparse: false,
        link_target: (kind == EntryKind::Link).then(|| "../elsewhere".into()),
    }
}

#[test]
fn a_target_must_be_empty_unless_replaced_and_replace_does_not_follow_links() {
    let t = tempfile::tempdir().unwrap();
    let (to, outside) = (t.path().join("to"), t.path().join("outside"));
    prepare(&to, Prepare::Empty).unwrap();
    assert!(to.is_dir(), "a missing target is created");
    fs::create_dir_all(&outside).unwrap();
    fs::write(outside.join("keep"), b"x").unwrap();
    fs::write(to.join("old"), b"x").unwrap();
    std::os::unix::fs::symlink(&outside, to.join("link")).unwrap();
    let e = prepare(&to, Prepare::Empty).unwrap_err().to_string();
    assert!(e.contains("is not empty") && e.contains("--replace"), "{e}");
    prepare(&to, Prepare::Replace).unwrap();
    assert_eq!(fs::read_dir(&to).unwrap().count(), 0);
    assert!(
        outside.join("keep").exists(),
        "a link's target is not emptied"
    );
}

#[test]
fn files_are_laid_out_at_their_size_written_in_place_and_finished() {
    let t = tempfile::tempdir().unwrap();
    let mut m = sample();
    m.files = vec![
        entry(0, "d", EntryKind::Dir, 0),
        entry(1, "d/a", EntryKind::File, 10_000),
        entry(2, "d/e/b", EntryKind::File, 0),
        entry(3, "d/l", EntryKind::Link, 0),
    ];
    let place = |rel: &str| t.path().join(rel);
    let roots = Arc::new(Roots::open([t.path().to_path_buf()]).unwrap());
    let target = Target::new(
        lay_out(&m, &place, false, roots.clone()).unwrap(),
        DirectWrites::Auto,
    );
    assert!(t.path().join("d/e").is_dir(), "parents are made");
    target.files.create_first(2).unwrap();
    assert_eq!(fs::metadata(place("d/a")).unwrap().len(), 10_000);
    target.write(1, 4096, b"hello").unwrap();
    target.write_zeros(1, 0, 4096).unwrap();
    let e = target.write(9, 0, b"x").unwrap_err().to_string();
    assert!(e.contains("file 9 is not in the manifest"), "{e}");
    drop(target);
    let a = fs::read(place("d/a")).unwrap();
    assert_eq!(&a[4096..4101], b"hello");
    assert!(a[..4096].iter().all(|&b| b == 0));
    // As root, `--owner` gives files, directories and links (not their targets) away.
    let owner = rustix::process::geteuid()
        .is_root()
        .then_some((65534, 65534));
    finish_entries(&m, &place, &roots, owner).unwrap();
    let meta = fs::metadata(place("d/a")).unwrap();
    assert_eq!((meta.mode() & 0o7777, meta.mtime()), (0o640, 1_600_000_000));
    if let Some((uid, gid)) = owner {
        for p in ["d/a", "d/e/b", "d/l", "d"] {
            let meta = fs::symlink_metadata(place(p)).unwrap();
            assert_eq!((meta.uid(), meta.gid()), (uid, gid), "{p}");
        }
    }
    assert_eq!(
        fs::read_link(place("d/l")).unwrap(),
        Path::new("../elsewhere")
    );
    // A fresh (not overlay) layout never reuses a file that is already there.
    let again = Target::new(
        lay_out(&m, &place, false, roots).unwrap(),
        DirectWrites::Auto,
    );
    let e = again.write(1, 0, b"x").unwrap_err().to_string();
    assert!(e.contains("cannot create") && e.contains("d/a"), "{e}");
}

#[test]
fn a_delta_keeps_what_a_file_holds_and_writes_what_differs() {
    let t = tempfile::tempdir().unwrap();
    let mut m = sample();
    m.files = vec![
        entry(1, "a", EntryKind::File, 8),
        entry(2, "b", EntryKind::File, 4),
        entry(3, "c", EntryKind::File, 3),
    ];
    let place = |rel: &str| t.path().join(rel);
    fs::write(place("a"), b"abcdefghij").unwrap();
    fs::write(place("b"), b"same").unwrap();
    let roots = Arc::new(Roots::open([t.path().to_path_buf()]).unwrap());
    let target = Target::new(lay_out(&m, &place, true, roots).unwrap(), DirectWrites::On);
    target.files.create_first(2).unwrap();
    target.write_zeros(1, 2, 2).unwrap();
    target.write(1, 6, b"XY").unwrap();
    target.write(2, 0, b"same").unwrap();
    target.write(3, 0, b"new").unwrap();
    let r = target.files.delta_report(Swept::default()).unwrap();
    drop(target);
    assert_eq!(
        fs::read(place("a")).unwrap(),
        b"ab\0\0efXY",
        "cut to its size"
    );
    assert_eq!(fs::read(place("c")).unwrap(), b"new");
    assert_eq!((r.kept, r.rewritten, r.created), (1, 1, 1));
    assert_eq!(r.written_bytes, 2 + 2 + 3, "a's zeros and XY, c");
}

#[test]
fn sizes_beyond_the_free_space_reserve_nothing() {
    let t = tempfile::tempdir().unwrap();
    let mut m = sample();
    let place = |rel: &str| t.path().join(rel);
    let roots = Arc::new(Roots::open([t.path().to_path_buf()]).unwrap());
    // A set's word alone: a file larger than the disk holds.
    m.files = vec![
        entry(1, "big", EntryKind::File, 8 << 40),
        entry(2, "small", EntryKind::File, 256 << 10),
    ];
    let target = Target::new(
        lay_out(&m, &place, false, roots.clone()).unwrap(),
        DirectWrites::Auto,
    );
    target.files.create_first(2).unwrap();
    assert!(!target.files.allocated(1) && !target.files.allocated(2));
    let big = fs::metadata(place("big")).unwrap();
    assert_eq!((big.len(), big.blocks()), (8 << 40, 0), "sparse");
    let why = target.write_report(1).why;
    assert!(why.contains("not allocated ahead"), "{why}");
    drop(target);
    // Sizes the disk holds are allocated, for parallel direct writes.
    fs::remove_file(place("small")).unwrap();
    m.files.remove(0);
    let target = Target::new(
        lay_out(&m, &place, false, roots).unwrap(),
        DirectWrites::Auto,
    );
    target.files.create_first(2).unwrap();
    assert!(target.files.allocated(2));
    assert!(!target.write_report(1).why.contains("not allocated"));
}
