"""Queues replicated on the cluster's total order, across three ``gossamer node`` daemons
on 127.0.0.1: a message pushed on one node is consumed and acked on another; the
confirm comes once a majority committed it, so the SIGKILL of the producer's node loses
nothing; an acked message never comes back; and every node's store holds the same
queues (compared row by row once the cluster is quiet)."""

from __future__ import annotations

import contextlib
import signal
import sqlite3
import time
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import tomli_w

from gossamer.aio.gateway_client import GatewayClient, GatewayInvalidError, open_gateway_client
from gossamer.aio.loop import run as run_loop
from gossamer.trace import TraceReader

from .cluster import HOST, PATIENCE, Daemon, gateway_port, mesh

NAMES = ["a", "b", "c"]
TARGET = {"application": "work"}


def stored(db: Path) -> list[tuple[Any, ...]]:
    """A node's stored messages (what the queues are made of), in queue order."""
    with contextlib.closing(sqlite3.connect(str(db))) as conn:
        return conn.execute(
            "SELECT id, queue, seq, payload, dead FROM messages ORDER BY seq").fetchall()


def position(db: Path) -> int:
    with contextlib.closing(sqlite3.connect(str(db))) as conn:
        row = conn.execute("SELECT value FROM meta WHERE key = 'position'").fetchone()
    return 0 if row is None else int(row[0])


@contextlib.contextmanager
def cluster(tmp_path: Path) -> Iterator[tuple[dict[str, Path], dict[str, Daemon]]]:
    """Three daemons, each with its queue store, whose views hold all three."""
    files = mesh(tmp_path, NAMES, gateway={"cluster": {"balance_interval": 3600.0},
                                           "queues": {"ack_timeout": 3.0}})
    for name, path in files.items():  # each its own store
        document = tomllib.loads(path.read_text())
        document["gateway"]["db"] = f"{name}-queues"
        path.write_text(tomli_w.dumps(document))
    daemons = {name: Daemon(path) for name, path in files.items()}
    try:
        for daemon in daemons.values():
            daemon.view_with(set(NAMES))
        for daemon in daemons.values():  # serving queues (not refusing)
            serving(daemon)
        yield files, daemons
    finally:
        codes = {name: daemon.stop() for name, daemon in daemons.items()}
        assert set(codes.values()) <= {0, -9}, {n: d.errors() for n, d in daemons.items()}


def serving(daemon: Daemon, after: float = 0.0) -> dict[str, Any]:
    return daemon.wait(lambda line: line["status"] == "progress" and line["t"] > after
                       and line["ordered"].get("refusing") is None
                       and not line["ordered"].get("syncing"), "queues served")


def db(config: Path) -> Path:
    """The store of the daemon of file ``config``."""
    return config.parent / f"{config.stem}-queues" / "queues.sqlite3"


def dsn(config: Path) -> str:
    return f"singyeong://work@{HOST}:{gateway_port(config)}"


async def client(config: Path, client_id: str) -> GatewayClient:
    return await open_gateway_client(dsn(config), client_id=client_id, open_timeout=10)


def until(test: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + PATIENCE
    while not test():
        if time.monotonic() > deadline:
            raise AssertionError(f"never: {what}")
        time.sleep(0.1)


@pytest.mark.slow
def test_pushed_on_one_node_consumed_and_acked_on_another(tmp_path: Path) -> None:
    with cluster(tmp_path) as (files, daemons):

        async def main() -> tuple[list[str], list[Any]]:
            producer = await client(files["a"], "producer")
            consumer = await client(files["b"], "consumer")
            try:
                ids = [await producer.queue("jobs", TARGET, {"n": i}, nonce=f"p{i}")
                       for i in range(5)]
                await consumer.queue_request("jobs", count=5)
                got = []
                for _ in range(5):
                    message = await consumer.receive(timeout=PATIENCE)
                    assert message.event == "QUEUE" and message.attempt == 1
                    got.append(message.data)
                    assert message.id is not None
                    await consumer.ack("jobs", message.id)
                return ids, got
            finally:
                await producer.close()
                await consumer.close()

        ids, got = run_loop(main())
        assert all(isinstance(i, str) and i.startswith("a#") for i in ids)
        assert got == [{"n": i} for i in range(5)]
        # Every node applied the whole order: the same position, nothing left stored.
        until(lambda: len({position(db(f)) for f in files.values()}) == 1
              and all(stored(db(f)) == [] for f in files.values()), "the same stores")
        assert position(db(files["c"])) >= 5 + 1 + 5  # the pushes, the request, the acks
        assert daemons["c"].wait(lambda line: line["status"] == "progress"
                                 and line["ordered"]["messages"] == 0, "empty queues")


def same_stores(files: dict[str, Path], names: list[str]) -> list[tuple[Any, ...]]:
    """Wait until the stores of ``names`` hold the same rows at the same position."""
    until(lambda: len({position(db(files[n])) for n in names}) == 1
          and len({tuple(stored(db(files[n]))) for n in names}) == 1,
          f"the same stores on {names}")
    return stored(db(files[names[0]]))


def events(tmp_path: Path, name: str, kind: str) -> list[Any]:
    return [e for e in TraceReader().read(tmp_path / f"{name}.jsonl")
            if e.layer == "queue" and e.kind == kind]


@pytest.mark.slow
def test_confirmed_after_a_majority_committed_and_kept_through_the_producers_kill(
    tmp_path: Path,
) -> None:
    with cluster(tmp_path) as (files, daemons):

        async def before() -> list[str]:
            producer = await client(files["a"], "producer")
            consumer = await client(files["b"], "consumer")
            try:
                ids = [await producer.queue("jobs", TARGET, f"m{i}", nonce=f"p{i}")
                       for i in range(3)]
                await consumer.queue_request("jobs")
                first = await consumer.receive(timeout=PATIENCE)
                assert first.id == ids[0]
                await consumer.ack("jobs", ids[0])
                # the ack is in the order once every store has lost the message
                until(lambda: all(ids[0] not in [r[0] for r in stored(db(f))]
                                  for f in files.values()), "the ack applied")
                return ids
            finally:
                await consumer.close()
                # the producer's node is killed with its client connected
                full = daemons["b"].view_with(set(NAMES))
                daemons["a"].kill()
                for name in ("b", "c"):
                    daemons[name].view_with({"b", "c"}, after=full["id"])

        ids = run_loop(before())
        # Each confirm at a came after another member had committed that position.
        applied = {name: {e.seq: e.t for e in events(tmp_path, name, "apply")}
                   for name in NAMES}
        positions = {e.msg: max(p for p, t in applied["a"].items() if t <= e.t)
                     for e in events(tmp_path, "a", "enqueue")}
        confirms = events(tmp_path, "a", "confirm")
        assert {e.msg for e in confirms} == set(ids)
        for confirm in confirms:
            p = positions[confirm.msg]
            assert any(applied[other].get(p, float("inf")) <= confirm.t
                       for other in ("b", "c")), confirm.msg

        async def after() -> list[Any]:
            consumer = await client(files["c"], "late")
            try:
                await consumer.queue_request("jobs", count=3)
                got = [await consumer.receive(timeout=PATIENCE) for _ in range(2)]
                for message in got:
                    assert message.id is not None
                    await consumer.ack("jobs", message.id)
                until(lambda: all(stored(db(files[n])) == [] for n in ("b", "c")),
                      "every message acked")
                assert consumer.pending_messages() == 0  # the acked one never came back
                return [(m.id, m.data) for m in got]
            finally:
                await consumer.close()

        # nothing confirmed was lost with a: the survivors hand out the other two
        assert sorted(run_loop(after())) == [(ids[1], "m1"), (ids[2], "m2")]


@pytest.mark.slow
def test_a_node_without_a_majority_refuses_queue_operations(tmp_path: Path) -> None:
    with cluster(tmp_path) as (files, daemons):
        stopped = [daemons[n].proc for n in ("b", "c")]

        async def main() -> tuple[str, str]:
            producer = await client(files["a"], "producer")
            try:
                assert await producer.queue("jobs", TARGET, "ok", nonce="before")
                for proc in stopped:  # a is cut off from the others: a minority
                    proc.send_signal(signal.SIGSTOP)
                with pytest.raises(GatewayInvalidError) as pending:
                    await producer.queue("jobs", TARGET, "cut", nonce="during", timeout=PATIENCE)
                daemons["a"].wait(lambda line: line["status"] == "progress"
                                  and line["blocked"], "blocked")
                with pytest.raises(GatewayInvalidError) as refused:
                    await producer.queue("jobs", TARGET, "late", nonce="blocked")
                return str(pending.value), str(refused.value)
            finally:
                for proc in stopped:
                    proc.send_signal(signal.SIGCONT)
                await producer.close()

        pending, refused = run_loop(main())
        assert "no_majority" in pending and "no_majority" in refused
        # a minority never confirms: the refused pushes have no confirm at a
        assert len(events(tmp_path, "a", "confirm")) == 1
