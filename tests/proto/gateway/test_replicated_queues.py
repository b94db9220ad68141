"""The replicated queues' state machine: the same commands give the same state and
effects; dispatch, ack, expiry, client and node departures; snapshot and restore."""

from __future__ import annotations

from pathlib import Path

import pytest

from gossamer.errors import DecodeError
from gossamer.proto.gateway.queues import QueueConfig
from gossamer.proto.gateway.replicated_queues import ReplicatedQueues
from gossamer.store.queues import SqliteQueueStore
from gossamer.wire import queue_commands as qc

APP = "app"
EU = {"application": APP, "ops": [{"path": "/region", "op": "$eq", "to": {"value": "eu"}}]}


def push(n: int, target: object = None, node: str = "n1#1") -> qc.Push:
    return qc.Push(queue="jobs", message_id=f"{node}/{n}", nonce=n,
                   target={"application": APP} if target is None else target,
                   payload={"n": n}, node=node, app=APP, client="producer")


def request(client: str, node: str = "n2#1", count: int = 1, region: str = "eu") -> qc.Request:
    return qc.Request(queue="jobs", node=node, app=APP, client=client, restricted=False,
                      metadata={"region": ["string", region]}, count=count)


def ack(n: int, client: str, node: str = "n2#1", origin: str = "n1#1") -> qc.Ack:
    return qc.Ack(queue="jobs", message_id=f"{origin}/{n}", node=node, app=APP, client=client)


def test_a_push_is_confirmed_at_its_position_and_delivered_to_the_waiting_consumer() -> None:
    m = ReplicatedQueues()
    assert m.apply(request("c1")).deliveries == ()
    effects = m.apply(push(1))
    assert effects.position == 2
    [confirm] = effects.confirms
    assert (confirm.node, confirm.message_id, confirm.position, confirm.duplicate) == (
        "n1#1", "n1#1/1", 2, False)
    [deliver] = effects.deliveries
    assert (deliver.node, deliver.client, deliver.message_id, deliver.attempt) == (
        "n2#1", "c1", "n1#1/1", 1)
    assert effects.store_ops[-1].position == 2  # type: ignore[union-attr]


def test_a_re_proposed_push_is_stored_once_and_confirmed_again() -> None:
    m = ReplicatedQueues()
    m.apply(push(1))
    again = m.apply(push(1))
    assert again.confirms[0].duplicate
    assert [r.id for r in m.records()] == ["n1#1/1"]


def test_targets_match_the_metadata_given_at_request_time() -> None:
    m = ReplicatedQueues()
    m.apply(request("us", region="us"))
    assert m.apply(push(1, EU)).deliveries == ()  # waits in place, not dropped
    assert m.apply(push(2)).deliveries[0].client == "us"  # a later message is considered
    assert m.apply(request("eu")).deliveries[0].message_id == "n1#1/1"


def test_an_acked_message_is_gone_and_a_second_ack_is_refused() -> None:
    m = ReplicatedQueues()
    m.apply(request("c1"))
    m.apply(push(1))
    assert m.apply(ack(1, "c1")).acks == (ack(1, "c1"),)
    [refused] = m.apply(ack(1, "c1")).refusals
    assert refused.reason == "unknown message id" and refused.node == "n2#1"
    assert m.records() == []


def test_an_ack_from_a_client_that_never_held_the_message_is_refused() -> None:
    m = ReplicatedQueues()
    m.apply(request("c1"))
    m.apply(push(1))
    assert m.apply(ack(1, "other")).refusals[0].reason == (
        "message was not delivered to this client")


def test_expire_returns_only_the_outstanding_attempt_and_redelivers_it() -> None:
    m = ReplicatedQueues()
    m.apply(request("c1", count=1))
    m.apply(push(1))
    m.apply(request("c2", node="n3#1"))
    assert m.apply(qc.Expire(message_id="n1#1/1", attempt=2)).deliveries == ()  # stale
    [again] = m.apply(qc.Expire(message_id="n1#1/1", attempt=1)).deliveries
    assert (again.node, again.client, again.attempt) == ("n3#1", "c2", 2)
    assert m.holder("n1#1/1") == ("n3#1", APP, "c2")


def test_a_message_dies_after_max_attempts_and_a_replay_brings_it_back() -> None:
    m = ReplicatedQueues(QueueConfig(max_attempts=1))
    m.apply(request("c1"))
    m.apply(push(1))
    [dead] = m.apply(qc.Expire(message_id="n1#1/1", attempt=1)).dead_letters
    assert dead.id == "n1#1/1" and "ack timeout" in dead.reason
    m.apply(request("c1"))
    assert m.apply(qc.Replay(queue="jobs", ids=None)).deliveries[0].attempt == 1


def test_a_node_gone_returns_what_its_clients_held_and_drops_their_credits() -> None:
    m = ReplicatedQueues()
    m.apply(request("c1", node="n2#1", count=3))
    m.apply(request("c2", node="n3#1"))
    m.apply(push(1))
    m.apply(push(2))
    effects = m.apply(qc.NodeGone(node="n2#1"))
    assert [d.node for d in effects.deliveries] == ["n3#1"]
    assert m.consumers() == [("n3#1", APP, "c2")]
    # The message the second consumer did not take waits for the next credit.
    assert m.apply(request("c3", node="n1#1")).deliveries[0].client == "c3"


def test_a_client_gone_only_counts_at_the_node_it_is_registered_at() -> None:
    m = ReplicatedQueues()
    m.apply(request("c1", node="n2#1"))
    m.apply(push(1))
    # The client moved to n3 (its deliveries at n2 return), then n2 reports it gone late.
    moved = m.apply(request("c1", node="n3#1"))
    assert [(d.node, d.attempt) for d in moved.deliveries] == [("n3#1", 2)]
    assert m.apply(qc.ClientGone(node="n2#1", app=APP, client="c1")).deliveries == ()
    assert m.holder("n1#1/1") == ("n3#1", APP, "c1")


def test_bad_input_is_refused_deterministically() -> None:
    m = ReplicatedQueues()
    assert m.apply(push(1, target={"ops": 3})).refusals[0].reason.startswith("invalid target")
    bad = qc.Request(queue="jobs", node="n", app=APP, client="c", restricted=False,
                     metadata={"k": ["integer", "x"]})
    assert m.apply(bad).refusals[0].reason.startswith("invalid metadata")
    assert m.apply(qc.Cancel(queue="", node="n", app=APP, client="c")).refusals == ()
    assert m.position == 3


def _busy() -> ReplicatedQueues:
    m = ReplicatedQueues(QueueConfig(max_attempts=2))
    m.apply(request("c1", count=2))
    m.apply(qc.Request(queue="jobs", node="n3#1", app=APP, client="c2", restricted=True,
                       metadata={"v": ["version", "1.2.3"], "region": ["string", "eu"]}))
    for n in range(1, 6):
        m.apply(push(n, EU if n % 2 else None))
    m.apply(qc.Expire(message_id="n1#1/1", attempt=1))
    return m


def test_a_restored_snapshot_is_the_same_state_and_decides_the_same() -> None:
    m = _busy()
    copy = ReplicatedQueues(QueueConfig(max_attempts=2))
    ops = copy.restore(m.snapshot())
    assert copy.snapshot() == m.snapshot() and copy.digest() == m.digest()
    assert copy.chain == m.chain
    assert len(ops) == len(m.records()) + 2
    for command in [ack(2, "c1"), qc.NodeGone(node="n3#1"), request("c4", count=3),
                    qc.Expire(message_id="n1#1/3", attempt=1)]:
        assert copy.apply(command) == m.apply(command)
    assert copy.snapshot() == m.snapshot()


def test_an_unreadable_snapshot_is_a_decode_error_and_changes_nothing() -> None:
    m = _busy()
    before = m.snapshot()
    for bad in (b"", b"\x93\x01\x02\x03", before[:-3], before.replace(b"inflight", b"inflate")):
        with pytest.raises(DecodeError):
            m.restore(bad)
    assert m.snapshot() == before


def test_the_store_holds_what_the_machine_holds_and_rebuilds_it(tmp_path: Path) -> None:
    m = _busy()
    with SqliteQueueStore(tmp_path) as store:
        store.apply(m.restore(m.snapshot()))
        for command in (ack(2, "c1"), request("c5", count=2), ack(4, "c1")):
            store.apply(m.apply(command).store_ops)
        assert store.position() == m.position and store.chain() == m.chain
        rebuilt = ReplicatedQueues.from_store(store.load(), store.position(),
                                              QueueConfig(max_attempts=2), chain=store.chain())
    assert rebuilt.chain == m.chain
    assert [r.id for r in rebuilt.records()] == [r.id for r in m.records()]
    # In-flight messages are ready again after a rebuild; nobody holds anything.
    assert rebuilt.consumers() == [] and rebuilt.position == m.position
    assert all(rebuilt.holder(r.id) is None for r in rebuilt.records())


def test_a_view_install_applies_node_gone_only_for_nodes_with_consumers() -> None:
    m = ReplicatedQueues()
    m.apply(request("c1", node="n2#1"))
    m.apply(push(1))
    assert m.install(["n1#1", "n2#1", "n3#1"]) == []
    [gone] = m.install(["n1#1", "n3#1", "n4#1"])  # n2#1 left; n4 never had consumers
    assert gone.position == 3 and gone.returned == ("n1#1/1",)
    assert m.position == 3 and m.consumers() == []


def test_the_chain_names_the_history_not_only_its_length() -> None:
    a, b = ReplicatedQueues(), ReplicatedQueues()
    a.apply(push(1))
    b.apply(push(2))
    assert a.position == b.position and a.chain != b.chain
    assert a.apply(push(3)).chain != b.apply(push(3)).chain  # a divergence stays visible


def test_a_late_client_gone_of_an_old_connection_leaves_the_new_one_alone() -> None:
    m = ReplicatedQueues()
    first = qc.Request(queue="jobs", node="n2#1", app=APP, client="c1", restricted=False,
                       metadata={}, session="s1")
    m.apply(first)
    m.apply(push(1))
    # The client reconnects to the same node: what the old connection held comes back.
    again = m.apply(qc.Request(queue="jobs", node="n2#1", app=APP, client="c1",
                               restricted=False, metadata={}, session="s2"))
    assert again.returned == ("n1#1/1",) and again.deliveries[0].attempt == 2
    # The old connection's ClientGone, ordered after the new Request, changes nothing.
    stale = m.apply(qc.ClientGone(node="n2#1", app=APP, client="c1", session="s1"))
    assert stale.returned == () and stale.deliveries == ()
    assert m.consumers() == [("n2#1", APP, "c1")] and m.holder("n1#1/1") is not None
    m.apply(qc.ClientGone(node="n2#1", app=APP, client="c1", session="s2"))
    assert m.consumers() == [] and m.holder("n1#1/1") is None
