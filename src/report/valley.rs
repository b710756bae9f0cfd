//! The valley: the deepest dip in read throughput and its likely causes.

use super::series::{IoSeries, Series};
use crate::units::human;
use serde::Serialize;

#[derive(Debug, Serialize)]
pub(super) struct Valley {
    pub(super) t_start: f64,
    pub(super) t_end: f64,
    pub(super) read_mb_per_s: f64,
    pub(super) typical_mb_per_s: f64,
    pub(super) causes: Vec<String>,
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The deepest interval run below half the typical read rate, away from the ramp
/// up and down, with its likely causes.
pub(super) fn find_valley(s: &Series) -> Option<Valley> {
    let n = s.t.len();
    let sum = |f: &dyn Fn(&IoSeries, usize) -> f64, i: usize| -> f64 {
        s.reads.iter().map(|l| f(l, i)).sum()
    };
    let rate: Vec<f64> = (0..n).map(|i| sum(&|l, i| l.mb_per_s[i], i)).collect();
    let active: Vec<usize> = (0..n).filter(|&i| rate[i] > 0.0).collect();
    let (&first, &last) = (active.first()?, active.last()?);
    if last < first + 4 {
        return None;
    }
    let inner = first + 1..last;
    let typical = median(inner.clone().map(|i| rate[i]).collect());
    let low = |i: usize| rate[i] < typical * 0.5;
    let deepest = inner
        .clone()
        .filter(|&i| low(i))
        .min_by(|&a, &b| rate[a].total_cmp(&rate[b]))?;
    let (mut a, mut b) = (deepest, deepest);
    while a > inner.start && low(a - 1) {
        a -= 1;
    }
    while b + 1 < inner.end && low(b + 1) {
        b += 1;
    }
    let total = |r: std::ops::Range<usize>, f: &dyn Fn(&IoSeries, usize) -> f64| -> f64 {
        r.map(|i| sum(f, i)).sum()
    };
    let size = |r: std::ops::Range<usize>| {
        total(r.clone(), &|l, i| l.bytes[i] as f64) / total(r, &|l, i| l.ops[i] as f64).max(1.0)
    };
    let lat = |r: std::ops::Range<usize>| {
        total(r.clone(), &|l, i| l.latency_ns[i] as f64)
            / 1e6
            / total(r, &|l, i| l.ops[i] as f64).max(1.0)
    };
    let region = a..b + 1;
    let mut causes = vec![];
    let pool = region.clone().map(|i| s.pool.mean_in_use[i]).sum::<f64>() / region.len() as f64;
    if s.pool.size > 0 && pool >= 0.9 * s.pool.size as f64 {
        causes.push(format!(
            "the buffer pool was full ({pool:.0} of {} buffers in use): readers waited for free buffers, so the stages after the reads (compression, devices) set the pace",
            s.pool.size
        ));
    }
    let (vs, ts) = (size(region.clone()), size(inner.clone()));
    if vs > 0.0 && vs < 0.75 * ts {
        causes.push(format!(
            "reads were smaller ({} against {} typical): small files or fragmented ranges",
            human(vs as u64),
            human(ts as u64)
        ));
    }
    let (vl, tl) = (lat(region.clone()), lat(inner.clone()));
    if vl > 1.5 * tl && vl > 0.0 {
        causes.push(format!(
            "each read took longer ({vl:.2} ms against {tl:.2} ms typical): the storage slowed down"
        ));
    }
    if causes.is_empty() {
        causes.push("none of these counters moved: the readers had less to do (waiting on the source) or the machine was busy elsewhere".into());
    }
    Some(Valley {
        t_start: if a == 0 { 0.0 } else { s.t[a - 1] },
        t_end: s.t[b],
        read_mb_per_s: region.clone().map(|i| rate[i]).sum::<f64>() / region.len() as f64,
        typical_mb_per_s: typical,
        causes,
    })
}
