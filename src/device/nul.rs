//! NUL: discards everything (SQL Server's `TO DISK = 'NUL'`), a storage benchmark.

use super::{Device, StripeSink, StripeSource};
use anyhow::{bail, Result};
use std::io;

pub struct Nul;

impl Device for Nul {
    fn describe(&self) -> String {
        "NUL".into()
    }
    fn is_discard(&self) -> bool {
        true
    }
    fn create(&self, _: &super::CreateHint) -> Result<Box<dyn StripeSink>> {
        Ok(Box::new(NulSink))
    }
    fn open(&self) -> Result<Box<dyn StripeSource>> {
        bail!("NUL keeps nothing: a backup to NUL cannot be restored or verified")
    }
    fn remove(&self) -> Result<()> {
        Ok(())
    }
}

struct NulSink;

impl StripeSink for NulSink {
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        std::hint::black_box(buf);
        Ok(())
    }
    fn commit(self: Box<Self>) -> Result<Option<String>> {
        Ok(None)
    }
    fn abort(self: Box<Self>) {}
}
