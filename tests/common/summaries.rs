//! Stored block summaries rewritten by hand: what a repository of older rules holds, or
//! a forged one.
#![allow(dead_code)]

use pagevault::repo::wal::summary::Summary;
use std::path::Path;

/// Calls `f` on every block summary stored under `repo`/wal and writes back those it
/// changed (`f` returns true); returns how many it changed.
pub fn rewrite(repo: &Path, mut f: impl FnMut(&mut Summary) -> bool) -> usize {
    let mut n = 0;
    for d in std::fs::read_dir(repo.join("wal")).unwrap() {
        let d = d.unwrap().path();
        if !d.is_dir() {
            continue;
        }
        for p in std::fs::read_dir(&d).unwrap() {
            let p = p.unwrap().path();
            if p.extension().is_none_or(|e| e != "sum") {
                continue;
            }
            let mut sum = Summary::decode(&std::fs::read(&p).unwrap()).unwrap();
            if f(&mut sum) {
                std::fs::write(&p, sum.encode()).unwrap();
                n += 1;
            }
        }
    }
    n
}

/// Drops the visibility-map entries (fork 2) of every stored summary, which stay of
/// their rules: a backup trusting them keeps the older map. Returns the entries dropped.
pub fn strip_vm_marks(repo: &Path) -> usize {
    let mut dropped = 0;
    rewrite(repo, |s| {
        let before = s.rels.len();
        s.rels.retain(|k, _| k.fork != 2);
        dropped += before - s.rels.len();
        s.rels.len() != before
    });
    dropped
}
