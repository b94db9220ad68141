"""asyncio drivers: the only code that touches sockets, the event loop and real time.

A driver is the thin pump of DESIGN.md ("The sans-I/O core contract"): it feeds a
sans-I/O core its input with ``now`` (``time.monotonic()``: the loop's clock at full
resolution), flushes every output after every input and keeps one timer at the core's
``next_deadline()``. It makes no protocol decision.

- ``loop``: ``run``/``new_event_loop`` on uvloop when installed, else the default loop.
- ``datagram``: ``open_datagram(core, sock)`` runs any ``DatagramCore`` on UDP sockets.
- ``sockets``: bound UDP sockets for unicast, broadcast and multicast.
- ``stream``: ``serve(factory, host, port)`` / ``connect(core, host, port)`` run one
  ``StreamCore`` per TCP connection, with write flow control.
- ``faults``: ``FaultInjector`` applies a ``gossamer.faults.FaultPlan`` to real
  datagrams, counting and tracing every fault (``layer="net", kind="fault"``).
"""

from gossamer.aio._pump import DriverCounters
from gossamer.aio.datagram import DatagramDriver, open_datagram
from gossamer.aio.faults import FaultInjector
from gossamer.aio.loop import loop_factory, loop_name, new_event_loop, run, uvloop_available
from gossamer.aio.sockets import (
    broadcast_socket,
    join_group,
    multicast_socket,
    set_multicast_send,
    udp_socket,
)
from gossamer.aio.stream import StreamDriver, StreamServer, connect, serve

__all__ = [
    "DatagramDriver",
    "DriverCounters",
    "FaultInjector",
    "StreamDriver",
    "StreamServer",
    "broadcast_socket",
    "connect",
    "join_group",
    "loop_factory",
    "loop_name",
    "multicast_socket",
    "new_event_loop",
    "open_datagram",
    "run",
    "serve",
    "set_multicast_send",
    "udp_socket",
    "uvloop_available",
]
