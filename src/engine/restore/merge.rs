//! A chain's full set read into a new set's pipeline (a merge): each of its chunks,
//! decompressed, gets the pages newer sets wrote (read back from where their restore
//! put them) and goes to the new set's compressors, with no copy of the whole cluster
//! laid down on the way. Rules:
//! - the newer sets are restored first (`layers`), so `Written` holds every page they
//!   supplied; the full's chunk takes those pages from the staged copy, its own others;
//! - a chunk is the full set's transfer size, clipped to the restored file's size; a
//!   page past the full's file that no newer set wrote is zeros;
//! - every chunk of every restored file goes out exactly once: what the full holds no
//!   frame of (files and chunks new since) is read from the staged copy at the end;
//! - a full's chunk that no newer set changed, whole and of the new set's codec, goes
//!   out as the full stored it (checked, not compressed again).

use super::layers::Written;
use super::{FrameSink, Kept};
use crate::engine::pool::Buf;
use roaring::RoaringBitmap;
use std::collections::HashMap;
use std::io;
use std::sync::Mutex;

/// Where merged chunks go: the new set's pipeline.
pub trait ChunkOut: Sync {
    /// A free buffer of the new set's pool (waits for one).
    fn buffer(&self) -> io::Result<Buf>;
    /// Restored file `file`'s chunk at `offset`, `buf.len` bytes, to be stored.
    fn send(&self, file: u32, offset: u64, buf: Buf) -> io::Result<()>;
    /// Whether restored file `file`'s chunk `k` may come as it is stored: its codec and
    /// digest are the new set's, and its raw bytes `raw` pass the new set's checks.
    fn takes_stored(&self, _file: u32, _k: &Kept, _raw: &[u8]) -> io::Result<bool> {
        Ok(false)
    }
    /// A chunk as the full stored it (`takes_stored` said yes): `buf` holds its stored
    /// bytes, `k` what they are.
    fn send_stored(&self, file: u32, k: &Kept, buf: Buf) -> io::Result<()> {
        let _ = buf;
        Err(io::Error::other(format!(
            "file {file} offset {}: stored chunks are not taken",
            k.offset
        )))
    }
}

/// The copy the newer sets were restored into, read back.
pub trait ReadBack: Sync {
    /// Fills `buf` from restored file `file` at `offset` (zeros past its end).
    fn read_at(&self, file: u32, offset: u64, buf: &mut [u8]) -> io::Result<()>;
}

/// The full set's sink in a merge.
pub struct MergeSink<'a> {
    out: &'a dyn ChunkOut,
    back: &'a dyn ReadBack,
    written: &'a Written,
    /// The full's file id -> the restored file's (a file not mapped was dropped since).
    map: HashMap<u32, u32>,
    transfer: u64,
    /// Chunks sent, per restored file.
    sent: HashMap<u32, Mutex<RoaringBitmap>>,
}

impl<'a> MergeSink<'a> {
    pub fn new(
        out: &'a dyn ChunkOut,
        back: &'a dyn ReadBack,
        written: &'a Written,
        map: HashMap<u32, u32>,
        transfer: u64,
    ) -> MergeSink<'a> {
        let sent = (written.files.keys())
            .map(|id| (id, Mutex::default()))
            .collect();
        MergeSink {
            out,
            back,
            written,
            map,
            transfer,
            sent,
        }
    }

    /// The restored file and the length of its chunk at `offset`, None when the full's
    /// frame lies outside every restored file.
    fn chunk(&self, file: u32, offset: u64) -> Option<(u32, usize)> {
        let to = *self.map.get(&file)?;
        let (size, _) = self.written.files.get(&to)?;
        (offset < *size).then(|| (to, (size - offset).min(self.transfer) as usize))
    }

    /// Puts the newer sets' pages of the chunk into `buf` and sends it, once.
    fn patch_and_send(&self, to: u32, offset: u64, mut buf: Buf) -> io::Result<()> {
        let page = self.written.page;
        let len = buf.len as u64;
        let (first, last) = (offset / page, (offset + len).div_ceil(page));
        let newer: Vec<u32> = {
            let (_, bm) = &self.written.files[&to];
            let bm = bm.lock().unwrap();
            bm.range(first as u32..last as u32)
        };
        let mut i = 0;
        while i < newer.len() {
            // One read per run of adjacent pages.
            let mut j = i + 1;
            while j < newer.len() && newer[j] == newer[j - 1] + 1 {
                j += 1;
            }
            let s = newer[i] as u64 * page - offset;
            let e = ((newer[j - 1] as u64 + 1) * page - offset).min(len);
            self.back
                .read_at(to, offset + s, &mut buf.space()[s as usize..e as usize])?;
            i = j;
        }
        self.send_once(to, offset, buf)
    }

    fn send_once(&self, to: u32, offset: u64, buf: Buf) -> io::Result<()> {
        self.mark_sent(to, offset)?;
        self.out.send(to, offset, buf)
    }

    fn mark_sent(&self, to: u32, offset: u64) -> io::Result<()> {
        let chunk = (offset / self.transfer) as u32;
        if !self.sent[&to].lock().unwrap().insert(chunk) {
            return Err(io::Error::other(format!(
                "the full set holds two frames of restored file {to} at offset {offset}"
            )));
        }
        Ok(())
    }

    /// Whether any newer set wrote a page of restored file `to` in `offset..+len`.
    fn changed(&self, to: u32, offset: u64, len: u64) -> bool {
        let page = self.written.page;
        let (first, last) = (offset / page, (offset + len).div_ceil(page));
        let (_, bm) = &self.written.files[&to];
        let n = bm
            .lock()
            .unwrap()
            .range_cardinality(first as u32..last as u32);
        n > 0
    }

    /// Sends every chunk the full held no frame of, read from the staged copy (zeros
    /// where no set wrote a page). Call once the full's frames are all checked.
    pub fn finish(&self) -> io::Result<()> {
        let mut ids: Vec<u32> = self.sent.keys().copied().collect();
        ids.sort_unstable();
        let page = self.written.page;
        for to in ids {
            let (size, bm) = &self.written.files[&to];
            let sent = self.sent[&to].lock().unwrap().clone();
            for c in 0..size.div_ceil(self.transfer) {
                if sent.contains(c as u32) {
                    continue;
                }
                let offset = c * self.transfer;
                let len = (size - offset).min(self.transfer) as usize;
                let mut buf = self.out.buffer()?;
                let pages = offset / page..(offset + len as u64).div_ceil(page);
                let any = bm
                    .lock()
                    .unwrap()
                    .range_cardinality(pages.start as u32..pages.end as u32);
                if any == 0 {
                    buf.space()[..len].fill(0);
                } else {
                    self.back.read_at(to, offset, &mut buf.space()[..len])?;
                }
                buf.len = len;
                self.send_once(to, offset, buf)?;
            }
        }
        Ok(())
    }
}

impl FrameSink for MergeSink<'_> {
    fn write(&self, file: u32, offset: u64, _data: &[u8]) -> io::Result<()> {
        // Only a Pages frame gets here (a Data frame's buffer is taken whole).
        Err(io::Error::other(format!(
            "the full set holds a frame of changed pages only (file {file}, offset {offset}): a full set's frames hold whole chunks"
        )))
    }

    fn write_buf(&self, file: u32, offset: u64, buf: &mut Buf) -> io::Result<bool> {
        self.merged(file, offset, |out, len| {
            let have = buf.len.min(len);
            if out.capacity() == buf.capacity() {
                std::mem::swap(out, buf);
            } else {
                out.space()[..have].copy_from_slice(&buf.payload()[..have]);
            }
            have
        })?;
        Ok(true)
    }

    fn write_zeros(&self, file: u32, offset: u64, _len: usize) -> io::Result<()> {
        self.merged(file, offset, |_, _| 0)
    }

    fn keeps(&self, k: &Kept, raw: &[u8]) -> io::Result<bool> {
        match self.chunk(k.file, k.offset) {
            Some((to, len)) if len == k.raw_len && !self.changed(to, k.offset, len as u64) => {
                self.out.takes_stored(to, k, raw)
            }
            _ => Ok(false),
        }
    }

    fn write_stored(&self, k: &Kept, buf: &mut Buf) -> io::Result<()> {
        let Some((to, _)) = self.chunk(k.file, k.offset) else {
            return Ok(());
        };
        let mut out = self.out.buffer()?;
        if out.capacity() == buf.capacity() {
            std::mem::swap(&mut out, buf);
        } else if buf.len > out.capacity() {
            return Err(io::Error::other(format!(
                "file {} offset {}: {} stored bytes do not fit the new set's buffer",
                k.file, k.offset, buf.len
            )));
        } else {
            out.space()[..buf.len].copy_from_slice(buf.payload());
            out.len = buf.len;
        }
        self.mark_sent(to, k.offset)?;
        self.out.send_stored(to, k, out)
    }
}

impl MergeSink<'_> {
    /// The full's chunk of `file` at `offset` into a buffer of the new set: `fill`
    /// puts the full's bytes there and says how many; past them, zeros unless a newer
    /// set wrote the page. Nothing for a chunk outside every restored file.
    fn merged(
        &self,
        file: u32,
        offset: u64,
        fill: impl FnOnce(&mut Buf, usize) -> usize,
    ) -> io::Result<()> {
        let Some((to, len)) = self.chunk(file, offset) else {
            return Ok(());
        };
        let mut out = self.out.buffer()?;
        let have = fill(&mut out, len);
        out.space()[have..len].fill(0);
        out.len = len;
        self.patch_and_send(to, offset, out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The new set's side: chunks received, buffers from nowhere.
    #[derive(Default)]
    struct Out(Mutex<Vec<(u32, u64, Vec<u8>)>>);

    impl ChunkOut for Out {
        fn buffer(&self) -> io::Result<Buf> {
            Ok(crate::engine::pool::Pool::new(0, 64).extra())
        }
        fn send(&self, file: u32, offset: u64, buf: Buf) -> io::Result<()> {
            let data = buf.payload().to_vec();
            self.0.lock().unwrap().push((file, offset, data));
            Ok(())
        }
    }

    /// The staged copy: each restored file's bytes.
    struct Back(HashMap<u32, Vec<u8>>);

    impl ReadBack for Back {
        fn read_at(&self, file: u32, offset: u64, buf: &mut [u8]) -> io::Result<()> {
            let f = &self.0[&file];
            for (i, b) in buf.iter_mut().enumerate() {
                *b = f.get(offset as usize + i).copied().unwrap_or(0);
            }
            Ok(())
        }
    }

    fn buf_of(data: &[u8]) -> Buf {
        let mut b = crate::engine::pool::Pool::new(0, 64).extra();
        b.space()[..data.len()].copy_from_slice(data);
        b.len = data.len();
        b
    }

    #[test]
    fn chunks_take_newer_pages_and_every_chunk_goes_out_once() {
        // Pages of 2 bytes, chunks of 4. Restored file 10 has 10 bytes (it grew from
        // the full's 6); file 11 is new since the full; file 12 nobody wrote.
        let w = Written::new([(10, 10), (11, 3), (12, 4)], 2).unwrap();
        {
            // The newer sets wrote page 1 and page 3 of file 10, and all of file 11.
            let mut bm = w.files[&10].1.lock().unwrap();
            bm.insert(1);
            bm.insert(3);
            w.files[&11].1.lock().unwrap().insert_range(0..2);
        }
        let back = Back(HashMap::from([
            (10, b"..NN..MM..".to_vec()),
            (11, b"new".to_vec()),
            (12, vec![]),
        ]));
        let out = Out::default();
        // The full's file 1 is restored file 10; its file 2 was dropped since.
        let m = MergeSink::new(&out, &back, &w, HashMap::from([(1, 10)]), 4);
        let mut b = buf_of(b"aaaa");
        assert!(m.write_buf(1, 0, &mut b).unwrap());
        let mut b = buf_of(b"bb");
        assert!(m.write_buf(1, 4, &mut b).unwrap());
        assert!(m.write_buf(2, 0, &mut buf_of(b"gone")).unwrap());
        assert!(m.write(1, 0, b"pp").is_err(), "a Pages frame in a full");
        // A second frame of one chunk is refused.
        assert!(m.write_buf(1, 0, &mut buf_of(b"aaaa")).is_err());
        m.finish().unwrap();
        let mut got = out.0.into_inner().unwrap();
        got.sort();
        let want: Vec<(u32, u64, Vec<u8>)> = vec![
            (10, 0, b"aaNN".to_vec()),
            (10, 4, b"bbMM".to_vec()),
            (10, 8, vec![0; 2]),
            (11, 0, b"new".to_vec()),
            (12, 0, vec![0; 4]),
        ];
        assert_eq!(got, want);
    }

    #[test]
    fn a_zero_frame_gets_newer_pages_too() {
        let w = Written::new([(5, 4)], 2).unwrap();
        w.files[&5].1.lock().unwrap().insert(0);
        let back = Back(HashMap::from([(5, b"XY..".to_vec())]));
        let out = Out::default();
        let m = MergeSink::new(&out, &back, &w, HashMap::from([(0, 5)]), 4);
        m.write_zeros(0, 0, 4).unwrap();
        m.finish().unwrap();
        assert_eq!(
            out.0.into_inner().unwrap(),
            vec![(5, 0, b"XY\0\0".to_vec())]
        );
    }
}
