"""A TCP-transport link node under the multi-connection contract
(``gossamer.proto.core.ConnectionsCore``), for drivers that own connections by id (the
simulator's ``StreamNetwork``).

``LinkNode`` with ``Transport.TCP`` runs one :class:`~.tcp.StreamEndpoint` per
connection and asks for connections with ``Connect`` events. ``LinkConnections`` maps
that onto connection ids:

- dialling: a ``Connect(peer)`` from the node opens a connection (an id from
  ``OpenIds``) whose endpoint says HELLO first; the greeting and whatever the node queues
  for the peer leave as soon as the connection is made;
- accepting: ``connection_made`` with a driver id (positive) creates an endpoint that
  waits for the peer's HELLO;
- bytes in go to the connection's endpoint; bytes out are each endpoint's output (the
  first connection with a peer carries the node's frames for it, in order);
- a lost connection takes the peer's links down (``transport_lost``); an endpoint that
  will send nothing more (framing broke, a bad HELLO, its peer's other connection gone)
  is closed, once.

Every other node event passes through ``events_received``; local requests are the
node's (``inner``) own methods.
"""

from __future__ import annotations

from gossamer._types import Address
from gossamer.proto.core import Layer, OpenIds
from gossamer.proto.link.events import Connect, Event
from gossamer.proto.link.node import LinkNode
from gossamer.proto.link.tcp import StreamEndpoint

__all__ = ["LinkConnections"]


class LinkConnections(Layer[LinkNode]):
    """A TCP-transport :class:`LinkNode` (``inner``) as a ``ConnectionsCore``."""

    def __init__(self, node: LinkNode) -> None:
        super().__init__(node)
        self._ids = OpenIds()
        #: The endpoint of each live connection, in the order they were opened or made.
        self._endpoints: dict[int, StreamEndpoint] = {}
        #: Connections to dial, asked for since the driver last looked.
        self._dialling: dict[int, Address] = {}
        self._events: list[Event] = []

    def _pull(self) -> None:
        """Take the node's events: a ``Connect`` becomes a connection to open."""
        node = self.inner
        for event in node.events_received():
            if isinstance(event, Connect):
                conn = self._ids.next()
                self._endpoints[conn] = node.stream_endpoint(event.peer)
                self._dialling[conn] = event.peer
            else:
                self._events.append(event)

    # -- inputs ------------------------------------------------------------------------

    def connection_made(self, conn: int, peer: Address, now: float) -> None:
        if conn > 0:  # accepted: the peer's HELLO will name it
            self._endpoints[conn] = self.inner.stream_endpoint(None)

    def receive_data(self, conn: int, data: bytes, now: float) -> None:
        endpoint = self._endpoints.get(conn)
        if endpoint is not None:
            endpoint.receive_data(data, now)

    def connection_lost(self, conn: int, now: float) -> None:
        endpoint = self._endpoints.pop(conn, None)
        if endpoint is not None:
            endpoint.abort("transport_lost", now)

    # -- outputs -----------------------------------------------------------------------

    def data_to_send(self) -> list[tuple[int, bytes]]:
        self._pull()
        out = [(conn, data) for conn, endpoint in self._endpoints.items()
               if (data := endpoint.data_to_send())]
        self.inner.dirty_endpoints()  # their output was taken above: forget it
        return out

    def connections_to_close(self) -> list[int]:
        closing = [conn for conn, endpoint in self._endpoints.items() if endpoint.closing]
        for conn in closing:
            del self._endpoints[conn]  # closed once; its connection_lost finds nothing
        return closing

    def connections_to_open(self) -> list[tuple[int, Address]]:
        self._pull()
        opened = list(self._dialling.items())
        self._dialling.clear()
        return opened

    def events_received(self) -> list[Event]:
        self._pull()
        out, self._events = self._events, []
        return out
