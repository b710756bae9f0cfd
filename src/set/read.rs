//! Reading a backup set from its stripes: headers, tails, manifests, and the
//! checks that every stripe is present, finished and of the same set.

use crate::crypt::load::GIVE_KEY;
use crate::crypt::{SetMac, DOMAIN_MANIFEST, MAC_LEN};
use crate::device::object::StoreOptions;
use crate::device::{self, Since, StripeSource};
use crate::engine::restore::{IndexAt, StripeIn};
use crate::engine::Seal;
use crate::format::frame::FRAME_HEADER_LEN;
use crate::format::manifest::{EntryKind, Manifest};
use crate::format::media::{MediaHeader, Tail, MIN_BLOCK, TAIL_LEN};
use crate::format::seal::{header_bound, manifest_aad, KeyUse};
use crate::format::{self, FormatError};
use anyhow::{anyhow, bail, Result};
use std::sync::{Mutex, OnceLock};

pub struct OpenSet {
    pub manifest: Manifest,
    pub header: MediaHeader,
    /// In stripe order.
    pub stripes: Vec<StripeIn>,
    /// An encrypted set's data key: its frames open with it.
    pub seal: Option<Seal>,
    /// A signed set's MAC keys: its frames' tags are checked with them.
    pub sign: Option<SetMac>,
    /// Pinned stripes whose name now holds another version (or none): the pinned
    /// version was read all the same.
    pub overwritten: Vec<Overwritten>,
}

/// A stripe pinned by its catalog record whose object was overwritten or deleted
/// after the backup wrote it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Overwritten {
    pub stripe: String,
    /// The version the backup wrote (the one read).
    pub version: String,
    /// The newest version now (None: deleted, behind a delete marker).
    pub now: Option<String>,
    /// The warning as text shows it.
    pub message: String,
}

impl Overwritten {
    fn new(stripe: &str, version: &str, since: Since) -> Option<Overwritten> {
        let now = match since {
            Since::Same => return None,
            Since::Replaced(v) => Some(v),
            Since::Removed => None,
        };
        let message = match &now {
            Some(w) => format!(
                "stripe {stripe} was overwritten after the backup (version {version} written by the backup, now {w}); the backup's version is read"
            ),
            None => format!(
                "stripe {stripe} was deleted after the backup (version {version} written by the backup is hidden behind a delete marker); the backup's version is read"
            ),
        };
        Some(Overwritten {
            stripe: stripe.to_string(),
            version: version.to_string(),
            now,
            message,
        })
    }
}

struct Opened {
    name: String,
    source: Box<dyn StripeSource>,
    overwritten: Option<Overwritten>,
    header: MediaHeader,
    tail: Tail,
    /// Taken by `open` once compared: a set's manifest is held once, not per stripe.
    manifest: Option<Manifest>,
    keys: Keys,
}

/// An encrypted set's data key or a signed set's MAC keys, from the key block of its
/// stripe's header and the key the options give; one clear error when no key or
/// another key is given.
fn set_keys(name: &str, header: &MediaHeader, o: &StoreOptions) -> Result<Keys> {
    let set = hex::encode(header.set_id);
    let (Some(kb), Some(u)) = (&header.key, header.key_use()) else {
        // A key asks for authentication, which a plain set cannot give: taking it
        // would let anyone who can write the storage swap in a set of their own.
        if let Some(k) = &o.key {
            bail!(
                "set {set} (stripe '{name}') is not encrypted or signed, and {} was given: a plain set is not authenticated; read it without a key to accept it",
                k.origin()
            );
        }
        return Ok(Keys::default());
    };
    let Some(source) = &o.key else {
        match u {
            KeyUse::Seal => bail!("set {set} is encrypted: {GIVE_KEY} (stripe '{name}')"),
            KeyUse::Sign => bail!(
                "set {set} is signed: {GIVE_KEY} to check it, key id {} (stripe '{name}')",
                crate::crypt::show_id(&kb.key_id)
            ),
        }
    };
    let key = kb
        .open(source, &header.set_id, u)
        .map_err(|e| anyhow!("set {set} (stripe '{name}'): {e}"))?;
    Ok(match u {
        KeyUse::Seal => Keys {
            seal: Some(Seal {
                dek: key,
                set_id: header.set_id,
                crc: !header.tag_only,
            }),
            sign: None,
        },
        KeyUse::Sign => Keys {
            seal: None,
            sign: Some(SetMac::new(&key, header.set_id)),
        },
    })
}

#[derive(Default)]
struct Keys {
    seal: Option<Seal>,
    sign: Option<SetMac>,
}

/// What a refusal of a stripe's structure tells the user.
const FORGED: &str = "the set is damaged or forged";

/// A stripe's structure refused: a number out of its bounds says the set is forged.
fn refused(name: &str, e: FormatError) -> anyhow::Error {
    match e {
        FormatError::Invalid { .. } | FormatError::Manifest(_) => {
            anyhow!("stripe '{name}': {e}: {FORGED}")
        }
        _ => anyhow!("stripe '{name}': {e}"),
    }
}

/// Every regular file's size against what the set can hold: a file not sparse needs a
/// frame per transfer-sized chunk, and every file's pages are counted in 32 bits (as a
/// chain restore tracks them). Checked before anything is sized by them.
fn check_sizes(m: &Manifest, frames: u64) -> Result<()> {
    let (t, page) = (m.transfer_size as u64, m.page_size as u64);
    let mut need = 0u64;
    for f in m.files.iter().filter(|f| f.kind == EntryKind::File) {
        if f.size.div_ceil(page) > u32::MAX as u64 {
            bail!(
                "manifest: file '{}' of {} bytes has more than 2^32 pages of {page} bytes: {FORGED}",
                f.path,
                f.size
            );
        }
        if !f.sparse {
            need = need.saturating_add(f.size.div_ceil(t));
            if need > frames {
                bail!(
                    "manifest: file '{}' of {} bytes needs more frames than the {frames} of the whole set: {FORGED}",
                    f.path,
                    f.size
                );
            }
        }
    }
    Ok(())
}

fn open_one(spec: &str, version: Option<&str>, o: &StoreOptions) -> Result<Opened> {
    let dev = device::parse(spec, o)?;
    let name = dev.describe();
    let (source, overwritten) = match version {
        None => (dev.open()?, None),
        Some(v) => {
            let (source, since) = dev.open_version(v)?;
            (source, Overwritten::new(&name, v, since))
        }
    };
    let len = source.len();
    if len < (MIN_BLOCK + TAIL_LEN) as u64 {
        bail!("stripe '{name}' is {len} bytes: too short to be a pagevault stripe (truncated or not a backup)");
    }
    // Header and tail at once: one round trip of the store, not two.
    let (mut hb, mut tb) = (vec![0u8; MIN_BLOCK], [0u8; TAIL_LEN]);
    let (h, t) = std::thread::scope(|sc| {
        let t = sc.spawn(|| source.read_exact_at(&mut tb, len - TAIL_LEN as u64));
        let h = source.read_exact_at(&mut hb, 0);
        (h, t.join().expect("tail read panicked"))
    });
    h?;
    let header = MediaHeader::decode(&hb).map_err(|e| refused(&name, e))?;
    t?;
    let keys = set_keys(&name, &header, o)?;
    let tail = Tail::decode(&tb, len).map_err(|e| refused(&name, e))?;
    let block = header.block_size as u64;
    if tail.body_end < block || tail.body_end % block != 0 || tail.manifest_offset != tail.body_end
    {
        bail!(
            "stripe '{name}': body end {} (manifest at {}) is not a block boundary after the header block: {FORGED}",
            tail.body_end,
            tail.manifest_offset
        );
    }
    // Every frame takes at least one block.
    let room = (tail.body_end - block) / block;
    if tail.frame_count > room {
        bail!(
            "stripe '{name}': its tail counts {} frames, but its body holds at most {room}: {FORGED}",
            tail.frame_count
        );
    }
    if tail.index_len > 0 && tail.index_len as u64 != tail.frame_count * FRAME_HEADER_LEN as u64 {
        bail!(
            "stripe '{name}': its frame index holds {} bytes for {} frames: {FORGED}",
            tail.index_len,
            tail.frame_count
        );
    }
    // Tail::decode bounded both lengths (and their ratio) before these allocations.
    let mut stored = vec![0u8; tail.manifest_len as usize];
    source.read_exact_at(&mut stored, tail.manifest_offset)?;
    let crc = crc32c::crc32c(&stored);
    if crc != tail.manifest_crc {
        bail!(
            "stripe '{name}': manifest at offset {} is damaged (CRC32C {crc:08x}, expected {:08x})",
            tail.manifest_offset,
            tail.manifest_crc
        );
    }
    let mut open = stored.len();
    if let Some(mac) = &keys.sign {
        // The tag follows the zstd bytes; checked before they are decompressed.
        let bad = || {
            anyhow!(
                "stripe '{name}': manifest at offset {}: its signature does not match with the set's key: {FORGED}",
                tail.manifest_offset
            )
        };
        open = open
            .checked_sub(MAC_LEN)
            .filter(|&n| n > 0)
            .ok_or_else(bad)?;
        let tag: [u8; MAC_LEN] = stored[open..].try_into().unwrap();
        if !mac.manifest.ok(&header_bound(&hb), &stored[..open], &tag) {
            return Err(bad());
        }
    }
    if let Some(s) = &keys.seal {
        let aad = manifest_aad(&s.set_id);
        open = s.dek.open(DOMAIN_MANIFEST, 0, &aad, &mut stored).ok_or_else(|| {
            anyhow!(
                "stripe '{name}': manifest at offset {} does not authenticate with the set's key: {FORGED}",
                tail.manifest_offset
            )
        })?;
    }
    let unreadable = |e: String| {
        anyhow!(
            "stripe '{name}': manifest at offset {}: {e}: {FORGED}",
            tail.manifest_offset
        )
    };
    let raw = format::zstd_reader(&stored[..open], tail.manifest_raw_len).map_err(unreadable)?;
    let manifest = Manifest::from_reader(raw).map_err(|e| match e {
        Ok(e) => refused(&name, e),
        Err(e) => unreadable(e),
    })?;
    drop(stored);
    if manifest.set_id != hex::encode(header.set_id) {
        bail!(
            "stripe '{name}': its manifest belongs to set {} but its header to {}",
            manifest.set_id,
            hex::encode(header.set_id)
        );
    }
    if manifest.format_version != header.version {
        bail!(
            "stripe '{name}': header says format version {}, manifest {}",
            header.version,
            manifest.format_version
        );
    }
    // The pipeline reads with the header's sizes; the manifest must agree.
    if manifest.block_size != header.block_size
        || manifest.page_size != header.page_size
        || manifest.transfer_size != header.transfer_size
    {
        bail!(
            "stripe '{name}': header says block size {}, page size {} and transfer size {}, manifest {}, {} and {}: {FORGED}",
            header.block_size,
            header.page_size,
            header.transfer_size,
            manifest.block_size,
            manifest.page_size,
            manifest.transfer_size
        );
    }
    if manifest.stripes.len() != header.stripe_count as usize {
        bail!(
            "stripe '{name}': header says {} stripes, manifest {}",
            header.stripe_count,
            manifest.stripes.len()
        );
    }
    let info = &manifest.stripes[header.stripe_index as usize];
    if info.frames != tail.frame_count || info.body_end != tail.body_end {
        bail!(
            "stripe '{name}': tail counts {} frames ending at {}, manifest {} ending at {}",
            tail.frame_count,
            tail.body_end,
            info.frames,
            info.body_end
        );
    }
    Ok(Opened {
        name,
        source,
        overwritten,
        header,
        tail,
        manifest: Some(manifest),
        keys,
    })
}

/// Opens every stripe named and checks they make one complete set.
pub fn open(specs: &[String], o: &StoreOptions) -> Result<OpenSet> {
    open_pinned(specs, &[], o)
}

/// `open`, each stripe at the version `pins` names for it (in the same order; none
/// for a stripe without one): the version its backup wrote, as its record says.
/// Stripes opened at once.
const OPEN_AT_ONCE: usize = 8;

pub fn open_pinned(specs: &[String], pins: &[Option<String>], o: &StoreOptions) -> Result<OpenSet> {
    if specs.is_empty() {
        bail!("name the stripes of the set with --from (one per stripe)");
    }
    // The stripes are opened at once (each takes a few round trips of its store); each
    // manifest is compared with the first one read, then dropped: a set's manifest is
    // held once, not per stripe.
    let kept: OnceLock<(String, Manifest)> = OnceLock::new();
    let differs = Mutex::new(None);
    let open = |i: usize| -> Result<Opened> {
        let pin = pins.get(i).and_then(|p| p.as_deref());
        let mut one = open_one(&specs[i], pin, o)?;
        let m = one.manifest.take().expect("read with its stripe");
        if let Err((_, m)) = kept.set((one.name.clone(), m)) {
            let (first, k) = kept.get().expect("set by another stripe");
            if m.set_id == k.set_id && m != *k {
                differs.lock().unwrap().get_or_insert(format!(
                    "stripe '{}' carries a manifest that differs from stripe '{first}'",
                    one.name
                ));
            }
        }
        Ok(one)
    };
    let mut opened = Vec::<Opened>::with_capacity(specs.len());
    for one in crate::par::map_index(specs.len(), specs.len().min(OPEN_AT_ONCE), open) {
        opened.push(one?);
    }
    let differs = differs.into_inner().unwrap();
    let kept = kept.into_inner().map(|(_, m)| m);
    let manifest = kept.expect("at least one stripe");
    let first = &opened[0];
    let set_id = first.header.set_id;
    let n = first.header.stripe_count as usize;
    for o in &opened[1..] {
        if o.header.set_id != set_id {
            bail!(
                "stripe '{}' belongs to backup set {}, not to set {} of stripe '{}': name only the stripes of one set",
                o.name,
                hex::encode(o.header.set_id),
                hex::encode(set_id),
                first.name
            );
        }
    }
    let mut slots: Vec<Option<Opened>> = (0..n).map(|_| None).collect();
    for o in opened.drain(..) {
        let i = o.header.stripe_index as usize;
        if let Some(prev) = &slots[i] {
            bail!(
                "stripes '{}' and '{}' are both stripe {} of {n}: name each stripe once",
                prev.name,
                o.name,
                i + 1
            );
        }
        slots[i] = Some(o);
    }
    let missing: Vec<String> = slots
        .iter()
        .enumerate()
        .filter(|(_, s)| s.is_none())
        .map(|(i, _)| i.to_string())
        .collect();
    if !missing.is_empty() {
        let where_: Vec<String> = missing
            .iter()
            .map(|i| {
                let i: usize = i.parse().unwrap();
                format!(
                    "stripe {} of {n} (written to '{}')",
                    i + 1,
                    manifest.stripes[i].device
                )
            })
            .collect();
        bail!(
            "the set is incomplete: missing {}; add a --from for each",
            where_.join(", ")
        );
    }
    let slots: Vec<Opened> = slots.into_iter().map(Option::unwrap).collect();
    if let Some(e) = differs {
        bail!(e);
    }
    // Each stripe's count was checked against its own size.
    let frames = slots
        .iter()
        .fold(0u64, |n, o| n.saturating_add(o.tail.frame_count));
    check_sizes(&manifest, frames)?;
    let header = slots[0].header.clone();
    let seal = slots[0].keys.seal.clone();
    let sign = slots[0].keys.sign.clone();
    let overwritten = slots.iter().filter_map(|o| o.overwritten.clone()).collect();
    let stripes = slots
        .into_iter()
        .map(|o| StripeIn {
            name: o.name,
            source: o.source,
            body_start: o.header.block_size as u64,
            body_end: o.tail.body_end,
            frames: o.tail.frame_count,
            index: (o.tail.index_len > 0).then(|| IndexAt {
                offset: o.tail.index_offset(),
                len: o.tail.index_len as u64,
                crc: o.tail.index_crc,
            }),
        })
        .collect();
    Ok(OpenSet {
        manifest,
        header,
        stripes,
        seal,
        sign,
        overwritten,
    })
}

impl OpenSet {
    pub fn block_size(&self) -> usize {
        self.header.block_size as usize
    }
    pub fn page_size(&self) -> usize {
        self.header.page_size as usize
    }
}

/// The manifest of one stripe, without the rest of its set; at version `pin` when
/// its record names one.
pub fn open_any(spec: &str, pin: Option<&str>, o: &StoreOptions) -> Result<Manifest> {
    Ok(open_one(spec, pin, o)?
        .manifest
        .expect("read with its stripe"))
}

/// The manifest of the set the stripes name; one stripe alone describes its set
/// without demanding the others.
pub fn describe(specs: &[String], o: &StoreOptions) -> Result<Manifest> {
    describe_pinned(specs, &[], o)
}

/// `describe`, each stripe at the version `pins` names for it (if any).
pub fn describe_pinned(
    specs: &[String],
    pins: &[Option<String>],
    o: &StoreOptions,
) -> Result<Manifest> {
    if specs.len() == 1 {
        if let Ok(s) = open_pinned(specs, pins, o) {
            return Ok(s.manifest);
        }
        let pin = pins.first().and_then(|p| p.as_deref());
        return open_any(&specs[0], pin, o);
    }
    Ok(open_pinned(specs, pins, o)?.manifest)
}
