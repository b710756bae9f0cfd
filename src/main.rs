//! pagevault's command line: parses the arguments and runs one command of the library.

use anyhow::Context;
use pagevault::{cmd, device, interrupt};

use clap::{Args, Parser, Subcommand};
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
    after_help = "Examples:\n  pagevault demo\n  pagevault backup --source sqlite:app.db --to NUL --stats 10\n  pagevault backup --source files:/data --to /bk/a.pv --to /bk/b.pv --compress zstd\n  pagevault verify --from /bk/a.pv --from /bk/b.pv\n  pagevault restore --from /bk/a.pv --from /bk/b.pv --to /restore"
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
}

#[derive(Subcommand)]
enum Command {
    /// Back up a source to one or more devices (several --to = striping).
    Backup(cmd::backup::BackupArgs),
    /// Restore a backup set into a directory, checking every frame and file.
    Restore(cmd::restore::RestoreArgs),
    /// Check a backup set as restore would, without writing anything (RESTORE VERIFYONLY).
    Verify(cmd::restore::VerifyArgs),
    /// Show what a backup set is (RESTORE HEADERONLY).
    Header(cmd::info::InfoArgs),
    /// List the files of a backup set (RESTORE FILELISTONLY).
    Files(cmd::info::InfoArgs),
    /// Archive one WAL segment into a repository (PostgreSQL archive_command): a log backup.
    ArchivePush(cmd::archive::PushArgs),
    /// Fetch one WAL segment from a repository (PostgreSQL restore_command).
    ArchiveGet(cmd::archive::GetArgs),
    /// Make a repository: plain, encrypted or signed, and --immutable for a bucket with Object Lock (nothing ever overwritten).
    Init(cmd::init::InitArgs),
    /// List the backup sets a repository holds (msdb's backupset).
    History(cmd::history::HistoryArgs),
    /// How fresh a repository's backups and WAL are: text, --json, --prometheus, or a Nagios check (--warn-age, --crit-age).
    Status(cmd::status::StatusArgs),
    /// Retention: remove old sets and WAL, keeping what --keep-full, --keep-within and --keep-daily/weekly/monthly name.
    Expire(cmd::expire::ExpireArgs),
    /// Prove backups and recovery will work: repository, key, server, archive_command, restore_command, free space.
    Check(cmd::check::CheckArgs),
    /// How much of the cluster changed since the newest full and newest set, from the WAL's block summaries alone.
    Estimate(cmd::estimate::EstimateArgs),
    /// Encryption and signing keys: `key rotate` rewraps an encrypted or signed repository's keys for a new key.
    Key(cmd::key::KeyArgs),
    /// Prove a restore works and measure it: restore into a scratch directory, replay the WAL, pg_amcheck, your SQL; RTO and RPO recorded.
    Drill(cmd::drill::DrillArgs),
    /// Make one new full set of a chain (full, differentials, incrementals) from the sets alone: a synthetic full.
    Merge(cmd::merge::MergeArgs),
    /// Run T-SQL BACKUP / RESTORE VERIFYONLY|HEADERONLY|FILELISTONLY statements against a source.
    Sql(cmd::sql::SqlArgs),
    /// Find the fastest buffer count, transfer size, readers, stripes, codec and threads on a sample of a source.
    Tune(cmd::tune::TuneArgs),
    /// Measure a storage with the I/O patterns of a database (log, data, backup, restore ...).
    Bench(cmd::bench::BenchArgs),
    /// Build a sample SQLite database, back it up to NUL and to two stripes, restore and verify it.
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
    // restore_command's status must never read "not archived" for a fault: a usage
    // error of archive-get stops recovery too.
    let getting = std::env::args_os().any(|a| a == "archive-get");
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if getting && e.use_stderr() => {
            let _ = e.print();
            return ExitCode::from(cmd::archive::GET_FATAL);
        }
        Err(e) => e.exit(),
    };
    let getting = matches!(cli.command, Command::ArchiveGet(_));
    pagevault::sys::private_umask(cli.group_read);
    quiet_on_closed_stdout();
    let key =
        pagevault::crypt::load::key_source(cli.key_file.as_deref(), cli.passphrase_file.as_deref())
            .and_then(|k| {
                // No core dump, ptrace or /proc/PID/mem of the user may hold the key.
                if k.is_some() {
                    pagevault::sys::not_dumpable()
                        .context("cannot make the process not dumpable")?;
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
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            if let Some(x) = e.downcast_ref::<cmd::Exit>() {
                return ExitCode::from(x.code);
            }
            // A key that cannot be loaded is a fault, not a file missing from the archive.
            if getting {
                return ExitCode::from(cmd::archive::get_status(&e));
            }
            // As a shell reports a process ended by the signal: 128 + its number.
            ExitCode::from(interrupt::received().map_or(1, |sig| 128 + sig as u8))
        }
    }
}
