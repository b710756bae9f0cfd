//! Object storage devices: `s3://BUCKET/KEY` (AWS S3 and S3-compatible servers such as
//! MinIO) and `azure://CONTAINER/BLOB` (Azure Blob Storage, Azurite).
//!
//! A stripe is one multipart (S3) or block (Azure) upload: parts of `--max-transfer-size`
//! or more, several in flight, made visible only by the final commit. A failed backup
//! aborts the upload. Reads are ranged GETs, several in flight ahead of a sequential
//! reader. Requests are retried by object_store (exponential backoff with jitter on
//! 5xx, 429, timeouts and dropped connections); each retry is counted here.

use super::{Device, StripeSink, StripeSource};
use anyhow::{anyhow, bail, Result};
use futures::TryStreamExt;
use object_store::aws::AmazonS3Builder;
use object_store::azure::MicrosoftAzureBuilder;
use object_store::path::Path as KeyPath;
use object_store::{
    BackoffConfig, ClientOptions, GetOptions, MultipartUpload, ObjectStore, PutMode, PutOptions,
    PutPayload, RetryConfig,
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

/// S3 refuses parts under 5 MiB (except the last) and more than 10,000 parts.
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
/// Restore reads ahead in chunks of this size, this many GETs in flight per stripe.
const READ_CHUNK: u64 = 8 << 20;
const READ_AHEAD: u64 = 4;

/// Ranged GETs in flight ahead of a stripe's reader; PAGEVAULT_READ_AHEAD (1 to 64)
/// overrides it, a tuning knob documented in README (Object storage).
fn read_ahead() -> u64 {
    static N: OnceLock<u64> = OnceLock::new();
    *N.get_or_init(|| {
        std::env::var("PAGEVAULT_READ_AHEAD")
            .ok()
            .and_then(|v| v.parse().ok())
            .filter(|&n| (1..=64).contains(&n))
            .unwrap_or(READ_AHEAD)
    })
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Kind {
    S3,
    Azure,
}

impl Kind {
    fn scheme(self) -> &'static str {
        match self {
            Kind::S3 => "s3",
            Kind::Azure => "azure",
        }
    }
}

/// Options from the command line that apply to every object store of a run.
#[derive(Default, Clone)]
pub struct StoreOptions {
    pub s3_endpoint: Option<String>,
}

static OPTIONS: OnceLock<StoreOptions> = OnceLock::new();

/// Sets the options once, before any store is opened (from main).
pub fn set_options(o: StoreOptions) {
    let _ = OPTIONS.set(o);
}

/// ` --s3-endpoint URL` when one was given, for commands pagevault writes for
/// another process (restore_command); empty otherwise.
pub fn endpoint_option() -> String {
    OPTIONS
        .get()
        .and_then(|o| o.s3_endpoint.as_ref())
        .map(|e| format!(" --s3-endpoint {e}"))
        .unwrap_or_default()
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

// ---------------------------------------------------------------------------------
// Retry accounting. object_store retries internally and says so through `tracing`;
// a tiny subscriber counts those events and the back-off they announce. It is the
// subscriber of our own object_store futures only (`block_on`, `spawn`): a program
// embedding pagevault keeps its own global subscriber, and pagevault installs none.

static RETRIES: AtomicU64 = AtomicU64::new(0);
static BACKOFF_NS: AtomicU64 = AtomicU64::new(0);

#[derive(Debug, Clone, Copy, Default, serde::Serialize, PartialEq)]
pub struct RetryStats {
    pub retries: u64,
    pub backoff_seconds: f64,
}

/// Requests retried so far in this process, and the time spent backing off.
pub fn retry_stats() -> RetryStats {
    RetryStats {
        retries: RETRIES.load(Relaxed),
        backoff_seconds: BACKOFF_NS.load(Relaxed) as f64 / 1e9,
    }
}

struct RetryCounter;

/// The one dispatcher of `RetryCounter`, built once: building a dispatcher makes
/// tracing re-register every callsite, so not one per request.
fn counter() -> Dispatch {
    static D: OnceLock<Dispatch> = OnceLock::new();
    D.get_or_init(|| Dispatch::new(RetryCounter)).clone()
}

struct MessageOf(String);

impl tracing::field::Visit for MessageOf {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0 = format!("{value:?}");
        }
    }
}

/// "..., backing off for 0.4 seconds, retry 1 of 10" -> 0.4
fn backoff_of(msg: &str) -> Option<f64> {
    let rest = msg.split("backing off for ").nth(1)?;
    rest.split_whitespace().next()?.parse().ok()
}

impl tracing::Subscriber for RetryCounter {
    fn enabled(&self, m: &tracing::Metadata<'_>) -> bool {
        m.target().starts_with("object_store") && m.is_event()
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, e: &tracing::Event<'_>) {
        let mut m = MessageOf(String::new());
        e.record(&mut m);
        if let Some(s) = backoff_of(&m.0) {
            RETRIES.fetch_add(1, Relaxed);
            BACKOFF_NS.fetch_add((s * 1e9) as u64, Relaxed);
            // A diagnostic switch, documented in README (Object storage).
            if std::env::var_os("PAGEVAULT_LOG_RETRIES").is_some() {
                eprintln!("pagevault: object store: {}", m.0);
            }
        }
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

// ---------------------------------------------------------------------------------
// Locations and stores.

/// A parsed `s3://BUCKET/KEY` or `azure://CONTAINER/BLOB`.
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

    /// Reads a whole object of at most `max` bytes (a larger one is refused before its
    /// bytes are read); None when it does not exist.
    pub fn get(&self, max: u64) -> Result<Option<Vec<u8>>> {
        let p = self.path();
        let r = block_on(async {
            let g = self.store.get(&p).await?;
            if g.meta.size > max {
                return Ok(Err(g.meta.size));
            }
            g.bytes().await.map(Ok)
        });
        match r {
            Ok(Ok(b)) => Ok(Some(b.to_vec())),
            Ok(Err(size)) => bail!(
                "'{}' is {size} bytes, more than the {max} it may hold",
                self.describe()
            ),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(self.err("cannot read", e)),
        }
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

    /// Checks the bucket or container exists and the credentials work: a clear error
    /// before a backup starts rather than after its first part.
    pub fn check_access(&self) -> Result<()> {
        let p = self.path();
        let r = block_on(async {
            let mut s = self.store.list(Some(&p));
            s.try_next().await
        });
        r.map(|_| ()).map_err(|e| self.err("cannot access", e))
    }
}

const CREDS: &str = "the store refused the credentials: check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (s3://) or the AZURE_STORAGE_* variables (azure://)";

/// Turns an object_store error into a message that says what to do.
fn explain(name: &str, what: &str, e: object_store::Error) -> anyhow::Error {
    let text = e.to_string();
    let hint = match &e {
        object_store::Error::NotFound { .. } if text.contains("NoSuchBucket") => {
            "the bucket does not exist: create it first"
        }
        object_store::Error::NotFound { .. } if text.contains("ContainerNotFound") => {
            "the container does not exist: create it first"
        }
        object_store::Error::NotFound { .. } => "it does not exist",
        object_store::Error::Unauthenticated { .. }
        | object_store::Error::PermissionDenied { .. } => CREDS,
        _ if text.contains("SignatureDoesNotMatch")
            || text.contains("InvalidAccessKeyId")
            || text.contains("AuthenticationFailed")
            || text.contains("403 Forbidden") =>
        {
            CREDS
        }
        _ if text.contains("NoSuchBucket") => "the bucket does not exist: create it first",
        _ if text.contains("ContainerNotFound") => "the container does not exist: create it first",
        _ if text.contains("retries") || text.contains("error sending request") => {
            "the store did not answer (retried with back-off until the time limit)"
        }
        _ => "",
    };
    let text = compact(&redact(&text));
    if hint.is_empty() {
        anyhow!("{what} '{name}': {text}")
    } else {
        anyhow!("{what} '{name}': {hint} ({text})")
    }
}

/// A server's XML error body shrunk to its code and the first line of its message.
fn compact(text: &str) -> String {
    let tag = |t: &str| -> Option<String> {
        let a = text.find(&format!("<{t}>"))? + t.len() + 2;
        let b = text[a..].find(&format!("</{t}>"))? + a;
        Some(text[a..b].lines().next().unwrap_or("").trim().to_string())
    };
    match (text.find(": <?xml"), tag("Code")) {
        (Some(at), Some(code)) => format!(
            "{}: {code}: {}",
            &text[..at],
            tag("Message").unwrap_or_default()
        ),
        _ => text.to_string(),
    }
}

/// Removes anything that looks like a signature or key from a server message.
fn redact(s: &str) -> String {
    const KEYS: [&str; 4] = [
        "x-amz-signature=",
        "x-amz-credential=",
        "x-amz-security-token=",
        "sig=",
    ];
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    loop {
        let lower = rest.to_ascii_lowercase();
        let hit = KEYS
            .iter()
            .filter_map(|k| lower.find(k).map(|i| (i, k.len())))
            .min();
        let Some((i, kl)) = hit else {
            out.push_str(rest);
            return out;
        };
        out.push_str(&rest[..i + kl]);
        out.push_str("REDACTED");
        let after = &rest[i + kl..];
        let end = after
            .find(|c: char| c == '&' || c == '"' || c.is_whitespace())
            .unwrap_or(after.len());
        rest = &after[end..];
    }
}

fn is_loopback(url: &str) -> bool {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
        .unwrap_or(url);
    let host = rest.split('/').next().unwrap_or("");
    let host = if host.starts_with('[') {
        host.split(']').next().unwrap_or("").trim_start_matches('[')
    } else {
        host.rsplit_once(':').map(|(h, _)| h).unwrap_or(host)
    };
    host == "localhost" || host == "::1" || host.starts_with("127.")
}

fn check_endpoint(url: &str, var: &str) -> Result<bool> {
    if url.starts_with("https://") {
        return Ok(false);
    }
    if !url.starts_with("http://") {
        bail!("{var} '{url}' is not an http:// or https:// URL");
    }
    if !is_loopback(url) {
        bail!("{var} '{url}': plain HTTP is allowed only to a loopback address; use https://");
    }
    Ok(true)
}

/// Client options; a private CA (a self-signed test server, a company CA) comes from
/// PAGEVAULT_CA_FILE, or AWS_CA_BUNDLE for S3, as a PEM bundle (README, Object storage).
fn client_options(allow_http: bool, kind: Kind) -> Result<ClientOptions> {
    let mut o = ClientOptions::new()
        .with_allow_http(allow_http)
        .with_connect_timeout(Duration::from_secs(5))
        .with_timeout(Duration::from_secs(120));
    let ca = std::env::var("PAGEVAULT_CA_FILE")
        .ok()
        .map(|f| (f, "PAGEVAULT_CA_FILE"))
        .or_else(|| {
            (kind == Kind::S3)
                .then(|| std::env::var("AWS_CA_BUNDLE").ok())
                .flatten()
                .map(|f| (f, "AWS_CA_BUNDLE"))
        });
    if let Some((file, var)) = ca {
        let pem =
            std::fs::read(&file).map_err(|e| anyhow!("{var} '{file}' cannot be read: {e}"))?;
        let certs = object_store::Certificate::from_pem_bundle(&pem)
            .map_err(|e| anyhow!("{var} '{file}' holds no usable PEM certificate: {e}"))?;
        for c in certs {
            o = o.with_root_certificate(c);
        }
    }
    Ok(o)
}

/// Retries for up to PAGEVAULT_RETRY_SECONDS (README, Object storage; the tests shorten
/// it to fail fast against a server they stopped).
fn retry_config() -> RetryConfig {
    let secs = std::env::var("PAGEVAULT_RETRY_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(180u64);
    RetryConfig {
        backoff: BackoffConfig {
            init_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(10),
            base: 2.0,
        },
        max_retries: 20,
        retry_timeout: Duration::from_secs(secs),
    }
}

fn build_s3(bucket: &str) -> Result<Arc<dyn ObjectStore>> {
    let mut b = AmazonS3Builder::from_env().with_bucket_name(bucket);
    let endpoint = OPTIONS
        .get()
        .and_then(|o| o.s3_endpoint.clone())
        .map(|e| (e, "--s3-endpoint"))
        .or_else(|| {
            std::env::var("AWS_ENDPOINT_URL")
                .ok()
                .map(|e| (e, "AWS_ENDPOINT_URL"))
        });
    let mut allow_http = false;
    if let Some((e, var)) = endpoint {
        allow_http = check_endpoint(&e, var)?;
        b = b.with_endpoint(e);
    }
    if std::env::var_os("AWS_REGION").is_none() && std::env::var_os("AWS_DEFAULT_REGION").is_none()
    {
        b = b.with_region("us-east-1");
    }
    if std::env::var_os("AWS_ACCESS_KEY_ID").is_none() {
        bail!("s3://{bucket}: no credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY");
    }
    // No SHA-256 of every part on both ends: TLS guards the transfer, and every frame
    // carries its own CRC32C and content digest, checked on restore.
    b.with_unsigned_payload(true)
        .with_client_options(client_options(allow_http, Kind::S3)?)
        .with_retry(retry_config())
        .build()
        .map(|s| Arc::new(s) as Arc<dyn ObjectStore>)
        .map_err(|e| anyhow!("s3://{bucket}: {}", redact(&e.to_string())))
}

/// `Key=Value;...` of an Azure connection string.
fn connection_string(s: &str) -> HashMap<String, String> {
    s.split(';')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect()
}

fn build_azure(container: &str) -> Result<Arc<dyn ObjectStore>> {
    let mut b = MicrosoftAzureBuilder::new().with_container_name(container);
    let mut allow_http = false;
    let mut have_creds = false;
    if let Ok(cs) = std::env::var("AZURE_STORAGE_CONNECTION_STRING") {
        let kv = connection_string(&cs);
        if kv
            .get("usedevelopmentstorage")
            .is_some_and(|v| v.eq_ignore_ascii_case("true"))
        {
            b = b.with_use_emulator(true);
            allow_http = true;
            have_creds = true;
        }
        if let Some(a) = kv.get("accountname") {
            b = b.with_account(a);
        }
        if let Some(k) = kv.get("accountkey") {
            b = b.with_access_key(k);
            have_creds = true;
        }
        if let Some(e) = kv.get("blobendpoint") {
            allow_http = check_endpoint(e, "BlobEndpoint of AZURE_STORAGE_CONNECTION_STRING")?;
            b = b.with_endpoint(e.trim_end_matches('/').to_string());
        }
    } else {
        let emulator = std::env::var("AZURE_STORAGE_USE_EMULATOR")
            .is_ok_and(|v| v.eq_ignore_ascii_case("true") || v == "1");
        if emulator {
            b = b.with_use_emulator(true);
            allow_http = true;
            have_creds = true;
        }
        if let Ok(a) = std::env::var("AZURE_STORAGE_ACCOUNT_NAME") {
            b = b.with_account(a);
        }
        if let Ok(k) = std::env::var("AZURE_STORAGE_ACCOUNT_KEY") {
            b = b.with_access_key(k);
            have_creds = true;
        }
    }
    if !have_creds {
        bail!("azure://{container}: no credentials: set AZURE_STORAGE_CONNECTION_STRING, or AZURE_STORAGE_ACCOUNT_NAME and AZURE_STORAGE_ACCOUNT_KEY (AZURE_STORAGE_USE_EMULATOR=true for Azurite)");
    }
    b.with_client_options(client_options(allow_http, Kind::Azure)?)
        .with_retry(retry_config())
        .build()
        .map(|s| Arc::new(s) as Arc<dyn ObjectStore>)
        .map_err(|e| anyhow!("azure://{container}: {}", redact(&e.to_string())))
}

/// Parses `s3://BUCKET[/KEY]` or `azure://CONTAINER[/BLOB]`; None for other specs.
/// Stores are shared per bucket, so stripes to one bucket share connections.
pub fn parse(spec: &str) -> Result<Option<Location>> {
    let Some((scheme, rest)) = spec.split_once("://") else {
        return Ok(None);
    };
    let kind = match scheme.to_ascii_lowercase().as_str() {
        "s3" => Kind::S3,
        "azure" | "az" => Kind::Azure,
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
    type Stores = Mutex<HashMap<(Kind, String), Arc<dyn ObjectStore>>>;
    static STORES: OnceLock<Stores> = OnceLock::new();
    let stores = STORES.get_or_init(|| Mutex::new(HashMap::new()));
    let mut map = stores.lock().unwrap();
    let store = match map.get(&(kind, bucket.to_string())) {
        Some(s) => s.clone(),
        None => {
            let s = match kind {
                Kind::S3 => build_s3(bucket)?,
                Kind::Azure => build_azure(bucket)?,
            };
            map.insert((kind, bucket.to_string()), s.clone());
            s
        }
    };
    Ok(Some(Location {
        kind,
        bucket: bucket.to_string(),
        key,
        store,
    }))
}

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
        Kind::S3 => (S3_MIN_PART, S3_MAX_PARTS),
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
fn parts_in_flight(part: usize) -> usize {
    (UPLOAD_BUDGET / part)
        .saturating_sub(1)
        .clamp(1, MAX_PARTS_IN_FLIGHT)
}

fn part_size(kind: Kind, base: usize, step: u64, index: u64) -> usize {
    let max = match kind {
        Kind::S3 => S3_MAX_PART,
        Kind::Azure => AZ_MAX_PART,
    };
    let shift = (index / step).min(20) as u32;
    base.saturating_mul(1usize << shift).min(max)
}

impl Device for ObjectDevice {
    fn describe(&self) -> String {
        self.loc.describe()
    }

    fn create(&self, hint: &super::CreateHint) -> Result<Box<dyn StripeSink>> {
        if self.loc.key.is_empty() || self.loc.key.ends_with('/') {
            bail!(
                "device '{}' names a bucket, not an object: add a key, e.g. {}/backup.pv",
                self.loc.describe(),
                self.loc.describe()
            );
        }
        self.loc.check_access()?;
        let path = self.loc.path();
        let upload = block_on(self.loc.store.put_multipart(&path))
            .map_err(|e| self.loc.err("cannot start the upload of", e))?;
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
        let meta = block_on(self.loc.store.head(&path))
            .map_err(|e| self.loc.err("cannot open stripe", e))?;
        Ok(Box::new(ObjectSource {
            loc: self.loc.clone(),
            len: meta.size,
            state: Mutex::new(ReadState::default()),
        }))
    }

    fn remove(&self) -> Result<()> {
        self.loc.delete()
    }

    fn write_memory(&self, hint: &super::CreateHint) -> u64 {
        let (base, _) = part_plan(self.loc.kind, hint.transfer_size, hint.expected_bytes);
        ((parts_in_flight(base) + 1) * base) as u64
    }
}

struct ObjectSink {
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
                    return Err(io::Error::other(format!(
                        "{:#}",
                        self.loc.err("cannot upload a part of", e)
                    )))
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

    fn commit(mut self: Box<Self>) -> Result<()> {
        let r: Result<()> = (|| {
            if !self.buf.is_empty() || self.parts == 0 {
                self.send_part()?;
            }
            while !self.in_flight.is_empty() {
                self.wait_one()?;
            }
            let mut up = self.upload.take().expect("upload open");
            match block_on(up.complete()) {
                Ok(_) => Ok(()),
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
struct ReadState {
    /// Where the last read ended: a read starting there is sequential.
    last_end: u64,
    chunks: BTreeMap<u64, JoinHandle<object_store::Result<Vec<u8>>>>,
    ready: BTreeMap<u64, Vec<u8>>,
    /// Chunk buffers done with, for the next GETs: fresh 8 MiB buffers are mapped and
    /// faulted in page by page, a fifth of a restore's CPU.
    free: Vec<Vec<u8>>,
}

struct ObjectSource {
    loc: Location,
    len: u64,
    state: Mutex<ReadState>,
}

impl ObjectSource {
    /// GETs `start..end` into `buf`, streaming the body (no second copy of it).
    fn fetch(
        &self,
        start: u64,
        end: u64,
        mut buf: Vec<u8>,
    ) -> JoinHandle<object_store::Result<Vec<u8>>> {
        let store = self.loc.store.clone();
        let path = self.loc.path();
        spawn(async move {
            let opts = GetOptions {
                range: Some((start..end).into()),
                ..Default::default()
            };
            let mut body = store.get_opts(&path, opts).await?.into_stream();
            buf.clear();
            while let Some(part) = body.try_next().await? {
                buf.extend_from_slice(&part);
            }
            Ok(buf)
        })
    }

    fn wait(&self, h: JoinHandle<object_store::Result<Vec<u8>>>, want: u64) -> io::Result<Vec<u8>> {
        let b = block_on(h)
            .map_err(|e| io::Error::other(format!("read task failed: {e}")))?
            .map_err(|e| {
                io::Error::other(format!("{:#}", self.loc.err("cannot read stripe", e)))
            })?;
        if b.len() as u64 != want {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!(
                    "'{}': the store sent {} bytes of a {want}-byte range",
                    self.loc.describe(),
                    b.len()
                ),
            ));
        }
        Ok(b)
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
            Some(h) => h,
            None => self.fetch(s, e, st.free.pop().unwrap_or_default()),
        };
        let b = self.wait(h, e - s)?;
        st.ready.insert(c, b);
        Ok(())
    }
}

impl StripeSource for ObjectSource {
    fn len(&self) -> u64 {
        self.len
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
            // Header, tail, manifest: exactly the bytes asked for.
            drop(st);
            let b = self.wait(self.fetch(offset, end, Vec::new()), end - offset)?;
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
        for c in first..(last + 1 + read_ahead()).min(chunks) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_message_parses() {
        assert_eq!(
            backoff_of("Encountered server error with status 503 Service Unavailable, backing off for 0.25 seconds, retry 1 of 10"),
            Some(0.25)
        );
        assert_eq!(backoff_of("something else"), None);
    }

    #[test]
    fn parts_fit_any_stripe() {
        for kind in [Kind::S3, Kind::Azure] {
            for expected in [0u64, 1 << 30, 1 << 40, 5 << 40] {
                let (base, step) = part_plan(kind, 1 << 20, expected);
                let max_parts = if kind == Kind::S3 {
                    S3_MAX_PARTS
                } else {
                    AZ_MAX_PARTS
                };
                let total: u64 = (0..max_parts)
                    .map(|i| part_size(kind, base, step, i) as u64)
                    .sum();
                // Even twice the expected size (at least 1 TiB) fits in the part limit.
                assert!(total >= (2 * expected).max(1 << 40), "{kind:?} {expected}");
                if kind == Kind::S3 {
                    assert!(base >= S3_MIN_PART);
                }
            }
        }
    }

    #[test]
    fn loopback_only_for_http() {
        assert!(check_endpoint("http://127.0.0.1:9000", "x").unwrap());
        assert!(check_endpoint("http://localhost:9000/", "x").unwrap());
        assert!(check_endpoint("http://[::1]:9000", "x").unwrap());
        assert!(check_endpoint("http://example.com:9000", "x").is_err());
        assert!(!check_endpoint("https://example.com", "x").unwrap());
    }

    #[test]
    fn signatures_are_redacted() {
        let r = redact("GET http://h/b/k?X-Amz-Credential=AKIA/x&X-Amz-Signature=abc123 failed");
        assert!(!r.contains("abc123") && !r.contains("AKIA"), "{r}");
    }
}
