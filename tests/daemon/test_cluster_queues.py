"""Queues replicated on the cluster's total order, across three ``gossamer node`` daemons
on 127.0.0.1: a message pushed on one node is consumed and acked on another; the
confirm comes once a majority committed it, so the SIGKILL of the producer's node loses
nothing; an acked message never comes back; and every node's store holds the same
queues (compared row by row once the cluster is quiet)."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
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
from gossamer.testing.daemons import HOST, PATIENCE, Daemon, gateway_port
from gossamer.trace import TraceReader

from .cluster import mesh

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


async def push(config: Path, first: int, count: int, size: int) -> list[str]:
    """``count`` confirmed pushes of ``size``-character payloads through ``config``'s node."""
    producer = await client(config, f"producer-{first}")
    try:
        return [await producer.queue("bulk", TARGET, f"{n:06d}" + "x" * size, nonce=f"n{n}")
                for n in range(first, first + count)]
    finally:
        await producer.close()


async def consume(config: Path, count: int) -> list[str]:
    """Take and ack ``count`` messages of ``bulk`` through ``config``'s node."""
    consumer = await client(config, "eater")
    try:
        await consumer.queue_request("bulk", count=count)
        ids = []
        for _ in range(count):
            message = await consumer.receive(timeout=PATIENCE)
            assert message.id is not None
            await consumer.ack("bulk", message.id)
            ids.append(message.id)
        return ids
    finally:
        await consumer.close()


@pytest.mark.slow
@pytest.mark.parametrize("disk", ["stale", "wiped"])
def test_a_restarted_node_takes_the_queues_state_from_the_others(
    tmp_path: Path, disk: str
) -> None:
    with cluster(tmp_path) as (files, daemons):
        run_loop(push(files["a"], 0, 20, 1024))
        same_stores(files, NAMES)
        full = daemons["a"].view_with(set(NAMES))
        daemons["c"].kill()
        for name in ("a", "b"):
            daemons[name].view_with({"a", "b"}, after=full["id"])
        if disk == "wiped":
            shutil.rmtree(db(files["c"]).parent)
        # The cluster goes on without c: its disk (if any) falls behind.
        run_loop(push(files["b"], 20, 30, 1024))
        eaten = run_loop(consume(files["a"], 5))
        daemons["c"] = Daemon(files["c"])
        new = daemons["c"].wait(lambda line: line["status"] == "ready", "ready")
        for daemon in daemons.values():
            daemon.view_with(set(NAMES), including=f"c#{new['incarnation']}")
        serving(daemons["c"])
        rows = same_stores(files, NAMES)
        assert len(rows) == 45 and not set(eaten) & {row[0] for row in rows}
        restore = events(tmp_path, "c", "restore")[-1]  # its new incarnation's
        assert int(restore.attrs["size"]) > 32 * 1024  # more than an INSTALL carries
        # c serves the queues it took: a consumer on c gets the next message in order.
        (first,) = run_loop(consume(files["c"], 1))
        assert first == rows[0][0]


@pytest.mark.slow
def test_a_node_excluded_while_alive_rejoins_with_the_queues_and_serves_them(
    tmp_path: Path,
) -> None:
    with cluster(tmp_path) as (files, daemons):
        run_loop(push(files["b"], 0, 3, 10))
        old = daemons["a"].wait(lambda line: line["status"] == "ready", "ready")["incarnation"]
        full = daemons["b"].view_with(set(NAMES))

        async def main() -> tuple[list[str], list[Any]]:
            # A consumer of a's, waiting for "later" when a is removed: its credits go
            # with a's incarnation, and a asks for them again once back.
            waiting = await client(files["a"], "waiting")
            try:
                await waiting.queue_request("later", count=2)
                await asyncio.sleep(0.5)  # the request is in the order
                daemons["a"].proc.send_signal(signal.SIGSTOP)  # silent: it is removed
                try:
                    for name in ("b", "c"):
                        await asyncio.to_thread(daemons[name].view_with, {"b", "c"},
                                                after=full["id"])
                    await push(files["c"], 3, 2, 10)
                finally:
                    daemons["a"].proc.send_signal(signal.SIGCONT)
                # a learns it was excluded and comes back as its next incarnation
                line = await asyncio.to_thread(daemons["b"].wait, lambda line: (
                    line["status"] == "view" and f"a#{old}" not in line["members"]
                    and {m.split("#")[0] for m in line["members"]} == set(NAMES)), "a back")
                await asyncio.to_thread(serving, daemons["a"], line["t"])
                producer = await client(files["b"], "later-producer")
                try:
                    for n in range(2):
                        await producer.queue("later", TARGET, n, nonce=f"later{n}")
                finally:
                    await producer.close()
                got = [await waiting.receive(timeout=PATIENCE) for _ in range(2)]
                for message in got:
                    assert message.id is not None
                    await waiting.ack("later", message.id)
            finally:
                await waiting.close()
            eaten = await consume(files["a"], 5)  # a serves the rest, in queue order
            return eaten, [m.data for m in got]

        eaten, later = run_loop(main())
        assert len(set(eaten)) == 5 and later == [0, 1]
        until(lambda: all(stored(db(f)) == [] for f in files.values()), "all acked")


@pytest.mark.slow
def test_an_unacked_delivery_is_redelivered_after_its_timeout_or_its_holders_leave(
    tmp_path: Path,
) -> None:
    with cluster(tmp_path) as (files, _daemons):

        async def main() -> None:
            (pushed,) = await push(files["a"], 0, 1, 10)
            slow = await client(files["b"], "slow")
            try:
                await slow.queue_request("bulk", count=2)
                first = await slow.receive(timeout=PATIENCE)
                assert (first.id, first.attempt) == (pushed, 1)
                # not acked: its ack timer (3 s) fires at b, the expiry goes through
                # the order, and the message comes again
                again = await slow.receive(timeout=PATIENCE)
                assert (again.id, again.attempt) == (pushed, 2)
            finally:
                await slow.close()  # it leaves holding the message
            other = await client(files["c"], "other")
            try:
                await other.queue_request("bulk")
                third = await other.receive(timeout=PATIENCE)
                assert (third.id, third.attempt) == (pushed, 3)
                assert third.id is not None
                await other.ack("bulk", third.id)
            finally:
                await other.close()

        run_loop(main())
        until(lambda: all(stored(db(f)) == [] for f in files.values()), "acked everywhere")


@pytest.mark.slow
def test_a_node_stopping_cleanly_proposes_nothing_more_and_its_deliveries_go_back(
    tmp_path: Path,
) -> None:
    """A clean stop starts nothing new: the disconnections of clients that hold
    deliveries, as their node stops, are not proposed there (the node leaves: they could
    not be ordered), and the messages go back to their queue all the same."""
    with cluster(tmp_path) as (files, daemons):

        async def main() -> None:
            pushed = await push(files["a"], 0, HOLDERS, 10)
            holders = [await client(files["b"], f"holder-{i}") for i in range(HOLDERS)]
            busy = [await client(files["b"], f"busy-{i}") for i in range(HOLDERS)]
            try:
                for holder in holders:  # one message each
                    await holder.queue_request("bulk")
                    first = await holder.receive(timeout=PATIENCE)
                    assert first.attempt == 1
                # Clients that keep b proposing (pushes to another queue) as it stops.
                pushing = [asyncio.create_task(keep_pushing(c)) for c in busy]
                await asyncio.sleep(0.3)
                # b stops while its clients hold the messages, unacked, and they leave
                # at once (as a lab's clients do, stopped with their node).
                daemons["b"].proc.send_signal(signal.SIGTERM)
                await asyncio.sleep(0.01)
                for task in pushing:
                    task.cancel()
                await asyncio.gather(*pushing, return_exceptions=True)
            finally:
                for c in holders + busy:
                    await c.close()
            assert await asyncio.to_thread(daemons["b"].proc.wait, PATIENCE) == 0
            daemons["b"].stop()  # reaped already: its reader is joined
            other = await client(files["c"], "other")
            try:
                await other.queue_request("bulk", count=HOLDERS)
                again = [await other.receive(timeout=PATIENCE) for _ in pushed]
                assert sorted((m.id, m.attempt) for m in again) == sorted(
                    (i, 2) for i in pushed
                )
            finally:
                await other.close()

        run_loop(main())
    trace = list(TraceReader().read(tmp_path / "b.jsonl"))
    stop = next(e.t for e in trace if (e.layer, e.kind) == ("net", "stop"))
    # Its clients went away after the stop, and b multicast nothing from then on.
    assert any(e.layer == "gateway" and e.kind == "peer_down" and e.t > stop for e in trace)
    assert [e.msg for e in trace if e.layer == "isis" and e.kind == "multicast"
            and e.t >= stop] == []


#: Clients of the stopping node holding a delivery each, and as many pushing.
HOLDERS = 4


async def keep_pushing(producer: GatewayClient) -> None:
    """Push to ``other`` until cancelled or refused."""
    n = 0
    with contextlib.suppress(Exception):
        while True:
            n += 1
            await producer.queue("other", TARGET, n, timeout=PATIENCE)
