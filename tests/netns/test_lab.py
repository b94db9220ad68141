"""The lab's ``demo`` on network-namespace hosts: two subnets and a router, real faults.

The lab builds its own :class:`~gossamer.lab.netns.Topology` (six hosts, subnets of
three joined by a router), cuts a host's links for the partition and SIGKILLs a node
for the crash. The ``netns`` fixture is requested only for its contract: it skips (or
fails with ``CI=true``) where namespaces cannot be built, and at teardown it fails the
test if a topology of this process is still open or anything with this process's
prefix is left; the test also checks :func:`~gossamer.lab.netns.leftovers` itself.
"""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest

from gossamer.cli import lab_cmd
from gossamer.lab.netns import leftovers, open_topologies, process_prefix
from gossamer.testing.pytest_plugin import NetnsFactory


@pytest.mark.netns
@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.timeout(480)
def test_the_demo_passes_in_namespaces(
    netns: NetnsFactory, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "demo"
    code = lab_cmd.main(["run", "--scenario", "demo", "--netns", "--out", str(out)])
    text = capsys.readouterr().out
    assert leftovers(process_prefix()) == []
    assert open_topologies() == []
    assert code == 0, text
    assert "on network namespaces, 2 subnet(s) [3, 3]" in text
    meta = json.loads((out / "run.json").read_text())
    assert meta["lab"]["mode"] == "netns"
    addresses = [h["address"] for h in meta["lab"]["hosts"]]
    assert addresses[0].startswith("10.77.1.") and addresses[-1].startswith("10.77.2.")
    summary = json.loads((out / "analysis" / "summary.json").read_text())
    assert summary["verdict"] == "pass"
    status = {c["name"]: c["status"] for c in summary["checks"]}
    for name in meta["lab"]["expected_checks"]:
        assert status[name] == "pass", name
    # The partition cut h2's real link; the lab traced it on h2 (crash: on h1).
    h2 = [orjson.loads(line) for line in (out / "h2.jsonl").read_bytes().splitlines()]
    lab_faults = [e["attrs"]["fault"] for e in h2 if e["attrs"].get("hosts") == "h2"]
    assert lab_faults == ["partition", "heal"]
    assert meta["fault_counts"]["crash"] == 1
    assert (out / "analysis" / "report.html").stat().st_size > 0
