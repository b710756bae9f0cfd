//! Sizes on the command line (`64K`, `1MiB`, `65536`) and MB as SQL Server counts them.

/// Parses SIZE: a whole number of bytes with an optional K/KiB/M/MiB/G/GiB suffix
/// (binary multiples, as SQL Server's MAXTRANSFERSIZE and BLOCKSIZE are).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let digits = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(digits);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("'{s}' is not a size (try 65536, 64K or 1MiB)"))?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        _ => {
            return Err(format!(
                "'{s}' has an unknown unit (use K, KiB, M, MiB, G or GiB)"
            ))
        }
    };
    n.checked_mul(mult)
        .ok_or_else(|| format!("'{s}' is too large"))
}

pub fn parse_in_range(s: &str, lo: u64, hi: u64, what: &str, pow2: bool) -> Result<u64, String> {
    let v = parse_size(s)?;
    if v < lo || v > hi {
        return Err(format!(
            "{what} {v} is out of range: allowed {} to {}",
            human(lo),
            human(hi)
        ));
    }
    if pow2 && !v.is_power_of_two() {
        return Err(format!(
            "{what} {v} must be a power of two ({} to {})",
            human(lo),
            human(hi)
        ));
    }
    Ok(v)
}

/// Bytes as a short human figure with binary units.
pub fn human(b: u64) -> String {
    const U: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut i = 0;
    while v >= 1024.0 && i < U.len() - 1 {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 || v.fract() == 0.0 {
        format!("{v:.0} {}", U[i])
    } else {
        format!("{v:.1} {}", U[i])
    }
}

/// MB/s with MB = 1,048,576 bytes, as SQL Server reports it.
pub fn mb_per_sec(bytes: u64, secs: f64) -> f64 {
    bytes as f64 / 1_048_576.0 / secs.max(1e-6)
}

/// A word for `sh -c`: as it is when it holds only characters the shell leaves alone,
/// else in single quotes (a quote inside written `'\''`).
pub fn sh_quote(s: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "/._-+:=@%,".contains(c);
    if !s.is_empty() && s.chars().all(plain) {
        return s.to_string();
    }
    format!("'{}'", s.replace('\'', "'\\''"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn shell_words_are_quoted_unless_plain() {
        assert_eq!(super::sh_quote("/backup/repo-1"), "/backup/repo-1");
        assert_eq!(super::sh_quote("/backup/my repo"), "'/backup/my repo'");
        assert_eq!(super::sh_quote("it's"), "'it'\\''s'");
        assert_eq!(super::sh_quote(""), "''");
    }

    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("65536"), Ok(65536));
        assert_eq!(parse_size("64K"), Ok(65536));
        assert_eq!(parse_size("64KiB"), Ok(65536));
        assert_eq!(parse_size("1M"), Ok(1 << 20));
        assert_eq!(parse_size("1MiB"), Ok(1 << 20));
        assert!(parse_size("1X").is_err());
        assert!(parse_size("-1").is_err());
        assert!(parse_in_range("32K", 64 << 10, 16 << 20, "transfer size", false).is_err());
        assert!(parse_in_range("768", 512, 1 << 20, "block size", true).is_err());
        assert_eq!(human(1536), "1.5 KiB");
    }
}
