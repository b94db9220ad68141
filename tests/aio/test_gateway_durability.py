"""Queue durability: confirmed messages survive SIGKILL of the gateway process.

The gateway runs as a real process (``python -m gossamer.cli.gateway_cmd``) on
127.0.0.1 with its SQLite (WAL) store in a temporary directory. Messages are queued
and confirmed, one is delivered and left unacked, the process is killed with SIGKILL,
a new process starts on the same data directory, and every confirmed message is
delivered again (the unacked one with its attempt count carried over).
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from pathlib import Path

from gossamer.aio import loop as aio_loop
from gossamer.aio.gateway_client import open_gateway_client
from gossamer.store.queues import SqliteQueueStore

HOST = "127.0.0.1"


def start_gateway(data: Path, port: int = 0) -> tuple[subprocess.Popen[str], int, str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "gossamer.cli.gateway_cmd", "--host", HOST, "--port", str(port),
         "--data", str(data), "--ack-timeout", "60"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("gossamer gateway listening on"):
        stop(proc)
        raise AssertionError(f"the gateway did not start: {line}")
    bound = int(line.split()[4].rsplit(":", 1)[1])
    return proc, bound, line


def stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()


def test_confirmed_messages_survive_sigkill(tmp_path: Path) -> None:
    data = tmp_path / "gw"
    proc, port, _ = start_gateway(data)
    dsn = f"singyeong://app@{HOST}:{port}"
    try:
        async def before_kill() -> tuple[list[str], str]:
            async with open_gateway_client(
                dsn, client_id="producer", reconnect=False
            ) as producer, open_gateway_client(
                dsn, client_id="consumer", reconnect=False
            ) as consumer:
                ids = [
                    await producer.queue("jobs", {"application": "app"}, {"n": i})
                    for i in range(20)
                ]
                await consumer.queue_request("jobs")
                held = await consumer.receive(5)
                assert held.id == ids[0]
                return ids, held.id

        ids, held = aio_loop.run(before_kill())
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(10) == -signal.SIGKILL
    finally:
        stop(proc)
    with SqliteQueueStore(data) as store:  # what a crash left: every confirmed message
        records = {r.id: r for r in store.load()}
    assert sorted(records) == sorted(ids) and records[held].attempts == 1

    proc, port, line = start_gateway(data, port)
    assert "20 queued messages restored" in line
    try:
        async def after_restart() -> None:
            dsn2 = f"singyeong://app@{HOST}:{port}"
            async with open_gateway_client(dsn2, client_id="consumer2") as consumer:
                await consumer.queue_request("jobs", count=50)
                got = [await consumer.receive(5) for _ in range(20)]
                assert [m.id for m in got] == ids  # queue order kept
                assert got[0].attempt == 2 and all(m.attempt == 1 for m in got[1:])
                assert [m.data for m in got] == [{"n": i} for i in range(20)]
                for message in got:
                    assert message.queue is not None and message.id is not None
                    await consumer.ack(message.queue, message.id)
                await asyncio.sleep(0.2)

        aio_loop.run(after_restart())
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
    finally:
        stop(proc)
    with SqliteQueueStore(data) as store:
        assert store.count() == 0
