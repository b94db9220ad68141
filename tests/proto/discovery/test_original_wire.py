"""The core on the original wire: the Go original's identity rules and liveness.

The Go original sends every datagram from a fresh socket (an ephemeral source port), always
to ``IP:21450``, never answers ``hor?`` and broadcasts ``pelotari?`` every 5 s while it has
room. On the original wire a peer is therefore its IP, and its broadcasts keep it alive.
"""

from __future__ import annotations

import random
from typing import Any

from gossamer._types import Address
from gossamer.proto.discovery import DiscoveryConfig, DiscoveryCore, PeerDown, PeerUp
from gossamer.trace import MemorySink, Tracer
from gossamer.wire.mode import WireMode

from .lan import BROADCAST

ME: Address = ("10.0.0.1", 21450)
GO = "10.0.0.2"
PELOTARI, AUPA, DALE = b"pelotari?", b"aupa!", b"dale!"


def make(**kw: Any) -> tuple[DiscoveryCore, MemorySink]:
    kw.setdefault("start_jitter", 0.0)
    sink = MemorySink()
    config = DiscoveryConfig(
        address=ME, broadcast_address=BROADCAST, wire=WireMode.ORIGINAL, **kw
    )
    core = DiscoveryCore(config, tracer=Tracer(sink, run="r", node="me"), rng=random.Random(1))
    return core, sink


def test_a_peer_is_its_ip_whatever_port_it_sends_from() -> None:
    core, _ = make()
    # The Go node broadcasts from one ephemeral port ...
    core.receive_datagram(PELOTARI, (GO, 40001), 0.0)
    # ... and our answer goes to its well-known port, not back to the ephemeral one.
    assert core.datagrams_to_send() == [(AUPA, (GO, 21450))]
    # Its dale! comes from yet another fresh socket and completes the same handshake.
    core.receive_datagram(DALE, (GO, 40002), 0.1)
    assert core.events_received() == [PeerUp(peer=(GO, 21450), name=f"{GO}:21450")]
    assert core.peers() == [(GO, 21450)]
    # More datagrams from other ports are the same peer: no phantom peers.
    core.receive_datagram(PELOTARI, (GO, 40003), 5.0)
    core.receive_datagram(DALE, (GO, 40004), 5.1)
    assert core.peers() == [(GO, 21450)]
    assert core.events_received() == []


def test_our_answer_to_its_aupa_goes_to_the_well_known_port() -> None:
    core, _ = make()
    core.handle_timer(0.0)
    assert core.datagrams_to_send() == [(PELOTARI, (BROADCAST, 21451))]
    core.receive_datagram(AUPA, (GO, 51515), 0.01)
    assert core.datagrams_to_send() == [(DALE, (GO, 21450))]
    assert core.peers() == [(GO, 21450)]


def test_a_datagram_from_our_own_ip_is_our_own() -> None:
    core, sink = make()
    core.receive_datagram(PELOTARI, (ME[0], 33333), 0.0)
    assert core.datagrams_to_send() == []
    assert core.counters.own_broadcasts == 1
    assert [e.attrs["reason"] for e in sink.events if e.kind == "drop"] == ["own_address"]


def _register_go(core: DiscoveryCore) -> None:
    core.receive_datagram(PELOTARI, (GO, 40001), 0.0)
    core.receive_datagram(DALE, (GO, 40002), 0.0)
    core.datagrams_to_send()
    core.events_received()


def run_until(core: DiscoveryCore, end: float, broadcasts_until: float) -> list[object]:
    """Drive the core to ``end``; the Go peer broadcasts every 5 s until ``broadcasts_until``
    and never answers hor?. Returns the events."""
    events: list[object] = []
    next_go = 5.0
    now = 0.0
    while now < end:
        deadline = core.next_deadline()
        step = min(x for x in (deadline, next_go, end) if x is not None)
        now = max(now, step)
        if now >= next_go:
            if next_go <= broadcasts_until:
                core.receive_datagram(PELOTARI, (GO, 40000 + int(now)), now)
            next_go += 5.0
        core.handle_timer(now)
        core.datagrams_to_send()
        events += core.events_received()
    return events


def test_its_broadcasts_keep_a_silent_peer_for_minutes() -> None:
    core, _ = make(inactive_time=10.0, heartbeat_wait=1.0, max_missed=3)
    _register_go(core)
    assert run_until(core, end=300.0, broadcasts_until=300.0) == []
    assert core.peers() == [(GO, 21450)]
    assert core.counters.removed_heartbeat == 0


def test_once_its_broadcasts_stop_it_is_removed_within_the_bound() -> None:
    core, sink = make(inactive_time=10.0, heartbeat_wait=1.0, max_missed=3)
    _register_go(core)
    events = run_until(core, end=60.0, broadcasts_until=20.0)
    assert events == [PeerDown(peer=(GO, 21450), name=f"{GO}:21450", reason="heartbeat")]
    (down,) = [e for e in sink.events if e.kind == "peer_down"]
    # Last broadcast at 20 s; inactive time 10 s, then three 1 s heartbeat waits.
    assert 20.0 + 10.0 + 3 * 1.0 - 1e-9 <= down.t <= 20.0 + 10.0 + 3 * 1.0 + 1e-6
    hors = [e for e in sink.events if e.kind == "send" and e.attrs.get("type") == "hor?"]
    assert hors and all(e.peer == f"{GO}:21450" for e in hors)


def test_in_gossamers_own_mode_ports_still_tell_nodes_apart() -> None:
    sink = MemorySink()
    config = DiscoveryConfig(address=ME, broadcast_address=BROADCAST, start_jitter=0.0)
    core = DiscoveryCore(config, tracer=Tracer(sink, run="r", node="me"), rng=random.Random(1))
    core.receive_datagram(PELOTARI, (GO, 40001), 0.0)
    core.receive_datagram(PELOTARI, (GO, 40002), 0.0)
    assert [addr for _, addr in core.datagrams_to_send()] == [(GO, 40001), (GO, 40002)]
