//! Object storage devices: `s3://BUCKET/KEY` (AWS S3 and S3-compatible servers such as
//! MinIO), `azure://CONTAINER/BLOB` (Azure Blob Storage, Azurite) and `gs://BUCKET/KEY`
//! (Google Cloud Storage, through its XML API).
//!
//! A stripe is one multipart (S3, GCS) or block (Azure) upload: parts of `--max-transfer-size`
//! or more, several in flight, made visible only by the final commit. A failed backup
//! aborts the upload. Reads are ranged GETs, several in flight ahead of a sequential
//! reader. Requests are retried by object_store (exponential backoff with jitter on
//! 5xx, 429, timeouts and dropped connections); each retry is counted here.

use super::{Device, Since, StripeSink, StripeSource};
use anyhow::{anyhow, bail, Result};
use futures::TryStreamExt;
use object_store::aws::AmazonS3Builder;
use object_store::azure::MicrosoftAzureBuilder;
use object_store::gcp::GoogleCloudStorageBuilder;
use object_store::path::Path as KeyPath;
use object_store::{
    BackoffConfig, ClientOptions, GetOptions, GetRange, MultipartUpload, ObjectStore, PutMode,
    PutOptions, PutPayload, RetryConfig, UpdateVersion, WriteMultipart,
};
use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;
use tokio::task::JoinHandle;
use tracing::instrument::WithSubscriber;
use tracing::Dispatch;

/// The parts of an object rewritten by `Location::patch_head`.
const REWRITE_PART: u64 = 8 << 20;

/// S3 refuses parts under 5 MiB (except the last) and more than 10,000 parts; so does
/// GCS's XML multipart upload.
const S3_MIN_PART: usize = 5 << 20;
const S3_MAX_PARTS: u64 = 10_000;
const S3_MAX_PART: usize = 5 << 30;
/// Azure takes up to 50,000 blocks of up to 4000 MiB.
const AZ_MAX_PARTS: u64 = 50_000;
const AZ_MAX_PART: usize = 4000 << 20;
/// Azure's blocks are at least this large (the store takes any size): a quarter of the
/// requests of 4 MiB blocks, and Azurite used 20-35% less CPU per byte with them.
const AZ_PART: usize = 16 << 20;
/// Upload memory per stripe: parts in flight are limited to this much.
const UPLOAD_BUDGET: usize = 64 << 20;
const MAX_PARTS_IN_FLIGHT: usize = 8;
/// Restore reads ahead in chunks of this size, this many GETs in flight per stripe to
/// start with.
const READ_CHUNK: u64 = 8 << 20;
const READ_AHEAD: u64 = 4;
/// A reader that waits for a chunk read ahead (the round trip and the rate call for more
/// in flight) asks one more, up to this many per stripe ...
const READ_AHEAD_MAX: u64 = 16;
/// ... and this many more than READ_AHEAD over all stripes of the process (memory).
const READ_AHEAD_EXTRA: u64 = 24;
static READ_AHEAD_EXTRA_USED: AtomicU64 = AtomicU64::new(0);
/// Opening a stripe GETs its first and last bytes at once (header; tail and manifest)
/// instead of a HEAD then each: one round trip, not three.
const OPEN_HEAD: u64 = 64 << 10;
const OPEN_TAIL: u64 = 1 << 20;

/// Ranged GETs in flight ahead of a stripe's reader when PAGEVAULT_READ_AHEAD (1 to 64)
/// fixes it, a tuning knob documented in docs/guide/10-object-stores.md; else None: it adapts.
fn fixed_read_ahead() -> Option<u64> {
    static N: OnceLock<Option<u64>> = OnceLock::new();
    *N.get_or_init(|| {
        std::env::var("PAGEVAULT_READ_AHEAD")
            .ok()
            .and_then(|v| v.parse().ok())
            .filter(|&n| (1..=64).contains(&n))
    })
}

/// Takes one chunk of the read-ahead memory shared by all stripes, if one is left.
fn take_extra_read_ahead() -> bool {
    READ_AHEAD_EXTRA_USED
        .fetch_update(Relaxed, Relaxed, |n| {
            (n < READ_AHEAD_EXTRA).then_some(n + 1)
        })
        .is_ok()
}

fn give_back_read_ahead(n: u64) {
    READ_AHEAD_EXTRA_USED.fetch_sub(n, Relaxed);
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Kind {
    S3,
    Azure,
    Gcs,
}

impl Kind {
    fn scheme(self) -> &'static str {
        match self {
            Kind::S3 => "s3",
            Kind::Azure => "azure",
            Kind::Gcs => "gs",
        }
    }
}

/// Options from the command line for what a use case opens (object stores, sets,
/// repositories); passed down with the locations they apply to.
#[derive(Default, Clone, Debug, PartialEq)]
pub struct StoreOptions {
    /// `--s3-endpoint`: overrides AWS_ENDPOINT_URL.
    pub s3_endpoint: Option<String>,
    /// The master key's source (`--key-file`, `--passphrase-file` or their variables):
    /// it opens encrypted sets and repositories, and makes new ones encrypted.
    pub key: Option<crate::crypt::KeySource>,
}

impl StoreOptions {
    /// ` --s3-endpoint URL` when one was given, for commands pagevault writes for
    /// another process (restore_command); empty otherwise.
    pub fn endpoint_option(&self) -> String {
        (self.s3_endpoint.as_ref())
            .map(|e| format!(" --s3-endpoint {e}"))
            .unwrap_or_default()
    }
}

/// The runtime object_store's futures run on; stripe threads block on them.
fn rt() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("pagevault-io")
            .enable_all()
            .build()
            .expect("cannot start the I/O runtime")
    })
}

/// Runs a future of object_store to completion with the retry counter as its
/// subscriber (scoped to the future, never process-wide: see `counter`).
fn block_on<F: Future>(f: F) -> F::Output {
    rt().block_on(f.with_subscriber(counter()))
}

/// Spawns a future of object_store on the runtime, with the retry counter.
fn spawn<F>(f: F) -> JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    rt().spawn(f.with_subscriber(counter()))
}

mod build;
mod count;
mod retry;
mod stripe;
#[cfg(test)]
mod tests;

/// The longest version id taken from a store or a record.
pub const VERSION_MAX: usize = 1024;

/// Whether `v` can be a store's version id: bounded, printable, of the characters S3
/// (URL-safe text), Azure (a timestamp) and GCS (a generation number) use. A version id comes from a store or a
/// catalog record: untrusted either way, and sent back in a query string.
pub fn valid_version(v: &str) -> bool {
    (1..=VERSION_MAX).contains(&v.len())
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.:+=/".contains(&b))
        && v != "null"
}

/// GETs `range` of the object at `path` into `buf` (cleared first, so that a caller
/// reuses its buffers), streaming the body; with `e_tag`, only of that version; with
/// `version`, of exactly that version id. A body of another length than the range's is
/// an error.
async fn get_range(
    store: &dyn ObjectStore,
    path: &KeyPath,
    range: std::ops::Range<u64>,
    e_tag: Option<String>,
    version: Option<String>,
    buf: Vec<u8>,
) -> object_store::Result<Vec<u8>> {
    let want = range.end - range.start;
    let opts = GetOptions {
        range: Some(range.into()),
        if_match: e_tag,
        version,
        ..Default::default()
    };
    read_body(store.get_opts(path, opts).await?, buf, want).await
}

/// Streams a GET's body into `buf` (cleared first); a body of another length than `want`
/// is an error.
async fn read_body(
    r: object_store::GetResult,
    mut buf: Vec<u8>,
    want: u64,
) -> object_store::Result<Vec<u8>> {
    let mut body = r.into_stream();
    buf.clear();
    while let Some(part) = body.try_next().await? {
        buf.extend_from_slice(&part);
    }
    if buf.len() as u64 != want {
        return Err(object_store::Error::Generic {
            store: "pagevault",
            source: format!("the store sent {} bytes of a {want}-byte range", buf.len()).into(),
        });
    }
    Ok(buf)
}

/// GETs `range` of the object at `path` (of version `version`), with what the store says
/// of the whole object and which bytes it sent: a suffix range's start is known only then.
async fn get_part(
    store: &dyn ObjectStore,
    path: &KeyPath,
    range: GetRange,
    version: Option<String>,
) -> object_store::Result<(object_store::ObjectMeta, u64, Vec<u8>)> {
    let opts = GetOptions {
        range: Some(range),
        version,
        ..Default::default()
    };
    let r = store.get_opts(path, opts).await?;
    let (meta, at, want) = (r.meta.clone(), r.range.start, r.range.end - r.range.start);
    let buf = read_body(r, Vec::with_capacity(want as usize), want).await?;
    Ok((meta, at, buf))
}

use build::*;
use retry::counter;
pub use retry::{retry_stats, RetryStats};
pub use stripe::{part_plan, ObjectDevice};

// ---------------------------------------------------------------------------------
// Locations and stores.

/// A parsed `s3://BUCKET/KEY`, `azure://CONTAINER/BLOB` or `gs://BUCKET/KEY`.
#[derive(Clone)]
pub struct Location {
    pub kind: Kind,
    pub bucket: String,
    pub key: String,
    store: Arc<dyn ObjectStore>,
}

impl Location {
    /// `s3://bucket/key`, never with credentials.
    pub fn describe(&self) -> String {
        if self.key.is_empty() {
            format!("{}://{}", self.kind.scheme(), self.bucket)
        } else {
            format!("{}://{}/{}", self.kind.scheme(), self.bucket, self.key)
        }
    }

    /// The location of `rel` under this one (a key prefix).
    pub fn join(&self, rel: &str) -> Location {
        let key = if self.key.is_empty() {
            rel.to_string()
        } else {
            format!("{}/{rel}", self.key.trim_end_matches('/'))
        };
        Location {
            key,
            ..self.clone()
        }
    }

    fn path(&self) -> KeyPath {
        KeyPath::from(self.key.as_str())
    }

    fn err(&self, what: &str, e: object_store::Error) -> anyhow::Error {
        explain(&self.describe(), what, e)
    }

    /// Reads a whole object of at most `max` bytes; None when it does not exist.
    pub fn get(&self, max: u64) -> Result<Option<Vec<u8>>> {
        let mut out = vec![];
        let found = self.read_into(max, |chunk| {
            out.extend_from_slice(chunk);
            Ok(())
        })?;
        Ok(found.then_some(out))
    }

    /// Streams an object of at most `max` bytes into `f`; false when it does not exist.
    pub fn download(&self, f: &mut impl io::Write, max: u64) -> Result<bool> {
        self.read_into(max, |chunk| f.write_all(chunk))
    }

    /// Reads a whole object of at most `max` bytes (of version `version` when given)
    /// and the version id the store names it by (None: it keeps no versions); None
    /// when it does not exist.
    pub fn get_versioned(
        &self,
        max: u64,
        version: Option<&str>,
    ) -> Result<Option<(Vec<u8>, Option<String>)>> {
        let mut out = vec![];
        let found = self.read_at(max, version, |chunk| {
            out.extend_from_slice(chunk);
            Ok(())
        })?;
        Ok(found.map(|v| (out, v.filter(|v| valid_version(v)))))
    }

    /// Feeds an object's bytes to `put` as they arrive. One larger than `max` is refused
    /// before its bytes are read, and while they are read (a body longer than the size
    /// the store gave). False when it does not exist.
    fn read_into(&self, max: u64, put: impl FnMut(&[u8]) -> io::Result<()>) -> Result<bool> {
        Ok(self.read_at(max, None, put)?.is_some())
    }

    /// `read_into` of version `version` (else the newest); Some(the version id read).
    fn read_at(
        &self,
        max: u64,
        version: Option<&str>,
        mut put: impl FnMut(&[u8]) -> io::Result<()>,
    ) -> Result<Option<Option<String>>> {
        let p = self.path();
        let over = |size: u64| {
            anyhow!(
                "'{}' is {size} bytes, more than the {max} it may hold",
                self.describe()
            )
        };
        let opts = GetOptions {
            version: version.map(str::to_string),
            ..Default::default()
        };
        let g = match block_on(self.store.get_opts(&p, opts)) {
            Ok(g) => g,
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(self.err("cannot read", e)),
        };
        if g.meta.size > max {
            return Err(over(g.meta.size));
        }
        let read = g.meta.version.clone();
        let mut body = g.into_stream();
        let mut n = 0u64;
        while let Some(chunk) = block_on(body.try_next()).map_err(|e| self.err("cannot read", e))? {
            n += chunk.len() as u64;
            if n > max {
                return Err(over(n));
            }
            put(&chunk).map_err(|e| anyhow!("cannot store '{}': {e}", self.describe()))?;
        }
        Ok(Some(read))
    }

    /// The first `n` bytes of an object (fewer if it is shorter), with one ranged GET;
    /// None when it does not exist.
    pub fn get_head(&self, n: u64) -> Result<Option<Vec<u8>>> {
        let p = self.path();
        let r = block_on(async {
            let size = self.store.head(&p).await?.size;
            self.store.get_range(&p, 0..n.min(size)).await
        });
        match r {
            Ok(b) => Ok(Some(b.to_vec())),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(self.err("cannot read", e)),
        }
    }

    /// Replaces the object with `bytes` only while it holds `expected`: a PUT
    /// conditional on the version read (If-Match). Ok(false) when it holds something
    /// else, is absent, or changed between the read and the PUT.
    pub fn replace_if(&self, expected: &[u8], bytes: Vec<u8>) -> Result<bool> {
        let p = self.path();
        let read = block_on(async {
            let g = self.store.get(&p).await?;
            let meta = g.meta.clone();
            Ok::<_, object_store::Error>((meta, g.bytes().await?))
        });
        let (meta, now) = match read {
            Ok(r) => r,
            Err(object_store::Error::NotFound { .. }) => return Ok(false),
            Err(e) => return Err(self.err("cannot read", e)),
        };
        if now.as_ref() != expected {
            return Ok(false);
        }
        let opts = PutOptions {
            mode: PutMode::Update(UpdateVersion {
                e_tag: meta.e_tag,
                version: meta.version,
            }),
            ..Default::default()
        };
        match block_on(self.store.put_opts(&p, PutPayload::from(bytes), opts)) {
            Ok(_) => Ok(true),
            Err(object_store::Error::Precondition { .. })
            | Err(object_store::Error::AlreadyExists { .. })
            | Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(self.err("cannot write", e)),
        }
    }

    /// Rewrites the object's first `n` bytes as `patch` makes them (false: left as it
    /// is). The object is written anew by a multipart upload: the patched head, then
    /// its other bytes in ranged GETs of `REWRITE_PART`, each of the version the head
    /// was read from (a change meanwhile fails the rewrite), two parts in flight at
    /// most. The new object replaces the old when the upload completes; a failed upload
    /// is aborted and the old object stays. None when it does not exist.
    pub fn patch_head(
        &self,
        n: u64,
        patch: &mut dyn FnMut(&mut Vec<u8>) -> Result<bool>,
    ) -> Result<Option<bool>> {
        let p = self.path();
        let meta = match block_on(self.store.head(&p)) {
            Ok(m) => m,
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(self.err("cannot read", e)),
        };
        let size = meta.size;
        let (store, path, e_tag) = (&*self.store, &p, &meta.e_tag);
        let get =
            |r: std::ops::Range<u64>| get_range(store, path, r, e_tag.clone(), None, Vec::new());
        let mut head = block_on(get(0..n.min(size))).map_err(|e| self.err("cannot read", e))?;
        let len = head.len();
        if !patch(&mut head)? {
            return Ok(Some(false));
        }
        if head.len() != len {
            bail!(
                "a patch changed the length of the head of '{}'",
                self.describe()
            );
        }
        block_on(async {
            let up = self.store.put_multipart(&p).await?;
            let mut w = WriteMultipart::new_with_chunk_size(up, REWRITE_PART as usize);
            w.write(&head);
            let copied = async {
                let mut at = head.len() as u64;
                while at < size {
                    // A signal aborts the upload below: the old object stays.
                    if let Some(sig) = crate::interrupt::received() {
                        return Err(object_store::Error::Generic {
                            store: "pagevault",
                            source: crate::interrupt::error(sig).into(),
                        });
                    }
                    let end = (at + REWRITE_PART).min(size);
                    w.wait_for_capacity(2).await?;
                    w.put(get(at..end).await?.into());
                    at = end;
                }
                Ok(())
            }
            .await;
            match copied {
                Ok(()) => w.finish().await.map(|_| ()),
                Err(e) => {
                    let _ = w.abort().await;
                    Err(e)
                }
            }
        })
        .map_err(|e| match crate::interrupt::received() {
            Some(sig) => anyhow!(
                "{}: the rewrite of '{}' was aborted, and the object is as it was",
                crate::interrupt::error(sig),
                self.describe()
            ),
            None => self.err("cannot rewrite", e),
        })?;
        Ok(Some(true))
    }

    /// Writes a whole object (a single PUT: atomic, never half visible).
    pub fn put(&self, bytes: Vec<u8>) -> Result<()> {
        let p = self.path();
        block_on(self.store.put(&p, PutPayload::from(bytes)))
            .map(|_| ())
            .map_err(|e| self.err("cannot write", e))
    }

    /// Writes an object only if no object has that name. Ok(false) when one has.
    pub fn put_new(&self, bytes: Vec<u8>) -> Result<bool> {
        let p = self.path();
        let opts = PutOptions {
            mode: PutMode::Create,
            ..Default::default()
        };
        match block_on(self.store.put_opts(&p, PutPayload::from(bytes), opts)) {
            Ok(_) => Ok(true),
            Err(object_store::Error::AlreadyExists { .. })
            | Err(object_store::Error::Precondition { .. }) => Ok(false),
            Err(e) => Err(self.err("cannot write", e)),
        }
    }

    pub fn exists(&self) -> Result<bool> {
        let p = self.path();
        match block_on(self.store.head(&p)) {
            Ok(_) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(self.err("cannot look up", e)),
        }
    }

    /// When the object was last written; None when it does not exist.
    pub fn modified(&self) -> Result<Option<std::time::SystemTime>> {
        let p = self.path();
        match block_on(self.store.head(&p)) {
            Ok(m) => Ok(Some(m.last_modified.into())),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(self.err("cannot look up", e)),
        }
    }

    pub fn delete(&self) -> Result<()> {
        let p = self.path();
        match block_on(self.store.delete(&p)) {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(self.err("cannot delete", e)),
        }
    }

    /// Names (relative to this prefix) and sizes of every object under it.
    pub fn list(&self) -> Result<Vec<(String, u64)>> {
        let p = self.path();
        let prefix = (!self.key.is_empty()).then_some(&p);
        let all: Vec<object_store::ObjectMeta> = block_on(self.store.list(prefix).try_collect())
            .map_err(|e| self.err("cannot list", e))?;
        let base = if self.key.is_empty() {
            String::new()
        } else {
            format!("{}/", self.key.trim_end_matches('/'))
        };
        Ok(all
            .into_iter()
            .filter_map(|m| {
                let k = m.location.to_string();
                k.strip_prefix(&base).map(|r| (r.to_string(), m.size))
            })
            .collect())
    }
}

type StoreKey = (Kind, String, Option<String>);

/// The store of `bucket`, built once per kind, bucket and endpoint for the process.
fn shared_store(kind: Kind, bucket: &str, o: &StoreOptions) -> Result<Arc<dyn ObjectStore>> {
    static STORES: OnceLock<Mutex<HashMap<StoreKey, Arc<dyn ObjectStore>>>> = OnceLock::new();
    let stores = STORES.get_or_init(|| Mutex::new(HashMap::new()));
    let mut map = stores.lock().unwrap();
    let key = (kind, bucket.to_string(), o.s3_endpoint.clone());
    if let Some(s) = map.get(&key) {
        return Ok(s.clone());
    }
    let s: Arc<dyn ObjectStore> = Arc::new(count::Counted(match kind {
        Kind::S3 => build_s3(bucket, o)?,
        Kind::Azure => build_azure(bucket)?,
        Kind::Gcs => build_gcs(bucket)?,
    }));
    map.insert(key, s.clone());
    Ok(s)
}

/// Parses `s3://BUCKET[/KEY]`, `azure://CONTAINER[/BLOB]` or `gs://BUCKET[/KEY]`; None
/// for other specs.
/// Stores are shared per bucket and endpoint, so stripes to one bucket share connections.
pub fn parse(spec: &str, o: &StoreOptions) -> Result<Option<Location>> {
    let Some((scheme, rest)) = spec.split_once("://") else {
        return Ok(None);
    };
    let kind = match scheme.to_ascii_lowercase().as_str() {
        "s3" => Kind::S3,
        "azure" | "az" => Kind::Azure,
        "gs" => Kind::Gcs,
        _ => return Ok(None),
    };
    let (bucket, key) = rest.split_once('/').unwrap_or((rest, ""));
    if bucket.is_empty() {
        bail!("'{spec}' names no bucket: use {scheme}://BUCKET/KEY");
    }
    if bucket.contains('@') || bucket.contains(':') {
        bail!("'{spec}': put credentials in the environment, not in the URL");
    }
    let key = key.trim_matches('/').to_string();
    if key.split('/').any(|s| s == ".." || s == ".") {
        bail!("'{spec}': a key may not contain '.' or '..' segments");
    }
    let store = shared_store(kind, bucket, o)?;
    Ok(Some(Location {
        kind,
        bucket: bucket.to_string(),
        key,
        store,
    }))
}
