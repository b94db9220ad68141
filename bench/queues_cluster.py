"""Replicated queues: three ``gossamer node`` daemons against one gateway, in one run.

    .venv/bin/python -m bench.queues_cluster [--quick]

Two setups, each as real processes on 127.0.0.1, measured one after the other in the
same run with the same clients (``gossamer.gateway.client``, in this process):

- **one gateway**: ``gossamer gateway --data DIR``, the single-node durable queue (a
  QUEUE_CONFIRM once the message is committed to its SQLite file);
- **replicated, 3 nodes**: three ``gossamer node`` daemons forming one cluster (their
  files written by the lab's ``gossamer.lab.cluster.daemon_configs``, as the ``queues``
  scenario does); the producer is a client of the first daemon, the consumer of the
  second, so every message is ordered by the cluster and committed on a majority
  before its confirm, and delivered through another node.

Figures (the ratios are the result: the 2-core machine is shared):

- confirm latency, p50 / p99: one QUEUE at a time, from the call to its QUEUE_CONFIRM;
- confirmed pushes per second: ``count`` QUEUEs with ``IN_FLIGHT`` awaiting their
  confirm at any time;
- delivered and acked per second: the consumer, with ``CREDITS`` requested, takes and
  acks every one of those ``count`` messages, timed from the first push.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

from bench._report import command, machine, publish, quick_parser, table
from bench._timing import latency_row, one_at_a_time, rate_row
from gossamer.testing.daemons import Daemon, ServerProcess

HOST = "127.0.0.1"
APP = "bench"
QUEUE = "bench-jobs"
TARGET = {"application": APP, "ops": [{"role": "worker"}]}
IN_FLIGHT = 32
CREDITS = 64
#: Seconds a daemon or gateway may take to come up on a loaded machine.
PATIENCE = 60.0


@contextlib.contextmanager
def one_gateway(tmp: Path) -> Iterator[list[str]]:
    """``gossamer gateway`` with a durable queue; yields its DSN (one) once it listens."""
    from gossamer.testing import free_ports

    (port,) = free_ports(1)
    argv = [sys.executable, "-m", "gossamer.cli.main", "gateway", "--host", HOST,
            "--port", str(port), "--data", str(tmp / "data")]
    process = ServerProcess(argv, name="gateway", cwd=tmp, patience=PATIENCE)
    try:
        process.wait(lambda line: line.get("text", "").startswith(
            "gossamer gateway listening on "), "listening")
        yield [f"singyeong://{APP}@{HOST}:{port}"]
    finally:
        process.stop()


@contextlib.contextmanager
def three_daemons(tmp: Path) -> Iterator[list[str]]:
    """Three ``gossamer node`` daemons in one cluster; yields their gateways' DSNs once
    every one has installed a view of all three."""
    from gossamer.lab import scenarios
    from gossamer.lab.cluster import daemon_configs
    from gossamer.lab.hosts import loopback_placement
    from gossamer.lab.rundir import write_daemon_config, write_secret

    placement = loopback_placement(3)
    values = scenarios.get("queues").resolve({}, placement.ids)
    for sub in ("config", "state", "secrets"):
        (tmp / sub).mkdir()
    key = tmp / "secrets" / "cluster.key"
    write_secret(key)
    docs = daemon_configs(values, placement, run="bench", out=tmp, key_file=key, seed=1)
    daemons: list[Daemon] = []
    try:
        for host, doc in docs.items():
            path = tmp / "config" / f"{host}.toml"
            write_daemon_config(path, doc)
            daemons.append(Daemon(path, patience=PATIENCE))
        for daemon in daemons:
            daemon.view_with(set(docs))
        yield [f"singyeong://{APP}@{HOST}:{spec.ports['gateway']}" for spec in placement.hosts]
    finally:
        with contextlib.ExitStack() as stopping:  # each one, even when another fails
            for daemon in daemons:
                stopping.callback(daemon.stop)


@contextlib.asynccontextmanager
async def _clients(producer_dsn: str, consumer_dsn: str) -> AsyncIterator[tuple[Any, Any]]:
    from gossamer.gateway.client import open_gateway_client

    producer = await open_gateway_client(producer_dsn, client_id="producer",
                                         metadata={"role": "producer"}, open_timeout=PATIENCE)
    consumer = await open_gateway_client(consumer_dsn, client_id="consumer",
                                         metadata={"role": "worker"}, open_timeout=PATIENCE)
    try:
        yield producer, consumer
    finally:
        await producer.close()
        await consumer.close()


async def _drain(consumer: Any, count: int) -> None:
    """Take and ack ``count`` messages, keeping ``CREDITS`` requested."""
    await consumer.queue_request(QUEUE, count=CREDITS)
    for n in range(count):
        message = await consumer.receive(timeout=PATIENCE)
        await consumer.ack(message.queue, message.id)
        if n % (CREDITS // 2) == CREDITS // 2 - 1:
            await consumer.queue_request(QUEUE, count=CREDITS // 2)


async def measure(dsns: list[str], count: int) -> dict[str, Any]:
    """Confirm latencies (µs), confirmed pushes per second, delivered+acked per second."""
    out: dict[str, Any] = {}
    async with _clients(dsns[0], dsns[1 % len(dsns)]) as (producer, consumer):
        draining = asyncio.ensure_future(_drain(consumer, count // 10))
        out["latency"] = await one_at_a_time(
            lambda i: producer.queue(QUEUE, TARGET, {"i": i}, timeout=PATIENCE), count // 10)
        await draining
        slots = asyncio.Semaphore(IN_FLIGHT)

        async def push(i: int) -> None:
            async with slots:
                await producer.queue(QUEUE, TARGET, {"i": i}, timeout=PATIENCE)

        start = time.perf_counter()
        draining = asyncio.ensure_future(_drain(consumer, count))
        await asyncio.gather(*(push(i) for i in range(count)))
        out["confirmed"] = count / (time.perf_counter() - start)
        await draining
        out["acked"] = count / (time.perf_counter() - start)
    return out


def main(argv: list[str] | None = None) -> int:
    args = quick_parser("bench.queues_cluster").parse_args(argv)
    from gossamer.aio.loop import run

    count = 500 if args.quick else 5_000
    with tempfile.TemporaryDirectory(prefix="gossamer-bench-queues-") as name:
        tmp = Path(name)
        (tmp / "one").mkdir()
        (tmp / "three").mkdir()
        with one_gateway(tmp / "one") as dsns:
            one = run(measure(dsns, count))
        with three_daemons(tmp / "three") as dsns:
            three = run(measure(dsns, count))

    rows = [
        latency_row("confirm latency p50 / p99 (µs)", one["latency"], three["latency"]),
        rate_row(f"confirmed pushes/s ({IN_FLIGHT} in flight)", one["confirmed"],
                 three["confirmed"]),
        rate_row("delivered and acked/s", one["acked"], three["acked"]),
    ]
    how = command("bench.queues_cluster", args.quick)
    publish(
        "queues-cluster",
        "Replicated queues: three daemons against one gateway",
        f"`{how}` on {machine()}, 127.0.0.1: one `gossamer gateway` with its SQLite "
        "queue, then three `gossamer node` daemons replicating the queue (producer on the "
        "first, consumer on the second); each a process of its own, the clients in the "
        f"benchmark's process. {count // 10:,} one-at-a-time QUEUEs for latency, {count:,} "
        f"with {IN_FLIGHT} awaiting their confirm for throughput, consumed with "
        f"{CREDITS} credits and acked.",
        table(["figure", "one gateway", "replicated, 3 nodes", "3 nodes / one gateway"], rows),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
