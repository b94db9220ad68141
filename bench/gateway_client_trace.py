"""What tracing costs the gateway client: client-side CPU per message, traced or not.

    .venv/bin/python -m bench.gateway_client_trace [--quick] [--rounds N]

A gossamer gateway runs in its own process (``bench.gateway --serve gateway``, not
traced), so that this process's CPU time is the clients' alone. Here one sender and
one receiver (``gossamer.aio.gateway_client``, uvloop) exchange M routed SENDs with a
nonce, in batches of ``BATCH`` (the sender sends a batch, the receiver takes it), once
per mode, the modes alternated for ``--rounds`` rounds:

- ``off``: no tracer (what every untraced client runs);
- ``memory``: a tracer into a ``MemorySink``: the cost of building the events;
- ``jsonl``: a tracer into a durable ``JsonlSink`` (one ``write`` per event), as the
  lab's nodes trace.

Each traced message costs one ``client_send`` at the sender and one ``client_recv`` at
the receiver. The figure is this process's CPU time (user + system) per message, the
best round of each mode, and its ratio to ``off`` measured in the same run.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench._report import machine, table, update_section

HOST = "127.0.0.1"
BATCH = 200
MODES = ("off", "memory", "jsonl")


async def _round(port: int, mode: str, count: int, out: Path) -> float:
    """Client CPU microseconds per message for one round in ``mode``."""
    from gossamer.aio.gateway_client import open_gateway_client
    from gossamer.trace.sink import JsonlSink, MemorySink, Tracer, TraceSink

    sink: TraceSink | None = None
    if mode == "memory":
        sink = MemorySink()
    elif mode == "jsonl":
        sink = JsonlSink(out / f"{mode}-{time.monotonic_ns()}.jsonl")

    def tracer(node: str) -> Tracer | None:
        return None if sink is None else Tracer(sink, run="bench", node=node)

    dsn = f"singyeong://bench@{HOST}:{port}"
    target = {"application": "bench", "ops": [{"role": "receiver"}]}
    try:
        async with open_gateway_client(dsn, client_id="receiver",
                                       metadata={"role": "receiver"},
                                       tracer=tracer("r")) as receiver, \
                open_gateway_client(dsn, client_id="sender", tracer=tracer("s")) as sender:
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


async def measure(count: int, rounds: int) -> dict[str, float]:
    proc = subprocess.Popen([sys.executable, "-m", "bench.gateway", "--serve", "gateway"],
                            stdout=subprocess.PIPE, text=True)
    best = dict.fromkeys(MODES, float("inf"))
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        with tempfile.TemporaryDirectory() as tmp:
            for _ in range(rounds):
                for mode in MODES:
                    micros = await _round(port, mode, count, Path(tmp))
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
    args = parser.parse_args(argv)
    from gossamer.aio.loop import run

    count = 2_000 if args.quick else 20_000
    rounds = args.rounds or (1 if args.quick else 5)
    best = run(measure(count, rounds))
    off = best["off"]
    labels = {
        "off": "no tracer",
        "memory": "tracer into a MemorySink (building the events)",
        "jsonl": "tracer into a durable JsonlSink (as the lab)",
    }
    rows: list[list[object]] = [
        [labels[mode], f"{best[mode]:.1f}", f"{best[mode] / off:.2f}x"] for mode in MODES
    ]
    command = "python -m bench.gateway_client_trace" + (" --quick" if args.quick else "")
    markdown = "\n".join([
        "## 신경 gateway client: what tracing costs",
        "",
        f"`{command}` on {machine()}, uvloop, 127.0.0.1: one sender and one receiver "
        f"client in this process exchange {count:,} routed SENDs with a nonce (batches of "
        f"{BATCH}) through a gossamer gateway in another process (not traced), each mode "
        f"in turn, best of {rounds} alternated rounds. CPU is this process's user + system "
        "time per message, sender and receiver together; a traced message costs one "
        "`client_send` and one `client_recv` event.",
        "",
        table(["client", "client CPU µs/msg", "ratio to no tracer"], rows),
        "",
        "Without a tracer (or with one into a `NullSink`) the client builds no event: the "
        "untraced path adds one `is not None` test per dispatch sent and received.",
    ])
    update_section("gateway-client-trace", markdown)
    print(markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
