"""The snapshot core on its own: markers, acknowledgements, channel recording, by hand."""

from __future__ import annotations

import random

import pytest

from gossamer.errors import ConfigError, LocalProtocolError
from gossamer.proto.snapshot import (
    ACK_BIT,
    SnapshotConfig,
    SnapshotCore,
    SnapshotDone,
    initiator_of,
    snapshot_id,
)
from gossamer.trace import MemorySink, Tracer
from gossamer.wire import isis as wire

PEERS = {2: ("b", ("10.0.0.2", 1)), 3: ("c", ("10.0.0.3", 1))}
ADDR = {("10.0.0.2", 1): 2, ("10.0.0.3", 1): 3}


class Harness:
    def __init__(self, *, drop_rate: float = 0.0) -> None:
        self.sink = MemorySink()
        self.drained: dict[int, bool] = {2: True, 3: True}
        self.states = 0
        self.core = SnapshotCore(
            me=1,
            peers=PEERS,
            name="a",
            tracer=Tracer(self.sink, run="t", node="a"),
            rng=random.Random(0),
            local_state=self.state,
            drained=lambda peer: self.drained[peer],
            config=SnapshotConfig(drop_rate=drop_rate),
        )

    def state(self) -> dict[str, int]:
        self.states += 1
        return {"n": self.states}

    def sent(self) -> list[tuple[int, int]]:
        """(peer, snapshot_id field) of every marker sent since the last call."""
        out = []
        for data, addr in self.core.datagrams_to_send():
            msg = wire.decode(data)
            assert isinstance(msg, wire.SnapshotMarker) and msg.sender == 1
            out.append((ADDR[addr], msg.snapshot_id))
        return out

    def marker(self, src: int, sid: int, now: float = 0.0) -> None:
        self.core.receive_marker(wire.SnapshotMarker(sender=src, snapshot_id=sid), src, now)

    def paused(self) -> bool:
        return self.core.active

    def done(self) -> list[SnapshotDone]:
        return self.core.events_received()


def test_ids_carry_the_initiator_and_the_ack_bit_is_separate() -> None:
    sid = snapshot_id(3, 7)
    assert sid == 3 << 16 | 7 and initiator_of(sid) == 3 and initiator_of(sid | ACK_BIT) == 3
    with pytest.raises(LocalProtocolError):
        snapshot_id(1 << 15, 1)
    with pytest.raises(LocalProtocolError):
        snapshot_id(1, 0)
    with pytest.raises(ConfigError):
        SnapshotConfig(retransmit_initial=0.0)


def test_initiator_records_marks_drained_channels_and_pauses_until_acknowledged() -> None:
    h = Harness()
    h.drained[3] = False  # member 3 has not acknowledged all our data yet (rule 1)
    sid = h.core.initiate(0.0)
    assert h.states == 1 and h.paused()
    assert h.sent() == [(2, sid)]  # no marker to 3 yet
    h.core.poll(0.1)
    assert h.sent() == []
    h.drained[3] = True
    h.core.poll(0.2)
    assert h.sent() == [(3, sid)]
    h.marker(2, sid | ACK_BIT)
    paused = h.paused()  # 3 has not acknowledged: still paused (rule 2)
    h.marker(3, sid | ACK_BIT)
    assert paused and not h.paused()
    assert h.done() == []  # the channels are still open: no marker from 2 and 3 yet
    h.core.on_message(2, {"msg_id": 5}, 0.3)
    h.marker(2, sid, 0.4)
    h.core.on_message(2, {"msg_id": 6}, 0.5)  # after 2's marker: not in the channel
    h.core.on_message(3, {"msg_id": 1}, 0.5)
    h.marker(3, sid, 0.6)
    assert h.sent() == [(2, sid | ACK_BIT), (3, sid | ACK_BIT)]  # every marker is acked
    (done,) = h.done()
    assert done.snapshot_id == sid and done.initiator == "a" and done.node == "a"
    assert done.local_state == {"n": 1}
    assert done.channels == {
        "b": {"messages": [{"msg_id": 5}], "closed_by": "marker"},
        "c": {"messages": [{"msg_id": 1}], "closed_by": "marker"},
    }
    assert (done.recorded_at, done.completed_at) == (0.0, 0.6)
    assert done.to_json()["channels"]["b"]["messages"] == [{"msg_id": 5}]
    kinds = [e.kind for e in h.sink.events]
    assert kinds.count("local_state") == 1 and kinds.count("channel_state") == 2
    assert kinds[-1] == "snapshot_done" and "marker" in kinds


def test_first_marker_records_and_closes_its_channel_empty() -> None:
    h = Harness()
    sid = snapshot_id(2, 1)
    h.core.on_message(2, {"msg_id": 1}, 0.0)  # before recording: part of the state
    h.marker(2, sid)
    assert h.states == 1
    assert sorted(h.sent()) == [(2, sid), (2, sid | ACK_BIT), (3, sid)]
    h.core.on_message(2, {"msg_id": 2}, 0.1)  # channel 2 is closed: not recorded
    h.core.on_message(3, {"msg_id": 9}, 0.1)
    h.marker(2, sid | ACK_BIT)
    h.marker(3, sid | ACK_BIT)
    h.marker(3, sid)
    (done,) = h.done()
    assert done.initiator == "b"
    assert done.channels["b"]["messages"] == [] and done.channels["c"]["messages"] == [
        {"msg_id": 9}
    ]
    # A late duplicate marker is acknowledged again; nothing else happens.
    h.sent()
    h.marker(2, sid)
    assert h.sent() == [(2, sid | ACK_BIT)] and h.done() == [] and h.states == 1


def test_markers_are_retransmitted_until_acknowledged() -> None:
    h = Harness()
    sid = h.core.initiate(0.0)
    h.sent()
    times = []
    while (deadline := h.core.next_deadline()) is not None and deadline < 1.5:
        h.core.handle_timer(deadline)
        times.append((round(deadline, 6), sorted(h.sent())))
    assert times == [
        (0.2, [(2, sid), (3, sid)]),
        (0.6, [(2, sid), (3, sid)]),
        (1.4, [(2, sid), (3, sid)]),
    ]
    h.marker(2, sid | ACK_BIT)
    h.marker(3, sid | ACK_BIT)
    assert h.core.next_deadline() is None
    attempts = [e.attrs.get("attempt") for e in h.sink.select(kind="marker")]
    assert attempts.count("3") == 2


def test_concurrent_snapshots_are_independent() -> None:
    h = Harness()
    mine = h.core.initiate(0.0)
    theirs = snapshot_id(3, 1)
    h.marker(3, theirs)
    assert h.states == 2 and h.core.in_progress == sorted([mine, theirs])
    for sid in (mine, theirs):
        h.marker(2, sid | ACK_BIT)
        h.marker(3, sid | ACK_BIT)
        h.marker(2, sid)
    h.marker(3, mine)
    assert sorted(d.snapshot_id for d in h.done()) == sorted([mine, theirs])


def test_a_removed_member_closes_its_channel_and_is_not_waited_for() -> None:
    h = Harness()
    sid = h.core.initiate(0.0)
    h.marker(2, sid | ACK_BIT)
    h.marker(2, sid)
    h.core.remove_member(3, 1.0)
    (done,) = h.done()
    assert done.channels["c"]["closed_by"] == "removed"
    h.marker(3, snapshot_id(3, 1))  # from a removed member: ignored
    assert h.states == 1 and h.sent() != []


def test_injected_drop_applies_to_markers() -> None:
    h = Harness(drop_rate=1.0)
    h.marker(2, snapshot_id(2, 1))
    assert h.states == 0 and h.core.injected_drops == 1
    assert h.sink.select(kind="drop")[0].attrs["reason"] == "injected"


def test_peers_must_not_include_me() -> None:
    with pytest.raises(ConfigError):
        SnapshotCore(
            me=2,
            peers=PEERS,
            name="b",
            tracer=Tracer(MemorySink(), run="t", node="b"),
            rng=random.Random(0),
            local_state=dict,
            drained=lambda p: True,
        )
