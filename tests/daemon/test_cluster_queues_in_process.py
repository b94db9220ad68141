"""``ClusterQueues`` in one process, with real state servers, report sockets and SQLite
stores on 127.0.0.1, fed the order's deliveries by hand.

- A joiner asked for the next view's state before its own arrived (it became the
  coordinator meanwhile) answers with the state at the new cut, never a stale token:
  ``a`` holds the queues; ``j`` joins in view 2 and fetches its state from ``a``, which
  it cannot reach yet (``a``'s card has not come); the order goes on meanwhile; then
  ``j`` must give the token of view 3, which admits ``k``. ``j``'s answer waits for its
  own state, names what ``a`` holds at the same cut, and ``k`` takes the full state
  from ``j``.
- The commands delivered in one turn of the event loop are committed in one
  transaction, and none is reported (``applied_through``) before it is committed.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

from gossamer._types import Address
from gossamer.daemon.queues import ClusterQueues
from gossamer.proto.gateway.queues import QueueConfig
from gossamer.proto.isis import Delivered
from gossamer.proto.views import Member, View
from gossamer.store.queues import SqliteQueueStore
from gossamer.testing import sealed_wire
from gossamer.trace.sink import MemorySink, Tracer
from gossamer.wire import queue_commands as commands
from gossamer.wire.mode import Wire
from gossamer.wire.order_chunks import split

HOST = "127.0.0.1"


def members(*names: str) -> tuple[Member, ...]:
    return tuple(Member(name=n, incarnation=1, address=(HOST, 0)) for n in names)


def push(n: int) -> list[Delivered]:
    """The chunks of a Push of ``a``'s client, as the order delivers them."""
    command = commands.Push(queue="jobs", message_id=f"a#1/{n}", nonce=f"p{n}",
                            target={"application": "work"}, payload={"n": n, "pad": "x" * 900},
                            node="a#1", app="work", client="producer")
    return [Delivered(data=chunk, sender="a#1", sender_id=1, msg_id=n, final_seq=n, proposer=1)
            for chunk in split(f"a#1/{n}", commands.encode(command))]


class Nodes:
    """The three members, and which of them can be reached (their cards came)."""

    def __init__(self, wire: Wire) -> None:
        self.reachable = {"j#1", "k#1"}
        self.queues = {
            name: ClusterQueues(name=name, incarnation=1, store=None, config=QueueConfig(),
                                wire=wire, tracer=Tracer(MemorySink(), run="t", node=name),
                                address_of=self.address_of)
            for name in ("a", "j", "k")
        }
        self.addresses: dict[str, dict[str, Address]] = {}

    def address_of(self, member: str, service: str) -> Address | None:
        if member not in self.reachable:
            return None
        return self.addresses[member.partition("#")[0]][service]

    async def start(self) -> None:
        for name, q in self.queues.items():
            self.addresses[name] = await q.start(HOST)

    async def close(self) -> None:
        for q in self.queues.values():
            await q.close()


def test_a_joiner_answers_for_the_next_view_only_with_its_own_state_restored() -> None:
    async def main() -> None:
        nodes = Nodes(sealed_wire())
        await nodes.start()
        a, j, k = (nodes.queues[n] for n in ("a", "j", "k"))
        try:
            a.on_view(View(id=1, members=members("a")))
            for n in (1, 2):
                for chunk in push(n):
                    a.apply(chunk)
            j.restore(await a.snapshot())  # view 2 admits j: the token at its cut
            for q in (a, j):
                q.on_view(View(id=2, members=members("a", "j")))
            for n in (3, 4):  # the order goes on while j waits for a's card
                for chunk in push(n):
                    a.apply(chunk)
                    j.apply(chunk)
            assert j.syncing

            # View 3 admits k, and j is the one asked for the state (the coordinator).
            answer = asyncio.ensure_future(j.snapshot())
            await asyncio.sleep(0.05)
            assert not answer.done() and j.syncing  # no token while j's state is missing
            nodes.reachable.add("a#1")  # a's card came: j's fetch goes through
            token = await asyncio.wait_for(answer, 10)
            assert not j.syncing
            assert token == await a.snapshot()  # the state at the cut of view 3
            assert j.machine.position == a.machine.position == 4

            k.restore(token)
            nodes.reachable.discard("a#1")  # k can only take it from j
            for q in (a, j, k):
                q.on_view(View(id=3, members=members("a", "j", "k")))
            for chunk in push(5):
                for q in (a, j, k):
                    q.apply(chunk)
            async with asyncio.timeout(10):
                while k.syncing:
                    await asyncio.sleep(0.02)
            assert nodes.queues["j"].snapshots.served == 1
            assert k.machine.snapshot() == j.machine.snapshot() == a.machine.snapshot()
            assert k.machine.position == 5 and len(list(k.machine.records())) == 5
        finally:
            await nodes.close()

    asyncio.run(main())


def test_the_commands_of_one_turn_are_committed_together_and_reported_after() -> None:
    async def main(path: Path) -> None:
        store = SqliteQueueStore(path)
        q = ClusterQueues(name="a", incarnation=1, store=store, config=QueueConfig(),
                          wire=sealed_wire(), tracer=Tracer(MemorySink(), run="t", node="a"),
                          address_of=lambda member, service: None)
        await q.start(HOST)
        try:
            q.on_view(View(id=1, members=members("a")))
            await asyncio.sleep(0)
            commits = store.commits
            for n in (1, 2, 3):  # delivered together (one datagram's worth)
                for chunk in push(n):
                    q.apply(chunk)
            assert q.machine.position == 3
            assert store.position() == 0 and q.reports.position == 0  # not yet committed
            await asyncio.sleep(0)
            assert store.commits == commits + 1  # one transaction for the three
            assert store.position() == 3 and store.count() == 3
            assert q.reports.position == 3  # reported once committed
        finally:
            await q.close()
            store.close()

    with tempfile.TemporaryDirectory() as name:
        asyncio.run(main(Path(name) / "queues.sqlite3"))
