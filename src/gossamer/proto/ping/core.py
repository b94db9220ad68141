"""The ping/pong core.

Each node pings its targets in turn, ``count`` pings in all, one every
``interval`` seconds. A PING is answered with a PONG carrying the same sequence
number. An unanswered PING is retransmitted after ``timeout`` seconds, doubling
each time, up to ``max_retries`` retransmissions; then it is reported lost.
A PONG completes its PING once; later copies are counted as duplicates.

Trace events (``layer=demo``): ``send``/``recv`` of every datagram, ``retransmit``,
``deliver`` when a PONG completes a PING (``msg`` = ``<node>/<seq>``, ``attrs.rtt``),
``lost`` when retries run out, ``drop`` for a malformed datagram (``attrs.reason``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from gossamer._types import Address
from gossamer.errors import DecodeError
from gossamer.params import Checked, Count, PositiveSeconds
from gossamer.proto.backoff import NO_JITTER, Backoff
from gossamer.proto.core import DatagramOutputs
from gossamer.trace.sink import Tracer
from gossamer.wire import ping as wire

if TYPE_CHECKING:
    from random import Random

__all__ = ["PingConfig", "PingCore", "PingCounters", "PingLost", "PongReceived"]

LAYER = "demo"


@dataclass(frozen=True, slots=True, kw_only=True)
class PingConfig(Checked):
    """What a node pings, how often, and how hard it tries."""

    node_id: str
    targets: Sequence[tuple[str, Address]] = ()
    count: Count = 10
    interval: PositiveSeconds = 0.1
    timeout: PositiveSeconds = 0.2
    max_retries: Count = 4
    start: float = 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class PongReceived:
    """A PING of ours was answered."""

    peer: str
    seq: int
    rtt: float


@dataclass(frozen=True, slots=True, kw_only=True)
class PingLost:
    """A PING of ours went unanswered after every retransmission."""

    peer: str
    seq: int


@dataclass(slots=True, kw_only=True)
class _Pending:
    peer: str
    addr: Address
    first_sent: float
    due: float
    retries: int = 0


@dataclass(slots=True)
class PingCounters:
    """What a ping node did, over datagrams (``PingCore``) or a stream (``StreamPingCore``):
    ``retransmitted`` counts datagram retransmissions, ``unanswered`` pings a stream ended
    without answering; the rest count the same on both."""

    sent: int = 0
    received: int = 0
    retransmitted: int = 0
    delivered: int = 0
    lost: int = 0
    duplicates: int = 0
    malformed: int = 0
    unknown: int = 0
    unanswered: int = 0


_P = TypeVar("_P")


def answered(
    pending: dict[int, _P], completed: set[int], seq: int, counters: PingCounters
) -> _P | None:
    """The pending ping ``seq`` that a PONG answers, taken out and counted delivered; or
    ``None`` for a PONG that answers nothing pending, counted a duplicate (its ping was
    answered before) or unknown. Shared by the datagram and the stream core."""
    found = pending.pop(seq, None)
    if found is None:
        if seq in completed:
            counters.duplicates += 1
        else:
            counters.unknown += 1
        return None
    completed.add(seq)
    counters.delivered += 1
    return found


class PingCore(DatagramOutputs[PongReceived | PingLost]):
    """Sans-I/O ping/pong node. See the module docstring for the protocol."""

    def __init__(self, config: PingConfig, *, tracer: Tracer, rng: Random) -> None:
        super().__init__()
        self.config = config
        self.counters = PingCounters()
        self._trace = tracer
        self._pending: dict[int, _Pending] = {}
        self._completed: set[int] = set()
        self._next_seq = 0
        # The wait for a PONG doubles with each retransmission: timeout, 2x, 4x, ...
        self._backoff = Backoff(base=config.timeout, spread=NO_JITTER)
        self._rng = rng
        # Jitter the first ping so that nodes started together do not send in lockstep.
        self._next_ping: float | None = (
            config.start + rng.uniform(0.0, config.interval)
            if config.count and config.targets
            else None
        )

    # -- inputs ---------------------------------------------------------------

    def receive_datagram(self, data: bytes, addr: Address, now: float) -> None:
        try:
            msg = wire.decode(data)
        except DecodeError as exc:
            self.counters.malformed += 1
            self._trace(now, LAYER, "drop", size=len(data), attrs={"reason": exc.reason})
            return
        self.counters.received += 1
        is_ping = msg.type is wire.PingType.PING
        # A ping and its pong carry the pinger's id.
        msg_id = f"{msg.sender if is_ping else self.config.node_id}/{msg.seq}"
        self._trace(
            now,
            LAYER,
            "recv",
            msg=msg_id,
            peer=msg.sender,
            seq=msg.seq,
            size=len(data),
            attrs={"type": "ping" if is_ping else "pong"},
        )
        if is_ping:
            self._send(
                wire.PingMessage(type=wire.PingType.PONG, seq=msg.seq, sender=self.config.node_id),
                addr,
                msg.sender,
                now,
                msg_id=msg_id,
            )
            return
        pending = answered(self._pending, self._completed, msg.seq, self.counters)
        if pending is None:
            return
        rtt = now - pending.first_sent
        self._trace(
            now,
            LAYER,
            "deliver",
            msg=msg_id,
            peer=pending.peer,
            seq=msg.seq,
            attrs={"rtt": f"{rtt:.6f}", "retries": str(pending.retries)},
        )
        self._events.append(PongReceived(peer=pending.peer, seq=msg.seq, rtt=rtt))

    def handle_timer(self, now: float) -> None:
        cfg = self.config
        if self._next_ping is not None and now >= self._next_ping:
            seq = self._next_seq
            self._next_seq += 1
            peer, addr = cfg.targets[seq % len(cfg.targets)]
            self._pending[seq] = _Pending(
                peer=peer, addr=addr, first_sent=now, due=now + cfg.timeout
            )
            self._send(
                wire.PingMessage(type=wire.PingType.PING, seq=seq, sender=cfg.node_id),
                addr,
                peer,
                now,
                msg_id=f"{cfg.node_id}/{seq}",
            )
            self._next_ping = self._next_ping + cfg.interval if self._next_seq < cfg.count else None
        for seq, pending in list(self._pending.items()):
            if now < pending.due:
                continue
            msg_id = f"{cfg.node_id}/{seq}"
            if pending.retries >= cfg.max_retries:
                del self._pending[seq]
                self.counters.lost += 1
                self._trace(now, LAYER, "lost", msg=msg_id, peer=pending.peer, seq=seq)
                self._events.append(PingLost(peer=pending.peer, seq=seq))
                continue
            pending.retries += 1
            pending.due = now + self._backoff.delay(pending.retries, self._rng)
            self.counters.retransmitted += 1
            self._trace(
                now,
                LAYER,
                "retransmit",
                msg=msg_id,
                peer=pending.peer,
                seq=seq,
                attrs={"attempt": str(pending.retries)},
            )
            self._send(
                wire.PingMessage(type=wire.PingType.PING, seq=seq, sender=cfg.node_id),
                pending.addr,
                pending.peer,
                now,
                msg_id=msg_id,
            )

    # -- outputs (and datagrams_to_send, events_received: DatagramOutputs) -----

    def next_deadline(self) -> float | None:
        deadlines = [p.due for p in self._pending.values()]
        if self._next_ping is not None:
            deadlines.append(self._next_ping)
        return min(deadlines, default=None)

    @property
    def done(self) -> bool:
        """True when every ping was sent and answered or given up."""
        return self._next_ping is None and not self._pending

    # -- helpers --------------------------------------------------------------

    def _send(
        self, msg: wire.PingMessage, addr: Address, peer: str, now: float, *, msg_id: str
    ) -> None:
        data = wire.encode(msg)
        self._outbox.append((data, addr))
        self.counters.sent += 1
        self._trace(
            now,
            LAYER,
            "send",
            msg=msg_id,
            peer=peer,
            seq=msg.seq,
            size=len(data),
            attrs={"type": msg.type.name.lower()},
        )
