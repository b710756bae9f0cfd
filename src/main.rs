//! pagevault's command line: parses the arguments and runs one command of the library.

use anyhow::Context;
use pagevault::cmd::{config, log, EXIT_FATAL, EXIT_RETRY, EXIT_USAGE};
use pagevault::{cmd, device, interrupt};

use clap::{CommandFactory, FromArgMatches};
use pagevault::cmd::cli::{Cli, Command};
use std::process::ExitCode;

/// `--version`: the package's version and the commit it was built from (build.rs).
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("PAGEVAULT_COMMIT"),
    ")"
);

/// Set when printing failed because stdout's reader closed the pipe.
static STDOUT_CLOSED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Rust ignores SIGPIPE, so `println!` into a closed pipe panics; that panic is the
/// reader going away, not a bug: no message for it (SIGPIPE itself stays ignored, so a
/// closed object-store socket is an error, never a kill).
fn quiet_on_closed_stdout() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let p = info.payload();
        let msg = p
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| p.downcast_ref::<&str>().copied())
            .unwrap_or("");
        if msg.starts_with("failed printing to stdout") && msg.contains("Broken pipe") {
            STDOUT_CLOSED.store(true, std::sync::atomic::Ordering::Relaxed);
            return;
        }
        default(info);
    }));
}

/// The arguments of a command when it is `$v`.
macro_rules! as_variant {
    ($c:expr, $v:ident) => {
        match $c {
            Command::$v(a) => Some(a),
            _ => None,
        }
    };
}

fn main() -> ExitCode {
    // Large transient buffers (HTTP bodies of object-store parts and ranges) go to mmap
    // and back to the system when freed: glibc's sliding threshold would otherwise keep
    // them in per-thread arenas and let RSS drift past the buffer pool.
    pagevault::sys::set_mmap_threshold(1 << 20);
    // restore_command's status must never read "not archived" for a fault: a usage or
    // configuration error of archive-get stops recovery too.
    let getting = std::env::args_os().any(|a| a == "archive-get");
    let (matches, effective) = match config::parse(
        Cli::command().version(VERSION),
        std::env::args_os().collect(),
    ) {
        Ok(m) => m,
        Err(config::Failure::Usage(e)) if getting && e.use_stderr() => {
            let _ = e.print();
            return ExitCode::from(cmd::archive::GET_FATAL);
        }
        Err(config::Failure::Usage(e)) => e.exit(),
        Err(config::Failure::Config(e)) => {
            eprintln!("error: {e:#}");
            return ExitCode::from(if getting {
                cmd::archive::GET_FATAL
            } else {
                EXIT_USAGE
            });
        }
    };
    let mut cli = match Cli::from_arg_matches(&matches) {
        Ok(c) => c,
        Err(e) => e.exit(),
    };
    // Before the first file this run creates (the log file's).
    pagevault::sys::private_umask(cli.group_read);
    if let Err(e) = log::init(cli.log_format, cli.log_file.as_deref(), &effective.command) {
        eprintln!("error: {e:#}");
        return ExitCode::from(if getting {
            cmd::archive::GET_FATAL
        } else {
            EXIT_USAGE
        });
    }
    if cli.show_config {
        let json = config::wants_json(&effective);
        if json {
            cmd::print_json(&serde_json::to_value(&effective).unwrap_or_default());
        } else {
            config::print(&effective);
        }
        match &mut cli.command {
            Command::Backup(a) if !json => a.show_config = true,
            _ => return ExitCode::SUCCESS,
        }
    }
    // status reads the spool of the stanza's archive-push table (issue 53, item 7).
    if let (Command::Status(a), Some(st)) = (&mut cli.command, &effective.stanza) {
        if a.spool.is_none() {
            let file = effective.config_file.as_deref().map(std::path::Path::new);
            if let Ok(Some(sp)) = config::ConfigFile::archive_push_value(file, st, "spool") {
                a.spool = Some(sp.into());
            }
        }
    }
    let started = std::time::Instant::now();
    log::info(
        "started",
        serde_json::json!({ "stanza": effective.stanza, "config_file": effective.config_file }),
    );
    let getting = matches!(cli.command, Command::ArchiveGet(_));
    quiet_on_closed_stdout();
    // The server a restore, drill or check is for reads the key through restore_command:
    // a key file of its user is accepted too.
    let uid_of = |u: &str| pagevault::target::lookup_user(u).ok().map(|(uid, _)| uid);
    let server = match &cli.command {
        Command::Restore(a) => a.owner.as_deref().and_then(uid_of),
        Command::Sql(a) => a.owner.as_deref().and_then(uid_of),
        Command::Drill(a) if pagevault::sys::is_root() => {
            uid_of(a.owner.as_deref().unwrap_or("postgres"))
        }
        Command::Check(a) => {
            use std::os::unix::fs::MetadataExt;
            let (_, pgdata) = pagevault::source::postgres::connect::split_pgdata(&a.source);
            pgdata
                .and_then(|d| std::fs::metadata(d).ok())
                .map(|m| m.uid())
        }
        _ => None,
    };
    let store = store_of(&mut cli, &effective, server);
    // Each repository of the stanza opens with its own key and endpoint, if it has them.
    let repos = config::RepoOptions::new(&effective, server);
    // Several repositories and none picked: each, as --repo-index N runs it.
    let each = matches!(
        cli.command,
        Command::Expire(_) | Command::Check(_) | Command::Verify(_) | Command::Drill(_)
    ) && config::runs_each(&effective);
    let each = each.then(|| each_repository(&effective, server));
    let run = std::panic::AssertUnwindSafe(|| match (cli.command, each) {
        (Command::Expire(a), Some(l)) => {
            cmd::expire::run_each(a.json, pick(l, |c| as_variant!(c, Expire)))
        }
        (Command::Verify(a), Some(l)) => {
            cmd::restore::run_verify_each(a.read.json, pick(l, |c| as_variant!(c, Verify)))
        }
        (Command::Check(a), Some(l)) => {
            cmd::check::run_each(a.json, pick(l, |c| as_variant!(c, Check)), cli.s3_endpoint)
        }
        (Command::Drill(a), Some(l)) => cmd::drill::run_each(a, pick(l, |c| as_variant!(c, Drill))),
        // A key that does not load is one of its findings.
        (Command::Check(a), None) => cmd::check::run(a, store, cli.s3_endpoint.clone()),
        (command, _) => store.and_then(|store| match command {
            Command::Backup(a) => cmd::backup::run(a, &store),
            Command::Restore(a) => cmd::restore::run_restore(a, &store, &repos),
            Command::Verify(a) => cmd::restore::run_verify(a, &store),
            Command::Header(a) => cmd::info::run_header(a, &store),
            Command::Files(a) => cmd::info::run_files(a, &store),
            Command::ArchivePush(a) => cmd::archive::run_push(a, &store, &repos),
            Command::ArchiveGet(a) => cmd::archive::run_get(a, &store, &repos),
            Command::Init(a) => cmd::init::run(a, &store),
            Command::History(a) => cmd::history::run(a, &store),
            Command::Status(a) => cmd::status::run(a, &store, &repos),
            Command::Expire(a) => cmd::expire::run(a, &store),
            Command::Estimate(a) => cmd::estimate::run(a, &store),
            Command::Merge(a) => cmd::merge::run(a, &store),
            Command::Copy(a) => cmd::copy::run(a, &store, &repos),
            Command::Drill(a) => cmd::drill::run(a, &store),
            Command::Key(a) => cmd::key::run(a, &store),
            Command::Bench(a) => cmd::bench::run(a),
            Command::Tune(a) => cmd::tune::run(a, &store),
            Command::Sql(a) => cmd::sql::run(a, &store),
            Command::Demo(a) => cmd::demo::run(&a.dir, a.size_mb),
            Command::Generate(a) => cmd::generate::run(a, Cli::command().version(VERSION)),
            Command::RemoveSwept(a) => cmd::restore::run_remove_swept(a),
            Command::Check(_) => unreachable!("run above"),
        }),
    });
    let result = match std::panic::catch_unwind(run) {
        Ok(r) => r,
        // `pagevault files ... | head`: the reader went away; end as a process killed
        // by SIGPIPE would (128 + 13), destructors run, no panic message.
        Err(_) if STDOUT_CLOSED.load(std::sync::atomic::Ordering::Relaxed) => {
            return ExitCode::from(141)
        }
        Err(p) => std::panic::resume_unwind(p),
    };
    let (code, kind) = match &result {
        Ok(()) => (0, "ok"),
        Err(e) => exit_status(e, getting),
    };
    let mut fields = serde_json::json!({
        "exit_code": code,
        "kind": kind,
        "seconds": started.elapsed().as_secs_f64(),
    });
    match result {
        Ok(()) => log::info("finished", fields),
        Err(e) => {
            fields["stanza"] = serde_json::json!(effective.stanza);
            log::error(&format!("{e:#}"), fields)
        }
    }
    ExitCode::from(code)
}

/// The options the run's repository opens with: the key of --key-file or
/// --passphrase-file (a repository's own, when the file gives it) and --s3-endpoint.
fn store_of(
    cli: &mut Cli,
    effective: &config::Effective,
    server: Option<u32>,
) -> anyhow::Result<device::object::StoreOptions> {
    // PAGEVAULT_KEY_FILE is crypt::load's to read, with its rules: --passphrase-file
    // outranks it, and PAGEVAULT_PASSPHRASE beside it is refused.
    let from_env =
        (effective.settings.iter()).any(|s| s.option == "key-file" && s.origin.starts_with("env"));
    if from_env {
        cli.key_file = None;
    }
    let key = pagevault::crypt::load::key_source(
        cli.key_file.as_deref(),
        cli.passphrase_file.as_deref(),
        server,
    )
    .map_err(|e| match config::key_owner(effective) {
        Some(r) => e.context(format!("repository {} ({}): its key", r.label(), r.path)),
        None => e,
    })?;
    // No core dump, ptrace or /proc/PID/mem of the user may hold the key.
    if key.is_some() {
        pagevault::sys::not_dumpable().context("cannot make the process not dumpable")?;
    }
    Ok(device::object::StoreOptions {
        s3_endpoint: cli.s3_endpoint.clone(),
        key,
    })
}

/// Each repository of the stanza with the command and options `--repo-index N` gives:
/// its own settings, key and endpoint, resolved as for one repository.
fn each_repository(
    effective: &config::Effective,
    server: Option<u32>,
) -> Vec<cmd::each::EachRepo<Command>> {
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let at = argv.iter().position(|a| a == "--").unwrap_or(argv.len());
    (effective.repositories.iter())
        .map(|r| {
            let mut argv = argv.clone();
            argv.splice(at..at, ["--repo-index".into(), r.n.to_string().into()]);
            let run = match config::parse(Cli::command().version(VERSION), argv) {
                Ok((m, e)) => Cli::from_arg_matches(&m)
                    .map_err(|x| anyhow::anyhow!("{}", x.render()))
                    .map(|mut cli| {
                        let store = store_of(&mut cli, &e, server);
                        (cli.command, store)
                    }),
                Err(config::Failure::Usage(x)) => Err(anyhow::anyhow!("{}", x.render())),
                Err(config::Failure::Config(x)) => Err(x),
            };
            cmd::each::EachRepo {
                label: r.label(),
                name: r.name.clone(),
                path: r.path.clone(),
                run,
            }
        })
        .collect()
}

/// The arguments of one command out of each repository's.
fn pick<A>(
    list: Vec<cmd::each::EachRepo<Command>>,
    of: impl Fn(Command) -> Option<A>,
) -> Vec<cmd::each::EachRepo<A>> {
    (list.into_iter())
        .map(|e| cmd::each::EachRepo {
            label: e.label,
            name: e.name,
            path: e.path,
            run: e.run.and_then(|(c, store)| {
                let a = of(c).ok_or_else(|| anyhow::anyhow!("another command parsed"))?;
                Ok((a, store))
            }),
        })
        .collect()
}

/// A failed run's exit status and its kind, as docs/PROGRAMS.md lists them.
fn exit_status(e: &anyhow::Error, getting: bool) -> (u8, &'static str) {
    if let Some(x) = e.downcast_ref::<cmd::Exit>() {
        return (x.code, "fatal");
    }
    // A key that cannot be loaded is a fault, not a file missing from the archive.
    if getting {
        return match cmd::archive::get_status(e) {
            1 => (1, "not_archived"),
            c => (c, "fatal"),
        };
    }
    // As a shell reports a process ended by the signal: 128 + its number.
    if let Some(sig) = interrupt::received() {
        return (128 + sig as u8, "interrupted");
    }
    if pagevault::fault::is_transient(e) {
        return (EXIT_RETRY, "retry");
    }
    (EXIT_FATAL, "fatal")
}
