"""What tracing costs the gateway client: client-side CPU per message, traced or not.

    .venv/bin/python -m bench.gateway_client_trace [--quick] [--rounds N] [--baseline SRC]

A gossamer gateway runs in its own process (``bench.gateway --serve gateway``, not
traced). Each round starts a client process (``--clients MODE``) in which one sender
and one receiver (``gossamer.aio.gateway_client``, uvloop) exchange M routed SENDs with
a nonce, in batches of ``BATCH`` (the sender sends a batch, the receiver takes it); its
CPU time is the clients' alone. The modes, alternated for ``--rounds`` rounds:

- ``off``: no tracer (what every untraced client runs);
- ``memory``: a tracer into a ``MemorySink``: the cost of building the events;
- ``jsonl``: a tracer into a durable ``JsonlSink`` (one ``write`` per event), as the
  lab's nodes trace;
- ``baseline`` (with ``--baseline SRC``, the ``src`` directory of another gossamer
  tree, e.g. one from before the client traced): ``off`` on that tree, to show what
  the untraced path costs now against it.

Each traced message costs one ``client_send`` at the sender and one ``client_recv`` at
the receiver. The figure is the client process's CPU time (user + system) per message
in the measured window, the best round of each mode, and its ratio to ``off``
measured in the same run.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench._report import machine, table, update_section

HOST = "127.0.0.1"
BATCH = 200
MODES = ("off", "memory", "jsonl")
_ROOT = Path(__file__).resolve().parent.parent


async def clients(port: int, mode: str, count: int, out: Path) -> float:
    """Client CPU microseconds per message in ``mode`` (run in the client process)."""
    from gossamer.aio.gateway_client import open_gateway_client
    from gossamer.trace.sink import JsonlSink, MemorySink, Tracer, TraceSink

    sink: TraceSink | None = None
    if mode == "memory":
        sink = MemorySink()
    elif mode == "jsonl":
        sink = JsonlSink(out / "clients.jsonl")

    def options(node: str) -> dict[str, Any]:
        # No tracer keyword at all untraced: the baseline tree may not know it.
        return {} if sink is None else {"tracer": Tracer(sink, run="bench", node=node)}

    dsn = f"singyeong://bench@{HOST}:{port}"
    target = {"application": "bench", "ops": [{"role": "receiver"}]}
    try:
        async with open_gateway_client(dsn, client_id="receiver",
                                       metadata={"role": "receiver"},
                                       **options("r")) as receiver, \
                open_gateway_client(dsn, client_id="sender", **options("s")) as sender:
            # One warm-up batch, not measured (query cache, first frames).
            for i in range(BATCH):
                await sender.send({"i": i}, to=target, nonce=f"w{i}")
            for _ in range(BATCH):
                await receiver.receive(30)
            started = time.process_time()
            for base in range(0, count, BATCH):
                for i in range(base, base + BATCH):
                    await sender.send({"i": i}, to=target, nonce=f"m{i}")
                for _ in range(BATCH):
                    await receiver.receive(30)
            cpu = time.process_time() - started
    finally:
        if isinstance(sink, JsonlSink):
            sink.close()
    if isinstance(sink, MemorySink):
        kinds = {e.kind for e in sink.events}
        assert {"client_send", "client_recv"} <= kinds, kinds  # it did trace
    return cpu / count * 1e6


def _round(port: int, mode: str, count: int, out: Path, baseline: Path | None) -> float:
    src = baseline if mode == "baseline" else _ROOT / "src"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(src), str(_ROOT)])}
    result = subprocess.run(
        [sys.executable, "-m", "bench.gateway_client_trace", "--clients",
         "off" if mode == "baseline" else mode, "--port", str(port), "--count", str(count),
         "--out", str(out)],
        env=env, capture_output=True, text=True, check=True, timeout=600,
    )
    return float(result.stdout.strip().splitlines()[-1])


def measure(count: int, rounds: int, baseline: Path | None) -> dict[str, float]:
    modes = MODES + (("baseline",) if baseline is not None else ())
    proc = subprocess.Popen([sys.executable, "-m", "bench.gateway", "--serve", "gateway"],
                            stdout=subprocess.PIPE, text=True)
    best = dict.fromkeys(modes, float("inf"))
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        with tempfile.TemporaryDirectory() as tmp:
            for _ in range(rounds):
                for mode in modes:
                    micros = _round(port, mode, count, Path(tmp), baseline)
                    best[mode] = min(best[mode], micros)
                    print(f"{mode}: {micros:.1f} µs/msg", file=sys.stderr)
    finally:
        proc.terminate()
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.gateway_client_trace")
    parser.add_argument("--quick", action="store_true", help="small sizes (CI smoke run)")
    parser.add_argument("--rounds", type=int, default=None, help="alternated rounds per mode")
    parser.add_argument("--baseline", type=Path, default=None,
                        help="the src directory of another gossamer tree, run untraced")
    parser.add_argument("--baseline-name", default="the tree before the client traced",
                        help="what the baseline tree is, for the table")
    parser.add_argument("--clients", choices=MODES, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--count", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    from gossamer.aio.loop import run

    if args.clients:
        print(run(clients(args.port, args.clients, args.count, args.out)))
        return 0
    count = 2_000 if args.quick else 20_000
    rounds = args.rounds or (1 if args.quick else 5)
    best = measure(count, rounds, args.baseline)
    off = best["off"]
    labels = {
        "baseline": f"no tracer, {args.baseline_name}",
        "off": "no tracer",
        "memory": "tracer into a MemorySink (building the events)",
        "jsonl": "tracer into a durable JsonlSink (as the lab)",
    }
    order = (("baseline",) if "baseline" in best else ()) + MODES
    rows: list[list[object]] = [
        [labels[mode], f"{best[mode]:.1f}", f"{best[mode] / off:.2f}x"] for mode in order
    ]
    command = "python -m bench.gateway_client_trace" + (" --quick" if args.quick else "")
    if args.baseline is not None:
        command += f" --baseline BASE/src --baseline-name '{args.baseline_name}'"
    markdown = "\n".join([
        "## 신경 gateway client: what tracing costs",
        "",
        f"`{command}` on {machine()}, uvloop, 127.0.0.1: one sender and one receiver "
        f"client in a client process exchange {count:,} routed SENDs with a nonce "
        f"(batches of {BATCH}) through a gossamer gateway in another process (not "
        f"traced), one client process per round and mode, best of {rounds} alternated "
        "rounds. CPU is the client process's user + system time per message, sender and "
        "receiver together; a traced message costs one `client_send` and one "
        "`client_recv` event.",
        "",
        table(["client", "client CPU µs/msg", "ratio to no tracer"], rows),
        "",
        "Without a tracer (or with one into a `NullSink`) the client builds no event: the "
        "untraced path adds one `is not None` test per dispatch sent and received"
        + (", which the baseline row (the same client before it could trace, run in the "
           "same session) bounds." if "baseline" in best else "."),
    ])
    update_section("gateway-client-trace", markdown)
    print(markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
