"""Test support for users' tests and ours (``docs/testing.md``).

- :func:`pair` and :func:`cluster`: real groups on 127.0.0.1 sharing one sealed wire
  (:mod:`gossamer.testing.group`);
- :func:`free_port` and :func:`free_ports`: ports free for UDP, TCP or both
  (:mod:`gossamer.testing.ports`);
- :func:`sealed_wire`: a sealed wire with a fresh key;
- :class:`ScriptedConnections`: a ``ConnectionsCore`` the test drives by hand, to test a
  driver or a transport of connections (:mod:`gossamer.testing.connections`);
- :mod:`gossamer.testing.aio`: run a coroutine on each event loop, wait for a condition;
- :mod:`gossamer.testing.pytest_plugin`: the ``netns`` fixture (hosts as Linux network
  namespaces, over :mod:`gossamer.lab.netns`);
- :mod:`gossamer.testing.sim`: check that a simulated run injected its faults;
- :mod:`gossamer.testing.sweeps`: the fault cases of a simulator sweep, drawn from a
  seed, and the sweep's loop;
- :mod:`gossamer.testing.processes`: wait for a child process to say it is ready;
- :mod:`gossamer.testing.daemons`: ``gossamer node`` daemons and other servers run as
  child processes, stopped for sure.

Production code never imports this package (an import-linter contract).
"""

from __future__ import annotations

from gossamer.testing.connections import ScriptedConnections
from gossamer.testing.group import Cluster, Seat, cluster, pair
from gossamer.testing.ports import free_port, free_ports
from gossamer.testing.wire import sealed_wire

__all__ = [
    "Cluster",
    "ScriptedConnections",
    "Seat",
    "cluster",
    "free_port",
    "free_ports",
    "pair",
    "sealed_wire",
]
