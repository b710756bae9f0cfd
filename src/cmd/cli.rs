//! The command line's definitions: every command, option and help text. The binary
//! parses with them; man pages, completions and the reference pages are made from them.

use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

#[derive(Parser)]
#[command(
    name = "pagevault",
    version,
    about = "Back up and restore databases as fast as the storage allows",
    long_about = "pagevault backs up a database (a running PostgreSQL 14-18 cluster, SQLite, plain \
files) through a bounded pipeline (readers per volume, a pool of BUFFERCOUNT x MAXTRANSFERSIZE \
buffers, compression on every core, one writer per stripe) to disk files, NUL (a storage \
benchmark), S3, Azure Blob or Google Cloud Storage, and restores it at least as fast. PostgreSQL WAL is archived as log \
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
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// Endpoint of an S3-compatible server (MinIO ...) for s3:// devices and
    /// repositories; overrides AWS_ENDPOINT_URL. Plain http:// only to loopback.
    #[arg(long, global = true, value_name = "URL")]
    pub s3_endpoint: Option<String>,
    /// Create files 0640 and directories 0750 (PostgreSQL's group access) instead of
    /// the private default, 0600 and 0700: sets, catalog records, archived WAL,
    /// reports and restored files until their own modes are set.
    #[arg(long, global = true)]
    pub group_read: bool,
    /// The master key: a file of 32 random bytes, raw or base64 (`openssl rand -base64
    /// 32`), mode 0600. A backup or archive-push given a key encrypts (a backup with
    /// --sign signs instead); every command that reads an encrypted or signed set or
    /// repository needs it, and checks every frame's tag with it. Also
    /// PAGEVAULT_KEY_FILE. A stanza's repository may hold its own key-file or
    /// passphrase-file (docs/CONFIG.md); this option and the variables win for all.
    #[arg(long, global = true, value_name = "FILE")]
    pub key_file: Option<PathBuf>,
    /// A passphrase (the file's first line, mode 0600) instead of a key file, made a
    /// key with Argon2id. Also PAGEVAULT_PASSPHRASE (the passphrase itself).
    #[arg(long, global = true, value_name = "FILE")]
    pub passphrase_file: Option<PathBuf>,
    /// The configuration file: options at its top level and in [stanza.NAME] tables
    /// (docs/CONFIG.md). Default /etc/pagevault/pagevault.toml when it exists.
    #[arg(long, global = true, value_name = "FILE", env = "PAGEVAULT_CONFIG")]
    pub config: Option<PathBuf>,
    /// Take options from the configuration file's [stanza.NAME]: source, repo,
    /// compress ... (the command line and PAGEVAULT_* variables still win).
    #[arg(long, global = true, value_name = "NAME")]
    pub stanza: Option<String>,
    /// Print every option of the command, its effective value and where it came from
    /// (cli, env:VARIABLE, file:STANZA[.COMMAND], file:global, default), then stop; with the
    /// command's --json, as JSON. A backup in text goes on and also prints its buffer
    /// configuration.
    #[arg(long, global = true)]
    pub show_config: bool,
    /// Log events as text (warnings and errors on stderr) or as JSON, one object per
    /// line on stderr (ts, level, command, msg, fields).
    #[arg(long, global = true, value_enum, default_value = "text")]
    pub log_format: super::log::LogFormat,
    /// Also append every log event (start, end, warnings, errors) to FILE.
    #[arg(long, global = true, value_name = "FILE")]
    pub log_file: Option<PathBuf>,
}

#[derive(Subcommand)]
pub enum Command {
    /// Back up a source to one or more devices (several --to = striping).
    #[command(
        after_help = "Examples:\n  pagevault backup --source files:/data --to /bk/a.pv --to /bk/b.pv --compress lz4\n  pagevault backup --source 'postgres://postgres@127.0.0.1:5432/postgres?pgdata=/var/lib/postgresql/15/main' --repo /backup/repo --compress lz4\n  pagevault backup --stanza main --type incr --json\n  pagevault backup --source sqlite:app.db --to NUL --stats 10 --show-config"
    )]
    Backup(super::backup::BackupArgs),
    /// Restore a backup set into a directory, checking every frame and file.
    Restore(super::restore::RestoreArgs),
    /// Check a backup set as restore would, without writing anything (RESTORE VERIFYONLY).
    #[command(
        after_help = "Examples:\n  pagevault verify --from /bk/a.pv --from /bk/b.pv\n  pagevault verify --repo /backup/repo --json\n  pagevault verify --stanza main --set 1dcbcac392ec4823a7223de3303f3b99\n\nA set recorded in a versioned bucket (Object Lock) is read at the versions its backup wrote: a stripe, or a base's catalog record, overwritten or deleted since is a finding, named, and verify exits 1 though the set reads intact (`overwritten`, `records_overwritten` in --json).\n\nWith --repo, archived WAL segments whose records could not be decoded when pushed are listed (`damaged_wal`): one between the set's start and stop segments makes the set invalid (exit 1, named), since recovery cannot make it consistent; one after it is a warning (point-in-time recovery stops there)."
    )]
    Verify(super::restore::VerifyArgs),
    /// Show what a backup set is (RESTORE HEADERONLY).
    #[command(
        after_help = "Examples:\n  pagevault header --from /bk/a.pv\n  pagevault header --repo /backup/repo --json"
    )]
    Header(super::info::InfoArgs),
    /// List the files of a backup set (RESTORE FILELISTONLY).
    #[command(
        after_help = "Examples:\n  pagevault files --from /bk/a.pv\n  pagevault files --repo /backup/repo --json\n  pagevault files --repo /backup/repo --db-include app   # what restore --db-include app leaves out"
    )]
    Files(super::info::FilesArgs),
    /// Archive one WAL segment into a repository (PostgreSQL archive_command): a log backup.
    ArchivePush(super::archive::PushArgs),
    /// Fetch one WAL segment from a repository (PostgreSQL restore_command).
    ArchiveGet(super::archive::GetArgs),
    /// Make a repository: plain, encrypted or signed, and --immutable for a bucket with Object Lock (nothing ever overwritten).
    Init(super::init::InitArgs),
    /// List the backup sets a repository holds (msdb's backupset).
    #[command(
        after_help = "Examples:\n  pagevault history --repo /backup/repo\n  pagevault history --stanza main --json    # fields in docs/PROGRAMS.md"
    )]
    History(super::history::HistoryArgs),
    /// How fresh a repository's backups and WAL are: text, --json, --prometheus, or a Nagios check (--warn-age, --crit-age).
    #[command(
        after_help = "Examples:\n  pagevault status --repo /backup/repo\n  pagevault status --stanza main --json\n  pagevault status --repo /backup/repo --prometheus > /var/lib/node_exporter/pagevault.prom\n  pagevault status --repo /backup/repo --warn-age 26h --crit-age 2d   # Nagios: exit 0, 1, 2\n  pagevault status --repo s3://bucket/repo --spool /var/spool/pagevault\n\nAn archived WAL segment whose records could not be decoded when archive-push stored it (a bad record CRC: damaged in the server's storage) is named on a WARNING line (`damaged_wal` in --json, pagevault_damaged_wal_segments): a recovery replaying it stops there, so point-in-time recovery cannot pass it; check the server's storage and take a new full backup."
    )]
    Status(super::status::StatusArgs),
    /// Retention: remove old sets and WAL, keeping what --keep-full, --keep-within and --keep-daily/weekly/monthly name.
    Expire(super::expire::ExpireArgs),
    /// Prove backups and recovery will work: repository, key, server, archive_command, restore_command, free space.
    Check(super::check::CheckArgs),
    /// How much of the cluster changed since the newest full and newest set, from the WAL's block summaries alone.
    Estimate(super::estimate::EstimateArgs),
    /// Encryption and signing keys: `key rotate` rewraps an encrypted or signed repository's keys for a new key.
    #[command(
        after_help = "Examples:\n  pagevault key rotate --repo /backup/repo --old-key-file /etc/pagevault/old.key --new-key-file /etc/pagevault/new.key"
    )]
    Key(super::key::KeyArgs),
    /// Prove a restore works and measure it: restore into a scratch directory, replay the WAL, pg_amcheck, the visibility maps, your SQL; RTO and RPO recorded.
    Drill(super::drill::DrillArgs),
    /// Make one new full set of a chain (full, differentials, incrementals) from the sets alone: a synthetic full.
    Merge(super::merge::MergeArgs),
    /// Copy sets and their archived WAL into another repository, without the database: every frame checked on the way, a set recorded there only once whole.
    Copy(super::copy::CopyArgs),
    /// Run T-SQL BACKUP DATABASE and RESTORE DATABASE|VERIFYONLY|HEADERONLY|FILELISTONLY statements.
    Sql(super::sql::SqlArgs),
    /// Find the fastest buffer count, transfer size, readers, stripes, codec and threads on a sample of a source.
    Tune(super::tune::TuneArgs),
    /// Measure a storage with the I/O patterns of a database (log, data, backup, restore ...).
    Bench(super::bench::BenchArgs),
    /// Build a sample SQLite database, back it up to NUL and to two stripes, restore and verify it.
    #[command(
        after_help = "Examples:\n  pagevault demo\n  pagevault demo --dir /tmp/pv-demo --size-mb 256"
    )]
    Demo(DemoArgs),
    /// Write the man pages, shell completions or Markdown reference made from these
    /// definitions (packaging and docs).
    #[command(hide = true)]
    Generate(super::generate::GenerateArgs),
    /// Remove what a delta restore moved aside and left to this process (started by
    /// `restore --delta`).
    #[command(hide = true)]
    RemoveSwept(super::restore::RemoveSweptArgs),
}

#[derive(Args)]
pub struct DemoArgs {
    /// Working directory for the sample database, the stripes and the restore.
    #[arg(long, default_value = "pagevault-demo")]
    pub dir: PathBuf,
    /// Size of the sample database in MiB.
    #[arg(long, default_value_t = 300)]
    pub size_mb: u64,
}

/// `cmd` and every subcommand under it, at any depth, each changed by `f`.
pub fn map_commands(
    cmd: clap::Command,
    f: &impl Fn(clap::Command) -> clap::Command,
) -> clap::Command {
    let names: Vec<String> = (cmd.get_subcommands())
        .map(|s| s.get_name().to_string())
        .collect();
    let mut cmd = f(cmd);
    for n in names {
        cmd = cmd.mut_subcommand(n, |c| map_commands(c, f));
    }
    cmd
}
