"""gossamer.aio.membership: cards, and discovery's word turned into agreed views, in one
event loop on 127.0.0.1 (real sealed sockets; nothing is broadcast)."""

from __future__ import annotations

import asyncio

import pytest

from gossamer.aio.discovery import Discovery, open_discovery
from gossamer.aio.membership import CARD_PREFIX, MAX_CARD, Card, Membership
from gossamer.errors import DecodeError
from gossamer.proto.discovery import DiscoveryConfig
from gossamer.proto.views import Member
from gossamer.testing import sealed_wire
from gossamer.testing.aio import Runner, until
from gossamer.wire.mode import Wire

HOST = "127.0.0.1"


def card(**changes: object) -> Card:
    fields: dict[str, object] = {
        "cluster": "c", "name": "n1", "incarnation": 7, "views": (HOST, 7402),
        "state": "member", "bootstrap": True, "services": {"gateway": (HOST, 4567)},
        "peers": ((HOST, 7500), (HOST, 7600)),
    }
    fields.update(changes)
    return Card(**fields)  # type: ignore[arg-type]


def test_a_card_survives_encoding() -> None:
    original = card()
    assert Card.decode(original.encode()) == original
    assert original.member == Member(name="n1", incarnation=7, address=(HOST, 7402))


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"hello", "not a card"),
        (CARD_PREFIX + b"x" * MAX_CARD, "card too long"),
        (CARD_PREFIX + b"{", "malformed card"),
        (CARD_PREFIX + b"[]", "malformed card"),
        (card(state="king").encode(), "malformed card"),
        (card(incarnation=0).encode(), "malformed card"),
        (card(incarnation=True).encode(), "malformed card"),
        (card(name="").encode(), "malformed card"),
        (card(views=(HOST, 70000)).encode(), "malformed card"),
        (card(services={"gateway": "h:1"}).encode(), "malformed card"),
        (card(bootstrap="yes").encode(), "malformed card"),
        (card(peers=((HOST, 0),)).encode(), "malformed card"),
    ],
)
def test_a_bad_card_is_a_decode_error(data: bytes, reason: str) -> None:
    with pytest.raises(DecodeError) as caught:
        Card.decode(data)
    assert caught.value.reason.startswith(reason)


def loopback(*seeds: Discovery) -> DiscoveryConfig:
    return DiscoveryConfig(
        address=f"{HOST}:0", broadcast_address=HOST, listen_port=0,
        broadcast_targets=tuple(s.address for s in seeds), broadcast_interval=0.2,
        inactive_time=1.0, heartbeat_wait=0.2,
    )


def membership(discovery: Discovery, name: str, wire: Wire, *, bootstrap: bool) -> Membership:
    return Membership(
        discovery, cluster="c", wire=wire, bootstrap=bootstrap, bootstrap_wait=0.2,
        announce_interval=0.2, views_options={"retry": 0.02},
        me=Member(name=name, incarnation=1, address=(HOST, 0)),
        targets=discovery.config.broadcast_targets,
    )


def test_a_founder_and_a_joiner_agree_and_bad_cards_are_refused(run: Runner) -> None:
    async def main() -> None:
        wire = sealed_wire()
        async with open_discovery(loopback(), wire=wire) as d1, \
                open_discovery(loopback(d1), wire=wire) as d2, \
                open_discovery(loopback(d1), wire=wire) as stranger:
            founder = membership(d1, "n1", wire, bootstrap=True)
            joiner = membership(d2, "n2", wire, bootstrap=False)
            await founder.start()
            await joiner.start()
            try:
                def both_in() -> bool:
                    views = [m.group.view if m.group else None for m in (founder, joiner)]
                    return all(v is not None and v.names == ("n1", "n2") for v in views)

                await until(both_in)
                assert founder.state == joiner.state == "member"
                assert {c.name for c in founder.cards.values()} == {"n2"}
                # A registered peer sends what no member should: each is refused and
                # counted, and the founder goes on.
                await until(lambda: d1.address in stranger.peers())
                for data in (b"garbage", card(cluster="other").encode(),
                             card(name="n1", incarnation=99).encode()):
                    await stranger.send(data, to=d1.address)
                await until(lambda: sum(founder.rejected.values()) == 3)
                assert founder.rejected == {"malformed": 1, "cluster": 1, "own_name": 1}
                assert founder.group is not None and founder.group.view is not None
                assert founder.group.view.names == ("n1", "n2")
                # A member's discovery leaves: the other suspects it. One of two is no
                # majority of the view, so no view follows: the founder is blocked.
                await joiner.close()
                await d2.close()
                await until(lambda: founder.group is not None and founder.group.blocked)
            finally:
                await founder.close()
                await joiner.close()

    run(main())


def test_a_member_excluded_while_alive_rejoins_as_the_next_incarnation(run: Runner) -> None:
    async def main() -> None:
        wire = sealed_wire()
        async with open_discovery(loopback(), wire=wire) as d1, \
                open_discovery(loopback(d1), wire=wire) as d2, \
                open_discovery(loopback(d1), wire=wire) as d3:
            nodes = [membership(d1, "n1", wire, bootstrap=True),
                     membership(d2, "n2", wire, bootstrap=False),
                     membership(d3, "n3", wire, bootstrap=False)]
            for node in nodes:
                await node.start()
            try:
                def names(node: Membership) -> tuple[str, ...]:
                    view = node.group.view if node.group is not None else None
                    return () if view is None else tuple(sorted(view.names))

                await until(lambda: all(names(n) == ("n1", "n2", "n3") for n in nodes))
                n1, n2, _ = nodes
                # A false suspicion: n2 is alive. A card of n2's still on its way (it
                # became a member) withdraws a suspicion, as it should, so the test
                # repeats it until n2 is removed and learns it.
                async with asyncio.timeout(20):
                    while n2.me.incarnation == 1:
                        assert n1.group is not None
                        n1.group.suspect("n2", incarnation=1)
                        await asyncio.sleep(0.05)
                # n2 comes back as its next incarnation.
                await until(lambda: all(names(n) == ("n1", "n2", "n3") for n in nodes)
                            and n1.group is not None and n1.group.view is not None
                            and n1.group.view.has(("n2", n2.me.incarnation)))
                assert n2.state == "member"
            finally:
                for node in nodes:
                    await node.close()

    run(main())


def test_nodes_that_named_different_seeds_find_each_other_through_cards(run: Runner) -> None:
    async def main() -> None:
        wire = sealed_wire()
        # A chain: n2 names n1, n3 names n2; n1 and n3 learn of each other from cards.
        async with open_discovery(loopback(), wire=wire) as d1, \
                open_discovery(loopback(d1), wire=wire) as d2, \
                open_discovery(loopback(d2), wire=wire) as d3:
            nodes = [membership(d1, "n1", wire, bootstrap=True),
                     membership(d2, "n2", wire, bootstrap=False),
                     membership(d3, "n3", wire, bootstrap=False)]
            for node in nodes:
                await node.start()
            try:
                def names(node: Membership) -> tuple[str, ...]:
                    view = node.group.view if node.group is not None else None
                    return () if view is None else view.names

                # Either end may register the other first from the other's datagrams, so
                # wait for both to have learned the other from n2's cards as well; and
                # for the view of the three (n2's crash before n3 is in would leave n1
                # one of two: no majority, blocked, as it should be).
                await until(lambda: d1.address in d3.peers() and d3.address in d1.peers()
                            and d1.address in nodes[2].learned
                            and d3.address in nodes[0].learned
                            and all(sorted(names(n)) == ["n1", "n2", "n3"] for n in nodes))
                # So n2's crash leaves n1 and n3 in touch: a view of the two of them.
                await nodes[1].close()
                d2.abort()
                await until(lambda: names(nodes[0]) == names(nodes[2]) == ("n1", "n3"))
            finally:
                for node in nodes:
                    await node.close()

    run(main())
