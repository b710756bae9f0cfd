//! The code blocks of a Markdown page, the directives before them, and the `pagevault`
//! command lines in them.

/// How a page's block is taken (docs/guide/README.md tells the writers).
#[derive(Debug, Clone, PartialEq)]
pub enum Kind {
    /// ```sh: run, in order.
    Run,
    /// ```sh norun: not run; its pagevault lines are parsed.
    NoRun,
    /// `<!-- file: PATH -->` before a block: written to PATH.
    File(String),
    /// `<!-- append: PATH -->` before a block: appended to PATH.
    Append(String),
    /// `<!-- run: COMMAND -->`: a hidden step run where it stands.
    Hidden,
    /// Any other block (output, examples of other languages).
    Other,
}

#[derive(Debug, Clone)]
pub struct Block {
    pub kind: Kind,
    /// The line of the page the block starts on (1-based).
    pub line: usize,
    pub info: String,
    pub text: String,
}

fn directive<'a>(line: &'a str, name: &str) -> Option<&'a str> {
    let t = line.trim();
    let body = t.strip_prefix("<!--")?.strip_suffix("-->")?.trim();
    body.strip_prefix(name)?
        .strip_prefix(':')
        .map(str::trim)
        .filter(|s| !s.is_empty())
}

/// The blocks of `page`, in order.
pub fn blocks(page: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let mut pending: Option<Kind> = None;
    let mut lines = page.lines().enumerate();
    while let Some((i, line)) = lines.next() {
        if let Some(cmd) = directive(line, "run") {
            out.push(Block {
                kind: Kind::Hidden,
                line: i + 1,
                info: String::new(),
                text: cmd.to_string(),
            });
            continue;
        }
        if let Some(p) = directive(line, "file") {
            pending = Some(Kind::File(p.to_string()));
            continue;
        }
        if let Some(p) = directive(line, "append") {
            pending = Some(Kind::Append(p.to_string()));
            continue;
        }
        let Some(info) = line.trim_start().strip_prefix("```") else {
            if !line.trim().is_empty() {
                pending = None;
            }
            continue;
        };
        let info = info.trim().to_string();
        let mut text = String::new();
        for (_, l) in lines.by_ref() {
            if l.trim_start().starts_with("```") {
                break;
            }
            text.push_str(l);
            text.push('\n');
        }
        let words: Vec<&str> = info.split_whitespace().collect();
        let kind = match (pending.take(), words.as_slice()) {
            (Some(k), _) => k,
            (None, ["sh"]) | (None, ["bash"]) => Kind::Run,
            (None, ["sh" | "bash", "norun", ..]) => Kind::NoRun,
            _ => Kind::Other,
        };
        out.push(Block {
            kind,
            line: i + 1,
            info,
            text,
        });
    }
    out
}

/// The block's logical lines: `\` continuations joined, comments and blank lines dropped.
pub fn commands(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    for l in text.lines() {
        let t = l.trim();
        if cur.is_empty() && (t.is_empty() || t.starts_with('#')) {
            continue;
        }
        match t.strip_suffix('\\') {
            Some(head) => {
                cur.push_str(head);
                cur.push(' ');
            }
            None => {
                cur.push_str(t);
                out.push(std::mem::take(&mut cur));
            }
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// The arguments of each pagevault command in a logical line (after `sudo -u U`,
/// `VAR=value` prefixes, up to a shell operator or comment), `pagevault` first.
pub fn pagevault_calls(line: &str) -> Vec<Vec<String>> {
    let line = line.trim_start_matches("$ ");
    let Some(words) = shlex::split(line) else {
        return vec![vec!["<unbalanced quotes>".to_string(), line.to_string()]];
    };
    let mut calls = Vec::new();
    let mut cur: Option<Vec<String>> = None;
    for w in words {
        let op = matches!(w.as_str(), "|" | "||" | "&&" | ";" | "&")
            || w.starts_with('>')
            || w.starts_with("2>")
            || w.starts_with('<')
            || w.starts_with('#');
        if op {
            calls.extend(cur.take());
            continue;
        }
        match &mut cur {
            Some(c) => c.push(w),
            None if w == "pagevault" || w.ends_with("/bin/pagevault") => {
                cur = Some(vec!["pagevault".to_string()])
            }
            None => {}
        }
    }
    calls.extend(cur);
    calls
}

/// `text` with each path of the page's machine moved under a scratch directory. A prefix
/// is taken only as a whole path component (`/backup` in `/backup/x` and `files:/backup`, not in `s3://b/backups`).
pub fn map_paths(text: &str, map: &[(String, String)]) -> String {
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let b = text.as_bytes();
    'scan: while i < text.len() {
        for (from, to) in map {
            if !text[i..].starts_with(from.as_str()) {
                continue;
            }
            let before_ok = i == 0 || {
                let c = b[i - 1];
                !(c.is_ascii_alphanumeric() || b"/._-".contains(&c))
            };
            let after = text[i + from.len()..].bytes().next();
            let after_ok = from.ends_with('/')
                || after.is_none_or(|c| !(c.is_ascii_alphanumeric() || b"._-".contains(&c)));
            if before_ok && after_ok {
                out.push_str(to);
                i += from.len();
                continue 'scan;
            }
        }
        let ch = text[i..].chars().next().unwrap();
        out.push(ch);
        i += ch.len_utf8();
    }
    out
}
