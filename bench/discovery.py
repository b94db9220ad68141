"""Benchmark: Prototari discovery, as ratios against baselines measured in the same run.

1. Core cost: ``DiscoveryCore.receive_datagram`` (plus draining its outputs) per
   datagram, for heartbeat and data traffic from 64 registered peers, against
   the bare ``wire.prototari.decode`` of the same datagrams.
2. Heartbeat robustness at 10% loss: gossamer's three ``hor?`` per heartbeat
   wait against the spec read literally (one), simulated for ten minutes:
   false removals and ``hor?`` sent.
3. A large LAN: convergence of 250 nodes with max peers 64, with gossamer's
   rebalancing against without it (the spec's behaviour).
4. Protocol timings against their bounds: time to full view against the
   broadcast interval, crash detection against inactive time + 3 x heartbeat
   wait, removal after a clean leave.

Run from the repository root: ``python -m bench.discovery [--quick]``.
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from pathlib import Path
from typing import Any

from bench._report import machine, table, update_section
from gossamer.faults import FaultPlan
from gossamer.proto.discovery import DiscoveryConfig, DiscoveryCore
from gossamer.sim.run import SimRequest, run_simulation
from gossamer.trace import NullSink, Tracer
from gossamer.wire import prototari as wire

INTERVAL, INACTIVE, WAIT = 5.0, 10.0, 1.0


def _best(fn: Any, repeat: int) -> float:
    """Best of ``repeat`` timings of ``fn()`` (seconds): the least disturbed run."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def core_cost(count: int, repeat: int) -> list[list[object]]:
    me = ("10.0.0.1", 21450)
    peers = [(f"10.0.1.{i}", 21450) for i in range(1, 65)]
    core = DiscoveryCore(
        DiscoveryConfig(address=me, broadcast_address="10.0.0.255", broadcast_interval=1e9),
        tracer=Tracer(NullSink(), run="bench", node="me"),
        rng=random.Random(1),
    )
    for peer in peers:  # register all 64 through the real handshake (1b)
        core.receive_datagram(b"pelotari?", peer, 0.0)
        core.receive_datagram(b"dale!", peer, 0.0)
    core.datagrams_to_send()
    core.events_received()
    rng = random.Random(2)
    kinds = [b"hor?", b"hemen nago!", b"\x00\x01" + b"x" * 100]
    stream = [(rng.choice(kinds), rng.choice(peers)) for _ in range(count)]
    clock = [1.0]

    def through_core() -> None:
        now = clock[0]
        for data, addr in stream:
            core.receive_datagram(data, addr, now)
            core.datagrams_to_send()
            core.events_received()
        clock[0] = now + 1.0  # one second later each round: the answer budget refills

    def decode_only() -> None:
        for data, _ in stream:
            wire.decode(data)

    base = _best(decode_only, repeat) / count
    measured = _best(through_core, repeat) / count
    return [
        ["decode only (baseline)", f"{base * 1e6:.2f}", "1.0x"],
        ["core: classify, table, answer, trace (NullSink)", f"{measured * 1e6:.2f}",
         f"{measured / base:.1f}x"],
    ]  # fmt: skip


def simulate(nodes: int, duration: float, **params: object) -> dict[str, Any]:
    faults = params.pop("faults", None)
    assert faults is None or isinstance(faults, FaultPlan)
    with tempfile.TemporaryDirectory() as out:
        request = SimRequest(
            scenario="discovery",
            nodes=nodes,
            seed=1,
            out=Path(out),
            duration=duration,
            faults=faults or FaultPlan(),
            params={key: str(value) for key, value in params.items()},
        )
        return run_simulation(request).summary


def heartbeat_robustness(nodes: int, duration: float) -> list[list[object]]:
    rows = []
    results = {}
    for attempts in (1, 3):
        summary = simulate(nodes, duration, attempts=attempts, faults=FaultPlan(drop=0.1))
        results[attempts] = summary
        counters = summary["counters"]
        rows.append([
            "spec literal: 1 hor? per wait (baseline)" if attempts == 1 else "gossamer: 3 per wait",
            summary["false_removals"],
            counters.get("misses", 0),
            counters.get("heartbeats_sent", 0),
        ])  # fmt: skip
    sent_ratio = results[3]["counters"]["heartbeats_sent"] / max(
        1, results[1]["counters"]["heartbeats_sent"]
    )
    rows.append(["ratio gossamer / baseline", "-", "-", f"{sent_ratio:.2f}x"])
    return rows


def large_lan(nodes: int, max_peers: int, duration: float) -> list[list[object]]:
    rows = []
    for rebalance in (0, 1):
        # One broadcast domain (the scenario's default puts 128 nodes on a subnet).
        summary = simulate(nodes, duration, max_peers=max_peers, rebalance=rebalance, subnets=1)
        rows.append([
            "spec: no rebalancing (baseline)" if not rebalance else "gossamer: rebalancing",
            summary["full_view_s"] if summary["full_view_s"] is not None else "never",
            summary["settled_s"] if summary["settled_s"] is not None else "never",
            summary["full_view_s_p50"],
            summary["nodes_below_target_at_end"],
            summary["final_peers_min"],
            summary["rebalances"],
        ])  # fmt: skip
    return rows


def timings(nodes: int) -> list[list[object]]:
    full = simulate(nodes, 12.0)
    crash = simulate(20, 60.0, crash="n3@30.5")
    crash_full = simulate(20, 60.0, crash="n3@30.5", max_peers=6)
    leave = simulate(10, 30.0, leave="n2@20")
    bound = INACTIVE + 3 * WAIT
    return [
        [f"time to full view, {nodes} nodes", f"{full['full_view_s']:.3f}",
         f"{full['full_view_s'] / INTERVAL:.2f} x interval"],
        ["crash detection, max over 19 observers", f"{crash['detection_s_max']:.3f}",
         f"{crash['detection_s_max'] / bound:.2f} x (I + 3W)"],
        ["crash detection, full nodes (max peers 6)", f"{crash_full['detection_s_max']:.3f}",
         f"{crash_full['detection_s_max'] / bound:.2f} x (I + 3W)"],
        ["removal after agur!, max over 9 peers", f"{leave['leave_s_max']:.4f}",
         f"{leave['leave_s_max'] / bound:.4f} x (I + 3W)"],
    ]  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small sizes, a few seconds")
    args = parser.parse_args(argv)
    quick = args.quick
    started = time.perf_counter()
    cost = core_cost(2_000 if quick else 50_000, 3 if quick else 7)
    robust = heartbeat_robustness(10 if quick else 20, 120.0 if quick else 600.0)
    lan_nodes, lan_peers = (100, 8) if quick else (250, 64)
    lan = large_lan(lan_nodes, lan_peers, 40.0 if quick else 60.0)
    times = timings(20 if quick else 40)
    elapsed = time.perf_counter() - started

    mode = " --quick" if quick else ""
    lan_header = ["discovery", "full view (s)", "settled (s)", "median node full (s)"]
    lan_header += ["nodes below target"]
    lan_header += ["fewest peers", "rebalances"]
    parts = [
        "## discovery",
        f"`python -m bench.discovery{mode}` on {machine()}; simulated figures come from the "
        "deterministic simulator (seed 1, default timers: interval 5 s, inactive 10 s, wait 1 s).",
        "**Core cost per datagram** (hor?, hemen nago! and 100-byte data from 64 peers):\n\n"
        + table(["path", "µs / datagram", "ratio"], cost),
        f"**Heartbeats at 10% loss**, {10 if quick else 20} nodes, "
        f"{120 if quick else 600} virtual seconds:\n\n"
        + table(["heartbeat", "false removals", "misses", "hor? sent"], robust),
        f"**Large LAN**, {lan_nodes} nodes on one subnet, max peers {lan_peers}, "
        f"{40 if quick else 60} virtual seconds:\n\n" + table(lan_header, lan),
        "**Timings against their bounds** (I = inactive-peer time, W = heartbeat wait):\n\n"
        + table(["figure", "seconds", "ratio"], times),
    ]
    markdown = "\n\n".join(parts)
    update_section("discovery", markdown)
    print(markdown)
    print(f"\n(ran in {elapsed:.1f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
