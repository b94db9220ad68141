"""The Prototari core, one spec row at a time, driven by hand (no network, no clock).

Timers used throughout: broadcast interval 5 s, inactive-peer time 10 s, heartbeat
wait 1 s (three hor? per wait), handshake timeout 2 s (three aupa! per reservation).
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from gossamer._types import Address
from gossamer.errors import ConfigError, LocalProtocolError
from gossamer.proto.discovery import (
    DiscoveryConfig,
    DiscoveryCore,
    PeerDown,
    PeerState,
    PeerUp,
    Received,
)
from gossamer.trace import MemorySink, Tracer
from gossamer.wire import prototari as wire

from .lan import BROADCAST, Lan

ME: Address = ("10.0.0.1", 21450)
X: Address = ("10.0.0.2", 21450)
Y: Address = ("10.0.0.3", 21450)

PELOTARI, AUPA, DALE = b"pelotari?", b"aupa!", b"dale!"
HOR, HEMEN, AGUR = b"hor?", b"hemen nago!", b"agur!"


def make(**kw: Any) -> tuple[DiscoveryCore, MemorySink]:
    kw.setdefault("start_jitter", 0.0)
    sink = MemorySink()
    config = DiscoveryConfig(address=ME, broadcast_address=BROADCAST, **kw)
    return DiscoveryCore(
        config, tracer=Tracer(sink, run="r", node="me"), rng=random.Random(7)
    ), sink


def out(core: DiscoveryCore) -> list[tuple[bytes, Address]]:
    return core.datagrams_to_send()


def uni(core: DiscoveryCore) -> list[tuple[bytes, Address]]:
    """The unicast datagrams among the outputs (broadcasts left out)."""
    return [(data, addr) for data, addr in out(core) if data != PELOTARI]


def broadcast(core: DiscoveryCore, now: float = 0.0) -> None:
    """Fire the broadcast timer at ``now`` and check that exactly pelotari? went out."""
    core.handle_timer(now)
    assert out(core) == [(PELOTARI, (BROADCAST, 21451))]


def register_by_broadcast(core: DiscoveryCore, peer: Address, now: float = 0.0) -> None:
    """Make ``peer`` a registered peer through our broadcast and its aupa! (1c)."""
    broadcast(core, now)
    core.receive_datagram(AUPA, peer, now + 0.001)
    assert out(core) == [(DALE, peer)]
    assert core.events_received() == [PeerUp(peer=peer, name=f"{peer[0]}:{peer[1]}")]


def register_by_answer(core: DiscoveryCore, peer: Address, now: float = 0.0) -> None:
    """Make ``peer`` a registered peer through its broadcast, our aupa! and its dale! (1b)."""
    core.receive_datagram(PELOTARI, peer, now)
    assert out(core) == [(AUPA, peer)]
    core.receive_datagram(DALE, peer, now + 0.001)
    assert out(core) == []
    assert [type(e) for e in core.events_received()] == [PeerUp]


# -- configuration -------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad",
    [
        {"max_peers": 0},
        {"broadcast_interval": 0.0},
        {"inactive_time": -1.0},
        {"heartbeat_wait": 0.0},
        {"handshake_timeout": 0.0},
        {"heartbeat_attempts": 0},
        {"max_missed": 0},
        {"broadcast_port": 0},
        {"broadcast_port": 70000},
        {"max_datagram": 1},
        {"max_datagram": wire.MAX_DATAGRAM + 1},
        {"start_jitter": -1.0},
        {"rebalance_patience": 0},
        {"rebalance_chance": 0.0},
        {"rebalance_chance": 1.5},
    ],
)
def test_bad_configuration_is_a_config_error(bad: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        DiscoveryConfig(address=ME, broadcast_address=BROADCAST, **bad)


def test_spec_defaults() -> None:
    config = DiscoveryConfig(address=ME, broadcast_address=BROADCAST)
    assert (config.broadcast_port, config.max_peers) == (21451, 64)
    assert (config.broadcast_interval, config.heartbeat_wait, config.max_missed) == (5.0, 1.0, 3)
    assert config.jitter == 1.0


# -- 1a broadcasting --------------------------------------------------------------------


def test_broadcasts_pelotari_every_interval_first_one_jittered() -> None:
    core, _ = make(start=100.0, start_jitter=None)
    first = core.next_deadline()
    assert first is not None and 100.0 <= first <= 101.0
    core.handle_timer(first - 0.01)
    assert out(core) == []
    broadcast(core, first)
    assert core.next_deadline() == first + 5.0
    broadcast(core, first + 5.0)
    assert core.counters.broadcasts == 2


def test_a_late_wakeup_does_not_burst_broadcasts() -> None:
    core, _ = make()
    broadcast(core, 0.0)
    broadcast(core, 30.0)  # woken 25 s late: one broadcast, not six
    assert core.next_deadline() == 35.0


def test_full_node_skips_broadcasts_and_resumes_when_a_slot_frees() -> None:
    core, _ = make(max_peers=1)
    register_by_broadcast(core, X, 0.0)
    core.handle_timer(5.0)  # 1a step 3: at max peers, sleep again
    assert out(core) == [] and core.counters.broadcasts_skipped_full == 1
    core.receive_datagram(AGUR, X, 6.0)
    assert [type(e) for e in core.events_received()] == [PeerDown]
    broadcast(core, 10.0)


def test_own_broadcast_is_ignored_exactly() -> None:
    core, sink = make()
    broadcast(core)
    core.receive_datagram(PELOTARI, ME, 0.0001)  # looped back by the broadcast
    assert out(core) == [] and core.events_received() == []
    assert core.counters.own_broadcasts == 1 and core.state_of(ME) is PeerState.UNKNOWN
    assert sink.select(kind="drop")[-1].attrs["reason"] == "own_address"
    # Another node on the same host (same IP, another unicast port) is not us.
    other = (ME[0], 21460)
    core.receive_datagram(PELOTARI, other, 0.001)
    assert out(core) == [(AUPA, other)]


def test_nodes_sharing_an_ip_are_distinct_peers() -> None:
    lan = Lan()
    a = lan.add("a", "10.0.0.1", 21450)
    b = lan.add("b", "10.0.0.1", 21460)
    c = lan.add("c", "10.0.0.1", 21470, start=0.5)
    lan.run(1.0)
    assert sorted(a.core.peers()) == [b.address, c.address]
    assert sorted(b.core.peers()) == [a.address, c.address]
    assert sorted(c.core.peers()) == [a.address, b.address]


# -- 1b responding ----------------------------------------------------------------------


def test_answers_a_stranger_with_aupa_to_its_source_and_reserves_a_slot() -> None:
    core, sink = make(max_peers=2)
    core.receive_datagram(PELOTARI, X, 1.0)
    assert out(core) == [(AUPA, X)]  # 1b step 3
    assert core.state_of(X) is PeerState.RESERVED and core.reservations() == [X]  # step 4
    assert core.peers() == [] and core.events_received() == []
    assert [e.kind for e in sink.events] == ["recv", "reserve", "send"]


def test_broadcast_from_a_registered_peer_is_not_answered() -> None:
    core, _ = make()
    register_by_answer(core, X)
    core.receive_datagram(PELOTARI, X, 5.0)  # 1b step 1
    assert out(core) == [] and core.counters.peer_broadcasts == 1


def test_full_node_does_not_answer_and_reservations_count() -> None:
    core, _ = make(max_peers=1)
    core.receive_datagram(PELOTARI, X, 0.0)
    assert out(core) == [(AUPA, X)]
    assert core.full  # the reservation holds the only slot
    core.receive_datagram(PELOTARI, Y, 0.1)  # 1b step 2
    assert out(core) == [] and core.counters.refused_full == 1
    assert core.state_of(Y) is PeerState.UNKNOWN


def test_dale_within_timeout_registers() -> None:
    core, sink = make()
    core.receive_datagram(PELOTARI, X, 0.0)
    out(core)
    core.receive_datagram(DALE, X, 1.9)  # 1b step 5
    assert core.events_received() == [PeerUp(peer=X, name="10.0.0.2:21450")]
    assert core.peers() == [X] and core.reservations() == []
    (up,) = sink.select(kind="peer_up")
    assert up.layer == "discovery" and up.peer == "10.0.0.2:21450"
    assert dict(up.attrs) == {"reason": "handshake", "addr": "10.0.0.2:21450"}


def test_aupa_is_resent_within_the_reservation_then_the_slot_is_released() -> None:
    core, sink = make(max_peers=1, broadcast_interval=1000.0)
    core.handle_timer(0.0)
    core.receive_datagram(PELOTARI, X, 0.0)
    assert out(core)[-1] == (AUPA, X)
    times = []
    while (deadline := core.next_deadline()) is not None and deadline < 4.0:
        core.handle_timer(deadline)
        if (AUPA, X) in out(core):
            times.append(round(deadline, 6))
    assert times == [pytest.approx(2 / 3), pytest.approx(4 / 3)]  # 3 aupa! in the 2 s window
    assert core.state_of(X) is PeerState.UNKNOWN and not core.full  # released at 2.0
    assert core.counters.reservations_expired == 1
    assert sink.select(kind="release")[0].t == pytest.approx(2.0)
    # 1b step 5: a dale! after the timeout is ignored.
    core.receive_datagram(DALE, X, 2.5)
    assert core.events_received() == [] and core.peers() == []
    assert core.counters.unsolicited == 1


def test_no_aupa_retry_after_dale() -> None:
    core, _ = make()
    register_by_answer(core, X, 0.0)
    core.handle_timer(1.9)
    assert uni(core) == []


def test_reservation_quota_keeps_half_the_free_slots_for_our_own_broadcasts() -> None:
    core, _ = make(max_peers=8)
    strangers = [(f"10.0.1.{i}", 21450) for i in range(1, 11)]
    for stranger in strangers:
        core.receive_datagram(PELOTARI, stranger, 0.0)
    assert len(out(core)) == 4 and len(core.reservations()) == 4
    assert core.counters.refused_reservations == 6
    # The other four slots still take answers to our broadcast.
    broadcast(core, 0.5)
    for stranger in strangers[4:8]:
        core.receive_datagram(AUPA, stranger, 0.6)
    assert len(core.peers()) == 4 and core.full


# -- 1c handshake ------------------------------------------------------------------------


def test_aupa_after_our_broadcast_registers_and_is_confirmed_with_dale() -> None:
    core, _ = make()
    register_by_broadcast(core, X)  # 1c steps 2 and 3
    assert core.peers() == [X]


def test_unsolicited_aupa_and_dale_register_nobody() -> None:
    core, _ = make()
    core.receive_datagram(AUPA, X, 0.0)  # we never broadcast
    core.receive_datagram(DALE, Y, 0.0)  # we never answered Y
    assert out(core) == [] and core.events_received() == [] and core.peers() == []
    assert core.counters.unsolicited == 2
    broadcast(core, 1.0)
    core.receive_datagram(AUPA, X, 3.5)  # more than the handshake timeout after it
    assert out(core) == [] and core.peers() == []
    assert core.counters.unsolicited == 3


def test_full_broadcaster_refuses_aupa_and_says_agur_so_the_slot_is_freed() -> None:
    core, _ = make(max_peers=1)
    register_by_broadcast(core, X, 0.0)
    core.receive_datagram(AUPA, Y, 0.002)  # 1c step 1: at max peers
    assert out(core) == [(AGUR, Y)] and core.events_received() == []
    assert core.peers() == [X] and core.counters.refused_full == 1


def test_lost_dale_is_repaired_by_the_next_round() -> None:
    lost = {"once": True}

    def drop(w: Any) -> bool:
        if w.label == "dale!" and lost["once"]:
            lost["once"] = False
            return True
        return False

    lan = Lan(drop=drop)
    a = lan.add("a", "10.0.0.1", handshake_attempts=1)
    b = lan.add("b", "10.0.0.2", start=100.0)  # b only answers
    lan.run(0.5)
    assert a.core.peers() == [b.address] and b.core.peers() == []  # the dale! was lost
    lan.run(5.5)  # a's next broadcast: b answers again and a re-sends dale!
    assert b.core.peers() == [a.address]
    assert [w.label for w in lan.sent("a") if w.label != "pelotari?"] == ["dale!", "dale!"]
    assert [type(e) for e in a.events] == [PeerUp]  # a registered b once only


def test_lost_dale_is_repaired_by_an_aupa_retry_within_the_reservation() -> None:
    drops = iter([True])
    lan = Lan(drop=lambda w: w.label == "dale!" and next(drops, False))
    a = lan.add("a", "10.0.0.1")
    b = lan.add("b", "10.0.0.2", start=100.0)
    lan.run(1.0)
    assert a.core.peers() == [b.address] and b.core.peers() == [a.address]
    assert [w.label for w in lan.sent("b")] == ["aupa!", "aupa!"]


def test_simultaneous_discovery_registers_each_side_once() -> None:
    lan = Lan()
    a = lan.add("a", "10.0.0.1")
    b = lan.add("b", "10.0.0.2")
    lan.run(0.0)  # both broadcast at 0.0
    assert a.core.peers() == [b.address] and b.core.peers() == [a.address]
    assert [type(e) for e in a.events] == [PeerUp] and [type(e) for e in b.events] == [PeerUp]
    assert a.core.reservations() == [] and b.core.reservations() == []


# -- 2 heartbeat -------------------------------------------------------------------------


def test_silent_peer_gets_hor_after_inactive_time_and_hemen_nago_resets() -> None:
    core, _ = make(broadcast_interval=1000.0)
    register_by_answer(core, X, 0.0)
    core.handle_timer(9.0)
    assert uni(core) == []
    assert core.next_deadline() == pytest.approx(10.001)  # 2 step 2: last seen at 0.001
    core.handle_timer(10.001)
    assert out(core) == [(HOR, X)] and core.state_of(X) is PeerState.PROBING
    core.receive_datagram(HEMEN, X, 10.2)  # 2 step 4
    assert core.state_of(X) is PeerState.PEER and core.missed(X) == 0
    assert core.next_deadline() == pytest.approx(20.2)
    core.handle_timer(20.2)
    assert out(core) == [(HOR, X)]


def test_any_unicast_message_counts_as_seen() -> None:
    core, _ = make(broadcast_interval=100.0)
    register_by_answer(core, X, 0.0)
    for t, data in [(5.0, b"\x00\x01hello"), (12.0, HOR), (18.0, HEMEN)]:
        core.receive_datagram(data, X, t)
    out(core)
    core.handle_timer(27.9)
    assert uni(core) == []
    core.handle_timer(28.0)
    assert uni(core) == [(HOR, X)]


def test_a_peer_broadcast_does_not_count_as_seen() -> None:
    # Deliberate difference (docs/discovery.md, "What counts as seen"): a broadcast
    # says nothing about whether the peer still has us registered.
    core, _ = make(broadcast_interval=100.0)
    register_by_answer(core, X, 0.0)
    core.receive_datagram(PELOTARI, X, 9.0)
    core.handle_timer(10.001)
    assert uni(core) == [(HOR, X)]


def test_three_missed_heartbeats_remove_the_peer_at_inactive_plus_three_waits() -> None:
    core, sink = make(broadcast_interval=1000.0)
    register_by_answer(core, X, 0.0)
    hors: list[float] = []
    events: list[object] = []
    while not events:
        deadline = core.next_deadline()
        assert deadline is not None and deadline < 100
        core.handle_timer(deadline)
        hors += [deadline for data, _ in out(core) if data == HOR]
        events = list(core.events_received())
    assert events == [PeerDown(peer=X, name="10.0.0.2:21450", reason="heartbeat")]
    # Last seen at 0.001; hor? at 10.001 + k/3 for k = 0..8; removed at 13.001.
    assert hors == pytest.approx([10.001 + k / 3 for k in range(9)])
    assert deadline == pytest.approx(13.001)
    assert core.counters.misses == 2 and core.counters.removed_heartbeat == 1
    (down,) = sink.select(kind="peer_down")
    assert dict(down.attrs) == {"reason": "heartbeat", "addr": "10.0.0.2:21450", "missed": "3"}
    assert [e.seq for e in sink.select(kind="miss")] == [1, 2]


def test_one_answer_after_two_misses_resets_the_count() -> None:
    core, _ = make(broadcast_interval=1000.0)
    register_by_answer(core, X, 0.0)
    for t in (10.001, 10.34, 10.67, 11.001, 11.34, 11.67, 12.001):
        core.handle_timer(t)
    assert core.missed(X) == 2
    core.receive_datagram(HEMEN, X, 12.5)
    assert core.missed(X) == 0 and core.state_of(X) is PeerState.PEER
    assert core.next_deadline() == pytest.approx(22.5)


def test_hor_from_a_peer_is_answered_and_from_a_stranger_gets_agur() -> None:
    core, _ = make()
    register_by_answer(core, X, 0.0)
    core.receive_datagram(HOR, X, 1.0)
    assert out(core) == [(HEMEN, X)]
    core.receive_datagram(HOR, Y, 1.0)  # Y thinks we are its peer; we are not
    assert out(core) == [(AGUR, Y)] and core.counters.non_peer == 1
    core.receive_datagram(HEMEN, Y, 1.0)
    assert out(core) == [] and core.counters.non_peer == 2


def test_hor_from_a_reserved_node_confirms_the_handshake() -> None:
    core, _ = make()
    core.receive_datagram(PELOTARI, X, 0.0)
    out(core)
    core.receive_datagram(HOR, X, 0.5)  # it registered us; its dale! was lost
    assert out(core) == [(HEMEN, X)] and core.peers() == [X]
    assert [type(e) for e in core.events_received()] == [PeerUp]


# -- disconnect --------------------------------------------------------------------------


def test_agur_from_a_peer_removes_it_at_once() -> None:
    core, sink = make()
    register_by_answer(core, X, 0.0)
    core.receive_datagram(AGUR, X, 3.0)
    assert core.events_received() == [PeerDown(peer=X, name="10.0.0.2:21450", reason="leave")]
    assert core.peers() == [] and sink.select(kind="peer_down")[0].attrs["reason"] == "leave"


def test_agur_from_a_stranger_is_ignored_and_from_a_reserved_node_releases() -> None:
    core, _ = make()
    core.receive_datagram(AGUR, Y, 0.0)
    assert core.counters.non_peer == 1 and core.events_received() == []
    core.receive_datagram(PELOTARI, X, 0.0)
    out(core)
    core.receive_datagram(AGUR, X, 0.1)
    assert core.state_of(X) is PeerState.UNKNOWN and core.events_received() == []


def test_stop_says_agur_to_peers_and_reservations_then_goes_quiet() -> None:
    core, sink = make()
    register_by_answer(core, X, 0.0)
    core.receive_datagram(PELOTARI, Y, 0.5)
    out(core)
    core.stop(1.0)
    assert sorted(out(core)) == sorted([(AGUR, X), (AGUR, Y)])
    assert core.events_received() == [
        PeerDown(peer=X, name="10.0.0.2:21450", reason="leave", local=True)
    ]
    assert core.stopped and core.next_deadline() is None and core.peers() == []
    assert sink.select(kind="peer_down")[0].attrs["side"] == "local"
    core.receive_datagram(HOR, X, 2.0)
    core.handle_timer(100.0)
    assert out(core) == [] and core.counters.after_stop == 1
    core.stop(3.0)  # idempotent
    assert out(core) == []
    with pytest.raises(LocalProtocolError):
        core.send_data(X, b"late", 3.0)


# -- delivery ----------------------------------------------------------------------------


def test_data_between_peers_and_from_non_peers() -> None:
    core, sink = make()
    register_by_answer(core, X, 0.0)
    core.send_data(X, b"payload", 1.0)
    assert out(core) == [(b"\x00\x01payload", X)]
    core.receive_datagram(b"\x00\x01back", X, 1.1)
    assert core.events_received() == [Received(peer=X, name="10.0.0.2:21450", payload=b"back")]
    core.receive_datagram(b"\x00\x01spam", Y, 1.2)  # not a peer
    assert core.events_received() == [] and core.counters.non_peer_data == 1
    assert sink.select(kind="drop")[-1].attrs["reason"] == "non_peer_data"
    assert core.send_to_peers(b"all", 2.0) == 1
    assert out(core) == [(b"\x00\x01all", X)]
    assert (core.counters.data_sent, core.counters.data_received) == (2, 1)


def test_send_data_refuses_non_peers_and_oversized_payloads() -> None:
    core, _ = make(max_datagram=10)
    with pytest.raises(LocalProtocolError):
        core.send_data(X, b"x", 0.0)
    register_by_answer(core, X, 0.0)
    core.send_data(X, b"12345678", 0.0)  # 2 + 8 = 10 bytes: fits
    with pytest.raises(LocalProtocolError) as info:
        core.send_data(X, b"123456789", 0.0)
    assert info.value.fields["max_datagram"] == 10


def test_data_from_a_reserved_node_confirms_and_is_delivered() -> None:
    core, _ = make()
    core.receive_datagram(PELOTARI, X, 0.0)
    out(core)
    core.receive_datagram(b"\x00\x01early", X, 0.2)
    assert [type(e) for e in core.events_received()] == [PeerUp, Received]


# -- hostile and broken input ------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "counter"),
    [
        (b"", "malformed"),
        (b"pelotari?\n", "malformed"),
        (b"PELOTARI?", "malformed"),
        (b"\x00", "malformed"),
        (b"\x00\x02v2", "malformed"),
        (b"\xff" * 20, "malformed"),
        (b"\x00\x01" + b"x" * 100, "oversized"),
    ],
)
def test_malformed_and_oversized_datagrams_are_counted_and_dropped(
    data: bytes, counter: str
) -> None:
    core, sink = make(max_datagram=64)
    register_by_answer(core, X, 0.0)
    core.receive_datagram(data, X, 1.0)
    assert out(core) == [] and core.events_received() == []
    assert getattr(core.counters, counter) == 1
    assert sink.events[-1].kind == "drop" and sink.events[-1].attrs["reason"] == counter


def test_random_bytes_never_raise() -> None:
    rng = random.Random(5)
    core, _ = make()
    for i in range(2000):
        data = rng.randbytes(rng.randrange(0, 16))
        source = (f"10.0.{rng.randrange(4)}.{rng.randrange(1, 4)}", 21450)
        core.receive_datagram(data, source, i * 0.01)
        if (deadline := core.next_deadline()) is not None and deadline <= i * 0.01:
            core.handle_timer(i * 0.01)
        out(core)


def test_a_pelotari_flood_from_one_source_is_not_amplified() -> None:
    core, _ = make()
    for i in range(1000):
        core.receive_datagram(PELOTARI, X, i * 0.001)  # 1000 in one second
    answers = [d for d, _ in out(core)]
    assert answers == [AUPA] * len(answers)
    assert len(answers) <= 8 + 4  # burst 8, then 4 per second
    assert core.counters.rate_limited >= 988


def test_a_pelotari_flood_from_forged_sources_is_bounded_by_slots_and_rate() -> None:
    core, _ = make()
    for i in range(20000):
        source = (f"10.{i // 65536}.{i // 256 % 256}.{i % 256}", 21450)
        core.receive_datagram(PELOTARI, source, i * 0.0001)  # 20000 in two seconds
    answers = len(out(core))
    assert answers <= 32  # the reservation quota: half of 64 free slots
    core.handle_timer(2.0)  # reservations expire; their retries were capped too
    assert len(out(core)) <= 32 * 2


def test_a_hor_flood_from_forged_strangers_is_capped_by_the_global_rate() -> None:
    core, _ = make(global_answer_rate=10.0, global_answer_burst=20)
    for i in range(5000):
        core.receive_datagram(HOR, (f"10.1.{i // 256}.{i % 256}", 21450), i * 0.0002)
    assert len(out(core)) <= 20 + 10  # burst, then 10 per second over one second


# -- rebalancing ---------------------------------------------------------------------------


STRANDED: Address = ("10.0.0.9", 21450)


def full_of_peers() -> tuple[DiscoveryCore, MemorySink, float]:
    """A node with max peers 2, both taken, that has just claimed STRANDED; and when."""
    core, sink = make(max_peers=2, broadcast_interval=1000.0)
    register_by_answer(core, X, 0.0)
    register_by_answer(core, Y, 0.0)
    heard = []
    t = 1.0
    while not (answer := out(core)):
        core.receive_datagram(PELOTARI, STRANDED, t)
        heard.append(t)
        t += 5.0
        assert t < 500, "never claimed"
    assert answer == [(AUPA, STRANDED)]
    assert len(heard) >= 3  # rebalance_patience: not before the third broadcast heard
    return core, sink, t


def test_full_node_claims_a_stranded_broadcaster_and_evicts_only_when_confirmed() -> None:
    core, sink, t = full_of_peers()
    # The claim is a reservation beyond max peers; nobody is evicted yet.
    assert core.state_of(STRANDED) is PeerState.RESERVED and sorted(core.peers()) == [X, Y]
    assert core.events_received() == [] and core.counters.rebalances == 0
    core.receive_datagram(DALE, STRANDED, t)
    sent = out(core)
    (evicted,) = [addr for data, addr in sent if data == AGUR]
    assert evicted in (X, Y) and len(sent) == 1
    assert core.events_received() == [
        PeerUp(peer=STRANDED, name="10.0.0.9:21450"),
        PeerDown(peer=evicted, name=f"{evicted[0]}:{evicted[1]}", reason="leave", local=True),
    ]
    assert len(core.peers()) == 2 and STRANDED in core.peers()  # max peers holds again
    assert core.counters.rebalances == 1
    assert sink.select(kind="peer_down")[-1].attrs["why"] == "rebalance"


def test_a_declined_claim_evicts_nobody() -> None:
    core, _, t = full_of_peers()
    core.receive_datagram(AGUR, STRANDED, t)  # it found room elsewhere first
    assert core.state_of(STRANDED) is PeerState.UNKNOWN and sorted(core.peers()) == [X, Y]
    assert core.events_received() == [] and core.counters.rebalances == 0
    core.handle_timer(t + 10.0)
    assert [d for d, _ in out(core) if d == AGUR] == []


def test_an_unanswered_claim_expires_and_evicts_nobody() -> None:
    core, _, t = full_of_peers()
    core.handle_timer(t + 2.5)  # the handshake timeout passes
    assert core.state_of(STRANDED) is PeerState.UNKNOWN and sorted(core.peers()) == [X, Y]
    assert core.counters.rebalances == 0


def test_no_rebalancing_when_disabled() -> None:
    core, _ = make(max_peers=1, broadcast_interval=1000.0, rebalance=False)
    register_by_answer(core, X, 0.0)
    for t in range(1, 500, 5):
        core.receive_datagram(PELOTARI, Y, float(t))
    assert out(core) == [] and core.peers() == [X]


# -- the trace -----------------------------------------------------------------------------


def test_every_message_is_traced_as_send_or_recv_with_its_type() -> None:
    lan = Lan()
    a = lan.add("a", "10.0.0.1")
    b = lan.add("b", "10.0.0.2", start=100.0)
    lan.run(0.5)
    kinds = [(e.kind, e.attrs.get("type")) for e in a.sink.events if e.kind in ("send", "recv")]
    # Its own broadcast, looped back, is a drop (reason own_address), not a recv.
    assert kinds == [("send", "pelotari?"), ("recv", "aupa!"), ("send", "dale!")]
    assert [e.kind for e in b.sink.events if e.kind in ("send", "recv")] == ["recv", "send", "recv"]
    assert {e.layer for e in a.sink.events + b.sink.events} == {"discovery"}
    assert [e.peer for e in a.sink.events if e.kind == "peer_up"] == ["10.0.0.2:21450"]


def test_names_map_addresses_to_node_ids() -> None:
    core, sink = make(names={X: "n7"})
    register_by_answer(core, X, 0.0)
    assert {e.peer for e in sink.events} == {"n7"}
