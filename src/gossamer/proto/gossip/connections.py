"""The gossip core under the multi-connection contract (``gossamer.proto.core``).

``GossipCore`` names its TCP connections its own way: outbound ones by the peer's NetID
(``StreamSend(peer=...)``, ``receive_reply(peer, ...)``, ``stream_failed(peer)``), inbound
ones by a driver id (``receive_stream(conn, ...)``, ``StreamSend(conn=..., close=...)``).
``GossipConnections`` maps that onto ``ConnectionsCore``:

- the first bytes for a peer open a connection to it (an id from ``OpenIds``); later bytes
  reuse it; bytes queued while it opens leave once it is made;
- bytes on an accepted connection go to ``receive_stream(conn, ...)``, and its loss to
  ``receive_stream(conn, b"")``; bytes on an opened one go to ``receive_reply(peer, ...)``,
  and its loss (refused, reset, timed out, closed by the peer) to ``receive_reply(peer,
  b"")`` and ``stream_failed(peer)``, so that what was handed to that peer and not
  acknowledged is re-planned at once; the next bytes for the peer open a new connection;
- ``StreamSend(conn=..., close=True)`` closes an accepted connection after its bytes.

Datagrams pass through: the node's datagram socket is bound to the multicast group (as
the asyncio driver's is), so every datagram it receives is a multicast one
(``multicast=True``), except its own, which it never hears (``IP_MULTICAST_LOOP`` off).
The simulator runs gossip this way (``gossamer.sim.scenarios.gossip``); so may any
driver of ``ConnectionsCore``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from gossamer._types import Address, Datagram
from gossamer.proto.core import Layer, OpenIds
from gossamer.proto.gossip.core import StreamSend
from gossamer.wire.chatter import NetID

__all__ = ["GossipConnections", "TransportCore"]


class TransportCore(Protocol):
    """What ``GossipConnections`` drives: ``GossipCore``, or a baseline with the same
    surface (``bench/gossip_baselines.py``). ``stream_failed`` is optional."""

    def broadcast(self, destinations: Sequence[NetID], payload: object, now: float) -> str: ...

    def receive_datagram(
        self, data: bytes, addr: Address, now: float, *, multicast: bool = False
    ) -> None: ...

    def receive_stream(self, conn: int, data: bytes, now: float) -> None: ...

    def receive_reply(self, peer: NetID, data: bytes, now: float) -> None: ...

    def datagrams_to_send(self) -> list[Datagram]: ...

    def streams_to_send(self) -> list[StreamSend]: ...

    def events_received(self) -> Sequence[object]: ...

    def handle_timer(self, now: float) -> None: ...

    def next_deadline(self) -> float | None: ...


class GossipConnections(Layer[TransportCore]):
    """A gossip core (``inner``; also ``core``) as a ``ConnectionsCore``; ``own`` is the
    node's address (see the module docstring)."""

    def __init__(self, core: TransportCore, *, own: Address) -> None:
        super().__init__(core)
        self.core = core
        self.own = own
        self._ids = OpenIds()
        self._outbound: dict[NetID, int] = {}
        self._peer_of: dict[int, NetID] = {}
        self._open: list[tuple[int, Address]] = []
        self._out: list[tuple[int, bytes]] = []
        self._close: list[int] = []
        self._stream_failed = getattr(core, "stream_failed", None)

    # -- inputs ------------------------------------------------------------------------

    def receive_datagram(self, data: bytes, addr: Address, now: float) -> None:
        if addr != self.own:
            self.core.receive_datagram(data, addr, now, multicast=True)

    def connection_made(self, conn: int, peer: Address, now: float) -> None:
        pass  # an accepted connection is known by its bytes; an opened one by its peer

    def receive_data(self, conn: int, data: bytes, now: float) -> None:
        peer = self._peer_of.get(conn)
        if peer is None:
            self.core.receive_stream(conn, data, now)
        else:
            self.core.receive_reply(peer, data, now)

    def connection_lost(self, conn: int, now: float) -> None:
        peer = self._peer_of.pop(conn, None)
        if peer is None:
            self.core.receive_stream(conn, b"", now)
            return
        if self._outbound.get(peer) == conn:
            del self._outbound[peer]
        self.core.receive_reply(peer, b"", now)
        if self._stream_failed is not None:
            self._stream_failed(peer, now)

    # -- outputs -----------------------------------------------------------------------

    def datagrams_to_send(self) -> list[Datagram]:
        self._sort()  # called first by the simulator's pump: the streams' output is ready
        return self.core.datagrams_to_send()

    def connections_to_open(self) -> list[tuple[int, Address]]:
        self._sort()
        opened, self._open = self._open, []
        return opened

    def data_to_send(self) -> list[tuple[int, bytes]]:
        self._sort()
        out, self._out = self._out, []
        return out

    def connections_to_close(self) -> list[int]:
        self._sort()
        closed, self._close = self._close, []
        return closed

    def _sort(self) -> None:
        """Turn the core's ``StreamSend`` list into opens, bytes and closes."""
        for item in self.core.streams_to_send():
            if item.peer is not None:
                conn = self._outbound.get(item.peer)
                if conn is None:
                    conn = self._outbound[item.peer] = self._ids.next()
                    self._peer_of[conn] = item.peer
                    self._open.append((conn, (item.peer.host, item.peer.port)))
                if item.data:
                    self._out.append((conn, item.data))
            elif item.conn is not None:
                if item.data:
                    self._out.append((item.conn, item.data))
                if item.close:
                    self._close.append(item.conn)
