//! libpq's password file (`PGPASSFILE`, else `~/.pgpass`): lines of
//! `hostname:port:database:username:password`. A field of `*` alone matches anything,
//! `\` escapes the next character (`\:`, `\\`), lines starting with `#` are comments, and
//! the first matching line wins. Reading the file, and refusing one others can read, is
//! the caller's.

/// What a connection looks its password up by, as libpq does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Key {
    /// The host, or `localhost` for none or a socket in a default directory ([`host_key`]).
    pub host: String,
    /// The port as a number (libpq's default 5432 when none is given).
    pub port: String,
    /// The database (libpq's default: the user's name).
    pub database: String,
    pub user: String,
}

/// Socket directories that libpq builds use by default (upstream, Debian, Red Hat).
const DEFAULT_SOCKET_DIRS: &[&str] = &["/tmp", "/var/run/postgresql", "/run/postgresql"];

/// libpq's host key: `localhost` for no host or a socket in the default directory; a
/// socket elsewhere is looked up by its directory.
pub fn host_key(host: &str) -> &str {
    if host.is_empty() || DEFAULT_SOCKET_DIRS.contains(&host.trim_end_matches('/')) {
        "localhost"
    } else {
        host
    }
}

/// The password of the first line of `text` that matches `key`, de-escaped (libpq's
/// `passwordFromFile`). A key with no database or user matches nothing.
pub fn lookup(text: &[u8], key: &Key) -> Option<Vec<u8>> {
    if key.database.is_empty() || key.user.is_empty() {
        return None;
    }
    let fields = [&key.host, &key.port, &key.database, &key.user];
    text.split(|&b| b == b'\n')
        // libpq strips every trailing CR and LF.
        .map(|l| &l[..l.iter().rposition(|&b| b != b'\r').map_or(0, |p| p + 1)])
        .filter(|l| !l.is_empty() && !l.starts_with(b"#"))
        .find_map(|line| {
            let rest = fields
                .iter()
                .try_fold(line, |rest, f| field(rest, f.as_bytes()))?;
            Some(password(rest))
        })
}

/// What follows the field at the start of `line` when it matches `token`: `*` alone
/// matches anything; else the field, with `\` escapes, must equal `token`.
fn field<'a>(line: &'a [u8], token: &[u8]) -> Option<&'a [u8]> {
    if let Some(rest) = line.strip_prefix(b"*:") {
        return Some(rest);
    }
    let mut want = token.iter();
    let mut i = 0;
    loop {
        let mut c = *line.get(i)?;
        let escaped = c == b'\\';
        if escaped {
            i += 1;
            c = *line.get(i)?;
        }
        match want.next() {
            None if c == b':' && !escaped => return Some(&line[i + 1..]),
            // An unescaped ':' still matches a ':' of the token (libpq's rule).
            Some(&w) if w == c => i += 1,
            _ => return None,
        }
    }
}

/// The password field: up to an unescaped ':' or the end, escapes removed (a lone
/// trailing `\` is kept).
fn password(rest: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(rest.len());
    let mut i = 0;
    while i < rest.len() && rest[i] != b':' {
        if rest[i] == b'\\' && i + 1 < rest.len() {
            i += 1;
        }
        out.push(rest[i]);
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(host: &str, port: &str, database: &str, user: &str) -> Key {
        Key {
            host: host.into(),
            port: port.into(),
            database: database.into(),
            user: user.into(),
        }
    }

    fn find(text: &str, k: &Key) -> Option<String> {
        lookup(text.as_bytes(), k).map(|p| String::from_utf8(p).unwrap())
    }

    #[test]
    fn exact_fields_match() {
        let k = key("db.example", "5433", "app", "alice");
        assert_eq!(
            find("db.example:5433:app:alice:pw1\n", &k).as_deref(),
            Some("pw1")
        );
        // No trailing newline, CRLF endings.
        assert_eq!(
            find("db.example:5433:app:alice:pw1", &k).as_deref(),
            Some("pw1")
        );
        assert_eq!(
            find("db.example:5433:app:alice:pw1\r\n", &k).as_deref(),
            Some("pw1")
        );
        assert_eq!(
            find("db.example:5433:app:alice:pw1\r\r\n", &k).as_deref(),
            Some("pw1")
        );
        // Any field different: no match.
        for line in [
            "other:5433:app:alice:x",
            "db.example:5432:app:alice:x",
            "db.example:5433:ap:alice:x",
            "db.example:5433:app:alic:x",
            "db.example:5433:app:alicee:x",
            "db.example:5433:app",
            "db.example:5433:app:alice",
        ] {
            assert_eq!(find(line, &k), None, "{line}");
        }
    }

    #[test]
    fn wildcards_match_any_value() {
        let k = key("db.example", "5433", "app", "alice");
        assert_eq!(find("*:*:*:*:any", &k).as_deref(), Some("any"));
        assert_eq!(find("db.example:*:app:*:some", &k).as_deref(), Some("some"));
        // '*' is a wildcard only as the whole field.
        assert_eq!(find("db*:5433:app:alice:x", &k), None);
        assert_eq!(find("*db.example:5433:app:alice:x", &k), None);
        // An escaped '*' is a literal star.
        let star = key("*", "5432", "d", "u");
        assert_eq!(find("\\*:5432:d:u:lit", &star).as_deref(), Some("lit"));
        assert_eq!(find("\\*:5432:d:u:lit", &k), None);
    }

    #[test]
    fn escapes_in_fields_and_password() {
        // A ':' in a field (an IPv6 host) and a '\' in a user name.
        let k = key("::1", "5432", "app", "dom\\bob");
        assert_eq!(
            find("\\:\\:1:5432:app:dom\\\\bob:p", &k).as_deref(),
            Some("p")
        );
        // libpq also lets an unescaped ':' match a ':' of the value.
        assert_eq!(find("::1:5432:app:dom\\\\bob:q", &k).as_deref(), Some("q"));
        // The password: escapes removed, ends at an unescaped ':'.
        let k = key("h", "1", "d", "u");
        assert_eq!(find("h:1:d:u:a\\:b\\\\c", &k).as_deref(), Some("a:b\\c"));
        assert_eq!(find("h:1:d:u:abc:ignored", &k).as_deref(), Some("abc"));
        assert_eq!(find("h:1:d:u:ends\\", &k).as_deref(), Some("ends\\"));
        assert_eq!(find("h:1:d:u:", &k).as_deref(), Some(""));
        // A field ending in a lone backslash matches nothing.
        assert_eq!(find("h\\", &k), None);
    }

    #[test]
    fn first_match_wins_comments_and_blank_lines_skipped() {
        let k = key("h", "5432", "d", "u");
        let text = "# h:5432:d:u:commented\n\
                    \n\
                    other:5432:d:u:no\n\
                    h:5432:d:u:first\n\
                    *:*:*:*:second\n";
        assert_eq!(find(text, &k).as_deref(), Some("first"));
        // The catch-all wins when it comes first.
        let text = "*:*:*:*:all\nh:5432:d:u:specific\n";
        assert_eq!(find(text, &k).as_deref(), Some("all"));
        // '#' only at the start of a line makes a comment.
        assert_eq!(find("h:5432:d:u:#x", &k).as_deref(), Some("#x"));
        assert_eq!(find(" #h:5432:d:u:x", &k), None);
    }

    #[test]
    fn empty_database_or_user_matches_nothing() {
        assert_eq!(find("*:*:*:*:x", &key("h", "1", "", "u")), None);
        assert_eq!(find("*:*:*:*:x", &key("h", "1", "d", "")), None);
    }

    #[test]
    fn host_keys_as_libpq() {
        assert_eq!(host_key(""), "localhost");
        assert_eq!(host_key("/var/run/postgresql"), "localhost");
        assert_eq!(host_key("/tmp"), "localhost");
        assert_eq!(host_key("/srv/pg/sock"), "/srv/pg/sock");
        assert_eq!(host_key("127.0.0.1"), "127.0.0.1");
    }

    #[test]
    fn bytes_that_are_not_utf8_pass_through() {
        let k = key("h", "1", "d", "u");
        assert_eq!(lookup(b"h:1:d:u:\xff\xfe", &k), Some(vec![0xff, 0xfe]));
    }
}
