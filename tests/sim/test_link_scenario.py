"""Scenario ``link``: exactly-once links with credits over a faulty simulated network.

A failing run prints the ``gossamer sim`` command that replays it.
"""

from __future__ import annotations

import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gossamer.errors import ConfigError
from gossamer.faults import FaultPlan
from gossamer.sim.run import RunResult
from gossamer.testing.sim import assert_faults_injected, replay_command
from gossamer.trace import read_run

from . import runs

LOSSY = FaultPlan(drop=0.2, duplicate=0.1, reorder=0.1, delay=0.005)


def simulate(
    out: Path,
    nodes: int,
    seed: int,
    faults: FaultPlan | None = None,
    duration: float = 60.0,
    **params: Any,
) -> RunResult:
    return runs.simulate("link", out, nodes=nodes, seed=seed, faults=faults, duration=duration,
                         **params)


def expected_deliveries(result: RunResult) -> int:
    summary = result.summary
    if summary["pattern"] == "pubsub":
        return int(summary["expected_deliveries"])
    return int(result.summary["senders"]) * int(result.request.params.get("messages", 100))


def assert_exactly_once(result: RunResult) -> None:
    """Every message sent was delivered exactly once, by the summary and by the traces."""
    summary = result.summary
    replay = f"\nreplay: {replay_command(result.request)}"
    assert summary["duplicates"] == 0, f"{summary}{replay}"
    assert summary["delivered"] == expected_deliveries(result), f"{summary}{replay}"
    assert summary["link_downs"] == {}, f"{summary}{replay}"
    events, bad = read_run(result.run_dir)
    assert bad == []
    sends = Counter(e.msg for e in events if e.layer == "link" and e.kind == "send")
    delivers = Counter(e.msg for e in events if e.layer == "link" and e.kind == "deliver")
    assert sends == delivers, f"send/deliver traces disagree{replay}"
    assert set(sends.values()) == {1}
    # Credit was never exceeded: per link, sends <= initial credits + grants so far.
    ledger: dict[tuple[str, str], int] = {}
    for e in sorted((e for e in events if e.layer == "link"), key=lambda e: (e.node, e.t)):
        key = (e.node, e.attrs.get("link", ""))
        if e.kind == "link_up":
            ledger[key] = int(e.attrs["credits"])
        elif e.kind == "credit":
            ledger[key] += int(e.attrs["amount"])
        elif e.kind == "send":
            ledger[key] -= 1
            assert ledger[key] >= 0, f"{e} sent beyond its credit{replay}"


@pytest.mark.parametrize("pattern", ["push", "reqrep", "pubsub"])
def test_every_pattern_delivers_exactly_once_over_a_lossy_network(
    tmp_path: Path, pattern: str
) -> None:
    result = simulate(tmp_path, 4, 7, LOSSY, pattern=pattern, messages=60, capacity=8)
    assert_exactly_once(result)
    assert_faults_injected(result, "drop", "duplicate", "reorder", "delay")
    assert result.summary["retransmissions"] > 0


@pytest.mark.parametrize("pattern", ["push", "reqrep", "pubsub"])
def test_every_pattern_delivers_exactly_once_over_the_simulators_tcp_streams(
    tmp_path: Path, pattern: str
) -> None:
    # Datagram faults do not touch streams (TCP hides loss): the links ride the
    # simulator's connections, one per sender, dialled by the sender.
    result = simulate(tmp_path, 4, 7, LOSSY, pattern=pattern, transport="tcp",
                      messages=60, capacity=8)
    assert_exactly_once(result)
    assert result.metadata["fault_counts"] == {}
    assert result.metadata["network"]["stream_segments"] > 0
    assert result.summary["retransmissions"] == 0  # no link channel under TCP
    events, _ = read_run(result.run_dir)
    connects = [(e.node, e.peer) for e in events if e.layer == "net" and e.kind == "connect"]
    assert sorted(connects) == [("n1", "n0"), ("n2", "n0"), ("n3", "n0")]


@settings(max_examples=12, deadline=None)
@given(
    seed=st.integers(0, 2**31),
    nodes=st.integers(2, 6),
    drop=st.sampled_from([0.05, 0.2, 0.4]),
    dup=st.sampled_from([0.0, 0.2]),
    reorder=st.sampled_from([0.0, 0.3]),
    capacity=st.integers(1, 12),
    pattern=st.sampled_from(["push", "reqrep", "pubsub"]),
)
def test_exactly_once_per_incarnation_under_random_faults(
    *,
    seed: int, nodes: int, drop: float, dup: float, reorder: float, capacity: int,
    pattern: str
) -> None:
    faults = FaultPlan(drop=drop, duplicate=dup, reorder=reorder)
    with tempfile.TemporaryDirectory() as out:
        result = simulate(Path(out), nodes, seed, faults, duration=120.0, messages=30,
                          capacity=capacity, pattern=pattern)
        assert_exactly_once(result)
        assert_faults_injected(result, "drop")


@settings(max_examples=8, deadline=None)
@given(
    seed=st.integers(0, 2**31),
    nodes=st.integers(2, 6),
    capacity=st.integers(1, 12),
    pattern=st.sampled_from(["push", "reqrep", "pubsub"]),
)
def test_exactly_once_over_tcp_streams_for_any_seed_and_capacity(
    *, seed: int, nodes: int, capacity: int, pattern: str
) -> None:
    with tempfile.TemporaryDirectory() as out:
        result = simulate(Path(out), nodes, seed, duration=120.0, messages=30,
                          capacity=capacity, pattern=pattern, transport="tcp")
        assert_exactly_once(result)


def test_a_crashed_hub_resets_its_tcp_connections_and_the_senders_link_again(
    tmp_path: Path,
) -> None:
    result = simulate(tmp_path, 3, 2, messages=400, capacity=5, consume=300,
                      transport="tcp", crash="n0@0.3", restart="n0@1.0")
    assert_faults_injected(result, "crash", "restart")
    summary = result.summary
    replay = replay_command(result.request)
    assert summary["duplicates"] == 0, replay
    # The crash reset both senders' connections, and their first relink (0.5 s later)
    # found the hub still down (refused): each a link down, loudly, per sender.
    assert summary["link_downs"] == {"transport_lost": 4}, f"{summary}\n{replay}"
    events, _ = read_run(tmp_path)
    for sender in ("n1", "n2"):
        net = [(e.kind, e.attrs.get("reason")) for e in events
               if e.layer == "net" and e.node == sender]
        assert net == [("connect", None), ("close", "reset"), ("close", "refused"),
                       ("connect", None)], f"{sender}: {net}\n{replay}"
    ups = [e for e in events if e.node == "n1" and e.kind == "link_up"]
    assert len(ups) == 2 and ups[0].attrs["link"] != ups[1].attrs["link"]
    # The restarted hub took what the senders sent after relinking, each once.
    assert summary["delivered"] == summary["distinct_delivered"] > 0


def test_a_slow_consumer_with_many_senders_stays_within_the_memory_bound(
    tmp_path: Path,
) -> None:
    result = simulate(tmp_path, 13, 5, FaultPlan(drop=0.05), senders=12, messages=40,
                      capacity=6, size=300, consume=400)
    assert_exactly_once(result)
    summary = result.summary
    assert summary["memory_bound_bytes"] == 12 * 6 * 300
    # The fast senders fill every credit: the bound is reached and never exceeded.
    assert summary["peak_queued_bytes"] == summary["memory_bound_bytes"]


def test_a_crashed_and_restarted_sender_is_a_new_incarnation(tmp_path: Path) -> None:
    result = simulate(tmp_path, 3, 2, FaultPlan(drop=0.05), messages=400, capacity=5,
                      consume=300, crash="n1@0.3", restart="n1@1.0")
    assert_faults_injected(result, "crash", "restart")
    summary = result.summary
    replay = replay_command(result.request)
    assert summary["duplicates"] == 0, replay
    # The hub saw the old incarnation go (its channel reset by the new session).
    assert summary["link_downs"].get("peer_restarted", 0) >= 1, f"{summary}\n{replay}"
    events, _ = read_run(tmp_path)
    ups = [e for e in events if e.node == "n0" and e.kind == "link_up" and e.peer == "n1"]
    assert len(ups) == 2 and ups[0].attrs["link"] != ups[1].attrs["link"]
    # The restarted sender's messages (a fresh count) all arrived once.
    assert summary["delivered"] == summary["distinct_delivered"]
    assert summary["delivered"] >= 400 + 400  # n2's, and n1's second life


def test_a_partition_takes_links_down_with_a_reason_and_they_come_back(
    tmp_path: Path,
) -> None:
    # Longer than ChannelConfig.dead_after (30 s): the peers give up on each other.
    result = simulate(tmp_path, 3, 4, messages=300, capacity=5, consume=100,
                      partition="n1@0.5-40", relink=1.0, duration=120.0)
    assert_faults_injected(result, "partition", "heal")
    summary = result.summary
    assert summary["duplicates"] == 0
    downs = summary["link_downs"]
    assert downs.get("peer_unreachable", 0) >= 1, summary
    events, _ = read_run(tmp_path)
    reasons = {e.attrs["reason"] for e in events if e.kind == "link_down"}
    assert "peer_unreachable" in reasons
    assert summary["link_ups"] > 4  # the senders linked again after the heal
    assert summary["delivered"] == summary["distinct_delivered"]
    assert summary["messages_sent"] == 600  # n1 finished its work after the partition


@pytest.mark.parametrize("transport", ["udp", "tcp"])
def test_runs_are_reproducible(tmp_path: Path, transport: str) -> None:
    a = simulate(tmp_path / "a", 3, 9, LOSSY, messages=40, transport=transport,
                 crash="n2@0.05", restart="n2@0.5")
    b = simulate(tmp_path / "b", 3, 9, LOSSY, messages=40, transport=transport,
                 crash="n2@0.05", restart="n2@0.5")
    assert a.summary == b.summary
    for name in ("n0.jsonl", "n1.jsonl", "n2.jsonl"):
        assert (a.run_dir / name).read_bytes() == (b.run_dir / name).read_bytes()


def test_bad_parameters_are_one_line_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="senders"):
        simulate(tmp_path, 2, 0, senders=3)
    with pytest.raises(ConfigError, match="pattern"):
        simulate(tmp_path, 2, 0, pattern="bus")
    with pytest.raises(ConfigError, match="transport"):
        simulate(tmp_path, 2, 0, transport="sctp")
