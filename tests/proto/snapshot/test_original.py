"""The original's single snapshot, driven by hand (its markers travel outside the core)."""

from __future__ import annotations

import random

import pytest

from gossamer.errors import LocalProtocolError, RemoteProtocolError
from gossamer.proto.isis import IsisConfig, IsisCore, members_from
from gossamer.proto.snapshot import SnapshotDone
from gossamer.proto.snapshot.original import OriginalSnapshotNode
from gossamer.trace import MemorySink, Tracer
from gossamer.wire import isis as wire
from gossamer.wire.mode import WireMode

MEMBERS = members_from([(f"h{i}", (f"10.0.0.{i}", 10001)) for i in (1, 2, 3, 4)])


def node(me: int = 1) -> tuple[OriginalSnapshotNode, MemorySink]:
    sink = MemorySink()
    tracer = Tracer(sink, run="t", node=f"h{me}")
    core = IsisCore(IsisConfig(me=me, members=MEMBERS, wire=WireMode.ORIGINAL), tracer=tracer,
                    rng=random.Random(me))  # fmt: skip
    return OriginalSnapshotNode(core, tracer=tracer), sink


def data(sender: int, msg_id: int) -> bytes:
    return wire.encode(
        wire.DataMessage(sender=sender, msg_id=msg_id, data=(msg_id + 10).to_bytes(4, "big"))
    )


def test_the_initiator_records_every_channel_until_each_marker() -> None:
    n, sink = node(1)
    assert n.marker() == bytes.fromhex("00000005 00000001")
    assert n.initiate(0.0) == [2, 3, 4]
    n.receive_datagram(data(2, 1), ("10.0.0.2", 40000), 0.1)  # recorded on channel h2
    n.receive_marker(2, 0.2)
    n.receive_datagram(data(2, 2), ("10.0.0.2", 40001), 0.3)  # after h2's marker: not
    n.receive_datagram(data(3, 1), ("10.0.0.3", 40002), 0.3)  # h3's channel is open
    assert n.receive_marker(3, 0.4) == ()
    assert n.done is None and n.events_received() == []
    n.receive_marker(4, 0.5)
    (done,) = [e for e in n.events_received() if isinstance(e, SnapshotDone)]
    assert done is n.done and (done.snapshot_id, done.initiator, done.node) == (1, "h1", "h1")
    assert done.channels["h2"]["messages"] == [{"sender": 2, "msg_id": 1, "data": "0000000b"}]
    assert done.channels["h3"]["messages"] == [{"sender": 3, "msg_id": 1, "data": "0000000b"}]
    assert done.channels["h4"]["messages"] == []
    assert done.local_state["latest_seq"] == 0  # recorded before any of the Data
    assert [e.kind for e in sink.events if e.layer == "snapshot"][-1] == "snapshot_done"


def test_a_first_marker_records_and_answers_everyone_and_leaves_its_channel_empty() -> None:
    n, _ = node(3)
    assert n.receive_marker(1, 0.0) == [1, 2, 4]  # the marker's sender included
    n.receive_datagram(data(1, 5), ("10.0.0.1", 40000), 0.1)  # channel h1 is closed
    n.receive_datagram(data(2, 5), ("10.0.0.2", 40000), 0.1)
    assert n.receive_marker(2, 0.2) == ()
    n.receive_marker(4, 0.3)
    # The original's markers do not name the initiator: only who came first is known.
    assert n.done is not None and n.done.initiator == "" and n.first_marker_from == "h1"
    assert n.done.channels["h1"]["messages"] == []
    assert len(n.done.channels["h2"]["messages"]) == 1


def test_bad_markers_and_a_second_snapshot_are_refused() -> None:
    n, _ = node(1)
    with pytest.raises(RemoteProtocolError):
        n.receive_marker(9, 0.0)  # not a member
    n.receive_marker(2, 0.0)
    with pytest.raises(RemoteProtocolError):
        n.receive_marker(2, 0.1)  # twice from one peer
    with pytest.raises(LocalProtocolError):
        n.initiate(0.2)  # one snapshot per lifetime


def test_nothing_goes_to_a_peer_before_our_marker_and_no_multicast_starts() -> None:
    n, _ = node(1)
    n.initiate(0.0)
    assert n.multicast(11, 0.1) is None and n.busy  # held: markers are on their way
    n.receive_datagram(data(2, 1), ("10.0.0.2", 40000), 0.2)  # we owe h2 an Ack
    assert n.datagrams_to_send() == []  # held until our marker reached h2
    n.marker_sent(2, 0.3)
    acks = n.datagrams_to_send()
    assert [addr for _, addr in acks] == [("10.0.0.2", 10001)]
    assert wire.decode(acks[0][0]) == wire.AckMessage(sender=2, msg_id=1, proposed_seq=1,
                                                      proposer=1)  # fmt: skip
    n.marker_sent(3, 0.4)
    n.marker_sent(4, 0.5)
    assert not n.busy  # every marker out: the held multicast went, to every peer
    out = n.datagrams_to_send()
    assert sorted(addr[0] for _, addr in out) == ["10.0.0.2", "10.0.0.3", "10.0.0.4"]
    assert all(isinstance(wire.decode(d), wire.DataMessage) for d, _ in out)


def test_a_peers_datagrams_wait_for_its_marker_once_its_connection_is_seen() -> None:
    n, _ = node(3)
    n.marker_coming(1)  # h1's marker connection was accepted, not yet read
    n.receive_datagram(data(1, 1), ("10.0.0.1", 40000), 0.0)  # sent after its marker
    assert n.inner.counters.datagrams_in == 0
    n.receive_marker(1, 0.1)  # the marker first: we record, then take the datagram
    assert n.inner.counters.datagrams_in == 1
    assert n.done is None
    n.marker_coming(2)
    n.receive_datagram(data(2, 1), ("10.0.0.2", 40000), 0.2)
    n.marker_abandoned(2, 0.3)  # the connection broke: the datagram is not lost
    assert n.inner.counters.datagrams_in == 2
