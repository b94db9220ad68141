"""The HTML report and the terminal table, rendered from a summary alone (no Spark)."""

from __future__ import annotations

from typing import Any

from gossamer.analysis import report


def summary() -> dict[str, Any]:
    checks = [
        {
            "name": "isis.total_order",
            "layer": "isis",
            "property": "same order",
            "status": "fail",
            "violations": 2,
            "note": "",
            "seconds": 0.1,
            "columns": ["node_a", "node_b", "detail"],
            "first_violations": [{"node_a": "n0", "node_b": "n2", "detail": "n0 <swapped> n2"}],
        },
        {
            "name": "gossip.depth",
            "layer": "gossip",
            "property": "shallow",
            "status": "skipped",
            "violations": 0,
            "note": "needs --param gossip.max_depth=...",
            "seconds": 0.0,
            "columns": [],
            "first_violations": [],
        },
    ]
    return {
        "run": "r1",
        "verdict": "fail",
        "counts": {"pass": 0, "fail": 1, "skipped": 1},
        "checks": checks,
        "input": {
            "run_dir": "/runs/r1",
            "files": 3,
            "events": 1234,
            "bad_lines": 1,
            "first_bad_lines": [{"file": "/runs/r1/n0.jsonl", "line": 7, "reason": "not JSON"}],
            "layers": {"isis": 1200, "net": 34},
            "warnings": ["skipped 1 lines of unknown layer 'x'"],
        },
        "scenario": {"scenario": "isis", "nodes": 3, "seed": 1},
        "params": {"gossip.min_coverage": 1.0},
        "metrics": {
            "time_range": {"start": 0.0, "end": 2.0},
            "timeline": {
                "bins": 4,
                "width": 0.5,
                "rows": [{"bin": 0, "layer": "isis", "events": 9}],
            },
            "latency": {
                "by_layer": [
                    {
                        "layer": "isis",
                        "count": 3,
                        "mean": 0.01,
                        "p50": 0.01,
                        "p90": 0.02,
                        "p99": 0.02,
                        "max": 0.02,
                    }
                ],
                "by_node": [],
                "cdf": {"isis": [0.0, 0.01, 0.02]},
            },
            "traffic": {"by_layer": {}, "by_node": []},
            "faults": {
                "totals": {"drop": 2},
                "by_node": [],
                "timeline": [{"bin": 1, "fault": "drop", "count": 2}],
                "outages": [{"t": 1.0, "node": "n2", "fault": "crash"}],
            },
            "isis": {"order_matrix": {"nodes": ["n0", "n2"], "disagreements": [[0, 2], [2, 0]]}},
        },
        "spark": {"version": "4", "master": "local[1]"},
    }


def test_html_shows_verdicts_violations_plots_and_bad_input() -> None:
    html = report.render_html(summary())
    assert html.startswith("<!DOCTYPE html>") and html.rstrip().endswith("</html>")
    assert 'class="badge fail"' in html and "isis.total_order" in html
    assert "n0 &lt;swapped&gt; n2" in html  # violations are escaped
    assert "first 1 of 2 violations" in html
    assert html.count("<svg") == len(report.plots(summary())) == 4
    assert "/runs/r1/n0.jsonl" in html and "unknown layer" in html
    assert "<script" not in html


def test_text_table_lists_every_check_and_the_verdict() -> None:
    text = report.text_table(summary())
    lines = text.splitlines()
    assert lines[0].split() == ["check", "status", "violations", "note"]
    assert "isis.total_order" in lines[1] and "fail" in lines[1] and "n0 <swapped> n2" in lines[1]
    assert "needs --param gossip.max_depth" in lines[2]
    assert "latency isis: p50 10.0 ms" in text and "inside the server" not in text
    assert lines[-1] == "verdict: FAIL (0 hold, 1 violated, 1 skipped)"


def lab_summary() -> dict[str, Any]:
    """``summary()`` as a lab demo run's: ``run.json``'s lab block, faults, stops."""
    s = summary()
    s["verdict"] = "pass"
    s["checks"][0].update(
        status="pass",
        violations=0,
        first_violations=[],
        unfinished=3,
        first_unfinished=[{"node_a": "n0", "node_b": "n2", "detail": "n0/7 held back"}],
    )
    s["counts"] = {"pass": 1, "fail": 0, "skipped": 1, "unfinished": 3}
    s["scenario"].update(
        scenario="demo",
        duration=24.0,
        faults={
            "drop": 0.02,
            "delay_ms": 20.0,
            "delay_rate": 0.1,
            "duplicate": 0.0,
            "crash": ["h1@13"],
            "partition": ["h2@6-8"],
        },
        lab={
            "mode": "netns",
            "subnets": ["10.77.1.0/24", "10.77.2.0/24"],
            "services": ["discovery", "isis"],
            "expected_checks": ["isis.total_order"],
            "start_at": 100.0,
            "settle": {"settled": True, "seconds": 1.5, "stopped_after": 4.0},
        },
    )
    m = s["metrics"]
    m["time_range"] = {"start": 95.0, "end": 130.0}
    m["faults"]["totals"] = {"drop": 7, "reorder": 40, "crash": 1}
    m["faults"]["outages"] = [
        {"t": 106.0, "node": "h1", "fault": "partition"},
        {"t": 106.2, "node": "h2", "fault": "partition"},
        {"t": 113.0, "node": "h1", "fault": "crash"},
    ]
    m["traffic"]["by_layer"] = {
        "isis": {
            "sent": 0,
            "bytes_sent": 0,
            "received": 0,
            "bytes_received": 0,
            "delivered": 9,
            "retransmitted": 2,
        }
    }
    m["discovery"] = {
        "membership": {
            "bands": [{"bin": b, "min": 1, "mean": 1, "max": 1} for b in range(4)],
            "nodes": {"h1": [1, 1, 1, 1], "h2": [1, 1, 1, 0]},
            "stops": {"h2": 125.0},
        },
        "full_view": [],
        "detections": [],
    }
    s["input"]["kinds"] = {"isis/deliver": 9, "isis/retransmit": 2, "isis/multicast": 3}
    return s


def test_a_lab_report_states_the_run_and_its_faults_as_configured() -> None:
    html = report.render_html(lab_summary())
    assert "scenario <code>demo</code> · 3 hosts · in network namespaces, 2 subnet(s)" in html
    assert "workload 24 s · settled 1.5 s after the workload" in html
    assert "each UDP datagram dropped with probability 2 %" in html
    # The delay is stated as a delay, with what the traces call it.
    assert "delay 20 ms on 10 % of UDP datagrams" in html and "traced as reorder" in html
    assert "SIGKILL h1 at 13 s" in html and "isolated h2 from 6 to 8 s" in html
    # Skipped checks the scenario cannot exercise are not rows of the table.
    assert "<code>gossip.depth</code></td>" not in html
    assert "Not applicable to this scenario (not run): <code>gossip.depth</code>" in html
    assert "first 1 of 3 unfinished at a clean stop" in html and "n0/7 held back" in html
    assert '<span class="badge pass">PASS (3 unfinished at stop)</span>' in html


def test_lab_report_times_count_from_the_workload_start() -> None:
    s = lab_summary()
    html = report.render_html(s)
    assert "traces from -5.00 to 30.00 s (seconds since the workload started)" in html
    assert report.time_origin(s) == (100.0, "seconds since the workload started")
    membership = next(p for p in report.plots(s) if "Membership" in p)
    assert "seconds since the workload started" in membership
    assert "crash h1" in membership and "nodes stop" in membership
    assert "h2 (stopped)" in membership  # its line ends at its stop, not at zero
    assert "h1 (crashed)" in membership  # and h1's at its crash
    # A partition traced by each node of the run is one mark.
    assert membership.count("partition (2 nodes)") == 1 and "partition h1" not in membership
    plain = summary()
    assert report.time_origin(plain) == (0.0, "seconds since the first event")


def test_traffic_the_layer_does_not_trace_is_blank_not_zero() -> None:
    html = report.render_html(lab_summary())
    row = html[html.index("<h3>Traffic per layer</h3>") :]
    row = row[row.index("<td>isis</td>") :]
    row = row[: row.index("</tr>")]
    # isis: sent/bytes/received blank (not traced), delivered 9, retransmitted 2.
    assert row.count("<td>None</td>") == 0
    assert row.count("<td></td>") == 4
    assert '<td class="n">9</td>' in row and '<td class="n">2</td>' in row


def test_unfinished_messages_are_not_a_plain_pass() -> None:
    s = lab_summary()
    assert report.verdict_text(s) == "PASS (3 unfinished at stop)"
    assert report.status_text(s["checks"][0]) == "pass (3 unfinished at stop)"
    text = report.text_table(s)
    assert "3 unfinished at stop, e.g. n0/7 held back" in text
    assert (
        text.splitlines()[-1]
        == "verdict: PASS (3 unfinished at stop) (1 hold, 0 violated, 0 skipped)"
    )
    assert "gossip.depth" not in text


def test_text_table_says_the_gateway_latency_is_measured_inside_the_server() -> None:
    s = summary()
    row = dict(s["metrics"]["latency"]["by_layer"][0], layer="gateway", p50=0.0, p99=0.0)
    s["metrics"]["latency"]["by_layer"] = [row]
    line = next(x for x in report.text_table(s).splitlines() if x.startswith("latency"))
    assert line.startswith("latency gateway: p50 0.0 ms")
    assert line.endswith("deliveries (inside the server: route to hand-over)")
    assert "<td>gateway (inside the server: route to hand-over)</td>" in report.render_html(s)


def windowed_summary() -> dict[str, Any]:
    """``lab_summary()`` with ISIS fault windows: h2 cut off at 106, h1 crashed at 113."""
    s = lab_summary()
    row = {"count": 3, "mean": 0.01, "p50": 0.01, "p90": 0.02, "p99": 0.02, "max": 0.02}
    s["metrics"]["isis_fault_windows"] = {
        "windows": [
            {"fault": "partition", "node": "h2", "start": 106.0, "end": 108.0, "last": None},
            {"fault": "crash", "node": "h1", "start": 113.0, "end": 117.25, "last": "h4"},
        ],
        "latency": {
            "outside_crash": dict(row, count=2, p50=0.004, p99=0.9),
            "outside_faults": dict(row, count=1, p50=0.003, p99=0.25),
        },
    }
    return s


def test_isis_latency_is_shown_overall_and_outside_each_kind_of_fault_window() -> None:
    s = windowed_summary()
    html = report.render_html(s)
    section = html[html.index("<h3>ISIS latency outside the fault windows</h3>") :]
    section = section[: section.index("</p>")]
    rows = section.split("<tr>")[2:]
    assert rows[0].startswith("<td>overall (every delivery)</td>")
    assert rows[1].startswith("<td>outside the crash windows</td>") and ">900</td>" in rows[1]
    assert rows[2].startswith("<td>outside every fault window (crash or partition)</td>")
    assert ">250</td>" in rows[2] and len(rows) == 3
    # The windows on the report's clock, with what ended each.
    assert "partition h2 6.00-8.00 s (to its heal)" in section
    assert "crash h1 13.00-17.25 s (until h4, the last correct member" in section
    lines = [x for x in report.text_table(s).splitlines() if x.startswith("latency isis")]
    assert lines[1] == (
        "latency isis outside the crash windows: p50 4.0 ms, p99 900.0 ms, max 20.0 ms over 2 "
        "deliveries (crash h1 13.00-17.25 s; seconds since the workload started)"
    )
    assert lines[2].startswith("latency isis outside every fault window (crash or partition)")
    assert lines[2].endswith(
        "(partition h2 6.00-8.00 s, crash h1 13.00-17.25 s; seconds since the workload started)"
    )
    # A loopback partition, traced by each node at its own instant, is one window.
    loopback = [
        {"fault": "partition", "node": n, "start": 106.0 + d, "end": 108.0 + d, "last": None}
        for n, d in (("h1", 0.0), ("h2", 0.01), ("h3", 0.02))
    ]
    s["metrics"]["isis_fault_windows"]["windows"][:1] = loopback
    assert "partition (3 nodes) 6.00-8.00 s (to its heal); crash h1" in report.render_html(s)
    assert "(partition (3 nodes) 6.00-8.00 s, crash h1" in report.text_table(s)
    # Messages withdrawn by a view change: said in the section and on the console.
    assert "withdrawn by a view change" not in report.render_html(s)
    s["metrics"]["isis_fault_windows"]["withdrawn"] = 44
    assert "44 messages withdrawn by a view change and multicast again" in report.render_html(s)
    lines = report.text_table(s).splitlines()
    assert any(x.startswith("isis: 44 messages withdrawn by a view change") for x in lines)
    del s["metrics"]["isis_fault_windows"]["withdrawn"]
    del s["metrics"]["isis_fault_windows"]["windows"][:3]
    # Without a partition, there is no second scope; without any window, no table.
    assert "outside every fault window" not in report.text_table(s)
    s["metrics"]["isis_fault_windows"] = {"windows": [], "latency": {}}
    assert "no crash or partition, hence no fault window" in report.render_html(s)
    assert len([x for x in report.text_table(s).splitlines() if "latency isis" in x]) == 1


def test_violation_times_count_from_the_run_start_as_the_axes_do() -> None:
    s = lab_summary()
    s["verdict"] = "fail"
    s["counts"] = {"pass": 0, "fail": 1, "skipped": 1}
    s["checks"][0].update(
        name="discovery.crash_detection",
        status="fail",
        violations=1,
        columns=["crashed", "observer", "crashed_at", "at", "detail"],
        first_violations=[
            {
                "crashed": "h1",
                "observer": "h3",
                "crashed_at": 113.25,
                "at": "h3.jsonl:40",
                "detail": "h1 crashed at t=113.250 and h3 removed it 9.500 s later",
            }
        ],
    )
    s["scenario"]["lab"]["expected_checks"].append("discovery.crash_detection")
    html = report.render_html(s)
    assert "h1 crashed at 13.250 s and h3 removed it 9.500 s later" in html
    assert '<td class="n">13.25</td>' in html and "<td>h3.jsonl:40</td>" in html
    assert "113.25" not in html
    text = report.text_table(s)
    assert "h1 crashed at 13.250 s and h3 removed it 9.500 s later" in text
    # One mechanism for every table: the detections table too.
    row = {"crashed": "h1", "crashed_at": 113.0, "removed_at": 116.5, "seconds": 3.5, "t": 100}
    assert report.on_run_clock(row, 100.0) == dict(row, crashed_at=13.0, removed_at=16.5, t=0.0)
