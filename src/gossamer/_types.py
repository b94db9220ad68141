"""Small shared types used across layers.

Only type aliases and tiny value types live here; anything with behaviour belongs
to the layer that owns it.
"""

from __future__ import annotations

from typing import TypeAlias

__all__ = ["Address", "Datagram", "NodeId"]

#: A node identifier as it appears in traces (``TraceEvent.node``).
NodeId: TypeAlias = str

#: An IPv4 transport address: dotted host and port.
Address: TypeAlias = tuple[str, int]

#: A datagram leaving a core: the payload and where it goes. Cores return these
#: from ``datagrams_to_send()``; a driver or the simulator puts them on the wire.
Datagram: TypeAlias = tuple[bytes, Address]
