"""The peer database: what is recorded, multicast domains, expiry and bounds."""

from __future__ import annotations

from gossamer.proto.gossip.peers import PeerDB
from gossamer.wire.chatter import BroadcastID, NetID

OWN = NetID("10.0.0.1", 29999)


def nid(host: str, port: int = 29999) -> NetID:
    return NetID(host, port)


def test_add_records_peers_but_never_ourselves() -> None:
    db = PeerDB(OWN)
    db.add([nid("10.0.0.2"), OWN, nid("10.0.0.3"), nid("10.0.0.2")], now=1.0)
    assert len(db) == 2
    assert nid("10.0.0.2") in db and OWN not in db
    assert {p.netid for p in db.peers(1.0)} == {nid("10.0.0.2"), nid("10.0.0.3")}


def test_multicast_sightings_make_the_seen_list_latest_first() -> None:
    db = PeerDB(OWN)
    db.heard_on_multicast(nid("10.0.0.2"), 7, now=1.0)
    db.heard_on_multicast(nid("10.0.0.3"), 2, now=2.0)
    db.heard_on_multicast(nid("10.0.0.2"), 5, now=3.0)  # a lower seqno keeps the max
    assert db.seen_list(3.0) == [
        BroadcastID(nid("10.0.0.2"), 7),
        BroadcastID(nid("10.0.0.3"), 2),
    ]
    db.heard_on_multicast(OWN, 1, now=4.0)  # our own datagram is not a sighting
    assert len(db.seen_list(4.0)) == 2


def test_reports_of_us_are_the_peers_our_multicast_reaches() -> None:
    db = PeerDB(OWN)
    db.reported_seen(nid("10.0.0.2"), [BroadcastID(OWN, 3), BroadcastID(nid("10.0.0.4"), 1)], 1.0)
    db.reported_seen(nid("10.0.0.3"), [BroadcastID(nid("10.0.0.4"), 9)], 1.0)
    assert db.seen_us(1.0) == {nid("10.0.0.2").packed}
    info = {p.netid: p for p in db.peers(1.0)}
    assert info[nid("10.0.0.2")].saw_us and not info[nid("10.0.0.3")].saw_us
    assert info[nid("10.0.0.4")].seqno == 9  # the origins are recorded, max seqno kept


def test_domains_are_the_closure_of_sightings_reports_and_hints() -> None:
    db = PeerDB(OWN)
    a, b, c, d, e, f = (nid(f"10.0.1.{i}") for i in range(1, 7))
    # b heard a and c: a, b, c share a domain even though nobody reported a-c directly.
    db.reported_seen(b, [BroadcastID(a, 1), BroadcastID(c, 1)], 1.0)
    # A hint groups d and e; f stays alone.
    db.link([[d, e], [f]], 1.0)
    assert db.domain(a) == db.domain(b) == db.domain(c)
    assert db.domain(d) == db.domain(e)
    assert len({db.domain(x) for x in (a, d, f)}) == 3
    # What we hear joins our own domain.
    db.heard_on_multicast(f, 1, 2.0)
    assert db.domain(f) == db.domain(OWN)


def test_expired_entries_are_ignored_then_swept_and_domains_rebuilt() -> None:
    db = PeerDB(OWN, seen_ttl=10.0, peer_ttl=100.0)
    a, b = nid("10.0.1.1"), nid("10.0.1.2")
    db.heard_on_multicast(a, 1, 0.0)
    db.reported_seen(a, [BroadcastID(OWN, 1), BroadcastID(b, 1)], 0.0)
    assert db.seen_us(5.0) == {a.packed}
    assert db.domain(b) == db.domain(OWN)
    assert db.seen_us(11.0) == set()  # expired on read at once
    assert db.seen_list(11.0) == []
    removed = db.sweep(11.0)
    assert removed >= 3  # the sighting, the report of us, the domain edge
    assert db.domain(b) != db.domain(OWN)  # the forest was rebuilt without them
    assert len(db) == 2  # the peers themselves live for peer_ttl
    assert db.sweep(200.0) == 2
    assert len(db) == 0


def test_a_still_true_edge_is_learnt_again_after_expiry() -> None:
    db = PeerDB(OWN, seen_ttl=10.0)
    a, b = nid("10.0.1.1"), nid("10.0.1.2")
    db.reported_seen(a, [BroadcastID(b, 1)], 0.0)
    db.sweep(20.0)
    assert db.domain(a) != db.domain(b)
    db.reported_seen(a, [BroadcastID(b, 2)], 21.0)
    assert db.domain(a) == db.domain(b)


def test_sizes_are_bounded() -> None:
    db = PeerDB(OWN, max_peers=64, max_seen=8, max_witnesses=4)
    for i in range(1000):
        db.add([nid(f"10.1.{i // 250}.{i % 250 + 1}")], float(i))
    assert len(db) <= 64
    assert len(db.candidates()) == len(db)
    survivors = {p.netid for p in db.peers(1000.0)}
    assert nid("10.1.3.250") in survivors  # the most recent stay
    for i in range(50):
        db.heard_on_multicast(nid(f"10.2.0.{i + 1}"), 1, 2000.0 + i)
    assert len(db.seen_list(2100.0)) <= 8
    for i in range(50):
        db.reported_seen(nid(f"10.3.0.{i + 1}"), [BroadcastID(OWN, 1)], 3000.0 + i)
    assert len(db.seen_us(3100.0)) <= 4


def test_suspects_expire_and_are_cleared_by_news() -> None:
    db = PeerDB(OWN)
    a = nid("10.0.1.1")
    db.add([a], 0.0)
    db.mark_failed(a, 0.0, 30.0)
    assert db.is_suspect(a, 10.0)
    assert not db.is_suspect(a, 31.0)
    db.mark_failed(a, 40.0, 30.0)
    db.clear_suspect(a)
    assert not db.is_suspect(a, 41.0)
    assert not db.is_suspect(nid("10.0.9.9"), 0.0)
