//! Unit tests of the read stage: the cursor's read-ahead bounds, files swapped for
//! a link or a FIFO, sparse chunks and sparse reads.

use super::*;

#[test]
fn small_files_are_opened_and_asked_for_ahead_within_the_bounds() {
    let dir = tempfile::tempdir().unwrap();
    let t = 1usize << 20;
    // 100 files of 40 KiB, then a sparse one; file 3 is empty, file 5 vanishes.
    let mut plan: Vec<ReadFile> = (0..101u32)
        .map(|i| {
            let path = dir.path().join(format!("f{i}"));
            let size = if i == 3 { 0 } else { 40 << 10 };
            if i != 5 {
                std::fs::write(&path, vec![1u8; size as usize]).unwrap();
            }
            ReadFile {
                id: i,
                path: path.into(),
                size,
                volume: 0,
                missing_ok: true,
                pages: None,
                direct: false,
                cached: false,
            }
        })
        .collect();
    plan[100].pages = Some(Arc::new((0..2u32).collect()));
    let state = FileResults::new(plan.len());
    let mut c = cursors(&plan, 1).pop().unwrap().into_inner().unwrap();
    c.next_file = 1; // file 0 is the one being read
    c.open_ahead((&plan, &state), t).unwrap();
    let ids: Vec<u32> = c.opened.iter().map(|(id, _)| *id).collect();
    // At most AHEAD_FILES, skipping the empty and the vanished file.
    assert_eq!(ids.len(), AHEAD_FILES);
    assert_eq!(ids[..4], [1, 2, 4, 6]);
    assert!(state.vanished(5) && !state.vanished(3));
    let mut asks = vec![];
    c.take_asks(&mut asks);
    assert_eq!(asks.len(), AHEAD_FILES);
    assert!(asks.iter().all(|(_, o, l)| (*o, *l) == (0, 40 << 10)));
    assert_eq!(c.opened_bytes, AHEAD_FILES as u64 * (40 << 10));
    // Taking files on refills the window, up to the sparse file (its pages are
    // asked for run by run instead).
    while c.next_file < plan.len() - 1 {
        c.opened.pop_front();
        c.opened_bytes -= 40 << 10;
        c.open_ahead((&plan, &state), t).unwrap();
    }
    assert_eq!(c.opened.back().unwrap().0, 99);
    c.open_ahead((&plan, &state), t).unwrap();
    assert_eq!(c.next_file, 100, "the sparse file is not opened ahead");
    plan[100].pages = None;
    plan[100].direct = true;
    c.opened.clear();
    c.opened_bytes = 0;
    c.open_ahead((&plan, &state), t).unwrap();
    assert_eq!(c.next_file, 100, "nor a file read with O_DIRECT");
    // The bytes bound: files of 1 MiB fill 4 MiB with 4 of them.
    for f in &mut plan {
        f.size = 1 << 20;
    }
    let mut c = cursors(&plan[..20], 1).pop().unwrap().into_inner().unwrap();
    c.open_ahead((&plan[..20], &state), t).unwrap();
    assert_eq!(c.opened.len() as u64, AHEAD_BYTES >> 20);
}

#[test]
fn a_file_swapped_for_a_link_or_a_fifo_is_not_read() {
    let d = tempfile::tempdir().unwrap();
    let (secret, link, fifo) = (d.path().join("s"), d.path().join("l"), d.path().join("f"));
    std::fs::write(&secret, b"secret").unwrap();
    std::os::unix::fs::symlink(&secret, &link).unwrap();
    rustix::fs::mknodat(
        rustix::fs::CWD,
        &fifo,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .unwrap();
    for direct in [false, true] {
        assert!(open_for_read(&secret, direct).is_ok());
        assert!(open_for_read(&link, direct).is_err());
        // Fails at once: a FIFO with no writer would block a plain open forever.
        let e = open_for_read(&fifo, direct).unwrap_err();
        assert!(e.to_string().contains("no longer a regular file"), "{e}");
    }
}

#[test]
fn a_sparse_read_reads_the_selected_pages_in_place_and_leaves_the_rest() {
    let pg = 8192;
    let mut f = tempfile::tempfile().unwrap();
    let data: Vec<u8> = (0..6 * pg).map(|i| (i / pg + 1) as u8).collect();
    std::io::Write::write_all(&mut f, &data).unwrap();
    let mut sel = [0u64; 32];
    sel[0] = 0b10_0110; // pages 1, 2 and 5
    let c = Chunk {
        file: 0,
        handle: Arc::new(f),
        offset: 0,
        len: 6 * pg,
        sel: Some(sel),
    };
    let pool = crate::engine::pool::Pool::new(1, 8 * pg);
    let mut buf = pool.try_get().unwrap();
    buf.space().fill(0xEE);
    assert!(!read_sparse(&c, &sel, pg, &mut buf).unwrap());
    let got = buf.payload();
    assert_eq!(got.len(), 6 * pg);
    for p in 0..6 {
        let want = if [1, 2, 5].contains(&p) {
            p as u8 + 1
        } else {
            0xEE
        };
        assert!(
            got[p * pg..(p + 1) * pg].iter().all(|&b| b == want),
            "page {p}"
        );
    }
    assert_eq!(c.read_len(pg), 3 * pg);
    // A file shorter than planned: the missing page reads as zeros, and says so.
    let mut last = [0u64; 32];
    last[0] = 1 << 6;
    let short = Chunk {
        len: 7 * pg,
        sel: Some(last),
        ..chunk_clone(&c)
    };
    assert!(read_sparse(&short, &short.sel.unwrap(), pg, &mut buf).unwrap());
    assert!(buf.payload()[6 * pg..].iter().all(|&b| b == 0));
}

#[test]
fn pages_ahead_are_asked_for_in_runs_up_to_the_bound_and_never_behind() {
    let pg = 8192usize;
    // Runs of two pages every 100 pages, as a 1% incremental lists them, and a
    // 40-page run.
    let mut pages: RoaringBitmap = (0..2000u32).filter(|p| p % 100 < 2).collect();
    pages.insert_range(5000..5040);
    let plan = vec![ReadFile {
        id: 0,
        path: PathBuf::from("/dev/null").into(),
        size: 6000 * pg as u64,
        volume: 0,
        missing_ok: false,
        pages: Some(Arc::new(pages)),
        direct: false,
        cached: false,
    }];
    let mut c = cursors(&plan, 1).pop().unwrap().into_inner().unwrap();
    c.current = Some((0, Arc::new(tempfile::tempfile().unwrap()), 0));
    // The first chunk (pages 0..128, 4 listed) handed out: asks start after it,
    // one read per run, to the file's end (76 pages are under the bound).
    let asked = |c: &mut Cursor| {
        let mut out = vec![];
        c.take_asks(&mut out);
        out.into_iter().map(|(_, o, l)| (o, l)).collect::<Vec<_>>()
    };
    c.ask_ahead(&plan, 4, 128, pg);
    let out = asked(&mut c);
    let want: Vec<(u64, u64)> = (2..20u64)
        .map(|k| (k * 100 * pg as u64, 2 * pg as u64))
        .chain([(5000 * pg as u64, 40 * pg as u64)])
        .collect();
    assert_eq!(out, want);
    assert_eq!(c.ahead, 6000);
    // Nothing more is asked for: every listed page is.
    c.ask_ahead(&plan, 2, 300, pg);
    assert!(asked(&mut c).is_empty());
    // Readers past what was asked (a new file's first chunk) start it over there.
    (c.ahead, c.ahead_pages) = (0, 0);
    c.ask_ahead(&plan, 0, 5030, pg);
    assert_eq!(asked(&mut c), vec![(5030 * pg as u64, 10 * pg as u64)]);
    // Bounded: 600 listed pages in a row are asked for AHEAD_PAGES at a time.
    let mut dense = RoaringBitmap::new();
    dense.insert_range(0..600);
    let plan = vec![ReadFile {
        pages: Some(Arc::new(dense)),
        ..plan.into_iter().next().unwrap()
    }];
    (c.ahead, c.ahead_pages) = (0, 0);
    c.ask_ahead(&plan, 0, 0, pg);
    let bound = AHEAD_PAGES as u64 * pg as u64;
    assert_eq!(asked(&mut c), vec![(0, bound)]);
    // The readers take 50 of them: 50 more are asked for; then 100: the last 38.
    c.ask_ahead(&plan, 50, 50, pg);
    assert_eq!(asked(&mut c), vec![(bound, 50 * pg as u64)]);
    c.ask_ahead(&plan, 100, 150, pg);
    assert_eq!(
        asked(&mut c),
        vec![(bound + 50 * pg as u64, 38 * pg as u64)]
    );
}

#[test]
fn sparse_chunks_hold_the_listed_pages_and_skip_the_rest() {
    let pages: RoaringBitmap = [3u32, 4, 300, 301, 700].into_iter().collect();
    let (t, pg) = (1 << 20, 8192); // 128 pages per chunk
    let size = 600 * pg as u64; // page 700 is past the end
    let (start, len, sel) = sparse_chunk(&pages, 0, size, t, pg).unwrap();
    assert_eq!((start, len), (0, t));
    assert_eq!(sel[0], 0b11000, "pages 3 and 4");
    assert!(sel[1..].iter().all(|&w| w == 0));
    // Chunks 1 (pages 128..255) holds none: the next is chunk 2 (pages 256..383).
    let (start, len, sel) = sparse_chunk(&pages, t as u64, size, t, pg).unwrap();
    assert_eq!((start, len), (2 * t as u64, t));
    assert_eq!(sel[0], 0b11 << 44, "pages 300 and 301");
    assert_eq!(sparse_chunk(&pages, 3 * t as u64, size, t, pg), None);
    // The last chunk is cut at the file's end.
    let short = 300 * pg as u64 + 100;
    let (start, len, _) = sparse_chunk(&pages, 2 * t as u64, short, t, pg).unwrap();
    assert_eq!((start, len), (2 * t as u64, (short - start) as usize));
    // ... and nothing comes after it, though its last page is listed and cut short.
    let end = 2 * t as u64 + 44 * pg as u64 + 100;
    let (start, len, _) = sparse_chunk(&pages, 2 * t as u64, end, t, pg).unwrap();
    assert_eq!(start + len as u64, end);
    assert_eq!(sparse_chunk(&pages, end, end, t, pg), None);
}
