"""The lab's lossy ISIS scenario, run many times: the verdict never cries wolf.

Issue 19: ``gossamer lab run --scenario isis --hosts 4 --loopback --drop 0.2`` failed
one run in three with agreement and validity "violations" that were messages still in
flight when the lab stopped the nodes. Now the lab lets the group settle before it
stops it, and the checkers call what a clean stop interrupted *unfinished*. Half of
these runs settle (nothing may be unfinished, nothing lost); the other half are stopped
without settling (``settle=0``) and with half the Acks held back 2 s, so that messages
are certainly in flight at the stop:
they must come out unfinished, never as violations.

Kept cheap for CI: loopback, a 3 s workload, one Spark session for every analysis,
and only the ISIS checks (``gossamer analyze`` runs the same ones, through the same
``job.run_check``), not the metrics and report.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from gossamer.lab.plan import LabRequest
from gossamer.lab.runner import run_lab

pytestmark = [pytest.mark.slow, pytest.mark.spark]

RUNS = 4
ISIS_CHECKS = ("isis.total_order", "isis.agreement", "isis.validity", "isis.integrity")


@pytest.mark.timeout(1200)
def test_the_lossy_isis_scenario_never_reports_a_false_violation(
    tmp_path: Path, spark: object, record_property: Callable[[str, object], None]
) -> None:
    from pyspark.sql import SparkSession

    from gossamer.analysis import catalog, job
    from gossamer.analysis.load import load_run

    assert isinstance(spark, SparkSession)
    # The static group's ISIS checks (those on agreed views require the views' events).
    isis_checks = [c for c in catalog.CHECKS if c.layer == "isis" and not c.requires]
    inputs = catalog.CheckInputs(nodes=None, params=catalog.resolve_params({}, {}))
    unfinished_without_settling = 0
    for k in range(RUNS):
        settle = k % 2 == 0
        out = tmp_path / f"run{k}"
        stream = io.StringIO()
        request = LabRequest(
            scenario="isis",
            hosts=4,
            out=out,
            mode="loopback",
            drop=0.2,
            params={
                "duration": "3",
                "linger": "0.5",
                "isis_rate": "10",
                # Not settling, half the Acks wait 2 s (ISIS's own ack_delay): whatever
                # was multicast in the last 2 s is certainly in flight at the stop.
                **({} if settle else {"settle": "0", "isis.ack_delay": "2"}),
            },
            seed=100 + k,
            analyze=False,
        )
        result = run_lab(request, stream)
        log = stream.getvalue()
        assert result.code == 0, log
        meta = json.loads((out / "run.json").read_text())
        events, _ = load_run(spark, str(out), str(tmp_path / f"events{k}.parquet"))
        present = {"isis", "isis/multicast", "isis/deliver"}
        results = [job.run_check(c, events, inputs, present=present) for c in isis_checks]
        # Never a violation, settled or not.
        assert [r.name for r in results if r.status != "pass"] == [], (k, log, results)
        assert {r.name for r in results} >= set(ISIS_CHECKS)
        unfinished = sum(r.unfinished for r in results)
        sent = meta["summary"]["sent"]
        assert sent > 0
        if settle:
            # Settled: every node delivered every message; nothing was unfinished.
            assert meta["lab"]["settle"]["settled"] is True, log
            assert "lab: settled" in log
            assert meta["summary"]["delivered"] == 4 * sent
            assert unfinished == 0
        else:
            assert meta["lab"]["settle"]["settle"] == 0
            unfinished_without_settling += unfinished
    # Whether a stopped run leaves anything unfinished depends on timing: with measured
    # round trips the group often finishes before the stop even with Acks held back
    # (none in one CI run of three), so it is recorded, not asserted; the unfinished
    # verdict itself is tested deterministically in tests/analysis/checks/test_isis.py.
    record_property("unfinished_without_settling", unfinished_without_settling)
