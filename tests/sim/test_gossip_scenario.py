"""Scenario ``gossip``: seeded simulations of Chatter broadcasts, with and without faults.

Properties checked on every run: every live node delivers every measured broadcast exactly
once (coverage 1.0 unless multicast datagrams are lost), no node receives a broadcast over
TCP twice unless a hop was re-planned (no loops), the tree is at most log-deep, and state
is bounded (no hop left pending, at most N-1 peers). A failing run prints the command that
replays it.
"""

from __future__ import annotations

import math
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gossamer.errors import ConfigError
from gossamer.faults import FaultPlan
from gossamer.sim.run import RunResult, SimRequest, run_simulation
from gossamer.testing.sim import assert_faults_injected, replay_command
from gossamer.trace import read_run

from . import runs


def simulate(
    out: Path, nodes: int, seed: int, faults: FaultPlan | None = None, **params: Any
) -> RunResult:
    return runs.simulate("gossip", out, nodes=nodes, seed=seed, faults=faults, **params)


def check(result: RunResult, *, coverage: float = 1.0, depth: int | None = None) -> None:
    s = result.summary
    replay = f"replay: {replay_command(result.request)}"
    assert s["violations"] == [], f"{s['violations']}\n{replay}"
    assert s["broadcasts"] > 0, replay
    assert s["coverage_min"] >= coverage, f"{s}\n{replay}"
    if depth is not None:
        assert s["depth_max"] <= depth, f"{s}\n{replay}"
    if s["replans"] == 0:
        assert s["max_tcp_receptions"] <= 1, f"a loop: {s}\n{replay}"
    assert s["pending_hops_at_end"] == 0, replay
    assert s["max_peers_known"] <= result.request.nodes - 1, replay


def test_a_clean_run_covers_every_node_once_within_the_depth_bound(tmp_path: Path) -> None:
    result = simulate(tmp_path, 48, 1, subnets=4, broadcasts=3, warmup=3)
    check(result, depth=math.ceil(math.log2(4)) + 2)
    # The trace files say the same: one deliver per node and measured broadcast.
    events, bad = read_run(tmp_path)
    assert bad == []
    measured = {e.msg for e in events if e.kind == "broadcast" and e.attrs.get("dests")}
    delivers = Counter((e.node, e.msg) for e in events if e.kind == "deliver" and e.msg in measured)
    origins = {e.msg: e.node for e in events if e.kind == "broadcast"}
    assert set(delivers.values()) == {1}
    for msg in measured:
        assert sum(1 for (_, m) in delivers if m == msg) == 47
        assert (origins[msg], msg) not in delivers
    vias = {e.attrs["via"] for e in events if e.layer == "gossip" and e.kind == "send"}
    assert vias == {"tcp", "multicast"}


def test_tcp_only_is_a_log_depth_tree_of_n_minus_one_messages(tmp_path: Path) -> None:
    result = simulate(tmp_path, 64, 2, subnets=2, multicast="off", broadcasts=3)
    check(result, depth=math.ceil(math.log2(64)))
    assert result.summary["tcp_sends_mean"] == 63
    assert result.summary["multicast_sends_mean"] == 0


def test_crashed_next_hops_are_routed_around(tmp_path: Path) -> None:
    result = simulate(tmp_path, 60, 3, subnets=3, crashed=0.1, broadcasts=4, warmup=2)
    check(result)
    assert_faults_injected(result, "crash")
    assert result.summary["crashed"] == 6
    assert result.summary["replans"] > 0, replay_command(result.request)


def test_multicast_loss_costs_coverage_but_never_tcp(tmp_path: Path) -> None:
    faults = FaultPlan(drop=0.1)
    single = simulate(tmp_path / "1", 48, 4, faults, subnets=2, broadcasts=4, warmup=2, copies=1)
    assert_faults_injected(single, "drop")
    s = single.summary
    replay = replay_command(single.request)
    assert s["replans"] == 0, replay  # TCP stand-ins are exempt from the datagram faults
    assert s["violations"] == [], replay
    assert 0.7 <= s["coverage_min"] < 1.0, f"{s}\n{replay}"
    # The default second copy of each multicast datagram wins most of it back.
    double = simulate(tmp_path / "2", 48, 4, faults, subnets=2, broadcasts=4, warmup=2)
    assert_faults_injected(double, "drop")
    assert double.summary["coverage_mean"] > s["coverage_mean"], replay_command(double.request)
    assert double.summary["coverage_min"] >= 0.95, replay_command(double.request)


def test_chatter_compat_wire_runs_the_same_tree(tmp_path: Path) -> None:
    result = simulate(tmp_path, 32, 5, subnets=2, broadcasts=2, wire="original")
    s = result.summary
    assert s["violations"] == [] and s["coverage_min"] == 1.0, replay_command(result.request)
    events, _ = read_run(tmp_path)
    assert all(e.msg.startswith("chatter:") for e in events if e.kind == "deliver" and e.msg)


def test_runs_are_deterministic(tmp_path: Path) -> None:
    a = simulate(tmp_path / "a", 24, 9, subnets=2, crashed=0.1, broadcasts=2)
    b = simulate(tmp_path / "b", 24, 9, subnets=2, crashed=0.1, broadcasts=2)
    assert a.summary == b.summary
    for name in ("run.json", "10.0.0.1:29999.jsonl"):
        left, right = (tmp_path / x / name for x in "ab")
        if name == "run.json":
            assert (
                orjson.loads(left.read_bytes())["summary"]
                == orjson.loads(right.read_bytes())["summary"]
            )
        else:
            assert left.read_bytes() == right.read_bytes()


@pytest.mark.parametrize(
    "params",
    [{"crashed": "1.5"}, {"multicast": "maybe"}, {"wire": "json"}, {"colour": "red"}],
)
def test_bad_parameters_are_one_line_config_errors(tmp_path: Path, params: dict[str, str]) -> None:
    with pytest.raises(ConfigError):
        run_simulation(SimRequest(scenario="gossip", nodes=4, seed=0, out=tmp_path, params=params))


@settings(max_examples=25, deadline=None)
@given(
    nodes=st.integers(2, 40),
    subnets=st.integers(1, 4),
    multicast=st.sampled_from(["on", "off"]),
    crashed=st.sampled_from([0.0, 0.0, 0.1, 0.2]),
    seed=st.integers(0, 2**31),
)
def test_every_live_node_delivers_every_broadcast_exactly_once(
    nodes: int, subnets: int, multicast: str, crashed: float, seed: int
) -> None:
    with tempfile.TemporaryDirectory() as out:
        result = simulate(
            Path(out),
            nodes,
            seed,
            subnets=subnets,
            multicast=multicast,
            crashed=crashed,
            broadcasts=3,
            warmup=1,
        )
    check(result)
