"""A ``ConnectionsCore`` a test drives by hand, for testing what carries one.

A driver (``gossamer.aio.connections.ConnectionsDriver``) or a transport (the simulator's
``gossamer.sim.streams``) is tested with a core that does what the test says and
remembers what happened to it: :class:`ScriptedConnections`. A core of your own that
talks to another one over connections can be tested against it the same way.
"""

from __future__ import annotations

from gossamer._types import Address
from gossamer.proto.core import OpenIds, Untimed

__all__ = ["ScriptedConnections"]


class ScriptedConnections(Untimed):
    """A ``ConnectionsCore`` (``gossamer.proto.core``) that opens, sends and closes on
    request and records every input.

    Requests, between two steps of whatever drives it: :meth:`dial` opens a connection
    (ids -1, -2, ..., as ``OpenIds`` gives them), :meth:`send` queues bytes (also for a
    connection not made yet), :meth:`close` closes after the bytes queued before.

    Inputs are kept with the time they came: ``made`` holds ``(conn, peer, now)``,
    ``received`` ``(conn, data, now)``, ``lost`` ``(conn, now)``, and ``log`` the
    ``(kind, conn)`` of each, ``kind`` being ``made``, ``data`` or ``lost``, in order.

    ``echo`` (a factor, 0 for none) sends what a connection this core accepted (a
    positive id) receives back that many times. The core has no timer and no events
    (``Untimed``).
    """

    def __init__(self, *, echo: int = 0) -> None:
        self.echo = echo
        self.ids = OpenIds()
        self.made: list[tuple[int, Address, float]] = []
        self.received: list[tuple[int, bytes, float]] = []
        self.lost: list[tuple[int, float]] = []
        self.log: list[tuple[str, int]] = []
        self._open: list[tuple[int, Address]] = []
        self._out: list[tuple[int, bytes]] = []
        self._close: list[int] = []

    # -- requests ------------------------------------------------------------------------

    def dial(self, peer: Address, first: bytes = b"") -> int:
        """Open a connection to ``peer`` (sending ``first`` once it is made); its id."""
        conn = self.ids.next()
        self._open.append((conn, peer))
        if first:
            self._out.append((conn, first))
        return conn

    def send(self, conn: int, data: bytes, *, close: bool = False) -> None:
        """Queue ``data`` on ``conn``; with ``close``, close it after them."""
        self._out.append((conn, data))
        if close:
            self._close.append(conn)

    def close(self, conn: int) -> None:
        """Close ``conn`` once what was queued before is sent."""
        self._close.append(conn)

    # -- what happened -------------------------------------------------------------------

    def kinds(self, conn: int) -> list[str]:
        """What happened to ``conn``, in order: ``made``, ``data``, ``lost``."""
        return [kind for kind, c in self.log if c == conn]

    def data(self, conn: int) -> bytes:
        """Every byte received on ``conn``, in order."""
        return b"".join(data for c, data, _ in self.received if c == conn)

    # -- the ConnectionsCore contract ----------------------------------------------------

    def connection_made(self, conn: int, peer: Address, now: float) -> None:
        self.made.append((conn, peer, now))
        self.log.append(("made", conn))

    def receive_data(self, conn: int, data: bytes, now: float) -> None:
        self.received.append((conn, data, now))
        self.log.append(("data", conn))
        if self.echo and conn > 0:
            self._out.append((conn, data * self.echo))

    def connection_lost(self, conn: int, now: float) -> None:
        self.lost.append((conn, now))
        self.log.append(("lost", conn))

    def connections_to_open(self) -> list[tuple[int, Address]]:
        out, self._open = self._open, []
        return out

    def data_to_send(self) -> list[tuple[int, bytes]]:
        out, self._out = self._out, []
        return out

    def connections_to_close(self) -> list[int]:
        out, self._close = self._close, []
        return out
