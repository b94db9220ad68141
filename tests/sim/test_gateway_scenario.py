"""Scenario ``gateway``: websocket clients on a gateway over simulated TCP, with faults.

The golden trace ``tests/sim/golden/gateway.jsonl`` is every node's trace of the run
``GOLDEN`` describes (the node files concatenated in node order). A change to the
gateway core, the websocket layer, the streams or the scenario that changes what
happens changes it; after checking the difference is intended, regenerate it with

    GOSSAMER_REGENERATE_GOLDEN=1 pytest tests/sim/test_gateway_scenario.py -k golden

and commit the new file with the change.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gossamer.errors import ConfigError
from gossamer.sim import scenarios
from gossamer.sim.run import RunResult, SimRequest, run_simulation

GOLDEN_FILE = Path(__file__).parent / "golden" / "gateway.jsonl"
#: The golden run: a reporter's connection reset, a worker partitioned past its
#: heartbeat deadline (the gateway closes it, its job is delivered again).
GOLDEN = {
    "nodes": 4,
    "seed": 1,
    "duration": 14.0,
    "params": {"rounds": "4", "reset": "n2@4", "partition": "n3@5-9"},
}


def simulate(out: Path, *, nodes: int = 5, seed: int = 1, duration: float | None = None,
             **params: str) -> RunResult:
    return run_simulation(
        SimRequest(scenario="gateway", nodes=nodes, seed=seed, out=out, duration=duration,
                   params=params)
    )


def trace_bytes(run_dir: Path) -> bytes:
    files = sorted(run_dir.glob("*.jsonl"), key=lambda p: int(p.stem[1:]))
    return b"".join(path.read_bytes() for path in files)


def test_listed() -> None:
    assert "gateway" in [s.name for s in scenarios.scenarios()]


def test_the_same_arguments_give_byte_identical_output(tmp_path: Path) -> None:
    args = {"reset": "n2@6", "partition": "n3@9-14", "crash": "n4@12"}
    simulate(tmp_path / "a", **args)
    simulate(tmp_path / "b", **args)
    names = sorted(p.name for p in (tmp_path / "a").iterdir())
    assert names == ["n0.jsonl", "n1.jsonl", "n2.jsonl", "n3.jsonl", "n4.jsonl", "run.json"]
    for name in names:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    other = simulate(tmp_path / "c", seed=2, **args)
    assert trace_bytes(tmp_path / "c") != trace_bytes(tmp_path / "a")
    assert other.summary["readies"] >= 4


def test_clean_run_delivers_everything(tmp_path: Path) -> None:
    result = simulate(tmp_path, nodes=5)
    summary = result.summary
    # Two reporters (n2, n4) x 8 rounds; two workers (n1, n3).
    assert summary["sends"] == summary["send_received"] == 16
    assert summary["broadcasts"] == 16 and summary["broadcast_received"] == 32
    assert summary["jobs"] == summary["jobs_confirmed"] == summary["jobs_received"] == 16
    assert summary["jobs_unacked"] == 0
    assert summary["readies"] == 4 and summary["disconnects"] == 0
    assert summary["clients_at_end"] == 4
    assert result.metadata["network"]["stream_segments"] > 0
    assert result.fault_counts == {}


def test_faults_reconnect_and_redeliver(tmp_path: Path) -> None:
    result = simulate(tmp_path, nodes=5, reset="n2@6", partition="n3@9-14", crash="n1@20")
    summary = result.summary
    assert result.fault_counts["reset"] == 2  # both ends of n2's connection
    assert summary["disconnects"] == 2  # n2 (reset) and n3 (closed by the gateway)
    assert summary["readies"] == 6  # both came back
    assert summary["jobs_unacked"] == 0
    assert summary["clients_at_end"] == 3  # n1 crashed for good
    gateway = (tmp_path / "n0.jsonl").read_text()
    assert '"heartbeat took too long"' in gateway
    assert '"redeliver"' in gateway


def test_bad_parameters(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unknown node"):
        simulate(tmp_path, nodes=3, reset="n7@1")
    with pytest.raises(ConfigError, match="--nodes >= 2"):
        simulate(tmp_path, nodes=1)


def test_golden_trace(tmp_path: Path) -> None:
    simulate(tmp_path, nodes=GOLDEN["nodes"], seed=GOLDEN["seed"],  # type: ignore[arg-type]
             duration=GOLDEN["duration"], **GOLDEN["params"])  # type: ignore[arg-type]
    produced = trace_bytes(tmp_path)
    if os.environ.get("GOSSAMER_REGENERATE_GOLDEN"):
        GOLDEN_FILE.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN_FILE.write_bytes(produced)
    assert produced == GOLDEN_FILE.read_bytes(), (
        "the gateway scenario's trace changed; see this module's docstring"
    )
