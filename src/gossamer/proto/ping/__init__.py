"""Ping/pong with retransmission: the foundation's demonstration core.

It is deliberately small but complete: it proves the sans-I/O contract (inputs
with ``now``, drained outputs, one deadline), retransmission with back-off,
counted rejection of malformed datagrams and trace events, and runs unchanged
in the simulator and over real UDP and TCP.
"""

from gossamer.proto.ping.core import PingConfig, PingCore, PingCounters, PingLost, PongReceived

__all__ = ["PingConfig", "PingCore", "PingCounters", "PingLost", "PongReceived"]
