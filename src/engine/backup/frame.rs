//! The compress stage: a chunk checked by the source's filter, reduced to its
//! selected pages for a differential, digested, compressed unless that does not
//! shrink it, sealed (an encrypted set) or tagged (a signed set) and framed.

use super::{Item, PageSet, Shared};
use crate::crypt::{DOMAIN_FRAME, TAG_LEN};
use crate::engine::codec::Compressor;
use crate::engine::pool;
use crate::format::frame::{carries_crc, FrameHeader, FrameKind, FRAME_HEADER_LEN};
use crate::format::seal::frame_aad;
use crate::format::{pad_to, page_checks, Codec, ContentHash, FORMAT_VERSION};
use anyhow::anyhow;
use crossbeam_channel::{Receiver, Sender};
use std::sync::atomic::Ordering::Relaxed;
use std::time::Instant;

/// One compressor thread: frames chunks from `crx` until the readers are done.
pub(super) fn compressor(sh: &Shared, crx: &Receiver<Item>, wtx: &Sender<Item>) {
    let (p, abort) = (sh.p, sh.abort);
    let mut comp = match p.codec.codec {
        Codec::None => None,
        _ => match Compressor::new(p.codec) {
            Ok(c) => Some(c),
            Err(e) => return abort.fail(e.into()),
        },
    };
    let mut scratch = sh.pool.extra();
    while let Some((mut item, waited)) = pool::recv(crx, abort) {
        sh.comp_st.wait_in(waited);
        let t0 = Instant::now();
        let raw_len = match frame(sh, &mut item, &mut scratch, comp.as_mut()) {
            Ok(n) => n,
            Err(e) => return abort.fail(e),
        };
        sh.comp_st.busy(t0.elapsed());
        sh.comp_st.op(raw_len as u64);
        match pool::send(wtx, item, abort) {
            Some(w) => sh.comp_st.wait_out(w),
            None => break,
        }
    }
}

/// Turns the chunk in `item` into a frame (header, stored bytes, padding) in place;
/// `scratch` is swapped with the item's buffer when the frame is built there. Returns
/// the raw length framed (the selected pages only, for a differential).
fn frame(
    sh: &Shared,
    item: &mut Item,
    scratch: &mut pool::Buf,
    comp: Option<&mut Compressor>,
) -> anyhow::Result<usize> {
    let p = sh.p;
    let t = p.transfer_size as u64;
    if let Some(super::Stored {
        codec,
        raw_len,
        digest,
    }) = item.stored
    {
        // A merge keeps the full's stored bytes: checked there, framed here.
        sh.kept_frames.fetch_add(1, Relaxed);
        let i = item.file as usize;
        sh.state.record(i, &sh.plan[i], item.offset / t, digest, t);
        finish(sh, item, FrameKind::Data, codec, raw_len, digest);
        return Ok(raw_len);
    }
    let raw = item.buf.payload();
    let file = &sh.plan[item.file as usize];
    if let Some(f) = sh.filter {
        f.check(file, item.offset, raw, item.sel.as_ref())
            .map_err(|e| anyhow!(e))?;
    }
    // A sparse chunk holds the pages it read; otherwise the filter may choose some.
    let pages = item
        .sel
        .or_else(|| sh.filter.and_then(|f| f.select(file, item.offset, raw)));
    if let Some(sel) = pages {
        // Keep the chosen pages only, behind their bitmap, in the scratch buffer; the
        // raw buffer then serves as scratch.
        let n = pack_pages(item.buf.payload(), &sel, p.page_size, scratch.space());
        scratch.len = n;
        std::mem::swap(scratch, &mut item.buf);
    }
    let raw_len = item.buf.len;
    let raw = item.buf.payload();
    let digest = match (pages, item.digest) {
        (None, Some(d)) => d,
        _ => ContentHash::of_version(FORMAT_VERSION).digest(raw),
    };
    let zero = pages.is_none() && is_zero(raw);
    let i = item.file as usize;
    sh.state.record(i, &sh.plan[i], item.offset / t, digest, t);
    let data_kind = if pages.is_some() {
        FrameKind::Pages
    } else {
        FrameKind::Data
    };
    let (kind, codec) = if zero {
        item.buf.len = 0;
        sh.zero_frames.fetch_add(1, Relaxed);
        (FrameKind::Zero, Codec::None)
    } else if let Some(c) = comp {
        match c.compress(item.buf.payload(), scratch.space()) {
            Ok(n) if n < raw_len => {
                scratch.len = n;
                std::mem::swap(scratch, &mut item.buf);
                (data_kind, p.codec.codec)
            }
            Ok(_) => (data_kind, Codec::None),
            Err(e) => return Err(anyhow!("compression failed: {e}")),
        }
    } else {
        (data_kind, Codec::None)
    };
    finish(sh, item, kind, codec, raw_len, digest);
    Ok(raw_len)
}

/// Seals or tags the stored bytes in `item` (an encrypted or signed set), then writes
/// the frame header and padding around them.
fn finish(
    sh: &Shared,
    item: &mut Item,
    kind: FrameKind,
    codec: Codec,
    raw_len: usize,
    digest: [u8; 32],
) {
    let p = sh.p;
    let seq = sh.seq.fetch_add(1, Relaxed);
    let mut header = FrameHeader {
        kind,
        codec,
        file_id: sh.plan[item.file as usize].id,
        offset: item.offset,
        raw_len: raw_len as u32,
        stored_len: item.buf.len as u32,
        stored_crc: 0,
        raw_hash: digest,
        seq,
    };
    if let Some(s) = &p.seal {
        // Sealed after compression; the header's digest is left zero (it would let
        // a reader confirm a guessed chunk).
        header.raw_hash = [0; 32];
        header.stored_len += TAG_LEN as u32;
        header.encode(item.buf.header_mut());
        let aad = frame_aad(item.buf.header_mut(), &s.set_id);
        let len = item.buf.len;
        item.buf.len = s.dek.seal(DOMAIN_FRAME, seq, &aad, item.buf.space(), len);
    }
    if let Some(mac) = &p.sign {
        // The digest field holds the tag of the stored bytes, bound to the frame's
        // header fields, sequence number and set; the file checksum keeps the XXH3.
        header.encode(item.buf.header_mut());
        let bound = frame_aad(item.buf.header_mut(), &mac.set_id);
        header.raw_hash = mac.frame.tag(&bound, item.buf.payload());
    }
    let stored_len = item.buf.len;
    header.stored_crc = if carries_crc(codec, p.seal.as_ref().map(|s| s.crc), p.sign.is_some()) {
        crc32c::crc32c(item.buf.payload())
    } else {
        0
    };
    let total = pad_to((FRAME_HEADER_LEN + stored_len) as u64, p.block_size as u64) as usize;
    item.buf.space()[stored_len..total - FRAME_HEADER_LEN].fill(0);
    header.encode(item.buf.header_mut());
    if kind == FrameKind::Data && codec == Codec::None && p.seal.is_none() && p.sign.is_none() {
        // A plain set's uncompressed frame: its pages' CRC32C in its padding, when they
        // fit, for a restore that reads only some pages (docs/FORMAT.md).
        let mut hb = [0u8; FRAME_HEADER_LEN];
        hb.copy_from_slice(item.buf.header_mut());
        let (raw, pad) = item.buf.space()[..total - FRAME_HEADER_LEN].split_at_mut(stored_len);
        page_checks::write(&hb, raw, p.page_size, pad);
    }
    item.frame_len = total;
    sh.stored_total.fetch_add(stored_len as u64, Relaxed);
}

/// Writes the bitmap of `sel` and the selected pages of `chunk` into `out`; returns
/// the length written.
fn pack_pages(chunk: &[u8], sel: &PageSet, page: usize, out: &mut [u8]) -> usize {
    let npages = chunk.len().div_ceil(page);
    let bm = crate::format::frame::bitmap_len(chunk.len() as u64, page as u64);
    out[..bm].fill(0);
    let mut at = bm;
    for i in 0..npages {
        if sel[i / 64] >> (i % 64) & 1 == 1 {
            out[i / 8] |= 1 << (i % 8);
            let src = &chunk[i * page..((i + 1) * page).min(chunk.len())];
            out[at..at + src.len()].copy_from_slice(src);
            at += src.len();
        }
    }
    at
}

fn is_zero(b: &[u8]) -> bool {
    let (head, body, tail) = unsafe { b.align_to::<u128>() };
    head.iter().all(|&x| x == 0) && body.iter().all(|&x| x == 0) && tail.iter().all(|&x| x == 0)
}

#[cfg(test)]
mod tests {
    use super::is_zero;

    #[test]
    fn zero_detection() {
        let mut v = vec![0u8; 10_001];
        assert!(is_zero(&v[1..]));
        v[10_000] = 1;
        assert!(!is_zero(&v[1..]));
        v[10_000] = 0;
        v[3] = 1;
        assert!(!is_zero(&v));
    }
}
