"""Ping/pong over one byte stream (TCP): the stream twin of ``PingCore``.

One core per connection, in the h11 style. Both ends speak the ping wire
messages of ``gossamer.wire.ping``, each carried in one length-prefixed frame
(``gossamer.wire.framing``). A PING is answered with a PONG of the same
sequence number. A node with ``count > 0`` sends that many PINGs, one every
``interval`` seconds; an unanswered PING is reported lost after ``timeout``.
There is no retransmission: the stream already delivers every byte in order or
breaks, so a PING that is not answered in time means a slow or dead peer, and
sending it again could only produce a duplicate PONG.

Closing follows TCP's half-close. ``closing`` becomes true when this side will
send nothing more: after ``send_close``, when its PINGs are all settled and
``close_when_done`` is set, when the peer ended its half of the stream, or when
the framing broke. A driver then flushes ``data_to_send()`` and ends our half
of the stream (``write_eof``). When the peer's half ends (``receive_data(b"")``),
PINGs still pending can no longer be answered and are reported lost.

A frame longer than ``max_frame`` breaks the stream's framing: it is counted as
malformed, the stream is abandoned (``StreamEnded(clean=False)``) and later
input is ignored. A well-framed message that does not decode is counted and
skipped; the framing is intact.

Trace events (``layer=demo``), as in ``PingCore``: ``send``/``recv`` of every
message (``size`` = bytes of its frame), ``deliver`` when a PONG completes a
PING (``msg`` = ``<node>/<seq>``, ``attrs.rtt``), ``lost``, ``drop`` for
malformed input (``attrs.reason``), and ``close`` when either half of the stream
ends (``attrs.by`` = ``local`` or ``peer``, ``attrs.clean``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated

from gossamer.errors import DecodeError
from gossamer.params import Bounds, Checked, Count, PositiveSeconds
from gossamer.proto.ping.core import PingCounters, PingLost, PongReceived, answered
from gossamer.trace.sink import Tracer
from gossamer.wire import framing
from gossamer.wire import ping as wire

if TYPE_CHECKING:
    from random import Random

__all__ = ["StreamEnded", "StreamPingConfig", "StreamPingCore"]

LAYER = "demo"


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamPingConfig(Checked):
    """What one end of a ping stream does.

    ``count`` PINGs are sent (0: only answer, as a server does), the first at
    ``start`` plus a jitter of up to one ``interval``. ``max_frame`` bounds the
    frames accepted from the peer; it defaults to the largest ping message.
    ``peer`` is the peer's node id when known in advance (a client usually
    knows whom it dials); otherwise it is learned from the first message.
    """

    node_id: str
    peer: str | None = None
    count: Count = 0
    interval: PositiveSeconds = 0.1
    timeout: PositiveSeconds = 1.0
    start: float = 0.0
    close_when_done: bool = True
    max_frame: Annotated[int, Bounds(low=1, high=framing.MAX_FRAME_LIMIT, unit="bytes")] = (
        wire.MAX_SIZE
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamEnded:
    """The peer's half of the stream ended.

    ``clean`` is false when the stream ended inside a frame or its framing
    broke; ``reason`` says how it ended.
    """

    clean: bool
    reason: str


class StreamPingCore:
    """Sans-I/O ping/pong for one stream. See the module docstring for the protocol."""

    def __init__(self, config: StreamPingConfig, *, tracer: Tracer, rng: Random) -> None:
        self.config = config
        self.counters = PingCounters()
        self._trace = tracer
        self._decoder = framing.FrameDecoder(max_size=config.max_frame)
        self._out = bytearray()
        self._events: list[PongReceived | PingLost | StreamEnded] = []
        self._pending: dict[int, float] = {}  # seq -> time sent
        self._completed: set[int] = set()
        self._next_seq = 0
        self._peer: str | None = config.peer
        self._closing = False
        self._peer_ended = False
        # Jitter the first ping so that connections opened together do not send in lockstep.
        self._next_ping: float | None = (
            config.start + rng.uniform(0.0, config.interval) if config.count else None
        )

    # -- inputs ---------------------------------------------------------------

    def receive_data(self, data: bytes, now: float) -> None:
        """Bytes from the peer, or ``b""`` when the peer's half of the stream ended."""
        if self._peer_ended:
            return
        if not data:
            self._end_of_stream(now)
            return
        try:
            frames = self._decoder.feed(data)
        except DecodeError:
            frames = []
        # Messages framed before a bad header are good and are handled in order.
        for frame in frames:
            self._receive_frame(frame, now)
        failed = self._decoder.failed
        if failed is not None:
            # The framing is lost: nothing after this point can be trusted, so
            # the stream is abandoned.
            self._malformed(now, failed, len(data))
            self._abandon(now, reason=failed.reason)

    def handle_timer(self, now: float) -> None:
        cfg = self.config
        if self._next_ping is not None and now >= self._next_ping:
            seq = self._next_seq
            self._next_seq += 1
            self._pending[seq] = now
            self._send(wire.PingMessage(type=wire.PingType.PING, seq=seq, sender=cfg.node_id),
                       now, msg_id=f"{cfg.node_id}/{seq}")
            self._next_ping = self._next_ping + cfg.interval if self._next_seq < cfg.count else None
        for seq, sent in list(self._pending.items()):
            if now >= sent + cfg.timeout:
                self._lose(seq, now)
        self._maybe_close(now)

    def send_close(self, now: float) -> None:
        """Local request: send nothing more (no further PINGs, no PONGs) and end our half."""
        self._next_ping = None
        self._close_local(now, clean=True)

    # -- outputs --------------------------------------------------------------

    def data_to_send(self) -> bytes:
        out = bytes(self._out)
        self._out.clear()
        return out

    def events_received(self) -> list[PongReceived | PingLost | StreamEnded]:
        out, self._events = self._events, []
        return out

    def next_deadline(self) -> float | None:
        deadlines = [sent + self.config.timeout for sent in self._pending.values()]
        if self._next_ping is not None:
            deadlines.append(self._next_ping)
        return min(deadlines, default=None)

    @property
    def closing(self) -> bool:
        """True once this side will send nothing more: flush, then end our half of the stream."""
        return self._closing

    @property
    def done(self) -> bool:
        """True when every PING was sent and answered or given up."""
        return self._next_ping is None and not self._pending

    @property
    def peer(self) -> str | None:
        """The peer's node id, once a message from it arrived."""
        return self._peer

    # -- helpers --------------------------------------------------------------

    def _receive_frame(self, frame: bytes, now: float) -> None:
        size = framing.HEADER_SIZE + len(frame)
        try:
            msg = wire.decode(frame)
        except DecodeError as exc:
            self._malformed(now, exc, size)
            return
        self.counters.received += 1
        self._peer = msg.sender
        if msg.type is wire.PingType.PING:
            msg_id = f"{msg.sender}/{msg.seq}"
            self._trace(now, LAYER, "recv", msg=msg_id, peer=msg.sender, seq=msg.seq,
                        size=size, attrs={"type": "ping"})
            if self._closing:
                # Our half of the stream has ended: the PONG can no longer be sent.
                self.counters.unanswered += 1
                return
            self._send(wire.PingMessage(type=wire.PingType.PONG, seq=msg.seq,
                                        sender=self.config.node_id), now, msg_id=msg_id)
            return
        own_id = f"{self.config.node_id}/{msg.seq}"
        self._trace(now, LAYER, "recv", msg=own_id, peer=msg.sender, seq=msg.seq,
                    size=size, attrs={"type": "pong"})
        sent = answered(self._pending, self._completed, msg.seq, self.counters)
        if sent is None:
            return
        rtt = now - sent
        self._trace(now, LAYER, "deliver", msg=own_id, peer=msg.sender, seq=msg.seq,
                    attrs={"rtt": f"{rtt:.6f}"})
        self._events.append(PongReceived(peer=msg.sender, seq=msg.seq, rtt=rtt))
        self._maybe_close(now)

    def _malformed(self, now: float, exc: DecodeError, size: int) -> None:
        self.counters.malformed += 1
        self._trace(now, LAYER, "drop", peer=self._peer, size=size, attrs={"reason": exc.reason})

    def _end_of_stream(self, now: float) -> None:
        clean = True
        reason = "eof"
        try:
            self._decoder.close()
        except DecodeError as exc:
            self._malformed(now, exc, self._decoder.buffered)
            clean, reason = False, exc.reason
        self._finish_peer(now, clean=clean, reason=reason)

    def _abandon(self, now: float, *, reason: str) -> None:
        self._finish_peer(now, clean=False, reason=reason)

    def _finish_peer(self, now: float, *, clean: bool, reason: str) -> None:
        self._peer_ended = True
        self._trace(now, LAYER, "close", peer=self._peer,
                    attrs={"by": "peer", "clean": str(clean).lower(), "reason": reason})
        self._events.append(StreamEnded(clean=clean, reason=reason))
        # No answer can arrive once the peer's half has ended.
        self._next_ping = None
        for seq in list(self._pending):
            self._lose(seq, now)
        self._close_local(now, clean=clean)

    def _lose(self, seq: int, now: float) -> None:
        del self._pending[seq]
        self.counters.lost += 1
        self._trace(now, LAYER, "lost", msg=f"{self.config.node_id}/{seq}", peer=self._peer,
                    seq=seq)
        # The peer id is empty only if the peer never identified itself.
        self._events.append(PingLost(peer=self._peer or "", seq=seq))

    def _maybe_close(self, now: float) -> None:
        if self.config.close_when_done and self.config.count and self.done:
            self._close_local(now, clean=True)

    def _close_local(self, now: float, *, clean: bool) -> None:
        if self._closing:
            return
        self._closing = True
        self._trace(now, LAYER, "close", peer=self._peer,
                    attrs={"by": "local", "clean": str(clean).lower()})

    def _send(self, msg: wire.PingMessage, now: float, *, msg_id: str) -> None:
        if self._closing:
            return
        start = len(self._out)
        framing.push_frame(self._out, wire.encode(msg), max_size=wire.MAX_SIZE)
        size = len(self._out) - start
        self.counters.sent += 1
        self._trace(now, LAYER, "send", msg=msg_id, peer=self._peer, seq=msg.seq, size=size,
                    attrs={"type": msg.type.name.lower()})
