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

import argparse
import asyncio
import contextlib
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import orjson

from bench._report import machine, table, update_section

HOST = "127.0.0.1"
APP = "bench"
QUEUE = "bench-jobs"
TARGET = {"application": APP, "ops": [{"role": "worker"}]}
IN_FLIGHT = 32
CREDITS = 64
#: Seconds a daemon or gateway may take to come up on a loaded machine.
PATIENCE = 60.0


class Process:
    """One server process and its JSON status lines (read by a thread)."""

    def __init__(self, argv: list[str], cwd: Path, name: str) -> None:
        self.name = name
        self.err = (cwd / f"{name}.stderr").open("wb")
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=self.err, cwd=cwd)
        self.lines: list[dict[str, Any]] = []
        self.cond = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            with contextlib.suppress(orjson.JSONDecodeError):
                line = orjson.loads(raw)
                with self.cond:
                    self.lines.append(line)
                    self.cond.notify_all()

    def wait(self, test: Any, what: str) -> dict[str, Any]:
        deadline = time.monotonic() + PATIENCE
        with self.cond:
            while True:
                for line in self.lines:
                    if isinstance(line, dict) and test(line):
                        return line
                left = deadline - time.monotonic()
                if left <= 0 or self.proc.poll() is not None:
                    raise SystemExit(f"{self.name}: no {what} (see {self.err.name})")
                self.cond.wait(min(left, 0.5))

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.err.close()


@contextlib.contextmanager
def one_gateway(tmp: Path) -> Iterator[list[str]]:
    """``gossamer gateway`` with a durable queue; yields its DSN (one)."""
    from gossamer.testing import free_ports

    (port,) = free_ports(1)
    argv = [sys.executable, "-m", "gossamer.cli.main", "gateway", "--host", HOST,
            "--port", str(port), "--data", str(tmp / "data")]
    process = Process(argv, tmp, "gateway")
    try:
        _wait_port(port, process)
        yield [f"singyeong://{APP}@{HOST}:{port}"]
    finally:
        process.stop()


def _wait_port(port: int, process: Process) -> None:
    import socket

    deadline = time.monotonic() + PATIENCE
    while time.monotonic() < deadline:
        if process.proc.poll() is not None:
            raise SystemExit(f"{process.name} exited (see {process.err.name})")
        with contextlib.suppress(OSError), socket.create_connection((HOST, port), timeout=1.0):
            return
        time.sleep(0.1)
    raise SystemExit(f"{process.name} never listened on {port}")


@contextlib.contextmanager
def three_daemons(tmp: Path) -> Iterator[list[str]]:
    """Three ``gossamer node`` daemons in one cluster; yields their gateways' DSNs once
    every one has installed a view of all three."""
    from gossamer.lab import scenarios
    from gossamer.lab.cluster import daemon_configs
    from gossamer.lab.hosts import loopback_placement
    from gossamer.lab.processes import node_command
    from gossamer.lab.rundir import write_daemon_config, write_secret

    placement = loopback_placement(3)
    values = scenarios.get("queues").resolve({}, placement.ids)
    for sub in ("config", "state", "secrets"):
        (tmp / sub).mkdir()
    key = tmp / "secrets" / "cluster.key"
    write_secret(key)
    docs = daemon_configs(values, placement, run="bench", out=tmp, key_file=key, seed=1)
    processes = []
    try:
        for host, doc in docs.items():
            path = tmp / "config" / f"{host}.toml"
            write_daemon_config(path, doc)
            processes.append(Process(node_command(path), tmp, host))
        for process in processes:
            process.wait(lambda line: line.get("status") == "view"
                         and len(line.get("members", ())) == len(processes), "view of three")
        yield [f"singyeong://{APP}@{HOST}:{spec.ports['gateway']}" for spec in placement.hosts]
    finally:
        for process in processes:
            process.stop()


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


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
        latencies = []
        draining = asyncio.ensure_future(_drain(consumer, count // 10))
        for i in range(count // 10):
            start = time.perf_counter()
            await producer.queue(QUEUE, TARGET, {"i": i}, timeout=PATIENCE)
            latencies.append((time.perf_counter() - start) * 1e6)
        await draining
        out["latency"] = latencies
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
    parser = argparse.ArgumentParser(prog="bench.queues_cluster")
    parser.add_argument("--quick", action="store_true", help="small sizes (CI smoke run)")
    args = parser.parse_args(argv)
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

    def lat(values: list[float]) -> str:
        return f"{statistics.median(values):,.0f} / {_pct(values, 0.99):,.0f}"

    rows: list[list[object]] = [
        ["confirm latency p50 / p99 (µs)", lat(one["latency"]), lat(three["latency"]),
         f"{statistics.median(three['latency']) / statistics.median(one['latency']):.2f}x"],
        [f"confirmed pushes/s ({IN_FLIGHT} in flight)", f"{one['confirmed']:,.0f}",
         f"{three['confirmed']:,.0f}", f"{three['confirmed'] / one['confirmed']:.2f}x"],
        ["delivered and acked/s", f"{one['acked']:,.0f}", f"{three['acked']:,.0f}",
         f"{three['acked'] / one['acked']:.2f}x"],
    ]
    command = "python -m bench.queues_cluster" + (" --quick" if args.quick else "")
    markdown = "\n".join([
        "## Replicated queues: three daemons against one gateway",
        "",
        f"`{command}` on {machine()}, 127.0.0.1: one `gossamer gateway` with its SQLite "
        "queue, then three `gossamer node` daemons replicating the queue (producer on the "
        "first, consumer on the second); each a process of its own, the clients in the "
        f"benchmark's process. {count // 10:,} one-at-a-time QUEUEs for latency, {count:,} "
        f"with {IN_FLIGHT} awaiting their confirm for throughput, consumed with "
        f"{CREDITS} credits and acked.",
        "",
        table(["figure", "one gateway", "replicated, 3 nodes", "3 nodes / one gateway"], rows),
    ])
    update_section("queues-cluster", markdown)
    print(markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
