"""The contract every sans-I/O protocol core follows.

A core is a state machine. Its inputs are method calls that carry the current
time ``now`` (seconds, virtual in the simulator, ``loop.time()`` in a driver):

- ``receive_datagram(data, addr, now)``: a datagram arrived from ``addr``;
- ``handle_timer(now)``: the deadline the core asked for has passed;
- ``send_<thing>(..., now)``: local requests, specific to each protocol.

Its outputs are drained, and thereby cleared, by whoever drives it:

- ``datagrams_to_send()``: datagrams to put on the wire, in order;
- ``events_received()``: events for the application, in order;
- ``next_deadline()``: when ``handle_timer`` must next be called, or ``None``.

A core that wants to act as soon as it is driven returns a deadline in the
past (for example 0.0): drivers and the simulator call ``handle_timer`` once
the deadline is due. Stream cores (one per connection, in the h11 style) take
``receive_data(data, now)`` with ``b""`` meaning end of stream and give
``data_to_send()``. A stream core may also expose a boolean ``closing``
property: once true, the driver flushes ``data_to_send()``, ends our half of
the stream, and closes the connection when the peer's half has ended too.

A ``ConnectionsCore`` serves many byte-stream connections (TCP) at once, as
websockets' and h11's sans-I/O objects serve one, with every connection named
by an integer id:

- inputs: ``connection_made(conn, peer, now)``, ``receive_data(conn, data, now)``
  and ``connection_lost(conn, now)``, plus the timer;
- outputs: ``connections_to_open()`` (``(conn, peer)`` pairs: the core dials),
  ``data_to_send()`` (``(conn, bytes)`` pairs, in order), ``connections_to_close()``
  (graceful: after the bytes queued before), events and the deadline.

Ids: the driver numbers the connections it accepts 1, 2, 3...; the core numbers
the ones it opens -1, -2, -3... (``OpenIds``), so neither side can pick an id
the other has used. ``connection_made`` follows an accept, or a successful open
with the id the core chose; ``connection_lost`` comes exactly once for every
connection made *or opened*, however it ended: a refused or timed-out open, a
reset, the peer's close, or the core's own ``connections_to_close``. Bytes for
an opened connection may be queued before it is made: the driver writes them
once it is. After ``connection_lost`` the id is dead; bytes queued for it are
discarded.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Generic, Protocol, TypeVar

from gossamer._types import Address, Datagram

__all__ = [
    "ConnectionsCore",
    "DatagramCore",
    "DatagramLayer",
    "DatagramOutputs",
    "EventOutputs",
    "Layer",
    "OpenIds",
    "StreamCore",
    "TimedCore",
    "Untimed",
]


class TimedCore(Protocol):
    """What every core has: the timer, the deadline and the application's events."""

    def handle_timer(self, now: float) -> None: ...

    def next_deadline(self) -> float | None: ...

    def events_received(self) -> Sequence[object]: ...


class DatagramCore(TimedCore, Protocol):
    """A core that speaks in datagrams (UDP unicast, broadcast or multicast)."""

    def receive_datagram(self, data: bytes, addr: Address, now: float) -> None: ...

    def datagrams_to_send(self) -> list[Datagram]: ...


class StreamCore(TimedCore, Protocol):
    """A core for one byte stream (one TCP connection)."""

    def receive_data(self, data: bytes, now: float) -> None: ...

    def data_to_send(self) -> bytes: ...


class ConnectionsCore(TimedCore, Protocol):
    """A core for many byte-stream connections (see the module docstring)."""

    def connection_made(self, conn: int, peer: Address, now: float) -> None: ...

    def receive_data(self, conn: int, data: bytes, now: float) -> None: ...

    def connection_lost(self, conn: int, now: float) -> None: ...

    def connections_to_open(self) -> list[tuple[int, Address]]: ...

    def data_to_send(self) -> list[tuple[int, bytes]]: ...

    def connections_to_close(self) -> list[int]: ...


class OpenIds:
    """The ids a ``ConnectionsCore`` gives the connections it opens: -1, -2, -3..."""

    __slots__ = ("_last",)

    def __init__(self) -> None:
        self._last = 0

    def next(self) -> int:
        self._last -= 1
        return self._last


T = TypeVar("T", bound=TimedCore)
C = TypeVar("C", bound=DatagramCore)
E = TypeVar("E")


class Untimed:
    """The ``TimedCore`` part of a core with no timer and no events of its own (a port in
    front of another core, a test's scripted core), for it to inherit."""

    def handle_timer(self, now: float) -> None:
        pass

    def next_deadline(self) -> float | None:
        return None

    def events_received(self) -> list[object]:
        return []


class EventOutputs(Generic[E]):
    """The application's events of a core, for it to inherit: the core appends to
    ``_events`` as it works, and ``events_received`` hands them to the driver, each call
    taking what was queued since the last one."""

    def __init__(self) -> None:
        self._events: list[E] = []

    def events_received(self) -> list[E]:
        out, self._events = self._events, []
        return out


class DatagramOutputs(EventOutputs[E]):
    """The outputs of a datagram core, for it to inherit: ``_outbox`` and
    ``datagrams_to_send`` for the datagrams, as ``EventOutputs`` for the events."""

    def __init__(self) -> None:
        super().__init__()
        self._outbox: list[Datagram] = []

    def datagrams_to_send(self) -> list[Datagram]:
        out, self._outbox = self._outbox, []
        return out


class Layer(Generic[T]):
    """Something in front of a core, ``inner``, that passes its timer and its events
    through unchanged unless a subclass overrides them."""

    def __init__(self, inner: T) -> None:
        self.inner = inner

    def handle_timer(self, now: float) -> None:
        self.inner.handle_timer(now)

    def next_deadline(self) -> float | None:
        return self.inner.next_deadline()

    def events_received(self) -> Sequence[object]:
        return self.inner.events_received()


class DatagramLayer(Layer[C]):
    """A datagram core in front of another one, ``inner``: every input and output passes
    through unchanged unless a subclass overrides it. Sealing, fan-out and snapshot
    ordering are such layers; callers keep using ``inner``'s own methods for local
    requests, and the driver pumps the outermost layer."""

    def receive_datagram(self, data: bytes, addr: Address, now: float) -> None:
        self.inner.receive_datagram(data, addr, now)

    def datagrams_to_send(self) -> list[Datagram]:
        return self.inner.datagrams_to_send()
