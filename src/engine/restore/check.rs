//! The check stage: every frame's CRC32C, GCM tag (an encrypted set's) or keyed BLAKE3
//! tag (a signed set's), range, decompressed length and content digest checked before a
//! byte of it is written.

use super::write::{self, FrameWrite};
use super::{Held, Item, Kept, Params, Shared};
use crate::crypt::DOMAIN_FRAME;
use crate::engine::codec::Decompressor;
use crate::engine::pool::{self, Buf};
use crate::format::frame::{bitmap_len, carries_crc, FrameHeader, FrameKind, FRAME_HEADER_LEN};
use crate::format::manifest::file_checksum;
use crate::format::seal::frame_aad;
use crate::format::{pad_to, page_checks, Codec, ContentHash};
use anyhow::{anyhow, Result};
use crossbeam_channel::{Receiver, Sender};
use std::sync::atomic::Ordering::Relaxed;
use std::time::Instant;

/// One decompressor thread: checks frames from `rx` and writes them, or hands them to
/// the writers (`writes`).
pub(super) fn checker(
    sh: &Shared,
    rx: &Receiver<Item>,
    writes: Option<&Sender<(usize, FrameWrite)>>,
) {
    let abort = sh.abort;
    let mut dec = match Decompressor::new() {
        Ok(d) => d,
        Err(e) => return abort.fail(e.into()),
    };
    let mut scratch = sh.pool.extra();
    let zeros = vec![0u8; sh.p.transfer_size];
    while let Some((item, waited)) = pool::recv(rx, abort) {
        sh.dec_st.wait_in(waited);
        let t0 = Instant::now();
        let (fi, w) = match check(sh, item, &mut dec, &mut scratch, &zeros) {
            Ok(x) => x,
            Err(e) => return abort.fail(e),
        };
        sh.dec_st.busy(t0.elapsed());
        sh.dec_st.op(w.raw_len);
        let r = match writes {
            // The writers stopped: one failed, and said why.
            Some(tx) => match tx.send((fi, w)) {
                Ok(()) => Ok(()),
                Err(e) => return sh.pool.put(e.into_inner().1.buf),
            },
            None => write::write(sh, fi, w),
        };
        if let Err(e) = r {
            return abort.fail(e);
        }
    }
}

/// Checks one frame and records its digest; returns its file's index and the write.
fn check(
    sh: &Shared,
    mut item: Item,
    dec: &mut Decompressor,
    scratch: &mut Buf,
    zeros: &[u8],
) -> Result<(usize, FrameWrite)> {
    let (p, t) = (sh.p, sh.p.transfer_size as u64);
    let h = &item.header.clone();
    let at = item.at;
    let name = &sh.stripes[item.stripe].name;
    let fail = |msg: String| anyhow!("stripe '{name}', frame at offset {at}: {msg}");
    let (sealed, signed) = (p.seal.as_ref(), p.sign.as_ref());
    if sealed.is_some_and(|s| !s.crc) && h.stored_crc != 0 {
        return Err(fail(format!(
            "its CRC32C field holds {:08x} in a set whose frames carry none: the set is damaged or forged",
            h.stored_crc
        )));
    }
    // Where a frame carries a CRC, damage reads as damage before a forgery (a sealed
    // set's method 1); where it does not, the tag or the content digest below checks.
    if let Some(m) = crc_damage(p, h, item.buf.payload()).filter(|_| item.partial.is_none()) {
        return Err(fail(m));
    }
    if let Some(s) = sealed {
        let mut hb = [0u8; FRAME_HEADER_LEN];
        h.encode(&mut hb);
        let aad = frame_aad(&hb, &s.set_id);
        let n = item.buf.len;
        match s.dek.open(DOMAIN_FRAME, h.seq, &aad, &mut item.buf.space()[..n]) {
            Some(len) => item.buf.len = len,
            None => {
                return Err(fail(
                    "does not authenticate with the set's key: the frame was damaged, forged, moved or replayed: the set is damaged or forged".into(),
                ))
            }
        }
    }
    if let Some(mac) = signed {
        // Before anything reads the bytes: a forged frame is never decompressed.
        let mut hb = [0u8; FRAME_HEADER_LEN];
        h.encode(&mut hb);
        let bound = frame_aad(&hb, &mac.set_id);
        if !mac.frame.ok(&bound, item.buf.payload(), &h.raw_hash) {
            return Err(fail(
                "its signature does not match with the set's key: the frame was forged, edited, moved or replayed: the set is damaged or forged".into(),
            ));
        }
    }
    let stored = item.buf.payload();
    let Some(fi) = sh.index.get(h.file_id) else {
        return Err(fail(format!(
            "names file {} that the manifest does not list as a regular file",
            h.file_id
        )));
    };
    let size = sh.files[fi].size;
    let expect = size.saturating_sub(h.offset).min(t);
    let fits = match h.kind {
        FrameKind::Pages => {
            (h.raw_len as u64) <= expect + bitmap_len(expect, p.page_size as u64) as u64
        }
        _ => h.raw_len as u64 == expect,
    };
    if !h.offset.is_multiple_of(t) || h.offset >= size || !fits {
        return Err(fail(format!(
            "range {}+{} does not fit file {} of {size} bytes",
            h.offset, h.raw_len, h.file_id
        )));
    }
    if let Some(part) = item.partial.take() {
        // Read in part: each page read against its page check; the header digest (its
        // CRC checked) stands for the chunk, the pages not read being the target's.
        let page = p.page_size;
        for &(s, e) in &part.ranges {
            let bytes = &item.buf.payload()[s as usize..e as usize];
            if let Some(k) = page_checks::first_bad(&part.checks, s as usize / page, bytes, page) {
                return Err(fail(format!(
                    "page {k} of the frame (file offset {}) does not match its page check: the stored bytes are damaged",
                    h.offset + (k * page) as u64
                )));
            }
        }
        sh.stored_total.fetch_add(part.read, Relaxed);
        record_digest(sh, fi, h, h.raw_hash).map_err(fail)??;
        let ranges = Some(part.ranges);
        return Ok((
            fi,
            FrameWrite {
                ranges,
                ..FrameWrite::of(h, expect, item.buf)
            },
        ));
    }
    // A plain set's header digest is of the raw bytes (checked by the header CRC and,
    // through the file checksum, by the manifest): a delta restore compares it with
    // the target's bytes before anything is decompressed.
    if let (Some(sink), None, None, false) = (sh.sink, sealed, signed, h.kind == FrameKind::Pages) {
        let q = Held {
            file: h.file_id,
            offset: h.offset,
            len: h.raw_len as usize,
            hash: p.hash,
            digest: &h.raw_hash,
        };
        let held = sink
            .holds(q, scratch.space())
            .map_err(|e| fail(format!("cannot compare with the target: {e}")))?;
        if held {
            record(sh, fi, h, h.raw_hash).map_err(fail)??;
            let held = true;
            return Ok((
                fi,
                FrameWrite {
                    held,
                    ..FrameWrite::of(h, expect, item.buf)
                },
            ));
        }
    }
    let raw: &[u8] = match (h.kind, h.codec) {
        (FrameKind::Zero, _) => &zeros[..h.raw_len as usize],
        (_, Codec::None) => stored,
        (_, codec) => match dec.decompress(codec, stored, scratch.space()) {
            Ok(n) if n == h.raw_len as usize => &scratch.space()[..n],
            Ok(n) => {
                return Err(fail(format!(
                    "decompressed to {n} bytes, expected {}",
                    h.raw_len
                )))
            }
            Err(e) => return Err(fail(format!("cannot decompress: {e}"))),
        },
    };
    let digest = p.hash.digest(raw);
    // A sealed frame carries no digest (it would confirm a guessed chunk), a signed one
    // its tag: the tag authenticated the bytes, and the file checksum still covers each
    // chunk's digest.
    if sealed.is_none() && signed.is_none() && digest != h.raw_hash {
        let name = p.hash.name();
        return Err(fail(match h.codec {
            Codec::None => digest_damage(p.hash),
            _ => format!("restored content does not match its {name} digest"),
        }));
    }
    if sh.sink.is_none() && sealed.is_none() && signed.is_none() {
        verify_page_checks(p, h, &item.buf).map_err(fail)?;
    }
    let (kind, file, offset, raw_len) = (h.kind, h.file_id, h.offset, h.raw_len as u64);
    // The stored bytes (decrypted) stay in the buffer when the sink keeps them.
    let kept = match (sh.sink, kind) {
        (Some(sink), FrameKind::Data) => {
            let k = Kept {
                file,
                offset,
                raw_len: raw_len as usize,
                codec: h.codec,
                hash: p.hash,
                digest,
            };
            let keep = sink.keeps(&k, raw).map_err(|e| fail(e.to_string()))?;
            keep.then_some(k)
        }
        _ => None,
    };
    record(sh, fi, h, digest).map_err(fail)??;
    let mut buf = item.buf;
    if kept.is_none() && sh.sink.is_some() && h.codec != Codec::None && h.kind != FrameKind::Zero {
        // The decompressed bytes go to the write; the input buffer becomes scratch.
        scratch.len = raw_len as usize;
        std::mem::swap(scratch, &mut buf);
    }
    Ok((
        fi,
        FrameWrite {
            kept,
            ..FrameWrite::of(h, expect, buf)
        },
    ))
}

/// A verify's check of a plain frame's page checks (in its padding, in `buf` past the
/// stored bytes), where it has them: whole, and each page's CRC32C its page's.
fn verify_page_checks(p: &Params, h: &FrameHeader, buf: &Buf) -> Result<(), String> {
    if h.kind != FrameKind::Data || h.codec != Codec::None {
        return Ok(());
    }
    let (raw, page) = (buf.payload(), p.page_size);
    let total = pad_to((FRAME_HEADER_LEN + raw.len()) as u64, p.block_size as u64) as usize;
    if total > FRAME_HEADER_LEN + buf.capacity() {
        return Ok(());
    }
    let pad = &buf.frame(total)[FRAME_HEADER_LEN + raw.len()..];
    let mut hb = [0u8; FRAME_HEADER_LEN];
    h.encode(&mut hb);
    let Some(checks) = page_checks::read(&hb, raw.len(), page, pad)? else {
        return Ok(());
    };
    match page_checks::first_bad(&checks, 0, raw, page) {
        Some(k) => Err(format!(
            "page {k} of the frame does not match its page check (its page checks or its stored bytes are damaged)"
        )),
        None => Ok(()),
    }
}

/// What a frame's CRC32C says of its stored bytes, where it carries one (`carries_crc`).
pub(super) fn crc_damage(p: &Params, h: &FrameHeader, stored: &[u8]) -> Option<String> {
    let carried = carries_crc(h.codec, p.seal.as_ref().map(|s| s.crc), p.sign.is_some());
    let crc = if carried {
        crc32c::crc32c(stored)
    } else {
        h.stored_crc
    };
    (crc != h.stored_crc).then(|| {
        format!(
            "stored bytes are damaged (CRC32C {crc:08x}, expected {:08x})",
            h.stored_crc
        )
    })
}

/// An uncompressed frame whose content digest does not match its stored bytes.
pub(super) fn digest_damage(hash: ContentHash) -> String {
    format!(
        "stored bytes are damaged (their {} digest does not match)",
        hash.name()
    )
}

/// Counts a checked frame and records its digest; a file whose chunks are all checked
/// gets its checksum made and told (`Shared::done`): its error is the run's, as it is.
fn record(sh: &Shared, fi: usize, h: &FrameHeader, digest: [u8; 32]) -> Result<Result<()>, String> {
    sh.stored_total.fetch_add(h.stored_len as u64, Relaxed);
    record_digest(sh, fi, h, digest)
}

/// Records a frame's digest for its file's checksum (a frame stepped over too).
pub(super) fn record_digest(
    sh: &Shared,
    fi: usize,
    h: &FrameHeader,
    digest: [u8; 32],
) -> Result<Result<()>, String> {
    let (f, t) = (&sh.files[fi], sh.p.transfer_size as u64);
    let chunks = (!f.sparse).then(|| f.size.div_ceil(t));
    match sh.state.record(fi, h.offset / t, digest, chunks) {
        Err(write::Twice) => Err(format!(
            "file {} offset {} is stored twice",
            h.file_id, h.offset
        )),
        Ok(None) => Ok(Ok(())),
        Ok(Some(d)) => Ok((sh.done)(fi, Ok(file_checksum(f.size, d.values())))),
    }
}
