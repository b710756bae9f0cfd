//! A stripe as one object: multipart or block uploads, ranged reads ahead.

use super::*;

// ---------------------------------------------------------------------------------
// The device.

pub struct ObjectDevice {
    loc: Location,
}

impl ObjectDevice {
    pub fn new(loc: Location) -> ObjectDevice {
        ObjectDevice { loc }
    }
}

/// The part size for a stripe expected to hold `expected` bytes: at least the transfer
/// size and the store's minimum, and large enough that the stripe fits in a tenth of
/// the part limit; parts then double every tenth of the limit, so even a stripe far
/// larger than expected fits.
pub fn part_plan(kind: Kind, transfer: usize, expected: u64) -> (usize, u64) {
    let (min, max_parts) = match kind {
        Kind::S3 | Kind::Gcs => (S3_MIN_PART, S3_MAX_PARTS),
        Kind::Azure => (AZ_PART, AZ_MAX_PARTS),
    };
    let step = max_parts / 10;
    let need = expected.div_ceil(step) as usize;
    let base = transfer
        .max(min)
        .max(need.next_power_of_two().min(256 << 20));
    (base, step)
}

/// Parts sent at once: with the part being filled they stay within UPLOAD_BUDGET.
pub(super) fn parts_in_flight(part: usize) -> usize {
    (UPLOAD_BUDGET / part)
        .saturating_sub(1)
        .clamp(1, MAX_PARTS_IN_FLIGHT)
}

pub(super) fn part_size(kind: Kind, base: usize, step: u64, index: u64) -> usize {
    let max = match kind {
        Kind::S3 | Kind::Gcs => S3_MAX_PART,
        Kind::Azure => AZ_MAX_PART,
    };
    let shift = (index / step).min(20) as u32;
    base.saturating_mul(1usize << shift).min(max)
}

impl Device for ObjectDevice {
    fn describe(&self) -> String {
        self.loc.describe()
    }

    fn create(&self, hint: &crate::device::CreateHint) -> Result<Box<dyn StripeSink>> {
        if self.loc.key.is_empty() || self.loc.key.ends_with('/') {
            bail!(
                "device '{}' names a bucket, not an object: add a key, e.g. {}/backup.pv",
                self.loc.describe(),
                self.loc.describe()
            );
        }
        let path = self.loc.path();
        // The access check (whose error is the clearer) and the upload's start at once:
        // one round trip of the store, not two.
        let (access, upload) = block_on(async {
            futures::join!(
                async { self.loc.store.list(Some(&path)).try_next().await },
                self.loc.store.put_multipart(&path)
            )
        });
        if let Err(e) = access {
            if let Ok(mut up) = upload {
                let _ = block_on(up.abort());
            }
            return Err(self.loc.err("cannot access", e));
        }
        let upload = upload.map_err(|e| self.loc.err("cannot start the upload of", e))?;
        let (base, step) = part_plan(self.loc.kind, hint.transfer_size, hint.expected_bytes);
        Ok(Box::new(ObjectSink {
            loc: self.loc.clone(),
            upload: Some(upload),
            buf: Vec::with_capacity(base),
            base,
            step,
            parts: 0,
            in_flight: Default::default(),
        }))
    }

    fn open(&self) -> Result<Box<dyn StripeSource>> {
        let path = self.loc.path();
        if let Some((len, known)) = block_on(ends(&self.loc, None)) {
            return Ok(Box::new(ObjectSource::new(&self.loc, len, None, known)));
        }
        let meta = block_on(self.loc.store.head(&path))
            .map_err(|e| self.loc.err("cannot open stripe", e))?;
        Ok(Box::new(ObjectSource::new(
            &self.loc,
            meta.size,
            None,
            Vec::new(),
        )))
    }

    fn open_version(&self, version: &str) -> Result<(Box<dyn StripeSource>, Since)> {
        if !valid_version(version) {
            bail!(
                "stripe '{}': version '{}' is not a version id: the catalog record is damaged or forged",
                self.loc.describe(),
                version.escape_default()
            );
        }
        let path = self.loc.path();
        let opts = GetOptions {
            version: Some(version.to_string()),
            head: true,
            ..Default::default()
        };
        // The pinned version's ends (or size) and the newest (what an attacker's PUT or
        // delete left in front), asked at once: one round trip.
        let (ended, newest) = block_on(async {
            futures::join!(
                ends(&self.loc, Some(version.to_string())),
                self.loc.store.head(&path)
            )
        });
        let (len, known) = match ended {
            Some(e) => e,
            None => {
                let meta = block_on(self.loc.store.get_opts(&path, opts))
                    .map_err(|e| {
                        self.loc
                            .err(&format!("cannot open version {version} of stripe"), e)
                    })?
                    .meta;
                (meta.size, Vec::new())
            }
        };
        let since = match newest {
            Ok(m) if m.version.as_deref() == Some(version) => Since::Same,
            Ok(m) => Since::Replaced(match m.version {
                Some(v) if valid_version(&v) => v,
                Some(v) => format!("{}", v.escape_default()),
                None => "(no version id)".into(),
            }),
            Err(object_store::Error::NotFound { .. }) => Since::Removed,
            Err(e) => return Err(self.loc.err("cannot read stripe", e)),
        };
        let source = ObjectSource::new(&self.loc, len, Some(version.to_string()), known);
        Ok((Box::new(source), since))
    }

    fn remove(&self) -> Result<()> {
        self.loc.delete()
    }

    fn write_memory(&self, hint: &crate::device::CreateHint) -> u64 {
        let (base, _) = part_plan(self.loc.kind, hint.transfer_size, hint.expected_bytes);
        ((parts_in_flight(base) + 1) * base) as u64
    }
}

pub(super) struct ObjectSink {
    loc: Location,
    upload: Option<Box<dyn MultipartUpload>>,
    buf: Vec<u8>,
    base: usize,
    step: u64,
    parts: u64,
    in_flight: std::collections::VecDeque<JoinHandle<object_store::Result<()>>>,
}

impl ObjectSink {
    fn current_part_size(&self) -> usize {
        part_size(self.loc.kind, self.base, self.step, self.parts)
    }

    fn max_in_flight(&self) -> usize {
        parts_in_flight(self.current_part_size())
    }

    fn wait_one(&mut self) -> io::Result<()> {
        if let Some(h) = self.in_flight.pop_front() {
            match block_on(h) {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    return Err(crate::fault::to_io(
                        self.loc.err("cannot upload a part of", e),
                    ))
                }
                Err(e) => return Err(io::Error::other(format!("upload task failed: {e}"))),
            }
        }
        Ok(())
    }

    fn send_part(&mut self) -> io::Result<()> {
        let next = Vec::with_capacity(self.current_part_size());
        let data = std::mem::replace(&mut self.buf, next);
        let fut = self
            .upload
            .as_mut()
            .expect("upload open")
            .put_part(PutPayload::from(data));
        self.parts += 1;
        self.in_flight.push_back(spawn(fut));
        while self.in_flight.len() > self.max_in_flight() {
            self.wait_one()?;
        }
        Ok(())
    }
}

impl StripeSink for ObjectSink {
    fn write_all(&mut self, mut data: &[u8]) -> io::Result<()> {
        while !data.is_empty() {
            let room = self.current_part_size() - self.buf.len();
            let k = room.min(data.len());
            self.buf.extend_from_slice(&data[..k]);
            data = &data[k..];
            if self.buf.len() == self.current_part_size() {
                self.send_part()?;
            }
        }
        Ok(())
    }

    fn commit(mut self: Box<Self>) -> Result<Option<String>> {
        let r: Result<Option<String>> = (|| {
            if !self.buf.is_empty() || self.parts == 0 {
                self.send_part()?;
            }
            while !self.in_flight.is_empty() {
                self.wait_one()?;
            }
            let mut up = self.upload.take().expect("upload open");
            match block_on(up.complete()) {
                // A store without versioning says none (or "null").
                Ok(put) => Ok(put.version.filter(|v| valid_version(v))),
                Err(e) => {
                    self.upload = Some(up);
                    Err(explain(
                        &self.loc.describe(),
                        "cannot complete the upload of",
                        e,
                    ))
                }
            }
        })();
        if r.is_err() {
            self.abort_now();
        }
        r
    }

    fn abort(mut self: Box<Self>) {
        self.abort_now();
    }
}

impl ObjectSink {
    fn abort_now(&mut self) {
        // Parts still in flight could land after the abort: wait for them first.
        for h in self.in_flight.drain(..) {
            let _ = block_on(h);
        }
        if let Some(mut up) = self.upload.take() {
            // The store may be down (why the backup failed): keep trying for a while,
            // so no parts are left behind once it is back.
            let t0 = std::time::Instant::now();
            let limit = Duration::from_secs(30).max(2 * retry_config().retry_timeout);
            let discard = self.loc.kind == Kind::Azure && self.parts > 0;
            loop {
                let r = block_on(async {
                    up.abort().await?;
                    if discard {
                        discard_blocks(&self.loc).await?;
                    }
                    Ok::<_, object_store::Error>(())
                });
                match r {
                    Ok(()) => break,
                    Err(e) if t0.elapsed() > limit => {
                        eprintln!(
                            "Warning: the unfinished upload of '{}' could not be aborted ({}); its parts stay in the store until a lifecycle rule removes them",
                            self.loc.describe(),
                            compact(&redact(&e.to_string()))
                        );
                        break;
                    }
                    Err(_) => std::thread::sleep(Duration::from_secs(1)),
                }
            }
        }
    }
}

/// Azure has no abort for a block upload: its staged blocks stay in the account, unseen
/// and billed, for 7 days. Committing an empty block list drops them; the empty blob
/// that makes is deleted. A blob already there (an earlier backup of that name) stays.
async fn discard_blocks(loc: &Location) -> object_store::Result<()> {
    let path = loc.path();
    match loc.store.head(&path).await {
        Err(object_store::Error::NotFound { .. }) => {}
        other => return other.map(|_| ()),
    }
    loc.store.put_multipart(&path).await?.complete().await?;
    loc.store.delete(&path).await
}

#[derive(Default)]
pub(super) struct ReadState {
    /// Where the last read ended: a read starting there is sequential.
    last_end: u64,
    chunks: BTreeMap<u64, JoinHandle<object_store::Result<Vec<u8>>>>,
    ready: BTreeMap<u64, Vec<u8>>,
    /// Chunk buffers done with, for the next GETs: fresh 8 MiB buffers are mapped and
    /// faulted in page by page, a fifth of a restore's CPU.
    free: Vec<Vec<u8>>,
    /// GETs in flight ahead of the reader: READ_AHEAD, one more each time the reader
    /// waits for a chunk read ahead.
    depth: u64,
}

impl ReadState {
    fn depth(&self) -> u64 {
        fixed_read_ahead().unwrap_or(self.depth.max(READ_AHEAD))
    }

    /// The reader waited for a chunk it asked ahead: ask one more, while memory allows.
    fn waited(&mut self) {
        let d = self.depth();
        if fixed_read_ahead().is_none() && d < READ_AHEAD_MAX && take_extra_read_ahead() {
            self.depth = d + 1;
        }
    }
}

impl Drop for ReadState {
    fn drop(&mut self) {
        give_back_read_ahead(self.depth.saturating_sub(READ_AHEAD));
    }
}

pub(super) struct ObjectSource {
    loc: Location,
    len: u64,
    /// The version every GET asks for (a stripe pinned by its catalog record).
    version: Option<String>,
    /// Bytes read when it was opened (its first and last), by offset.
    known: Vec<(u64, Vec<u8>)>,
    state: Mutex<ReadState>,
}

/// A stripe's size and its first and last bytes, from two ranged GETs sent at once;
/// None when either fails or they disagree (an object shorter than a range, replaced
/// between them): the caller then asks its size alone, with the store's own error.
async fn ends(loc: &Location, version: Option<String>) -> Option<(u64, Vec<(u64, Vec<u8>)>)> {
    let path = loc.path();
    let (head, tail) = futures::join!(
        get_part(
            &*loc.store,
            &path,
            GetRange::Bounded(0..OPEN_HEAD),
            version.clone()
        ),
        get_part(&*loc.store, &path, GetRange::Suffix(OPEN_TAIL), version)
    );
    let ((hm, h_at, h), (tm, t_at, t)) = (head.ok()?, tail.ok()?);
    let same = hm.size == tm.size && hm.e_tag == tm.e_tag && hm.version == tm.version;
    (same && h_at == 0).then_some((hm.size, vec![(h_at, h), (t_at, t)]))
}

impl ObjectSource {
    fn new(loc: &Location, len: u64, version: Option<String>, known: Vec<(u64, Vec<u8>)>) -> Self {
        ObjectSource {
            loc: loc.clone(),
            len,
            version,
            known,
            state: Mutex::new(ReadState::default()),
        }
    }

    /// Copies `offset..` into `buf` from the bytes read at open, when they hold all of it.
    fn read_known(&self, buf: &mut [u8], offset: u64) -> bool {
        let end = offset + buf.len() as u64;
        for (at, b) in &self.known {
            if offset >= *at && end <= at + b.len() as u64 {
                let from = (offset - at) as usize;
                buf.copy_from_slice(&b[from..from + buf.len()]);
                return true;
            }
        }
        false
    }
    /// GETs `start..end` into `buf`, streaming the body (no second copy of it).
    fn fetch(
        &self,
        start: u64,
        end: u64,
        buf: Vec<u8>,
    ) -> JoinHandle<object_store::Result<Vec<u8>>> {
        let store = self.loc.store.clone();
        let path = self.loc.path();
        let version = self.version.clone();
        spawn(async move { get_range(&*store, &path, start..end, None, version, buf).await })
    }

    fn wait(&self, h: JoinHandle<object_store::Result<Vec<u8>>>) -> io::Result<Vec<u8>> {
        block_on(h)
            .map_err(|e| io::Error::other(format!("read task failed: {e}")))?
            .map_err(|e| crate::fault::to_io(self.loc.err("cannot read stripe", e)))
    }

    fn chunk_range(&self, c: u64) -> (u64, u64) {
        let s = c * READ_CHUNK;
        (s, (s + READ_CHUNK).min(self.len))
    }

    /// Makes chunk `c` ready, waiting for its GET (or sending it now).
    fn chunk(&self, st: &mut ReadState, c: u64) -> io::Result<()> {
        if st.ready.contains_key(&c) {
            return Ok(());
        }
        let (s, e) = self.chunk_range(c);
        let h = match st.chunks.remove(&c) {
            Some(h) => {
                if !h.is_finished() {
                    st.waited();
                }
                h
            }
            None => self.fetch(s, e, st.free.pop().unwrap_or_default()),
        };
        let b = self.wait(h)?;
        st.ready.insert(c, b);
        Ok(())
    }
}

impl StripeSource for ObjectSource {
    fn len(&self) -> u64 {
        self.len
    }

    fn reading_from(&self, offset: u64) {
        self.state.lock().unwrap().last_end = offset;
    }

    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let end = offset + buf.len() as u64;
        if end > self.len {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!(
                    "'{}' is {} bytes; cannot read {} bytes at {offset}",
                    self.loc.describe(),
                    self.len,
                    buf.len()
                ),
            ));
        }
        let mut st = self.state.lock().unwrap();
        let sequential = offset == st.last_end && offset > 0;
        st.last_end = end;
        if !sequential {
            drop(st);
            if self.read_known(buf, offset) {
                return Ok(());
            }
            // Header, tail, manifest: exactly the bytes asked for.
            let b = self.wait(self.fetch(offset, end, Vec::new()))?;
            buf.copy_from_slice(&b);
            return Ok(());
        }
        let (first, last) = (offset / READ_CHUNK, (end - 1) / READ_CHUNK);
        // Chunks behind the reader are done with: their buffers serve the next GETs.
        while let Some(e) = st.ready.first_entry() {
            if *e.key() >= first {
                break;
            }
            let b = e.remove();
            st.free.push(b);
        }
        let chunks = self.len.div_ceil(READ_CHUNK);
        for c in first..(last + 1 + st.depth()).min(chunks) {
            if !st.ready.contains_key(&c) && !st.chunks.contains_key(&c) {
                let (s, e) = self.chunk_range(c);
                let b = st.free.pop().unwrap_or_default();
                let h = self.fetch(s, e, b);
                st.chunks.insert(c, h);
            }
        }
        let mut at = 0usize;
        for c in first..=last {
            self.chunk(&mut st, c)?;
            let b = &st.ready[&c];
            let from = (offset + at as u64 - c * READ_CHUNK) as usize;
            let take = (buf.len() - at).min(b.len() - from);
            buf[at..at + take].copy_from_slice(&b[from..from + take]);
            at += take;
        }
        Ok(())
    }
}
