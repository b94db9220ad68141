"""Does the daemon's quick failure detection suspect live members? A soak on a busy machine.

    .venv/bin/python -m bench.detection_soak [--quick] [--seconds S] [--hogs H]

Two clusters of three ``gossamer node`` daemons on 127.0.0.1 run side by side for
``seconds``: one with the daemon's discovery defaults (``NODE_DISCOVERY``), one whose
files set the timers it had before (``bench.cluster.BASELINE_DISCOVERY``). Nothing is
killed. The machine is kept busy meanwhile: ``hogs`` processes spin on the CPU (by
default one per core), and a client on each cluster routes one SEND a millisecond
through it (a to b and back). A suspicion of a live member then only comes from a
daemon that could not run, or answer a probe, for longer than its detection time.

Counted from the daemons' traces, after each cluster formed: discovery
``peer_down`` events (false suspicions: no member died), the views installed after the
first view of all three (each is an exclusion or a rejoin), and the SENDs routed. Loss
is not injected: this machine has no ``netem`` or packet filter, and the daemons inject
no faults of their own. A miss needs all three ``hor?`` of one wait (or their answers)
lost, three waits in a row: at 2 % loss about (1 - 0.98**2)**9 = 2e-13 per probe, so a
stall is the risk, and the soak measures it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench._report import command, machine, publish, quick_parser, table
from bench.cluster import (
    BASELINE_DISCOVERY,
    NAMES,
    TARGET,
    connected,
    dsn,
    listed,
    node_files,
    start_cluster,
    stop_all,
)
from gossamer.daemon.protocols import NODE_DISCOVERY
from gossamer.trace import TraceReader

HOG = "while True: pass"


def counts(files: dict[str, Path], since: float) -> dict[str, int]:
    """Discovery ``peer_down`` events and views installed (``views``/``view_change``)
    after ``since``, in the traces of the cluster's three daemons."""
    found = {"peer_down": 0, "views": 0}
    for name in NAMES:
        for e in TraceReader().read(files[name].with_suffix(".jsonl")):
            if e.t <= since:
                continue
            if e.layer == "discovery" and e.kind == "peer_down":
                found["peer_down"] += 1
            elif e.layer == "views" and e.kind == "view_change":
                found["views"] += 1
    return found


async def route(files: dict[str, Path], until: float) -> int:
    """SENDs from a client on a to one on b, one a millisecond, until ``until``: how
    many arrived."""
    async with connected(
        (dsn(files["a"]), "tx", {"role": "source", "load": 1}),
        (dsn(files["b"]), "rx", {"role": "sink", "load": 5}),
    ) as (tx, rx):
        await listed(tx, TARGET, 1)
        sent = 0
        while time.monotonic() < until:
            await tx.send(sent, to=TARGET)
            await rx.receive(timeout=30.0)
            sent += 1
            await asyncio.sleep(0.001)
        return sent


async def load(clusters: list[dict[str, Path]], until: float) -> list[int]:
    return list(await asyncio.gather(*(route(files, until) for files in clusters)))


def main(argv: list[str] | None = None) -> int:
    parser = quick_parser("bench.detection_soak", "a one-minute soak (a smoke run)")
    parser.add_argument("--seconds", type=float, default=600.0, help="length of the soak")
    parser.add_argument(
        "--hogs",
        type=int,
        default=os.cpu_count() or 1,
        help="processes spinning on the CPU meanwhile",
    )
    args = parser.parse_args(argv)
    seconds = 60.0 if args.quick else args.seconds
    from gossamer.aio.loop import run as run_loop

    with tempfile.TemporaryDirectory(prefix="bench-soak-") as tmp, contextlib.ExitStack() as stack:
        node = node_files(Path(tmp) / "node", solo=False)
        base = node_files(Path(tmp) / "baseline", BASELINE_DISCOVERY, solo=False)
        node_daemons = start_cluster(node)
        stack.callback(stop_all, node_daemons)
        base_daemons = start_cluster(base)
        stack.callback(stop_all, base_daemons)
        hogs = [subprocess.Popen([sys.executable, "-c", HOG]) for _ in range(args.hogs)]
        for hog in hogs:
            stack.callback(hog.wait, 10)
            stack.callback(hog.kill)
        load_before = os.getloadavg()[0]
        start = time.monotonic()
        routed = run_loop(load([node, base], start + seconds))
        load_after = os.getloadavg()[0]
        results = [counts(node, start), counts(base, start)]

    timers = ", ".join(f"`{k}` = {v:g} s" for k, v in NODE_DISCOVERY.defaults.items())
    before = ", ".join(f"`{k}` = {v:g} s" for k, v in BASELINE_DISCOVERY.items())
    rows = [
        [label, f"{r['peer_down']}", f"{r['views']}", f"{n:,}"]
        for label, r, n in zip(
            (f"daemon's defaults ({timers})", f"baseline ({before})"), results, routed, strict=True
        )
    ]
    publish(
        "detection-soak",
        "Quick failure detection on a busy machine: false suspicions",
        f"`{command('bench.detection_soak', args.quick)}` on {machine()}, 127.0.0.1: two "
        f"clusters of three `gossamer node` daemons side by side for {seconds:g} s, nobody "
        f"killed; {args.hogs} process(es) spinning on the CPU and, on each cluster, a "
        "client routing one SEND a millisecond from node a to node b. The load average was "
        f"{load_before:.1f} when the soak began and {load_after:.1f} at its end (2 cores). "
        "A `peer_down` or a view after the cluster formed is a live member suspected.",
        table(["discovery timers", "peer_down", "views after forming", "SENDs routed"], rows),
        "No loss is injected (no `netem` or packet filter on this machine): a miss needs "
        "the three `hor?` of one wait, or their answers, lost three waits in a row, about "
        "2e-13 per probe at 2 % loss, so what could make a live member look dead is a "
        "stall, which this measures.",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
