"""The original Go suite's four cases (TestCommsManager), on the real cores.

The Go tests use channel fakes, MaxPeers 1 and a 10-minute broadcast interval
(reference (b), "Test suite"); here the same setup runs on the hand-driven LAN,
and "nothing within 100 ms" becomes "nothing in the virtual time that follows".
The Go fakes used IPs 192.168.0.10/11 on 192.168.0.255; the LAN helper's subnet
is 10.0.0.0/24, which changes nothing the tests look at.
"""

from __future__ import annotations

from typing import Any

from gossamer.proto.discovery import PeerUp

from .lan import BROADCAST, Lan, Node

TESTING: dict[str, Any] = {"max_peers": 1, "broadcast_interval": 600.0}


def pair(**extra: Any) -> tuple[Lan, Node, Node]:
    lan = Lan()
    broadcaster = lan.add("broadcaster", "10.0.0.10", **{**TESTING, **extra})
    # The responder never broadcasts within the test (it starts after it ends).
    responder = lan.add("responder", "10.0.0.11", **{**TESTING, "start": 10_000.0})
    return lan, broadcaster, responder


def test_successful_handshake() -> None:
    lan, broadcaster, responder = pair()
    lan.run(1.0)
    writes = [(w.src, w.label, w.dst) for w in lan.log]
    assert writes == [
        ("broadcaster", "pelotari?", (BROADCAST, 21451)),
        ("responder", "aupa!", ("10.0.0.10", 21450)),
        ("broadcaster", "dale!", ("10.0.0.11", 21450)),
    ]
    assert broadcaster.core.peers() == [responder.address]
    assert responder.core.peers() == [broadcaster.address]
    assert broadcaster.events == [PeerUp(peer=responder.address, name="10.0.0.11:21450")]
    assert responder.events == [PeerUp(peer=broadcaster.address, name="10.0.0.10:21450")]


def test_broadcaster_ignores_its_own_messages() -> None:
    lan = Lan()
    alone = lan.add("alone", "10.0.0.10", **TESTING)
    lan.run(0.1)
    assert [w.label for w in lan.log] == ["pelotari?"]  # read back, and nothing follows
    assert alone.core.counters.own_broadcasts == 1 and alone.core.reservations() == []


def test_at_max_peers_no_broadcast_is_sent() -> None:
    lan, broadcaster, _ = pair()
    lan.run(1.0)  # the one slot is taken
    before = len(lan.log)
    lan.run(3 * 600.0)  # three broadcast intervals (heartbeats aside)
    assert [w for w in lan.log[before:] if w.label == "pelotari?"] == []
    assert broadcaster.core.counters.broadcasts_skipped_full == 3


def test_broadcast_from_a_registered_peer_is_not_answered() -> None:
    # The broadcaster has room for two peers, so it keeps broadcasting; the
    # responder has registered it and must not answer its next broadcast.
    lan, broadcaster, responder = pair(max_peers=2)
    lan.run(1.0)
    assert responder.core.peers() == [broadcaster.address]
    lan.run(601.0)  # the broadcaster's second broadcast, at 600 s
    broadcasts = [w for w in lan.log if w.label == "pelotari?"]
    assert [w.t for w in broadcasts] == [0.0, 600.0]
    # (Heartbeats flow both ways meanwhile; no aupa! answers the second broadcast.)
    assert [w.t for w in lan.log if w.label == "aupa!"] == [0.0]
    assert responder.core.counters.peer_broadcasts == 1
