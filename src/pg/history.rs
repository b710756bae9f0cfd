//! Timeline history files (`TTTTTTTT.history`, PostgreSQL's timeline.c): which
//! timeline a WAL position belongs to, on the way to a target timeline.

use super::{format_lsn, parse_lsn};

/// One timeline of a history: WAL from `begin` up to `end` (the switch point where
/// the next timeline branched off; None for the target timeline itself).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    pub tli: u32,
    pub begin: u64,
    pub end: Option<u64>,
}

/// The history of `target`: its ancestors, oldest first, then `target` itself.
/// `text` is the content of `target`'s history file (None when there is none: a
/// timeline without ancestors). Lines are `PARENT_TLI<TAB>SWITCH_LSN<TAB>reason`;
/// blank lines and `#` comments are skipped, as PostgreSQL does.
pub fn parse(target: u32, text: Option<&str>) -> Result<Vec<Span>, String> {
    let mut out: Vec<Span> = vec![];
    let mut begin = 0u64;
    for (i, line) in text.unwrap_or("").lines().enumerate() {
        let line = line.trim_start();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut f = line
            .split(|c: char| c.is_ascii_whitespace())
            .filter(|s| !s.is_empty());
        let (Some(t), Some(l)) = (f.next(), f.next()) else {
            return Err(format!(
                "line {} is not 'TIMELINE<TAB>LSN<TAB>reason'",
                i + 1
            ));
        };
        let tli: u32 = t
            .parse()
            .map_err(|_| format!("line {}: '{t}' is not a timeline", i + 1))?;
        let end = parse_lsn(l).ok_or_else(|| format!("line {}: '{l}' is not an LSN", i + 1))?;
        if tli == 0 || tli >= target || out.last().is_some_and(|p| p.tli >= tli) {
            return Err(format!(
                "line {}: timeline {tli} is out of order (timelines rise, each below {target})",
                i + 1
            ));
        }
        if end < begin {
            return Err(format!(
                "line {}: switch point {} lies before the previous one {}",
                i + 1,
                format_lsn(end),
                format_lsn(begin)
            ));
        }
        out.push(Span {
            tli,
            begin,
            end: Some(end),
        });
        begin = end;
    }
    out.push(Span {
        tli: target,
        begin,
        end: None,
    });
    Ok(out)
}

/// The timeline recovery reads segment `segno` from: the newest one that had
/// begun by that segment (PostgreSQL's XLogFileReadAnyTLI). The segment holding a
/// switch point is read from the new timeline, which holds the old one's WAL up to it.
pub fn timeline_of_segment(spans: &[Span], segno: u64, seg_size: u64) -> u32 {
    spans
        .iter()
        .rev()
        .find(|s| s.begin / seg_size <= segno)
        .map_or(spans[0].tli, |s| s.tli)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEG: u64 = 16 << 20;

    #[test]
    fn parses_and_maps_segments() {
        let text = "1\t0/6000140\tno recovery target specified\n\n# note\n2\t0/9000000\tat restore point \"x\"\n";
        let h = parse(3, Some(text)).unwrap();
        assert_eq!(
            h,
            vec![
                Span {
                    tli: 1,
                    begin: 0,
                    end: Some(0x600_0140)
                },
                Span {
                    tli: 2,
                    begin: 0x600_0140,
                    end: Some(0x900_0000)
                },
                Span {
                    tli: 3,
                    begin: 0x900_0000,
                    end: None
                },
            ]
        );
        let at = |segno| timeline_of_segment(&h, segno, SEG);
        assert_eq!(
            (at(0), at(5), at(6), at(8), at(9), at(40)),
            (1, 1, 2, 2, 3, 3)
        );
        // With 1 MiB segments the switch at 0/6000140 lies in segment 0x60.
        assert_eq!(timeline_of_segment(&h, 0x5F, 1 << 20), 1);
        assert_eq!(timeline_of_segment(&h, 0x60, 1 << 20), 2);
        assert_eq!(
            parse(1, None).unwrap(),
            vec![Span {
                tli: 1,
                begin: 0,
                end: None
            }]
        );
        for bad in [
            "1\n",
            "x\t0/1\n",
            "1\tzz\n",
            "2\t0/1\n1\t0/2\n",
            "3\t0/1\n",
            "1\t0/5\n2\t0/4\n",
        ] {
            assert!(parse(3, Some(bad)).is_err(), "{bad:?}");
        }
    }
}
