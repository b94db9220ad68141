"""gossamer.proto.gateway.ordered_queues: the core's cluster queue mode, without a socket.

Queue operations become proposals for the order (nothing decided locally, nothing
stored); what the order decides for this node's clients is carried out when the driver
reports it; a refusal answers at once, pending Pushes included.
"""

from __future__ import annotations

from typing import Any

from gossamer.proto.gateway.queues import QueueConfig
from gossamer.proto.gateway.replicated_queues import ReplicatedQueues
from gossamer.wire import queue_commands as commands
from gossamer.wire.gateway import Op

from .test_core import Harness

TARGET = {"application": "app"}


def ordered() -> Harness:
    h = Harness(node_id="n1", trace_name="n1#7", queues=QueueConfig(ack_timeout=5.0))
    h.core.order_queues(h.now)
    return h


def proposals(h: Harness) -> list[tuple[str, dict[str, Any]]]:
    return [(p.kind, dict(p.fields)) for p in h.core.queue_proposals()]


def test_operations_become_proposals_and_nothing_is_decided_here() -> None:
    h = ordered()
    h.identify(1, "prod")
    h.identify(2, "cons", metadata={"region": {"type": "string", "value": "eu"}})
    h.dispatch(1, "QUEUE", {"queue": "q", "target": TARGET, "payload": {"x": 1}, "nonce": "n1"})
    h.dispatch(2, "QUEUE_REQUEST", {"queue": "q", "count": 2})
    h.dispatch(2, "QUEUE_ACK", {"queue": "q", "id": "n9#1/4"})
    h.dispatch(2, "QUEUE_REQUEST_CANCEL", {"queue": "q"})
    got = proposals(h)
    assert [kind for kind, _f in got] == ["push", "request", "ack", "cancel"]
    push = got[0][1]
    assert push == {"queue": "q", "message_id": "n1#7/1", "nonce": "n1", "target": TARGET,
                    "payload": {"x": 1}, "app": "app", "client": "prod"}
    request = got[1][1]
    assert request["count"] == 2 and request["restricted"] is False
    assert request["metadata"]["region"] == ["string", "eu"]
    assert "namespace" not in request["metadata"]  # unset: never a null value
    assert got[2][1] == {"queue": "q", "message_id": "n9#1/4", "app": "app", "client": "cons"}
    # No confirm before the order says so; nothing stored or delivered by the core itself.
    assert h.take(1) == [] and h.take(2) == []
    assert h.ops == [] and h.core.queues.stats() == {}
    assert h.core.pending_pushes() == ["n1#7/1"]


def test_effects_are_carried_out_for_this_nodes_clients() -> None:
    h = ordered()
    h.identify(1, "prod")
    h.identify(2, "cons")
    h.dispatch(1, "QUEUE", {"queue": "q", "target": TARGET, "payload": "p", "nonce": "a"})
    (message_id,) = h.core.pending_pushes()
    assert h.core.queue_deliver(app="app", client="cons", queue="q", message_id=message_id,
                                nonce="a", payload="p", attempt=1, now=h.now)
    assert not h.core.queue_deliver(app="app", client="elsewhere", queue="q",
                                    message_id=message_id, nonce="a", payload="p", attempt=1,
                                    now=h.now)
    assert h.core.queue_confirm(message_id, h.now)
    assert not h.core.queue_confirm(message_id, h.now)  # once
    h.pump()
    (delivery,) = h.take(2)
    assert delivery.t == "QUEUE" and delivery.d["payload"]["id"] == message_id
    assert delivery.d["attempt"] == 1
    (confirm,) = h.take(1)
    assert confirm.t == "QUEUE_CONFIRM" and confirm.d == {"queue": "q", "id": message_id,
                                                          "nonce": "a"}


def test_an_unacked_delivery_is_proposed_to_expire_and_an_acked_one_is_not() -> None:
    h = ordered()
    h.identify(2, "cons")
    for n, message_id in enumerate(("m/1", "m/2")):
        h.core.queue_deliver(app="app", client="cons", queue="q", message_id=message_id,
                             nonce=n, payload=n, attempt=1, now=h.now)
    h.pump()
    h.dispatch(2, "QUEUE_ACK", {"queue": "q", "id": "m/1"})
    assert [k for k, _f in proposals(h)] == ["ack"]
    h.advance(6.0)
    assert proposals(h) == [("expire", {"message_id": "m/2", "attempt": 1, "app": "app",
                                        "client": "cons"})]
    h.advance(20.0)
    assert proposals(h) == []


def test_a_consumer_leaving_is_proposed_a_producer_leaving_is_not() -> None:
    h = ordered()
    h.identify(1, "prod")
    h.identify(2, "cons")
    h.dispatch(2, "QUEUE_REQUEST", {"queue": "q"})
    proposals(h)
    h.core.disconnect(1, h.now)
    h.core.disconnect(2, h.now)
    assert proposals(h) == [("client_gone", {"app": "app", "client": "cons"})]


def test_a_refusing_node_answers_at_once_and_refuses_pending_pushes() -> None:
    h = ordered()
    h.identify(1, "prod")
    h.dispatch(1, "QUEUE", {"queue": "q", "target": TARGET, "payload": 1, "nonce": "early"})
    proposals(h)
    assert h.core.queue_refuse_pending("no_majority", h.now) == 1
    h.core.set_queue_refusal("no_majority", h.now)
    h.pump()
    h.dispatch(1, "QUEUE", {"queue": "q", "target": TARGET, "payload": 2, "nonce": "late"})
    h.dispatch(1, "QUEUE_REQUEST", {"queue": "q"})
    assert proposals(h) == []
    answers = h.take(1)
    assert [p.op for p in answers] == [Op.INVALID] * 3
    assert [p.d["nonce"] for p in answers] == ["early", "late", None]
    assert {p.d["reason"] for p in answers} == {"no_majority"}
    assert answers[1].d["extra_info"] == {"t": "QUEUE", "queue": "q"}
    assert h.core.unconfirmed == 0
    h.core.set_queue_refusal(None, h.now)
    h.dispatch(1, "QUEUE", {"queue": "q", "target": TARGET, "payload": 3, "nonce": "again"})
    assert [k for k, _f in proposals(h)] == ["push"]


def test_invalid_operations_are_refused_as_on_one_node() -> None:
    h = ordered()
    h.identify(1, "prod")
    h.dispatch(1, "QUEUE", {"queue": "q", "target": {"ops": "nope"}, "payload": 1})
    h.dispatch(1, "QUEUE_REQUEST", {"queue": "q", "count": 0})
    h.dispatch(1, "QUEUE_ACK", {"queue": "q"})
    assert proposals(h) == []
    assert [p.op for p in h.take(1)] == [Op.INVALID] * 3


def test_the_http_api_shows_the_replicated_queues_and_a_replay_is_proposed() -> None:
    machine = ReplicatedQueues(QueueConfig(max_attempts=1))
    who = {"node": "n2#1", "app": "app", "client": "c"}
    machine.apply(commands.Push(queue="q", message_id="n2#1/1", nonce=None, target=TARGET,
                                payload=1, **who))
    machine.apply(commands.Request(queue="q", restricted=False, metadata={}, count=1, **who))
    machine.apply(commands.Expire(message_id="n2#1/1", attempt=1))
    h = ordered()
    h.core.order_queues(h.now, machine.book)
    assert h.core.queues.stats()["q"]["dead"] == 1
    replayed = h.core.replay_dead_letters("q", None, h.now)
    assert [m.id for m in replayed] == ["n2#1/1"]
    assert h.core.replay_dead_letters("q", ["other"], h.now) == []
    assert proposals(h) == [("replay", {"queue": "q", "ids": None}),
                            ("replay", {"queue": "q", "ids": ["other"]})]
    assert machine.book.stats()["q"]["dead"] == 1  # the order decides, not the core


def test_unused_credits_are_asked_again_for_the_consumers_still_here() -> None:
    h = ordered()
    h.identify(1, "cons")
    h.identify(2, "gone")
    h.dispatch(1, "QUEUE_REQUEST", {"queue": "q", "count": 3})
    h.dispatch(1, "QUEUE_REQUEST", {"queue": "r"})
    h.dispatch(1, "QUEUE_REQUEST_CANCEL", {"queue": "r"})
    h.dispatch(2, "QUEUE_REQUEST", {"queue": "q"})
    h.core.queue_deliver(app="app", client="cons", queue="q", message_id="m/1", nonce=None,
                         payload=1, attempt=1, now=h.now)
    h.core.disconnect(2, h.now)
    proposals(h)
    assert h.core.ask_again(h.now) == 1
    ((kind, fields),) = proposals(h)
    assert (kind, fields["client"], fields["queue"], fields["count"]) == ("request", "cons",
                                                                         "q", 2)
    assert h.core.ask_again(h.now) == 1  # still unused: asked again the next time too
