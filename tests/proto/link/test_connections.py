"""``LinkConnections``: a TCP-transport link node under the multi-connection contract,
driven here by hand as ``gossamer.sim.streams`` drives it (one connection, ids -1 at
the dialler and 1 at the acceptor)."""

from __future__ import annotations

import random

from gossamer.proto.link import (
    Connect,
    Event,
    LinkConfig,
    LinkDown,
    LinkNode,
    LinkUp,
    Message,
    Readable,
    SocketOptions,
    Transport,
)
from gossamer.proto.link.connections import LinkConnections
from gossamer.trace.sink import MemorySink, Tracer

A, B = ("10.0.0.1", 7000), ("10.0.0.2", 7000)


def node(address: tuple[str, int], name: str) -> LinkConnections:
    return LinkConnections(LinkNode(
        LinkConfig(address=address, node_id=name, transport=Transport.TCP),
        tracer=Tracer(MemorySink(), run="t", node=name),
        rng=random.Random(name),
    ))


def carry(a: LinkConnections, b: LinkConnections, now: float) -> None:
    """Move bytes both ways over the one connection (-1 at ``a``, 1 at ``b``) until
    both are quiet."""
    for _ in range(20):
        moved = False
        for conn, data in a.data_to_send():
            assert conn == -1
            b.receive_data(1, data, now)
            moved = True
        for conn, data in b.data_to_send():
            assert conn == 1
            a.receive_data(-1, data, now)
            moved = True
        if not moved:
            return
    raise AssertionError("the nodes never went quiet")


def linked() -> tuple[LinkConnections, LinkConnections, list[Event], list[Event]]:
    a, b = node(A, "a"), node(B, "b")
    push = a.inner.open_socket("push", 1)
    b.inner.open_socket("pull", 2, SocketOptions(capacity=4))
    push.link(B, 2, 0.0)
    # The node's Connect became a connection to open; its HELLO leaves as early bytes.
    assert a.connections_to_open() == [(-1, B)]
    assert a.connections_to_open() == []
    early = a.data_to_send()
    assert [conn for conn, _ in early] == [-1] and early[0][1]
    b.connection_made(1, ("10.0.0.1", 49152), 0.0)
    a.connection_made(-1, B, 0.0)
    b.receive_data(1, early[0][1], 0.0)
    carry(a, b, 0.0)
    events_a, events_b = list(a.events_received()), list(b.events_received())
    assert not any(isinstance(e, Connect) for e in events_a + events_b)
    return a, b, events_a, events_b


def test_a_dialled_connection_carries_the_handshake_and_the_data() -> None:
    a, b, events_a, events_b = linked()
    assert [type(e) for e in events_a if isinstance(e, LinkUp)] == [LinkUp]
    assert [e.peer for e in events_b if isinstance(e, LinkUp)] == [A]  # named by HELLO
    assert a.inner.socket(1).send(b"hello", 0.1)
    carry(a, b, 0.1)
    assert any(isinstance(e, Readable) for e in b.events_received())
    message = b.inner.socket(2).take_message(0.1)
    assert isinstance(message, Message)
    assert (message.data, message.sender) == (b"hello", A)


def test_a_lost_connection_takes_the_links_down_and_the_next_link_dials_again() -> None:
    a, b, _, _ = linked()
    a.connection_lost(-1, 1.0)
    b.connection_lost(1, 1.0)
    assert [e.reason for e in a.events_received() if isinstance(e, LinkDown)] == [
        "transport_lost"
    ]
    assert [e.reason for e in b.events_received() if isinstance(e, LinkDown)] == [
        "transport_lost"
    ]
    a.inner.socket(1).link(B, 2, 1.5)
    assert a.connections_to_open() == [(-2, B)]


def test_a_connection_whose_framing_broke_is_closed_once() -> None:
    _, b, _, _ = linked()
    b.receive_data(1, b"\xff" * 64, 1.0)  # not an Exon frame
    assert b.connections_to_close() == [1]
    assert b.connections_to_close() == []
    assert [e.reason for e in b.events_received() if isinstance(e, LinkDown)] == [
        "framing_lost"
    ]
    b.connection_lost(1, 1.0)  # the driver's confirmation finds nothing left to do
    assert b.events_received() == []
