//! The record the prefetch fetcher writes beside a segment it fetched and checked
//! (`NAME.checked`, before the segment is renamed into place): the size and BLAKE3 the
//! archive's header gives for NAME (authenticated in a keyed repository), which the
//! restored bytes matched, and the identity (device, inode) of the file that holds them.
//! archive-get checks a prefetched segment against it alone, with no request to the
//! store. Read as hostile input: at most [`MAX`] bytes, every line as written or refused.
//!
//! ```text
//! pagevault prefetched 1
//! name 000000010000000000000005
//! bytes 16777216
//! blake3 <64 lowercase hex digits>
//! file <device> <inode>
//! ```

use anyhow::{bail, Result};

/// The longest record read: longer is refused, not read.
pub const MAX: u64 = 256;
const MAGIC: &str = "pagevault prefetched 1";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checked {
    pub name: String,
    pub bytes: u64,
    pub blake3: [u8; 32],
    pub dev: u64,
    pub ino: u64,
}

impl Checked {
    pub fn encode(&self) -> String {
        format!(
            "{MAGIC}\nname {}\nbytes {}\nblake3 {}\nfile {} {}\n",
            self.name,
            self.bytes,
            hex::encode(self.blake3),
            self.dev,
            self.ino
        )
    }

    /// Parses the record of segment `name`; `Err` names what is wrong.
    pub fn decode(b: &[u8], name: &str) -> Result<Checked> {
        if b.len() as u64 > MAX {
            bail!("it is over {MAX} bytes");
        }
        let Ok(t) = std::str::from_utf8(b) else {
            bail!("it is not text");
        };
        let Some(body) = t.strip_suffix('\n') else {
            bail!("it is cut short");
        };
        let lines: Vec<&str> = body.split('\n').collect();
        let [magic, n, bytes, b3, file] = lines[..] else {
            bail!("it has {} lines, not 5", lines.len());
        };
        if magic != MAGIC {
            bail!("it does not start with '{MAGIC}'");
        }
        let field = |line: &str, key: &str| -> Result<String> {
            match line.strip_prefix(key).and_then(|r| r.strip_prefix(' ')) {
                Some(v) => Ok(v.to_string()),
                None => bail!("its line '{key} ...' is missing"),
            }
        };
        let got = field(n, "name")?;
        if got != name {
            bail!("it is the record of '{got}', not of {name}");
        }
        let num = |v: &str, what: &str| -> Result<u64> {
            if v.is_empty() || v.len() > 20 || !v.bytes().all(|c| c.is_ascii_digit()) {
                bail!("its {what} '{v}' is not a number");
            }
            v.parse()
                .map_err(|_| anyhow::anyhow!("its {what} '{v}' is too large"))
        };
        let bytes = num(&field(bytes, "bytes")?, "size")?;
        let most = crate::pg::max_file_size(crate::pg::Kind::Segment);
        if bytes > most {
            bail!("its size {bytes} is over the {most} a segment may hold");
        }
        let h = field(b3, "blake3")?;
        let ok_hex = h.len() == 64 && h.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'));
        let mut blake3 = [0u8; 32];
        if !ok_hex || hex::decode_to_slice(&h, &mut blake3).is_err() {
            bail!("its BLAKE3 is not 64 lowercase hex digits");
        }
        let f = field(file, "file")?;
        let Some((dev, ino)) = f.split_once(' ') else {
            bail!("its file line is not 'file DEVICE INODE'");
        };
        Ok(Checked {
            name: got,
            bytes,
            blake3,
            dev: num(dev, "device")?,
            ino: num(ino, "inode")?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEG: &str = "000000010000000000000005";

    fn rec() -> Checked {
        Checked {
            name: SEG.into(),
            bytes: 16 << 20,
            blake3: [0xab; 32],
            dev: 2049,
            ino: 1234567,
        }
    }

    #[test]
    fn a_record_reads_back_as_written() {
        let r = rec();
        assert_eq!(Checked::decode(r.encode().as_bytes(), SEG).unwrap(), r);
    }

    /// Anything but a record as written is refused, naming what is wrong.
    #[test]
    fn a_forged_or_damaged_record_is_refused() {
        let good = rec().encode();
        let other = "000000010000000000000006";
        let cases: Vec<(String, &str)> = vec![
            (good.replace(SEG, other), "not of"),
            (good.trim_end().to_string(), "cut short"),
            (
                good.replace("prefetched 1", "prefetched 2"),
                "does not start",
            ),
            (
                good.replace("bytes 16777216", "bytes 99999999999"),
                "over the",
            ),
            (good.replace("bytes 16777216", "bytes -1"), "not a number"),
            (good.replace("bytes 16777216", "bytes 0x10"), "not a number"),
            (good.replace(&"ab".repeat(32), &"AB".repeat(32)), "hex"),
            (good.replace(&"ab".repeat(32), "ab"), "hex"),
            (
                good.replace("file 2049 1234567", "file 2049"),
                "DEVICE INODE",
            ),
            (good.replace("file ", "fil "), "missing"),
            (format!("{good}extra\n"), "6 lines"),
            (format!("{good}{}", " ".repeat(300)), "over 256"),
        ];
        for (text, says) in cases {
            let e = Checked::decode(text.as_bytes(), SEG)
                .unwrap_err()
                .to_string();
            assert!(e.contains(says), "{text:?}: '{e}' lacks '{says}'");
        }
        assert!(Checked::decode(&[0xff, 0xfe, b'\n'], SEG).is_err());
    }
}
