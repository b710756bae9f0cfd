//! pagevault's command line: parses the arguments and runs one command of the library.

use anyhow::Context;
use pagevault::cmd::{config, log, EXIT_FATAL, EXIT_RETRY, EXIT_USAGE};
use pagevault::{cmd, device, interrupt};

use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "pagevault",
    version,
    about = "Back up and restore databases as fast as the storage allows",
    long_about = "pagevault backs up a database (a running PostgreSQL 14-18 cluster, SQLite, plain \
files) through a bounded pipeline (readers per volume, a pool of BUFFERCOUNT x MAXTRANSFERSIZE \
buffers, compression on every core, one writer per stripe) to disk files, NUL (a storage \
benchmark), S3 or Azure Blob, and restores it at least as fast. PostgreSQL WAL is archived as log \
backups (archive-push/archive-get) for point-in-time restores across timelines. Every frame, page \
and file is checksummed and checked on restore.",
    after_help = "Examples:\n  pagevault demo\n  pagevault backup --source sqlite:app.db --to NUL --stats 10\n  pagevault backup --source files:/data --to /bk/a.pv --to /bk/b.pv --compress zstd\n  pagevault verify --from /bk/a.pv --from /bk/b.pv\n  pagevault restore --from /bk/a.pv --from /bk/b.pv --to /restore\n  pagevault backup --stanza main --type incr    # [stanza.main] of the configuration file\n  pagevault backup --stanza main --show-config  # each value and its origin\n\n\
Every option is also read from PAGEVAULT_<OPTION> (--max-transfer-size: PAGEVAULT_MAX_TRANSFER_SIZE) and from \
the configuration file; the command line wins, then the environment, then the file, then the default.\n\n\
Exit status: 0 ok; 1 failed (damaged, refused, not found: fix it first); 2 usage or configuration \
error (nothing ran); 3 try again later (a store or server did not answer, a timeout); 128+N killed \
by signal N. archive-get: 1 not archived, 126 any fault. status --warn-age/--crit-age: Nagios's \
1 and 2. docs/PROGRAMS.md"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Endpoint of an S3-compatible server (MinIO ...) for s3:// devices and
    /// repositories; overrides AWS_ENDPOINT_URL. Plain http:// only to loopback.
    #[arg(long, global = true, value_name = "URL")]
    s3_endpoint: Option<String>,
    /// Create files 0640 and directories 0750 (PostgreSQL's group access) instead of
    /// the private default, 0600 and 0700: sets, catalog records, archived WAL,
    /// reports and restored files until their own modes are set.
    #[arg(long, global = true)]
    group_read: bool,
    /// The master key: a file of 32 random bytes, raw or base64 (`openssl rand -base64
    /// 32`), mode 0600. A backup or archive-push given a key encrypts (a backup with
    /// --sign signs instead); every command that reads an encrypted or signed set or
    /// repository needs it, and checks every frame's tag with it. Also
    /// PAGEVAULT_KEY_FILE.
    #[arg(long, global = true, value_name = "FILE")]
    key_file: Option<PathBuf>,
    /// A passphrase (the file's first line, mode 0600) instead of a key file, made a
    /// key with Argon2id. Also PAGEVAULT_PASSPHRASE (the passphrase itself).
    #[arg(long, global = true, value_name = "FILE")]
    passphrase_file: Option<PathBuf>,
    /// The configuration file: options at its top level and in [stanza.NAME] tables
    /// (docs/CONFIG.md). Default /etc/pagevault/pagevault.toml when it exists.
    #[arg(long, global = true, value_name = "FILE", env = "PAGEVAULT_CONFIG")]
    config: Option<PathBuf>,
    /// Take options from the configuration file's [stanza.NAME]: source, repo,
    /// compress ... (the command line and PAGEVAULT_* variables still win).
    #[arg(long, global = true, value_name = "NAME")]
    stanza: Option<String>,
    /// Print every option of the command, its effective value and where it came from
    /// (cli, env:VARIABLE, file:STANZA[.COMMAND], file:global, default), then stop; with the
    /// command's --json, as JSON. A backup in text goes on and also prints its buffer
    /// configuration.
    #[arg(long, global = true)]
    show_config: bool,
    /// Log events as text (warnings and errors on stderr) or as JSON, one object per
    /// line on stderr (ts, level, command, msg, fields).
    #[arg(long, global = true, value_enum, default_value = "text")]
    log_format: cmd::log::LogFormat,
    /// Also append every log event (start, end, warnings, errors) to FILE.
    #[arg(long, global = true, value_name = "FILE")]
    log_file: Option<PathBuf>,
}

#[derive(Subcommand)]
enum Command {
    /// Back up a source to one or more devices (several --to = striping).
    #[command(
        after_help = "Examples:\n  pagevault backup --source files:/data --to /bk/a.pv --to /bk/b.pv --compress lz4\n  pagevault backup --source 'postgres://postgres@127.0.0.1:5432/postgres?pgdata=/var/lib/postgresql/15/main' --repo /backup/repo --compress lz4\n  pagevault backup --stanza main --type incr --json\n  pagevault backup --source sqlite:app.db --to NUL --stats 10 --show-config"
    )]
    Backup(cmd::backup::BackupArgs),
    /// Restore a backup set into a directory, checking every frame and file.
    Restore(cmd::restore::RestoreArgs),
    /// Check a backup set as restore would, without writing anything (RESTORE VERIFYONLY).
    #[command(
        after_help = "Examples:\n  pagevault verify --from /bk/a.pv --from /bk/b.pv\n  pagevault verify --repo /backup/repo --json\n  pagevault verify --stanza main --set 1dcbcac392ec4823a7223de3303f3b99\n\nA set recorded in a versioned bucket (Object Lock) is read at the versions its backup wrote: a stripe, or a base's catalog record, overwritten or deleted since is a finding, named, and verify exits 1 though the set reads intact (`overwritten`, `records_overwritten` in --json).\n\nWith --repo, archived WAL segments whose records could not be decoded when pushed are listed (`damaged_wal`): one between the set's start and stop segments makes the set invalid (exit 1, named), since recovery cannot make it consistent; one after it is a warning (point-in-time recovery stops there)."
    )]
    Verify(cmd::restore::VerifyArgs),
    /// Show what a backup set is (RESTORE HEADERONLY).
    #[command(
        after_help = "Examples:\n  pagevault header --from /bk/a.pv\n  pagevault header --repo /backup/repo --json"
    )]
    Header(cmd::info::InfoArgs),
    /// List the files of a backup set (RESTORE FILELISTONLY).
    #[command(
        after_help = "Examples:\n  pagevault files --from /bk/a.pv\n  pagevault files --repo /backup/repo --json\n  pagevault files --repo /backup/repo --db-include app   # what restore --db-include app leaves out"
    )]
    Files(cmd::info::FilesArgs),
    /// Archive one WAL segment into a repository (PostgreSQL archive_command): a log backup.
    ArchivePush(cmd::archive::PushArgs),
    /// Fetch one WAL segment from a repository (PostgreSQL restore_command).
    ArchiveGet(cmd::archive::GetArgs),
    /// Make a repository: plain, encrypted or signed, and --immutable for a bucket with Object Lock (nothing ever overwritten).
    Init(cmd::init::InitArgs),
    /// List the backup sets a repository holds (msdb's backupset).
    #[command(
        after_help = "Examples:\n  pagevault history --repo /backup/repo\n  pagevault history --stanza main --json    # fields in docs/PROGRAMS.md"
    )]
    History(cmd::history::HistoryArgs),
    /// How fresh a repository's backups and WAL are: text, --json, --prometheus, or a Nagios check (--warn-age, --crit-age).
    #[command(
        after_help = "Examples:\n  pagevault status --repo /backup/repo\n  pagevault status --stanza main --json\n  pagevault status --repo /backup/repo --prometheus > /var/lib/node_exporter/pagevault.prom\n  pagevault status --repo /backup/repo --warn-age 26h --crit-age 2d   # Nagios: exit 0, 1, 2\n  pagevault status --repo s3://bucket/repo --spool /var/spool/pagevault\n\nAn archived WAL segment whose records could not be decoded when archive-push stored it (a bad record CRC: damaged in the server's storage) is named on a WARNING line (`damaged_wal` in --json, pagevault_damaged_wal_segments): a recovery replaying it stops there, so point-in-time recovery cannot pass it; check the server's storage and take a new full backup."
    )]
    Status(cmd::status::StatusArgs),
    /// Retention: remove old sets and WAL, keeping what --keep-full, --keep-within and --keep-daily/weekly/monthly name.
    Expire(cmd::expire::ExpireArgs),
    /// Prove backups and recovery will work: repository, key, server, archive_command, restore_command, free space.
    Check(cmd::check::CheckArgs),
    /// How much of the cluster changed since the newest full and newest set, from the WAL's block summaries alone.
    Estimate(cmd::estimate::EstimateArgs),
    /// Encryption and signing keys: `key rotate` rewraps an encrypted or signed repository's keys for a new key.
    #[command(
        after_help = "Examples:\n  pagevault key rotate --repo /backup/repo --old-key-file /etc/pagevault/old.key --new-key-file /etc/pagevault/new.key"
    )]
    Key(cmd::key::KeyArgs),
    /// Prove a restore works and measure it: restore into a scratch directory, replay the WAL, pg_amcheck, the visibility maps, your SQL; RTO and RPO recorded.
    Drill(cmd::drill::DrillArgs),
    /// Make one new full set of a chain (full, differentials, incrementals) from the sets alone: a synthetic full.
    Merge(cmd::merge::MergeArgs),
    /// Run T-SQL BACKUP DATABASE and RESTORE DATABASE|VERIFYONLY|HEADERONLY|FILELISTONLY statements.
    Sql(cmd::sql::SqlArgs),
    /// Find the fastest buffer count, transfer size, readers, stripes, codec and threads on a sample of a source.
    Tune(cmd::tune::TuneArgs),
    /// Measure a storage with the I/O patterns of a database (log, data, backup, restore ...).
    Bench(cmd::bench::BenchArgs),
    /// Build a sample SQLite database, back it up to NUL and to two stripes, restore and verify it.
    #[command(
        after_help = "Examples:\n  pagevault demo\n  pagevault demo --dir /tmp/pv-demo --size-mb 256"
    )]
    Demo(DemoArgs),
}

#[derive(Args)]
pub struct DemoArgs {
    /// Working directory for the sample database, the stripes and the restore.
    #[arg(long, default_value = "pagevault-demo")]
    dir: PathBuf,
    /// Size of the sample database in MiB.
    #[arg(long, default_value_t = 300)]
    size_mb: u64,
}

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

fn main() -> ExitCode {
    // Large transient buffers (HTTP bodies of object-store parts and ranges) go to mmap
    // and back to the system when freed: glibc's sliding threshold would otherwise keep
    // them in per-thread arenas and let RSS drift past the buffer pool.
    pagevault::sys::set_mmap_threshold(1 << 20);
    // restore_command's status must never read "not archived" for a fault: a usage or
    // configuration error of archive-get stops recovery too.
    let getting = std::env::args_os().any(|a| a == "archive-get");
    let (matches, effective) = match config::parse(Cli::command(), std::env::args_os().collect()) {
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
    // PAGEVAULT_KEY_FILE is crypt::load's to read, with its rules: --passphrase-file
    // outranks it, and PAGEVAULT_PASSPHRASE beside it is refused.
    let origin = |o: &str| {
        let s = effective.settings.iter().find(|s| s.option == o);
        s.map(|s| s.origin.as_str())
    };
    if origin("key-file").is_some_and(|o| o.starts_with("env")) {
        cli.key_file = None;
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
    let key = pagevault::crypt::load::key_source(
        cli.key_file.as_deref(),
        cli.passphrase_file.as_deref(),
        server,
    )
    .and_then(|k| {
        // No core dump, ptrace or /proc/PID/mem of the user may hold the key.
        if k.is_some() {
            pagevault::sys::not_dumpable().context("cannot make the process not dumpable")?;
        }
        Ok(k)
    });
    let store = key.map(|key| device::object::StoreOptions {
        s3_endpoint: cli.s3_endpoint.clone(),
        key,
    });
    let run = std::panic::AssertUnwindSafe(|| match cli.command {
        // A key that does not load is one of its findings.
        Command::Check(a) => cmd::check::run(a, store, cli.s3_endpoint.clone()),
        command => store.and_then(|store| match command {
            Command::Backup(a) => cmd::backup::run(a, &store),
            Command::Restore(a) => cmd::restore::run_restore(a, &store),
            Command::Verify(a) => cmd::restore::run_verify(a, &store),
            Command::Header(a) => cmd::info::run_header(a, &store),
            Command::Files(a) => cmd::info::run_files(a, &store),
            Command::ArchivePush(a) => cmd::archive::run_push(a, &store),
            Command::ArchiveGet(a) => cmd::archive::run_get(a, &store),
            Command::Init(a) => cmd::init::run(a, &store),
            Command::History(a) => cmd::history::run(a, &store),
            Command::Status(a) => cmd::status::run(a, &store),
            Command::Expire(a) => cmd::expire::run(a, &store),
            Command::Estimate(a) => cmd::estimate::run(a, &store),
            Command::Merge(a) => cmd::merge::run(a, &store),
            Command::Drill(a) => cmd::drill::run(a, &store),
            Command::Key(a) => cmd::key::run(a, &store),
            Command::Bench(a) => cmd::bench::run(a),
            Command::Tune(a) => cmd::tune::run(a, &store),
            Command::Sql(a) => cmd::sql::run(a, &store),
            Command::Demo(a) => cmd::demo::run(&a.dir, a.size_mb),
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
