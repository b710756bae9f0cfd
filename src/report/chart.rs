//! One chart as inline SVG, and the charts of a report.

use super::series::IoSeries;
use super::Report;
use std::fmt::Write as _;

pub(super) fn capitalized(s: &str) -> String {
    let mut c = s.chars();
    c.next()
        .map(|f| f.to_uppercase().chain(c).collect())
        .unwrap_or_default()
}

pub(super) fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

/// A short number for axis labels and tables.
pub(super) fn num(v: f64) -> String {
    let s = if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    };
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// The smallest of 1, 2, 2.5, 5 x 10^k at or above `v`.
pub(super) fn nice(v: f64) -> f64 {
    if v <= 0.0 || !v.is_finite() {
        return 1.0;
    }
    let mag = 10f64.powf(v.log10().floor());
    [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|&x| x >= v * (1.0 - 1e-9))
        .unwrap_or(10.0 * mag)
}

const COLORS: [&str; 8] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
];
pub(super) const W: f64 = 960.0;
pub(super) const H: f64 = 150.0;
pub(super) const ML: f64 = 60.0;
pub(super) const MR: f64 = 14.0;
pub(super) const MT: f64 = 8.0;
pub(super) const MB: f64 = 20.0;

struct Line {
    name: String,
    values: Vec<Option<f64>>,
    dashed: bool,
}

pub(super) struct Chart {
    id: &'static str,
    title: String,
    lines: Vec<Line>,
    /// A fixed top of the y axis (pool size), else from the data.
    ymax: Option<f64>,
}

pub(super) fn chart_html(c: &Chart, t: &[f64], tmax: f64, band: Option<(f64, f64)>) -> String {
    let (pw, ph) = (W - ML - MR, H - MT - MB);
    let top = c.ymax.unwrap_or_else(|| {
        nice(
            c.lines
                .iter()
                .flat_map(|l| l.values.iter().flatten())
                .fold(0.0, |a: f64, &b| a.max(b)),
        )
    });
    let x = |v: f64| ML + v / tmax * pw;
    let y = |v: f64| MT + ph - (v / top).clamp(0.0, 1.05) * ph;
    let mut o = String::new();
    let _ = write!(
        o,
        "<div class=\"chart\" id=\"{}\"><div class=\"head\"><b>{}</b>",
        c.id,
        esc(&c.title)
    );
    for (i, l) in c.lines.iter().enumerate() {
        let _ = write!(
            o,
            " <span class=\"key\" data-n=\"{2}\" style=\"color:{}\">{} {}</span>",
            COLORS[i % COLORS.len()],
            if l.dashed { "- -" } else { "&#9473;" },
            esc(&l.name)
        );
    }
    let _ = write!(
        o,
        " <span class=\"rd\"></span></div><svg class=\"plot\" viewBox=\"0 0 {W} {H}\" width=\"{W}\" height=\"{H}\" data-top=\"{top}\" data-tmax=\"{tmax}\">"
    );
    if let Some((a, b)) = band {
        let _ = write!(
            o,
            "<rect class=\"valley\" x=\"{:.1}\" y=\"{MT}\" width=\"{:.1}\" height=\"{ph}\"/>",
            x(a),
            (x(b) - x(a)).max(2.0)
        );
    }
    for k in 0..=4 {
        let v = top * k as f64 / 4.0;
        let _ = write!(
            o,
            "<line class=\"grid\" x1=\"{ML}\" x2=\"{:.1}\" y1=\"{:.1}\" y2=\"{:.1}\"/><text class=\"yl\" x=\"{:.1}\" y=\"{:.1}\">{}</text>",
            ML + pw,
            y(v),
            y(v),
            ML - 4.0,
            y(v) + 4.0,
            num(v)
        );
    }
    let step = nice(tmax / 10.0);
    let mut tick = 0.0;
    while tick <= tmax * (1.0 + 1e-9) {
        let _ = write!(
            o,
            "<line class=\"tick\" x1=\"{0:.1}\" x2=\"{0:.1}\" y1=\"{1:.1}\" y2=\"{2:.1}\"/><text class=\"xl\" x=\"{0:.1}\" y=\"{3:.1}\">{4}s</text>",
            x(tick),
            MT + ph,
            MT + ph + 4.0,
            H - 5.0,
            num(tick)
        );
        tick += step;
    }
    for (i, l) in c.lines.iter().enumerate() {
        // A gap (no operation in an interval) splits the line.
        let mut seg: Vec<String> = vec![];
        let mut flush = |seg: &mut Vec<String>| {
            if !seg.is_empty() {
                let _ = write!(
                    o,
                    "<polyline class=\"s{i}{}\" stroke=\"{}\" points=\"{}\"/>",
                    if l.dashed { " dashed" } else { "" },
                    COLORS[i % COLORS.len()],
                    seg.join(" ")
                );
                seg.clear();
            }
        };
        // Steps: each interval's value spans the interval.
        for (k, v) in l.values.iter().enumerate() {
            match v {
                Some(v) => {
                    let from = if k == 0 { 0.0 } else { t[k - 1] };
                    seg.push(format!("{:.1},{:.1}", x(from), y(*v)));
                    seg.push(format!("{:.1},{:.1}", x(t[k]), y(*v)));
                }
                None => flush(&mut seg),
            }
        }
        flush(&mut seg);
    }
    let _ = writeln!(
        o,
        "<line class=\"cursor\" x1=\"-1\" x2=\"-1\" y1=\"{MT}\" y2=\"{:.1}\"/></svg></div>",
        MT + ph
    );
    o
}

pub(super) fn charts(r: &Report) -> Vec<Chart> {
    let s = &r.series;
    let name = |names: &[String], i: usize, kind: &str| {
        names
            .get(i)
            .cloned()
            .unwrap_or_else(|| format!("{kind} {}", i + 1))
    };
    let (rk, wk) = if r.command == "backup" {
        ("volume", "device")
    } else {
        ("stripe", "target")
    };
    let per = |lanes: &[IoSeries],
               names: &[String],
               kind: &str,
               f: &dyn Fn(&IoSeries) -> Vec<Option<f64>>| {
        lanes
            .iter()
            .enumerate()
            .map(|(i, l)| Line {
                name: name(names, i, kind),
                values: f(l),
                dashed: false,
            })
            .collect::<Vec<_>>()
    };
    let some = |v: &[f64]| v.iter().map(|&x| Some(x)).collect::<Vec<_>>();
    let mut out = vec![
        Chart {
            id: "read-mbps",
            title: format!("Read MB/s per {rk}"),
            lines: per(&s.reads, &r.read_names, rk, &|l| some(&l.mb_per_s)),
            ymax: None,
        },
        Chart {
            id: "read-size",
            title: "Mean read size (KiB)".into(),
            lines: per(&s.reads, &r.read_names, rk, &|l| {
                l.mean_size_bytes
                    .iter()
                    .map(|v| v.map(|b| b / 1024.0))
                    .collect()
            }),
            ymax: None,
        },
        Chart {
            id: "read-latency",
            title: "Read latency (ms, mean per interval)".into(),
            lines: per(&s.reads, &r.read_names, rk, &|l| l.mean_latency_ms.clone()),
            ymax: None,
        },
        Chart {
            id: "pool",
            title: format!("Buffer pool: buffers in use of {}", s.pool.size),
            lines: vec![
                Line {
                    name: "in use (mean)".into(),
                    values: s.pool.mean_in_use.iter().map(|&v| Some(v)).collect(),
                    dashed: false,
                },
                Line {
                    name: "peak".into(),
                    values: s.pool.peak_in_use.iter().map(|&v| Some(v as f64)).collect(),
                    dashed: true,
                },
                Line {
                    name: "total".into(),
                    values: vec![Some(s.pool.size as f64); s.t.len()],
                    dashed: true,
                },
            ],
            ymax: Some((s.pool.size as f64).max(1.0)),
        },
        Chart {
            id: "read-inflight",
            title: format!("Reads in flight allowed per {rk} (adaptive readers)"),
            lines: per(&s.reads, &r.read_names, rk, &|l| {
                l.in_flight.iter().map(|&v| Some(v as f64)).collect()
            }),
            ymax: None,
        },
        Chart {
            id: "read-ops",
            title: format!("Reads/s per {rk}"),
            lines: per(&s.reads, &r.read_names, rk, &|l| some(&l.ops_per_s)),
            ymax: None,
        },
        Chart {
            id: "write-mbps",
            title: format!("Write MB/s per {wk}"),
            lines: per(&s.writes, &r.write_names, wk, &|l| some(&l.mb_per_s)),
            ymax: None,
        },
    ];
    let mut waits = vec![];
    for st in &s.stages {
        for (what, v, dashed) in [
            ("input", &st.wait_in_s, false),
            ("output", &st.wait_out_s, true),
        ] {
            waits.push(Line {
                name: format!("{} waits for {what}", st.stage),
                values: v
                    .iter()
                    .zip(&s.dt)
                    .map(|(w, dt)| Some(w / dt.max(1e-9)))
                    .collect(),
                dashed,
            });
        }
    }
    out.push(Chart {
        id: "waits",
        title: "Waits per stage (seconds of wait per second, summed over threads)".into(),
        lines: waits,
        ymax: None,
    });
    out.push(Chart {
        id: "cpu",
        title: format!(
            "CPU: process user+system (% of one core, {} cores)",
            s.cores
        ),
        lines: vec![Line {
            name: "cpu".into(),
            values: some(&s.cpu_percent),
            dashed: false,
        }],
        ymax: None,
    });
    out
}
