//! The page: summary tables, the valley note, the charts, the data as JSON.

use super::chart::{capitalized, chart_html, charts, esc, H, MB, ML, MR, MT, W};
use super::valley::find_valley;
use super::Report;
use crate::units::human;
use serde_json::{json, Value};
use std::fmt::Write as _;

fn table_row(o: &mut String, cells: &[String], head: bool) {
    let tag = if head { "th" } else { "td" };
    o.push_str("<tr>");
    for c in cells {
        let _ = write!(o, "<{tag}>{}</{tag}>", esc(c));
    }
    o.push_str("</tr>");
}

fn show(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Array(a) => a.iter().map(show).collect::<Vec<_>>().join(", "),
        Value::Null => "-".into(),
        other => other.to_string(),
    }
}

const STYLE: &str = "body{font:14px system-ui,sans-serif;margin:20px;color:#222;max-width:1000px}
h1{font-size:20px}h2{font-size:16px;margin-top:24px}
table{border-collapse:collapse;margin:6px 0}td,th{border:1px solid #ccc;padding:2px 8px;text-align:left}
td.n{text-align:right}.chart{margin:2px 0}.head{font-size:13px}
.key{margin-left:10px}.rd{margin-left:12px;color:#555}
svg.plot polyline{fill:none;stroke-width:1.5}svg.plot polyline.dashed{stroke-dasharray:5 3}
.grid{stroke:#eee}.tick{stroke:#999}.yl{font-size:10px;text-anchor:end;fill:#555}
.xl{font-size:10px;text-anchor:middle;fill:#555}.cursor{stroke:#000;stroke-width:0.7}
.valley{fill:#fbd38d;opacity:.45}.note{background:#fff7e6;border:1px solid #fbd38d;padding:6px 10px}";

/// Hover: one cursor across every chart and each chart's values under it.
const SCRIPT: &str = "function show(cx){document.querySelectorAll('svg.plot').forEach(function(s){
var c=s.querySelector('.cursor');c.setAttribute('x1',cx);c.setAttribute('x2',cx);
var top=+s.dataset.top,keys=s.parentNode.querySelectorAll('.key'),vals=[];
s.querySelectorAll('polyline').forEach(function(p){var k=keys[+p.getAttribute('class').slice(1,3)];
for(var i=0;i+1<p.points.numberOfItems;i+=2){var a=p.points.getItem(i),b=p.points.getItem(i+1);
if(a.x<=cx&&cx<=b.x){vals.push(k.dataset.n+' '+(+((MT0+PH0-a.y)/PH0*top).toPrecision(3)));break;}}});
var t=(cx-ML0)/PW0*(+s.dataset.tmax);
s.parentNode.querySelector('.rd').textContent='t='+t.toFixed(2)+' s: '+vals.join(', ');});}
document.querySelectorAll('svg.plot').forEach(function(sv){sv.addEventListener('mousemove',function(e){
var b=sv.getBoundingClientRect();show((e.clientX-b.left)*sv.viewBox.baseVal.width/b.width);});});
show(ML0+PW0-0.5);";

pub(super) fn render(r: &Report) -> String {
    let s = &r.series;
    let tmax = s.t.last().copied().unwrap_or(1.0).max(1e-3);
    let valley = find_valley(s);
    let band = valley.as_ref().map(|v| (v.t_start, v.t_end));
    let data = json!({
        "version": 1,
        "command": r.command,
        "config": r.config,
        "summary": r.summary,
        "series": s,
        "read_names": r.read_names,
        "write_names": r.write_names,
        "valley": valley,
    });
    // "</" would end the script element early.
    let data = serde_json::to_string(&data).unwrap().replace("</", "<\\/");
    let sum = r.summary;
    let mut o = String::new();
    let _ = write!(
        o,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>pagevault {} report</title><style>{STYLE}</style></head><body>\n<h1>pagevault {}: {} in {:.3} s ({:.1} MB/s)</h1>\n",
        r.command,
        r.command,
        human(sum["raw_bytes"].as_u64().unwrap_or(0)),
        sum["seconds"].as_f64().unwrap_or(0.0),
        sum["mb_per_sec"].as_f64().unwrap_or(0.0),
    );
    o.push_str("<h2>Summary</h2><table>");
    let bytes = |k: &str| {
        sum[k]
            .as_u64()
            .map(|b| format!("{} ({b} bytes)", human(b)))
            .unwrap_or_else(|| "-".into())
    };
    for (k, v) in [
        ("bytes read (raw)", bytes("raw_bytes")),
        ("bytes stored", bytes("stored_bytes")),
        (
            "seconds",
            format!("{:.3}", sum["seconds"].as_f64().unwrap_or(0.0)),
        ),
        (
            "MB/s",
            format!("{:.3}", sum["mb_per_sec"].as_f64().unwrap_or(0.0)),
        ),
        (
            "bottleneck",
            format!(
                "{} ({})",
                show(&sum["waits"]["bottleneck"]),
                show(&sum["waits"]["explanation"])
            ),
        ),
    ] {
        table_row(&mut o, &[k.to_string(), v], false);
    }
    o.push_str("</table><table>");
    table_row(
        &mut o,
        &[
            "stage",
            "threads",
            "busy s",
            "wait input s",
            "wait output s",
            "util",
            "waits for",
            "blocked by",
        ]
        .map(String::from),
        true,
    );
    for st in sum["waits"]["stages"].as_array().into_iter().flatten() {
        let f = |k: &str| format!("{:.3}", st[k].as_f64().unwrap_or(0.0));
        table_row(
            &mut o,
            &[
                show(&st["stage"]),
                show(&st["threads"]),
                f("busy_seconds"),
                f("wait_input_seconds"),
                f("wait_output_seconds"),
                format!("{:.0}%", st["utilization"].as_f64().unwrap_or(0.0) * 100.0),
                show(&st["waits_for"]),
                show(&st["blocked_by"]),
            ],
            false,
        );
    }
    o.push_str("</table>\n<h2>Timeline</h2>\n");
    let _ = writeln!(
        o,
        "<p>{} samples, one every {} ms and one at the end. The charts share the time axis: under a dip in read MB/s, smaller reads point at the source's layout, higher latency at the storage, a full buffer pool at the stages downstream.</p>",
        s.t.len(),
        s.interval_ms
    );
    if let Some(v) = &valley {
        let _ = writeln!(
            o,
            "<p class=\"note\"><b>Valley</b> from {:.2} s to {:.2} s (shaded): reads at {:.1} MB/s against {:.1} MB/s typical. {}.</p>",
            v.t_start,
            v.t_end,
            v.read_mb_per_s,
            v.typical_mb_per_s,
            esc(&capitalized(&v.causes.join("; ")))
        );
    }
    for c in charts(r) {
        o.push_str(&chart_html(&c, &s.t, tmax, band));
    }
    o.push_str("<h2>Configuration</h2><table>");
    if let Value::Object(m) = &r.config {
        for (k, v) in m {
            table_row(&mut o, &[k.clone(), show(v)], false);
        }
    }
    o.push_str("</table>\n");
    let _ = write!(
        o,
        "<script type=\"application/json\" id=\"pagevault-data\">{data}</script>\n<script>{}</script>\n</body></html>\n",
        SCRIPT
            .replace("MT0", &MT.to_string())
            .replace("PH0", &(H - MT - MB).to_string())
            .replace("ML0", &ML.to_string())
            .replace("PW0", &(W - ML - MR).to_string())
    );
    o
}
