"""The simulator's stand-in for TCP, and only the simulator's: the UDP transport's
reliable channel in ``ChannelMode.STREAM``, cutting the node's byte stream into
segments (frames split across segments, in order, reliable).

It stands apart so that the simulator's own reliable streams can replace it without
touching the node: nothing but the transport choice (``Transport.SIM_STREAM``) names it.
"""

from __future__ import annotations

from gossamer.proto.link.channel import ChannelMode
from gossamer.proto.link.records import Peer
from gossamer.proto.link.udp import UdpTransport

__all__ = ["SimStreamTransport"]


class SimStreamTransport(UdpTransport):
    """A reliable channel per peer carrying one byte stream each way."""

    mode = ChannelMode.STREAM

    def framing_lost(self, peer: Peer, now: float) -> bool:
        # A simulated stream whose framing broke is closed, like a TCP one.
        self._reset_channel(peer, "framing_lost", now)
        return True
