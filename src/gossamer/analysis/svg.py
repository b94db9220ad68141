"""Small, dependency-free SVG charts for the self-contained HTML report.

Each function returns one ``<svg>`` element as a string: line and step charts,
bar charts and a heat map, with "nice" axis ticks. Output is deterministic (same
data, same bytes), which keeps reports diffable and tests simple. Plain SVG keeps
the report one file with no script, no font and no image encoding.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from html import escape

__all__ = ["PALETTE", "Series", "bar_chart", "heatmap", "line_chart", "nice_ticks"]

#: Colour-blind-friendly categorical palette (Okabe and Ito).
PALETTE: tuple[str, ...] = (
    "#0072B2",
    "#E69F00",
    "#009E73",
    "#D55E00",
    "#CC79A7",
    "#56B4E9",
    "#F0E442",
    "#000000",
)

#: Default size: as wide as the report's page (1100 px less its padding); browsers shrink
#: it with the page (``max-width: 100%``, the viewBox keeps the proportions).
_W, _H = 1060, 320
_LEFT, _RIGHT, _TOP, _BOTTOM = 64, 140, 34, 44


@dataclass(frozen=True, slots=True, kw_only=True)
class Series:
    """One named line: points ``(x, y)`` in drawing order."""

    name: str
    xs: Sequence[float]
    ys: Sequence[float]
    dashed: bool = False
    color: str | None = field(default=None)


def _fmt(v: float) -> str:
    if v == 0:
        return "0"
    a = abs(v)
    if a >= 1e6 or a < 1e-3:
        return f"{v:.1e}"
    if a >= 100:
        return f"{v:.0f}"
    return f"{v:.3g}"


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """About ``count`` round tick values (1, 2 or 5 times a power of ten) covering [lo, hi]."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return [0.0]
    if hi <= lo:
        hi = lo + (abs(lo) or 1.0)
    raw = (hi - lo) / max(count, 1)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    first = math.floor(lo / step + 1e-9)
    last = math.ceil(hi / step - 1e-9)
    return [round(k * step, 12) for k in range(first, last + 1)]


def _frame(title: str, x_label: str, y_label: str, width: int, height: int) -> list[str]:
    return [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">',
        f"<title>{escape(title)}</title>",
        f'<rect width="{width}" height="{height}" fill="#fff"/>',
        f'<text x="{_LEFT}" y="18" font-size="13" font-weight="bold">{escape(title)}</text>',
        f'<text x="{_LEFT + (width - _LEFT - _RIGHT) / 2:.1f}" y="{height - 8}" '
        f'text-anchor="middle">{escape(x_label)}</text>',
        f'<text transform="translate(14 {_TOP + (height - _TOP - _BOTTOM) / 2:.1f}) rotate(-90)" '
        f'text-anchor="middle">{escape(y_label)}</text>',
    ]


def _axes(
    parts: list[str],
    *,
    xt: Sequence[float],
    yt: Sequence[float],
    sx: Callable[[float], float],
    sy: Callable[[float], float],
    width: int,
    height: int,
) -> None:
    x0, x1 = _LEFT, width - _RIGHT
    y0, y1 = height - _BOTTOM, _TOP
    for t in yt:
        y = sy(t)
        parts.append(f'<line x1="{x0}" x2="{x1}" y1="{y:.1f}" y2="{y:.1f}" stroke="#e5e5e5"/>')
        parts.append(f'<text x="{x0 - 6}" y="{y + 4:.1f}" text-anchor="end">{_fmt(t)}</text>')
    for t in xt:
        x = sx(t)
        parts.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{y0}" y2="{y0 + 4}" stroke="#333"/>')
        parts.append(f'<text x="{x:.1f}" y="{y0 + 16}" text-anchor="middle">{_fmt(t)}</text>')
    parts.append(f'<polyline points="{x0},{y1} {x0},{y0} {x1},{y0}" fill="none" stroke="#333"/>')


def _legend(parts: list[str], names: Sequence[tuple[str, str, bool]], width: int) -> None:
    x = width - _RIGHT + 12
    for i, (name, color, dashed) in enumerate(names[:14]):
        y = _TOP + 8 + i * 16
        dash = ' stroke-dasharray="4 3"' if dashed else ""
        parts.append(
            f'<line x1="{x}" x2="{x + 18}" y1="{y}" y2="{y}" stroke="{color}" '
            f'stroke-width="2"{dash}/>'
        )
        parts.append(f'<text x="{x + 24}" y="{y + 4}">{escape(name[:16])}</text>')
    if len(names) > 14:
        parts.append(f'<text x="{x}" y="{_TOP + 8 + 14 * 16}">+{len(names) - 14} more</text>')


def line_chart(
    series: Sequence[Series],
    *,
    title: str,
    x_label: str,
    y_label: str,
    step: bool = False,
    markers: Sequence[tuple[float, str]] = (),
    y_min: float | None = None,
    width: int = _W,
    height: int = _H,
) -> str:
    """Lines (or steps, holding each value until the next x) with an optional set of marks.

    ``markers`` are vertical lines at ``x`` labelled with their text (crashes, heals).
    """
    xs = [x for s in series for x in s.xs] + [m[0] for m in markers]
    ys = [y for s in series for y in s.ys]
    parts = _frame(title, x_label, y_label, width, height)
    if not xs or not ys:
        parts.append(f'<text x="{width / 2}" y="{height / 2}" text-anchor="middle">no data</text>')
        return "".join(parts) + "</svg>"
    xlo, xhi = min(xs), max(xs)
    ylo = min(ys) if y_min is None else min(y_min, *ys)
    yhi = max(ys)
    xt = nice_ticks(xlo, xhi)
    yt = nice_ticks(ylo, yhi)
    xlo, xhi = min(xt[0], xlo), max(xt[-1], xhi)
    ylo, yhi = min(yt[0], ylo), max(yt[-1], yhi)
    xspan = (xhi - xlo) or 1.0
    yspan = (yhi - ylo) or 1.0

    def sx(v: float) -> float:
        return _LEFT + (v - xlo) / xspan * (width - _LEFT - _RIGHT)

    def sy(v: float) -> float:
        return height - _BOTTOM - (v - ylo) / yspan * (height - _TOP - _BOTTOM)

    _axes(parts, xt=xt, yt=yt, sx=sx, sy=sy, width=width, height=height)
    legend: list[tuple[str, str, bool]] = []
    for i, s in enumerate(series):
        color = s.color or PALETTE[i % len(PALETTE)]
        pts: list[tuple[float, float]] = []
        for j, (x, y) in enumerate(zip(s.xs, s.ys, strict=True)):
            if step and j:
                pts.append((x, pts[-1][1]))
            pts.append((x, y))
        text = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in pts)
        dash = ' stroke-dasharray="5 3"' if s.dashed else ""
        parts.append(
            f'<polyline points="{text}" fill="none" stroke="{color}" stroke-width="1.6"{dash}/>'
        )
        legend.append((s.name, color, s.dashed))
    for k, (x, label) in enumerate(markers[:40]):
        px = sx(x)
        parts.append(
            f'<line x1="{px:.1f}" x2="{px:.1f}" y1="{_TOP}" y2="{height - _BOTTOM}" '
            f'stroke="#D55E00" stroke-dasharray="2 2"/>'
        )
        parts.append(
            f'<text x="{px + 2:.1f}" y="{_TOP + 10 + (k % 4) * 11}" fill="#D55E00">'
            f"{escape(label[:20])}</text>"
        )
    if len(series) > 1 or (series and series[0].name):
        _legend(parts, legend, width)
    return "".join(parts) + "</svg>"


def bar_chart(
    labels: Sequence[str],
    values: Sequence[float],
    *,
    title: str,
    x_label: str,
    y_label: str,
    width: int = _W,
    height: int = _H,
) -> str:
    """Vertical bars, one per label, in the order given."""
    parts = _frame(title, x_label, y_label, width, height)
    if not values:
        parts.append(f'<text x="{width / 2}" y="{height / 2}" text-anchor="middle">no data</text>')
        return "".join(parts) + "</svg>"
    yt = nice_ticks(0.0, max(*values, 1e-12))
    yhi = max(yt[-1], *values) or 1.0
    plot_w = width - _LEFT - _RIGHT
    slot = plot_w / len(values)

    def sy(v: float) -> float:
        return height - _BOTTOM - v / yhi * (height - _TOP - _BOTTOM)

    _axes(parts, xt=[], yt=yt, sx=lambda v: 0.0, sy=sy, width=width, height=height)
    every = max(1, math.ceil(len(labels) / 20))
    for i, (label, v) in enumerate(zip(labels, values, strict=True)):
        x = _LEFT + i * slot + slot * 0.1
        y = sy(v)
        parts.append(
            f'<rect x="{x:.1f}" y="{y:.1f}" width="{slot * 0.8:.1f}" '
            f'height="{height - _BOTTOM - y:.1f}" fill="{PALETTE[0]}"><title>'
            f"{escape(label)}: {_fmt(v)}</title></rect>"
        )
        if i % every == 0:
            parts.append(
                f'<text x="{x + slot * 0.4:.1f}" y="{height - _BOTTOM + 14}" '
                f'text-anchor="middle">{escape(label[:8])}</text>'
            )
    return "".join(parts) + "</svg>"


def heatmap(
    labels: Sequence[str],
    counts: Sequence[Sequence[int]],
    *,
    title: str,
    width: int = _W,
) -> str:
    """A square matrix of counts: green where zero (agreement), red where not."""
    n = len(labels)
    cell = max(10, min(36, (width - 120) // max(n, 1)))
    size = 100 + cell * n
    # Wide enough for the title (13 px bold: about 8 px a character), however few nodes.
    wide = max(size + 20, 16 + round(8.2 * len(title)))
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{wide}" height="{size + 30}" '
        f'viewBox="0 0 {wide} {size + 30}" font-family="sans-serif" font-size="10">',
        f"<title>{escape(title)}</title>",
        f'<rect width="{wide}" height="{size + 30}" fill="#fff"/>',
        f'<text x="8" y="16" font-size="13" font-weight="bold">{escape(title)}</text>',
    ]
    top = max((c for row in counts for c in row), default=0) or 1
    for i, name in enumerate(labels):
        y = 110 + i * cell
        parts.append(
            f'<text x="96" y="{y + cell / 2 + 3:.1f}" text-anchor="end">{escape(name[:12])}</text>'
        )
        parts.append(
            f'<text transform="translate({100 + i * cell + cell / 2 + 3:.1f} 104) rotate(-60)">'
            f"{escape(name[:12])}</text>"
        )
        for j in range(n):
            c = counts[i][j]
            if i == j:
                fill = "#ddd"
            elif c == 0:
                fill = "#8fd19e"
            else:
                fill = f"rgb(213,{int(160 - 140 * c / top)},{int(120 - 110 * c / top)})"
            x = 100 + j * cell
            parts.append(
                f'<rect x="{x}" y="{y - 0}" width="{cell - 1}" height="{cell - 1}" fill="{fill}">'
                f"<title>{escape(name)} vs {escape(labels[j])}: {c}</title></rect>"
            )
            if c and cell >= 18:
                parts.append(
                    f'<text x="{x + cell / 2:.1f}" y="{y + cell / 2 + 3:.1f}" '
                    f'text-anchor="middle" fill="#fff">{c}</text>'
                )
    return "".join(parts) + "</svg>"
