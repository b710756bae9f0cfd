//! The T-SQL statements' tokens and the clauses BACKUP and RESTORE share: devices
//! (`DISK = '...'`, `URL = '...'`) and `WITH` options.

use anyhow::{anyhow, bail, Result};

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Tok {
    Word(String),
    Str(String),
    Num(u64),
    Eq,
    Comma,
    Semi,
    /// `MOVE 'logical' TO 'physical'`: made by the option parser, never by the tokenizer.
    Move(String, String),
}

pub(super) fn tokenize(s: &str) -> Result<Vec<Tok>> {
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

/// A device a statement names.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Dev {
    Disk(String),
    Url(String),
}

pub(super) struct P {
    pub(super) toks: Vec<Tok>,
    pub(super) at: usize,
}

impl P {
    pub(super) fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.at)
    }
    pub(super) fn next(&mut self) -> Option<Tok> {
        let t = self.toks.get(self.at).cloned();
        self.at += 1;
        t
    }
    pub(super) fn word(&mut self, w: &str) -> bool {
        if self.peek() == Some(&Tok::Word(w.into())) {
            self.at += 1;
            true
        } else {
            false
        }
    }
    pub(super) fn expect_word(&mut self, w: &str) -> Result<()> {
        if self.word(w) {
            Ok(())
        } else {
            bail!("expected {w}, found {}", self.show())
        }
    }
    pub(super) fn show(&self) -> String {
        match self.peek() {
            Some(Tok::Word(w)) => w.clone(),
            Some(Tok::Str(s)) => format!("'{s}'"),
            Some(Tok::Num(n)) => n.to_string(),
            Some(Tok::Eq) => "=".into(),
            Some(Tok::Comma) => ",".into(),
            Some(Tok::Semi) => ";".into(),
            Some(Tok::Move(a, b)) => format!("MOVE '{a}' TO '{b}'"),
            None => "the end of the statement".into(),
        }
    }
    /// `DISK = 'x' [, DISK = 'y' ...]` for BACKUP (URL and TAPE refused by name).
    pub(super) fn devices(&mut self) -> Result<Vec<String>> {
        self.sources("TO")?
            .into_iter()
            .map(|d| match d {
                Dev::Disk(s) => Ok(s),
                Dev::Url(_) => bail!("TO URL is not supported: use DISK = 'path' or DISK = 'NUL' (--repo records the set in a repository)"),
            })
            .collect()
    }
    /// `DISK = 'x' [, DISK = 'y' ...]` or `URL = 'x'` after `verb` (TO or FROM).
    pub(super) fn sources(&mut self, verb: &str) -> Result<Vec<Dev>> {
        let mut out = vec![];
        loop {
            let url = match self.next() {
                Some(Tok::Word(w)) if w == "DISK" => false,
                Some(Tok::Word(w)) if w == "URL" => true,
                Some(Tok::Word(w)) if w == "TAPE" => {
                    bail!("{verb} TAPE is not supported: use DISK = 'path'")
                }
                _ => bail!("expected DISK = 'path' or URL = 'repository' after {verb}"),
            };
            let what = if url { "URL" } else { "DISK" };
            if self.next() != Some(Tok::Eq) {
                bail!("expected = after {what}");
            }
            match self.next() {
                Some(Tok::Str(s)) if url => out.push(Dev::Url(s)),
                Some(Tok::Str(s)) => out.push(Dev::Disk(s)),
                _ => bail!("expected a quoted path after {what} ="),
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
    pub(super) fn options(&mut self) -> Result<Vec<(String, Option<Tok>)>> {
        let mut out = vec![];
        if !self.word("WITH") {
            return Ok(out);
        }
        loop {
            let Some(Tok::Word(name)) = self.next() else {
                bail!("expected an option name after WITH")
            };
            let value = if name == "MOVE" {
                let logical = match self.next() {
                    Some(Tok::Str(s)) => s,
                    _ => bail!("expected MOVE 'logical name' TO 'path'"),
                };
                self.expect_word("TO")?;
                match self.next() {
                    Some(Tok::Str(s)) => Some(Tok::Move(logical, s)),
                    _ => bail!("expected a quoted path after MOVE '{logical}' TO"),
                }
            } else if self.peek() == Some(&Tok::Eq) {
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
        let mut p = P {
            toks: tokenize("URL = 's3://b/r' WITH MOVE 'data' TO '/x', REPLACE").unwrap(),
            at: 0,
        };
        assert_eq!(p.sources("FROM").unwrap(), [Dev::Url("s3://b/r".into())]);
        let o = p.options().unwrap();
        assert_eq!(o[0].1, Some(Tok::Move("data".into(), "/x".into())));
        assert_eq!(o[1], ("REPLACE".to_string(), None));
    }
}
