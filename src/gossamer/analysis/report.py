"""The report: a self-contained HTML page and a plain-text table, both from ``summary.json``.

Everything shown is in the summary, so a report can be re-rendered from a saved
summary without Spark. The HTML has inline CSS and inline SVG plots
(``gossamer.analysis.svg``): no script, no external file, one page to attach to a
bug report.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

from gossamer.analysis import svg

__all__ = ["plots", "render_html", "status_text", "text_table", "unfinished_note", "verdict_text"]

_CSS = """
body{font-family:system-ui,sans-serif;margin:24px auto;max-width:1100px;color:#222;padding:0 16px}
h1{font-size:22px;margin-bottom:4px} h2{font-size:17px;margin-top:28px;border-bottom:1px solid #ddd}
h3{font-size:14px;margin:18px 0 6px}
table{border-collapse:collapse;font-size:12px;margin:6px 0}
td,th{border:1px solid #ddd;padding:3px 7px;text-align:left;vertical-align:top}
th{background:#f4f4f4} td.n{text-align:right;font-variant-numeric:tabular-nums}
.badge{display:inline-block;padding:2px 10px;border-radius:4px;color:#fff;font-weight:bold}
.pass{background:#1a7f37} .fail{background:#cf222e} .skipped{background:#8c959f}
.meta{color:#555;font-size:13px} .plots svg{margin:6px 12px 6px 0;border:1px solid #eee}
code{background:#f4f4f4;padding:0 3px}
"""


def _badge(status: str) -> str:
    return f'<span class="badge {escape(status)}">{escape(status.upper())}</span>'


def _cell(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return f"<td>{escape(str(value))}</td>"
    if isinstance(value, int | float):
        text = f"{value:,.6g}" if isinstance(value, float) else f"{value:,}"
        return f'<td class="n">{escape(text)}</td>'
    if isinstance(value, list | tuple):
        return f"<td>{escape(', '.join(str(v) for v in value))}</td>"
    return f"<td>{escape(str(value))}</td>"


def _table(columns: Sequence[str], rows: Sequence[Mapping[str, Any]]) -> str:
    head = "".join(f"<th>{escape(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(_cell(r.get(c)) for c in columns) + "</tr>" for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _ms(v: Any) -> Any:
    return None if v is None else round(float(v) * 1000, 3)


def plots(summary: Mapping[str, Any]) -> list[str]:
    """The report's SVG plots, for the metrics the run has."""
    m = summary.get("metrics", {})
    out: list[str] = []
    cdf = m.get("latency", {}).get("cdf", {})
    if cdf:
        series = []
        for layer, qs in sorted(cdf.items()):
            if qs:
                probs = [i / (len(qs) - 1) for i in range(len(qs))] if len(qs) > 1 else [1.0]
                series.append(svg.Series(name=layer, xs=[q * 1000 for q in qs], ys=probs))
        out.append(
            svg.line_chart(
                series,
                title="Delivery latency CDF (send to deliver)",
                x_label="latency (ms)",
                y_label="fraction of deliveries",
                y_min=0.0,
            )
        )
    matrix = m.get("isis", {}).get("order_matrix")
    if matrix:
        out.append(
            svg.heatmap(
                matrix["nodes"],
                matrix["disagreements"],
                title="ISIS delivery order: disagreements between nodes (green = same order)",
            )
        )
    g = m.get("gossip")
    if g and g.get("depth_histogram"):
        hist = g["depth_histogram"]
        out.append(
            svg.bar_chart(
                [str(r["hop"]) for r in hist],
                [float(r["nodes"]) for r in hist],
                title="Gossip tree depth: hop of each node's first copy",
                x_label="hops from the origin",
                y_label="(broadcast, node) pairs",
            )
        )
    d = m.get("discovery")
    if d and d.get("membership", {}).get("bands"):
        start = float(m["time_range"]["start"])
        width = float(m["timeline"]["width"])
        mem = d["membership"]
        xs = [start + (r["bin"] + 1) * width for r in mem["bands"]]
        if mem["nodes"]:
            series = [
                svg.Series(name=node, xs=xs, ys=[float(v) for v in sizes])
                for node, sizes in sorted(mem["nodes"].items())
            ]
        else:
            series = [
                svg.Series(
                    name=k, xs=xs, ys=[float(r[k]) for r in mem["bands"]], dashed=k != "mean"
                )
                for k in ("min", "mean", "max")
            ]
        out.append(
            svg.line_chart(
                series,
                title="Membership: view size per node over time",
                x_label="time (s)",
                y_label="peers in view",
                step=True,
                markers=_outage_marks(m),
                y_min=0.0,
            )
        )
    tl = m.get("timeline", {})
    if tl.get("rows"):
        out.append(_binned_chart(m, tl["rows"], "layer", "events", "Events per layer over time"))
    faults = m.get("faults", {})
    if faults.get("timeline") or faults.get("outages"):
        out.append(
            _binned_chart(
                m,
                faults.get("timeline", []),
                "fault",
                "count",
                "Injected faults over time (lines: per-datagram; marks: crashes, partitions)",
            )
        )
    return out


def _outage_marks(m: Mapping[str, Any]) -> list[tuple[float, str]]:
    return [
        (float(r["t"]), f"{r['fault']} {r['node']}") for r in m.get("faults", {}).get("outages", [])
    ]


def _binned_chart(
    m: Mapping[str, Any], rows: Sequence[Mapping[str, Any]], key: str, value: str, title: str
) -> str:
    start = float(m["time_range"]["start"])
    width = float(m["timeline"]["width"])
    bins = int(m["timeline"]["bins"])
    names = sorted({str(r[key]) for r in rows})
    xs = [start + (b + 0.5) * width for b in range(bins)]
    series = []
    for name in names:
        ys = [0.0] * bins
        for r in rows:
            if str(r[key]) == name:
                ys[int(r["bin"])] += float(r[value])
        series.append(svg.Series(name=name, xs=xs, ys=ys))
    return svg.line_chart(
        series,
        title=title,
        x_label="time (s)",
        y_label=f"{value} per {width:.3g} s",
        markers=_outage_marks(m),
        y_min=0.0,
    )


def unfinished_note(check: Mapping[str, Any]) -> str:
    """``N unfinished at stop`` for a check that left some (else "")."""
    n = int(check.get("unfinished") or 0)
    return f"{n:,} unfinished at stop" if n else ""


def status_text(check: Mapping[str, Any]) -> str:
    """``pass``, ``fail``, ``skipped``, or ``pass (N unfinished at stop)``: a check that
    held only because the run stopped before some messages could finish is not a plain
    pass."""
    note = unfinished_note(check)
    return f"{check['status']} ({note})" if note and check["status"] == "pass" else check["status"]


def verdict_text(summary: Mapping[str, Any]) -> str:
    """The run's verdict in words: ``PASS``, ``FAIL``, or ``PASS (N unfinished at stop)``."""
    verdict = str(summary["verdict"]).upper()
    unfinished = int(summary["counts"].get("unfinished") or 0)
    if unfinished and summary["verdict"] == "pass":
        return f"{verdict} ({unfinished:,} unfinished at stop)"
    return verdict


def _count(n: Any) -> str:
    """A count for a table cell: blank for none."""
    return f"{int(n):,}" if n else ""


def _checks_section(summary: Mapping[str, Any]) -> str:
    head = "".join(
        f"<th>{h}</th>" for h in ("check", "status", "violations", "unfinished", "property", "note")
    )
    body = "".join(
        f"<tr><td><code>{escape(c['name'])}</code></td><td>{_badge(c['status'])}</td>"
        f'<td class="n">{c["violations"]:,}</td>'
        f'<td class="n">{_count(c.get("unfinished"))}</td><td>{escape(c["property"])}</td>'
        f"<td>{escape(c['note'])}</td></tr>"
        for c in summary["checks"]
    )
    parts = [f"<h2>Checks</h2><table><tr>{head}</tr>{body}</table>"]
    for c in summary["checks"]:
        columns = ["detail"] + [k for k in c["columns"] if k not in ("detail", "unfinished")]
        if c["status"] == "fail":
            shown = len(c["first_violations"])
            parts.append(
                f"<h3><code>{escape(c['name'])}</code>: first {shown} of "
                f"{c['violations']:,} violations</h3>" + _table(columns, c["first_violations"])
            )
        if c.get("first_unfinished"):
            shown = len(c["first_unfinished"])
            parts.append(
                f"<h3><code>{escape(c['name'])}</code>: first {shown} of {c['unfinished']:,} "
                "unfinished at a clean stop (not violations: the run stopped before they "
                "could finish)</h3>" + _table(columns, c["first_unfinished"])
            )
    return "".join(parts)


def _input_section(summary: Mapping[str, Any]) -> str:
    inp = summary["input"]
    parts = ["<h2>Input</h2>"]
    layers = [{"layer": k, "events": v} for k, v in inp["layers"].items()]
    parts.append(_table(["layer", "events"], layers))
    if inp["bad_lines"]:
        parts.append(
            f"<h3>{inp['bad_lines']:,} malformed lines skipped (first "
            f"{len(inp['first_bad_lines'])})</h3>"
        )
        parts.append(_table(["file", "line", "reason"], inp["first_bad_lines"]))
    for w in inp.get("warnings", []):
        parts.append(f"<p>⚠ {escape(w)}</p>")
    return "".join(parts)


def _metrics_section(summary: Mapping[str, Any]) -> str:
    m = summary["metrics"]
    parts = ["<h2>Metrics</h2>"]
    lat = [
        {
            "layer": r["layer"],
            "deliveries": r["count"],
            "p50 ms": _ms(r["p50"]),
            "p90 ms": _ms(r["p90"]),
            "p99 ms": _ms(r["p99"]),
            "max ms": _ms(r["max"]),
        }
        for r in m["latency"]["by_layer"]
    ]
    if lat:
        parts.append("<h3>Latency, send to deliver</h3>")
        parts.append(_table(["layer", "deliveries", "p50 ms", "p90 ms", "p99 ms", "max ms"], lat))
    traffic = [{"layer": k, **v} for k, v in sorted(m["traffic"]["by_layer"].items())]
    if traffic:
        cols = [
            "layer",
            "sent",
            "bytes_sent",
            "received",
            "bytes_received",
            "delivered",
            "retransmitted",
        ]
        parts.append("<h3>Traffic per layer</h3>" + _table(cols, traffic))
        busiest = sorted(m["traffic"]["by_node"], key=lambda r: -int(r["bytes_sent"] or 0))[:10]
        parts.append(
            "<h3>Busiest nodes (bytes sent)</h3>" + _table([cols[0], "node", *cols[1:]], busiest)
        )
    faults = m["faults"]["totals"]
    if faults:
        parts.append("<h3>Injected faults</h3>")
        parts.append(
            _table(["fault", "count"], [{"fault": k, "count": v} for k, v in faults.items()])
        )
    g = m.get("gossip", {}).get("per_broadcast")
    if g:
        parts.append("<h3>Gossip, per broadcast</h3>" + _table(list(g), [g]))
    d = m.get("discovery")
    if d:
        secs = sorted(r["seconds"] for r in d["full_view"] if r["seconds"] is not None)
        never = sum(r["seconds"] is None for r in d["full_view"])
        row = {
            "nodes": len(d["full_view"]),
            "median s": secs[len(secs) // 2] if secs else None,
            "max s": secs[-1] if secs else None,
            "never": never,
        }
        parts.append("<h3>Discovery: time to full view</h3>" + _table(list(row), [row]))
        if d["detections"]:
            parts.append(
                "<h3>Discovery: crash detection</h3>"
                + _table(
                    ["crashed", "crashed_at", "observer", "removed_at", "seconds"],
                    d["detections"][:50],
                )
            )
    return "".join(parts)


def render_html(summary: Mapping[str, Any]) -> str:
    """The complete report page for a summary (``gossamer.analysis.job.analyze``)."""
    inp = summary["input"]
    scen = summary.get("scenario", {})
    counts = summary["counts"]
    title = f"gossamer analysis: {summary.get('run') or inp['run_dir']}"
    meta = [
        f"{inp['events']:,} events from {inp['files']} files",
        f"{inp['bad_lines']:,} malformed lines",
    ]
    if scen.get("scenario"):
        meta.append(
            f"scenario <code>{escape(str(scen['scenario']))}</code>, "
            f"{scen.get('nodes', '?')} nodes, seed {scen.get('seed', '?')}"
        )
    span = summary["metrics"]["time_range"]
    meta.append(f"t = {span['start']:.3f} .. {span['end']:.3f} s")
    spark = summary.get("spark", {})
    meta.append(f"Spark {escape(str(spark.get('version')))} on {escape(str(spark.get('master')))}")
    svgs = "".join(plots(summary))
    params = _table(
        ["parameter", "value"], [{"parameter": k, "value": v} for k, v in summary["params"].items()]
    )
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f"<title>{escape(title)}</title><style>{_CSS}</style></head><body>"
        f"<h1>{escape(title)} {_badge(summary['verdict'])}</h1>"
        f'<p class="meta">{" · ".join(meta)}</p>'
        f"<p>{counts['pass']} checks hold, {counts['fail']} violated, "
        f"{counts['skipped']} skipped"
        + (
            f"; {counts['unfinished']:,} messages unfinished at the nodes' clean stop "
            "(listed with their checks below)"
            if counts.get("unfinished")
            else ""
        )
        + ".</p>"
        + _checks_section(summary)
        + f'<h2>Plots</h2><div class="plots">{svgs}</div>'
        + _metrics_section(summary)
        + _input_section(summary)
        + f"<h2>Parameters</h2>{params}"
        + "</body></html>\n"
    )


def text_table(summary: Mapping[str, Any]) -> str:
    """The checks as a plain-text table, plus the latency and input lines, for a terminal."""
    checks = summary["checks"]
    width = max(len(c["name"]) for c in checks)
    lines = [f"{'check':<{width}}  {'status':<7}  {'violations':>10}  note"]
    for c in checks:
        note = c["note"]
        if c["status"] == "fail" and c["first_violations"]:
            note = str(c["first_violations"][0].get("detail", ""))
        elif c.get("first_unfinished"):
            note = f"{unfinished_note(c)}, e.g. {c['first_unfinished'][0].get('detail', '')}"
        lines.append(f"{c['name']:<{width}}  {c['status']:<7}  {c['violations']:>10}  {note}")
    for r in summary["metrics"]["latency"]["by_layer"]:
        lines.append(
            f"latency {r['layer']}: p50 {_ms(r['p50'])} ms, p99 {_ms(r['p99'])} ms, "
            f"max {_ms(r['max'])} ms over {r['count']} deliveries"
        )
    inp = summary["input"]
    lines.append(
        f"input: {inp['events']} events from {inp['files']} files, "
        f"{inp['bad_lines']} malformed lines skipped"
    )
    counts = summary["counts"]
    lines.append(
        f"verdict: {verdict_text(summary)} ({counts['pass']} hold, {counts['fail']} violated,"
        f" {counts['skipped']} skipped)"
    )
    return "\n".join(lines)
