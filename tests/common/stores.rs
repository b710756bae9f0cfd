//! Real object stores for tests: MinIO (S3) and Azurite (Azure Blob), started on
//! 127.0.0.1 on free ports, each watched by a shell that stops it when the test
//! process ends. scripts/setup.sh installs both under /var/tmp/pagevault-tools.
#![allow(dead_code)]

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
        "{} is missing: run scripts/setup.sh (it builds MinIO and installs Azurite)",
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
        format!(
            "DefaultEndpointsProtocol=http;AccountName={AZ_ACCOUNT};AccountKey={AZ_KEY};BlobEndpoint=http://127.0.0.1:{}/{AZ_ACCOUNT};",
            self.port
        )
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
