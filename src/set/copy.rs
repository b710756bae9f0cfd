//! A set's stripes copied to new devices (`pagevault copy`): each stripe's body goes
//! to its copy as the restore engine reads it, so the bytes copied are the bytes the
//! engine checks (CRC, tag, digest, file checksums); nothing is recorded unless the
//! whole run checks out. A plain or signed set's frames go as stored; an encrypted
//! set's are opened with its data key and sealed again under a new one (a data key
//! never seals two different manifests, and the copy's manifest names its new
//! repository).

use crate::crypt::{DataKey, DOMAIN_FRAME};
use crate::device::{StripeSink, StripeSource};
use crate::engine::backup::StripeResult;
use crate::engine::restore::StripeIn;
use crate::format::frame::{carries_crc, FrameHeader, FRAME_HEADER_LEN};
use crate::format::pad_to;
use crate::format::seal::frame_aad;
use anyhow::{anyhow, bail, Result};
use std::io;
use std::sync::{Arc, Mutex};

/// How a stripe's frames go into its copy.
#[derive(Clone)]
pub enum Frames {
    /// Byte for byte (a plain or signed set).
    AsStored,
    /// An encrypted set's: opened with `old`, sealed with `new` under the same sequence
    /// number and header; `crc`: the frames carry a CRC32C of their stored bytes.
    Reseal {
        old: DataKey,
        new: DataKey,
        set_id: [u8; 16],
        crc: bool,
    },
}

struct State {
    sink: Option<Box<dyn StripeSink>>,
    /// The next offset of the body the copy takes, and where the body ends.
    next: u64,
    end: u64,
    frames: Frames,
    block: u64,
    /// Bytes taken but not yet a whole frame (resealing), from offset `pending_at`.
    pending: Vec<u8>,
    pending_at: u64,
    frame_count: u64,
    /// The source stripe and the copy, for messages.
    name: String,
    dest: String,
    /// Why the copy could not be written (the destination's fault), or a frame could
    /// not be sealed again (the source's).
    write_error: Option<String>,
    frame_error: Option<String>,
}

/// A stripe source whose body is copied as it is read.
struct Tee {
    inner: Box<dyn StripeSource>,
    state: Arc<Mutex<State>>,
}

/// A stripe being copied: its destination's sink until the copy is finished.
pub struct Teed(Arc<Mutex<State>>);

/// What a source is while its tee is made.
struct Nothing;

impl StripeSource for Nothing {
    fn len(&self) -> u64 {
        0
    }
    fn read_exact_at(&self, _: &mut [u8], _: u64) -> io::Result<()> {
        Err(io::Error::other("no source"))
    }
}

/// Starts the copy of `stripe` into `sink`: `header` (the copy's header block) is
/// written at once, the body as the engine reads it; `dest` names the copy.
pub fn tee(
    stripe: &mut StripeIn,
    mut sink: Box<dyn StripeSink>,
    header: &[u8],
    frames: Frames,
    block: u64,
    dest: String,
) -> Result<Teed> {
    if header.len() as u64 != stripe.body_start {
        sink.abort();
        bail!(
            "stripe '{}': its body starts at {}, and the copy's header block is {} bytes",
            stripe.name,
            stripe.body_start,
            header.len()
        );
    }
    if let Err(e) = sink.write_all(header) {
        sink.abort();
        bail!("cannot write '{dest}': {e}");
    }
    let state = Arc::new(Mutex::new(State {
        sink: Some(sink),
        next: stripe.body_start,
        end: stripe.body_end,
        frames,
        block,
        pending: vec![],
        pending_at: stripe.body_start,
        frame_count: stripe.frames,
        name: stripe.name.clone(),
        dest,
        write_error: None,
        frame_error: None,
    }));
    let inner = std::mem::replace(&mut stripe.source, Box::new(Nothing));
    stripe.source = Box::new(Tee {
        inner,
        state: state.clone(),
    });
    Ok(Teed(state))
}

impl StripeSource for Tee {
    fn len(&self) -> u64 {
        self.inner.len()
    }

    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.inner.read_exact_at(buf, offset)?;
        let mut s = self.state.lock().unwrap();
        if s.write_error.is_some() || s.frame_error.is_some() {
            return Err(io::Error::other("the copy stopped"));
        }
        let end = offset + buf.len() as u64;
        // What lies past the body (the frame index) is not the copy's to take.
        if end <= s.next || s.next >= s.end || offset >= s.end {
            return Ok(());
        }
        if offset > s.next {
            let e = format!(
                "read at offset {offset} before offset {} was copied",
                s.next
            );
            s.frame_error = Some(format!("stripe '{}': {e}", s.name));
            return Err(io::Error::other(e));
        }
        let from = (s.next - offset) as usize;
        let to = (end.min(s.end) - offset) as usize;
        s.next += (to - from) as u64;
        s.take(&buf[from..to])
    }
}

impl State {
    fn take(&mut self, bytes: &[u8]) -> io::Result<()> {
        match self.frames.clone() {
            Frames::AsStored => self.write(bytes),
            Frames::Reseal {
                old,
                new,
                set_id,
                crc,
            } => {
                self.pending.extend_from_slice(bytes);
                self.reseal(&old, &new, &set_id, crc)
            }
        }
    }

    fn write(&mut self, bytes: &[u8]) -> io::Result<()> {
        put(&mut self.sink, &self.dest, &mut self.write_error, bytes)
    }

    /// Seals every whole frame pending again and writes it.
    fn reseal(
        &mut self,
        old: &DataKey,
        new: &DataKey,
        set_id: &[u8; 16],
        crc: bool,
    ) -> io::Result<()> {
        let mut done = 0usize;
        while self.pending.len() - done >= FRAME_HEADER_LEN {
            let at = self.pending_at + done as u64;
            let p = &mut self.pending[done..];
            let fail = |m: String| format!("stripe '{}', frame at offset {at}: {m}", self.name);
            let h = match FrameHeader::decode_in(&p[..FRAME_HEADER_LEN], at, true) {
                Ok(h) => h,
                Err(e) => {
                    let m = fail(e.to_string());
                    self.frame_error = Some(m.clone());
                    return Err(io::Error::other(m));
                }
            };
            let n = h.stored_len as usize;
            let total = pad_to((FRAME_HEADER_LEN + n) as u64, self.block) as usize;
            if p.len() < total {
                break;
            }
            let mut hb = [0u8; FRAME_HEADER_LEN];
            h.encode(&mut hb);
            let aad = frame_aad(&hb, set_id);
            let body = &mut p[FRAME_HEADER_LEN..FRAME_HEADER_LEN + n];
            let Some(len) = old.open(DOMAIN_FRAME, h.seq, &aad, body) else {
                let m = fail(
                    "does not authenticate with the set's key: the set is damaged or forged".into(),
                );
                self.frame_error = Some(m.clone());
                return Err(io::Error::other(m));
            };
            new.seal(DOMAIN_FRAME, h.seq, &aad, body, len);
            let stored_crc = match carries_crc(h.codec, Some(crc), false) {
                true => crc32c::crc32c(body),
                false => 0,
            };
            FrameHeader { stored_crc, ..h }.encode(&mut p[..FRAME_HEADER_LEN]);
            put(
                &mut self.sink,
                &self.dest,
                &mut self.write_error,
                &p[..total],
            )?;
            done += total;
        }
        self.pending.drain(..done);
        self.pending_at += done as u64;
        Ok(())
    }
}

/// Writes `bytes` to the copy; a failure is kept as the copy's write error.
fn put(
    sink: &mut Option<Box<dyn StripeSink>>,
    dest: &str,
    error: &mut Option<String>,
    bytes: &[u8],
) -> io::Result<()> {
    let sink = sink.as_mut().expect("a copy under way has its sink");
    sink.write_all(bytes).map_err(|e| {
        let m = format!("cannot write '{dest}': {e}");
        *error = Some(m.clone());
        io::Error::other(m)
    })
}

impl Teed {
    /// Why the destination could not be written, if that stopped the copy.
    pub fn write_error(&self) -> Option<String> {
        self.0.lock().unwrap().write_error.clone()
    }

    /// The stripe's body copied whole: its sink, for the manifest and the commit.
    pub fn finish(self) -> Result<StripeResult> {
        let mut s = self.0.lock().unwrap();
        if let Some(e) = s.write_error.clone().or(s.frame_error.clone()) {
            return Err(anyhow!(e));
        }
        if s.next != s.end || !s.pending.is_empty() {
            bail!(
                "stripe '{}': the copy took its body up to offset {} of {}",
                s.name,
                s.next - s.pending.len() as u64,
                s.end
            );
        }
        Ok(StripeResult {
            frames: s.frame_count,
            body_end: s.end,
            sink: s.sink.take().expect("finished once"),
            index: vec![],
        })
    }

    /// Removes what the copy wrote.
    pub fn abort(self) {
        if let Some(sink) = self.0.lock().unwrap().sink.take() {
            sink.abort();
        }
    }
}
