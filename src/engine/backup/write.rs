//! The write stage: one thread per stripe writes its header block, then whichever
//! finished frames it takes first.

use super::{Item, Shared, WriterEnd};
use crate::device::StripeSink;
use crate::engine::pool;
use crate::engine::stats::Lane;
use crate::format::frame::FRAME_HEADER_LEN;
use crate::format::media::INDEX_MAX;
use crossbeam_channel::Receiver;
use std::time::Instant;

/// Stripe `i`'s writer; returns its sink, frames written, the offset reached and the
/// frame index (each frame's header; none past `INDEX_MAX`).
pub(super) fn writer(
    sh: &Shared,
    i: usize,
    mut sink: Box<dyn StripeSink>,
    header: &[u8],
    wrx: &Receiver<Item>,
    lane: &Lane,
) -> WriterEnd {
    let (abort, write_st) = (sh.abort, &sh.write_st);
    let mut written = header.len() as u64;
    let mut frames = 0u64;
    let mut index = Some(Vec::new());
    let t0 = Instant::now();
    if let Err(e) = sink.write_all(header) {
        abort.fail(crate::fault::like_io(
            &e,
            format!("stripe {}: write failed: {e}", i + 1),
        ));
        return (sink, 0, 0, vec![]);
    }
    if !header.is_empty() {
        lane.op(header.len() as u64, t0.elapsed());
    }
    while let Some((item, waited)) = pool::recv(wrx, abort) {
        write_st.wait_in(waited);
        let t0 = Instant::now();
        if let Err(e) = sink.write_all(item.buf.frame(item.frame_len)) {
            abort.fail(crate::fault::like_io(
                &e,
                format!("stripe {}: write at offset {written} failed: {e}", i + 1),
            ));
            break;
        }
        let took = t0.elapsed();
        write_st.busy(took);
        write_st.op(item.frame_len as u64);
        lane.op(item.frame_len as u64, took);
        written += item.frame_len as u64;
        frames += 1;
        let header = &item.buf.frame(item.frame_len)[..FRAME_HEADER_LEN];
        index = index.filter(|x| x.len() + FRAME_HEADER_LEN <= INDEX_MAX as usize);
        if let Some(x) = &mut index {
            x.extend_from_slice(header);
        }
        sh.pool.put(item.buf);
    }
    (sink, frames, written, index.unwrap_or_default())
}
