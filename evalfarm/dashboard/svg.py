"""Charts drawn on the server as inline SVG: no script library, no CDN, nothing fetched.

Each chart is an ``<svg data-chart="NAME">`` whose bars are ``rect.bar`` (so a test can count
them) and whose every label goes through ``esc``: labels are adapter ids, failure modes and
spec names read from untrusted reports.
"""
from __future__ import annotations

from html import escape
from typing import Iterable, Sequence

from markupsafe import Markup


def esc(value: object) -> str:
    return escape(str(value), quote=True)


def _n(x: float) -> str:
    return f"{x:.2f}".rstrip("0").rstrip(".")


def fmt_num(x: float | None, digits: int = 3) -> str:
    if x is None:
        return "n/a"
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    return f"{x:.{digits}g}" if x else "0"


def score_bar(value: float | None, threshold: float | None = None, width: int = 140, label: str = "") -> Markup:
    """A 0..1 score as a bar, the threshold (a spec minimum) as a vertical line."""
    h = 16
    parts = [f'<svg class="scorebar" data-chart="score" width="{width + 48}" height="{h}" '
             f'viewBox="0 0 {width + 48} {h}" role="img" aria-label="{esc(label)} {esc(fmt_num(value))}">',
             f'<rect class="track" x="0" y="3" width="{width}" height="{h - 6}"/>']
    if value is not None:
        v = min(1.0, max(0.0, value))
        cls = "bar" + ("" if threshold is None else (" ok" if value >= threshold else " below"))
        parts.append(f'<rect class="{cls}" x="0" y="3" width="{_n(v * width)}" height="{h - 6}"/>')
    if threshold is not None:
        t = min(1.0, max(0.0, threshold)) * width
        parts.append(f'<line class="threshold" x1="{_n(t)}" x2="{_n(t)}" y1="0" y2="{h}">'
                     f'<title>minimum {esc(fmt_num(threshold))}</title></line>')
    text = "n/a" if value is None else f"{value * 100:.1f}%"
    parts.append(f'<text x="{width + 4}" y="{h - 4}">{esc(text)}</text></svg>')
    return Markup("".join(parts))


def bar_chart(items: Sequence[tuple[str, float]], name: str, unit: str = "", width: int = 520,
              value_fmt=None) -> Markup:
    """Horizontal bars, one ``rect.bar`` per item, labelled on the left, valued on the right."""
    value_fmt = value_fmt or (lambda v: f"{v:g}{unit}")
    row, label_w, value_w = 22, 170, 90
    plot_w = width - label_w - value_w
    height = max(1, len(items)) * row + 6
    top = max((v for _, v in items), default=0) or 1
    parts = [f'<svg class="chart" data-chart="{esc(name)}" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" role="img" aria-label="{esc(name)}">']
    if not items:
        parts.append('<text x="0" y="16" class="empty">nothing to chart</text>')
    for i, (label, value) in enumerate(items):
        y = 3 + i * row
        w = max(0.0, value) / top * plot_w
        parts.append(f'<text x="{label_w - 6}" y="{y + 14}" text-anchor="end">{esc(label)}</text>'
                     f'<rect class="bar" data-label="{esc(label)}" data-value="{esc(value)}" x="{label_w}" y="{y}" '
                     f'width="{_n(w)}" height="{row - 6}"><title>{esc(label)}: {esc(value_fmt(value))}</title></rect>'
                     f'<text x="{_n(label_w + w + 6)}" y="{y + 14}">{esc(value_fmt(value))}</text>')
    parts.append("</svg>")
    return Markup("".join(parts))


def histogram(edges: Sequence[float], counts: Sequence[int], name: str = "latency", unit: str = "ms",
              width: int = 520, height: int = 160) -> Markup:
    """Vertical bars over equal-width bins, one ``rect.bar`` per bin; the axis shows the range."""
    parts = [f'<svg class="chart" data-chart="{esc(name)}" width="{width}" height="{height + 30}" '
             f'viewBox="0 0 {width} {height + 30}" role="img" aria-label="{esc(name)} histogram">']
    if not counts:
        parts.append('<text x="0" y="16" class="empty">no latencies recorded</text></svg>')
        return Markup("".join(parts))
    top = max(counts) or 1
    bw = width / len(counts)
    for i, c in enumerate(counts):
        h = c / top * (height - 14)
        lo, hi = edges[i], edges[i + 1]
        parts.append(f'<rect class="bar" data-count="{c}" x="{_n(i * bw + 1)}" y="{_n(height - h)}" '
                     f'width="{_n(max(1.0, bw - 2))}" height="{_n(h)}"><title>{esc(fmt_num(lo))}-'
                     f'{esc(fmt_num(hi))} {esc(unit)}: {c}</title></rect>')
    parts.append(f'<line class="axis" x1="0" x2="{width}" y1="{height}" y2="{height}"/>'
                 f'<text x="0" y="{height + 16}">{esc(fmt_num(edges[0]))} {esc(unit)}</text>'
                 f'<text x="{width}" y="{height + 16}" text-anchor="end">{esc(fmt_num(edges[-1]))} {esc(unit)}</text>'
                 f'<text x="{width / 2:.0f}" y="{height + 16}" text-anchor="middle">max bin {top}</text></svg>')
    return Markup("".join(parts))


def intervals(rows: Iterable[tuple[str, float | None, float | None, float | None]], name: str,
              width: int = 560, value_fmt=None) -> Markup:
    """Each row a 95% interval (a line from lo to hi) with its point estimate (a dot), on one
    axis that always includes zero (the dashed line): an interval crossing it is no evidence."""
    value_fmt = value_fmt or (lambda v: f"{v:+.4g}")
    rows = [r for r in rows]
    label_w, pad, row = 200, 14, 30
    vals = [v for _, d, lo, hi in rows for v in (d, lo, hi) if v is not None] + [0.0]
    lo_all, hi_all = min(vals), max(vals)
    if hi_all - lo_all < 1e-12:
        lo_all, hi_all = lo_all - 1, hi_all + 1
    span = hi_all - lo_all
    lo_all, hi_all = lo_all - span * 0.08, hi_all + span * 0.08
    plot_w = width - label_w - pad

    def x(v: float) -> float:
        return label_w + (v - lo_all) / (hi_all - lo_all) * plot_w

    height = len(rows) * row + 34
    parts = [f'<svg class="chart intervals" data-chart="{esc(name)}" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" role="img" aria-label="{esc(name)} intervals">',
             f'<line class="zero" x1="{_n(x(0))}" x2="{_n(x(0))}" y1="0" y2="{len(rows) * row + 4}"/>']
    for i, (label, d, lo, hi) in enumerate(rows):
        y = 14 + i * row
        parts.append(f'<text x="{label_w - 8}" y="{y + 4}" text-anchor="end">{esc(label)}</text>')
        if d is None:
            parts.append(f'<text x="{label_w}" y="{y + 4}" class="empty">not measured</text>')
            continue
        if lo is not None and hi is not None:
            parts.append(f'<line class="interval" data-lo="{esc(lo)}" data-hi="{esc(hi)}" x1="{_n(x(lo))}" '
                         f'x2="{_n(x(hi))}" y1="{y}" y2="{y}"><title>95% CI [{esc(value_fmt(lo))}, '
                         f'{esc(value_fmt(hi))}]</title></line>'
                         f'<line class="whisker" x1="{_n(x(lo))}" x2="{_n(x(lo))}" y1="{y - 6}" y2="{y + 6}"/>'
                         f'<line class="whisker" x1="{_n(x(hi))}" x2="{_n(x(hi))}" y1="{y - 6}" y2="{y + 6}"/>')
        parts.append(f'<circle class="point" cx="{_n(x(d))}" cy="{y}" r="4"><title>{esc(value_fmt(d))}</title>'
                     f'</circle>')
    axis_y = len(rows) * row + 20
    parts.append(f'<text x="{label_w}" y="{axis_y}">{esc(value_fmt(lo_all))}</text>'
                 f'<text x="{_n(x(0))}" y="{axis_y}" text-anchor="middle">0</text>'
                 f'<text x="{width - pad}" y="{axis_y}" text-anchor="end">{esc(value_fmt(hi_all))}</text></svg>')
    return Markup("".join(parts))


def sequence(history: Sequence[dict], stop: int | None, margin: float = 0.0, name: str = "sequence",
             width: int = 560, height: int = 220) -> Markup:
    """A confidence sequence round by round: each round's anytime-valid interval of b − a (a vertical
    ``line.round`` from lo to hi), the estimate through them, zero (dashed) and the margin, and the
    round it stopped at (``line.stop``). Every interval is valid at once, so reading it after every
    round is allowed: the first one clear of zero (or inside the margin) is the decision."""
    left, pad, top, bottom = 44, 12, 10, 28
    plot_w, plot_h = width - left - pad, height - top - bottom
    n = max(1, len(history))
    lo_v = min([-0.05] + [h["lo"] for h in history] + ([-margin] if margin else []))
    hi_v = max([0.05] + [h["hi"] for h in history] + ([margin] if margin else []))

    def x(i: int) -> float:  # round i (1-based)
        return left + (i - 0.5) / n * plot_w

    def y(v: float) -> float:
        return top + (hi_v - v) / (hi_v - lo_v) * plot_h

    parts = [f'<svg class="chart sequence" data-chart="{esc(name)}" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" role="img" aria-label="confidence sequence, {len(history)} rounds">',
             f'<line class="zero" x1="{left}" x2="{width - pad}" y1="{_n(y(0))}" y2="{_n(y(0))}"/>',
             f'<text x="{left - 4}" y="{_n(y(0) + 4)}" text-anchor="end">0</text>',
             f'<text x="{left - 4}" y="{_n(y(hi_v) + 10)}" text-anchor="end">{esc(f"{hi_v:+.2f}")}</text>',
             f'<text x="{left - 4}" y="{_n(y(lo_v))}" text-anchor="end">{esc(f"{lo_v:+.2f}")}</text>']
    if margin:
        for m in (-margin, margin):
            parts.append(f'<line class="margin" data-margin="{esc(m)}" x1="{left}" x2="{width - pad}" '
                         f'y1="{_n(y(m))}" y2="{_n(y(m))}"><title>margin {esc(f"{m:+g}")}</title></line>')
    if not history:
        parts.append(f'<text x="{left}" y="{top + 14}" class="empty">no rounds recorded</text></svg>')
        return Markup("".join(parts))
    for i, h in enumerate(history, start=1):
        cls = "round decided" if h["decision"] != "continue" else "round"
        tip = f"round {i} ({h['n']} pairs): {h['estimate']:+.4f} [{h['lo']:+.4f}, {h['hi']:+.4f}] {h['decision']}"
        parts.append(f'<line class="{cls}" data-round="{i}" data-lo="{esc(h["lo"])}" data-hi="{esc(h["hi"])}" '
                     f'x1="{_n(x(i))}" x2="{_n(x(i))}" y1="{_n(y(h["lo"]))}" y2="{_n(y(h["hi"]))}">'
                     f'<title>{esc(tip)}</title></line>')
    points = " ".join(f"{_n(x(i))},{_n(y(h['estimate']))}" for i, h in enumerate(history, start=1))
    parts.append(f'<polyline class="estimate" points="{points}"/>')
    if stop:
        parts.append(f'<line class="stop" data-round="{stop}" x1="{_n(x(stop))}" x2="{_n(x(stop))}" y1="{top}" '
                     f'y2="{top + plot_h}"><title>stopped at round {stop}</title></line>'
                     f'<text x="{_n(x(stop))}" y="{top + plot_h + 12}" text-anchor="middle">stop</text>')
    parts.append(f'<text x="{left}" y="{height - 4}">round 1</text>'
                 f'<text x="{width - pad}" y="{height - 4}" text-anchor="end">round {len(history)}</text></svg>')
    return Markup("".join(parts))
