//! The stored form of a summary (docs/FORMAT.md): header, zstd body, bounded parsing.

use super::*;

fn put_u32(b: &mut Vec<u8>, v: u32) {
    b.extend_from_slice(&v.to_le_bytes());
}
fn put_u64(b: &mut Vec<u8>, v: u64) {
    b.extend_from_slice(&v.to_le_bytes());
}

impl Summary {
    /// The stored form: header, then the zstd-compressed body.
    pub fn encode(&self) -> Vec<u8> {
        let mut body = Vec::with_capacity(4096);
        put_u64(&mut body, self.seg_start);
        put_u64(&mut body, self.seg_end);
        put_u64(&mut body, self.covered_from);
        put_u64(&mut body, self.end);
        put_u32(&mut body, self.flags);
        put_u32(&mut body, self.major);
        let note = &self.note.as_bytes()[..self.note.len().min(NOTE_MAX)];
        put_u32(&mut body, note.len() as u32);
        body.extend_from_slice(note);
        put_u32(&mut body, self.databases.len() as u32);
        for &(spc, db) in &self.databases {
            put_u32(&mut body, spc);
            put_u32(&mut body, db);
        }
        put_u32(&mut body, self.rels.len() as u32);
        for (k, e) in &self.rels {
            put_u32(&mut body, k.file.spc);
            put_u32(&mut body, k.file.db);
            put_u32(&mut body, k.file.rel);
            body.push(k.fork);
            body.push(e.limit.is_some() as u8);
            put_u32(&mut body, e.limit.unwrap_or(0));
            put_u32(&mut body, e.blocks.serialized_size() as u32);
            e.blocks
                .serialize_into(&mut body)
                .expect("writing to a Vec");
        }
        match &self.carry {
            Some(c) => {
                body.push(1);
                put_u64(&mut body, c.lsn);
                put_u32(&mut body, c.total);
                put_u32(&mut body, c.bytes.len() as u32);
                body.extend_from_slice(&c.bytes);
            }
            None => body.push(0),
        }
        let stored = zstd::bulk::compress(&body, ZSTD_LEVEL).expect("zstd compresses a buffer");
        let mut out = Vec::with_capacity(HDR + stored.len());
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&(self.rules as u16).to_le_bytes());
        let name = self.segment.as_bytes();
        out.extend_from_slice(&(name.len() as u16).to_le_bytes());
        let mut padded = [0u8; NAME_MAX];
        padded[..name.len()].copy_from_slice(name);
        out.extend_from_slice(&padded);
        out.extend_from_slice(&self.segment_blake3);
        put_u64(&mut out, body.len() as u64);
        put_u64(&mut out, stored.len() as u64);
        put_u32(&mut out, crc32c::crc32c(&stored));
        let c = crc32c::crc32c(&out[..128]);
        put_u32(&mut out, c);
        out.extend_from_slice(&stored);
        out
    }

    /// Parses a stored summary, every count and length bounded before it is used. The
    /// error says what is wrong and where (header field or body offset).
    pub fn decode(b: &[u8]) -> Result<Summary, String> {
        let (segment, segment_blake3, rules, body) = decode_header(b)?;
        let mut r = Reader { b: &body, at: 0 };
        let seg_start = r.u64()?;
        let seg_end = r.u64()?;
        let covered_from = r.u64()?;
        let end = r.u64()?;
        let flags = r.u32()?;
        if flags & !KNOWN_FLAGS != 0 {
            return Err(format!(
                "its body gives unknown flags {flags:#x} (offset 32)"
            ));
        }
        let major = r.u32()?;
        let nlen = r.count(NOTE_MAX, 1, "note length")?;
        let note = String::from_utf8_lossy(r.bytes(nlen)?).into_owned();
        let ndb = r.count(usize::MAX, 8, "database count")?;
        let mut databases = BTreeSet::new();
        for _ in 0..ndb {
            databases.insert((r.u32()?, r.u32()?));
        }
        let rels = read_rels(&mut r)?;
        let carry = read_carry(&mut r)?;
        if r.at != body.len() {
            return Err(format!(
                "its body has {} bytes after its end (body offset {})",
                body.len() - r.at,
                r.at
            ));
        }
        Ok(Summary {
            segment,
            segment_blake3,
            major,
            rules,
            seg_start,
            seg_end,
            covered_from,
            end,
            flags,
            note,
            rels,
            databases,
            carry,
        })
    }
}

/// The header's checks; returns the segment's name and BLAKE3 and the body.
fn decode_header(b: &[u8]) -> Result<(String, [u8; 32], u32, Vec<u8>), String> {
    if b.len() < HDR {
        return Err(format!(
            "it is {} bytes, shorter than its {HDR}-byte header",
            b.len()
        ));
    }
    if &b[..8] != MAGIC {
        return Err("it does not start with a pagevault block summary header".into());
    }
    if crc32c::crc32c(&b[..128]) != get_u32(b, 128) {
        return Err("its header fails its CRC32C".into());
    }
    let ver = get_u16(b, 8);
    if !(OLDEST_VERSION..=VERSION).contains(&ver) {
        return Err(format!(
            "it has format version {ver}, which this pagevault does not read"
        ));
    }
    let nl = get_u16(b, 10) as usize;
    let segment = match std::str::from_utf8(&b[12..12 + nl.min(NAME_MAX)]) {
        Ok(n) if nl <= NAME_MAX => n.to_string(),
        _ => return Err("its header holds no valid segment name".into()),
    };
    let segment_blake3: [u8; 32] = b[76..108].try_into().unwrap();
    let (raw, stored) = (get_u64(b, 108), get_u64(b, 116));
    if raw > BODY_MAX {
        return Err(format!(
            "its header gives a body of {raw} bytes, over the {BODY_MAX} allowed"
        ));
    }
    if b.len() as u64 != HDR as u64 + stored {
        return Err(format!(
            "it is {} bytes, but its header says {}",
            b.len(),
            HDR as u64 + stored
        ));
    }
    let st = &b[HDR..];
    if crc32c::crc32c(st) != get_u32(b, 124) {
        return Err("its stored bytes fail their CRC32C".into());
    }
    // Streamed: a header's length alone allocates nothing (a body may shrink 10,000
    // times: the carry of a record of zeros).
    let body = crate::format::zstd_exact(st, raw).map_err(|e| format!("its body: {e}"))?;
    Ok((segment, segment_blake3, ver as u32, body))
}

/// The relation forks of a body: sorted keys, each with its limit and block bitmap.
fn read_rels(r: &mut Reader) -> Result<BTreeMap<RelFork, Entry>, String> {
    let nrel = r.count(usize::MAX, 22, "relation fork count")?;
    let mut rels = BTreeMap::new();
    let mut last: Option<RelFork> = None;
    for _ in 0..nrel {
        let at = r.at;
        let key = RelFork {
            file: RelFile {
                spc: r.u32()?,
                db: r.u32()?,
                rel: r.u32()?,
            },
            fork: r.u8()?,
        };
        if last.is_some_and(|l| l >= key) {
            return Err(format!(
                "its relation forks are not sorted (body offset {at})"
            ));
        }
        last = Some(key);
        let has_limit = r.u8()?;
        let limit = r.u32()?;
        let blen = r.count(usize::MAX, 1, "bitmap length")?;
        let at = r.at;
        let bytes = r.bytes(blen)?;
        let blocks = RoaringBitmap::deserialize_from(bytes)
            .map_err(|e| format!("its block bitmap at body offset {at} is invalid ({e})"))?;
        if blocks.serialized_size() != blen {
            return Err(format!(
                "its block bitmap at body offset {at} does not fill its {blen} bytes"
            ));
        }
        rels.insert(
            key,
            Entry {
                limit: (has_limit != 0).then_some(limit),
                blocks,
            },
        );
    }
    Ok(rels)
}

/// The carry of a body: the unfinished record's first bytes, if any.
fn read_carry(r: &mut Reader) -> Result<Option<Carry>, String> {
    Ok(match r.u8()? {
        0 => None,
        1 => {
            let lsn = r.u64()?;
            let total = r.u32()?;
            let n = r.count(CARRY_MAX, 1, "carry length")?;
            if n as u64 >= total as u64 {
                return Err(format!(
                    "its carry holds {n} bytes of a {total}-byte record (body offset {})",
                    r.at
                ));
            }
            Some(Carry {
                lsn,
                total,
                bytes: r.bytes(n)?.to_vec(),
            })
        }
        k => {
            return Err(format!(
                "its carry marker is {k} (body offset {})",
                r.at - 1
            ))
        }
    })
}

/// Bounded reads of a summary's body.
struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn bytes(&mut self, n: usize) -> Result<&'a [u8], String> {
        if self.b.len() - self.at < n {
            return Err(format!(
                "its body ends at offset {} inside a field of {n} bytes at offset {}",
                self.b.len(),
                self.at
            ));
        }
        let s = &self.b[self.at..self.at + n];
        self.at += n;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.bytes(1)?[0])
    }
    fn u32(&mut self) -> Result<u32, String> {
        Ok(get_u32(self.bytes(4)?, 0))
    }
    fn u64(&mut self) -> Result<u64, String> {
        Ok(get_u64(self.bytes(8)?, 0))
    }
    /// A count of items of at least `unit` bytes each: at most `max`, and no more than
    /// the rest of the body can hold.
    fn count(&mut self, max: usize, unit: usize, what: &str) -> Result<usize, String> {
        let at = self.at;
        let n = self.u32()? as usize;
        let room = (self.b.len() - self.at) / unit;
        if n > max || n > room {
            return Err(format!(
                "its {what} at body offset {at} is {n}, more than {}",
                max.min(room)
            ));
        }
        Ok(n)
    }
}
