"""The cluster's total order: nodes' membership layers (discovery, cards, the group of
views and ISIS) in one event loop on 127.0.0.1, each with the daemon's replicated state.

Members multicast through the group; every member delivers the same sequence in the same
order, joiners start from the members' state, and after a member is gone the survivors
keep ordering. Assertions are about what was delivered and in which order, never speed.
"""

from __future__ import annotations

import asyncio

import pytest

from gossamer.aio.discovery import Discovery, open_discovery
from gossamer.aio.membership import Membership
from gossamer.daemon.replicated import DeliveryDigest
from gossamer.errors import DecodeError
from gossamer.proto.discovery import DiscoveryConfig
from gossamer.proto.isis import Delivered
from gossamer.proto.views import Member, ViewInstalled
from gossamer.testing import sealed_wire
from gossamer.testing.aio import Runner, until
from gossamer.wire.mode import Wire

HOST = "127.0.0.1"


class Recorded(DeliveryDigest):
    """The daemon's state, and the sequence this node applied (and the state it was
    given, for a joiner)."""

    def __init__(self) -> None:
        super().__init__()
        self.applied: list[bytes] = []
        self.given: tuple[int, str] | None = None

    def apply(self, delivered: Delivered) -> None:
        super().apply(delivered)
        self.applied.append(delivered.data)

    def restore(self, state: bytes) -> None:
        super().restore(state)
        self.given = self.state


def loopback(*seeds: Discovery) -> DiscoveryConfig:
    return DiscoveryConfig(
        address=f"{HOST}:0", broadcast_address=HOST, listen_port=0,
        broadcast_targets=tuple(s.address for s in seeds), broadcast_interval=0.2,
        inactive_time=1.0, heartbeat_wait=0.2,
    )


def node(discovery: Discovery, name: str, wire: Wire, *, bootstrap: bool) -> Membership:
    return Membership(
        discovery, cluster="c", wire=wire, bootstrap=bootstrap, bootstrap_wait=0.2,
        announce_interval=0.2, views_options={"retry": 0.02},
        isis_options={"retransmit_initial": 0.05},
        me=Member(name=name, incarnation=1, address=(HOST, 0)),
        targets=discovery.config.broadcast_targets, replicated=Recorded(),
    )


def state(member: Membership) -> Recorded:
    assert isinstance(member.replicated, Recorded)
    return member.replicated


def names(member: Membership) -> tuple[str, ...]:
    view = member.group.view if member.group is not None else None
    return () if view is None else tuple(sorted(view.names))


async def multicast(members: list[Membership], rounds: int, tag: str) -> None:
    """Every member multicasts ``rounds`` messages, interleaved."""
    for i in range(rounds):
        for member in members:
            assert member.group is not None
            await member.group.send(f"{tag}:{member.me.name}:{i}".encode())


def test_members_deliver_one_order_and_joiners_and_survivors_keep_it(run: Runner) -> None:
    async def main() -> None:
        wire = sealed_wire()
        async with open_discovery(loopback(), wire=wire) as d1, \
                open_discovery(loopback(d1), wire=wire) as d2, \
                open_discovery(loopback(d1), wire=wire) as d3:
            n1 = node(d1, "n1", wire, bootstrap=True)
            n2 = node(d2, "n2", wire, bootstrap=False)
            n3 = node(d3, "n3", wire, bootstrap=False)
            nodes = [n1, n2, n3]
            try:
                # The founder alone orders three messages of its own.
                await n1.start()
                await until(lambda: names(n1) == ("n1",))
                await multicast([n1], 3, "alone")
                await until(lambda: state(n1).count == 3)
                before = state(n1).state

                # Two nodes join: each starts from the members' state at its view.
                await n2.start()
                await n3.start()
                await until(lambda: all(names(n) == ("n1", "n2", "n3") for n in nodes))
                assert state(n2).given == state(n3).given == before

                # All three multicast at once: one order everywhere.
                await multicast(nodes, 5, "three")
                await until(lambda: all(state(n).count == 3 + 15 for n in nodes))
                sequences = [[d for d in state(n).applied if d.startswith(b"three")]
                             for n in nodes]
                assert len(sequences[0]) == 15
                assert sequences[0] == sequences[1] == sequences[2]
                assert state(n1).digest == state(n2).digest == state(n3).digest
                assert state(n1).applied[:3] == [b"alone:n1:0", b"alone:n1:1", b"alone:n1:2"]
                assert all(b"alone" not in d for n in (n2, n3) for d in state(n).applied)

                # n3 is gone (a crash): the survivors install a view without it and
                # go on ordering, the same way.
                await n3.close()
                d3.abort()
                await until(lambda: names(n1) == names(n2) == ("n1", "n2"))
                await multicast([n1, n2], 4, "two")
                await until(lambda: state(n1).count == state(n2).count == 3 + 15 + 8)
                assert [d for d in state(n1).applied if d.startswith(b"two")] == \
                    [d for d in state(n2).applied if d.startswith(b"two")]
                assert state(n1).digest == state(n2).digest
                assert state(n3).count == 3 + 15  # it delivered nothing after its crash
            finally:
                for member in nodes:
                    await member.close()

    run(main())


@pytest.mark.parametrize("bad", [b"", b"x:ab", b"3:", b"0:ab", b"3:zz", b"\xff:00", b"-1:ab"])
def test_a_state_that_is_no_delivery_digest_is_a_decode_error(bad: bytes) -> None:
    digest = DeliveryDigest()
    with pytest.raises(DecodeError):
        digest.restore(bad)
    assert digest.state == (0, "")


def test_a_digest_restored_from_a_snapshot_goes_on_the_same_way() -> None:
    first, second = DeliveryDigest(), DeliveryDigest()
    message = Delivered(data=b"m", sender="n1#1", sender_id=1, msg_id=1, final_seq=1,
                        proposer=1)
    first.apply(message)
    second.restore(asyncio.run(first.snapshot()))
    assert second.state == first.state
    later = Delivered(data=b"n", sender="n2#1", sender_id=2, msg_id=1, final_seq=2,
                      proposer=2)
    first.apply(later)
    second.apply(later)
    assert second.state == first.state and first.count == 2


def test_a_joiner_state_its_replicated_state_refuses_is_counted_and_the_node_goes_on(
    run: Runner,
) -> None:
    async def main() -> None:
        wire = sealed_wire()
        async with open_discovery(loopback(), wire=wire) as d1:
            n1 = node(d1, "n1", wire, bootstrap=True)
            await n1.start()
            try:
                await until(lambda: names(n1) == ("n1",))
                group = n1.group
                assert group is not None and group.view is not None
                # What a member's bug would hand a joiner: not a delivery digest.
                n1.group_event(ViewInstalled(view=group.view, agreed_by=(), state=b"junk"),
                               group)
                assert n1.rejected == {"state": 1}
                assert state(n1).state == (0, "") and state(n1).given is None
                await group.send(b"after")  # and the node goes on ordering
                await until(lambda: state(n1).applied == [b"after"])
            finally:
                await n1.close()

    run(main())
