"""gossamer.proto.gateway.cluster: gateway cores on several nodes route as one.

Three ``GatewayCore``s exchange their link messages by hand (``Mesh.settle``), so every
cluster rule is checked without a socket: replicas, routing with the single-node
semantics (compared with one core holding every client), bounded outboxes, reroutes,
identity conflicts and op 7 load balancing. ``tests/aio/test_gateway_cluster.py`` repeats
the visible parts over real links and websockets.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from gossamer.proto.gateway.cluster import ClusterConfig, PeerOutbox, balance
from gossamer.proto.gateway.core import CloseCode
from gossamer.wire.gateway import Op
from gossamer.wire.gateway_cluster import Header, decode_batch, encode_batch, join_batch

from .test_core import APP, Harness

NODES = ("n0", "n1", "n2")


class Mesh:
    """Harnesses named ``n0``.. whose cores are all peers of each other."""

    def __init__(self, count: int = 3, **config: Any) -> None:
        self.nodes = {f"n{i}": Harness(node_id=f"n{i}", **config) for i in range(count)}
        for name, h in self.nodes.items():
            for other in self.nodes:
                if other != name:
                    h.core.add_peer(other, h.now)
        #: Peers whose batches are held back (a slow node), by receiver name.
        self.paused: set[str] = set()
        self.settle()

    def __getitem__(self, name: str) -> Harness:
        return self.nodes[name]

    def settle(self) -> int:
        """Carry every waiting batch to its peer until none waits, delayed
        acknowledgements included (time advances by ``ack_delay`` for them); the batch
        count."""
        moved = 0
        progress = True
        while progress:
            progress = False
            for h in self.nodes.values():
                if h.core._ack_at and not h.core.peers_waiting():
                    h.advance(h.core.config.cluster.ack_delay)
            for h in self.nodes.values():
                for peer in h.core.peers_waiting():
                    if peer in self.paused or peer not in self.nodes:
                        continue
                    batch = h.core.peer_batch(peer, h.now)
                    if batch is None:  # nothing could be sent (a record too large)
                        continue
                    target = self.nodes[peer]
                    target.core.peer_receive(batch, target.now)
                    target.pump()
                    moved += 1
                    progress = True
        return moved


def ops_query(*ops: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"application": APP, "ops": list(ops), **extra}


def delivered(h: Harness, conn: int, t: str = "SEND") -> list[Any]:
    return [p.d["payload"] for p in h.take(conn) if p.op is Op.DISPATCH and p.t == t]


def test_clients_of_every_node_are_known_and_queried_everywhere() -> None:
    mesh = Mesh()
    mesh["n0"].identify(1, "a", metadata={"region": {"type": "string", "value": "eu"}})
    mesh["n1"].identify(1, "b", metadata={"v": {"type": "version", "value": "1.2.3"}})
    mesh["n2"].identify(1, "c")
    mesh.settle()
    for h in mesh.nodes.values():
        assert sorted(c.client_id for c in h.core.query_clients({"application": APP})) == [
            "a", "b", "c"]
    h = mesh["n2"]
    h.dispatch(1, "QUERY_NODES", {"application": APP, "ops": [
        {"path": "/v", "op": "$gte", "to": {"value": "1.2.0"}}]})
    (answer,) = h.take(1)
    assert [n["client_id"] for n in answer.d["nodes"]] == ["b"]
    assert answer.d["nodes"][0]["metadata"]["v"] == "1.2.3"
    # The HTTP API's description of a remote client: from the replica.
    remote = mesh["n0"].core.directory.by_identity[(APP, "b")]
    assert remote.node == "n1" and mesh["n0"].core.describe(remote)["socket_ip"] == "10.0.0.1"


def test_send_reaches_the_matching_client_on_another_node() -> None:
    mesh = Mesh()
    mesh["n0"].identify(1, "front")
    mesh["n2"].identify(7, "worker", metadata={"region": {"type": "string", "value": "us"}})
    mesh.settle()
    mesh["n0"].dispatch(1, "SEND", {"target": ops_query(
        {"path": "/region", "op": "$eq", "to": {"value": "us"}}), "payload": {"x": 1},
        "nonce": "n-1"})
    assert mesh["n0"].take(1) == []
    mesh.settle()
    (packet,) = mesh["n2"].take(7)
    assert packet.t == "SEND" and packet.d == {"nonce": "n-1", "payload": {"x": 1}, "target": None}
    delivers = mesh["n2"].events("deliver")
    assert delivers[-1].peer == f"{APP}/worker" and delivers[-1].attrs["from"] == "n0"


def test_broadcast_reaches_every_match_exactly_once_across_nodes() -> None:
    mesh = Mesh()
    conns = {}
    for i, name in enumerate(NODES * 2):
        conn = 10 + i
        mesh[name].identify(conn, f"c{i}")
        conns[f"c{i}"] = (name, conn)
    mesh.settle()
    mesh["n1"].dispatch(conns["c1"][1], "BROADCAST",
                        {"target": {"application": APP}, "payload": "hi"})
    mesh.settle()
    for name, conn in conns.values():
        assert delivered(mesh[name], conn, "BROADCAST") == ["hi"]


def _populate(harnesses: list[Harness], count: int, seed: int) -> None:
    """The same clients and metadata, spread over ``harnesses`` round robin."""
    rng = random.Random(seed)
    for i in range(count):
        h = harnesses[i % len(harnesses)]
        metadata = {
            "load": {"type": "integer", "value": rng.randrange(20)},
            "zone": {"type": "string", "value": rng.choice("abc")},
            "tags": {"type": "list", "value": rng.sample(["x", "y", "z"], 2)},
            "ver": {"type": "version", "value": f"1.{rng.randrange(4)}.0"},
        }
        h.identify(100 + i, f"c{i}", metadata=metadata,
                   app=APP if i % 7 else "other", auth=None)


QUERIES: list[dict[str, Any]] = [
    ops_query({"path": "/zone", "op": "$eq", "to": {"value": "a"}}),
    ops_query({"zone": {"$ne": "b"}}, {"load": {"$gt": 4, "$lt": 15}}),
    ops_query({"path": "/tags", "op": "$contains", "to": {"value": "x"}}),
    ops_query({"path": "/ver", "op": "$gte", "to": {"value": "1.2.0"}}),
    ops_query({"$or": [{"zone": "c"}, {"load": {"$in": [1, 2, 3]}}]}),
    ops_query({"path": "/zone", "op": "$eq", "to": {"value": "a"}}, selector={"$min": "load"},
              key="k1"),
    ops_query({"path": "/zone", "op": "$eq", "to": {"value": "b"}}, selector={"$max": "load"},
              key="k2"),
    ops_query(selector={"$avg": "load"}, key="k3"),
    ops_query({"path": "/zone", "op": "$eq", "to": {"value": "nowhere"}}, optional=True),
    {"application": "other"},
    ops_query({"zone": "a"}, key="some key"),
    ops_query({"zone": "b"}, key="another"),
]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_cluster_selects_what_one_node_holding_every_client_selects(seed: int) -> None:
    single = Harness(node_id="solo")
    mesh = Mesh()
    _populate([single], 60, seed)
    _populate(list(mesh.nodes.values()), 60, seed)
    mesh.settle()
    for query in QUERIES:
        alone = sorted(c.client_id for c in single.core.query_clients(query))
        for h in mesh.nodes.values():
            assert sorted(c.client_id for c in h.core.query_clients(query)) == alone, query
        if "key" in query:  # rendezvous hashing over the whole cluster: the same pick
            pick = single.core.pick_client(query)
            assert pick is not None
            for h in mesh.nodes.values():
                other = h.core.pick_client(query)
                assert other is not None and other.client_id == pick.client_id


def test_a_keyed_send_from_any_node_reaches_the_client_one_node_would_pick() -> None:
    single = Harness(node_id="solo")
    mesh = Mesh()
    _populate([single], 30, 9)
    _populate(list(mesh.nodes.values()), 30, 9)
    mesh.settle()
    query = ops_query({"zone": "a"}, key="order-17")
    expected = single.core.pick_client(query)
    assert expected is not None
    where = {f"c{i}": (f"n{i % 3}", 100 + i) for i in range(30)}
    for sender in ("c1", "c2", "c3"):
        node, conn = where[sender]
        mesh[node].dispatch(conn, "SEND", {"target": query, "payload": sender})
        mesh.settle()
    node, conn = where[expected.client_id]
    assert delivered(mesh[node], conn) == ["c1", "c2", "c3"]


def test_client_updates_are_seen_cluster_wide() -> None:
    mesh = Mesh()
    mesh["n0"].identify(1, "watcher", receive_client_updates=True,
                        receive_metadata_updates=True)
    mesh.settle()
    mesh["n0"].take(1)
    mesh["n2"].identify(5, "newcomer")
    mesh.settle()
    (joined,) = mesh["n0"].take(1)
    assert joined.t == "CLIENT_CONNECTED"
    assert joined.d["payload"] == {"app": APP, "client_id": "newcomer"}
    mesh["n2"].dispatch(5, "UPDATE_METADATA", {"load": {"type": "integer", "value": 3}})
    mesh.settle()
    (changed,) = mesh["n0"].take(1)
    assert changed.t == "CLIENT_METADATA_UPDATED"
    assert changed.d["payload"]["metadata"] == {"load": 3}
    assert mesh["n1"].core.query_clients(ops_query({"load": 3}))[0].client_id == "newcomer"
    mesh["n2"].now = 5.0
    mesh["n2"].send(5, Op.HEARTBEAT, {})  # replicated, but notifies nobody (as on n2)
    mesh.settle()
    assert mesh["n0"].take(1) == []
    (held,) = mesh["n0"].core.query_clients(ops_query({"load": 3}))
    assert held.node == "n2"
    assert mesh["n0"].core.directory.values(held)["last_heartbeat_time"] == 5000
    mesh["n2"].core.disconnect(5, mesh["n2"].now)
    mesh.settle()
    (left,) = mesh["n0"].take(1)
    assert left.t == "CLIENT_DISCONNECTED"
    assert left.d["payload"] == {"app": APP, "client_id": "newcomer"}
    assert [c.client_id for c in mesh["n1"].core.query_clients({"application": APP})] == [
        "watcher"]


def test_peers_added_one_after_the_other_converge() -> None:
    a = Harness(node_id="a")
    b = Harness(node_id="b")
    a.identify(1, "on-a")
    b.identify(1, "on-b")
    a.core.add_peer("b", 0.0)
    b.core.peer_receive(a.core.peer_batch("b", 0.0) or b"", 0.0)  # b does not know a yet
    assert b.core.cluster_rejected["unknown peer"] == 1
    b.core.add_peer("a", 0.0)
    for _ in range(3):  # b's snapshot and request, then a's snapshot again
        for sender, receiver, name in ((a, b, "b"), (b, a, "a")):
            batch = sender.core.peer_batch(name, 0.0)
            if batch is not None:
                receiver.core.peer_receive(batch, 0.0)
    for h in (a, b):
        assert sorted(c.client_id for c in h.core.query_clients({"application": APP})) == [
            "on-a", "on-b"]


def test_a_removed_peers_clients_leave_routing() -> None:
    mesh = Mesh()
    mesh["n0"].identify(1, "watcher", receive_client_updates=True)
    mesh["n1"].identify(2, "gone")
    mesh.settle()
    mesh["n0"].take(1)
    mesh.paused.add("n1")
    mesh["n0"].dispatch(1, "BROADCAST", {"target": {"application": APP}, "payload": "b"})
    assert delivered(mesh["n0"], 1, "BROADCAST") == ["b"]
    mesh["n0"].core.remove_peer("n1", mesh["n0"].now)
    mesh["n0"].pump()
    assert mesh["n0"].core.cluster_dropped["peer_removed"] == 1
    assert mesh["n0"].events("drop")[-1].attrs == {"reason": "peer_removed", "count": "1"}
    (left,) = mesh["n0"].take(1)
    assert left.t == "CLIENT_DISCONNECTED" and left.d["payload"]["client_id"] == "gone"
    mesh["n0"].dispatch(1, "SEND", {"target": ops_query({"path": "/client_id", "op": "$eq",
                                                          "to": {"value": "x"}}),
                                    "payload": 1, "nonce": "q"})
    assert mesh["n0"].core.peers == ("n2",)
    assert [c.client_id for c in mesh["n0"].core.query_clients({"application": APP})] == [
        "watcher"]


def test_a_slow_peer_is_never_overrun_and_nothing_is_dropped_silently() -> None:
    mesh = Mesh(cluster=ClusterConfig(peer_deliveries=5))
    mesh["n0"].identify(1, "sender")
    mesh["n1"].identify(3, "receiver", host="10.0.0.9")
    mesh.settle()
    only_receiver = {"application": APP, "ops": [
        {"path": "/ip", "op": "$eq", "to": {"value": "10.0.0.9"}}]}
    mesh.paused.add("n1")  # n1 takes nothing: n0's outbox for it fills up to its bound
    for n in range(8):
        mesh["n0"].dispatch(1, "SEND", {"target": only_receiver, "payload": n, "nonce": n})
    refusals = [p.d for p in mesh["n0"].take(1) if p.op is Op.INVALID]
    assert [(r["error"], r["nonce"]) for r in refusals] == [
        ("node_busy", 5), ("node_busy", 6), ("node_busy", 7)]
    droppable = {**only_receiver, "droppable": True}
    mesh["n0"].dispatch(1, "SEND", {"target": droppable, "payload": "d"})
    assert mesh["n0"].take(1) == []
    assert mesh["n0"].core.peer_backlog("n1")[0] == 5
    assert mesh["n0"].core.cluster_dropped["node_busy"] == 1
    assert mesh["n0"].events("drop")[-1].attrs["reason"] == "node_busy"
    mesh.paused.clear()
    mesh.settle()
    assert delivered(mesh["n1"], 3) == [0, 1, 2, 3, 4]


def test_replication_overflow_becomes_one_snapshot_with_the_final_state() -> None:
    mesh = Mesh(cluster=ClusterConfig(peer_updates=4), metadata_rate=1000.0,
                metadata_burst=1000.0)
    mesh["n0"].identify(1, "busy")
    mesh.settle()
    mesh.paused.add("n1")
    for n in range(20):
        mesh["n0"].dispatch(1, "UPDATE_METADATA", {"n": {"type": "integer", "value": n}})
    outbox = mesh["n0"].core._peers["n1"]
    assert outbox.resync and len(outbox.records) == 0
    mesh.paused.clear()
    mesh.settle()
    (client,) = mesh["n1"].core.query_clients({"application": APP})
    assert mesh["n1"].core.directory.values(client)["n"] == 19


def test_a_send_whose_client_left_meanwhile_is_routed_again() -> None:
    mesh = Mesh()
    mesh["n0"].identify(1, "front")
    mesh["n1"].identify(2, "w1", metadata={"role": {"type": "string", "value": "w"}})
    mesh["n2"].identify(3, "w2", metadata={"role": {"type": "string", "value": "w"}})
    mesh.settle()
    query = ops_query({"role": "w"}, key="job")
    first = mesh["n0"].core.pick_client(query)
    assert first is not None
    node, conn = ("n1", 2) if first.client_id == "w1" else ("n2", 3)
    other_node, other_conn = ("n2", 3) if node == "n1" else ("n1", 2)
    mesh.paused.add(node)
    mesh["n0"].dispatch(1, "SEND", {"target": query, "payload": "job", "nonce": "j"})
    mesh[node].core.disconnect(conn, 0.0)  # leaves before n0's delivery arrives
    mesh.paused.clear()
    mesh.settle()
    assert delivered(mesh[other_node], other_conn) == ["job"]
    assert mesh["n0"].take(1) == []


def test_one_identity_has_one_holder_in_the_cluster() -> None:
    mesh = Mesh()
    mesh.paused.update(NODES)  # both identify before either hears of the other
    mesh["n1"].identify(1, "dup")
    mesh["n2"].identify(1, "dup")
    mesh.paused.clear()
    mesh.settle()
    assert mesh["n2"].closed[1][0] == CloseCode.ALREADY_REGISTERED
    assert 1 not in mesh["n1"].closed
    for h in mesh.nodes.values():
        (client,) = h.core.query_clients({"application": APP})
        assert client.node in (None, "n1") and (client.node is None) == (h is mesh["n1"])


def test_op7_sends_the_newest_clients_away_when_a_node_holds_too_many() -> None:
    mesh = Mesh()
    for conn in range(1, 7):
        mesh["n0"].identify(conn, f"c{conn}")
    mesh["n1"].identify(1, "b1")
    mesh.settle()
    for h in mesh.nodes.values():
        h.core.set_nodes(NODES, h.now)
    for h in mesh.nodes.values():
        h.advance(1.0)
    # others 1 and 0: average 0.5, goal 0.5; 6 > 1: trunc(6 - 2) = 4 leave, newest first.
    goodbyes = [conn for conn in range(1, 7) if any(
        p.op is Op.GOODBYE and p.d == {"reason": "load balancing"}
        for p in mesh["n0"].take(conn))]
    assert goodbyes == [3, 4, 5, 6]
    assert all(mesh["n0"].closed[c][0] == CloseCode.GOING_AWAY for c in goodbyes)
    assert mesh["n0"].core.balanced == 4
    mesh.settle()
    for h in mesh.nodes.values():
        h.advance(1.0)
    assert mesh["n0"].core.balanced == 4  # 2 against 1 and 0: balanced enough


@pytest.mark.parametrize(
    ("own", "others", "away"),
    [
        (10, {"b": 10}, 0),  # two nodes: the reference never balances them
        (6, {"b": 0, "c": 0}, 4),
        (6, {"b": 3, "c": 3}, 1),
        (4, {"b": 3, "c": 3}, 0),
        (100, {"b": 10, "c": 10, "d": 10}, 88),
    ],
)
def test_the_reference_rule_of_op7(own: int, others: dict[str, int], away: int) -> None:
    assert balance(own, others) == away


def test_malformed_batches_are_counted_never_raised() -> None:
    mesh = Mesh()
    core = mesh["n0"].core
    core.peer_receive(b"\xc1 not msgpack", 0.0)
    core.peer_receive(encode_batch(Header("n1"), [["D", None, "SEND", {}, "x", None]]), 0.0)
    core.peer_receive(encode_batch(Header("stranger"), []), 0.0)
    numbered = Header("n1", mesh["n1"].core._incarnation, 0, 99, 1, 1)
    core.peer_receive(encode_batch(numbered, [[
        "J", ["a", "b", False, "json", None, False, False, {"k": ["date", 1]}]]]), 0.0)
    # A delivery in an unnumbered batch (which could arrive twice) is refused.
    core.peer_receive(encode_batch(Header("n1"), [["D", None, "SEND", {}, [], None]]), 0.0)
    assert sum(core.cluster_rejected.values()) == 5
    assert core.cluster_rejected["unknown peer"] == 1
    assert core.cluster_rejected["invalid metadata"] == 1
    assert core.query_clients({"application": "a"}) == []


def test_batches_round_trip_and_the_outbox_keeps_order() -> None:
    records: list[list[Any]] = [["L", "a", "b"], ["M", "a", "b", {"k": ["integer", 1]}]]
    header = Header("n1", 1, 2, 3, 4, 4)
    assert decode_batch(encode_batch(header, records), max_size=1 << 20) == (header, records)
    outbox = PeerOutbox()
    outbox.resync = outbox.ask = False
    outbox.push_update(["L", "a", "1"], 10)
    assert outbox.push_delivery(["U", "SEND", {}, ["a", "b", {}, 0]], 1)
    assert not outbox.push_delivery(["U", "SEND", {}, ["a", "b", {}, 0]], 1)
    packed, too_large = outbox.take(10, 1 << 20)
    assert too_large == [] and not outbox
    batch = join_batch(Header("x", seq=1, base=1), packed)
    assert [r[0] for r in decode_batch(batch, max_size=1 << 20)[1]] == ["L", "U"]


def test_a_snapshot_spans_batches_and_removes_what_it_does_not_name() -> None:
    mesh = Mesh(cluster=ClusterConfig(batch_records=3))
    for conn in range(1, 11):
        mesh["n1"].identify(conn, f"c{conn}")
    mesh.settle()
    assert len(mesh["n0"].core.query_clients({"application": APP})) == 10
    mesh.paused.add("n0")
    for conn in range(1, 6):
        mesh["n1"].core.disconnect(conn, 0.0)
    # n0 missed the leaves (its link "failed"): n1 is added again and resends everything.
    outbox = mesh["n1"].core._peers["n0"]
    outbox.records.clear()
    outbox.updates = 0
    mesh["n1"].core.add_peer("n0", 0.0)
    mesh.paused.clear()
    assert mesh.settle() >= 4  # 5 clients + S + E + R in batches of 3
    assert sorted(c.client_id for c in mesh["n0"].core.query_clients({"application": APP})) == (
        sorted(f"c{conn}" for conn in range(6, 11)))


def test_a_record_too_large_for_any_batch_is_counted_and_traced() -> None:
    mesh = Mesh(cluster=ClusterConfig(max_batch=2048))
    mesh["n0"].identify(1, "sender")
    mesh["n1"].identify(2, "receiver", metadata={"role": {"type": "string", "value": "r"}})
    mesh.settle()
    mesh["n0"].dispatch(1, "SEND", {"target": ops_query({"role": "r"}), "payload": "x" * 4096})
    mesh["n0"].dispatch(1, "SEND", {"target": ops_query({"role": "r"}), "payload": "small"})
    mesh.settle()
    assert delivered(mesh["n1"], 2) == ["small"]
    assert mesh["n0"].core.cluster_dropped["too_large"] == 1
    assert mesh["n0"].events("drop")[-1].attrs == {"reason": "too_large", "type": "D"}


def _worker_mesh() -> Mesh:
    """n0's client ``front`` (conn 1) and n1's client ``worker`` (conn 2, role w)."""
    mesh = Mesh()
    mesh["n0"].identify(1, "front")
    mesh["n1"].identify(2, "worker", metadata={"role": {"type": "string", "value": "w"}})
    mesh.settle()
    return mesh


def _send_to_worker(mesh: Mesh, payload: str) -> None:
    mesh["n0"].dispatch(1, "SEND", {"target": ops_query({"role": "w"}), "payload": payload,
                                    "nonce": payload})


def test_a_batch_lost_with_its_link_is_sent_again_after_relink_and_delivered_once() -> None:
    mesh = _worker_mesh()
    _send_to_worker(mesh, "one")
    lost = mesh["n0"].core.peer_batch("n1", 0.0)  # in flight when the link failed
    assert lost is not None and decode_batch(lost, max_size=1 << 20)[0].seq > 0
    assert mesh["n0"].core.peer_backlog("n1")[0] == 1  # kept until acknowledged
    mesh["n0"].core.add_peer("n1", 0.0)  # linked again
    mesh.settle()
    assert delivered(mesh["n1"], 2) == ["one"]
    assert mesh["n0"].core.cluster_retransmit["resent"] == 1
    assert mesh["n0"].core.peer_backlog("n1") == (0, 0)  # acknowledged
    mesh["n0"].core.add_peer("n1", 0.0)  # another relink: nothing is left to resend
    mesh.settle()
    assert delivered(mesh["n1"], 2) == []
    assert mesh["n0"].core.cluster_retransmit["resent"] == 1


def test_a_duplicate_batch_is_dropped_and_a_gap_is_filled_in_order() -> None:
    mesh = _worker_mesh()
    _send_to_worker(mesh, "one")
    first = mesh["n0"].core.peer_batch("n1", 0.0)
    _send_to_worker(mesh, "two")
    second = mesh["n0"].core.peer_batch("n1", 0.0)
    assert first is not None and second is not None
    n1 = mesh["n1"]
    n1.core.peer_receive(second, 0.0)  # "one" was lost: "two" waits for it
    n1.pump()
    assert n1.core.cluster_retransmit["gap"] == 1 and delivered(n1, 2) == []
    mesh.settle()  # n1 asks for the rest again (no relink needed): both, in order
    assert delivered(n1, 2) == ["one", "two"]
    for batch in (first, second):  # arriving late, again
        n1.core.peer_receive(batch, 0.0)
        n1.pump()
    assert n1.core.cluster_retransmit["duplicate"] == 2 and delivered(n1, 2) == []
    mesh.settle()
    assert mesh["n0"].core.peer_backlog("n1") == (0, 0)


def test_a_removed_peer_takes_its_unacknowledged_deliveries_counted() -> None:
    mesh = _worker_mesh()
    _send_to_worker(mesh, "one")
    assert mesh["n0"].core.peer_batch("n1", 0.0) is not None  # never acknowledged
    _send_to_worker(mesh, "two")  # still waiting
    mesh["n0"].core.remove_peer("n1", 0.0)
    assert mesh["n0"].core.cluster_dropped["peer_removed"] == 2
    assert mesh["n0"].events("drop")[-1].attrs == {"reason": "peer_removed", "count": "2"}


def test_a_restarted_peer_gets_a_new_session_and_nothing_old_is_resent() -> None:
    mesh = _worker_mesh()
    _send_to_worker(mesh, "old")
    lost = mesh["n0"].core.peer_batch("n1", 0.0)
    assert lost is not None
    restarted = Harness(node_id="n1")  # its rng seeded as the first one's was
    restarted.now = 10.0  # later: another incarnation, though the same draws
    for other in ("n0", "n2"):
        restarted.core.add_peer(other, restarted.now)
    assert restarted.core._incarnation != mesh["n1"].core._incarnation
    restarted.identify(2, "worker", metadata={"role": {"type": "string", "value": "w"}})
    restarted.core.peer_receive(lost, 0.0)  # meant for the previous incarnation
    assert restarted.core.cluster_rejected["stale incarnation"] == 1
    mesh.nodes["n1"] = restarted
    mesh["n0"].core.add_peer("n1", 0.0)  # its link to the new process
    mesh.settle()
    assert delivered(restarted, 2) == []
    assert mesh["n0"].core.cluster_dropped["peer_restarted"] == 1
    assert mesh["n0"].events("drop")[-1].attrs == {"reason": "peer_restarted", "count": "1"}
    _send_to_worker(mesh, "new")
    mesh.settle()
    assert delivered(restarted, 2) == ["new"]
    assert mesh["n0"].core.peer_backlog("n1") == (0, 0)


def test_a_request_to_send_again_lost_with_its_link_is_repeated_after_relink() -> None:
    mesh = _worker_mesh()
    _send_to_worker(mesh, "one")
    assert mesh["n0"].core.peer_batch("n1", 0.0) is not None  # lost, the link stays up
    _send_to_worker(mesh, "two")
    second = mesh["n0"].core.peer_batch("n1", 0.0)
    assert second is not None
    mesh["n1"].core.peer_receive(second, 0.0)  # a gap: n1 asks for the rest again...
    assert mesh["n1"].core.peer_batch("n0", 0.0) is not None  # ...and that is lost too
    mesh["n1"].core.add_peer("n0", 0.0)  # n1's link to n0 came back
    mesh.settle()
    assert delivered(mesh["n1"], 2) == ["one", "two"]
