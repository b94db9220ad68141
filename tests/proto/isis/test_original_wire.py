"""ISIS on the original wire: a member is its IP, as the original identifies it.

The original never binds its sending sockets: each of its datagrams comes from an
ephemeral port, and replies go to the hostfile's port (10001). Here every datagram is
delivered from a random source port, and the group still agrees on one order.
"""

from __future__ import annotations

import random

import pytest

from gossamer.errors import ConfigError, LocalProtocolError
from gossamer.proto.isis import Delivered, IsisConfig, IsisCore, Member, members_from
from gossamer.trace import MemorySink, Tracer
from gossamer.wire import isis as wire
from gossamer.wire.mode import WireMode

PORT = wire.MULTICAST_PORT


def group(n: int) -> tuple[tuple[Member, ...], dict[int, IsisCore], MemorySink]:
    members = members_from([(f"h{i}", (f"10.0.0.{i}", PORT)) for i in range(1, n + 1)])
    sink = MemorySink()
    cores = {
        m.id: IsisCore(
            IsisConfig(me=m.id, members=members, wire=WireMode.ORIGINAL),
            tracer=Tracer(sink, run="t", node=m.name),
            rng=random.Random(m.id),
        )
        for m in members
    }
    return members, cores, sink


def test_ephemeral_source_ports_are_the_same_member() -> None:
    members, cores, sink = group(4)
    ip_of = {m.addr[0]: m.id for m in members}
    ports = random.Random(5)
    for sender in (1, 2, 3, 4):
        for value in range(3):
            cores[sender].multicast(11 + value, 0.0)
    delivered: dict[int, list[tuple[int, int]]] = {m.id: [] for m in members}
    for _ in range(200):
        moved = False
        for src, core in cores.items():
            for data, (ip, port) in core.datagrams_to_send():
                assert port == PORT  # replies go to the hostfile's port
                # The original's source: its IP and a fresh ephemeral port.
                source = (members[src - 1].addr[0], ports.randrange(32768, 61000))
                cores[ip_of[ip]].receive_datagram(data, source, 0.0)
                moved = True
        for member, core in cores.items():
            delivered[member] += [
                (e.sender_id, e.msg_id) for e in core.events_received() if isinstance(e, Delivered)
            ]
        if not moved:
            break
    assert len(delivered[1]) == 12
    assert delivered[1] == delivered[2] == delivered[3] == delivered[4]
    assert not [e for e in sink.events if e.kind == "drop"]


def test_a_stranger_ip_is_still_dropped() -> None:
    _, cores, sink = group(3)
    cores[1].receive_datagram(
        wire.encode(wire.DataMessage(sender=2, msg_id=1, data=(5).to_bytes(4, "big"))),
        ("10.0.0.99", 41000),
        0.0,
    )
    assert cores[1].counters.unknown_sender == 1
    assert [e.attrs["reason"] for e in sink.events if e.kind == "drop"] == ["unknown sender"]


def test_the_original_wire_needs_one_ip_per_member_and_no_batching() -> None:
    shared = members_from([(f"m{i}", ("127.0.0.1", 7000 + i)) for i in range(1, 4)])
    with pytest.raises(ConfigError, match="its own IP"):
        IsisConfig(me=1, members=shared, wire=WireMode.ORIGINAL)
    IsisConfig(me=1, members=shared)  # gossamer's own mode: IP and port
    distinct = members_from([(f"m{i}", (f"10.0.0.{i}", PORT)) for i in range(1, 4)])
    with pytest.raises(ConfigError, match="batching"):
        IsisConfig(me=1, members=distinct, wire=WireMode.ORIGINAL, batch_delay=0.001)
    with pytest.raises(ConfigError, match="batching"):
        IsisConfig(me=1, members=distinct, wire=WireMode.ORIGINAL, batch_turn=True)


def words(*values: int) -> bytes:
    return b"".join(value.to_bytes(4, "big") for value in values)


def test_the_originals_uint32_messages_are_byte_identical() -> None:
    """The original's structs, one per datagram: Data, Ack, Seq and SeqAck of one message."""
    _, cores, _ = group(3)
    assert cores[1].multicast(11, 0.0) == 1  # an int: the original's uint32
    data = [d for d, _ in cores[1].datagrams_to_send()]
    assert data == [words(1, 1, 1, 11)] * 2  # to h2 and h3, 16 bytes each
    cores[2].receive_datagram(data[0], ("10.0.0.1", 40001), 0.0)
    (ack,) = [d for d, _ in cores[2].datagrams_to_send()]
    assert ack == words(2, 1, 1, 1, 2)  # sender 1, msg 1, proposal 1, proposer 2
    cores[1].receive_datagram(ack, ("10.0.0.2", 40002), 0.0)
    cores[3].receive_datagram(data[1], ("10.0.0.1", 40003), 0.0)
    cores[1].receive_datagram(cores[3].datagrams_to_send()[0][0], ("10.0.0.3", 40004), 0.0)
    seqs = [d for d, _ in cores[1].datagrams_to_send()]
    assert seqs == [words(3, 1, 1, 1, 1)] * 2  # final 1, the smallest proposer wins
    cores[2].receive_datagram(seqs[0], ("10.0.0.1", 40005), 0.0)
    assert [d for d, _ in cores[2].datagrams_to_send()] == [words(4, 1, 1, 2)]
    (event,) = [e for e in cores[2].events_received() if isinstance(e, Delivered)]
    assert event.data == (11).to_bytes(4, "big") and event.sender == "h1"


def test_the_original_wire_refuses_anything_but_the_uint32() -> None:
    _, cores, sink = group(3)
    for data in (b"job-1", b"", b"12345"):
        with pytest.raises(LocalProtocolError, match="original's uint32"):
            cores[1].multicast(data, 0.0)
    assert cores[1].datagrams_to_send() == []
    # A gossamer type 7 Data is not the original's: malformed, dropped, counted.
    type7 = wire.encode(wire.DataMessage(sender=1, msg_id=1, data=b"job-1"))
    cores[2].receive_datagram(type7, ("10.0.0.1", 40000), 0.0)
    assert cores[2].counters.malformed == 1 and cores[2].pending == 0
    (drop,) = [e for e in sink.events if e.kind == "drop"]
    assert drop.attrs["reason"] == "a payload that is not a uint32 on the original wire"
