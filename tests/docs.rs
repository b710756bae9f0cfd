//! The docs never rot: the reference pages are today's `--help`, every `pagevault` command
//! line shown anywhere parses, and the guide's and README's shell blocks run, in order, on a
//! scratch PostgreSQL 17 cluster (conventions in docs/guide/README.md).

#[path = "docs/blocks.rs"]
mod blocks;
mod common;

use blocks::Kind;
use clap::CommandFactory;
use common::pg::{as_postgres, bin_dir, postgres_dir};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every Markdown page a reader is shown commands in (the reference pages are --help).
fn pages() -> Vec<PathBuf> {
    let mut out = vec![root().join("README.md")];
    for dir in [
        "docs",
        "docs/guide",
        "docs/systemd",
        "docs/grafana",
        "bench",
    ] {
        let Ok(rd) = std::fs::read_dir(root().join(dir)) else {
            continue;
        };
        let mut v: Vec<PathBuf> = rd
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "md"))
            .collect();
        v.sort();
        out.extend(v);
    }
    out
}

#[test]
fn the_reference_pages_are_todays_help() {
    let dir = tempfile::tempdir().unwrap();
    let mut gen = Command::new(common::bin());
    gen.args(["generate", "reference", "--out"]).arg(dir.path());
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("PAGEVAULT_") {
            gen.env_remove(k);
        }
    }
    let out = gen.output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let names = |d: &Path| {
        let mut v: Vec<String> = std::fs::read_dir(d)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    };
    let shipped = root().join("docs/reference");
    assert_eq!(
        names(dir.path()),
        names(&shipped),
        "docs/reference/ lists other pages than the commands: run `pagevault generate reference --out docs/reference`"
    );
    for n in names(dir.path()) {
        let want = std::fs::read_to_string(dir.path().join(&n)).unwrap();
        let have = std::fs::read_to_string(shipped.join(&n)).unwrap();
        assert!(
            want == have,
            "docs/reference/{n} is not today's --help: run `pagevault generate reference --out docs/reference`"
        );
    }
}

/// The command line without what the configuration file may give: every argument
/// optional and needing no other, so `backup --stanza main` parses as it does with a
/// stanza.
fn parser() -> clap::Command {
    fn loosen(cmd: clap::Command) -> clap::Command {
        let mut cmd = cmd.mut_args(|a| {
            a.required(false)
                .required_unless_present(clap::builder::Resettable::<clap::Id>::Reset)
                .requires(clap::builder::Resettable::<clap::Id>::Reset)
        });
        let groups: Vec<String> = cmd.get_groups().map(|g| g.get_id().to_string()).collect();
        for g in groups {
            cmd = cmd.mut_group(g, |g| g.required(false));
        }
        cmd
    }
    pagevault::cmd::cli::map_commands(pagevault::cmd::cli::Cli::command(), &loosen)
}

#[test]
fn every_pagevault_command_shown_parses() {
    let mut bad = Vec::new();
    let mut seen = 0;
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        for b in blocks::blocks(&text) {
            let shell = matches!(b.info.as_str(), "console" | "shell" | "sh" | "bash");
            if !matches!(b.kind, Kind::Run | Kind::NoRun | Kind::Hidden) && !shell {
                continue;
            }
            for line in blocks::commands(&b.text) {
                for call in blocks::pagevault_calls(&line) {
                    seen += 1;
                    if let Err(e) = parser().try_get_matches_from(&call) {
                        use clap::error::ErrorKind::*;
                        let help = DisplayHelpOnMissingArgumentOrSubcommand;
                        // A path of the reader's machine checked as it is parsed.
                        let elsewhere =
                            e.kind() == ValueValidation && e.to_string().contains("does not exist");
                        if !matches!(e.kind(), DisplayHelp | DisplayVersion)
                            && e.kind() != help
                            && !elsewhere
                        {
                            let first = e.to_string().lines().next().unwrap_or("").to_string();
                            bad.push(format!(
                                "{}:{}: {line}\n    {first}",
                                page.strip_prefix(root()).unwrap().display(),
                                b.line
                            ));
                        }
                    }
                }
            }
        }
    }
    assert!(
        bad.is_empty(),
        "{} command lines in the docs do not parse:\n{}",
        bad.len(),
        bad.join("\n")
    );
    assert!(
        seen > 50,
        "only {seen} pagevault commands found in the docs"
    );
}

/// A scratch machine: a PostgreSQL 17 cluster at S/pg/17/main on a free port, the paths
/// the pages use moved under S. Every server under S is stopped when it ends.
struct Machine {
    s: PathBuf,
    port: u16,
    map: Vec<(String, String)>,
    path: String,
}

impl Machine {
    fn new(name: &str) -> Machine {
        let s = postgres_dir(name);
        let bin = bin_dir(17);
        let port = common::free_port();
        let at = |p: &str| s.join(p).display().to_string();
        let map: Vec<(String, String)> = [
            ("/var/lib/postgresql/", at("pg") + "/"),
            ("/var/spool/pagevault", at("spool/pagevault")),
            ("/var/lib/pagevault", at("lib/pagevault")),
            ("/var/log/pagevault", at("log/pagevault")),
            ("/var/lib/node_exporter", at("node_exporter")),
            ("/etc/pagevault", at("etc/pagevault")),
            ("/backup", at("backup")),
            ("127.0.0.1:5432", format!("127.0.0.1:{port}")),
        ]
        .into_iter()
        .map(|(a, b)| (a.to_string(), b))
        .collect();
        for d in [
            "pg/17",
            "home",
            "backup",
            "spool",
            "lib",
            "log",
            "node_exporter",
        ] {
            std::fs::create_dir_all(s.join(d)).unwrap();
        }
        std::fs::create_dir_all(s.join("etc/pagevault")).unwrap();
        Command::new("chown")
            .args(["-R", "postgres:postgres"])
            .arg(s.join("pg"))
            .arg(s.join("home"))
            .status()
            .unwrap();
        let data = s.join("pg/17/main");
        as_postgres(
            &bin.join("initdb").display().to_string(),
            &[
                "-D",
                &data.display().to_string(),
                "--auth=trust",
                "-U",
                "postgres",
                "--no-sync",
                "--data-checksums",
            ],
        );
        let conf = format!(
            "listen_addresses = '127.0.0.1'\nport = {port}\nunix_socket_directories = '{}'\nfsync = off\nshared_buffers = 64MB\n",
            s.display()
        );
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(data.join("postgresql.conf"))
            .unwrap();
        std::io::Write::write_all(&mut f, conf.as_bytes()).unwrap();
        let exe = Path::new(common::bin()).parent().unwrap();
        let path = format!(
            "{}:{}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            exe.display(),
            bin.display()
        );
        let m = Machine { s, port, map, path };
        m.run_as(
            "postgres",
            "pg_ctl -D /var/lib/postgresql/17/main -w -l /var/lib/postgresql/17/main.log start",
            "start",
        )
        .unwrap();
        m
    }

    /// Runs `script` (its paths moved) with bash -euo pipefail as `user`. A path the
    /// scratch machine does not move is refused: the docs never write to the real one.
    fn run_as(&self, user: &str, script: &str, what: &str) -> Result<(), String> {
        let script = blocks::map_paths(script, &self.map);
        let scratch = self.s.display().to_string();
        for line in blocks::commands(&script) {
            let words = shlex::split(&line).unwrap_or_default();
            let outside = words.iter().flat_map(|w| w.split(['=', ':'])).find(|w| {
                w.starts_with('/')
                    && !w.starts_with("//")
                    && !w.starts_with(&scratch)
                    && *w != "/dev/null"
            });
            if let Some(p) = outside {
                return Err(format!("{what}: {p} is not a path the scratch machine moves (docs/guide/README.md lists them)"));
            }
        }
        let config = self.s.join("etc/pagevault/pagevault.toml");
        let mut env = vec![
            format!("PATH={}", self.path),
            format!("HOME={}", self.s.join("home").display()),
            "PGHOST=127.0.0.1".to_string(),
            format!("PGPORT={}", self.port),
            "PGUSER=postgres".to_string(),
            "LANG=C.UTF-8".to_string(),
        ];
        if config.exists() {
            env.push(format!("PAGEVAULT_CONFIG={}", config.display()));
        }
        // Files, not pipes: a server a block starts may keep its output open.
        let (out_path, err_path) = (self.s.join("block.out"), self.s.join("block.err"));
        let mut child = Command::new("runuser")
            .args(["-u", user, "--", "env", "-i"])
            .args(&env)
            .args(["bash", "-euo", "pipefail", "-c", &script])
            .current_dir(self.s.join("home"))
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&out_path).unwrap())
            .stderr(std::fs::File::create(&err_path).unwrap())
            .spawn()
            .unwrap();
        let t0 = Instant::now();
        let status = loop {
            if let Some(st) = child.try_wait().unwrap() {
                break Some(st);
            }
            if t0.elapsed() > Duration::from_secs(600) {
                let _ = child.kill();
                break None;
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let _ = child.wait();
        let tail = |p: &Path| {
            let b = std::fs::read(p).unwrap_or_default();
            let s = String::from_utf8_lossy(&b);
            let lines: Vec<&str> = s.lines().collect();
            lines[lines.len().saturating_sub(30)..].join("\n")
        };
        match status {
            Some(st) if st.success() => Ok(()),
            st => Err(format!(
                "{what} {}:\n{script}\n--- stdout:\n{}\n--- stderr:\n{}",
                st.map_or("ran over 10 minutes".to_string(), |s| format!("exited {s}")),
                tail(&out_path),
                tail(&err_path)
            )),
        }
    }

    /// A `file:` or `append:` block: written as its owner-to-be would have it (root's
    /// under /etc, else the postgres user's).
    fn write(&self, path: &str, text: &str, append: bool) -> Result<(), String> {
        let p = PathBuf::from(blocks::map_paths(path, &self.map));
        if !p.starts_with(&self.s) {
            return Err(format!("{path} is not a path of the scratch machine"));
        }
        let text = blocks::map_paths(text, &self.map);
        std::fs::create_dir_all(p.parent().unwrap()).map_err(|e| e.to_string())?;
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(append)
            .write(true)
            .truncate(!append)
            .open(&p)
            .map_err(|e| format!("{}: {e}", p.display()))?;
        std::io::Write::write_all(&mut f, text.as_bytes()).map_err(|e| e.to_string())?;
        if !path.starts_with("/etc/") {
            Command::new("chown")
                .args(["postgres:postgres"])
                .arg(&p)
                .status()
                .unwrap();
        }
        Ok(())
    }

    /// Runs every block of `page` in order.
    fn play(&self, page: &Path) {
        let name = page.strip_prefix(root()).unwrap().display().to_string();
        let text = std::fs::read_to_string(page).unwrap();
        for b in blocks::blocks(&text) {
            let what = format!("{name}:{}", b.line);
            let r = match &b.kind {
                Kind::Run => {
                    let lines = blocks::commands(&b.text);
                    let sudo = lines.iter().filter(|l| l.starts_with("sudo ")).count();
                    if sudo == 0 {
                        self.run_as("postgres", &b.text, &what)
                    } else if sudo == lines.len() {
                        let script: Vec<String> = lines
                            .iter()
                            .map(|l| match l.strip_prefix("sudo -u postgres ") {
                                Some(rest) => format!("runuser -u postgres -- {rest}"),
                                None => l["sudo ".len()..].to_string(),
                            })
                            .collect();
                        self.run_as("root", &script.join("\n"), &what)
                    } else {
                        Err(format!("{what}: a block runs as root (every line `sudo ...`) or as postgres (none), not both"))
                    }
                }
                Kind::Hidden => self.run_as("postgres", &b.text, &what),
                Kind::File(p) => self.write(p, &b.text, false),
                Kind::Append(p) => self.write(p, &b.text, true),
                Kind::NoRun | Kind::Other => Ok(()),
            };
            if let Err(e) = r {
                panic!("{what}: a block of the docs fails on the scratch machine\n{e}");
            }
        }
    }
}

impl Drop for Machine {
    fn drop(&mut self) {
        for e in walkdir(&self.s.join("pg")) {
            if e.join("postmaster.pid").exists() {
                let _ = Command::new("runuser")
                    .args(["-u", "postgres", "--"])
                    .arg(bin_dir(17).join("pg_ctl"))
                    .args(["-D"])
                    .arg(&e)
                    .args(["-m", "immediate", "stop"])
                    .output();
            }
        }
    }
}

/// The directories up to two levels under `d` (clusters live at pg/17/NAME).
fn walkdir(d: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for a in std::fs::read_dir(d).into_iter().flatten().flatten() {
        out.push(a.path());
        for b in std::fs::read_dir(a.path()).into_iter().flatten().flatten() {
            out.push(b.path());
        }
    }
    out
}

#[test]
fn the_guide_runs_page_by_page() {
    let mut guide: Vec<PathBuf> = std::fs::read_dir(root().join("docs/guide"))
        .map(|rd| rd.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    guide.retain(|p| p.extension().is_some_and(|e| e == "md") && !p.ends_with("README.md"));
    guide.sort();
    assert!(guide.len() >= 10, "docs/guide has {} pages", guide.len());
    let m = Machine::new("guide");
    for page in &guide {
        m.play(page);
    }
}

#[test]
fn the_readme_runs() {
    let m = Machine::new("readme");
    m.play(&root().join("README.md"));
}
