"""The sans-I/O link node: the registry of sockets and peers, and the driver of each
link's state machine, on one address.

A :class:`LinkNode` is one middleware instance (one address) holding any number of
sockets (:mod:`~.socket`), each identified by a 32-bit tag (notes "Extended Header"). A
socket links with remote sockets (peer address + tag) through the LINK/LINKACK handshake
of :mod:`~.machine`, then exchanges DATA under the credit flow control of
:mod:`~.credit`, following its pattern (:mod:`~.patterns`).

Transports. The node speaks Exon frames (:mod:`gossamer.wire.exon`, whose
:class:`~gossamer.wire.exon.FrameScanner` cuts every incoming stream) over one of:

- ``UDP`` (:mod:`~.udp`): the node is a ``DatagramCore``; frames ride in a reliable
  channel (:mod:`~.channel`) per peer, so a link delivers each message exactly once per
  incarnation under loss, duplication and reordering;
- ``TCP`` (:mod:`~.tcp`): byte streams owned by a driver; each connection runs a
  :class:`~.tcp.StreamEndpoint` (a ``StreamCore``) bound to the node. The dialing side
  first sends a HELLO carrying its listening address (node-level, see below), so both
  ends name a peer by the address it listens on. :mod:`~.connections` puts such a node
  under the multi-connection contract (``LinkConnections``), as the simulator's
  streams drive it.

Application interface. Local requests are methods of :class:`~.socket.LinkSocket`
taking ``now``; they never block: a send that finds no credit returns ``False`` and the
driver waits for a :class:`~.events.Writable` event; ``take()`` returns ``None`` when
nothing is queued and the driver waits for :class:`~.events.Readable`. Output produced
by local requests is batched: call :meth:`LinkNode.flush` (drivers do once per loop
iteration) or let :meth:`LinkNode.next_deadline` (which is "now" while output waits)
bring the driver back.

Trace events (``layer=link``, conventions of ``gossamer.analysis.checks.link``):
``link_up`` (``peer``, ``attrs.link``, ``attrs.credits`` = initial send credits),
``link_down`` (``attrs.reason``), ``send`` and ``deliver`` of each DATA (``msg`` =
``<sender>/<tag>#<clock>/<n>``, the same at both ends; ``deliver`` when the application
*takes* it), ``credit`` when a FLOW arrives (``attrs.amount``), and ``drop`` for
anything discarded (stale incarnation, malformed, unroutable, credit violation; with
``attrs.reason``) so that nothing is dropped silently. ``send``/``deliver`` may be
switched off (``LinkConfig.trace_data``) where per-message tracing is too costly.

Node-level messages. The notes reserve middleware protocol ``0x02`` ("nodes") for them,
but the wire codec rejects it, so the one node message gossamer needs, HELLO, is a
custom control frame (type ``0x40``) between tag 0 and tag 0; tag 0 is therefore
reserved and no socket may use it. See ``docs/links.md``.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from gossamer._types import Address, Datagram
from gossamer.errors import ConfigError, LocalProtocolError
from gossamer.proto.link import machine
from gossamer.proto.link.a3m import A3MFrames
from gossamer.proto.link.channel import Channel
from gossamer.proto.link.config import (
    CONTROL_SUBSCRIBE,
    CONTROL_TAKEN,
    CONTROL_UNSUBSCRIBE,
    LAYER,
    MAX_TAG,
    LinkConfig,
    SocketOptions,
    Transport,
    check_tag,
)
from gossamer.proto.link.credit import InFlow
from gossamer.proto.link.events import (
    Event,
    LinkDown,
    LinkUp,
    Readable,
    Receipt,
    RequestFailed,
    Writable,
)
from gossamer.proto.link.exon_core import ExonCore
from gossamer.proto.link.exon_transport import ExonTransport
from gossamer.proto.link.machine import Action, LinkInput, LinkState
from gossamer.proto.link.patterns import ENVELOPE_ROOM, decide, pattern_for
from gossamer.proto.link.records import Context, Link, Peer
from gossamer.proto.link.socket import LinkSocket
from gossamer.proto.link.tcp import StreamEndpoint, TcpTransport
from gossamer.proto.link.transport import LinkTransport
from gossamer.proto.link.udp import UdpTransport
from gossamer.trace.sink import Tracer
from gossamer.wire import exon
from gossamer.wire.a3m import A3MLimits
from gossamer.wire.exon import (
    DATA_HEADER,
    EXTENDED_HEADER_SIZE,
    NO_CLOCK,
    SOCKET_HEADER,
    VERSION,
    ControlBody,
    DataBody,
    DataRun,
    ErrorBody,
    ErrorCode,
    FlowBody,
    LinkAckBody,
    LinkBody,
    LinkDecision,
    LinkMetadata,
    MessageType,
    Protocol,
    SocketMessage,
    UnlinkBody,
)
from gossamer.wire.mode import WireMode

if TYPE_CHECKING:
    from random import Random

__all__ = ["LinkNode"]

_U32 = struct.Struct(">I")
_PACK_DATA_HEADER = DATA_HEADER.pack
_SOCKETS, _DATA = int(Protocol.SOCKETS), int(MessageType.DATA)

#: Internal inputs queued by actions, and the state they are meant for.
_FOLLOWUP_STATE = {
    LinkInput.DRAINED: LinkState.DRAINING,
    LinkInput.GIVE_UP: LinkState.RETRY_WAIT,
    LinkInput.RETRY_TIMER: LinkState.RETRY_WAIT,
}

_CANCELLING = frozenset({LinkState.CANCEL_WAIT, LinkState.CANCEL_DECIDED})
_ESTABLISHED = LinkState.ESTABLISHED


class LinkNode:
    """One middleware node (one address): sockets, peers, links. See the module doc.

    The driver's interface is the ``DatagramCore`` (UDP, simulated streams) or the
    stream endpoints (TCP) with the methods that follow them; sockets, endpoints and
    transports use the node through the methods under "for sockets and transports",
    as :mod:`~.host` describes them (``SocketHost``, ``TransportHost``).
    """

    def __init__(self, config: LinkConfig, *, tracer: Tracer, rng: Random) -> None:
        self.config = config
        self.address = config.address
        self.name = config.name
        self._trace_sink = tracer
        self._rng = rng
        #: Whether ``send`` and ``deliver`` of each DATA are traced.
        self.trace_data = config.trace_data
        # Request-reply payloads carry an envelope in front of the application's bytes.
        self.limits = exon.ExonLimits(
            max_frame=config.message_limit + ENVELOPE_ROOM + exon.HEADER_SIZE
        )
        self.max_message = config.message_limit
        self.sockets: dict[int, LinkSocket] = {}
        #: Every remote address met, in the order met.
        self.records: dict[Address, Peer] = {}
        #: Peers with output waiting for the transport, in the order it was queued.
        self.dirty: dict[Address, Peer] = {}
        self._events: list[Event] = []
        self._readable: dict[int, None] = {}
        self._writable: dict[int, None] = {}
        self._retrying: dict[int, Link] = {}
        self._followups: list[tuple[Link, LinkInput, Context]] = []
        self._in_input = False
        self._now = 0.0
        self._udp: UdpTransport | None = None
        self._tcp: TcpTransport | None = None
        #: Exon: the transport (peers' node ids, the Exon core), and on the original
        #: wire the translation of frames into A3M's messages.
        self.exon: ExonTransport | None = None
        self.a3m: A3MFrames | None = None
        self.transport: LinkTransport
        if config.transport is Transport.TCP:
            self.transport = self._tcp = TcpTransport(self)
        elif config.transport is Transport.EXON:
            assert config.node_id is not None  # LinkConfig checks it
            if config.wire is WireMode.ORIGINAL:
                self.a3m = A3MFrames(self, A3MLimits())
            self.transport = self.exon = ExonTransport(
                self, ExonCore(config.node_id, config.exon), self.a3m
            )
        else:
            self.transport = self._udp = UdpTransport(self, rng)
        # Bound once: every DATA goes through it.
        self._send_data_out = self.transport.send_data
        #: A socket may write DATA straight into the peer's output (TCP, no data traces)
        #: instead of calling :meth:`send_data`: its hot path.
        self.direct_data = self._tcp is not None and not self.trace_data
        #: Output that should not wait for the end of the loop iteration: credits (a FLOW)
        #: or a large batch of DATA. Drivers check it after local requests, flush, and
        #: clear it; batching all else to one write per iteration.
        self.urgent = False
        #: TCP: called with no arguments after each piece of stream input, so that the
        #: driver flushes the other connections and re-arms the node's timer (one
        #: connection's input may queue output for another, or schedule a retry).
        self.wakeup: Callable[[], None] | None = None
        #: Counters of the node (not per socket).
        self.counters: dict[str, int] = {
            "frames_in": 0,
            "frames_out": 0,
            "malformed": 0,
            "stale": 0,
            "not_found_sent": 0,
            "not_linked_sent": 0,
            "ignored": 0,
            "violations": 0,
            "channel_resets": 0,
        }

    # -- sockets -------------------------------------------------------------------

    def open_socket(
        self, kind: int | str, tag: int, options: SocketOptions | None = None
    ) -> LinkSocket:
        """A new socket of type ``kind`` (number or name) with ``tag`` on this node."""
        check_tag(tag)
        if tag in self.sockets:
            raise ConfigError(f"tag {tag} is already used on this node", tag=tag)
        pattern = pattern_for(kind)
        options = options or SocketOptions()
        if self.a3m is not None and (options.receipts or options.custom):
            raise ConfigError("the original wire (A3M) has no receipts and no custom link "
                              "metadata", tag=tag)
        # A random first clock: a socket re-created with the same tag (a restart) does
        # not reuse its predecessor's clock ids, so the predecessor's late messages are
        # recognised as stale (the Java code restarted at 0: reference (c) bug 5).
        sock = LinkSocket(self, tag, pattern, options, self._rng.getrandbits(32))
        self.sockets[tag] = sock
        return sock

    def socket(self, tag: int) -> LinkSocket:
        try:
            return self.sockets[tag]
        except KeyError:
            raise LocalProtocolError(f"no socket with tag {tag}", tag=tag) from None

    def remove_socket(self, tag: int, now: float) -> None:
        """Remove a socket at once; links still open go down (``socket_closed``).

        Each peer that knows the socket is told with the error it would get on its next
        message anyway, "socket not found" from the missing socket, so that it closes
        its end now (a PULL whose PUSH vanished would otherwise wait forever)."""
        sock = self.sockets.get(tag)
        if sock is None:
            return
        sock.closing = True
        for link in list(sock.links.values()):
            if link.peer_clock is not None:
                self._send(link.peer, SocketMessage(
                    src_tag=tag, dst_tag=link.peer_tag, clock=NO_CLOCK,
                    body=ErrorBody(code=ErrorCode.SOCKET_NOT_FOUND, dest_clock=link.peer_clock),
                ))
            self._close(link, "socket_closed", now)
        sock.closed = True
        self.sockets.pop(tag, None)

    # -- the driver's interface ------------------------------------------------------

    def receive_datagram(self, data: bytes, addr: Address, now: float) -> None:
        """UDP and Exon: one datagram from ``addr``."""
        self._now = now
        if self.exon is not None:
            self.exon.receive_datagram(data, addr, now)
            return
        self._datagrams().receive_datagram(data, addr, now)

    def datagrams_to_send(self) -> list[Datagram]:
        return self.transport.datagrams_to_send()

    def handle_timer(self, now: float) -> None:
        self._now = now
        for link in [link for link in self._retrying.values() if link.retry_at is not None
                     and link.retry_at <= now]:
            link.retry_at = None
            del self._retrying[id(link)]
            self.input(link, LinkInput.RETRY_TIMER, Context(), now)
        self.transport.handle_timer(now)

    def flush(self, now: float) -> None:
        """Put the output of local requests on its way (drivers call this once per
        loop iteration; the simulator's deadline of "now" does the same)."""
        self._now = now
        self.transport.flush(now)

    def next_deadline(self) -> float | None:
        best: float | None = None
        for link in self._retrying.values():
            if link.retry_at is not None and (best is None or link.retry_at < best):
                best = link.retry_at
        return self.transport.next_deadline(best, self._now)

    def events_received(self) -> list[Event]:
        for tag in self._readable:
            self._events.append(Readable(tag=tag))
        for tag in self._writable:
            self._events.append(Writable(tag=tag))
        self._readable.clear()
        self._writable.clear()
        out, self._events = self._events, []
        return out

    def stream_endpoint(self, peer: Address | None = None) -> StreamEndpoint:
        """TCP: a ``StreamCore`` for one new connection: ``peer`` is the address we
        dialed (we then say HELLO first), ``None`` for an accepted connection (the
        peer's HELLO names it)."""
        if self._tcp is None:
            raise LocalProtocolError("stream endpoints need the TCP transport")
        return self._tcp.endpoint(peer)

    def dirty_endpoints(self) -> list[StreamEndpoint]:
        """TCP: the sending endpoints that have bytes waiting (drivers flush them)."""
        return [] if self._tcp is None else self._tcp.dirty_endpoints()

    def _datagrams(self) -> UdpTransport:
        if self._udp is None:
            raise LocalProtocolError("datagrams need the UDP transport")
        return self._udp

    # -- for sockets and transports ------------------------------------------------------

    def peer(self, address: Address) -> Peer:
        """The record of ``address``, made when first met."""
        peer = self.records.get(address)
        if peer is None:
            peer = Peer(address, self.config.peer_name(address), self.limits)
            self.records[address] = peer
        return peer

    def pattern_of(self, tag: int) -> str | None:
        """The pattern name of the socket ``tag`` (``None``: no such socket)."""
        sock = self.sockets.get(tag)
        return None if sock is None else sock.pattern.name

    def pattern_capacity(self, tag: int) -> int:
        """The capacity of the socket ``tag`` (0: no such socket)."""
        sock = self.sockets.get(tag)
        return 0 if sock is None else sock.capacity

    def post(self, event: Event) -> None:
        """Queue ``event`` for the driver (``events_received``)."""
        self._events.append(event)

    def remove_if_closed(self, sock: LinkSocket) -> None:
        """Remove ``sock`` once it is closing and its last link is gone."""
        if sock.closing and not sock.links and self.sockets.get(sock.tag) is sock:
            sock.closed = True
            del self.sockets[sock.tag]

    def receive_frames(self, peer: Peer, data: bytes, now: float) -> bool:
        """Frames from ``peer``'s byte stream (or one datagram); False when its framing
        broke (the bytes left are then forgotten: a stream must be closed)."""
        frames = 0
        scanner = peer.frames
        for item in scanner.feed(data):
            if isinstance(item, DataRun):
                frames += len(item.payloads)
                self._data_run(peer, item, now)
                continue
            frames += 1
            decoded = item.decoded
            if isinstance(decoded, SocketMessage):
                self._handle(peer, decoded, item.size, now)
            else:
                self.counters["malformed"] += 1
                self.trace(now, "drop", peer=peer.name, size=item.size,
                           attrs={"reason": f"malformed: {decoded.reason}"})
        lost = scanner.lost
        if lost is not None:
            self.counters["malformed"] += 1
            self.trace(now, "drop", peer=peer.name, size=scanner.unread,
                       attrs={"reason": f"framing lost: {lost.reason}"})
            scanner.reset()
            return False
        self.counters["frames_in"] += frames
        return True

    def transport_lost(self, peer: Peer, reason: str, now: float) -> None:
        """Whatever was in flight with ``peer`` is unknowable: its links go down."""
        for link in list(peer.links.values()):
            self.input(link, LinkInput.TRANSPORT_LOST, Context(reason=reason), now)

    def input(self, link: Link, event: LinkInput, ctx: Context, now: float) -> None:
        """Run ``event`` through the table for ``link``, then any follow-up inputs."""
        self._followups.append((link, event, ctx))
        if self._in_input:
            return
        self._in_input = True
        try:
            while self._followups:
                each, kind, each_ctx = self._followups.pop(0)
                expected = _FOLLOWUP_STATE.get(kind)
                if expected is not None and each.state is not expected:
                    continue  # an earlier follow-up already moved the link on
                self._step(each, kind, each_ctx, now)
        finally:
            self._in_input = False

    def send_data(self, link: Link, payload: bytes, now: float, cookie: Any) -> None:
        """One DATA on an established link with credit (callers checked both)."""
        link.credits -= 1
        index = link.sent
        link.sent += 1
        sock = link.socket
        sock.sent += 1
        header = _PACK_DATA_HEADER(VERSION, _SOCKETS, _DATA, EXTENDED_HEADER_SIZE + len(payload),
                                   sock.tag, link.peer_tag, link.clock)
        peer = link.peer
        self._send_data_out(peer, header, payload)
        self.dirty[peer.address] = peer
        if cookie is not None:
            link.cookies.append((index, cookie))
        if self.trace_data:
            self.trace(now, "send", msg=f"{self.name}/{sock.tag}#{link.clock}/{index}",
                       peer=peer.name, size=len(header) + len(payload),
                       attrs={"link": link.id})

    def taken(self, link: Link, index: int, now: float, trace: bool = True) -> None:
        """The application took (or the pattern discarded) message ``index`` of ``link``."""
        if trace and self.trace_data:
            self.trace(now, "deliver", msg=self._msg_id(link, index), peer=link.peer.name,
                       attrs={"link": link.id})
        link.taken += 1
        if link.state is not LinkState.ESTABLISHED:
            return  # an ending link needs no credit back
        variation = link.inflow.taken()
        if variation:
            self.flow(link, variation, now)
        if link.peer_wants_receipts:
            self.send_control(link, CONTROL_TAKEN, _U32.pack(link.taken & MAX_TAG))

    def flow(self, link: Link, variation: int, now: float) -> None:
        """Return (or take back) ``variation`` credits to the sender on ``link``."""
        if not variation or link.state is not LinkState.ESTABLISHED:
            return
        # Credits waited for by a sender must not wait behind the receiving
        # application's loop: the driver writes them at once.
        self.urgent = True
        self._send(link.peer, SocketMessage(src_tag=link.socket.tag, dst_tag=link.peer_tag,
                                            clock=link.clock, body=FlowBody(credits=variation)))

    def send_control(self, link: Link, kind: int, payload: bytes) -> None:
        """A custom control message of type ``kind`` on ``link`` (no credit spent)."""
        self._send(link.peer, SocketMessage(src_tag=link.socket.tag, dst_tag=link.peer_tag,
                                            clock=link.clock,
                                            body=ControlBody(kind=kind, payload=payload)))

    def trace(
        self,
        now: float,
        kind: str,
        *,
        msg: str | None = None,
        peer: str | None = None,
        size: int | None = None,
        attrs: Mapping[str, str] | None = None,
    ) -> None:
        """One trace event of the link layer."""
        self._trace_sink(now, LAYER, kind, msg=msg, peer=peer, size=size, attrs=attrs)

    # -- frames in --------------------------------------------------------------------

    def _data_run(self, peer: Peer, run: DataRun, now: float) -> None:
        """DATA of one link incarnation, in order. The fast path queues as many as the
        link's credit allows at once, checked as one; any other goes through the state
        machine one by one (stale, not linked, credit violation, REQ replies)."""
        payloads = run.payloads
        count = len(payloads)
        key = (run.dst_tag, run.src_tag)
        done = 0
        while done < count:
            link = peer.links.get(key)
            if (
                link is not None
                and link.peer_clock == run.clock
                and link.state is _ESTABLISHED
                and not link.socket.is_req
            ):
                inflow = link.inflow
                first = inflow.received
                room = inflow.granted_max - first
                if room > 0:
                    batch = payloads if done == 0 and count <= room else (
                        payloads[done : done + room]
                    )
                    inflow.received = first + len(batch)
                    if link.socket.queue_run(link, batch, first):
                        self._readable[link.socket.tag] = None
                    done += len(batch)
                    continue
            self._handle(peer, run.message(done), exon.HEADER_SIZE + len(payloads[done]), now)
            done += 1

    def _handle(self, peer: Peer, msg: SocketMessage, size: int, now: float) -> None:
        body = msg.body
        if msg.dst_tag == 0:
            self._node_message(peer, msg, now)
            return
        sock = self.sockets.get(msg.dst_tag)
        if sock is None:
            if not isinstance(body, ErrorBody):
                # Notes "Socket Not Found": sent as if by the missing socket.
                self.counters["not_found_sent"] += 1
                self._send(peer, SocketMessage(
                    src_tag=msg.dst_tag, dst_tag=msg.src_tag, clock=NO_CLOCK,
                    body=ErrorBody(code=ErrorCode.SOCKET_NOT_FOUND, dest_clock=msg.clock),
                ))
            else:
                self._stale(now, peer, "error for an unknown socket")
            return
        link = sock.links.get((peer.address, msg.src_tag))
        ctx = Context(msg=msg, clock=msg.clock, size=size)
        if isinstance(body, LinkBody):
            event = self._classify_link(sock, link, body.metadata, msg.clock, ctx)
            if event is None:
                self._stale(now, peer, "duplicate LINK")
                return
            if link is None:
                link = Link(sock, peer, msg.src_tag, wanted=False)
        elif isinstance(body, LinkAckBody):
            if link is None or body.dest_clock != link.clock:
                self._stale(now, peer, "LINKACK for another incarnation")
                return
            event = self._classify_ack(sock, link, body, ctx)
        elif isinstance(body, ErrorBody):
            if link is None or body.dest_clock != link.clock:
                self._stale(now, peer, "ERROR for another incarnation")
                return
            if body.code is ErrorCode.SOCKET_NOT_FOUND:
                event, ctx.reason = LinkInput.ERR_NOT_FOUND, "peer_socket_not_found"
            elif body.code is ErrorCode.SOCKET_NOT_LINKED:
                event, ctx.reason = LinkInput.ERR_NOT_LINKED, "peer_not_linked"
            else:
                self._stale(now, peer, f"ERROR {body.code.name}: {body.text}")
                return
        else:
            if link is None:
                link = Link(sock, peer, msg.src_tag, wanted=False)
            elif link.peer_clock is not None and msg.clock != link.peer_clock:
                self._stale(now, peer, f"{msg.type.name} of another incarnation")
                return
            if isinstance(body, FlowBody):
                event = LinkInput.FLOW
            elif isinstance(body, UnlinkBody):
                event = LinkInput.UNLINK_MSG
            else:
                event = LinkInput.DATA
        self.input(link, event, ctx, now)

    def _classify_link(
        self,
        sock: LinkSocket,
        link: Link | None,
        meta: LinkMetadata,
        clock: int,
        ctx: Context,
    ) -> LinkInput | None:
        ctx.meta = meta
        if link is not None and link.state in machine.KNOWS_PEER:
            if clock == link.peer_clock:
                return None
            ctx.decision = LinkDecision.LINK_EXISTS
            return LinkInput.LINK_AGAIN
        fresh = link is None or link.state is LinkState.IDLE
        decision = decide(
            sock.pattern,
            meta,
            closing=sock.closing,
            incoming=link is None or not link.wanted,
            allow_incoming=sock.options.allow_incoming,
            at_limit=fresh and sock.at_limit(),
            authorize=sock.options.authorize,
        )
        ctx.decision = decision
        if decision is LinkDecision.SUCCESS:
            return LinkInput.LINK_ACCEPT
        ctx.reason = f"rejected:{decision.name.lower()}"
        return LinkInput.LINK_REFUSE_FATAL if decision.fatal else LinkInput.LINK_REFUSE_TRANSIENT

    def _classify_ack(
        self, sock: LinkSocket, link: Link, body: LinkAckBody, ctx: Context
    ) -> LinkInput:
        peer_decision = body.decision
        if peer_decision is not LinkDecision.SUCCESS:
            ctx.reason = f"refused:{peer_decision.name.lower()}"
            link.last_refusal = ctx.reason
            return LinkInput.ACK_FATAL if peer_decision.fatal else LinkInput.ACK_TRANSIENT
        if body.metadata is not None and link.state in machine.NEEDS_METADATA:
            ctx.meta = body.metadata
            own = decide(
                sock.pattern,
                body.metadata,
                closing=sock.closing,
                authorize=sock.options.authorize,
            )
            ctx.decision = own
            if own is LinkDecision.SUCCESS:
                return LinkInput.ACKMETA_ACCEPT
            ctx.reason = f"rejected:{own.name.lower()}"
            link.last_refusal = ctx.reason
            return (
                LinkInput.ACKMETA_REFUSE_FATAL if own.fatal else LinkInput.ACKMETA_REFUSE_TRANSIENT
            )
        return LinkInput.ACK_OK

    def _node_message(self, peer: Peer, msg: SocketMessage, now: float) -> None:
        # HELLO is consumed by the StreamEndpoint before frames reach the node; any
        # other node-level message is unknown to this version.
        self._stale(now, peer, f"unexpected node-level {msg.type.name}")

    # -- the state machine ---------------------------------------------------------

    def _step(self, link: Link, event: LinkInput, ctx: Context, now: float) -> None:
        before = link.state
        transition = machine.step(before, event)
        if before in _CANCELLING and not ctx.reason:
            ctx.reason = "cancelled"  # whatever the peer answers, we gave up first
        sock = link.socket
        link.state = transition.next
        key = (link.peer.address, link.peer_tag)
        if transition.next is not LinkState.IDLE and sock.links.get(key) is not link:
            sock.links[key] = link
            link.peer.links[(sock.tag, link.peer_tag)] = link
            self.transport.links_changed(link.peer)
        if before is LinkState.ESTABLISHED and transition.next is not LinkState.ESTABLISHED:
            sock.leave_ring(link)
        for action in transition.actions:
            self._act(action, link, event, ctx, now)
        if transition.next is LinkState.IDLE and Action.CLOSE not in transition.actions:
            self._forget(link)

    def _act(
        self, action: Action, link: Link, event: LinkInput, ctx: Context, now: float
    ) -> None:
        sock = link.socket
        peer = link.peer
        if action is Action.NEW_CLOCK:
            link.clock = sock.next_clock()
            link.peer_clock = None
            link.peer_meta = None
        elif action is Action.SEND_LINK:
            link.inflow = InFlow(sock.capacity, sock.batch)
            self._send(peer, SocketMessage(src_tag=sock.tag, dst_tag=link.peer_tag,
                                           clock=link.clock,
                                           body=LinkBody(metadata=sock.metadata())))
        elif action is Action.STORE_META:
            link.peer_meta = ctx.meta
            link.peer_clock = ctx.clock
        elif action in (Action.SEND_ACK, Action.SEND_ACK_META, Action.SEND_ACK_CANCELED,
                        Action.SEND_ACK_EXISTS):
            self._send_ack(link, action, ctx)
        elif action is Action.STASH_ACK:
            link.peer_clock = ctx.clock
        elif action is Action.ESTABLISH:
            self._establish(link, now)
        elif action is Action.SCHEDULE_RETRY:
            self._schedule_retry(link, ctx, now)
        elif action is Action.CANCEL_RETRY:
            link.retry_at = None
            self._retrying.pop(id(link), None)
        elif action is Action.DELIVER:
            self._deliver_slow(link, ctx, now)
        elif action is Action.APPLY_FLOW:
            assert ctx.msg is not None and isinstance(ctx.msg.body, FlowBody)
            self._credit(link, ctx.msg.body.credits, now)
        elif action is Action.SEND_UNLINK:
            self._send(peer, SocketMessage(src_tag=sock.tag, dst_tag=link.peer_tag,
                                           clock=link.clock, body=UnlinkBody(sent=link.sent)))
        elif action is Action.RECORD_PEER_SENT:
            assert ctx.msg is not None and isinstance(ctx.msg.body, UnlinkBody)
            link.peer_sent = ctx.msg.body.sent
        elif action is Action.CHECK_DRAINED:
            if link.peer_sent is not None and link.inflow.received >= link.peer_sent:
                self._followups.append((link, LinkInput.DRAINED, Context(reason="unlinked")))
        elif action is Action.SEND_NOT_LINKED:
            self.counters["not_linked_sent"] += 1
            clock = ctx.clock if ctx.clock is not None else NO_CLOCK
            self._send(peer, SocketMessage(
                src_tag=sock.tag, dst_tag=link.peer_tag, clock=NO_CLOCK,
                body=ErrorBody(code=ErrorCode.SOCKET_NOT_LINKED, dest_clock=clock),
            ))
        elif action is Action.IGNORE:
            self.counters["ignored"] += 1
            self.trace(now, "drop", peer=peer.name, size=ctx.size,
                       attrs={"reason": f"{event.value} ignored in {link.state.value}",
                              "tag": str(sock.tag)})
        elif action is Action.CLOSE:
            reason = ctx.reason or event.value
            if event is LinkInput.GIVE_UP:
                reason = f"gave_up:{link.last_refusal or 'unknown'}"
            self._close(link, reason, now)

    def _send_ack(self, link: Link, action: Action, ctx: Context) -> None:
        sock = link.socket
        decision = ctx.decision
        metadata: LinkMetadata | None = None
        if action is Action.SEND_ACK_META:
            metadata = sock.metadata()
            link.inflow = InFlow(sock.capacity, sock.batch)
        elif action is Action.SEND_ACK_CANCELED:
            decision = LinkDecision.CANCELED
        elif action is Action.SEND_ACK_EXISTS:
            decision = LinkDecision.LINK_EXISTS
        dest = ctx.clock if ctx.clock is not None else NO_CLOCK
        clock = link.clock if link.state is not LinkState.IDLE or decision is LinkDecision.SUCCESS \
            else NO_CLOCK
        if action is Action.SEND_ACK_EXISTS:
            metadata = sock.metadata()
            clock = NO_CLOCK  # the new incarnation is refused: there is no clock for it
        self._send(link.peer, SocketMessage(
            src_tag=sock.tag, dst_tag=link.peer_tag, clock=clock,
            body=LinkAckBody(decision=decision, dest_clock=dest, metadata=metadata),
        ))

    def _establish(self, link: Link, now: float) -> None:
        sock = link.socket
        meta = link.peer_meta
        assert meta is not None, "a link is established only with the peer's metadata"
        link.credits = meta.credits if sock.pattern.sends else 0
        link.peer_wants_receipts = meta.custom.get("receipts") == b"1"
        mine = f"{self.name}/{sock.tag}#{link.clock}"
        theirs = f"{link.peer.name}/{link.peer_tag}#{link.peer_clock}"
        link.id = "~".join(sorted((mine, theirs)))
        link.data_tail = SOCKET_HEADER.pack(sock.tag, link.peer_tag, link.clock)
        link.up = True
        sock.link_up(link)
        self._events.append(LinkUp(tag=sock.tag, peer=link.peer.address,
                                   peer_tag=link.peer_tag, credits=link.credits, link=link.id))
        self.trace(now, "link_up", peer=link.peer.name,
                   attrs={"link": link.id, "credits": str(link.credits), "tag": str(sock.tag),
                          "peer_tag": str(link.peer_tag)})
        if link.credits > 0:
            self._writable[sock.tag] = None
        # The capacity advertised in our metadata may have changed while linking.
        if sock.capacity != link.inflow.capacity and link.state is LinkState.ESTABLISHED:
            self.flow(link, link.inflow.set_capacity(sock.capacity), now)
        if sock.pattern.name == "sub" and link.state is LinkState.ESTABLISHED:
            for prefix in sock.subscriptions:
                self.send_control(link, CONTROL_SUBSCRIBE, prefix)

    def _schedule_retry(self, link: Link, ctx: Context, now: float) -> None:
        if ctx.reason:
            link.last_refusal = ctx.reason
        opts = link.socket.options
        if not link.wanted or link.attempts >= opts.retry_limit:
            self._followups.append((link, LinkInput.GIVE_UP, Context()))
            return
        link.attempts += 1
        # Notes footnote 4: random timeouts avoid link request storms.
        link.retry_at = now + opts.retry_backoff.delay(link.attempts - 1, self._rng)
        self._retrying[id(link)] = link

    def _forget(self, link: Link) -> None:
        sock = link.socket
        sock.forget(link)
        peer = link.peer
        if peer.links.get((sock.tag, link.peer_tag)) is link:
            del peer.links[(sock.tag, link.peer_tag)]
            if not peer.links:
                self.transport.links_changed(peer)
        self._retrying.pop(id(link), None)
        self.remove_if_closed(sock)

    def _close(self, link: Link, reason: str, now: float) -> None:
        sock = link.socket
        registered = sock.links.get((link.peer.address, link.peer_tag)) is link
        was_up = link.up
        link.state = LinkState.IDLE
        self._forget(link)
        if not registered and not was_up and not link.wanted:
            return  # a request we refused: nothing of it was ever reported
        if link.cookies:
            # Nothing is dropped silently: receipts of messages whose fate is unknown.
            for _, cookie in link.cookies:
                self._receipt(sock, Receipt(cookie=cookie, peer=link.peer.address,
                                            peer_tag=link.peer_tag, taken=False))
            link.cookies.clear()
        if sock.link_lost(link, reason):
            self._events.append(RequestFailed(tag=sock.tag, reason=reason))
        self._events.append(LinkDown(tag=sock.tag, peer=link.peer.address,
                                     peer_tag=link.peer_tag, reason=reason, established=was_up))
        attrs = {"reason": reason, "tag": str(sock.tag), "peer_tag": str(link.peer_tag)}
        if link.id:
            attrs["link"] = link.id
        self.trace(now, "link_down", peer=link.peer.name, attrs=attrs)
        self._writable[sock.tag] = None  # a waiting sender must re-check (may fail now)

    # -- data ------------------------------------------------------------------------

    def _data_arrived(self, link: Link, payload: bytes, now: float) -> None:
        """A DATA on an established (or draining) link: queue it for the application."""
        inflow = link.inflow
        if not inflow.arrived():
            self.counters["violations"] += 1
            link.socket.dropped += 1
            self.trace(now, "drop", peer=link.peer.name, size=len(payload),
                       attrs={"reason": "credit_violation", "link": link.id})
            self.input(link, LinkInput.VIOLATION,
                       Context(clock=link.peer_clock, reason="credit_violation"), now)
            return
        sock = link.socket
        sock.received += 1
        index = inflow.received - 1
        if sock.is_req and not sock.expects_reply(link, payload):
            sock.dropped += 1
            self.trace(now, "drop", peer=link.peer.name, size=len(payload),
                       msg=self._msg_id(link, index),
                       attrs={"reason": "stale_reply", "link": link.id})
            # Discarding is taking: the sender gets its credit back.
            self.taken(link, index, now, False)
            return
        if sock.queue_message(link, payload, index):
            self._readable[sock.tag] = None

    def _deliver_slow(self, link: Link, ctx: Context, now: float) -> None:
        msg = ctx.msg
        assert msg is not None
        body = msg.body
        if isinstance(body, DataBody):
            self._data_arrived(link, body.payload, now)
        elif isinstance(body, ControlBody):
            self._control(link, body, now)

    def _control(self, link: Link, body: ControlBody, now: float) -> None:
        sock = link.socket
        if body.kind == CONTROL_SUBSCRIBE and sock.pattern.name == "pub":
            if body.payload not in link.subs:
                link.subs = (*link.subs, body.payload)
        elif body.kind == CONTROL_UNSUBSCRIBE and sock.pattern.name == "pub":
            link.subs = tuple(s for s in link.subs if s != body.payload)
        elif body.kind == CONTROL_TAKEN and len(body.payload) == 4:
            (taken,) = _U32.unpack(body.payload)
            cookies = link.cookies
            while cookies and cookies[0][0] < taken:
                _, cookie = cookies.popleft()
                self._receipt(sock, Receipt(cookie=cookie, peer=link.peer.address,
                                            peer_tag=link.peer_tag, taken=True))
        else:
            sock.dropped += 1
            self.trace(now, "drop", peer=link.peer.name,
                       attrs={"reason": f"unknown control {body.kind:#x}", "link": link.id})

    def _receipt(self, sock: LinkSocket, receipt: Receipt) -> None:
        if sock.queue_receipt(receipt):
            self._readable[sock.tag] = None

    def _msg_id(self, link: Link, index: int) -> str:
        return f"{link.peer.name}/{link.peer_tag}#{link.peer_clock}/{index}"

    def _credit(self, link: Link, variation: int, now: float) -> None:
        before = link.credits
        link.credits = before + variation
        self.trace(now, "credit", peer=link.peer.name,
                   attrs={"amount": str(variation), "link": link.id,
                          "credits": str(link.credits)})
        if before <= 0 < link.credits:
            self._writable[link.socket.tag] = None

    # -- frames out -------------------------------------------------------------------

    def _send(self, peer: Peer, msg: SocketMessage) -> None:
        frame = exon.encode(msg, limits=self.limits)
        self.counters["frames_out"] += 1
        self.transport.send_frame(peer, frame)
        self.dirty[peer.address] = peer

    # -- helpers ------------------------------------------------------------------------

    def _stale(self, now: float, peer: Peer, reason: str) -> None:
        self.counters["stale"] += 1
        self.trace(now, "drop", peer=peer.name, attrs={"reason": f"stale: {reason}"})

    # -- introspection for tests and statistics -------------------------------------

    def peers(self) -> list[Address]:
        return list(self.records)

    def channel(self, peer: Address) -> Channel | None:
        found = self.records.get(peer)
        return None if found is None else found.channel

    def links(self) -> Iterable[tuple[int, Address, int, LinkState]]:
        for sock in self.sockets.values():
            for (addr, peer_tag), link in sock.links.items():
                yield sock.tag, addr, peer_tag, link.state
