"""The real Chatter's messages (shared/vectors/chatter/messages.json) through the handler path.

Each golden message, produced by Chatter 0.0.14 itself, is fed to an original-wire core
as a multicast datagram and over TCP (coalesced in one read, which Chatter itself could not
take, §3): the registered handlers decode the payload, the node delivers it once, and the
peer database learns what the message says. And a core's own message for the minimal
vector's gossip is that vector's gossip byte for byte.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from gossamer.proto.gossip import Delivered, GossipConfig, GossipCore, MessageHandler, WireMode
from gossamer.trace.sink import MemorySink, Tracer
from gossamer.wire import chatter as cw
from gossamer.wire.chatter import NetID
from gossamer.wire.varint import encode_uint

VECTORS = json.loads((Path(__file__).parent / "vectors" / "messages.json").read_text())["messages"]


def handlers() -> list[MessageHandler]:
    hello = MessageHandler(
        name="hello",
        encode_with=lambda p, ids: p[1],  # type: ignore[index]
        decode_with=lambda b, ids: ("hello", b),
    )

    def encode_bid(p: object, ids: Mapping[NetID, int]) -> bytes:
        assert isinstance(p, tuple)
        return encode_uint(ids[p[1]]) + encode_uint(p[2])

    def decode_bid(b: bytes, table: Mapping[int, NetID]) -> object:
        # {:broadcast_id, origin, seqno}: the origin as a table index, then the seqno.
        return ("broadcast_id", table[b[0]], b[1])

    bid = MessageHandler(
        name="broadcast_id",
        encode_with=encode_bid,
        decode_with=decode_bid,
        extract_netids=lambda p: [p[1]],  # type: ignore[index]
    )
    return [hello, bid]


def compat_core(key: str, host: str = "192.168.200.1") -> GossipCore:
    config = GossipConfig(my_addr=host, key=key.encode(), wire=WireMode.ORIGINAL)
    return GossipCore(
        config,
        tracer=Tracer(MemorySink(), run="v", node=str(config.netid)),
        rng=random.Random(0),
        handlers=handlers(),
    )


def expected_payload(vector: dict[str, Any]) -> object:
    payload = vector["gossip"]["payload"]
    if payload["type"] == "hello":
        return ("hello", bytes.fromhex(payload["text_hex"]))
    return ("broadcast_id", NetID.parse(payload["origin"]), payload["seqno"])


@pytest.mark.parametrize("vector", VECTORS, ids=[v["name"] for v in VECTORS])
def test_each_golden_message_is_delivered_by_multicast(vector: dict[str, Any]) -> None:
    core = compat_core(vector["key_ascii"])
    message = bytes.fromhex(vector["message_hex"])
    origin = NetID.parse(vector["gossip"]["current_id"]["origin"])
    core.receive_datagram(message, (origin.host, 29999), 1.0, multicast=True)
    (event,) = core.events_received()
    assert isinstance(event, Delivered)
    assert event.payload == expected_payload(vector)
    assert event.sender == origin and event.via == "multicast"
    known = {p.netid for p in core.peers(1.0)}
    gossip = vector["gossip"]
    assert origin in known
    assert {NetID.parse(s["origin"]) for s in gossip["seen_ids"]} - {core.own} <= known
    assert {NetID.parse(o) for o in gossip["other_ids"]} <= known
    assert [b.origin for b in core.peers_db.seen_list(1.0)] == [origin]  # a sighting
    # The same message again (Chatter would dispatch it twice): delivered once.
    core.receive_datagram(message, (origin.host, 29999), 2.0, multicast=True)
    assert core.events_received() == []


def test_golden_messages_coalesced_on_one_tcp_read_are_all_delivered() -> None:
    by_key: dict[str, list[dict[str, Any]]] = {}
    for vector in VECTORS:
        by_key.setdefault(vector["key_ascii"], []).append(vector)
    for key, vectors in by_key.items():
        core = compat_core(key)
        stream = b"".join(bytes.fromhex(v["message_hex"]) for v in vectors)
        core.receive_stream(1, stream[:3], 1.0)
        core.receive_stream(1, stream[3:], 1.0)
        got = [e.payload for e in core.events_received()]
        assert got == [expected_payload(v) for v in vectors]
        assert all(s.conn is None for s in core.streams_to_send())  # no ACK to Chatter peers


def test_a_cores_own_message_is_the_minimal_vectors_gossip_byte_for_byte() -> None:
    (vector,) = [v for v in VECTORS if v["name"] == "minimal_default_key"]
    core = compat_core(vector["key_ascii"], host="10.0.0.1")
    core.broadcast([], ("hello", b"world"), 0.0)
    ((data, group),) = core.datagrams_to_send()
    assert group == ("224.1.1.1", 29999)
    key = cw.derive_key(vector["key_ascii"])
    gossip = cw.decode_message(data, key)
    assert cw.encode_gossip(gossip).hex() == vector["uncompressed_gossip_hex"]
    assert len(data) == vector["message_length"]
