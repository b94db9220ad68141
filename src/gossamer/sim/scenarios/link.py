"""Scenario ``link``: Exon/A3M sockets with credit flow control over a faulty network.

Node ``n0`` is the hub, nodes ``n1..nK`` are the K senders (``senders``, default all
other nodes), and every link starts at the sender:

- ``pattern=push``: each sender PUSHes ``messages`` messages to the PULL at n0;
- ``pattern=reqrep``: each sender is a REQ doing ``messages`` round trips to the REP
  at n0;
- ``pattern=pubsub``: n0 PUBlishes ``messages`` messages; each sender SUBscribes,
  odd ones to the topic ``a`` only, even ones to everything. Publishing starts once
  every subscriber is linked (plus ``settle`` seconds for subscriptions to arrive:
  PUB/SUB has no handshake for subscriptions, so early messages would match nobody).

``transport=udp`` runs the links over the reliable UDP channel (exactly once under
``--drop``/``--dup``/``--reorder``/``--delay``); ``transport=tcp`` over the
simulator's reliable streams (``gossamer.sim.streams``), the TCP transport's node under
the multi-connection contract (``LinkConnections``): the datagram faults do not touch
streams, a crash resets the node's connections as its operating system would, a
partition stalls them. ``consume`` slows the receivers down
(messages taken per second; 0: as fast as they arrive): a slow consumer is what the
memory bound ``links x capacity x max message`` is about, and the summary compares the
largest queue seen with that bound. Crashes, restarts and partitions take links
down with a reason; applications link again after ``relink`` seconds while they
still have work.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from gossamer._types import Address, Datagram
from gossamer.errors import ConfigError, LinkError
from gossamer.proto.link import (
    LinkConfig,
    LinkDown,
    LinkNode,
    LinkSocket,
    LinkUp,
    Readable,
    Receipt,
    RequestFailed,
    SocketOptions,
    Transport,
    Writable,
)
from gossamer.proto.link.channel import ChannelConfig
from gossamer.proto.link.connections import LinkConnections
from gossamer.sim.engine import NodeContext, Simulator
from gossamer.sim.scenarios import (
    Param,
    Scenario,
    Summarize,
    fault_params,
    non_negative_float,
    param_table,
    positive_int,
    register,
    schedule_faults,
    subnets_param,
)
from gossamer.sim.streams import StreamNetwork

if TYPE_CHECKING:
    from gossamer.trace.sink import Tracer

__all__ = ["DatagramLinkApp", "LinkApp", "StreamLinkApp"]

PORT = 7100
TAG = 1
PATTERNS = ("push", "reqrep", "pubsub")


def _choice(options: tuple[str, ...]) -> Any:
    def parse(text: str) -> str:
        if text not in options:
            raise ValueError(f"{text!r} is not one of {', '.join(options)}")
        return text

    return parse


def _fraction(text: str) -> float:
    value = float(text)
    if not 0.0 < value <= 1.0:
        raise ValueError(f"{text} is not in (0, 1]")
    return value


class LinkApp:
    """A simulated application around a :class:`LinkNode`. It links, sends as credits
    allow, takes at its consume rate and records what it delivered, reacting to the
    node's events (read from ``source``: the node, or the ``LinkConnections`` around it).
    :class:`DatagramLinkApp` and :class:`StreamLinkApp` are the cores the simulator
    runs."""

    def __init__(
        self,
        node: LinkNode,
        *,
        role: str,
        pattern: str,
        hub: Address,
        messages: int,
        size: int,
        consume: float,
        relink: float,
        settle: float,
        subscribers: int,
        topic: bytes,
        now: float,
        tracer: Tracer,
        incarnation: int = 1,
    ) -> None:
        self.node = node
        self.role = role
        self.pattern = pattern
        self.hub = hub
        self.messages = messages
        self.size = size
        self.consume = consume
        self.relink = relink
        self.settle = settle
        self.subscribers = subscribers
        self.topic = topic
        self.trace = tracer
        # Payloads name the sender's life: a restarted sender counts from 0 again.
        self.origin = f"{node.name}#{incarnation}"
        self.sock: LinkSocket = node.sockets[TAG]
        self.sent = 0
        self.delivered: Counter[bytes] = Counter()
        self.replies = 0
        self.events: list[object] = []
        self.link_downs: Counter[str] = Counter()
        self.link_ups = 0
        self._relink_at: float | None = None
        self._take_at: float | None = None
        self._publish_at: float | None = None
        self._req_outstanding = False
        self._pending_reply: bytes | None = None
        self.answered = 0
        self.unanswerable = 0
        if role == "sender":
            self._relink_at = now  # link at once
        if role == "sender" and pattern == "pubsub":
            self.sock.subscribe(topic, now)

    @property
    def source(self) -> LinkNode | LinkConnections:
        """Where the node's events are read."""
        return self.node

    # -- the core's timer and events ---------------------------------------------------------

    def handle_timer(self, now: float) -> None:
        self.node.handle_timer(now)
        if self._relink_at is not None and now >= self._relink_at:
            self._relink_at = None
            if self._has_work() and self.sock.link_state(self.hub, TAG).value == "idle":
                self.sock.link(self.hub, TAG, now)
        if self._take_at is not None and now >= self._take_at:
            self._take_at = None
            self._take(now, limit=1)
            self._schedule_take(now)
        if self._publish_at is not None and now >= self._publish_at:
            self._publish_at = None
            self._produce(now)
        self._react(now)

    def events_received(self) -> list[object]:
        out, self.events = self.events, []
        return out

    def next_deadline(self) -> float | None:
        times = [t for t in (self.node.next_deadline(), self._relink_at, self._take_at,
                             self._publish_at) if t is not None]
        return min(times, default=None)

    # -- the application -------------------------------------------------------------------

    def _has_work(self) -> bool:
        if self.pattern == "pubsub":
            return True  # a subscriber stays subscribed
        return self.sent < self.messages or self._req_outstanding

    def _react(self, now: float) -> None:
        source = self.source
        for _ in range(1000):
            events = source.events_received()
            if not events:
                break
            for event in events:
                self._on(event, now)
            self.node.flush(now)
        self.node.flush(now)

    def _on(self, event: object, now: float) -> None:
        if isinstance(event, LinkUp):
            self.link_ups += 1
            self.events.append(event)
            if self.role == "hub" and self.pattern == "pubsub":
                if self.sock.established >= self.subscribers and self._publish_at is None:
                    self._publish_at = now + self.settle
            else:
                self._produce(now)
        elif isinstance(event, LinkDown):
            self.link_downs[event.reason] += 1
            self.events.append(event)
            if self.role == "sender" and self._has_work():
                self._relink_at = now + self.relink
        elif isinstance(event, RequestFailed):
            self._req_outstanding = False
            self.events.append(event)
        elif isinstance(event, Writable):
            self._produce(now)
        elif isinstance(event, Readable):
            if self.consume > 0:
                self._schedule_take(now)
            else:
                self._take(now, limit=None)

    def _payload(self, index: int) -> bytes:
        head = self.topic + f"|{self.origin}|{index}|".encode()
        return head.ljust(self.size, b".")

    def _produce(self, now: float) -> None:
        sock = self.sock
        if self.pattern == "push" and self.role == "sender":
            while self.sent < self.messages and sock.send(self._payload(self.sent), now):
                self.sent += 1
        elif self.pattern == "reqrep" and self.role == "sender":
            if not self._req_outstanding and self.sent < self.messages and sock.send(
                self._payload(self.sent), now
            ):
                self.sent += 1
                self._req_outstanding = True
        elif self.pattern == "pubsub" and self.role == "hub" and self._publish_at is None:
            if sock.established < self.subscribers:
                return
            while self.sent < self.messages:
                topic = b"a" if self.sent % 2 == 0 else b"b"
                head = topic + f"|{self.origin}|{self.sent}|".encode()
                if not sock.send(head.ljust(self.size, b"."), now):
                    break
                self.sent += 1
        elif self.pattern == "reqrep" and self.role == "hub":
            self._serve(now)

    def _schedule_take(self, now: float) -> None:
        if self._take_at is None and self.sock.readable:
            self._take_at = now + 1.0 / self.consume

    def _take(self, now: float, limit: int | None) -> None:
        if self.pattern == "reqrep" and self.role == "hub":
            self._serve(now)
            return
        taken = 0
        while limit is None or taken < limit:
            item = self.sock.take(now)
            if item is None:
                return
            taken += 1
            if isinstance(item, Receipt):
                continue
            self.delivered[item] += 1
            if self.pattern == "reqrep":
                self.replies += 1
                self._req_outstanding = False
                self._produce(now)

    def _serve(self, now: float) -> None:
        """REP: answer requests in order; a reply that finds no credit waits for the
        requester's FLOW (a Writable event) before the next request is taken."""
        sock = self.sock
        while True:
            pending = self._pending_reply
            if pending is not None:
                try:
                    if not sock.send(pending, now):
                        return
                    self.answered += 1
                except LinkError:
                    self.unanswerable += 1  # the requester's link is gone
                self._pending_reply = None
            item = sock.take(now)
            if item is None:
                return
            if isinstance(item, Receipt):
                continue
            self.delivered[item] += 1
            self._pending_reply = item


class DatagramLinkApp(LinkApp):
    """The application on a UDP-transport node: a ``DatagramCore``."""

    def receive_datagram(self, data: bytes, addr: Address, now: float) -> None:
        self.node.receive_datagram(data, addr, now)
        self._react(now)

    def datagrams_to_send(self) -> list[Datagram]:
        return self.node.datagrams_to_send()


class StreamLinkApp(LinkApp):
    """The application on a TCP-transport node: a ``ConnectionsCore`` (the node's
    :class:`LinkConnections`) for ``StreamNetwork``."""

    def __init__(self, node: LinkNode, **app: Any) -> None:
        self.connections = LinkConnections(node)
        super().__init__(node, **app)

    @property
    def source(self) -> LinkConnections:
        return self.connections

    def connection_made(self, conn: int, peer: Address, now: float) -> None:
        self.connections.connection_made(conn, peer, now)
        self._react(now)

    def receive_data(self, conn: int, data: bytes, now: float) -> None:
        self.connections.receive_data(conn, data, now)
        self._react(now)

    def connection_lost(self, conn: int, now: float) -> None:
        self.connections.connection_lost(conn, now)
        self._react(now)

    def connections_to_open(self) -> list[tuple[int, Address]]:
        return self.connections.connections_to_open()

    def data_to_send(self) -> list[tuple[int, bytes]]:
        return self.connections.data_to_send()

    def connections_to_close(self) -> list[int]:
        return self.connections.connections_to_close()


def _setup(sim: Simulator, nodes: int, params: Mapping[str, Any]) -> Summarize:
    pattern = params["pattern"]
    senders = params["senders"] if params["senders"] is not None else nodes - 1
    if senders < 1 or senders + 1 > nodes:
        raise ConfigError(
            f"the link scenario needs senders + 1 <= nodes (senders={senders}, nodes={nodes})"
        )
    tcp = params["transport"] == "tcp"
    streams = StreamNetwork(sim) if tcp else None
    subnets = sim.network.subnets
    for i in range(senders + 1):
        sim.network.add_host(f"h{i}", subnet=i % subnets)
    hosts = list(sim.network.hosts.values())
    ids = [f"n{i}" for i in range(senders + 1)]
    names = {(hosts[i].ip, PORT): ids[i] for i in range(senders + 1)}
    hub = (hosts[0].ip, PORT)
    size = params["size"]
    capacity = params["capacity"]
    kinds = {"push": ("pull", "push"), "reqrep": ("rep", "req"), "pubsub": ("pub", "sub")}
    hub_kind, sender_kind = kinds[pattern]
    channel = ChannelConfig(max_datagram=max(1400, size + 200))
    apps: dict[str, LinkApp] = {}

    def factory_for(i: int) -> Any:
        def factory(ctx: NodeContext) -> LinkApp:
            node = LinkNode(
                LinkConfig(address=(ctx.host.ip, ctx.port), node_id=ctx.node_id,
                           transport=Transport.TCP if tcp else Transport.UDP,
                           channel=channel, max_message=size,
                           names=names),
                tracer=ctx.tracer,
                rng=ctx.rng,
            )
            kind = hub_kind if i == 0 else sender_kind
            node.open_socket(kind, TAG, SocketOptions(capacity=capacity, batch=params["batch"]))
            app = (StreamLinkApp if tcp else DatagramLinkApp)(
                node,
                role="hub" if i == 0 else "sender",
                pattern=pattern,
                hub=hub,
                messages=params["messages"],
                size=size,
                # The receivers consume at the given rate: the hub of push, the
                # subscribers of pubsub (a REP answers as fast as it can).
                consume=params["consume"] if (pattern == "push") == (i == 0)
                and pattern != "reqrep" else 0.0,
                relink=params["relink"],
                settle=params["settle"],
                subscribers=senders,
                topic=b"a" if i % 2 else b"",
                now=ctx.now,
                tracer=ctx.tracer,
                incarnation=ctx.incarnation,
            )
            apps[ctx.node_id] = app
            return app

        return factory

    for i in range(senders + 1):
        if streams is not None:
            streams.add_node(ids[i], hosts[i], PORT, factory_for(i))
        else:
            sim.add_node(ids[i], hosts[i], PORT, factory_for(i))
    # Over TCP a crash also resets the node's connections, as its operating system would.
    schedule_faults(sim, params, crash=None if streams is None else streams.crash)

    def summarize() -> dict[str, Any]:
        live = {n: apps[n] for n in ids if sim.nodes[n].alive and n in apps}
        hub_app = live.get("n0")
        duplicates = sum(c - 1 for a in live.values() for c in a.delivered.values() if c > 1)
        sent = sum(a.sent for a in live.values())
        downs: Counter[str] = Counter()
        for app in live.values():
            downs.update(app.link_downs)
        result: dict[str, Any] = {
            "pattern": pattern,
            "transport": params["transport"],
            "senders": senders,
            "messages_sent": sent,
            "duplicates": duplicates,
            "link_ups": sum(a.link_ups for a in live.values()),
            "link_downs": dict(sorted(downs.items())),
            "retransmissions": sum(
                ch.counters.retransmissions
                for a in live.values()
                for addr in a.node.peers()
                if (ch := a.node.channel(addr)) is not None
            ),
            "memory_bound_bytes": senders * capacity * size,
        }
        if pattern == "push" and hub_app is not None:
            result["delivered"] = sum(hub_app.delivered.values())
            result["distinct_delivered"] = len(hub_app.delivered)
            result["peak_queued_bytes"] = hub_app.sock.statistics().peak_queued_bytes
        elif pattern == "reqrep":
            result["delivered"] = sum(a.replies for n, a in live.items() if n != "n0")
            result["requests_answered"] = hub_app.answered if hub_app is not None else 0
            if hub_app is not None:
                result["peak_queued_bytes"] = hub_app.sock.statistics().peak_queued_bytes
        else:
            subs = [a for n, a in live.items() if n != "n0"]
            published = hub_app.sent if hub_app is not None else 0
            expected = sum(published if not a.topic else (published + 1) // 2 for a in subs)
            result["published"] = published
            result["expected_deliveries"] = expected
            result["delivered"] = sum(sum(a.delivered.values()) for a in subs)
            result["peak_queued_bytes"] = max(
                (a.sock.statistics().peak_queued_bytes for a in subs), default=0
            )
            result["memory_bound_bytes"] = capacity * size  # one link per subscriber
        return result

    return summarize


SCENARIO = register(
    Scenario(
        name="link",
        description="Exon/A3M sockets: push/pull, req/rep or pub/sub with credits, over "
        "reliable UDP or the simulator's TCP streams",
        default_duration=30.0,
        params=(
            *param_table(("pattern", _choice(PATTERNS), "push", "push | reqrep | pubsub")),
            Param(name="senders", parse=positive_int, default=None, shown="nodes-1",
                  help="sending nodes n1..nK (n0 is the hub)"),
            *param_table(
                ("messages", positive_int, 100, "messages per sender (pubsub: published by n0)"),
                ("transport", _choice(("udp", "tcp")), "udp",
                 "udp (reliable channel) | tcp (the simulator's streams)"),
                ("capacity", positive_int, 20, "credits each receiver grants per link"),
                ("batch", _fraction, 0.25, "fraction of the capacity returned per FLOW"),
                ("size", positive_int, 100, "message size in bytes"),
                ("consume", non_negative_float, 0.0,
                 "messages a receiver takes per second (0: as they come)"),
                ("relink", non_negative_float, 0.5,
                 "seconds before a sender links again after its link went down"),
                ("settle", non_negative_float, 0.2,
                 "pubsub: seconds between the last subscriber linking and publishing"),
            ),
            subnets_param(),
            *fault_params(),
        ),
        setup=_setup,
    )
)
