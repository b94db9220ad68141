"""The report: a self-contained HTML page and a plain-text table, both from ``summary.json``.

Everything shown is in the summary, so a report can be re-rendered from a saved
summary without Spark. The HTML has inline CSS and inline SVG plots
(``gossamer.analysis.svg``): no script, no external file, one page to attach to a
bug report.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

from gossamer.analysis import svg

__all__ = [
    "END_TO_END",
    "INSIDE_THE_SERVER",
    "fault_window_lines",
    "gateway_latency_lines",
    "listed_checks",
    "on_run_clock",
    "plots",
    "render_html",
    "status_text",
    "text_table",
    "time_origin",
    "unfinished_note",
    "verdict_text",
]

_CSS = """
body{font-family:system-ui,sans-serif;margin:24px auto;max-width:1100px;color:#222;padding:0 16px}
h1{font-size:22px;margin-bottom:4px} h2{font-size:17px;margin-top:28px;border-bottom:1px solid #ddd}
h3{font-size:14px;margin:18px 0 6px}
table{border-collapse:collapse;font-size:12px;margin:6px 0}
td,th{border:1px solid #ddd;padding:3px 7px;text-align:left;vertical-align:top}
th{background:#f4f4f4} td.n{text-align:right;font-variant-numeric:tabular-nums}
.badge{display:inline-block;padding:2px 10px;border-radius:4px;color:#fff;font-weight:bold}
.pass{background:#1a7f37} .fail{background:#cf222e} .skipped{background:#8c959f}
.meta{color:#555;font-size:13px} .run{font-size:14px;margin:4px 0}
.plots svg{display:block;margin:10px 0;border:1px solid #eee;max-width:100%;height:auto}
code{background:#f4f4f4;padding:0 3px}
"""


#: How the two gateway latencies are labelled wherever they are shown.
END_TO_END = "end to end, client to client"
INSIDE_THE_SERVER = "inside the server: route to hand-over"


def _badge(status: str, text: str | None = None) -> str:
    shown = status.upper() if text is None else text
    return f'<span class="badge {escape(status)}">{escape(shown)}</span>'


def _cell(value: Any) -> str:
    if value is None:
        return "<td></td>"  # not measured, or not traced: blank, never a misleading 0
    if isinstance(value, bool):
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


def time_origin(summary: Mapping[str, Any]) -> tuple[float, str]:
    """The instant the report's time axes count from, and the axis label.

    A lab run's workload start (``run.json`` ``lab.start_at``: faults are scheduled from
    it, so a crash "at 13 s" is drawn at 13), else the run's first event. Trace times
    are ``CLOCK_MONOTONIC`` seconds (or virtual time): meaningless to a reader as such.
    """
    lab = summary.get("scenario", {}).get("lab") or {}
    start = lab.get("start_at")
    if isinstance(start, int | float):
        return float(start), "seconds since the workload started"
    return float(summary["metrics"]["time_range"]["start"]), "seconds since the first event"


#: A trace time written into a checker's text (``detail``): ``t=<seconds>``.
_TRACE_TIME = re.compile(r"\bt=(-?[0-9]+(?:\.[0-9]+)?)")


def _is_time_column(name: str) -> bool:
    """Whether a violation column holds a trace time: ``t``, or a name ending in ``_at``
    (``crashed_at``; not ``at``, which is a ``file:line``)."""
    return name == "t" or name.endswith("_at")


def on_run_clock(row: Mapping[str, Any], origin: float) -> dict[str, Any]:
    """A violation (or table) row with its trace times counted from ``origin``
    (``time_origin``): time columns (``_is_time_column``) shifted, and each ``t=<seconds>``
    in its text written as ``<seconds> s``. ``summary.json`` keeps the trace times;
    what a reader sees counts from the run's start, like the time axes."""
    out: dict[str, Any] = {}
    for key, value in row.items():
        if _is_time_column(key) and isinstance(value, int | float) and not isinstance(value, bool):
            out[key] = round(float(value) - origin, 6)
        elif isinstance(value, str):
            out[key] = _TRACE_TIME.sub(lambda m: f"{float(m.group(1)) - origin:.3f} s", value)
        else:
            out[key] = value
    return out


def plots(summary: Mapping[str, Any]) -> list[str]:
    """The report's SVG plots, for the metrics the run has."""
    m = summary.get("metrics", {})
    out: list[str] = []
    axis = time_origin(summary) if m.get("time_range") else (0.0, "")
    origin, time_label = axis
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
    out.extend(_gateway_latency_plot(m))
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
        start = float(m["time_range"]["start"]) - origin
        width = float(m["timeline"]["width"])
        mem = d["membership"]
        xs = [start + (r["bin"] + 1) * width for r in mem["bands"]]
        stops = {n: float(t) - origin for n, t in (mem.get("stops") or {}).items()}
        crashes = _crashes(m, origin)
        if mem["nodes"]:
            series = [
                _until_stop(node, xs, [float(v) for v in sizes], stops.get(node), crashes.get(node))
                for node, sizes in sorted(mem["nodes"].items())
            ]
        else:
            series = [
                svg.Series(
                    name=k, xs=xs, ys=[float(r[k]) for r in mem["bands"]], dashed=k != "mean"
                )
                for k in ("min", "mean", "max")
            ]
        marks = _outage_marks(m, origin)
        if stops:
            marks.append((min(stops.values()), "nodes stop"))
        out.append(
            svg.line_chart(
                series,
                title="Membership: view size per node over time (a line ends where its node "
                "shut down)",
                x_label=time_label,
                y_label="peers in view",
                step=True,
                markers=marks,
                y_min=0.0,
            )
        )
    tl = m.get("timeline", {})
    if tl.get("rows"):
        out.append(
            _binned_chart(m, tl["rows"], "layer", "events", "Events per layer over time", axis=axis)
        )
    faults = m.get("faults", {})
    if faults.get("timeline") or faults.get("outages"):
        out.append(
            _binned_chart(
                m,
                faults.get("timeline", []),
                "fault",
                "count",
                "Injected faults over time (lines: per-datagram; marks: crashes, partitions)",
                axis=axis,
            )
        )
    return out


def _until_stop(
    node: str, xs: list[float], ys: list[float], stop: float | None, crash: float | None
) -> svg.Series:
    """A node's view-size line, ended where the node ended: at its clean stop (its own
    leave empties its view: drawn on, that would read as a failure) or its crash (after
    which it has no view at all, whatever it last traced)."""
    end, how = (crash, "crashed") if crash is not None else (stop, "stopped")
    if end is None:
        return svg.Series(name=node, xs=xs, ys=ys)
    kept = [(x, y) for x, y in zip(xs, ys, strict=True) if x < end]
    if kept:
        kept.append((end, kept[-1][1]))
    return svg.Series(name=f"{node} ({how})", xs=[x for x, _ in kept], ys=[y for _, y in kept])


def _outage_marks(m: Mapping[str, Any], origin: float) -> list[tuple[float, str]]:
    """One mark per crash, partition, heal: the same fault traced by several nodes within
    half a second (a loopback partition is traced by every node for its own window) is
    one mark naming them."""
    groups: list[tuple[float, str, list[str]]] = []
    for r in m.get("faults", {}).get("outages", []):
        t, fault, node = float(r["t"]) - origin, str(r["fault"]), str(r["node"])
        same = next((g for g in groups if g[1] == fault and _close(g[0], t)), None)
        if same is None:
            groups.append((t, fault, [node]))
        elif node not in same[2]:
            same[2].append(node)
    return [
        (t, f"{fault} {nodes[0]}" if len(nodes) == 1 else f"{fault} ({len(nodes)} nodes)")
        for t, fault, nodes in groups
    ]


#: Seconds within which one fault traced by several nodes is the same fault (a loopback
#: partition is traced by every node, each at its own instant).
_SAME_FAULT = 0.5


def _close(a: float | None, b: float | None) -> bool:
    """Two traced instants of one fault (``None``: never, e.g. a window without an end)."""
    if a is None or b is None:
        return a is b
    return abs(a - b) < _SAME_FAULT


def _crashes(m: Mapping[str, Any], origin: float) -> dict[str, float]:
    """Each crashed node's first crash, on the report's time axis."""
    out: dict[str, float] = {}
    for r in m.get("faults", {}).get("outages", []):
        if r["fault"] == "crash":
            out.setdefault(str(r["node"]), float(r["t"]) - origin)
    return out


def _binned_chart(
    m: Mapping[str, Any],
    rows: Sequence[Mapping[str, Any]],
    key: str,
    value: str,
    title: str,
    *,
    axis: tuple[float, str],
) -> str:
    origin, time_label = axis
    start = float(m["time_range"]["start"]) - origin
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
        x_label=time_label,
        y_label=f"{value} per {width:.3g} s",
        markers=_outage_marks(m, origin),
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


def listed_checks(summary: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The checks the report lists: all of them, except, for a lab run (whose
    ``run.json`` names the checks its scenario exercises), those skipped that the
    scenario cannot exercise (``demo.pings`` in the demo, ``gossip.depth`` with a crash):
    always skipped there, they would only be noise."""
    checks = list(summary["checks"])
    expected = (summary.get("scenario", {}).get("lab") or {}).get("expected_checks")
    if not isinstance(expected, list):
        return checks
    return [c for c in checks if c["status"] != "skipped" or c["name"] in expected]


def _not_listed(summary: Mapping[str, Any]) -> str:
    shown = {c["name"] for c in listed_checks(summary)}
    hidden = [c["name"] for c in summary["checks"] if c["name"] not in shown]
    if not hidden:
        return ""
    return (
        '<p class="meta">Not applicable to this scenario (not run): '
        + ", ".join(f"<code>{escape(n)}</code>" for n in hidden)
        + ".</p>"
    )


def _checks_section(summary: Mapping[str, Any]) -> str:
    origin = _origin(summary)
    head = "".join(
        f"<th>{h}</th>" for h in ("check", "status", "violations", "unfinished", "property", "note")
    )
    body = "".join(
        f"<tr><td><code>{escape(c['name'])}</code></td><td>{_badge(c['status'])}</td>"
        f'<td class="n">{c["violations"]:,}</td>'
        f'<td class="n">{_count(c.get("unfinished"))}</td><td>{escape(c["property"])}</td>'
        f"<td>{escape(c['note'])}</td></tr>"
        for c in listed_checks(summary)
    )
    parts = [f"<h2>Checks</h2><table><tr>{head}</tr>{body}</table>", _not_listed(summary)]
    for c in listed_checks(summary):
        columns = ["detail"] + [k for k in c["columns"] if k not in ("detail", "unfinished")]
        if c["status"] == "fail":
            shown = len(c["first_violations"])
            parts.append(
                f"<h3><code>{escape(c['name'])}</code>: first {shown} of "
                f"{c['violations']:,} violations</h3>"
                + _table(columns, [on_run_clock(r, origin) for r in c["first_violations"]])
            )
        if c.get("first_unfinished"):
            shown = len(c["first_unfinished"])
            parts.append(
                f"<h3><code>{escape(c['name'])}</code>: first {shown} of {c['unfinished']:,} "
                "unfinished at a clean stop (not violations: the run stopped before they "
                "could finish)</h3>"
                + _table(columns, [on_run_clock(r, origin) for r in c["first_unfinished"]])
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
            # Both ends of the gateway's figure are the server's (its table below says so).
            "layer": f"gateway ({INSIDE_THE_SERVER})" if r["layer"] == "gateway" else r["layer"],
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
        parts.extend(_gateway_latency_html(m))
        parts.append(_fault_windows_section(summary))
    kinds = summary["input"].get("kinds")
    traffic = [
        _traced_only({"layer": k, **v}, kinds) for k, v in sorted(m["traffic"]["by_layer"].items())
    ]
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
        parts.append(
            "<h3>Traffic per layer</h3>"
            + _table(cols, traffic)
            + '<p class="meta">Counted from the events each layer traces: <code>send</code>, '
            "<code>recv</code>, <code>deliver</code>, <code>retransmit</code>. A blank cell is "
            "a layer that does not trace that event (ISIS traces each <code>multicast</code>, "
            "not each datagram), not a zero.</p>"
        )
        busiest = [
            _traced_only(r, kinds)
            for r in sorted(m["traffic"]["by_node"], key=lambda r: -int(r["bytes_sent"] or 0))[:10]
        ]
        parts.append(
            "<h3>Busiest nodes (bytes sent)</h3>" + _table([cols[0], "node", *cols[1:]], busiest)
        )
    faults = m["faults"]["totals"]
    if faults:
        configured = _fault_config(summary.get("scenario", {}))
        parts.append("<h3>Injected faults (traced)</h3>")
        parts.append(
            _table(
                ["fault", "count", "as configured"],
                [
                    {"fault": k, "count": v, "as configured": configured.get(k, "")}
                    for k, v in faults.items()
                ],
            )
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
                    [on_run_clock(r, _origin(summary)) for r in d["detections"][:50]],
                )
                + f'<p class="meta">crashed_at, removed_at: {escape(time_origin(summary)[1])}'
                "</p>"
            )
    return "".join(parts)


def _origin(summary: Mapping[str, Any]) -> float:
    """``time_origin``'s instant, for a summary with or without a time range."""
    return time_origin(summary)[0] if summary.get("metrics", {}).get("time_range") else 0.0


#: How the report names each latency scope of ``isis_fault_windows`` (``job``).
_SCOPES = {
    "outside_crash": "outside the crash windows",
    "outside_faults": "outside every fault window (crash or partition)",
}


def _merged_windows(windows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The fault windows with those of one fault traced by several nodes merged, as the
    outage marks are: each keeps the first's times and lists its ``nodes``."""
    groups: list[dict[str, Any]] = []
    for w in windows:
        same = next(
            (
                g
                for g in groups
                if g["fault"] == w["fault"]
                and _close(g["start"], w["start"])
                and _close(g["end"], w["end"])
            ),
            None,
        )
        if same is None:
            groups.append({**w, "nodes": [w["node"]]})
        elif w["node"] not in same["nodes"]:
            same["nodes"].append(w["node"])
    return groups


def _window_text(w: Mapping[str, Any], origin: float, *, brief: bool = False) -> str:
    """One merged fault window in words, on the report's clock (``brief``: without the
    why)."""
    who = w["nodes"][0] if len(w["nodes"]) == 1 else f"({len(w['nodes'])} nodes)"
    start = f"{float(w['start']) - origin:.2f}"
    if w.get("end") is None:
        why = "a correct member never removed it" if w["fault"] == "crash" else "never healed"
        span = f"{w['fault']} {who} {start} s to the end of the run"
        return span if brief else f"{span} ({why})"
    span = f"{w['fault']} {who} {start}-{float(w['end']) - origin:.2f} s"
    if brief:
        return span
    if w["fault"] == "crash":
        last = w.get("last")
        return f"{span} (until {last}, the last correct member, installed a view without it)"
    return f"{span} (to its heal)"


def _window_scopes(summary: Mapping[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """``(scope, row)`` for the ISIS latency scopes this run has windows for: outside the
    crash windows if any crash, outside every window if any other fault; none when
    nothing was delivered in total order (a fault window of a run without ISIS traffic)."""
    m = summary.get("metrics", {})
    fw = m.get("isis_fault_windows") or {}
    by_layer = (m.get("latency") or {}).get("by_layer") or []
    if not any(r.get("layer") == "isis" and r.get("count") for r in by_layer):
        return []
    faults = {w["fault"] for w in fw.get("windows", [])}
    latency = fw.get("latency") or {}
    out = []
    if "crash" in faults and "outside_crash" in latency:
        out.append(("outside_crash", latency["outside_crash"]))
    if faults - {"crash"} and "outside_faults" in latency:
        out.append(("outside_faults", latency["outside_faults"]))
    return out


def _fault_windows_section(summary: Mapping[str, Any]) -> str:
    """ISIS latency overall and outside the fault windows, and the windows themselves."""
    m = summary["metrics"]
    fw = m.get("isis_fault_windows")
    overall = next((r for r in m["latency"]["by_layer"] if r["layer"] == "isis"), None)
    if fw is None or overall is None:
        return ""
    if not fw["windows"]:
        return (
            '<p class="meta">ISIS: no crash or partition, hence no fault window: every '
            f"delivery is outside one.{escape(_withdrawn_text(fw))}</p>"
        )
    origin = _origin(summary)
    rows = [("overall (every delivery)", overall)] + [
        (_SCOPES[scope], row) for scope, row in _window_scopes(summary)
    ]
    table = _table(
        ["ISIS deliveries", "count", "p50 ms", "p90 ms", "p99 ms", "max ms"],
        [
            {
                "ISIS deliveries": name,
                "count": r["count"],
                **{f"{k} ms": _ms(r[k]) for k in ("p50", "p90", "p99", "max")},
            }
            for name, r in rows
        ],
    )
    windows = "; ".join(_window_text(w, origin) for w in _merged_windows(fw["windows"]))
    return (
        "<h3>ISIS latency outside the fault windows</h3>"
        + table
        + f'<p class="meta">Fault windows ({escape(time_origin(summary)[1])}): '
        f"{escape(windows)}. A message is inside a window when its lifetime, from its "
        "multicast to its last delivery at any node, overlaps it; all its deliveries are "
        f"then left out of the rows that are outside it.{escape(_withdrawn_text(fw))}</p>"
    )


def _withdrawn_text(fw: Mapping[str, Any]) -> str:
    """The sentence on the messages withdrawn at a view change (empty when none)."""
    count = fw.get("withdrawn") or 0
    if not count:
        return ""
    return (
        f" {count:,} message{'s' if count != 1 else ''} withdrawn by a view change and "
        "multicast again under new ids: their latency runs from the first multicast, so "
        "it includes the wait for the view change."
    )


def fault_window_lines(summary: Mapping[str, Any]) -> list[str]:
    """The console's lines for ISIS latency outside the fault windows (none without one),
    each naming its windows on the report's clock."""
    fw = summary.get("metrics", {}).get("isis_fault_windows") or {}
    origin, label = time_origin(summary) if fw.get("windows") else (0.0, "")
    lines = []
    for scope, r in _window_scopes(summary):
        named = ", ".join(
            _window_text(w, origin, brief=True)
            for w in _merged_windows(fw["windows"])
            if scope == "outside_faults" or w["fault"] == "crash"
        )
        lines.append(
            f"latency isis {_SCOPES[scope]}: p50 {_ms(r['p50'])} ms, p99 {_ms(r['p99'])} ms, "
            f"max {_ms(r['max'])} ms over {r['count']} deliveries ({named}; {label})"
        )
    if text := _withdrawn_text(fw).strip():
        lines.append(f"isis: {text}")
    return lines


#: The event kind each traffic column counts (``metrics._traffic_columns``).
_TRAFFIC_KINDS = {
    "sent": "send",
    "bytes_sent": "send",
    "received": "recv",
    "bytes_received": "recv",
    "delivered": "deliver",
    "retransmitted": "retransmit",
}


def _traced_only(row: Mapping[str, Any], kinds: Mapping[str, int] | None) -> dict[str, Any]:
    """``row`` with the counts of events its layer never traces blanked (``None``)."""
    out = dict(row)
    if kinds is None:
        return out
    for column, kind in _TRAFFIC_KINDS.items():
        if column in out and not kinds.get(f"{row['layer']}/{kind}"):
            out[column] = None
    return out


def _percent(p: Any) -> str:
    return f"{float(p) * 100:g} %"


def _fault_config(scen: Mapping[str, Any]) -> dict[str, str]:
    """Each traced fault kind as the run configured it (``run.json`` ``faults``)."""
    f = scen.get("faults") or {}
    out: dict[str, str] = {}
    if f.get("drop"):
        out["drop"] = f"each UDP datagram dropped with probability {_percent(f['drop'])}"
    if f.get("delay_ms"):
        rate = f.get("delay_rate") or 1.0
        out["reorder"] = (
            f"delay {f['delay_ms']:g} ms on {_percent(rate)} of UDP datagrams (later ones "
            "overtake them: traced as reorder)"
        )
    if f.get("duplicate"):
        chance = _percent(f["duplicate"])
        out["duplicate"] = f"each UDP datagram duplicated with probability {chance}"
    crashes = f.get("crash") or []
    if crashes:
        out["crash"] = "SIGKILL " + ", ".join(_at(c) for c in crashes)
    partitions = f.get("partition") or []
    if partitions:
        out["partition"] = "isolated " + ", ".join(_at(p) for p in partitions)
        out["heal"] = "end of each partition"
    return out


def _at(spec: Any) -> str:
    """``h1@13`` as ``h1 at 13 s``; ``h2,h3@6-8`` as ``h2,h3 from 6 to 8 s``."""
    who, _, when = str(spec).partition("@")
    start, dash, end = when.partition("-")
    return f"{who} from {start} to {end} s" if dash else f"{who} at {when} s"


def _run_header(summary: Mapping[str, Any]) -> str:
    """What the run was: scenario, hosts, placement, duration, settling, faults."""
    scen = summary.get("scenario", {})
    if not scen.get("scenario"):
        return ""
    lab = scen.get("lab") or {}
    items = [
        f"scenario <code>{escape(str(scen['scenario']))}</code>",
        f"{scen.get('nodes', '?')} hosts",
    ]
    if lab.get("mode") == "netns":
        subnets = lab.get("subnets") or []
        items.append(f"in network namespaces, {len(subnets)} subnet(s)")
    elif lab.get("mode"):
        items.append(f"on {escape(str(lab['mode']))} (127.0.0.1)")
    if lab.get("services"):
        items.append("services " + ", ".join(escape(str(x)) for x in lab["services"]))
    if scen.get("duration") is not None:
        items.append(f"workload {scen['duration']:g} s")
    settle = lab.get("settle") or {}
    if settle:
        if settle.get("settled"):
            items.append(
                f"settled {settle['seconds']:g} s after the workload; nodes stopped at "
                f"{settle['stopped_after']:g} s after it"
            )
        else:
            items.append(
                f"<b>not settled</b>: nodes stopped {settle.get('stopped_after', 0):g} s after "
                "the workload with messages in flight"
            )
    items.append(f"seed {scen.get('seed', '?')}")
    configured = _fault_config(scen)
    order = ("drop", "reorder", "duplicate", "crash", "partition")
    faults = "; ".join(configured[k] for k in order if k in configured) or "none"
    return (
        f'<p class="run">{" · ".join(items)}</p>'
        f'<p class="run">Faults injected: {escape(faults)}</p>'
    )


def render_html(summary: Mapping[str, Any]) -> str:
    """The complete report page for a summary (``gossamer.analysis.job.analyze``)."""
    inp = summary["input"]
    counts = summary["counts"]
    title = f"gossamer analysis: {summary.get('run') or inp['run_dir']}"
    meta = [
        f"{inp['events']:,} events from {inp['files']} files",
        f"{inp['bad_lines']:,} malformed lines",
    ]
    span = summary["metrics"]["time_range"]
    origin, label = time_origin(summary)
    meta.append(
        f"traces from {span['start'] - origin:.2f} to {span['end'] - origin:.2f} s ({label})"
    )
    spark = summary.get("spark", {})
    meta.append(f"Spark {escape(str(spark.get('version')))} on {escape(str(spark.get('master')))}")
    svgs = "".join(plots(summary))
    params = _table(
        ["parameter", "value"], [{"parameter": k, "value": v} for k, v in summary["params"].items()]
    )
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f"<title>{escape(title)}</title><style>{_CSS}</style></head><body>"
        f"<h1>{escape(title)} {_badge(summary['verdict'], verdict_text(summary))}</h1>"
        + _run_header(summary)
        + f'<p class="meta">{" · ".join(meta)}</p>'
        f"<p>{counts['pass']} checks hold, {counts['fail']} violated, "
        f"{len(listed_checks(summary)) - counts['pass'] - counts['fail']} skipped"
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
    checks = listed_checks(summary)
    origin = _origin(summary)
    width = max(len(c["name"]) for c in checks)
    lines = [f"{'check':<{width}}  {'status':<7}  {'violations':>10}  note"]
    for c in checks:
        note = c["note"]
        if c["status"] == "fail" and c["first_violations"]:
            note = str(c["first_violations"][0].get("detail", ""))
        elif c.get("first_unfinished"):
            note = f"{unfinished_note(c)}, e.g. {c['first_unfinished'][0].get('detail', '')}"
        note = on_run_clock({"note": note}, origin)["note"]
        lines.append(f"{c['name']:<{width}}  {c['status']:<7}  {c['violations']:>10}  {note}")
    for r in summary["metrics"]["latency"]["by_layer"]:
        lines.append(
            f"latency {r['layer']}: p50 {_ms(r['p50'])} ms, p99 {_ms(r['p99'])} ms, "
            f"max {_ms(r['max'])} ms over {r['count']} deliveries"
            # As in the HTML report: both ends are the server's, never the clients'.
            + (f" ({INSIDE_THE_SERVER})" if r["layer"] == "gateway" else "")
        )
    lines.extend(gateway_latency_lines(summary))
    lines += fault_window_lines(summary)
    inp = summary["input"]
    lines.append(
        f"input: {inp['events']} events from {inp['files']} files, "
        f"{inp['bad_lines']} malformed lines skipped"
    )
    counts = summary["counts"]
    skipped = len(checks) - counts["pass"] - counts["fail"]
    lines.append(
        f"verdict: {verdict_text(summary)} ({counts['pass']} hold, {counts['fail']} violated,"
        f" {skipped} skipped)"
    )
    return "\n".join(lines)


# -- gateway latency: end to end (the clients' traces) and inside the server ------------


def _gateway_rows(m: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The gateway's latency rows, each labelled: the clients' end-to-end figure per
    dispatch type, then the server's own (route to hand-over)."""
    lat = m.get("latency", {})
    rows: list[dict[str, Any]] = []
    for r in lat.get("gateway_end_to_end", {}).get("by_type", []):
        queued = " (waits in the queue too)" if r["type"] == "QUEUE" else ""
        rows.append({"measured": f"{r['type']} {END_TO_END}{queued}", **r})
    for r in lat.get("by_layer", []):
        if r["layer"] == "gateway":
            rows.append({"measured": INSIDE_THE_SERVER, **r})
    return rows


def _gateway_latency_html(m: Mapping[str, Any]) -> list[str]:
    rows = _gateway_rows(m)
    if not rows:
        return []
    shown = [
        {
            "gateway latency": r["measured"],
            "count": r["count"],
            **{k: _ms(r[k.removesuffix(" ms")]) for k in ("p50 ms", "p90 ms", "p99 ms", "max ms")},
        }
        for r in rows
    ]
    cols = ["gateway latency", "count", "p50 ms", "p90 ms", "p99 ms", "max ms"]
    note = (
        '<p class="meta">End to end: from the sending client\'s <code>client_send</code> '
        "(the application handed the message over) to each receiving client's "
        "<code>client_recv</code>, joined on the nonce; the clients are in different "
        "processes, on lab hosts that share one machine's monotonic clock. Inside the "
        "server: from its <code>route</code> (or <code>enqueue</code>) to its hand-over to "
        "the receiver's connection, both traced by the server.</p>"
    )
    if not m.get("latency", {}).get("gateway_end_to_end"):
        note = (
            '<p class="meta">Only the server\'s figure: the clients of this run do not trace '
            "(a client opened with <code>tracer=</code> does), so there is no end-to-end "
            "latency.</p>"
        )
    return ["<h3>Gateway latency</h3>", _table(cols, shown), note]


def _gateway_latency_plot(m: Mapping[str, Any]) -> list[str]:
    lat = m.get("latency", {})
    end_to_end = lat.get("gateway_end_to_end", {}).get("cdf", {})
    if not end_to_end:
        return []
    # Legends hold 16 characters: the title says what the two kinds of curve are.
    curves = {f"{kind} (e2e)": qs for kind, qs in sorted(end_to_end.items())}
    if lat.get("cdf", {}).get("gateway"):
        curves["in the server"] = lat["cdf"]["gateway"]
    series = [
        svg.Series(
            name=name,
            xs=[q * 1000 for q in qs],
            ys=[i / (len(qs) - 1) for i in range(len(qs))] if len(qs) > 1 else [1.0],
        )
        for name, qs in curves.items()
        if qs
    ]
    return [
        svg.line_chart(
            series,
            title="Gateway latency CDF: e2e = end to end, client to client; "
            "in the server = route to hand-over",
            x_label="latency (ms)",
            y_label="fraction of receipts",
            y_min=0.0,
        )
    ]


def gateway_latency_lines(summary: Mapping[str, Any]) -> list[str]:
    """The console's end-to-end gateway latency lines (the server's own is a latency
    line of its layer, labelled ``INSIDE_THE_SERVER``)."""
    by_type = summary["metrics"]["latency"].get("gateway_end_to_end", {}).get("by_type", [])
    return [
        f"latency gateway {r['type']} ({END_TO_END}): p50 {_ms(r['p50'])} ms, "
        f"p99 {_ms(r['p99'])} ms, max {_ms(r['max'])} ms over {r['count']} receipts"
        for r in by_type
    ]
