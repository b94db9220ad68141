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
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Generic, Protocol, TypeVar

from gossamer._types import Address, Datagram

__all__ = ["DatagramCore", "DatagramLayer", "StreamCore"]


class _Timed(Protocol):
    def handle_timer(self, now: float) -> None: ...

    def next_deadline(self) -> float | None: ...

    def events_received(self) -> Sequence[object]: ...


class DatagramCore(_Timed, Protocol):
    """A core that speaks in datagrams (UDP unicast, broadcast or multicast)."""

    def receive_datagram(self, data: bytes, addr: Address, now: float) -> None: ...

    def datagrams_to_send(self) -> list[Datagram]: ...


class StreamCore(_Timed, Protocol):
    """A core for one byte stream (one TCP connection)."""

    def receive_data(self, data: bytes, now: float) -> None: ...

    def data_to_send(self) -> bytes: ...


C = TypeVar("C", bound=DatagramCore)


class DatagramLayer(Generic[C]):
    """A datagram core in front of another one, ``inner``: every input and output passes
    through unchanged unless a subclass overrides it. Sealing, fan-out and snapshot
    ordering are such layers; callers keep using ``inner``'s own methods for local
    requests, and the driver pumps the outermost layer."""

    def __init__(self, inner: C) -> None:
        self.inner = inner

    def receive_datagram(self, data: bytes, addr: Address, now: float) -> None:
        self.inner.receive_datagram(data, addr, now)

    def handle_timer(self, now: float) -> None:
        self.inner.handle_timer(now)

    def next_deadline(self) -> float | None:
        return self.inner.next_deadline()

    def datagrams_to_send(self) -> list[Datagram]:
        return self.inner.datagrams_to_send()

    def events_received(self) -> Sequence[object]:
        return self.inner.events_received()
