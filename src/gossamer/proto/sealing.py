"""Sealed mode for any core: every datagram, and every stream record, inside the envelope.

:class:`SealedDatagrams` wraps a ``DatagramCore`` (ISIS, discovery, links over UDP) and is
one itself. Outgoing datagrams are sealed (``gossamer.wire.envelope``: AES-256-GCM under the
group key, the sender's id, session and sequence bound in); incoming ones are authenticated,
checked against the replay windows and opened before the inner core sees them. Whatever does
not open (malformed, forged, unknown key, a replay, a stale session) never reaches the inner
core: it is counted by reason in :attr:`SealedDatagrams.rejected` and traced as ``drop`` in
the inner core's layer with ``attrs.reason = "envelope: <kind>"``.

Identity is unchanged: the inner core still names peers by the address a datagram came
from. The envelope adds that the datagram was made by a holder of the group key and was not
seen before. Everything else (events, timers, local requests) goes straight to ``inner``,
so callers keep using the inner core's own methods; only the pump drives the wrapper.

The session (sender id, epoch, random session id) and the keyring are the caller's, as in
the envelope: a driver builds them from the configured key with a clock-based epoch and a
CSPRNG (``gossamer.aio.sealing``); tests and the simulator pass seeded ones.

Streams (links over TCP): :class:`SealedStream` wraps one connection's stream core. What
the inner core writes leaves as records, each a 4-byte big-endian length and an envelope;
what arrives is cut into records, opened and handed on in order. TCP keeps records in
order and the pair's seqs only grow, so a record out of turn is an attack and ends the
connection (see :class:`StreamSeals` for what binds a record to its connection).
"""

from __future__ import annotations

import struct
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Generic, Protocol, TypeVar

from gossamer._types import Address, Datagram
from gossamer.errors import CryptoError, DecodeError
from gossamer.proto.core import DatagramCore, DatagramLayer
from gossamer.trace.sink import Tracer
from gossamer.wire import envelope
from gossamer.wire.keyring import Keyring

__all__ = ["SealedDatagrams", "SealedStream", "StreamSeals"]

C = TypeVar("C", bound=DatagramCore)


class SealedDatagrams(DatagramLayer[C]):
    """``inner`` behind the envelope (module docstring). ``layer`` names the inner core's
    trace layer; ``max_payload`` bounds an opened datagram."""

    def __init__(
        self,
        inner: C,
        *,
        keyring: Keyring,
        session: envelope.SenderSession,
        tracer: Tracer,
        layer: str,
        max_payload: int = envelope.DEFAULT_MAX_PAYLOAD,
    ) -> None:
        super().__init__(inner)
        self.keyring = keyring
        self.session = session
        #: Datagrams refused, by reason (``malformed``, ``forged``, ``duplicate``, ...).
        self.rejected: Counter[str] = Counter()
        self.sealed = 0
        self.opened = 0
        self._replay = envelope.ReplayWindows()
        self._trace = tracer
        self._layer = layer
        self._max_payload = max_payload

    # -- the DatagramCore contract ------------------------------------------------

    def receive_datagram(self, data: bytes, addr: Address, now: float) -> None:
        try:
            opened = envelope.unseal(
                self.keyring, data, replay=self._replay, max_payload=self._max_payload
            )
        except DecodeError:
            self._reject("malformed", data, addr, now)
            return
        except CryptoError as exc:
            self._reject(str(exc.fields.get("kind", "crypto")), data, addr, now)
            return
        self.opened += 1
        self.inner.receive_datagram(opened.payload, addr, now)

    def datagrams_to_send(self) -> list[Datagram]:
        out = self.inner.datagrams_to_send()
        if not out:
            return out
        self.sealed += len(out)
        return [(self._seal(payload), addr) for payload, addr in out]

    # -- internals ------------------------------------------------------------------

    def _seal(self, payload: bytes) -> bytes:
        seq = (self.session.last_seq or 0) + 1
        return envelope.seal(
            self.keyring, self.session, seq=seq, payload=payload, max_payload=self._max_payload
        )

    def _reject(self, kind: str, data: bytes, addr: Address, now: float) -> None:
        self.rejected[kind] += 1
        self._trace(
            now, self._layer, "drop", peer=f"{addr[0]}:{addr[1]}", size=len(data),
            attrs={"reason": f"envelope: {kind}"},
        )  # fmt: skip


# -- streams ---------------------------------------------------------------------------

_RECORD_LENGTH = struct.Struct(">I")


class _Endpoint(Protocol):
    """What :class:`SealedStream` needs of the stream core it wraps."""

    closing: bool

    def receive_data(self, data: bytes, now: float) -> None: ...

    def data_to_send(self) -> bytes: ...

    def abort(self, reason: str, now: float) -> None: ...

    def events_received(self) -> Sequence[object]: ...

    def handle_timer(self, now: float) -> None: ...

    def next_deadline(self) -> float | None: ...


class StreamSeals:
    """A node's half of sealed streams, shared by all its connections.

    ``me`` is the node's name (its listening ``host:port``). Every connection's records
    are sealed as sender ``"<me>><peer>"``, one sender session per peer, so a record
    names both ends: a record recorded on the way to one node is refused by any other
    (``misdirected``), and the node-wide replay windows refuse it at the node it was
    meant for, on any connection, for as long as the sending session lives (records of
    one pair only ever travel on that pair's connection, in order, so their seqs only
    grow). ``new_session(sender)`` makes a sender session (clock epoch and CSPRNG in
    drivers, seeded ones in tests).
    """

    def __init__(
        self,
        *,
        keyring: Keyring,
        me: str,
        new_session: Callable[[str], envelope.SenderSession],
        tracer: Tracer,
        layer: str,
        max_record: int = envelope.DEFAULT_MAX_PAYLOAD,
    ) -> None:
        self.keyring = keyring
        self.me = me
        self.replay = envelope.ReplayWindows()
        #: Records refused, by reason; a refused record ends its connection.
        self.rejected: Counter[str] = Counter()
        self.trace = tracer
        self.layer = layer
        self.max_record = max_record
        self._new_session = new_session
        self._sessions: dict[str, envelope.SenderSession] = {}

    def seal(self, peer: str, payload: bytes) -> bytes:
        """``payload`` as length-prefixed records to ``peer``."""
        session = self._sessions.get(peer)
        if session is None:
            session = self._sessions[peer] = self._new_session(f"{self.me}>{peer}")
        out = bytearray()
        step = self.max_record
        for start in range(0, len(payload), step):
            record = envelope.seal(
                self.keyring, session, seq=(session.last_seq or 0) + 1,
                payload=payload[start : start + step], max_payload=step,
            )  # fmt: skip
            out += _RECORD_LENGTH.pack(len(record)) + record
        return bytes(out)


E = TypeVar("E", bound=_Endpoint)


class SealedStream(Generic[E]):
    """One connection's stream core behind the envelope (see :class:`StreamSeals`).

    ``peer`` is the name of the node at the other end when we dialed it, ``None`` on an
    accepted connection until the first record authenticates and names it. A record that
    does not open, is misdirected, or names another sender than the connection's ends
    the connection: the inner core is aborted with ``envelope: <reason>``.
    """

    def __init__(self, inner: E, seals: StreamSeals, peer: str | None) -> None:
        self.inner = inner
        self.seals = seals
        self.peer = peer
        self._buf = bytearray()
        self._held = b""  # output made before an accepted connection's peer is known
        self._broken = False

    @property
    def closing(self) -> bool:
        return self._broken or self.inner.closing

    def receive_data(self, data: bytes, now: float) -> None:
        if not data:
            self.inner.receive_data(b"", now)
            return
        if self._broken:
            return
        buf = self._buf
        buf += data
        seals = self.seals
        limit = envelope.overhead(f"{seals.me}>{seals.me}") * 2 + seals.max_record + 512
        view = memoryview(buf)
        pos = 0
        try:
            while len(buf) - pos >= _RECORD_LENGTH.size:
                (size,) = _RECORD_LENGTH.unpack_from(buf, pos)
                if size > limit:
                    self._reject("oversized", now)
                    return
                end = pos + _RECORD_LENGTH.size + size
                if len(buf) < end:
                    break
                record = bytes(view[pos + _RECORD_LENGTH.size : end])
                pos = end
                if not self._open(record, now):
                    return
        finally:
            view.release()
            del buf[:pos]  # once per call: records are consumed in place, not shifted each

    def _open(self, record: bytes, now: float) -> bool:
        """Open one record and hand its payload on; False once the connection is over."""
        seals = self.seals
        try:
            opened = envelope.unseal(
                seals.keyring, record, replay=seals.replay, max_payload=seals.max_record
            )
        except DecodeError:
            self._reject("malformed", now)
            return False
        except CryptoError as exc:
            self._reject(str(exc.fields.get("kind", "crypto")), now)
            return False
        sender, _, to = opened.sender.rpartition(">")
        if to != seals.me:
            self._reject("misdirected", now)
            return False
        if self.peer is None:
            self.peer = sender
        elif sender != self.peer:
            self._reject("wrong sender", now)
            return False
        self.inner.receive_data(opened.payload, now)
        return not (self._broken or self.inner.closing)

    def data_to_send(self) -> bytes:
        data = self._held + self.inner.data_to_send()
        if not data:
            return b""
        if self.peer is None:
            self._held = data
            return b""
        self._held = b""
        return self.seals.seal(self.peer, data)

    def events_received(self) -> Sequence[object]:
        return self.inner.events_received()

    def handle_timer(self, now: float) -> None:
        self.inner.handle_timer(now)

    def next_deadline(self) -> float | None:
        return self.inner.next_deadline()

    def _reject(self, kind: str, now: float) -> None:
        self._broken = True
        seals = self.seals
        seals.rejected[kind] += 1
        seals.trace(
            now, seals.layer, "drop", peer=self.peer, attrs={"reason": f"envelope: {kind}"}
        )
        self.inner.abort(f"envelope: {kind}", now)
