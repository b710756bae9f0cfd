//! The master key's source from the command line and the environment: `--key-file` or
//! `PAGEVAULT_KEY_FILE` (32 raw bytes, or their base64 as `openssl rand -base64 32`
//! writes it), `--passphrase-file` (its first line) or `PAGEVAULT_PASSPHRASE`. A key or
//! passphrase file that group or others may read, or that another user than root or
//! the effective one owns (it could swap the key), is refused.

use super::{KeySource, KEY_LEN};
use anyhow::{bail, Context, Result};
use base64::Engine;
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use zeroize::Zeroizing;

pub const KEY_FILE_ENV: &str = "PAGEVAULT_KEY_FILE";
pub const PASSPHRASE_ENV: &str = "PAGEVAULT_PASSPHRASE";

/// What to say when a set or repository is encrypted and no key was given.
pub const GIVE_KEY: &str =
    "give --key-file or --passphrase-file (or PAGEVAULT_KEY_FILE / PAGEVAULT_PASSPHRASE)";

/// Whether PAGEVAULT_KEY_FILE or PAGEVAULT_PASSPHRASE gives a key (they outrank a
/// configuration file's key-file and passphrase-file).
pub fn key_in_env() -> bool {
    [KEY_FILE_ENV, PASSPHRASE_ENV]
        .iter()
        .any(|v| std::env::var_os(v).is_some_and(|v| !v.is_empty()))
}

/// The key the options or, without them, the environment name; None when neither does.
/// `server`: the uid a restored server runs as (`--owner`), whose `restore_command`
/// reads the same file: a file of that user is accepted too.
pub fn key_source(
    key_file: Option<&Path>,
    passphrase_file: Option<&Path>,
    server: Option<u32>,
) -> Result<Option<KeySource>> {
    if key_file.is_some() && passphrase_file.is_some() {
        bail!("give either --key-file or --passphrase-file, not both");
    }
    if let Some(f) = key_file {
        return key_file_of(f, server).map(Some);
    }
    if let Some(f) = passphrase_file {
        return passphrase_file_of(f, server).map(Some);
    }
    let env_key = std::env::var_os(KEY_FILE_ENV).filter(|v| !v.is_empty());
    let env_phrase = std::env::var_os(PASSPHRASE_ENV).filter(|v| !v.is_empty());
    match (env_key, env_phrase) {
        (Some(_), Some(_)) => bail!("both {KEY_FILE_ENV} and {PASSPHRASE_ENV} are set: set one"),
        (Some(f), None) => key_file_of(Path::new(&f), server).map(Some),
        (None, Some(p)) => {
            use std::os::unix::ffi::OsStrExt;
            Ok(Some(KeySource::passphrase(
                p.as_bytes().to_vec(),
                PASSPHRASE_ENV,
            )))
        }
        (None, None) => Ok(None),
    }
}

/// At most this much is read of a key or passphrase file.
const FILE_MAX: u64 = 4096;

/// Reads a key or passphrase file: private to its owner, who is root, the effective
/// user or `server`.
fn read_private(path: &Path, what: &str, server: Option<u32>) -> Result<Zeroizing<Vec<u8>>> {
    let f = crate::sys::open_regular(path)
        .with_context(|| format!("cannot open {what} '{}'", path.display()))?;
    let meta = f.metadata()?;
    let mode = meta.mode() & 0o7777;
    if meta.mode() & 0o077 != 0 {
        bail!(
            "{what} '{}' may be read by group or others (mode {mode:04o}): chmod 600 it",
            path.display(),
        );
    }
    let uid = meta.uid();
    if !crate::sys::trusted_owner(uid) && server != Some(uid) {
        let owner = crate::sys::user_name(uid);
        bail!(
            "{what} '{p}' is owned by {owner} (uid {uid}, mode {mode:04o}), not by root or by the user running pagevault ({me}): its owner could swap the key; chown root '{p}', or run as {owner}",
            p = path.display(),
            me = crate::sys::effective_user_name(),
        );
    }
    let mut out = Zeroizing::new(Vec::new());
    f.take(FILE_MAX + 1).read_to_end(&mut out)?;
    if out.len() as u64 > FILE_MAX {
        bail!(
            "{what} '{}' is longer than {FILE_MAX} bytes",
            path.display()
        );
    }
    Ok(out)
}

/// A key file: exactly 32 bytes, or base64 of 32 bytes with trailing white space.
pub fn read_key_file(path: &Path) -> Result<KeySource> {
    key_file_of(path, None)
}

fn key_file_of(path: &Path, server: Option<u32>) -> Result<KeySource> {
    let bytes = read_private(path, "key file", server)?;
    let origin = format!("key file '{}'", path.display());
    Ok(KeySource::key(parse_key(&bytes).with_context(|| origin.clone())?, &origin).from_file(path))
}

fn parse_key(bytes: &[u8]) -> Result<[u8; KEY_LEN]> {
    if bytes.len() == KEY_LEN {
        return Ok(bytes.try_into().unwrap());
    }
    let text = bytes.trim_ascii();
    let decoded = Zeroizing::new(
        base64::engine::general_purpose::STANDARD
            .decode(text)
            .unwrap_or_default(),
    );
    match <[u8; KEY_LEN]>::try_from(&decoded[..]) {
        Ok(k) => Ok(k),
        Err(_) => bail!(
            "a key file holds 32 bytes, raw or in base64 (openssl rand -base64 32 > FILE); this one holds {} bytes",
            bytes.len()
        ),
    }
}

/// A passphrase file: its first line, without the line end.
pub fn read_passphrase_file(path: &Path) -> Result<KeySource> {
    passphrase_file_of(path, None)
}

fn passphrase_file_of(path: &Path, server: Option<u32>) -> Result<KeySource> {
    let bytes = read_private(path, "passphrase file", server)?;
    let line = bytes.split(|&b| b == b'\n').next().unwrap_or_default();
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    if line.is_empty() {
        bail!(
            "passphrase file '{}' has an empty first line",
            path.display()
        );
    }
    Ok(KeySource::passphrase(
        line.to_vec(),
        &format!("passphrase file '{}'", path.display()),
    )
    .from_file(path))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn write(dir: &Path, name: &str, bytes: &[u8], mode: u32) -> std::path::PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, bytes).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        p
    }

    #[test]
    fn key_files_raw_base64_and_private() {
        let d = tempfile::tempdir().unwrap();
        let raw = write(d.path(), "raw", &[7u8; 32], 0o600);
        let b64 = base64::engine::general_purpose::STANDARD.encode([7u8; 32]);
        let text = write(d.path(), "b64", format!("{b64}\n").as_bytes(), 0o400);
        let a = read_key_file(&raw).unwrap();
        assert_eq!(a, read_key_file(&text).unwrap());
        let open = write(d.path(), "open", &[7u8; 32], 0o640);
        let e = format!("{:#}", read_key_file(&open).unwrap_err());
        assert!(e.contains("group or others") && e.contains("0640"), "{e}");
        let short = write(d.path(), "short", b"c2hvcnQ=\n", 0o600);
        let e = format!("{:#}", read_key_file(&short).unwrap_err());
        assert!(e.contains("32 bytes"), "{e}");
        let p = write(d.path(), "p", b"secret words\nignored\n", 0o600);
        assert_eq!(
            read_passphrase_file(&p).unwrap(),
            KeySource::passphrase(b"secret words".to_vec(), "x")
        );
        assert!(key_source(Some(&raw), Some(&p), None).is_err());
    }

    #[test]
    fn key_files_of_another_user_are_refused() {
        if !crate::sys::is_root() {
            eprintln!("skipped: only root gives a file to another user");
            return;
        }
        let d = tempfile::tempdir().unwrap();
        let key = write(d.path(), "key", &[7u8; 32], 0o600);
        let phrase = write(d.path(), "phrase", b"secret words\n", 0o600);
        for f in [&key, &phrase] {
            std::os::unix::fs::chown(f, Some(4242), Some(4242)).unwrap();
        }
        for e in [
            read_key_file(&key).unwrap_err(),
            read_passphrase_file(&phrase).unwrap_err(),
            key_source(Some(&key), None, Some(4243)).unwrap_err(),
        ] {
            let e = format!("{e:#}");
            for w in [
                "is owned by uid 4242",
                "0600",
                "chown root",
                "run as uid 4242",
            ] {
                assert!(e.contains(w), "{w}: {e}");
            }
        }
        // The restored server's user (--owner) reads it through restore_command.
        assert!(key_source(Some(&key), None, Some(4242)).is_ok());
        assert!(key_source(None, Some(&phrase), Some(4242)).is_ok());
        for f in [&key, &phrase] {
            std::os::unix::fs::chown(f, Some(0), Some(0)).unwrap();
        }
        assert!(read_key_file(&key).is_ok() && read_passphrase_file(&phrase).is_ok());
    }
}
