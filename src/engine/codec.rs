//! Compression codecs: none, lz4 (block), zstd (levels 1..22).

use crate::format::Codec;
use anyhow::{bail, Result};
use std::io;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CodecSpec {
    pub codec: Codec,
    pub level: i32,
}

impl CodecSpec {
    pub const NONE: CodecSpec = CodecSpec {
        codec: Codec::None,
        level: 0,
    };

    pub fn parse(s: &str) -> Result<CodecSpec> {
        let (name, level) = match s.split_once(':') {
            Some((n, l)) => (n, Some(l)),
            None => (s, None),
        };
        match (name.to_ascii_lowercase().as_str(), level) {
            ("none", None) => Ok(CodecSpec::NONE),
            ("lz4", None) => Ok(CodecSpec {
                codec: Codec::Lz4,
                level: 0,
            }),
            ("zstd", None) => Ok(CodecSpec {
                codec: Codec::Zstd,
                level: 3,
            }),
            ("zstd", Some(l)) => match l.parse::<i32>() {
                Ok(l) if (1..=22).contains(&l) => Ok(CodecSpec {
                    codec: Codec::Zstd,
                    level: l,
                }),
                _ => bail!("zstd level '{l}' must be a whole number from 1 to 22"),
            },
            _ => bail!("unknown codec '{s}': use none, lz4, zstd or zstd:LEVEL (1..22)"),
        }
    }

    pub fn describe(&self) -> String {
        match self.codec {
            Codec::Zstd => format!("zstd:{}", self.level),
            c => c.name().to_string(),
        }
    }

    /// The most bytes compressing `n` bytes can produce.
    pub fn bound(n: usize) -> usize {
        let lz4 = lz4::block::compress_bound(n).expect("frames are far below lz4's 2 GB limit");
        zstd::zstd_safe::compress_bound(n).max(lz4)
    }
}

/// One per compressor thread: keeps its zstd context between frames.
pub struct Compressor {
    spec: CodecSpec,
    zstd: Option<ZstdContext>,
}

impl Compressor {
    pub fn new(spec: CodecSpec) -> io::Result<Compressor> {
        let zstd = match spec.codec {
            Codec::Zstd => Some(ZstdContext::new(spec.level)?),
            _ => None,
        };
        Ok(Compressor { spec, zstd })
    }

    /// Compresses into `dst`; returns the stored length.
    pub fn compress(&mut self, src: &[u8], dst: &mut [u8]) -> io::Result<usize> {
        match self.spec.codec {
            Codec::None => unreachable!("no compressor for codec none"),
            Codec::Lz4 => lz4::block::compress_to_buffer(src, None, false, dst),
            Codec::Zstd => self.zstd.as_mut().unwrap().compress(src, dst),
        }
    }
}

/// A zstd compression context at one level, without zstd 1.5.7's pre-block splitter:
/// on by default from level 3, it costs CPU on every block and makes PostgreSQL pages
/// no smaller (bench/README.md, the splitter row); libzstd before 1.5.7 (pgBackRest's) has
/// none. The `zstd` crate does not reach that parameter, so this calls libzstd itself.
struct ZstdContext(std::ptr::NonNull<zstd_sys::ZSTD_CCtx>);

// SAFETY: a ZSTD_CCtx has no ties to the thread that made it; `&mut self` on every
// use keeps it to one thread at a time.
unsafe impl Send for ZstdContext {}

impl ZstdContext {
    fn new(level: i32) -> io::Result<ZstdContext> {
        // SAFETY: ZSTD_createCCtx takes no arguments; a null return (no memory) is checked.
        let ctx = std::ptr::NonNull::new(unsafe { zstd_sys::ZSTD_createCCtx() })
            .map(ZstdContext)
            .ok_or_else(|| io::Error::other("zstd: cannot make a compression context"))?;
        use zstd_sys::ZSTD_cParameter::{
            ZSTD_c_compressionLevel, ZSTD_c_experimentalParam20 as ZSTD_c_blockSplitterLevel,
        };
        // Splitter level 1 is "no splitting" (zstd.h, ZSTD_c_blockSplitterLevel, which
        // zstd-sys names only by its number: the test checks it is that parameter).
        for (param, value) in [
            (ZSTD_c_compressionLevel, level),
            (ZSTD_c_blockSplitterLevel, 1),
        ] {
            // SAFETY: the context is live and owned here.
            check(unsafe { zstd_sys::ZSTD_CCtx_setParameter(ctx.0.as_ptr(), param, value) })?;
        }
        Ok(ctx)
    }

    /// One whole zstd frame of `src` (its size named) into `dst`; returns its length.
    fn compress(&mut self, src: &[u8], dst: &mut [u8]) -> io::Result<usize> {
        // SAFETY: the context is live and ours alone; both slices are valid for their
        // lengths, and zstd writes no more than `dst.len()` bytes.
        check(unsafe {
            zstd_sys::ZSTD_compress2(
                self.0.as_ptr(),
                dst.as_mut_ptr().cast(),
                dst.len(),
                src.as_ptr().cast(),
                src.len(),
            )
        })
    }
}

#[cfg(test)]
impl ZstdContext {
    fn parameter(&self, param: zstd_sys::ZSTD_cParameter) -> i32 {
        let mut value = -1;
        // SAFETY: the context is live; zstd writes one int.
        check(unsafe { zstd_sys::ZSTD_CCtx_getParameter(self.0.as_ptr(), param, &mut value) })
            .unwrap();
        value
    }
}

impl Drop for ZstdContext {
    fn drop(&mut self) {
        // SAFETY: made by ZSTD_createCCtx and freed once, here.
        unsafe { zstd_sys::ZSTD_freeCCtx(self.0.as_ptr()) };
    }
}

/// A libzstd return code as a length or an error naming zstd's reason.
fn check(code: usize) -> io::Result<usize> {
    // SAFETY: ZSTD_isError only compares the number.
    if unsafe { zstd_sys::ZSTD_isError(code) } == 0 {
        return Ok(code);
    }
    let why = zstd::zstd_safe::get_error_name(code);
    Err(io::Error::other(format!("zstd: {why}")))
}

pub struct Decompressor {
    zstd: zstd::bulk::Decompressor<'static>,
}

impl Decompressor {
    pub fn new() -> io::Result<Decompressor> {
        Ok(Decompressor {
            zstd: zstd::bulk::Decompressor::new()?,
        })
    }

    /// Decompresses into `dst`; returns the raw length.
    pub fn decompress(&mut self, codec: Codec, src: &[u8], dst: &mut [u8]) -> io::Result<usize> {
        match codec {
            // Restore and verify use uncompressed stored bytes where they lie.
            Codec::None => unreachable!("no decompressor for codec none"),
            // liblz4 (LZ4_decompress_safe): 6x lz4_flex on pgbench pages, whose long
            // runs of one byte lz4_flex copies byte by byte.
            Codec::Lz4 => {
                let cap = i32::try_from(dst.len()).unwrap_or(i32::MAX);
                lz4::block::decompress_to_buffer(src, Some(cap), dst)
            }
            Codec::Zstd => self.zstd.decompress_to_buffer(src, dst),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_specs() {
        assert_eq!(CodecSpec::parse("zstd:7").unwrap().level, 7);
        assert_eq!(CodecSpec::parse("LZ4").unwrap().codec, Codec::Lz4);
        assert!(CodecSpec::parse("zstd:0").is_err());
        assert!(CodecSpec::parse("gzip").is_err());
        assert!(CodecSpec::parse("lz4:3").is_err());
    }

    #[test]
    fn zstd_frames_name_their_size_and_are_made_without_the_pre_block_splitter() {
        use zstd_sys::ZSTD_cParameter::*;
        let mut z = ZstdContext::new(3).unwrap();
        assert_eq!(z.parameter(ZSTD_c_compressionLevel), 3);
        assert_eq!(z.parameter(ZSTD_c_experimentalParam20), 1, "splitter off");
        // The parameter of that number is the splitter's: levels 0 (auto) to 6.
        // SAFETY: a pure query of the library.
        let b = unsafe { zstd_sys::ZSTD_cParam_getBounds(ZSTD_c_experimentalParam20) };
        assert_eq!((b.error, b.lowerBound, b.upperBound), (0, 0, 6));
        // A page-like input: runs of one byte and counters, as heap pages hold.
        let src: Vec<u8> = (0..(1u32 << 20))
            .map(|i| if i % 8192 < 6000 { b' ' } else { (i / 7) as u8 })
            .collect();
        let mut packed = vec![0; CodecSpec::bound(src.len())];
        let n = z.compress(&src, &mut packed).unwrap();
        assert!(n < src.len() / 4);
        assert_eq!(
            crate::format::zstd_exact(&packed[..n], src.len() as u64).unwrap(),
            src
        );
        // Too little room is zstd's error, named, not a short frame.
        let e = z.compress(&src, &mut packed[..n / 2]).unwrap_err();
        assert!(e.to_string().starts_with("zstd: "), "{e}");
        assert!(e.to_string().contains("too small"), "{e}");
    }

    #[test]
    fn round_trip_each_codec() {
        let src: Vec<u8> = (0..100_000u32)
            .flat_map(|i| (i % 251).to_le_bytes())
            .collect();
        for spec in ["lz4", "zstd:1", "zstd:19"] {
            let spec = CodecSpec::parse(spec).unwrap();
            let mut c = Compressor::new(spec).unwrap();
            let mut packed = vec![0; CodecSpec::bound(src.len())];
            let n = c.compress(&src, &mut packed).unwrap();
            assert!(n < src.len() / 2);
            let mut out = vec![0; src.len()];
            let m = Decompressor::new()
                .unwrap()
                .decompress(spec.codec, &packed[..n], &mut out)
                .unwrap();
            assert_eq!(&out[..m], &src[..]);
        }
    }

    #[test]
    fn damaged_lz4_is_an_error() {
        // Long runs of one byte, as pgbench pages hold: lz4's overlapping matches.
        let src: Vec<u8> = (0..1 << 20)
            .map(|i| if i % 8192 < 7000 { b' ' } else { i as u8 })
            .collect();
        let mut c = Compressor::new(CodecSpec::parse("lz4").unwrap()).unwrap();
        let mut packed = vec![0; CodecSpec::bound(src.len())];
        let n = c.compress(&src, &mut packed).unwrap();
        let mut d = Decompressor::new().unwrap();
        let mut out = vec![0; src.len()];
        assert_eq!(
            d.decompress(Codec::Lz4, &packed[..n], &mut out).unwrap(),
            src.len()
        );
        assert_eq!(out, src);
        // Cut short, or with a match offset pointing before the start: refused, not read.
        assert!(d
            .decompress(Codec::Lz4, &packed[..n / 2], &mut out)
            .is_err());
        let bad = [0x1f, b'x', 0xff, 0xff, 0x00];
        assert!(d.decompress(Codec::Lz4, &bad, &mut out).is_err());
        // Room for less than it holds: refused.
        assert!(d
            .decompress(Codec::Lz4, &packed[..n], &mut out[..1000])
            .is_err());
    }
}
