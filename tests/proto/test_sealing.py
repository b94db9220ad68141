"""SealedDatagrams: any datagram core behind the envelope (sealed mode, the default)."""

from __future__ import annotations

import random
from typing import Any

from gossamer.proto.isis import Delivered, IsisConfig, IsisCore, members_from
from gossamer.proto.link import LinkConfig, LinkNode, Transport
from gossamer.proto.sealing import SealedDatagrams, SealedStream, StreamSeals
from gossamer.trace import MemorySink, Tracer
from gossamer.wire import envelope
from gossamer.wire import isis as wire
from gossamer.wire.keyring import Key, Keyring


def keyring(secret: bytes = b"k" * 32) -> Keyring:
    return Keyring(cluster="test", keys=Key.from_bytes(secret, key_id=1))


def sealed_pair(
    ring_b: Keyring | None = None,
) -> tuple[SealedDatagrams[IsisCore], SealedDatagrams[IsisCore], MemorySink]:
    members = members_from([(f"m{i}", (f"10.0.0.{i}", 7000)) for i in (1, 2, 3)])
    sink = MemorySink()
    cores = []
    for member, ring in zip(members[:2], (keyring(), ring_b or keyring()), strict=True):
        tracer = Tracer(sink, run="t", node=member.name)
        core = IsisCore(IsisConfig(me=member.id, members=members), tracer=tracer,
                        rng=random.Random(member.id))  # fmt: skip
        session = envelope.SenderSession(
            sender=member.name, epoch=1, randbytes=random.Random(member.id).randbytes
        )
        cores.append(SealedDatagrams(core, keyring=ring, session=session, tracer=tracer,
                                     layer="isis"))  # fmt: skip
    return cores[0], cores[1], sink


A_ADDR, B_ADDR = ("10.0.0.1", 7000), ("10.0.0.2", 7000)


def test_sealed_datagrams_hide_the_plaintext_and_open_at_the_peer() -> None:
    a, b, _ = sealed_pair()
    a.inner.multicast(0x1CEB00DA, 0.0)
    out = a.datagrams_to_send()
    plain = wire.encode(wire.DataMessage(sender=1, msg_id=1, data=b"\x1c\xeb\x00\xda"))
    to_b = [data for data, addr in out if addr == B_ADDR]
    assert len(to_b) == 1 and plain not in to_b[0] and b"\x1c\xeb\x00\xda" not in to_b[0]
    b.receive_datagram(to_b[0], A_ADDR, 0.0)
    assert b.opened == 1 and b.inner.counters.messages_in == 1
    acks = b.datagrams_to_send()
    assert acks and a.sealed == len(out) and b.sealed == len(acks)


def test_forgeries_and_replays_never_reach_the_core() -> None:
    a, b, sink = sealed_pair()
    a.inner.multicast(7, 0.0)
    (sealed,) = [data for data, addr in a.datagrams_to_send() if addr == B_ADDR]
    b.receive_datagram(sealed, A_ADDR, 0.0)
    b.datagrams_to_send()
    inner_in = b.inner.counters.datagrams_in
    # The same datagram with a later seq (the header's last 8 bytes before the payload):
    # fresh for the replay window, so it takes a failed authentication to refuse it.
    header = envelope.overhead("m1") - envelope.TAG_SIZE
    later = sealed[: header - 8] + (2).to_bytes(8, "big") + sealed[header:]
    attacks = [
        sealed,  # a replay of a datagram already accepted
        later,  # altered in flight
        wire.encode(wire.DataMessage(sender=1, msg_id=2, data=bytes(4))),  # the plaintext wire
        b"\x01" + bytes(60),  # envelope-shaped garbage
    ]
    for data in attacks:
        b.receive_datagram(data, A_ADDR, 0.1)
    assert b.inner.counters.datagrams_in == inner_in
    assert b.datagrams_to_send() == []
    assert sum(b.rejected.values()) == len(attacks)
    assert b.rejected["duplicate"] == 1 and b.rejected["forged"] == 1
    reasons = [e.attrs["reason"] for e in sink.events if e.kind == "drop" and e.node == "m2"]
    assert len(reasons) == len(attacks) and all(r.startswith("envelope: ") for r in reasons)


def test_another_key_cannot_open_or_forge() -> None:
    a, b, _ = sealed_pair(ring_b=keyring(b"z" * 32))
    a.inner.multicast(7, 0.0)
    for data, addr in a.datagrams_to_send():
        if addr == B_ADDR:
            b.receive_datagram(data, A_ADDR, 0.0)
    assert b.rejected == {"forged": 1}
    assert not [e for e in b.inner.events_received() if isinstance(e, Delivered)]


# -- streams: two real link nodes' TCP endpoints, bytes carried by hand ---------------------


def stream_pair(
    c_ring: Keyring | None = None,
) -> tuple[Any, Any, Any, Any]:
    """Node A dials node B: (a's sealed endpoint, b's, node a, node b)."""
    sink = MemorySink()
    nodes, seals = [], []
    for i, ring in ((1, keyring()), (2, c_ring or keyring())):
        addr = (f"10.0.0.{i}", 7000)
        tracer = Tracer(sink, run="t", node=f"n{i}")
        nodes.append(LinkNode(LinkConfig(address=addr, transport=Transport.TCP), tracer=tracer,
                              rng=random.Random(i)))  # fmt: skip
        seals.append(StreamSeals(
            keyring=ring, me=f"10.0.0.{i}:7000", tracer=tracer, layer="link",
            new_session=lambda sender, i=i: envelope.SenderSession(
                sender=sender, epoch=1, randbytes=random.Random(i).randbytes),
        ))  # fmt: skip
    a = SealedStream(nodes[0].stream_endpoint(("10.0.0.2", 7000)), seals[0], "10.0.0.2:7000")
    b = SealedStream(nodes[1].stream_endpoint(None), seals[1], None)
    return a, b, nodes[0], nodes[1]


def test_a_sealed_stream_carries_the_link_and_learns_its_peer() -> None:
    a, b, _, node_b = stream_pair()
    hello = a.data_to_send()
    plain = LinkNode(
        LinkConfig(address=("10.0.0.1", 7000), transport=Transport.TCP),
        tracer=Tracer(MemorySink(), run="t", node="x"), rng=random.Random(9),
    ).stream_endpoint(("10.0.0.2", 7000)).data_to_send()  # the same HELLO, unsealed
    assert plain and plain not in hello and plain[8:] not in hello
    b.receive_data(hello[:7], 0.0)  # records arrive in pieces
    b.receive_data(hello[7:], 0.0)
    assert b.peer == "10.0.0.1:7000" and not b.closing
    assert node_b.peers() == [("10.0.0.1", 7000)]


def test_a_record_for_another_node_or_altered_ends_the_connection() -> None:
    a, b, _, _ = stream_pair()
    record = a.data_to_send()
    b.receive_data(record, 0.0)
    b.receive_data(record, 0.1)  # the same record again: a replay
    assert b.closing and b.seals.rejected == {"duplicate": 1}
    # A record sealed for 10.0.0.2 offered to a node that is someone else.
    a2, _, _, _ = stream_pair()
    c = SealedStream(
        LinkNode(LinkConfig(address=("10.0.0.3", 7000), transport=Transport.TCP),
                 tracer=Tracer(MemorySink(), run="t", node="n3"),
                 rng=random.Random(3)).stream_endpoint(None),
        StreamSeals(keyring=keyring(), me="10.0.0.3:7000", tracer=Tracer(MemorySink(), run="t",
                    node="n3"), layer="link", new_session=lambda s: envelope.SenderSession(
                    sender=s, epoch=1, randbytes=random.Random(3).randbytes)),
        None,
    )  # fmt: skip
    c.receive_data(a2.data_to_send(), 0.0)
    assert c.closing and c.seals.rejected == {"misdirected": 1}


def test_another_key_cannot_join_a_sealed_stream() -> None:
    a, b, _, node_b = stream_pair(c_ring=keyring(b"z" * 32))
    b.receive_data(a.data_to_send(), 0.0)
    assert b.closing and b.seals.rejected == {"forged": 1} and node_b.peers() == []
