//! `pagevault sql`: the T-SQL BACKUP / RESTORE statements DBAs already type, mapped
//! to a configured source. `TO DISK = 'NUL'` is the NUL device; several DISK clauses
//! stripe; WITH options map to the pipeline's settings.

use super::backup::Show;
use super::{info, restore};
use crate::device::object::StoreOptions;
use crate::engine::stats::Progress;
use crate::ops::backup::{self as ops, BackupOptions, BLOCK_SIZE, TRANSFER_SIZE};
use crate::ops::verify::{verify, ReadOptions, VerifyOptions};
use crate::set::read as set;
use anyhow::{anyhow, bail, Result};
use clap::Args;
use std::sync::Arc;

#[derive(Args)]
pub struct SqlArgs {
    /// The source the statements act on (BACKUP): files:PATH, sqlite:PATH or postgres://...
    #[arg(long)]
    pub source: Option<String>,
    /// PostgreSQL: the password is the first line of FILE (as for backup).
    #[arg(long, value_name = "FILE")]
    pub password_file: Option<std::path::PathBuf>,
    /// Repository for the catalog (BACKUP records the set there).
    #[arg(long)]
    pub repo: Option<String>,
    /// Statements, separated by ';' (or GO lines).
    pub statements: Vec<String>,
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Word(String),
    Str(String),
    Num(u64),
    Eq,
    Comma,
    Semi,
}

fn tokenize(s: &str) -> Result<Vec<Tok>> {
    let c: Vec<char> = s.chars().collect();
    let mut out = vec![];
    let mut i = 0;
    let word = |ch: char| ch.is_alphanumeric() || ch == '_' || ch == '@';
    while i < c.len() {
        match c[i] {
            ch if ch.is_whitespace() => i += 1,
            '=' => (out.push(Tok::Eq), i += 1).1,
            ',' => (out.push(Tok::Comma), i += 1).1,
            ';' => (out.push(Tok::Semi), i += 1).1,
            '-' if c.get(i + 1) == Some(&'-') => {
                while i < c.len() && c[i] != '\n' {
                    i += 1;
                }
            }
            '\'' | 'N' | 'n' if c[i] == '\'' || c.get(i + 1) == Some(&'\'') => {
                i += if c[i] == '\'' { 1 } else { 2 };
                let mut v = String::new();
                loop {
                    match c.get(i) {
                        Some('\'') if c.get(i + 1) == Some(&'\'') => (v.push('\''), i += 2).1,
                        Some('\'') => break i += 1,
                        Some(&ch) => (v.push(ch), i += 1).1,
                        None => bail!("unterminated string '{v}"),
                    }
                }
                out.push(Tok::Str(v));
            }
            '[' => {
                let end = c[i..]
                    .iter()
                    .position(|&ch| ch == ']')
                    .ok_or_else(|| anyhow!("unterminated [name]"))?;
                out.push(Tok::Word(c[i + 1..i + end].iter().collect()));
                i += end + 1;
            }
            ch if ch.is_ascii_digit() => {
                let start = i;
                while i < c.len() && c[i].is_ascii_digit() {
                    i += 1;
                }
                let n: String = c[start..i].iter().collect();
                out.push(Tok::Num(
                    n.parse().map_err(|_| anyhow!("number {n} is too large"))?,
                ));
            }
            ch if word(ch) => {
                let start = i;
                while i < c.len() && word(c[i]) {
                    i += 1;
                }
                out.push(Tok::Word(
                    c[start..i].iter().collect::<String>().to_ascii_uppercase(),
                ));
            }
            other => bail!("unexpected character '{other}'"),
        }
    }
    Ok(out)
}

struct P {
    toks: Vec<Tok>,
    at: usize,
}

impl P {
    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.at)
    }
    fn next(&mut self) -> Option<Tok> {
        let t = self.toks.get(self.at).cloned();
        self.at += 1;
        t
    }
    fn word(&mut self, w: &str) -> bool {
        if self.peek() == Some(&Tok::Word(w.into())) {
            self.at += 1;
            true
        } else {
            false
        }
    }
    fn expect_word(&mut self, w: &str) -> Result<()> {
        if self.word(w) {
            Ok(())
        } else {
            bail!("expected {w}, found {}", self.show())
        }
    }
    fn show(&self) -> String {
        match self.peek() {
            Some(Tok::Word(w)) => w.clone(),
            Some(Tok::Str(s)) => format!("'{s}'"),
            Some(Tok::Num(n)) => n.to_string(),
            Some(Tok::Eq) => "=".into(),
            Some(Tok::Comma) => ",".into(),
            Some(Tok::Semi) => ";".into(),
            None => "the end of the statement".into(),
        }
    }
    /// `DISK = 'x' [, DISK = 'y' ...]` (URL = is refused with a clear message).
    fn devices(&mut self) -> Result<Vec<String>> {
        let mut out = vec![];
        loop {
            match self.next() {
                Some(Tok::Word(w)) if w == "DISK" => {}
                Some(Tok::Word(w)) if w == "URL" || w == "TAPE" => {
                    bail!("TO {w} is not supported: use DISK = 'path' or DISK = 'NUL'")
                }
                _ => bail!("expected DISK = 'path'"),
            }
            if self.next() != Some(Tok::Eq) {
                bail!("expected = after DISK");
            }
            match self.next() {
                Some(Tok::Str(s)) => out.push(s),
                _ => bail!("expected a quoted path after DISK ="),
            }
            if self.peek() == Some(&Tok::Comma)
                && matches!(self.toks.get(self.at + 1), Some(Tok::Word(w)) if w == "DISK" || w == "URL" || w == "TAPE")
            {
                self.at += 1;
                continue;
            }
            return Ok(out);
        }
    }
    /// `WITH opt [= value], ...` as (NAME, value).
    fn options(&mut self) -> Result<Vec<(String, Option<Tok>)>> {
        let mut out = vec![];
        if !self.word("WITH") {
            return Ok(out);
        }
        loop {
            let Some(Tok::Word(name)) = self.next() else {
                bail!("expected an option name after WITH")
            };
            let value = if self.peek() == Some(&Tok::Eq) {
                self.at += 1;
                Some(
                    self.next()
                        .ok_or_else(|| anyhow!("expected a value for {name}"))?,
                )
            } else {
                None
            };
            out.push((name, value));
            if self.peek() == Some(&Tok::Comma) {
                self.at += 1;
                continue;
            }
            return Ok(out);
        }
    }
}

fn num(name: &str, v: &Option<Tok>) -> Result<u64> {
    match v {
        Some(Tok::Num(n)) => Ok(*n),
        _ => bail!("{name} needs a number, as in {name} = 64"),
    }
}

fn run_backup(p: &mut P, a: &SqlArgs, store: &StoreOptions) -> Result<()> {
    if p.word("LOG") {
        bail!("BACKUP LOG: log backups are continuous WAL archiving here; set archive_command = 'pagevault archive-push %p --repo DIR' (every archived segment is a log backup)");
    }
    p.expect_word("DATABASE")?;
    let Some(Tok::Word(_db)) = p.next() else {
        bail!("expected a database name after BACKUP DATABASE")
    };
    if p.word("FILEGROUP") || p.word("FILE") {
        bail!("FILEGROUP / FILE backups (one tablespace) are not supported yet: back up the whole database");
    }
    p.expect_word("TO")?;
    let to = p.devices()?;
    let source = a
        .source
        .clone()
        .ok_or_else(|| anyhow!("BACKUP needs --source (the database the statement names)"))?;
    let nul = to.iter().all(|d| d.eq_ignore_ascii_case("nul"));
    let mut b = BackupOptions {
        source,
        to,
        repo: if nul { None } else { a.repo.clone() },
        password_file: a.password_file.clone(),
        store: store.clone(),
        ..BackupOptions::default()
    };
    let mut show = Show::default();
    let mut unsupported = vec![];
    for (name, v) in p.options()? {
        match name.as_str() {
            "STATS" => {
                show.stats = Some(
                    v.as_ref()
                        .map(|_| num("STATS", &v))
                        .transpose()?
                        .unwrap_or(10)
                        .clamp(1, 100) as u32,
                )
            }
            "COMPRESSION" => {
                b.compress = match &v {
                    None => "zstd".into(),
                    Some(Tok::Word(alg)) if alg == "LZ4" => "lz4".into(),
                    Some(Tok::Word(alg)) if alg == "ZSTD" => "zstd".into(),
                    _ => bail!("COMPRESSION takes no value, or = LZ4 / ZSTD"),
                }
            }
            "NO_COMPRESSION" => b.compress = "none".into(),
            "BUFFERCOUNT" => b.buffer_count = Some(num(&name, &v)?.clamp(2, 65536) as u32),
            "MAXTRANSFERSIZE" => b.max_transfer_size = sized(&name, &v, &TRANSFER_SIZE)?,
            "BLOCKSIZE" => b.block_size = sized(&name, &v, &BLOCK_SIZE)?,
            "COPY_ONLY" => b.copy_only = true,
            "NAME" => match v {
                Some(Tok::Str(s)) => b.name = Some(s),
                _ => bail!("NAME needs a quoted text"),
            },
            "DIFFERENTIAL" => bail!("DIFFERENTIAL backups are not supported by this build yet"),
            // Always true here: every set is new, checksummed and self-describing.
            "INIT" | "FORMAT" | "SKIP" | "CHECKSUM" | "NOREWIND" | "NOUNLOAD" => {}
            other => unsupported.push(other.to_string()),
        }
    }
    if !unsupported.is_empty() {
        bail!("unsupported WITH option(s): {} (supported: STATS, COMPRESSION, NO_COMPRESSION, BUFFERCOUNT, MAXTRANSFERSIZE, BLOCKSIZE, COPY_ONLY, NAME, INIT, FORMAT, SKIP, CHECKSUM)", unsupported.join(", "));
    }
    if show.stats.is_none() {
        show.stats = Some(100);
    }
    let progress = Arc::new(Progress::default());
    let r = ops::backup(&b, &progress, &mut show.watch(&progress))?;
    show.print(&r)
}

/// MAXTRANSFERSIZE and BLOCKSIZE: bytes, checked by the backup's own rule.
fn sized(name: &str, v: &Option<Tok>, rule: &ops::SizeRule) -> Result<u64> {
    let n = num(name, v)?;
    if !rule.allows(n) {
        bail!("{name} = {n}: must be {}", rule.in_bytes());
    }
    Ok(n)
}

fn run_restore(p: &mut P, store: &StoreOptions) -> Result<()> {
    let kind = match p.next() {
        Some(Tok::Word(w))
            if ["VERIFYONLY", "HEADERONLY", "FILELISTONLY"].contains(&w.as_str()) =>
        {
            w
        }
        Some(Tok::Word(w)) if w == "DATABASE" || w == "LOG" => {
            bail!("RESTORE {w} from T-SQL is not supported: use `pagevault restore --from ... --to DIR` (or --repo with --until for a point in time)")
        }
        _ => bail!("expected VERIFYONLY, HEADERONLY or FILELISTONLY after RESTORE"),
    };
    p.expect_word("FROM")?;
    let from = p.devices()?;
    let opts = p.options()?;
    if let Some((o, _)) = opts.iter().find(|(o, _)| o != "STATS" && o != "CHECKSUM") {
        bail!("unsupported WITH option {o} for RESTORE {kind}");
    }
    match kind.as_str() {
        "VERIFYONLY" => {
            let o = VerifyOptions {
                read: ReadOptions {
                    from,
                    store: store.clone(),
                    ..ReadOptions::default()
                },
            };
            let r = verify(&o, &restore::shower(Some(100), false))?;
            restore::print_verify(&r, false);
            Ok(())
        }
        "HEADERONLY" => info::print_header(&set::describe(&from, store)?, false),
        _ => info::print_files(&set::describe(&from, store)?, false),
    }
}

pub fn run(a: SqlArgs, store: &StoreOptions) -> Result<()> {
    let text = a
        .statements
        .join(" ")
        .replace("\nGO\n", ";")
        .replace("\ngo\n", ";");
    let toks = tokenize(&text)?;
    let statements: Vec<Vec<Tok>> = toks
        .split(|t| *t == Tok::Semi)
        .filter(|s| !s.is_empty())
        .map(|s| s.to_vec())
        .collect();
    if statements.is_empty() {
        bail!("no statement given: try \"BACKUP DATABASE [db] TO DISK = 'NUL' WITH STATS = 10\"");
    }
    for st in statements {
        let mut p = P { toks: st, at: 0 };
        let r = match p.next() {
            Some(Tok::Word(w)) if w == "BACKUP" => run_backup(&mut p, &a, store),
            Some(Tok::Word(w)) if w == "RESTORE" => run_restore(&mut p, store),
            _ => Err(anyhow!("only BACKUP and RESTORE statements are understood")),
        };
        r?;
        if p.at < p.toks.len() {
            bail!("unexpected {} at the end of the statement", p.show());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens() {
        let t = tokenize(
            "BACKUP DATABASE [my db] TO DISK = N'a''b', DISK = 'NUL' WITH STATS = 10, COMPRESSION",
        )
        .unwrap();
        assert_eq!(t[2], Tok::Word("my db".into()));
        assert_eq!(t[6], Tok::Str("a'b".into()));
        assert!(t.contains(&Tok::Num(10)));
        assert_eq!(t.last(), Some(&Tok::Word("COMPRESSION".into())));
    }

    #[test]
    fn devices_and_options() {
        let mut p = P {
            toks: tokenize("DISK = 'a', DISK = 'b' WITH BUFFERCOUNT = 8, COPY_ONLY").unwrap(),
            at: 0,
        };
        assert_eq!(p.devices().unwrap(), ["a", "b"]);
        let o = p.options().unwrap();
        assert_eq!(o[0], ("BUFFERCOUNT".to_string(), Some(Tok::Num(8))));
        assert_eq!(o[1].0, "COPY_ONLY");
    }
}
