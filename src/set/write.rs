//! Writing a set's stripes: one sink per device, a media header each, and then all
//! of them committed or none left behind.

use crate::device::object::StoreOptions;
use crate::device::{self, CreateHint, Device, StripeSink};
use crate::engine::backup::StripeResult;
use crate::format::manifest::Manifest;
use crate::format::media::{Guard, MediaHeader, StoredManifest};
use anyhow::{bail, Result};
use serde::Serialize;

/// The devices of a set from their specs. NUL is alone or not at all: a set is
/// either discarded or kept whole.
pub fn devices(specs: &[String], o: &StoreOptions) -> Result<Vec<Box<dyn Device>>> {
    let devices = specs
        .iter()
        .map(|d| device::parse(d, o))
        .collect::<Result<Vec<_>>>()?;
    let discard = devices.iter().filter(|d| d.is_discard()).count();
    if discard > 0 && discard < devices.len() {
        bail!("NUL cannot be striped with real devices: back up to NUL alone, or to files alone");
    }
    Ok(devices)
}

/// True when the set goes to NUL (then it is never recorded).
pub fn is_discard(devices: &[Box<dyn Device>]) -> bool {
    devices.iter().any(|d| d.is_discard())
}

/// Starts one stripe per device, all at once (each may cost a store's round trips); if
/// one cannot be created, those started are aborted and the first device's error is
/// the one told.
pub fn create(devices: &[Box<dyn Device>], hint: &CreateHint) -> Result<Vec<Box<dyn StripeSink>>> {
    let mut made: Vec<Result<Box<dyn StripeSink>>> = Vec::with_capacity(devices.len());
    for group in devices.chunks(CREATE_AT_ONCE) {
        std::thread::scope(|sc| {
            let started: Vec<_> = group.iter().map(|d| sc.spawn(|| d.create(hint))).collect();
            made.extend(
                started
                    .into_iter()
                    .map(|h| h.join().expect("create panicked")),
            );
        });
    }
    if made.iter().all(|m| m.is_ok()) {
        return Ok(made.into_iter().map(|m| m.unwrap()).collect());
    }
    let mut first = None;
    for m in made {
        match m {
            Ok(s) => s.abort(),
            Err(e) => {
                first.get_or_insert(e);
            }
        }
    }
    Err(first.expect("a creation failed"))
}

/// Stripes created at once.
const CREATE_AT_ONCE: usize = 8;

/// The media header of every stripe: `h` with each stripe's index and the count.
pub fn headers(h: &MediaHeader, stripes: usize) -> Vec<Vec<u8>> {
    (0..stripes)
        .map(|i| {
            MediaHeader {
                stripe_index: i as u32,
                stripe_count: stripes as u32,
                ..h.clone()
            }
            .encode()
        })
        .collect()
}

/// Removes whatever the stripes hold so far (partial files, open uploads).
pub fn abort(stripes: Vec<StripeResult>) {
    stripes.into_iter().for_each(|s| s.sink.abort());
}

/// A committed stripe, as the summary shows it.
#[derive(Clone, Debug, Serialize)]
pub struct Committed {
    pub frames: u64,
    pub bytes: u64,
    /// The version id a versioned store gave the stripe: reads ask for exactly it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}

/// Ends every stripe with the manifest trailer (sealed or tagged as `guard` says) and
/// commits it (durable, then under its final name). On any failure, or a signal, the
/// stripes not yet committed are aborted and those committed are removed: no part of
/// the set stays behind.
pub fn commit(
    devices: &[Box<dyn Device>],
    stripes: Vec<StripeResult>,
    manifest: &Manifest,
    block_size: u64,
    guard: Guard,
) -> Result<Vec<Committed>> {
    let stored = match manifest.compressed() {
        Ok((b, n)) if n <= crate::format::MANIFEST_MAX => Ok(StoredManifest::new(b, n, guard)),
        Ok((_, n)) => Err(anyhow::anyhow!(
            "the manifest's {n} bytes pass the format's limit of {} (too many files for one set)",
            crate::format::MANIFEST_MAX
        )),
        Err(e) => Err(anyhow::Error::from(e).context("compressing the manifest")),
    };
    let stored = match stored {
        Ok(s) => s,
        Err(e) => {
            abort(stripes);
            return Err(e.context("the backup set was not completed"));
        }
    };
    let mut done = vec![];
    let mut failed = None;
    for s in stripes {
        if failed.is_none() {
            failed = crate::interrupt::received().map(crate::interrupt::error);
        }
        if failed.is_some() {
            s.sink.abort();
            continue;
        }
        let mut sink = s.sink;
        // Plain sets carry a frame index (what is stepped over is read from it).
        let index = match guard {
            Guard::Plain => &s.index[..],
            _ => &[],
        };
        let t = stored.suffix(s.body_end, s.frames, block_size, guard, index);
        // A stripe whose manifest or trailer cannot be written (a full disk) is aborted.
        let r = match sink
            .write_all(&stored.bytes)
            .and_then(|_| sink.write_all(&t))
        {
            Ok(()) => sink.commit(),
            Err(e) => {
                sink.abort();
                Err(e.into())
            }
        };
        match r {
            Ok(version) => done.push(Committed {
                frames: s.frames,
                bytes: s.body_end + (stored.bytes.len() + t.len()) as u64,
                version,
            }),
            Err(e) => failed = Some(e),
        }
    }
    if let Some(e) = failed {
        // A stripe that cannot be removed is named in the error, beside its cause.
        let left: Vec<String> = devices
            .iter()
            .take(done.len())
            .filter_map(|d| d.remove().err().map(|r| format!("{r:#}")))
            .collect();
        let e = e.context("the backup set was not completed");
        return Err(match left.is_empty() {
            true => e,
            false => e.context(format!(
                "committed stripes were left behind: {}",
                left.join("; ")
            )),
        });
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::StripeSource;
    use crate::format::manifest::tests::sample;
    use crate::format::media::tests::header;
    use std::io;
    use std::path::Path;

    /// Creates every stripe and writes its header, as a backup's pipeline starts.
    fn started(devices: &[Box<dyn Device>]) -> Vec<StripeResult> {
        let sinks = create(devices, &CreateHint::default()).unwrap();
        let heads = headers(&header(), devices.len());
        sinks
            .into_iter()
            .zip(heads)
            .map(|(mut sink, h)| {
                sink.write_all(&h).unwrap();
                StripeResult {
                    frames: 0,
                    body_end: h.len() as u64,
                    sink,
                    index: vec![],
                }
            })
            .collect()
    }

    fn spec(p: &Path) -> String {
        p.display().to_string()
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    /// A device whose stripes cannot be committed (a full disk, a lost upload).
    struct Failing;
    struct FailingSink;
    impl Device for Failing {
        fn describe(&self) -> String {
            "failing".into()
        }
        fn create(&self, _: &CreateHint) -> Result<Box<dyn StripeSink>> {
            Ok(Box::new(FailingSink))
        }
        fn open(&self) -> Result<Box<dyn StripeSource>> {
            bail!("nothing to open")
        }
        fn remove(&self) -> Result<()> {
            Ok(())
        }
    }
    impl StripeSink for FailingSink {
        fn write_all(&mut self, _: &[u8]) -> io::Result<()> {
            Ok(())
        }
        fn commit(self: Box<Self>) -> Result<Option<String>> {
            bail!("no space left on device")
        }
        fn abort(self: Box<Self>) {}
    }

    #[test]
    fn every_stripe_is_committed_under_its_name() {
        let dir = tempfile::tempdir().unwrap();
        let specs = vec![
            spec(&dir.path().join("a.pv")),
            spec(&dir.path().join("b.pv")),
        ];
        let devs = devices(&specs, &StoreOptions::default()).unwrap();
        assert!(!is_discard(&devs));
        let s = started(&devs);
        assert_eq!(names(dir.path()), ["a.pv.partial", "b.pv.partial"]);
        let done = commit(&devs, s, &sample(), 4096, Guard::Plain).unwrap();
        assert_eq!(done.len(), 2);
        assert_eq!(names(dir.path()), ["a.pv", "b.pv"]);
        for (d, c) in devs.iter().zip(&done) {
            assert_eq!(d.open().unwrap().len(), c.bytes);
        }
        let first = std::fs::read(dir.path().join("b.pv")).unwrap();
        let h = MediaHeader::decode(&first).unwrap();
        assert_eq!((h.stripe_index, h.stripe_count), (1, 2));
    }

    #[test]
    fn a_failed_commit_removes_every_stripe() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a.pv");
        let c = dir.path().join("c.pv");
        let devs: Vec<Box<dyn Device>> = vec![
            device::parse(&spec(&a), &StoreOptions::default()).unwrap(),
            Box::new(Failing),
            device::parse(&spec(&c), &StoreOptions::default()).unwrap(),
        ];
        let s = started(&devs);
        let e = commit(&devs, s, &sample(), 4096, Guard::Plain).unwrap_err();
        assert!(format!("{e:#}").contains("not completed"), "{e:#}");
        assert!(names(dir.path()).is_empty(), "{:?}", names(dir.path()));
    }

    #[test]
    fn a_stripe_that_cannot_be_created_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let specs = vec![
            spec(&dir.path().join("a.pv")),
            spec(&dir.path().join("missing").join("b.pv")),
        ];
        let devs = devices(&specs, &StoreOptions::default()).unwrap();
        assert!(create(&devs, &CreateHint::default()).is_err());
        assert!(names(dir.path()).is_empty());
    }

    #[test]
    fn nul_alone_is_committed_and_never_striped_with_files() {
        let devs = devices(&["NUL".into(), "nul:".into()], &StoreOptions::default()).unwrap();
        assert!(is_discard(&devs));
        let s = started(&devs);
        assert_eq!(
            commit(&devs, s, &sample(), 4096, Guard::Plain)
                .unwrap()
                .len(),
            2
        );
        let dir = tempfile::tempdir().unwrap();
        let mixed = devices(
            &["NUL".into(), spec(&dir.path().join("a.pv"))],
            &StoreOptions::default(),
        );
        assert!(mixed.is_err());
        assert!(names(dir.path()).is_empty());
    }
}
