"""Exactly-once, in-order delivery between two nodes over UDP (sans-I/O).

Exon promised exactly-once delivery of messages between nodes over UDP (reference (c),
"Exon itself"); the link layer above relies on it: a DATA lost on the network would
break the credit count and the UNLINK drain, a duplicated one would be delivered twice.
This channel gives that guarantee per pair of node *sessions*: every datagram that
carries frames has a sequence number, is retransmitted until acknowledged, and is
delivered once and in order. A node restart is a new session (a random 64-bit number
drawn at start), so datagrams of a previous life are recognised and never delivered
into the new one: the link incarnations above live inside one session pair.

Datagram layout (big-endian)::

    0        2     3       4               12              20      24      28      32
    +--------+-----+-------+---------------+---------------+-------+-------+-------+----
    | 'GL'   | ver | flags |  src session  |  dst session  |  ack  | sack  | [seq] | frames
    +--------+-----+-------+---------------+---------------+-------+-------+-------+----

- ``flags`` bit 0 (``SEQ``): the datagram carries a sequence number and a payload;
  without it the datagram is a pure acknowledgement. Other bits must be zero.
- ``dst session`` is the receiver's session as the sender knows it, 0 when unknown; a
  node drops datagrams addressed to a session that is not its own (meant for its
  previous life) and answers with a pure ack, so the peer learns the new session.
- ``ack`` is the next sequence number the sender expects from the receiver (all before
  it arrived); ``sack`` bit ``i`` says that ``ack + 1 + i`` arrived too.
- Sequence numbers start at 1 and are 32-bit; a session would need 4 billion datagrams
  to wrap, which is documented as a limit rather than handled.

The payload is opaque here: the link core puts whole Exon frames in it, so a datagram
never splits a frame (a lost datagram never tears one). The receiver gets the payloads
in order and parses them as one byte stream.

Retransmission follows RFC 6298 in spirit: a smoothed RTT and variance give the
retransmission timeout (clamped), it doubles per retransmission of a datagram, RTT
samples come only from datagrams sent once (Karn). Correctness never depends on these
timers (Exon's "oblivious" property): they only decide when to try again. The one
timeout that matters is ``dead_after``: when datagrams wait for an acknowledgement and
none has come for that long, the peer is declared unreachable, and the link layer
takes every link to it down with that reason (nothing is dropped silently).

Keepalive. While links depend on a channel (``keepalive`` set by the node) and nothing
has moved for ``keepalive_interval``, the channel sends an empty sequenced datagram.
It is acknowledged like any other, so a silent peer is found unreachable, and a peer
that reset its side answers from its new session, which resets ours: a sender waiting
for credits from a peer that forgot it does not wait forever.
"""

from __future__ import annotations

import struct
from collections import deque
from dataclasses import dataclass
from typing import Annotated

from gossamer.errors import ConfigError, DecodeError
from gossamer.params import Bounds, Checked, PositiveSeconds, Seconds, check

__all__ = [
    "HEADER_SIZE",
    "MAGIC",
    "SEQ_HEADER_SIZE",
    "Channel",
    "ChannelConfig",
    "Header",
    "pull_header",
    "push_header",
]

MAGIC = 0x474C  # "GL"
VERSION = 1
FLAG_SEQ = 0x01
_HEAD = struct.Struct(">HBBQQII")
_SEQ = struct.Struct(">I")
HEADER_SIZE = _HEAD.size  # 28
SEQ_HEADER_SIZE = HEADER_SIZE + _SEQ.size  # 32
_SACK_BITS = 32
_U32 = (1 << 32) - 1


@dataclass(frozen=True, slots=True, kw_only=True)
class Header:
    """The channel header of one datagram."""

    src_session: int
    dst_session: int
    ack: int
    sack: int
    #: The datagram's sequence number, or ``None`` for a pure acknowledgement.
    seq: int | None


def push_header(buf: bytearray, header: Header) -> None:
    """Append ``header`` to ``buf``. Raises ``ValueError`` for a field out of range."""
    flags = FLAG_SEQ if header.seq is not None else 0
    try:
        buf += _HEAD.pack(
            MAGIC, VERSION, flags, header.src_session, header.dst_session, header.ack, header.sack
        )
        if header.seq is not None:
            buf += _SEQ.pack(header.seq)
    except struct.error as exc:
        raise ValueError(f"channel header field out of range: {exc}") from None


def pull_header(data: bytes) -> tuple[Header, int]:
    """Decode the header at the start of ``data``; returns it and the payload offset.

    Raises only ``DecodeError``.
    """
    if len(data) < HEADER_SIZE:
        raise DecodeError(f"datagram of {len(data)} bytes is shorter than the channel header")
    magic, version, flags, src, dst, ack, sack = _HEAD.unpack_from(data)
    if magic != MAGIC:
        raise DecodeError(f"bad channel magic {magic:#06x}", offset=0)
    if version != VERSION:
        raise DecodeError(f"unsupported channel version {version}", offset=2)
    if flags & ~FLAG_SEQ:
        raise DecodeError(f"unknown channel flags {flags:#04x}", offset=3)
    if src == 0:
        raise DecodeError("source session 0 is reserved for 'unknown'", offset=4)
    if flags & FLAG_SEQ:
        if len(data) < SEQ_HEADER_SIZE:
            raise DecodeError("datagram ends inside its sequence number", offset=HEADER_SIZE)
        (seq,) = _SEQ.unpack_from(data, HEADER_SIZE)
        if seq == 0:
            raise DecodeError("sequence number 0 is reserved", offset=HEADER_SIZE)
        return Header(src_session=src, dst_session=dst, ack=ack, sack=sack, seq=seq), (
            SEQ_HEADER_SIZE
        )
    if len(data) != HEADER_SIZE:
        raise DecodeError("a pure acknowledgement carries no payload", offset=HEADER_SIZE)
    return Header(src_session=src, dst_session=dst, ack=ack, sack=sack, seq=None), HEADER_SIZE


@dataclass(frozen=True, slots=True, kw_only=True)
class ChannelConfig(Checked):
    """Sizes and timers of the channel. Times in seconds."""

    #: Largest datagram, header included (Exon used a 1400-byte buffer).
    max_datagram: Annotated[int, Bounds(low=SEQ_HEADER_SIZE + 64, unit="bytes")] = 1400
    #: Datagrams in flight (sent, not acknowledged) per peer.
    window: Annotated[int, Bounds(low=1, high=4096)] = 64
    initial_rto: PositiveSeconds = 0.1
    min_rto: PositiveSeconds = 0.02
    max_rto: PositiveSeconds = 2.0
    #: Seconds without any acknowledgement, while datagrams wait for one, after which
    #: the peer is declared unreachable.
    dead_after: PositiveSeconds = 30.0
    #: Seconds of silence after which a channel that links depend on probes its peer.
    keepalive_interval: PositiveSeconds = 1.0
    #: How long an acknowledgement may wait for a datagram to ride on.
    ack_delay: Seconds = 0.002

    def __post_init__(self) -> None:
        check(self)  # not super(): a slots dataclass is a copy of the class it was written as
        if not self.min_rto <= self.initial_rto <= self.max_rto:
            raise ConfigError("need min_rto <= initial_rto <= max_rto")

    @property
    def max_payload(self) -> int:
        return self.max_datagram - SEQ_HEADER_SIZE


@dataclass(slots=True)
class _Outstanding:
    payload: bytes
    sent_at: float
    due: float
    rto: float
    retries: int = 0


@dataclass(slots=True)
class ChannelCounters:
    datagrams_sent: int = 0
    retransmissions: int = 0
    acks_sent: int = 0
    duplicates: int = 0
    out_of_order: int = 0
    delivered: int = 0


class Channel:
    """One direction-pair of reliable delivery with one peer session.

    The node feeds it received headers and payloads (:meth:`receive`), queues outgoing
    frames (:meth:`queue_frame` / :meth:`queue_bytes`), and collects datagrams with
    :meth:`poll`, which also performs retransmissions and delayed acks that are due.
    """

    def __init__(
        self,
        *,
        local_session: int,
        peer_session: int | None,
        config: ChannelConfig,
    ) -> None:
        self.local_session = local_session
        self.peer_session = peer_session
        self.config = config
        self.counters = ChannelCounters()
        #: Set once nothing was acknowledged for ``dead_after``: the peer is unreachable.
        self.failed = False
        #: Probe the peer when idle (the node sets it while links use the channel).
        self.keepalive = False
        self._probe = False
        self._progress = 0.0  # last acknowledgement, or when the wait for one began
        self._activity = 0.0  # last datagram sent or received
        self._next_seq = 1
        self._unacked: dict[int, _Outstanding] = {}
        self._frames: deque[bytes] = deque()  # whole frames waiting
        self._expected = 1
        self._early: dict[int, bytes] = {}
        self._ack_due: float | None = None
        self._srtt: float | None = None
        self._rttvar = 0.0
        self._rto = config.initial_rto

    # -- sending ----------------------------------------------------------------

    def queue_frame(self, frame: bytes) -> None:
        """Queue one whole frame (it stays in one datagram)."""
        self._frames.append(frame)

    @property
    def backlog(self) -> int:
        """Bytes queued but not yet in a datagram."""
        return sum(len(f) for f in self._frames)

    @property
    def in_flight(self) -> int:
        return len(self._unacked)

    def poll(self, now: float) -> list[bytes]:
        """Datagrams to send now: retransmissions due, new data within the window, and a
        pure ack if one is due and no datagram carries it."""
        out: list[bytes] = []
        cfg = self.config
        # Compared exactly as deadline() computes them, so that a timer set for the
        # deadline always finds the work due (float subtraction could fall short).
        if self._unacked and now >= self._progress + cfg.dead_after:
            self.failed = True
            return []
        if (
            self.keepalive
            and not self._unacked
            and not self._frames
            and now >= self._activity + cfg.keepalive_interval
        ):
            self._probe = True  # an empty sequenced datagram: acknowledged or not
        for seq, item in self._unacked.items():
            if item.due <= now:
                item.retries += 1
                item.rto = min(item.rto * 2, cfg.max_rto)
                item.due = now + item.rto
                item.sent_at = now
                self.counters.retransmissions += 1
                out.append(self._datagram(seq, item.payload))
        while len(self._unacked) < cfg.window:
            payload = self._next_payload()
            if payload is None:
                break
            if not self._unacked:
                self._progress = now  # the wait for an acknowledgement starts
            seq = self._next_seq
            self._next_seq += 1
            self._unacked[seq] = _Outstanding(
                payload=payload, sent_at=now, due=now + self._rto, rto=self._rto
            )
            out.append(self._datagram(seq, payload))
        if self._ack_due is not None and (out or self._ack_due <= now):
            if not out:
                out.append(self._pure_ack())
                self.counters.acks_sent += 1
            self._ack_due = None
        self.counters.datagrams_sent += len(out)
        if out:
            self._activity = now
        return out

    def pure_ack(self, dst_session: int | None = None) -> bytes:
        """A pure acknowledgement (it also tells the peer our session); ``dst_session``
        overrides the peer session it is addressed to."""
        self.counters.acks_sent += 1
        return bytes(self._header(None, dst_session))

    def deadline(self) -> float | None:
        """When :meth:`poll` next has something to do, if anything."""
        if self.failed:
            return None
        best = self._ack_due
        for item in self._unacked.values():
            if best is None or item.due < best:
                best = item.due
        if self._unacked:
            give_up = self._progress + self.config.dead_after
            best = give_up if best is None else min(best, give_up)
        elif self.keepalive:
            probe = self._activity + self.config.keepalive_interval
            best = probe if best is None else min(best, probe)
        if self._frames and len(self._unacked) < self.config.window:
            return 0.0  # data waits and the window has room: send at once
        return best

    def _next_payload(self) -> bytes | None:
        if self._probe:
            self._probe = False
            return b""
        limit = self.config.max_payload
        if not self._frames:
            return None
        first = self._frames.popleft()
        if not self._frames or len(first) + len(self._frames[0]) > limit:
            return first
        parts = [first]
        size = len(first)
        while self._frames and size + len(self._frames[0]) <= limit:
            frame = self._frames.popleft()
            parts.append(frame)
            size += len(frame)
        return b"".join(parts)

    def _header(self, seq: int | None, dst_session: int | None = None) -> bytearray:
        sack = 0
        for offset in range(_SACK_BITS):
            if self._expected + 1 + offset in self._early:
                sack |= 1 << offset
        buf = bytearray()
        push_header(
            buf,
            Header(
                src_session=self.local_session,
                dst_session=dst_session or self.peer_session or 0,
                ack=self._expected & _U32,
                sack=sack,
                seq=seq,
            ),
        )
        return buf

    def _datagram(self, seq: int, payload: bytes) -> bytes:
        buf = self._header(seq)
        buf += payload
        return bytes(buf)

    def _pure_ack(self) -> bytes:
        return bytes(self._header(None))

    # -- receiving ----------------------------------------------------------------

    def receive(self, header: Header, payload: bytes, now: float) -> list[bytes]:
        """Process one datagram of this session; return the payloads now deliverable,
        in order (each exactly once)."""
        self._activity = now
        self._acknowledged(header.ack, header.sack, now)
        if header.seq is None:
            return []
        seq = header.seq
        if seq < self._expected or seq in self._early:
            # A retransmission of something we have: the ack was lost, send it now.
            self.counters.duplicates += 1
            self._ack_due = now
            return []
        if seq - self._expected > 4 * self.config.window:
            # Far beyond any window the peer may use: not trustworthy, ignore it.
            return []
        if seq != self._expected:
            self.counters.out_of_order += 1
            self._early[seq] = payload
            self._ack_due = now  # tell the sender at once which ones are missing
            return []
        ready = [payload]
        self._expected += 1
        while self._expected in self._early:
            ready.append(self._early.pop(self._expected))
            self._expected += 1
        self.counters.delivered += len(ready)
        # Acknowledge every second datagram at once, the others after a short delay
        # (TCP's delayed ack), unless data going back carries the ack first.
        if self._ack_due is None:
            self._ack_due = now + self.config.ack_delay
        else:
            self._ack_due = min(self._ack_due, now)
        return ready

    def _acknowledged(self, ack: int, sack: int, now: float) -> None:
        if not self._unacked:
            return
        done = [seq for seq in self._unacked if seq < ack]
        if sack:
            for offset in range(_SACK_BITS):
                if sack >> offset & 1:
                    seq = ack + 1 + offset
                    if seq in self._unacked:
                        done.append(seq)
        for seq in done:
            item = self._unacked.pop(seq)
            if item.retries == 0:
                self._sample(now - item.sent_at)
        if done:
            self._progress = now

    def _sample(self, rtt: float) -> None:
        cfg = self.config
        if self._srtt is None:
            self._srtt = rtt
            self._rttvar = rtt / 2
        else:
            self._rttvar = 0.75 * self._rttvar + 0.25 * abs(self._srtt - rtt)
            self._srtt = 0.875 * self._srtt + 0.125 * rtt
        self._rto = min(max(self._srtt + 4 * self._rttvar, cfg.min_rto), cfg.max_rto)
