"""Links on the original wire (``Transport.EXON``, ``WireMode.ORIGINAL``): gossamer
sockets linked with emulated Java A3M sockets (:mod:`gossamer.testing.a3m_original`),
every node on a real Exon core (:mod:`.exon_fabric`), with and without 10 % datagram
loss. Every message arrives, in order, and no sender ever has more DATA in flight than
the receiver granted."""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, NamedTuple

import pytest

from gossamer.errors import ConfigError
from gossamer.proto.link import LinkNode, LinkSocket, LinkUp, Message
from gossamer.proto.link.config import CONTROL_TAKEN
from gossamer.proto.link.exon_core import ExonCore
from gossamer.proto.link.machine import LinkState
from gossamer.testing.a3m_original import OriginalNode, OSocket
from gossamer.wire import a3m, exon
from gossamer.wire.a3m import A3MMessage, A3MType
from gossamer.wire.exon import ControlBody, SocketMessage

from .exon_fabric import ORIGINAL_EXON, ExonFabric

COUNT = 300
LOSSES = [0.0, 0.1]
#: The tag of each kind of socket, on either node.
TAGS = {"push": "feeder", "pull": "jobs", "req": "client", "rep": "service", "pub": "news",
        "sub": "reader", "router": "hub", "dealer": "worker"}


class Linked(NamedTuple):
    """A gossamer node ``g`` and an emulated original node ``o`` on one fabric, each with
    one socket, linked to the other's."""

    f: ExonFabric
    g: LinkNode
    orig: OriginalNode
    ours: LinkSocket
    theirs: OSocket


def _linked(
    seed: int,
    ours: str,
    theirs: str,
    *,
    by: Literal["g", "o"],
    loss: float = 0.0,
    their_capacity: int = 250,
    subscribe: bytes | None = None,
    **options: object,
) -> Linked:
    """A socket of kind ``ours`` on ``g`` (with ``options``) and one of kind ``theirs`` on
    ``o`` (with ``their_capacity``), tagged as in :data:`TAGS`, the one on node ``by``
    linked to the other; returns once the link is established at its linking end. With
    ``subscribe``, the sub subscribes to it before the link, and this returns once the pub
    holds the subscription too."""
    f = ExonFabric(loss=loss, seed=seed)
    g = f.gossamer_node("g")
    orig = f.original_node("o")
    mine = f.socket("g", ours, TAGS[ours], **options)
    other = orig.socket(theirs, TAGS[theirs], capacity=their_capacity)
    if subscribe is not None:
        if ours == "sub":
            mine.subscribe(subscribe, f.now)
        else:
            other.subscribe(subscribe)
    if by == "g":
        mine.link(f.addr["o"], f.tag("g", TAGS[theirs]), f.now)
    else:
        other.link("g", TAGS[ours])

    def up() -> bool:
        linked = mine.established == 1 if by == "g" else len(other.established()) == 1
        pub_links = mine.links.values() if ours == "pub" else other.links.values()
        return linked and (subscribe is None or any(lk.subs for lk in pub_links))

    f.run(up)
    return Linked(f, g, orig, mine, other)


def _types(fabric: ExonFabric, src: str, dst: str) -> list[int]:
    return [a3m.decode_message(p).kind for s, d, p in fabric.sent if (s, d) == (src, dst)]


def _check_exon(fabric: ExonFabric, loss: float, sender: str) -> None:
    """The sender's DATA arrived out of order (Exon is orderless, so the receiver's
    reordering was exercised), and datagrams were lost exactly when asked."""
    def data(log: list[tuple[str, str, bytes]]) -> list[bytes]:
        return [p for s, _, p in log if s == sender and a3m.decode_message(p).kind == A3MType.DATA]

    reordered = data(fabric.sent) != data(fabric.delivered)
    assert (fabric.lost_datagrams > 0) == (loss > 0)
    assert reordered


def _max_in_flight(fabric: ExonFabric, sender: str, receiver: str) -> int:
    """The most DATA the sender had sent beyond the credits granted back, counted on the
    wire in sending order (FLOWs counted when they were sent, which is generous to the
    sender: so a positive excess is certainly a violation)."""
    data = flows = peak = 0
    for src, dst, payload in fabric.sent:
        msg = a3m.decode_message(payload)
        if (src, dst) == (sender, receiver) and msg.kind == A3MType.DATA:
            data += 1
        elif (src, dst) == (receiver, sender) and msg.kind == A3MType.FLOW:
            flows += int.from_bytes(msg.body, "big", signed=True)
        peak = max(peak, data - flows)
    return peak


@pytest.mark.parametrize("loss", LOSSES)
def test_gossamer_push_to_original_pull(loss: float) -> None:
    f, _, orig, push, pull = _linked(3, "push", "pull", by="g", loss=loss, their_capacity=20)
    assert _types(f, "g", "o")[:2] == [A3MType.LINK, A3MType.LINKREPLY]
    assert _types(f, "o", "g")[0] == A3MType.LINKREPLY
    sent: list[bytes] = []
    got: list[bytes] = []

    def app() -> None:
        while len(sent) < COUNT and push.send(b"job %d" % len(sent), f.now):
            sent.append(b"job %d" % len(sent))
        while (message := pull.receive()) is not None:
            got.append(message)

    f.run(lambda: len(got) == COUNT, app)
    assert got == [b"job %d" % i for i in range(COUNT)]
    assert _max_in_flight(f, "g", "o") <= 20
    _check_exon(f, loss, "g")
    assert orig.malformed == 0


@pytest.mark.parametrize("loss", LOSSES)
def test_original_push_to_gossamer_pull(loss: float) -> None:
    f, g, _, pull, push = _linked(4, "pull", "push", by="o", loss=loss, capacity=10, batch=0.5)
    sent: list[bytes] = []
    got: list[bytes] = []

    def app() -> None:
        while len(sent) < COUNT and push.send(b"m%d" % len(sent)):
            sent.append(b"m%d" % len(sent))
        while (message := pull.take(f.now)) is not None:
            assert isinstance(message, bytes)
            got.append(message)

    f.run(lambda: len(got) == COUNT, app)
    assert got == [b"m%d" % i for i in range(COUNT)]
    assert _max_in_flight(f, "o", "g") <= 10
    _check_exon(f, loss, "o")
    assert g.counters["violations"] == 0 and g.counters["malformed"] == 0
    (up,) = [e for e in f.events["g"] if isinstance(e, LinkUp)]
    assert up.credits == 0  # a PUSH grants nothing


def _ask_in_turn(
    f: ExonFabric,
    send: Callable[[bytes], bool],
    replies: list[bytes],
    app: Callable[[], None],
    count: int = 40,
) -> None:
    """Send ``ask 0``, ``ask 1``, ... one at a time, each once the one before had its
    reply (``app`` serves and collects into ``replies``); every reply must be its request
    upper-cased, in order."""
    for n in range(count):
        assert send(b"ask %d" % n)
        f.run(lambda: len(replies) == n + 1, app)  # noqa: B023 - run is synchronous
    assert replies == [b"ASK %d" % n for n in range(count)]


def _serve(rep: OSocket) -> None:
    while (request := rep.receive()) is not None:
        assert rep.send(request.upper())


@pytest.mark.parametrize("loss", LOSSES)
def test_gossamer_req_to_original_rep(loss: float) -> None:
    f, _, orig, req, rep = _linked(5, "req", "rep", by="g", loss=loss)
    replies: list[bytes] = []

    def app() -> None:
        _serve(rep)
        message = req.take(f.now)
        if message is not None:
            assert isinstance(message, bytes)
            replies.append(message)

    _ask_in_turn(f, lambda data: req.send(data, f.now), replies, app)
    assert orig.malformed == 0


@pytest.mark.parametrize("loss", LOSSES)
def test_original_req_to_gossamer_rep(loss: float) -> None:
    f, _, _, rep, req = _linked(6, "rep", "req", by="o", loss=loss)
    replies: list[bytes] = []

    def app() -> None:
        question = rep.take(f.now)
        if question is not None:
            assert isinstance(question, bytes)
            assert rep.send(question.upper(), f.now)
        reply = req.receive()
        if reply is not None:
            replies.append(reply)

    _ask_in_turn(f, req.send, replies, app)


# -- DEALER and ROUTER with the original's REQ, REP, DEALER and ROUTER ----------------------
# The original's REQ and REP send bare bytes; its ROUTER reads a payload that is not a
# routed message as a bare one, and sends the bare body once no routing id remains.


@pytest.mark.parametrize("loss", LOSSES)
def test_original_req_to_gossamer_router(loss: float) -> None:
    f, g, _, router, req = _linked(11, "router", "req", by="o", loss=loss)
    replies: list[bytes] = []
    envelopes: set[tuple[int, ...]] = set()

    def app() -> None:
        message = router.take_message(f.now)
        if isinstance(message, Message):
            envelopes.add(message.envelope)
            assert router.send(message.data.upper(), f.now, to=message.routing_id,
                               envelope=message.envelope)
        reply = req.receive()
        if reply is not None:
            replies.append(reply)

    _ask_in_turn(f, req.send, replies, app)  # bare, as the REQ expects
    assert envelopes == {()}  # a bare request carries no routing ids
    assert g.counters["malformed"] == 0


@pytest.mark.parametrize("loss", LOSSES)
def test_gossamer_dealer_to_original_rep(loss: float) -> None:
    f, g, orig, dealer, rep = _linked(12, "dealer", "rep", by="g", loss=loss)
    replies: list[bytes] = []
    requests: list[bytes] = []

    def app() -> None:
        while (request := rep.receive()) is not None:
            requests.append(request)
            assert rep.send(request.upper())
        message = dealer.take_message(f.now)
        if isinstance(message, Message):
            assert message.envelope == ()
            replies.append(message.data)

    _ask_in_turn(f, lambda data: dealer.send(data, f.now), replies, app)
    assert requests == [b"ask %d" % n for n in range(40)]  # bare, as the REP expects
    assert orig.malformed == 0 and g.counters["malformed"] == 0


def test_gossamer_req_to_original_router() -> None:
    f, _, orig, req, router = _linked(13, "req", "router", by="g", loss=0.1)
    replies: list[bytes] = []
    seen: list[tuple[int | tuple[str, str], ...]] = []

    def app() -> None:
        while (routed := router.receive()) is not None:
            hops, body = a3m.decode_routed(routed)
            seen.append(hops)
            assert router.send(a3m.encode_routed(hops, body.upper()))
        reply = req.take(f.now)
        if isinstance(reply, bytes):
            replies.append(reply)

    _ask_in_turn(f, lambda data: req.send(data, f.now), replies, app, count=20)
    (link,) = router.established()
    assert set(seen) == {(link.clock,)}  # the ROUTER added only the link's own id
    assert orig.malformed == 0


def test_original_dealer_to_gossamer_router_keeps_the_routing_ids_both_ways() -> None:
    """A broker's DEALER forwards a request with the ids it was given: gossamer's ROUTER
    hands them to its application as the envelope, and they go back on the reply."""
    f, g, _, router, dealer = _linked(14, "router", "dealer", by="o", loss=0.1)
    got: list[bytes] = []

    def app() -> None:
        message = router.take_message(f.now)
        if isinstance(message, Message):
            assert message.envelope == (7, 9)
            assert router.send(message.data.upper(), f.now, to=message.routing_id,
                               envelope=message.envelope)
        while (reply := dealer.receive()) is not None:
            got.append(reply)

    assert dealer.send(a3m.encode_routed([7, 9], b"job 1"))
    f.run(lambda: len(got) == 1, app)
    assert a3m.decode_routed(got[0]) == ((7, 9), b"JOB 1")
    assert g.counters["malformed"] == 0


@pytest.mark.parametrize("loss", LOSSES)
def test_gossamer_pub_to_original_sub(loss: float) -> None:
    f, _, _, pub, sub = _linked(
        7, "pub", "sub", by="o", loss=loss, their_capacity=8, subscribe=b"sport/"
    )
    sent: list[bytes] = []
    got: list[bytes] = []
    wanted = [b"sport/%d" % i for i in range(100)]

    def app() -> None:
        while len(sent) < 200:
            n = len(sent)
            data = b"sport/%d" % (n // 2) if n % 2 == 0 else b"weather/%d" % n
            if not pub.send(data, f.now):
                break
            sent.append(data)
        while (message := sub.receive()) is not None:
            got.append(message)

    f.run(lambda: len(got) == len(wanted), app)
    assert got == wanted
    assert _max_in_flight(f, "g", "o") <= 8
    _check_exon(f, loss, "g")


@pytest.mark.parametrize("loss", LOSSES)
def test_original_pub_to_gossamer_sub(loss: float) -> None:
    f, g, _, sub, pub = _linked(8, "sub", "pub", by="o", loss=loss, capacity=8, subscribe=b"sport/")
    sent: list[bytes] = []
    got: list[bytes] = []

    def app() -> None:
        while len(sent) < 200:
            n = len(sent)
            data = b"sport/%d" % (n // 2) if n % 2 == 0 else b"weather/%d" % n
            if not pub.send(data):
                break
            sent.append(data)
        while (message := sub.take(f.now)) is not None:
            assert isinstance(message, bytes)
            got.append(message)

    f.run(lambda: len(got) == 100, app)
    assert got == [b"sport/%d" % i for i in range(100)]
    assert g.counters["violations"] == 0
    assert _max_in_flight(f, "o", "g") <= 8
    _check_exon(f, loss, "o")


def test_unlink_from_gossamer_delivers_everything_sent() -> None:
    f, _, _, push, pull = _linked(9, "push", "pull", by="g", loss=0.1, their_capacity=50)
    tag = f.tag("g", "jobs")
    for n in range(30):
        assert push.send(b"%d" % n, f.now)
    push.unlink(f.addr["o"], tag, f.now)
    got: list[bytes] = []

    def app() -> None:
        while (message := pull.receive()) is not None:
            got.append(message)

    f.run(lambda: push.link_state(f.addr["o"], tag) is LinkState.IDLE and not pull.links, app)
    assert got == [b"%d" % n for n in range(30)]


def test_link_to_a_missing_original_socket_is_retried_then_given_up() -> None:
    f = ExonFabric(seed=10)
    f.gossamer_node("g")
    f.original_node("o")
    push = f.socket("g", "push", "feeder", retry_limit=2)
    tag = f.tag("g", "nobody")
    push.link(f.addr["o"], tag, f.now)
    f.run(lambda: push.link_state(f.addr["o"], tag) is LinkState.IDLE)
    errors = [a3m.decode_message(p) for s, d, p in f.sent if s == "o"]
    assert errors and all(e.kind == A3MType.ERROR and e.clock == a3m.MISSING_CLOCK
                          for e in errors)
    assert _types(f, "g", "o").count(A3MType.LINK) == 3  # the first and two retries


def test_what_the_original_wire_cannot_say_is_refused_or_counted() -> None:
    f = ExonFabric(seed=11)
    g = f.gossamer_node("g")
    with pytest.raises(ConfigError, match="no receipts"):
        f.socket("g", "push", "feeder", receipts=True)
    with pytest.raises(ConfigError, match="custom link"):
        f.socket("g", "pull", "jobs", custom={"auth": b"x"})
    sub = f.socket("g", "sub", "reader")
    assert g.a3m is not None
    link = SocketMessage(src_tag=sub.tag, dst_tag=7, clock=1,
                         body=ControlBody(kind=CONTROL_TAKEN, payload=bytes(4)))
    assert g.a3m.frame_out(g.peer(f.addr["g"]), exon.encode(link), 0.0) is None
    assert g.counters["unsayable"] == 1


def test_early_data_beyond_the_credits_is_refused() -> None:
    f, g, _, pull, push = _linked(12, "pull", "push", by="o", capacity=10)
    (link,) = push.established()
    assert g.a3m is not None
    peer = g.peer(f.addr["o"])

    def data(order: int) -> bytes:
        return a3m.encode_message(A3MMessage(src_tag="feeder", dst_tag="jobs", kind=A3MType.DATA,
                                             clock=link.clock,
                                             body=a3m.join_order(order, b"x")))

    assert g.a3m.frames_in(peer, data(10), f.now) == []  # beyond 10 credits: refused
    assert g.counters["malformed"] == 1
    assert g.a3m.frames_in(peer, data(3), f.now) == []  # early: held
    assert g.a3m.frames_in(peer, data(3), f.now) == []  # twice: refused
    assert g.counters["malformed"] == 2
    assert len(g.a3m.frames_in(peer, data(0), f.now)) == 1
    assert pull.take(f.now) is None  # frames_in only translates: nothing reached the node


def test_a_java_sender_whose_closing_reqslots_was_lost_is_still_heard() -> None:
    """The Java Exon numbers a new send record's TOKENs from slot 0. When the REQSLOTS
    closing its previous record to us was lost, we still hold that record (slot 0
    used); its new record's REQSLOTS (``l == s``) names its clock, which its own receive
    records advanced past our record's end (it received from us meanwhile). That
    REQSLOTS can only come from a new record: we start a fresh one, or its first
    messages would be acknowledged as duplicates and never delivered (seen against the
    Java A3M: 20 DATA of a PUSH lost, its credits with them)."""
    from gossamer.wire.exon_transport import ReqSlots

    from ..test_exon_core import Net

    net = Net(seed=1)
    java = ExonCore("j", ORIGINAL_EXON)
    ours = ExonCore("g")
    net.add(java, 1)
    net.add(ours, 2)
    java.register("g", ("10.0.0.1", 2))
    ours.register("j", ("10.0.0.1", 1))
    net.drop_if = lambda d: d.src == "j" and isinstance(d.body, ReqSlots) and d.body.n == 0
    net.send(java, "g", b"m1")
    net.run(until=3.0)
    assert net.lost >= 1  # its record closed; we did not hear it
    net.send(ours, "j", b"reply")  # the Java node opens a receive record: its clock moves
    net.run(until=6.0)
    net.send(java, "g", b"m2")
    net.run(until=9.0)
    assert [m.data for m in net.delivered["g"]] == [b"m1", b"m2"]
    assert ours.counters["records_renewed"] == 1


def test_subscriptions_and_unsubscriptions_reach_an_original_pub() -> None:
    f, _, _, sub, pub = _linked(13, "sub", "pub", by="o", loss=0.1, capacity=8, subscribe=b"sport/")
    sub.subscribe(b"news/", f.now)
    (link,) = pub.links.values()
    f.run(lambda: link.subs == {b"sport/", b"news/"})
    assert pub.send(b"news/1") and pub.send(b"weather/1") and pub.send(b"sport/1")
    got: list[bytes] = []

    def app() -> None:
        while (message := sub.take(f.now)) is not None:
            assert isinstance(message, bytes)
            got.append(message)

    f.run(lambda: len(got) == 2, app)
    sub.unsubscribe(b"news/", f.now)
    f.run(lambda: link.subs == {b"sport/"}, app)
    assert pub.send(b"news/2") and pub.send(b"sport/2")
    f.run(lambda: len(got) == 3, app)
    assert got == [b"news/1", b"sport/1", b"sport/2"]
    kinds = [a3m.decode_message(p).kind for s, d, p in f.sent if s == "g"]
    assert kinds.count(a3m.SUBSCRIBE) == 2 and kinds.count(a3m.UNSUBSCRIBE) == 1


def test_a_closing_reqslots_overtaken_by_the_next_record_is_ignored() -> None:
    """Exon datagrams may arrive out of order: the REQSLOTS closing a Java sender's
    record can arrive after the REQSLOTS of its next record. Applied to the new record
    it would forget the slots the new record numbers from 0, and its first messages
    would be acknowledged as duplicates and lost."""
    from gossamer.wire import exon_transport as wire
    from gossamer.wire.exon_transport import ReqSlots

    java, ours = ExonCore("j", ORIGINAL_EXON), ExonCore("g")
    java.register("g", ("10.0.0.1", 2))
    ours.register("j", ("10.0.0.1", 1))
    held: list[bytes] = []
    now = 0.0

    def move(hold_close: bool) -> None:
        for _ in range(50):
            out = [(d, java, ours, ("10.0.0.1", 1)) for d, _ in java.datagrams_to_send()]
            out += [(d, ours, java, ("10.0.0.1", 2)) for d, _ in ours.datagrams_to_send()]
            if not out:
                return
            for data, _, dst, src in out:
                body = wire.decode(data).body
                if hold_close and isinstance(body, ReqSlots) and body.n == 0 and src[1] == 1:
                    held.append(data)
                    continue
                dst.receive_datagram(data, src, now)

    java.send("g", b"m1", now)
    move(hold_close=True)
    now = 1.0
    java.handle_timer(now)  # the record, idle, closes: that REQSLOTS is held back
    move(hold_close=True)
    assert held
    java.send("g", b"m2", now)
    move(hold_close=True)  # the new record's REQSLOTS and TOKEN go first
    for data in held:
        ours.receive_datagram(data, ("10.0.0.1", 1), now)
    java.send("g", b"m3", now)
    move(hold_close=False)
    assert [m.data for m in ours.events_received()] == [b"m1", b"m2", b"m3"]
