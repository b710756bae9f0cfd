//! Real object stores for tests: MinIO (S3), Azurite (Azure Blob) and fake-gcs-server
//! (Google Cloud Storage), started on 127.0.0.1 on free ports, each watched by a shell
//! that stops it when the test process ends. scripts/setup.sh installs them under
//! /var/tmp/pagevault-tools.
#![allow(dead_code)]

use super::delay::DelayProxy;
use super::free_port;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

pub const S3_USER: &str = "pvtestadmin";
pub const S3_SECRET: &str = "pvtest-secret-Zq81";
/// Azurite's well-known development account (public, documented by Microsoft).
pub const AZ_ACCOUNT: &str = "devstoreaccount1";
pub const AZ_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

fn tools() -> PathBuf {
    PathBuf::from(
        std::env::var("PAGEVAULT_TOOLS").unwrap_or_else(|_| "/var/tmp/pagevault-tools".into()),
    )
}

fn need(p: PathBuf) -> PathBuf {
    assert!(
        p.exists(),
        "{} is missing: run scripts/setup.sh (it builds MinIO and fake-gcs-server, and installs Azurite)",
        p.display()
    );
    p
}

fn wait_port(port: u16, what: &str) {
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(60) {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("{what} did not listen on port {port} within 60 s");
}

/// Starts `cmd` under a shell that kills it when this test process is gone; the
/// server's pid goes to `LOG.pid`.
fn watched(cmd: &str, env: &[(&str, String)], log: &std::path::Path) -> Child {
    let script = format!(
        "{cmd} >>'{}' 2>&1 & c=$!; echo $c > '{}.pid'; trap 'kill -9 $c 2>/dev/null; exit' TERM; while kill -0 {} 2>/dev/null && kill -0 $c 2>/dev/null; do sleep 1; done; kill -9 $c 2>/dev/null",
        log.display(),
        log.display(),
        std::process::id()
    );
    let mut c = Command::new("bash");
    c.args(["-c", &script]).stdin(Stdio::null());
    for (k, v) in env {
        c.env(k, v);
    }
    c.spawn().expect("start a store")
}

/// Stops a watched server: the watcher's TERM trap kills it with SIGKILL.
fn stop(mut c: Child) {
    let _ = Command::new("kill")
        .args(["-TERM", &c.id().to_string()])
        .status();
    let _ = c.wait();
}

fn scratch(name: &str) -> PathBuf {
    static SWEPT: std::sync::Once = std::sync::Once::new();
    SWEPT.call_once(|| super::sweep_ended_runs("pagevault-store"));
    let d = std::env::temp_dir().join(format!(
        "pagevault-store-{}-{name}-{}",
        std::process::id(),
        free_port()
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

pub struct Minio {
    pub port: u16,
    pub dir: PathBuf,
    child: Option<Child>,
}

impl Minio {
    pub fn start() -> Minio {
        let mut m = Minio {
            port: free_port(),
            dir: scratch("minio"),
            child: None,
        };
        m.run();
        m
    }

    fn run(&mut self) {
        let bin = need(tools().join("bin/minio"));
        let cmd = format!(
            "exec '{}' server '{}' --address 127.0.0.1:{} --quiet",
            bin.display(),
            self.dir.join("data").display(),
            self.port
        );
        let env = [
            ("MINIO_ROOT_USER", S3_USER.to_string()),
            ("MINIO_ROOT_PASSWORD", S3_SECRET.to_string()),
            ("MINIO_UPDATE", "off".to_string()),
            ("MINIO_BROWSER", "off".to_string()),
        ];
        self.child = Some(watched(&cmd, &env, &self.dir.join("log")));
        wait_port(self.port, "MinIO");
        // The port opens before the API answers: wait for a real request to work.
        let t0 = Instant::now();
        loop {
            let r = self.admin_try(&["ls", "nosuchbucket-probe"]);
            if r.as_ref().is_ok() || r.as_ref().is_err_and(|e| e.contains("NoSuchBucket")) {
                return;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(60),
                "MinIO not ready: {r:?}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// This server behind `ms` milliseconds of delay each way (0, 10, 25, 50: a store
    /// in another zone answers in 20-100 ms); pass its `endpoint()` as --s3-endpoint.
    /// Stopping the proxy makes the server unreachable through it.
    pub fn delayed(&self, ms: u64) -> DelayProxy {
        let to = ([127, 0, 0, 1], self.port).into();
        DelayProxy::start(to, Duration::from_millis(ms))
    }

    /// Kills the server at once (as a crash would) and waits until the port is free.
    pub fn kill(&mut self) {
        if let Ok(pid) = std::fs::read_to_string(self.dir.join("log.pid")) {
            let _ = Command::new("kill").args(["-9", pid.trim()]).status();
        }
        if let Some(c) = self.child.take() {
            stop(c);
        }
        let t0 = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
            assert!(t0.elapsed() < Duration::from_secs(20), "MinIO did not die");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Starts the server again on the same port and data.
    pub fn restart(&mut self) {
        self.kill();
        self.run();
    }

    /// Files of multipart uploads in progress (MinIO keeps them under .minio.sys/multipart).
    pub fn staging_files(&self) -> usize {
        self.staged(|_| true)
    }

    /// Parts stored by uploads in progress. An upload's xl.meta comes first, before
    /// CreateMultipartUpload answers: a kill then can lose the answer, and the client's
    /// retry starts a second upload, leaving the first where nobody knows its id.
    pub fn staging_parts(&self) -> usize {
        self.staged(|name| name.starts_with("part."))
    }

    fn staged(&self, pick: impl Fn(&str) -> bool + Copy) -> usize {
        fn count(p: &std::path::Path, pick: impl Fn(&str) -> bool + Copy) -> usize {
            std::fs::read_dir(p)
                .map(|rd| {
                    rd.flatten()
                        .map(|e| {
                            let p = e.path();
                            if p.is_dir() {
                                count(&p, pick)
                            } else {
                                pick(&e.file_name().to_string_lossy()) as usize
                            }
                        })
                        .sum()
                })
                .unwrap_or(0)
        }
        count(&self.dir.join("data/.minio.sys/multipart"), pick)
    }

    pub fn admin_try(&self, args: &[&str]) -> Result<String, String> {
        admin_with("s3", args, &[("AWS_ENDPOINT_URL", self.endpoint())])
    }

    /// Runs the S3 SDK helper (tests/tools/store.js) against this server.
    pub fn admin(&self, args: &[&str]) -> String {
        self.admin_try(args)
            .unwrap_or_else(|e| panic!("s3 {args:?}: {e}"))
    }
}

impl Drop for Minio {
    fn drop(&mut self) {
        self.kill();
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

pub struct Azurite {
    pub port: u16,
    pub dir: PathBuf,
    child: Option<Child>,
}

impl Azurite {
    pub fn start() -> Azurite {
        let port = free_port();
        let dir = scratch("azurite");
        let bin = need(tools().join("node/node_modules/.bin/azurite-blob"));
        let cmd = format!(
            "exec '{}' --blobHost 127.0.0.1 --blobPort {port} --location '{}' --disableTelemetry --skipApiVersionCheck --loose --silent",
            bin.display(),
            dir.join("data").display()
        );
        let child = watched(&cmd, &[], &dir.join("log"));
        wait_port(port, "Azurite");
        Azurite {
            port,
            dir,
            child: Some(child),
        }
    }

    pub fn connection_string(&self) -> String {
        Self::connection_string_on(self.port)
    }

    fn connection_string_on(port: u16) -> String {
        format!(
            "DefaultEndpointsProtocol=http;AccountName={AZ_ACCOUNT};AccountKey={AZ_KEY};BlobEndpoint=http://127.0.0.1:{port}/{AZ_ACCOUNT};"
        )
    }

    /// This server behind `ms` milliseconds of delay each way, and the connection string
    /// that reaches it through the proxy (for AZURE_STORAGE_CONNECTION_STRING).
    pub fn delayed(&self, ms: u64) -> (DelayProxy, String) {
        let to = ([127, 0, 0, 1], self.port).into();
        let p = DelayProxy::start(to, Duration::from_millis(ms));
        let s = Self::connection_string_on(p.port);
        (p, s)
    }

    /// Runs the Azure SDK helper (tests/tools/store.js) against this server.
    pub fn admin(&self, args: &[&str]) -> String {
        admin_with(
            "azure",
            args,
            &[("AZURE_STORAGE_CONNECTION_STRING", self.connection_string())],
        )
        .unwrap_or_else(|e| panic!("azure {args:?}: {e}"))
    }
}

impl Drop for Azurite {
    fn drop(&mut self) {
        if let Some(c) = self.child.take() {
            stop(c);
        }
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

fn admin_with(kind: &str, args: &[&str], env: &[(&str, String)]) -> Result<String, String> {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/tools/store.js");
    let mut c = Command::new("node");
    c.arg(script)
        .arg(kind)
        .args(args)
        .env("NODE_PATH", tools().join("node/node_modules"))
        .env("NODE_NO_WARNINGS", "1")
        .env("AWS_ACCESS_KEY_ID", S3_USER)
        .env("AWS_SECRET_ACCESS_KEY", S3_SECRET)
        .env("AWS_REGION", "us-east-1");
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.output().expect("node");
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// One MinIO and one Azurite shared by the tests of a binary, with a bucket and a
/// container named `pvtest`, and the environment pagevault reads set for them:
/// AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION, AWS_ENDPOINT_URL and
/// AZURE_STORAGE_CONNECTION_STRING. Tests that need their own server (to kill it)
/// pass --s3-endpoint, which overrides AWS_ENDPOINT_URL.
impl Minio {
    /// Sets the environment pagevault reads (credentials, region, endpoint) for this server.
    pub fn export_env(&self) {
        std::env::set_var("AWS_ACCESS_KEY_ID", S3_USER);
        std::env::set_var("AWS_SECRET_ACCESS_KEY", S3_SECRET);
        std::env::set_var("AWS_REGION", "us-east-1");
        std::env::set_var("AWS_ENDPOINT_URL", self.endpoint());
    }
}

pub struct Shared {
    pub minio: Minio,
    pub azurite: Azurite,
}

pub fn shared() -> &'static Shared {
    static S: OnceLock<Shared> = OnceLock::new();
    S.get_or_init(|| {
        let minio = Minio::start();
        let azurite = Azurite::start();
        minio.admin(&["mkbucket", "pvtest"]);
        azurite.admin(&["mkbucket", "pvtest"]);
        minio.export_env();
        std::env::set_var(
            "AZURE_STORAGE_CONNECTION_STRING",
            azurite.connection_string(),
        );
        Shared { minio, azurite }
    })
}

/// A key prefix no other test uses.
pub fn unique(name: &str) -> String {
    format!("{name}-{}", free_port())
}

/// fake-gcs-server with a bucket `pvtest`, and STORAGE_EMULATOR_HOST set for it. Its
/// JSON API (uploads, listings) is what the tests use to put objects in and look;
/// pagevault speaks GCS's XML API (object_store's), of which the emulator serves GETs,
/// HEADs, listings and DELETEs, but refuses PUTs and has no multipart uploads.
pub struct FakeGcs {
    pub port: u16,
    pub dir: PathBuf,
    child: Option<Child>,
}

impl FakeGcs {
    pub fn start() -> FakeGcs {
        let port = free_port();
        let dir = scratch("fake-gcs");
        let bin = need(tools().join("bin/fake-gcs-server"));
        let cmd = format!(
            "exec '{}' -scheme http -host 127.0.0.1 -port {port} -public-host 127.0.0.1:{port} -backend filesystem -filesystem-root '{}' -log-level warn",
            bin.display(),
            dir.join("data").display()
        );
        let child = watched(&cmd, &[], &dir.join("log"));
        wait_port(port, "fake-gcs-server");
        let g = FakeGcs {
            port,
            dir,
            child: Some(child),
        };
        let t0 = Instant::now();
        while g.http("GET", "/_internal/healthcheck", &[]).0 != 200 {
            assert!(
                t0.elapsed() < Duration::from_secs(60),
                "fake-gcs-server not ready"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        g
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// One HTTP/1.1 request to the emulator: (status, body).
    pub fn http(&self, method: &str, path: &str, body: &[u8]) -> (u16, Vec<u8>) {
        use std::io::{Read, Write};
        let Ok(mut c) = std::net::TcpStream::connect(("127.0.0.1", self.port)) else {
            return (0, vec![]);
        };
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Type: application/octet-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            self.port,
            body.len()
        );
        c.write_all(head.as_bytes()).unwrap();
        c.write_all(body).unwrap();
        let mut out = vec![];
        c.read_to_end(&mut out).unwrap();
        let at = out.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
        let head = String::from_utf8_lossy(&out[..at]).to_string();
        let status = head.split(' ').nth(1).unwrap().parse().unwrap();
        let mut rest = out[at..].to_vec();
        if head
            .to_ascii_lowercase()
            .contains("transfer-encoding: chunked")
        {
            rest = dechunk(&rest);
        }
        (status, rest)
    }

    pub fn mkbucket(&self, name: &str) {
        let body = format!("{{\"name\":\"{name}\"}}");
        let (st, b) = self.http("POST", "/storage/v1/b", body.as_bytes());
        assert_eq!(st, 200, "{}", String::from_utf8_lossy(&b));
    }

    /// Puts `bytes` as object `name` with the JSON API's media upload.
    pub fn put(&self, bucket: &str, name: &str, bytes: &[u8]) {
        let path = format!(
            "/upload/storage/v1/b/{bucket}/o?uploadType=media&name={}",
            encode(name)
        );
        let (st, b) = self.http("POST", &path, bytes);
        assert_eq!(st, 200, "{name}: {}", String::from_utf8_lossy(&b));
    }

    /// Puts every file under `dir` as an object under `prefix` (its relative path).
    pub fn put_tree(&self, bucket: &str, prefix: &str, dir: &std::path::Path) {
        let mut stack = vec![dir.to_path_buf()];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).unwrap().flatten() {
                let p = e.path();
                if e.file_type().unwrap().is_dir() {
                    stack.push(p);
                    continue;
                }
                let rel = p.strip_prefix(dir).unwrap().to_string_lossy().to_string();
                self.put(
                    bucket,
                    &format!("{prefix}/{rel}"),
                    &std::fs::read(&p).unwrap(),
                );
            }
        }
    }

    /// Names and sizes of the objects under `prefix`, sorted.
    pub fn ls(&self, bucket: &str, prefix: &str) -> Vec<(String, u64)> {
        let path = format!("/storage/v1/b/{bucket}/o?prefix={}", encode(prefix));
        let (st, b) = self.http("GET", &path, &[]);
        assert_eq!(st, 200, "{}", String::from_utf8_lossy(&b));
        let v: serde_json::Value = serde_json::from_slice(&b).unwrap();
        let mut out: Vec<(String, u64)> = (v["items"].as_array().cloned().unwrap_or_default())
            .iter()
            .map(|o| {
                let size = o["size"].as_str().unwrap().parse().unwrap();
                (o["name"].as_str().unwrap().to_string(), size)
            })
            .collect();
        out.sort();
        out
    }

    /// The environment pagevault reads for it.
    pub fn export_env(&self) {
        std::env::set_var("STORAGE_EMULATOR_HOST", self.endpoint());
    }
}

impl Drop for FakeGcs {
    fn drop(&mut self) {
        if let Some(c) = self.child.take() {
            stop(c);
        }
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = vec![];
    loop {
        let Some(eol) = b.windows(2).position(|w| w == b"\r\n") else {
            return out;
        };
        let n = usize::from_str_radix(String::from_utf8_lossy(&b[..eol]).trim(), 16).unwrap();
        if n == 0 {
            return out;
        }
        out.extend_from_slice(&b[eol + 2..eol + 2 + n]);
        b = &b[eol + 2 + n + 2..];
    }
}

/// One fake-gcs-server shared by the tests of a binary, with a bucket `pvtest`.
pub fn gcs() -> &'static FakeGcs {
    static G: OnceLock<FakeGcs> = OnceLock::new();
    G.get_or_init(|| {
        let g = FakeGcs::start();
        g.mkbucket("pvtest");
        g.export_env();
        g
    })
}
