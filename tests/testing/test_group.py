"""``pair()`` and ``cluster(n)`` (``gossamer.testing.group``) with real link sockets."""

from __future__ import annotations

import pytest

from gossamer.aio import link
from gossamer.errors import ConfigError, LocalProtocolError, NetworkError
from gossamer.testing import Seat, cluster, pair, sealed_wire
from gossamer.testing.aio import Runner


def test_pair_is_linked_both_ways(run: Runner) -> None:
    async def main() -> None:
        async with pair() as (a, b):
            await a.send(b"ping")
            assert (await b.receive(timeout=5)).data == b"ping"
            await b.send(b"pong")
            assert (await a.receive(timeout=5)).data == b"pong"
        assert a.statistics().established == 0

    run(main())


def test_pair_of_push_and_pull(run: Runner) -> None:
    async def main() -> None:
        async with pair(("push", "pull")) as (push, pull):
            for i in range(20):
                await push.send(b"job %d" % i)
            assert [(await pull.receive(timeout=5)).data for _ in range(20)] == [
                b"job %d" % i for i in range(20)
            ]

    run(main())


def test_cluster_seats_know_each_other_and_share_a_wire(run: Runner) -> None:
    async def main() -> None:
        wire = sealed_wire()
        async with cluster(3, wire=wire) as nodes:
            assert len(nodes) == 3 and nodes.wire is wire
            addresses = [seat.address for seat in nodes.seats]
            assert [node.address for node in nodes] == addresses
            assert len(set(addresses)) == 3
            for seat in nodes.seats:
                assert seat.wire is wire and seat.address not in seat.peers
                assert set(seat.peers) | {seat.address} == set(addresses)
            assert [seat.name for seat in nodes.seats] == ["m1", "m2", "m3"]
            pull = nodes[0].socket("pull", tag="jobs")
            push = nodes[2].socket("push", tag="feed")
            await push.link(pull.address, "jobs", timeout=5)
            await push.send(b"work")
            assert (await pull.receive(timeout=5)).data == b"work"

    run(main())


class _Member:
    def __init__(self, seat: Seat, log: list[str]) -> None:
        self.seat, self.log = seat, log

    async def close(self) -> None:
        self.log.append(f"close {self.seat.name}")


def test_cluster_closes_what_it_opened_when_one_member_fails(run: Runner) -> None:
    async def main() -> None:
        log: list[str] = []

        async def open_member(seat: Seat) -> _Member:
            if seat.index == 2:
                raise NetworkError("no", seat=seat.name)
            log.append(f"open {seat.name}")
            return _Member(seat, log)

        with pytest.raises(NetworkError):
            async with cluster(4, open_member):
                pytest.fail("the group must not start")
        assert log == ["open m1", "open m2", "close m2", "close m1"]

    run(main())


def test_cluster_members_close_on_exit(run: Runner) -> None:
    async def main() -> None:
        async with cluster(2) as nodes:
            first = nodes[0]
            assert isinstance(first, link.Node)
        with pytest.raises(LocalProtocolError):
            first.socket("pull", tag="late")  # closed nodes refuse new sockets

    run(main())


def test_a_cluster_needs_a_member() -> None:
    with pytest.raises(ConfigError):
        cluster(0)
