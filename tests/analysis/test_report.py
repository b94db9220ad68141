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
    assert "latency isis: p50 10.0 ms" in text
    assert lines[-1] == "verdict: FAIL (0 hold, 1 violated, 1 skipped)"
