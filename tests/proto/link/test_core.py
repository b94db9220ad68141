"""The link node, frame by frame: the handshakes of the notes and of the Java suite
(LinkingAndUnlinkingTests), credits, and what the node does with stray messages."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gossamer.errors import ConfigError, DecodeError, LinkError, LocalProtocolError
from gossamer.proto.link import (
    LinkDown,
    LinkUp,
    Readable,
    Receipt,
    RequestFailed,
    SocketOptions,
    Writable,
)
from gossamer.proto.link.machine import LinkState
from gossamer.wire import exon
from gossamer.wire.exon import (
    DataBody,
    ErrorBody,
    ErrorCode,
    LinkAckBody,
    LinkDecision,
    SocketMessage,
)

from .fabric import Fabric

T0 = 0.0


def up(fabric: Fabric, node: str) -> list[LinkUp]:
    return fabric.of(node, LinkUp)


def down(fabric: Fabric, node: str) -> list[str]:
    return [e.reason for e in fabric.of(node, LinkDown)]


def pushpull(fabric: Fabric, **pull_options: object) -> tuple:  # type: ignore[type-arg]
    push = fabric.socket("a", "push", 1)
    pull = fabric.socket("b", "pull", 2, **pull_options)
    return push, pull


# ----------------------------------------------------------------- handshakes


def test_normal_handshake_is_link_linkack_with_metadata_then_linkack() -> None:
    f = Fabric()
    push, pull = pushpull(f, capacity=7)
    push.link(f.addr["b"], 2, T0)
    f.run()
    assert pull.established == 1
    assert f.types("a", "b") == ["LINK", "LINKACK"]
    assert f.types("b", "a") == ["LINKACK"]
    (_, _, reply), = [d for d in f.delivered if d[2].type.name == "LINKACK" and d[1] == f.addr["a"]]
    assert isinstance(reply.body, LinkAckBody) and reply.body.metadata is not None
    (_, _, final), = [d for d in f.delivered if d[2].type.name == "LINKACK" and d[1] == f.addr["b"]]
    assert isinstance(final.body, LinkAckBody) and final.body.metadata is None
    (a_up,), (b_up,) = up(f, "a"), up(f, "b")
    assert a_up.credits == 7 and b_up.credits == 0  # the PULL's capacity; PUSH grants 0
    assert a_up.link == b_up.link
    # The initiator establishes first (it has both decisions after one round trip).
    ups = f.trace("link_up")
    assert [e.node for e in ups] == ["a", "b"]
    assert ups[0].attrs["credits"] == "7"
    assert push.link_state(f.addr["b"], 2) is LinkState.ESTABLISHED


def test_simultaneous_links_exchange_decisions_without_metadata() -> None:
    f = Fabric()
    x = f.socket("a", "pair", 1)
    y = f.socket("b", "pair", 2)
    f.hold = lambda src, dst, msg: msg.type.name == "LINK"
    x.link(f.addr["b"], 2, T0)
    y.link(f.addr["a"], 1, T0)
    f.run()
    f.hold = None
    f.release_all()  # both LINKs cross: each side has sent its own first
    for src, dst in (("a", "b"), ("b", "a")):
        assert f.types(src, dst) == ["LINK", "LINKACK"]
    acks = [m.body for _, _, m in f.delivered if isinstance(m.body, LinkAckBody)]
    assert all(ack.metadata is None for ack in acks)
    assert len(up(f, "a")) == len(up(f, "b")) == 1
    assert len(x.links) == len(y.links) == 1


def test_linkack_before_link_is_kept_until_the_link_arrives() -> None:
    f = Fabric()
    x = f.socket("a", "pair", 1)
    y = f.socket("b", "pair", 2)
    f.hold = lambda src, dst, msg: msg.type.name == "LINK" and src == f.addr["b"]
    x.link(f.addr["b"], 2, T0)
    y.link(f.addr["a"], 1, T0)
    f.run()  # b got a's LINK and answered; b's own LINK is held back
    assert x.link_state(f.addr["b"], 2) is LinkState.ACK_FIRST
    assert up(f, "a") == []
    f.hold = None
    f.release("b", "a")
    assert x.link_state(f.addr["b"], 2) is LinkState.ESTABLISHED
    assert y.link_state(f.addr["a"], 1) is LinkState.ESTABLISHED


@pytest.mark.parametrize("simultaneous", [False, True])
def test_incompatible_sockets_refuse_fatally_and_forget_each_other(simultaneous: bool) -> None:
    f = Fabric()
    x = f.socket("a", "push", 1)
    y = f.socket("b", "push", 2)
    x.link(f.addr["b"], 2, T0)
    if simultaneous:
        y.link(f.addr["a"], 1, T0)
    f.run()
    # Refused by the peer's decision, or (simultaneous) by our own on its LINK.
    expected = {"refused:incompatible", "rejected:incompatible"} if simultaneous else {
        "refused:incompatible"}
    assert len(down(f, "a")) == 1 and down(f, "a")[0] in expected
    assert not x.links and not y.links
    frames = len(f.delivered)
    f.advance(30.0)
    assert len(f.delivered) == frames  # fatal: nobody retries


def test_transient_refusal_is_retried_with_random_back_off_until_it_succeeds() -> None:
    f = Fabric("abc")
    first = f.socket("a", "push", 1)
    second = f.socket("c", "push", 3, retry_base=0.1, retry_limit=5)
    pull = f.socket("b", "pull", 2, max_links=1)
    first.link(f.addr["b"], 2, T0)
    f.run()
    second.link(f.addr["b"], 2, T0)
    f.run()
    assert second.link_state(f.addr["b"], 2) is LinkState.RETRY_WAIT
    retry_at = f.nodes["c"].next_deadline()
    assert retry_at is not None and 0.05 <= retry_at <= 0.15  # 0.1 x uniform(0.5, 1.5)
    acks = [m.body for s, _, m in f.delivered if s == f.addr["b"] and m.dst_tag == 3]
    assert acks[-1].decision is LinkDecision.TEMPORARILY_UNAVAILABLE  # type: ignore[union-attr]
    f.advance(0.2)  # first retry: still full
    assert second.link_state(f.addr["b"], 2) is LinkState.RETRY_WAIT
    first.unlink(f.addr["b"], 2, f.now)
    f.run()
    f.advance(5.0)
    assert second.link_state(f.addr["b"], 2) is LinkState.ESTABLISHED
    assert pull.established == 1 and down(f, "c") == []
    assert f.types("c", "b").count("LINK") >= 3


def test_back_off_is_randomized_per_socket() -> None:
    delays = set()
    for seed in range(4):
        f = Fabric("abc", seed=seed)
        f.socket("a", "push", 1).link(f.addr["b"], 2, T0)
        f.socket("b", "pull", 2, max_links=1)
        f.run()
        f.socket("c", "push", 3).link(f.addr["b"], 2, T0)
        f.run()
        delays.add(f.nodes["c"].next_deadline())
    assert len(delays) == 4


def test_retries_stop_at_the_limit() -> None:
    f = Fabric("abc")
    f.socket("b", "pull", 2, max_links=1)
    f.socket("a", "push", 1).link(f.addr["b"], 2, T0)
    f.run()
    late = f.socket("c", "push", 3, retry_base=0.05, retry_max=0.2, retry_limit=3)
    late.link(f.addr["b"], 2, T0)
    f.run()
    f.advance(10.0)
    assert down(f, "c") == ["gave_up:refused:temporarily_unavailable"]
    assert f.types("c", "b").count("LINK") == 4  # the first attempt and 3 retries
    assert not late.links and f.nodes["c"].next_deadline() is None


def test_retries_back_off_around_a_ceiling_that_doubles_up_to_retry_max() -> None:
    f = Fabric("abc")
    f.socket("b", "pull", 2, max_links=1)
    f.socket("a", "push", 1).link(f.addr["b"], 2, T0)
    f.run()
    late = f.socket("c", "push", 3, retry_base=0.1, retry_max=0.3, retry_limit=5)
    late.link(f.addr["b"], 2, T0)
    f.run()
    node = f.nodes["c"]
    for ceiling in (0.1, 0.2, 0.3, 0.3, 0.3):
        refused_at, deadline = f.now, node.next_deadline()
        assert deadline is not None
        assert 0.5 * ceiling <= deadline - refused_at <= 1.5 * ceiling
        f.advance(deadline - f.now)  # the retry, refused again
    assert down(f, "c") == ["gave_up:refused:temporarily_unavailable"]


def test_retry_base_and_retry_max_are_checked_by_the_shared_backoff() -> None:
    with pytest.raises(ConfigError, match="retry_base <= retry_max") as info:
        SocketOptions(retry_base=0.5, retry_max=0.1)
    assert isinstance(info.value.__cause__, ConfigError)
    assert SocketOptions(retry_base=0.2, retry_max=0.4).retry_backoff.ceiling(5) == 0.4


def test_a_fatal_refusal_after_a_transient_one_ends_the_retries() -> None:
    f = Fabric("abc")
    pull = f.socket("b", "pull", 2, max_links=1)
    f.socket("a", "push", 1).link(f.addr["b"], 2, T0)
    f.run()
    late = f.socket("c", "push", 3, retry_base=0.1, retry_limit=50)
    late.link(f.addr["b"], 2, T0)
    f.run()
    # Closing, with its old link still unlinking (the UNLINKs are held), so the socket
    # is both closed and at its limit: CLOSED must win (Java bug 1).
    f.hold = lambda src, dst, msg: msg.type.name == "UNLINK"
    pull.close(f.now)
    f.run()
    f.advance(5.0)
    assert down(f, "c") == ["refused:closed"]
    assert f.types("c", "b").count("LINK") == 2


def test_a_closed_socket_at_its_limit_answers_closed_not_unavailable() -> None:
    f = Fabric("abc")
    pull = f.socket("b", "pull", 2, max_links=1)
    f.socket("a", "push", 1).link(f.addr["b"], 2, T0)
    f.run()
    f.hold = lambda src, dst, msg: msg.type.name == "UNLINK"  # keep the old link up
    pull.close(f.now)
    f.run()
    f.socket("c", "push", 3).link(f.addr["b"], 2, f.now)
    f.run()
    assert down(f, "c") == ["refused:closed"]


def test_cancel_while_linking_answers_canceled() -> None:
    f = Fabric()
    push, pull = pushpull(f)
    f.hold = lambda src, dst, msg: msg.type.name == "LINKACK"
    push.link(f.addr["b"], 2, T0)
    f.run()
    push.unlink(f.addr["b"], 2, T0)
    assert push.link_state(f.addr["b"], 2) is LinkState.CANCEL_WAIT
    f.hold = None
    f.release("b", "a")
    acks = [m.body for s, _, m in f.delivered if s == f.addr["a"] and m.type.name == "LINKACK"]
    assert [a.decision for a in acks] == [LinkDecision.CANCELED]  # type: ignore[union-attr]
    assert down(f, "a") == ["cancelled"] and down(f, "b") == ["refused:canceled"]
    assert up(f, "a") == up(f, "b") == []
    assert not push.links and not pull.links


def test_cancel_after_our_decision_unlinks_an_established_peer() -> None:
    f = Fabric()
    push, pull = pushpull(f)
    f.hold = lambda src, dst, msg: msg.type.name == "LINKACK" and src == f.addr["a"]
    push.link(f.addr["b"], 2, T0)
    f.run()
    assert push.link_state(f.addr["b"], 2) is LinkState.ESTABLISHED
    # b decided positively and waits for a's decision; its application gives up.
    pull.unlink(f.addr["a"], 1, T0)
    assert pull.link_state(f.addr["a"], 1) is LinkState.CANCEL_DECIDED
    f.hold = None
    f.release("a", "b")
    assert down(f, "a") == down(f, "b") == ["unlinked"]
    assert len(up(f, "b")) == 1  # briefly up, then unlinked properly


def test_data_confirms_the_link_and_the_late_linkack_is_ignored() -> None:
    f = Fabric()
    push, pull = pushpull(f)
    f.hold = lambda src, dst, msg: msg.type.name == "LINKACK" and src == f.addr["a"]
    push.link(f.addr["b"], 2, T0)
    f.run()
    assert push.send(b"first", T0)
    f.run()  # the DATA is held too (it is behind nothing: only LINKACKs are held)
    assert pull.link_state(f.addr["a"], 1) is LinkState.ESTABLISHED
    assert pull.take(T0) == b"first"
    f.hold = None
    f.release("a", "b")  # the LINKACK now arrives after the DATA
    drops = [e.attrs["reason"] for e in f.trace("drop", "b")]
    assert "ack_ok ignored in established" in drops
    assert len(up(f, "b")) == 1


@pytest.mark.parametrize("unlink_first", [False, True])
def test_unlink_delivers_every_message_in_flight(unlink_first: bool) -> None:
    f = Fabric()
    push, pull = pushpull(f, capacity=20)
    push.link(f.addr["b"], 2, T0)
    f.run()
    f.hold = lambda src, dst, msg: src == f.addr["a"]
    for i in range(10):
        assert push.send(f"m{i}".encode(), T0)
    push.unlink(f.addr["b"], 2, T0)
    f.run()
    f.hold = None

    def reorder(held: list[SocketMessage]) -> list[SocketMessage]:
        # UNLINK overtakes the DATA (possible on a datagram network).
        return sorted(held, key=lambda m: m.type.name != "UNLINK") if unlink_first else held

    f.release("a", "b", order=reorder)
    assert down(f, "a") == down(f, "b") == ["unlinked"]
    assert [pull.take(T0) for _ in range(11)] == [f"m{i}".encode() for i in range(10)] + [None]


def test_draining_waits_for_the_data_still_in_flight() -> None:
    f = Fabric()
    push, pull = pushpull(f, capacity=20)
    push.link(f.addr["b"], 2, T0)
    f.run()
    f.hold = lambda src, dst, msg: src == f.addr["a"] and msg.type.name == "DATA"
    for _ in range(3):
        push.send(b"x", T0)
    f.run()
    pull.unlink(f.addr["a"], 1, T0)  # the receiver unlinks; 3 DATA are on their way
    f.run()
    # The sender got everything the receiver sent (nothing) and is done; the receiver
    # waits for the 3 DATA its peer's UNLINK counted.
    assert push.link_state(f.addr["b"], 2) is LinkState.IDLE
    assert pull.link_state(f.addr["a"], 1) is LinkState.DRAINING
    assert down(f, "b") == []
    f.hold = None
    f.release("a", "b")
    assert down(f, "a") == down(f, "b") == ["unlinked"]
    assert [pull.take(T0) for _ in range(3)] == [b"x"] * 3


def test_stale_incarnations_are_ignored() -> None:
    f = Fabric()
    push, pull = pushpull(f)
    push.link(f.addr["b"], 2, T0)
    f.run()
    old_clock = f.of("a", LinkUp)[0].link
    old = next(m for s, _, m in f.delivered if s == f.addr["a"] and m.type.name == "LINK")
    push.unlink(f.addr["b"], 2, T0)
    f.run()
    push.link(f.addr["b"], 2, T0)
    f.run()
    assert len(up(f, "b")) == 2 and f.of("a", LinkUp)[1].link != old_clock
    # A DATA and a LINKACK of the first incarnation arrive late.
    f.inject("a", "b", SocketMessage(src_tag=1, dst_tag=2, clock=old.clock,
                                     body=DataBody(payload=b"ghost")))
    assert pull.take(T0) is None
    f.inject("b", "a", SocketMessage(src_tag=2, dst_tag=1, clock=123,
                                     body=LinkAckBody(decision=LinkDecision.INCOMPATIBLE,
                                                      dest_clock=old.clock)))
    assert push.link_state(f.addr["b"], 2) is LinkState.ESTABLISHED
    reasons = [e.attrs["reason"] for e in f.trace("drop")]
    assert "stale: DATA of another incarnation" in reasons
    assert "stale: LINKACK for another incarnation" in reasons


def test_a_new_link_before_the_old_unlink_arrives_is_told_link_exists() -> None:
    f = Fabric()
    push, _ = pushpull(f)
    push.link(f.addr["b"], 2, T0)
    f.run()
    f.hold = lambda src, dst, msg: msg.type.name in ("UNLINK", "ERROR") and src == f.addr["a"]
    push.unlink(f.addr["b"], 2, T0)
    f.run()
    # a's UNLINK (and then the "socket not found" of its removed socket) stay in
    # flight while a new incarnation of a's socket (same tag) asks again.
    f.nodes["a"].remove_socket(1, T0)
    again = f.socket("a", "push", 1, retry_base=0.05)
    again.link(f.addr["b"], 2, T0)
    f.run()
    acks = [m.body for s, _, m in f.delivered if s == f.addr["b"] and m.type.name == "LINKACK"]
    assert acks[-1].decision is LinkDecision.LINK_EXISTS  # type: ignore[union-attr]
    assert again.link_state(f.addr["b"], 2) is LinkState.RETRY_WAIT
    f.hold = None
    f.release("a", "b")
    f.advance(2.0)
    assert again.link_state(f.addr["b"], 2) is LinkState.ESTABLISHED


def test_socket_not_found_comes_from_the_missing_socket_and_linking_retries() -> None:
    f = Fabric()
    push = f.socket("a", "push", 1, retry_base=0.1)
    push.link(f.addr["b"], 99, T0)
    f.run()
    (error,) = [m for s, _, m in f.delivered if s == f.addr["b"]]
    assert isinstance(error.body, ErrorBody) and error.body.code is ErrorCode.SOCKET_NOT_FOUND
    assert (error.src_tag, error.dst_tag) == (99, 1)  # "as if from the missing socket"
    assert push.link_state(f.addr["b"], 99) is LinkState.RETRY_WAIT
    f.socket("b", "pull", 99)
    f.advance(1.0)
    assert push.link_state(f.addr["b"], 99) is LinkState.ESTABLISHED


def test_messages_from_an_unlinked_socket_get_socket_not_linked() -> None:
    f = Fabric()
    pull = f.socket("b", "pull", 2)
    f.inject("a", "b", SocketMessage(src_tag=5, dst_tag=2, clock=77, body=DataBody(payload=b"?")))
    (reply,) = [m for s, _, m in f.delivered if s == f.addr["b"]]
    assert isinstance(reply.body, ErrorBody)
    assert reply.body.code is ErrorCode.SOCKET_NOT_LINKED and reply.body.dest_clock == 77
    assert pull.take(T0) is None


def test_losing_the_connection_takes_every_link_down_loudly() -> None:
    f = Fabric()
    req = f.socket("a", "req", 1)
    f.socket("b", "rep", 2)
    req.link(f.addr["b"], 2, T0)
    f.run()
    assert req.send(b"question", T0)
    f.hold = lambda src, dst, msg: True
    f.run()
    f.break_connection("a", "b")
    assert down(f, "a") == down(f, "b") == ["transport_lost"]
    assert req.request_failed == "transport_lost"
    assert f.of("a", RequestFailed)[0].reason == "transport_lost"
    assert f.trace("link_down", "a")[0].attrs["reason"] == "transport_lost"


def test_self_links_are_refused_locally() -> None:
    f = Fabric()
    x = f.socket("a", "pair", 1)
    with pytest.raises(LocalProtocolError):
        x.link(f.addr["a"], 1, T0)
    with pytest.raises(LocalProtocolError):
        x.unlink(f.addr["b"], 2, T0)
    with pytest.raises(ConfigError):
        f.socket("a", "pair", 1)
    with pytest.raises(ConfigError):
        f.socket("a", "pair", 0)


# ----------------------------------------------------------------- credits


def test_the_credit_example_end_to_end() -> None:
    f = Fabric()
    push, pull = pushpull(f, capacity=100, batch=0.5)
    push.link(f.addr["b"], 2, T0)
    f.run()
    peer = f.addr["b"]
    for i in range(25):
        assert push.send(b"%d" % i, T0)
    f.run()
    assert push.credits(peer, 2) == 75
    pull.set_capacity(0, T0)
    f.run()
    assert push.credits(peer, 2) == -25
    pull.set_batch(1.0, T0)
    pull.adjust_capacity(5, T0)
    f.run()
    assert push.credits(peer, 2) == -20
    assert not push.send(b"blocked", T0)
    taken = [pull.take(T0) for _ in range(25)]
    f.run()
    assert taken == [b"%d" % i for i in range(25)]
    assert push.credits(peer, 2) == 5
    amounts = [int(e.attrs["amount"]) for e in f.trace("credit", "a")]
    assert amounts == [-100, 5, 5, 5, 5, 5, 5]
    assert push.statistics().would_block == 1


def test_credits_come_back_when_messages_are_taken_not_when_they_arrive() -> None:
    f = Fabric()
    push, pull = pushpull(f, capacity=4, batch=0.5)
    push.link(f.addr["b"], 2, T0)
    f.run()
    sent = 0
    while push.send(b"m", T0):
        sent += 1
    f.run()
    assert sent == 4 and not push.send(b"m", T0)  # arrived, not taken: no credit
    assert pull.take(T0) == b"m"
    f.run()
    assert push.credits(f.addr["b"], 2) == 0  # batch of 2 not full yet
    pull.take(T0)
    f.run()
    assert push.credits(f.addr["b"], 2) == 2
    writable = f.of("a", Writable)
    assert writable, "the sender is told when credit returns"


def test_control_messages_need_no_credit() -> None:
    f = Fabric()
    pub = f.socket("a", "pub", 1)  # a PUB grants no credit at all
    sub = f.socket("b", "sub", 2, capacity=1)
    sub.subscribe(b"x", T0)
    sub.link(f.addr["a"], 1, T0)
    f.run()
    sub.subscribe(b"y", T0)
    sub.subscribe(b"z", T0)
    f.run()
    assert sub.credits(f.addr["a"], 1) == 0
    assert pub.send(b"z1", T0)
    f.run()
    assert sub.take(T0) == b"z1"


def test_round_robin_skips_links_without_credit() -> None:
    f = Fabric("abc")
    push = f.socket("a", "push", 1)
    small = f.socket("b", "pull", 2, capacity=2)
    large = f.socket("c", "pull", 3, capacity=10)
    push.link(f.addr["b"], 2, T0)
    push.link(f.addr["c"], 3, T0)
    f.run()
    for i in range(8):
        assert push.send(b"%d" % i, T0)
    f.run()
    got_small = [small.take(T0) for _ in range(3)]
    got_large = [large.take(T0) for _ in range(7)]
    assert got_small == [b"0", b"2", None]
    assert got_large == [b"1", b"3", b"4", b"5", b"6", b"7", None]


def test_the_memory_bound_holds_with_a_slow_consumer_and_many_fast_senders() -> None:
    senders = "abcdefgh"
    f = Fabric(senders + "z", trace_data=False)
    capacity, size = 5, 200
    pull = f.socket("z", "pull", 9, capacity=capacity, batch=0.4)
    pushes = [f.socket(n, "push", 1) for n in senders]
    for push in pushes:
        push.link(f.addr["z"], 9, T0)
    f.run()
    bound = len(senders) * capacity * size
    sent = taken = 0
    for _ in range(400):
        for push in pushes:  # every sender sends as fast as credits allow
            while sent < 2000 and push.send(bytes(size), T0):
                sent += 1
        f.run()
        stats = pull.statistics()
        assert stats.queued_bytes <= bound
        assert all(link.queued <= capacity for link in stats.links)
        if pull.take(T0) is not None:  # the consumer takes one message per round
            taken += 1
    while pull.take(T0) is not None:
        taken += 1
        f.run()
        for push in pushes:
            while sent < 2000 and push.send(bytes(size), T0):
                sent += 1
        f.run()
    assert pull.statistics().peak_queued_bytes == bound  # reached, never exceeded
    assert taken == sent == 2000


def test_a_sender_beyond_its_credit_is_cut_off() -> None:
    f = Fabric()
    push, pull = pushpull(f, capacity=2)
    push.link(f.addr["b"], 2, T0)
    f.run()
    link_clock = next(m.clock for s, _, m in f.delivered if s == f.addr["a"] and m.dst_tag)
    for _ in range(3):  # a misbehaving sender ignores its credits
        f.inject("a", "b", SocketMessage(src_tag=1, dst_tag=2, clock=link_clock,
                                         body=DataBody(payload=b"flood")))
    assert pull.statistics().queued == 2
    assert down(f, "b") == ["credit_violation"]
    assert "peer_not_linked" in down(f, "a")
    assert any(e.attrs["reason"] == "credit_violation" for e in f.trace("drop", "b"))


# ----------------------------------------------------------------- patterns


@pytest.mark.parametrize(
    ("mine", "theirs"),
    [(a, b) for a in ("push", "pull", "req", "rep", "dealer", "router", "pub", "sub", "pair")
     for b in ("push", "pull", "req", "rep", "dealer", "router", "pub", "sub", "pair")],
)
def test_compatibility_is_checked_at_link_time(mine: str, theirs: str) -> None:
    from gossamer.proto.link.patterns import BY_NAME

    f = Fabric()
    x = f.socket("a", mine, 1)
    f.socket("b", theirs, 2)
    x.link(f.addr["b"], 2, T0)
    f.run()
    compatible = BY_NAME[theirs].kind in BY_NAME[mine].compatible
    assert (x.link_state(f.addr["b"], 2) is LinkState.ESTABLISHED) == compatible
    assert down(f, "a") == ([] if compatible else ["refused:incompatible"])


def test_req_rep_alternate_strictly_and_stale_replies_are_dropped_loudly() -> None:
    f = Fabric()
    req = f.socket("a", "req", 1)
    rep = f.socket("b", "rep", 2)
    req.link(f.addr["b"], 2, T0)
    f.run()
    with pytest.raises(LocalProtocolError):
        rep.send(b"no request yet", T0)
    assert req.send(b"q1", T0)
    with pytest.raises(LocalProtocolError):
        req.send(b"q2", T0)
    f.run()
    assert rep.take(T0) == b"q1"
    with pytest.raises(LocalProtocolError):
        rep.take(T0)  # must reply first
    req.abandon_request()  # the client timed out and asks again
    assert req.send(b"q2", T0)
    assert rep.send(b"late answer to q1", T0)
    f.run()
    assert req.take(T0) is None  # the stale reply was dropped, traced, credit returned
    assert any(e.attrs["reason"] == "stale_reply" for e in f.trace("drop", "a"))
    assert rep.take(T0) == b"q2"
    rep.send(b"a2", T0)
    f.run()
    message = req.take_message(T0)
    assert message is not None and not isinstance(message, Receipt)
    assert message.data == b"a2" and message.sender == f.addr["b"]


def test_dealer_router_route_by_id_with_envelopes() -> None:
    f = Fabric("abc")
    router = f.socket("a", "router", 1)
    d1 = f.socket("b", "dealer", 2)
    d2 = f.socket("c", "dealer", 3)
    for dealer in (d1, d2):
        dealer.link(f.addr["a"], 1, T0)
    f.run()
    d1.send(b"from b", T0, envelope=(7,))
    d2.send(b"from c", T0)
    f.run()
    first = router.take_message(T0)
    second = router.take_message(T0)
    assert not isinstance(first, Receipt) and not isinstance(second, Receipt)
    assert first is not None and second is not None
    assert (first.data, first.envelope) == (b"from b", (7,))
    assert first.routing_id != second.routing_id
    router.send(b"reply", T0, to=second.routing_id, envelope=(1, 2))
    f.run()
    got = d2.take_message(T0)
    assert got is not None and not isinstance(got, Receipt)
    assert (got.data, got.envelope) == (b"reply", (1, 2))
    assert d1.take(T0) is None
    with pytest.raises(LinkError):
        router.send(b"nobody", T0, to=999)


def test_pub_sub_filters_by_prefix_and_waits_for_the_slowest_subscriber() -> None:
    f = Fabric("abc")
    pub = f.socket("a", "pub", 1)
    fast = f.socket("b", "sub", 2, capacity=10)
    slow = f.socket("c", "sub", 3, capacity=2, batch=1.0)
    fast.subscribe(b"", T0)
    slow.subscribe(b"news", T0)
    fast.link(f.addr["a"], 1, T0)
    slow.link(f.addr["a"], 1, T0)
    f.run()
    assert pub.send(b"sport 1", T0)  # only the fast one matches
    assert pub.send(b"news 1", T0)
    assert pub.send(b"news 2", T0)
    assert not pub.send(b"news 3", T0)  # the slow subscriber has no credit: nobody gets it
    f.run()
    assert [fast.take(T0) for _ in range(4)] == [b"sport 1", b"news 1", b"news 2", None]
    assert [slow.take(T0), slow.take(T0)] == [b"news 1", b"news 2"]
    f.run()
    assert pub.send(b"news 3", T0)
    slow.unsubscribe(b"news", T0)
    f.run()
    assert pub.send(b"news 4", T0)
    f.run()
    assert slow.take(T0) == b"news 3" and slow.take(T0) is None
    lonely = f.socket("b", "pub", 5)
    assert lonely.send(b"to nobody", T0)  # no subscriber: counted and traced, not hidden
    assert lonely.statistics().dropped == 1
    assert any(e.attrs["reason"] == "no_subscriber" for e in f.trace("drop", "b"))


def test_pair_links_once() -> None:
    f = Fabric("abc")
    x = f.socket("a", "pair", 1)
    f.socket("b", "pair", 2)
    third = f.socket("c", "pair", 3, retry_limit=0)
    x.link(f.addr["b"], 2, T0)
    f.run()
    third.link(f.addr["b"], 2, T0)
    f.run()
    assert down(f, "c") == ["gave_up:refused:temporarily_unavailable"]
    assert x.send(b"hi", T0)


def test_receive_returns_receipts_before_messages() -> None:
    f = Fabric()
    x = f.socket("a", "pair", 1, receipts=True)
    y = f.socket("b", "pair", 2, receipts=True)
    x.link(f.addr["b"], 2, T0)
    f.run()
    assert y.send(b"to a", T0)
    assert x.send(b"one", T0, cookie="c1")
    assert x.send(b"two", T0, cookie={"id": 2})
    f.run()
    # b took nothing of a's yet: a's only readable item is b's message.
    assert x.take(T0) == b"to a"
    assert y.take(T0) == b"one"
    assert y.take(T0) == b"two"
    y.send(b"later", T0)
    f.run()
    first = x.take(T0)
    second = x.take(T0)
    assert isinstance(first, Receipt) and first.cookie == "c1" and first.taken
    assert isinstance(second, Receipt) and second.cookie == {"id": 2}
    assert x.take(T0) == b"later"
    assert f.of("a", Readable)
    with pytest.raises(ConfigError):
        f.socket("a", "push", 7).send(b"x", T0, cookie=1)


def test_a_push_socket_receives_only_its_receipts() -> None:
    f = Fabric()
    push = f.socket("a", "push", 1, receipts=True)
    pull = f.socket("b", "pull", 2)
    push.link(f.addr["b"], 2, T0)
    f.run()
    assert push.take(T0) is None  # nothing yet, but receipts may come: no error
    push.send(b"job", T0, cookie=42)
    f.run()
    assert pull.take(T0) == b"job"
    f.run()
    receipt = push.take(T0)
    assert isinstance(receipt, Receipt) and receipt.cookie == 42 and receipt.taken
    with pytest.raises(LocalProtocolError):
        f.socket("a", "push", 3).take(T0)


def test_receipt_ratio_lets_messages_through() -> None:
    f = Fabric()
    x = f.socket("a", "pair", 1, receipts=True, receipt_ratio=2)
    y = f.socket("b", "pair", 2, capacity=20)
    x.link(f.addr["b"], 2, T0)
    f.run()
    for i in range(4):
        x.send(b"%d" % i, T0, cookie=i)
    f.run()
    for _ in range(4):
        y.take(T0)
    for i in range(3):
        y.send(b"r%d" % i, T0)
    f.run()
    kinds = ["receipt" if isinstance(x.take(T0), Receipt) else "message" for _ in range(7)]
    assert kinds == ["receipt", "receipt", "message", "receipt", "receipt", "message",
                     "message"]


def test_receipts_of_messages_lost_with_their_link_say_so() -> None:
    f = Fabric()
    x = f.socket("a", "pair", 1, receipts=True)
    f.socket("b", "pair", 2)
    x.link(f.addr["b"], 2, T0)
    f.run()
    x.send(b"doomed", T0, cookie="c")
    f.run()
    f.break_connection("a", "b")
    receipt = x.take(T0)
    assert isinstance(receipt, Receipt) and receipt.cookie == "c" and not receipt.taken


# ----------------------------------------------------------------- traces


def test_send_and_deliver_traces_name_the_same_message_at_both_ends() -> None:
    f = Fabric()
    push, pull = pushpull(f)
    push.link(f.addr["b"], 2, T0)
    f.run()
    for i in range(3):
        push.send(b"%d" % i, T0)
    f.run()
    while pull.take(T0) is not None:
        pass
    sends = f.trace("send", "a")
    delivers = f.trace("deliver", "b")
    assert [e.msg for e in sends] == [e.msg for e in delivers]
    assert len({e.msg for e in sends}) == 3
    assert all(e.peer == "b" for e in sends) and all(e.peer == "a" for e in delivers)
    assert {e.attrs["link"] for e in sends + delivers} == {f.of("a", LinkUp)[0].link}


@settings(max_examples=150, deadline=None)
@given(
    version=st.sampled_from([1, 1, 1, 2]),
    protocol=st.sampled_from([1, 1, 1, 2]),
    kind=st.sampled_from([2, 2, 2, 1, 6, 0x33, 0x07]),
    length_error=st.sampled_from([0, 0, 0, -1, 1, -13]),
    tags_match=st.booleans(),
    clock_match=st.booleans(),
    payload=st.binary(max_size=40),
)
def test_the_data_fast_path_accepts_exactly_what_the_codec_decodes(
    *,
    version: int,
    protocol: int,
    kind: int,
    length_error: int,
    tags_match: bool,
    clock_match: bool,
    payload: bytes,
) -> None:
    f = Fabric()
    push, pull = pushpull(f)
    push.link(f.addr["b"], 2, T0)
    f.run()
    clock = next(m.clock for s, _, m in f.delivered if s == f.addr["a"] and m.dst_tag)
    src, dst = (1, 2) if tags_match else (1, 3)
    remaining = 12 + len(payload) + length_error
    frame = struct.pack(">HBBIIII", version, protocol, kind, max(remaining, 0), src, dst,
                        clock if clock_match else clock ^ 1) + payload
    pipe = f.pipes[(f.addr["a"], f.addr["b"])]
    pipe.receiver.receive_data(frame, T0)
    # A stream parser sees the first frame the header announces (the rest is the start
    # of the next one); the codec is asked about exactly those bytes.
    first = frame[: 8 + max(remaining, 0)]
    try:
        decoded = exon.decode(first) if len(frame) >= len(first) else None
    except DecodeError:
        decoded = None
    queued = pull.take(T0)
    if queued is not None:
        # Accepted: the codec agrees it is this DATA on this link incarnation.
        assert decoded is not None and decoded.body == DataBody(payload=queued)
        assert (decoded.src_tag, decoded.dst_tag, decoded.clock) == (1, 2, clock)
    elif decoded is not None and isinstance(decoded.body, DataBody):
        assert not (tags_match and clock_match)  # only a stranger's DATA is refused
