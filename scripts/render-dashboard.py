#!/usr/bin/env python3
"""Draws docs/grafana/pagevault.json as an SVG picture.

Usage: scripts/render-dashboard.py SAMPLE.prom [DASHBOARD.json] [OUT.svg]
(defaults: docs/grafana/pagevault.json, docs/grafana/pagevault.svg).

Each panel is drawn at its gridPos (24 columns), with its title, its type (stat,
timeseries and table drawn schematically) and the metric names its queries use. Values
come from SAMPLE.prom, the output of `pagevault status --prometheus`: the queries are
evaluated over it by a small evaluator (selectors, + - * /, min/max/sum by). The picture
is a pure function of the two files: no clock, no randomness. Standard library only.
"""

import datetime
import json
import re
import sys
from html import escape
from pathlib import Path

COL = 40  # pixels per grid column
ROW = 30  # pixels per grid row
PAD = 6
FONT = "DejaVu Sans, Verdana, sans-serif"


def parse_sample(text):
    """Prometheus's text format: {name: [(labels, value)]}."""
    series = {}
    line_re = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)")
    label_re = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = line_re.match(line)
        if not m:
            raise SystemExit(f"render-dashboard: not a sample line: {line!r}")
        labels = {k: re.sub(r"\\(.)", r"\1", v) for k, v in label_re.findall(m.group(2) or "")}
        series.setdefault(m.group(1), []).append((labels, float(m.group(3))))
    return series


TOKEN = re.compile(
    r"\s*(?:(?P<num>\d+(?:\.\d+)?)|(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)"
    r"|(?P<labels>\{[^}]*\})|(?P<op>[-+*/(),]))"
)


class Eval:
    """Evaluates the PromQL subset the dashboard uses over one sample."""

    def __init__(self, series, expr):
        self.series = series
        self.toks = []
        pos = 0
        expr = expr.strip()
        while pos < len(expr):
            m = TOKEN.match(expr, pos)
            if not m or m.end() == pos:
                raise SystemExit(f"render-dashboard: cannot evaluate {expr!r} at {pos}")
            kind = m.lastgroup
            self.toks.append((kind, m.group(kind)))
            pos = m.end()
        self.i = 0

    def peek(self):
        return self.toks[self.i] if self.i < len(self.toks) else (None, None)

    def take(self, want=None):
        tok = self.peek()
        if want is not None and tok[1] != want:
            raise SystemExit(f"render-dashboard: expected {want!r}, got {tok[1]!r}")
        self.i += 1
        return tok

    def run(self):
        v = self.expr()
        if self.i != len(self.toks):
            raise SystemExit(f"render-dashboard: trailing {self.toks[self.i:]!r}")
        return v

    def expr(self):
        left = self.term()
        while self.peek() in (("op", "+"), ("op", "-")):
            left = binop(left, self.take()[1], self.term())
        return left

    def term(self):
        left = self.atom()
        while self.peek() in (("op", "*"), ("op", "/")):
            left = binop(left, self.take()[1], self.atom())
        return left

    def atom(self):
        kind, text = self.take()
        if kind == "num":
            return float(text)
        if kind == "op" and text == "(":
            v = self.expr()
            self.take(")")
            return v
        if kind == "name" and text in ("min", "max", "sum"):
            by = []
            if self.peek() == ("name", "by"):
                self.take()
                self.take("(")
                while self.peek()[1] != ")":
                    k, t = self.take()
                    if k == "name":
                        by.append(t)
                self.take(")")
            self.take("(")
            v = self.expr()
            self.take(")")
            return aggregate(text, by, v)
        if kind == "name":
            matchers = []
            if self.peek()[0] == "labels":
                body = self.take()[1][1:-1]
                for k, op, val in re.findall(r'(\w+)\s*(=~|!=|=)\s*"([^"]*)"', body):
                    matchers.append((k, op, val.replace("$repo", ".*")))
            out = []
            for labels, value in self.series.get(text, []):
                if all(match(labels.get(k, ""), op, val) for k, op, val in matchers):
                    out.append(({**labels, "__name__": text}, value))
            return out
        raise SystemExit(f"render-dashboard: unexpected {text!r}")


def match(have, op, want):
    if op == "=":
        return have == want
    if op == "!=":
        return have != want
    return re.fullmatch(want, have) is not None


def strip_name(labels):
    return {k: v for k, v in labels.items() if k != "__name__"}


def key(labels):
    return tuple(sorted(strip_name(labels).items()))


def apply(op, a, b):
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    return a / b if b else float("nan")


def binop(left, op, right):
    if isinstance(left, float) and isinstance(right, float):
        return apply(op, left, right)
    if isinstance(right, float):
        return [(strip_name(l), apply(op, v, right)) for l, v in left]
    if isinstance(left, float):
        return [(strip_name(l), apply(op, left, v)) for l, v in right]
    other = {key(l): v for l, v in right}
    return [(strip_name(l), apply(op, v, other[key(l)])) for l, v in left if key(l) in other]


def aggregate(fn, by, vec):
    groups = {}
    for labels, value in vec:
        k = tuple((b, labels.get(b, "")) for b in by)
        groups.setdefault(k, []).append(value)
    f = {"min": min, "max": max, "sum": sum}[fn]
    return [(dict(k), f(vs)) for k, vs in sorted(groups.items())]


def fmt(value, unit, decimals=None):
    """A value as Grafana shows it, roughly, in the panel's unit."""
    if value != value:
        return "NaN"
    if unit == "s":
        for limit, div, name in ((60, 1, "s"), (3600, 60, "min"), (86400, 3600, "h")):
            if abs(value) < limit:
                return f"{value / div:.{1 if decimals is None else decimals}f} {name}"
        return f"{value / 86400:.1f} day"
    if unit == "bytes":
        for name in ("B", "KiB", "MiB", "GiB", "TiB"):
            if abs(value) < 1024 or name == "TiB":
                return f"{value:.{0 if name == 'B' else (1 if decimals is None else decimals)}f} {name}"
            value /= 1024
    if unit == "dateTimeAsIso":
        t = datetime.datetime.fromtimestamp(value / 1000, datetime.timezone.utc)
        return t.strftime("%Y-%m-%d %H:%M:%S")
    if unit == "percent":
        return f"{value:.0f}%"
    return f"{value:.{decimals}f}" if decimals is not None else f"{value:g}"


def mapped(value, panel):
    for m in panel.get("fieldConfig", {}).get("defaults", {}).get("mappings", []):
        opt = m.get("options", {}).get(f"{value:g}")
        if m.get("type") == "value" and opt:
            return opt.get("text"), opt.get("color")
    return None, None


def color(value, panel):
    steps = panel.get("fieldConfig", {}).get("defaults", {}).get("thresholds", {}).get("steps", [])
    c = "green"
    for s in steps:
        if s.get("value") is None or value >= s["value"]:
            c = s["color"]
    return c


COLORS = {"green": "#2f8f46", "red": "#c4162a", "orange": "#d8791a", "yellow": "#c9a414", "blue": "#3274d9"}


def metrics(panel):
    names = []
    for t in panel.get("targets", []):
        for n in re.findall(r"\b(pagevault_[a-z_]+|node_[a-z_]+)\b", t.get("expr", "")):
            if n not in names:
                names.append(n)
    return names


def text(x, y, s, size=12, fill="#d8d9da", anchor="start", weight="normal"):
    return (
        f'<text x="{x}" y="{y}" font-family="{FONT}" font-size="{size}" fill="{fill}" '
        f'text-anchor="{anchor}" font-weight="{weight}">{escape(s)}</text>'
    )


def clip(s, width, size):
    room = max(4, int(width / (size * 0.58)))
    return s if len(s) <= room else s[: room - 1] + "…"


def draw_panel(p, series):
    g = p["gridPos"]
    x, y, w, h = g["x"] * COL, g["y"] * ROW, g["w"] * COL, g["h"] * ROW
    x0, y0, iw = x + PAD, y + PAD, w - 2 * PAD
    out = [f'<rect x="{x + 2}" y="{y + 2}" width="{w - 4}" height="{h - 4}" rx="3" fill="#181b1f" stroke="#34373c"/>']
    out.append(text(x0, y0 + 14, clip(p["title"], iw - 44, 13), 13, "#e5e5e5", weight="bold"))
    out.append(text(x + w - PAD, y0 + 13, p["type"], 10, "#8e8e8e", "end"))
    names = metrics(p)
    foot = y + h - PAD - 2
    for i, n in enumerate(reversed(names)):
        out.append(text(x0, foot - 12 * i, clip(n, iw, 10), 10, "#6e9fff"))
    body_top, body_bottom = y0 + 22, foot - 12 * len(names) - 2
    defaults = p.get("fieldConfig", {}).get("defaults", {})
    unit, decimals = defaults.get("unit", "none"), defaults.get("decimals")
    results = [(t, Eval(series, t["expr"]).run()) for t in p.get("targets", [])]
    if p["type"] == "stat":
        values = [v for _, vec in results for _, v in (vec if isinstance(vec, list) else [({}, vec)])]
        if not values:
            out.append(text(x + w / 2, (body_top + body_bottom) / 2 + 8, "No data", 20, "#8e8e8e", "middle"))
        for i, v in enumerate(values[:1]):
            label, c = mapped(v, p)
            c = COLORS.get(c or color(v, p), "#2f8f46")
            out.append(
                f'<rect x="{x0}" y="{body_top}" width="{iw}" height="{body_bottom - body_top}" rx="2" fill="{c}"/>'
            )
            s = label or fmt(v, unit, decimals)
            size = min(22, int(iw / (len(s) * 0.64)))
            mid = (body_top + body_bottom) / 2 + size / 3
            out.append(text(x + w / 2, round(mid, 1), s, size, "#ffffff", "middle", "bold"))
    elif p["type"] == "timeseries":
        ax, ay, ah = x0 + 4, body_bottom - 14, body_bottom - 14 - body_top
        out.append(f'<path d="M{ax} {body_top} V{ay} H{x0 + iw}" stroke="#5a5d62" fill="none"/>')
        rows = [(t, l, v) for t, vec in results for l, v in vec]
        top = max([v for _, _, v in rows] + [0]) or 1
        for i, (t, l, v) in enumerate(reversed(rows)):
            # A flat line at the sample's value: the picture has one point in time.
            ly = ay - (v / top) * ah * 0.8
            colr = list(COLORS.values())[i % len(COLORS)]
            out.append(f'<path d="M{ax} {ly:.1f} H{x0 + iw}" stroke="{colr}" stroke-width="2"/>')
            legend = re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: l.get(m.group(1), ""), t.get("legendFormat", ""))
            out.append(text(ax + 4, ay + 12 - 12 * i, clip(f"{legend.strip()}: {fmt(v, unit)}", iw - 8, 10), 10, colr))
        if not rows:
            out.append(text(x + w / 2, (body_top + ay) / 2, "No data (none in the sample)", 12, "#8e8e8e", "middle"))
    elif p["type"] == "table":
        rename = {}
        for tr in p.get("transformations", []):
            rename.update(tr.get("options", {}).get("renameByName", {}))
        cols = [rename.get(f"Value #{t['refId']}", t["refId"]) for t, _ in results]
        rows = {}
        for ci, (_, vec) in enumerate(results):
            for l, v in vec:
                rows.setdefault(l.get("repo", ""), {})[ci] = v
        cw = iw / (len(cols) + 1.5)
        out.append(f'<rect x="{x0}" y="{body_top}" width="{iw}" height="18" fill="#22252b"/>')
        out.append(text(x0 + 4, body_top + 13, "repo", 11, "#e5e5e5", weight="bold"))
        for ci, c in enumerate(cols):
            out.append(text(x0 + cw * (ci + 1.5) + 4, body_top + 13, clip(c, cw - 6, 11), 11, "#e5e5e5", weight="bold"))
        for ri, (repo, vals) in enumerate(sorted(rows.items())):
            ry = body_top + 18 + 16 * (ri + 1)
            out.append(text(x0 + 4, ry - 3, clip(repo, cw * 1.5 - 6, 11), 11))
            for ci in range(len(cols)):
                v = vals.get(ci)
                out.append(text(x0 + cw * (ci + 1.5) + 4, ry - 3, "-" if v is None else fmt(v, unit), 11))
    return out


def main():
    if len(sys.argv) < 2:
        raise SystemExit("usage: scripts/render-dashboard.py SAMPLE.prom [DASHBOARD.json] [OUT.svg]")
    root = Path(__file__).resolve().parent.parent
    sample = Path(sys.argv[1])
    dash = Path(sys.argv[2]) if len(sys.argv) > 2 else root / "docs/grafana/pagevault.json"
    out = Path(sys.argv[3]) if len(sys.argv) > 3 else root / "docs/grafana/pagevault.svg"
    d = json.loads(dash.read_text())
    series = parse_sample(sample.read_text())
    panels = sorted(d["panels"], key=lambda p: (p["gridPos"]["y"], p["gridPos"]["x"]))
    width = 24 * COL
    height = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in panels) * ROW + 40
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}">',
        f'<rect width="{width}" height="{height}" fill="#111217"/>',
    ]
    repos = sorted({l.get("repo", "") for vec in series.values() for l, _ in vec})
    title = f"{d.get('title', '')}: repo = {', '.join(repos)}"
    parts.append(text(PAD, 24, title, 16, "#e5e5e5", weight="bold"))
    parts.append('<g transform="translate(0 36)">')
    for p in panels:
        parts.extend(draw_panel(p, series))
    parts.append("</g>")
    parts.append("</svg>")
    out.write_text("\n".join(parts) + "\n")


if __name__ == "__main__":
    main()
