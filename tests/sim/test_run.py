"""Whole runs: byte-identical replays, run.json, fault counts, scenario parameters."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gossamer.errors import ConfigError
from gossamer.faults import FaultPlan
from gossamer.sim.run import SimRequest, run_simulation
from gossamer.testing.sim import assert_faults_injected, replay_command
from gossamer.trace import read_run


def _files(d: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(d.iterdir())}


def test_same_arguments_give_byte_identical_output_across_processes(tmp_path: Path) -> None:
    """Two separate interpreters with different hash seeds write the same bytes."""
    outs = []
    for hash_seed in ("1", "2"):
        out = tmp_path / f"run{hash_seed}"
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        subprocess.run(
            [
                sys.executable,
                "-m",
                "gossamer.cli.main",
                "sim",
                "--scenario",
                "ping",
                "--nodes",
                "50",
                "--seed",
                "3",
                "--drop",
                "0.2",
                "--out",
                str(out),
            ],
            check=True,
            env=env,
            timeout=120,
            capture_output=True,
        )
        outs.append(_files(out))
    assert outs[0] == outs[1]
    assert len([n for n in outs[0] if n.endswith(".jsonl")]) == 50
    meta = json.loads(outs[0]["run.json"])
    assert meta["fault_counts"]["drop"] > 0
    assert meta["seed"] == 3 and meta["nodes"] == 50 and meta["faults"]["drop"] == 0.2


def test_different_seeds_differ(tmp_path: Path) -> None:
    a = run_simulation(
        SimRequest(scenario="ping", nodes=5, seed=1, out=tmp_path / "a", faults=FaultPlan(drop=0.1))
    )
    b = run_simulation(
        SimRequest(scenario="ping", nodes=5, seed=2, out=tmp_path / "b", faults=FaultPlan(drop=0.1))
    )
    assert _files(a.run_dir) != _files(b.run_dir)


def test_ping_completes_despite_loss_through_retransmission(tmp_path: Path) -> None:
    request = SimRequest(
        scenario="ping",
        nodes=10,
        seed=11,
        out=tmp_path,
        faults=FaultPlan(drop=0.2),
        params={"retries": "8"},
    )
    result = run_simulation(request)
    assert_faults_injected(result, "drop")
    assert result.summary["pings_answered"] == 100, replay_command(request)
    assert result.summary["retransmissions_by_live_nodes"] > 0
    events, bad = read_run(tmp_path)
    assert bad == []
    assert len(events) == result.events
    assert {e.run for e in events} == {"ping-n10-s11"}


def test_crash_and_partition_parameters_take_effect(tmp_path: Path) -> None:
    result = run_simulation(
        SimRequest(
            scenario="ping",
            nodes=6,
            seed=1,
            out=tmp_path,
            params={"crash": "n1@0.05", "restart": "n1@3", "partition": "n4,n5@0.0-2"},
        )
    )
    assert_faults_injected(result, "crash", "restart", "partition", "heal", "partition_drop")


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"bogus": "1"}, "scenario ping has no parameter 'bogus'"),
        ({"count": "-1"}, "--param count=-1: "),
        ({"crash": "n1"}, "NODE@SECONDS"),
        ({"crash": "n42@1"}, "unknown node 'n42'"),
        ({"partition": "n1@5-2"}, "FROM must be before TO"),
        ({"interval": "0"}, "positive"),
    ],
)
def test_bad_parameters_are_one_line_config_errors_and_write_nothing(
    tmp_path: Path, params: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        run_simulation(
            SimRequest(scenario="ping", nodes=3, seed=0, out=tmp_path / "out", params=params)
        )
    assert "\n" not in str(info.value)
    assert not (tmp_path / "out").exists()


def test_replay_command_names_every_argument(tmp_path: Path) -> None:
    request = SimRequest(
        scenario="ping",
        nodes=7,
        seed=9,
        out=tmp_path,
        faults=FaultPlan(drop=0.25, delay=0.01),
        params={"count": "3"},
    )
    assert replay_command(request) == (
        "gossamer sim --scenario ping --nodes 7 --seed 9 --drop 0.25 --delay 10 "
        f"--param count=3 --out {tmp_path}"
    )
