"""Put a datagram core behind the envelope when its wire is sealed (the I/O half).

The sans-I/O wrapper is ``gossamer.proto.sealing.SealedDatagrams``; what it needs from the
outside world is made here: the sender session's epoch from the wall clock (so a restarted
node's epoch is larger and its peers accept the new session) and its random session id from
the operating system's CSPRNG.
"""

from __future__ import annotations

import secrets
import time
from collections import Counter
from typing import TypeVar

from gossamer.proto.core import DatagramCore
from gossamer.proto.sealing import SealedDatagrams, StreamSeals
from gossamer.trace.sink import Tracer
from gossamer.wire import envelope
from gossamer.wire.mode import Wire

__all__ = ["new_session", "rejected_by", "seal_core", "stream_seals"]

C = TypeVar("C", bound=DatagramCore)


def seal_core(
    core: C, wire: Wire, *, sender: str, tracer: Tracer, layer: str
) -> C | SealedDatagrams[C]:
    """``core`` itself on the original wire, else ``core`` behind the envelope, sealing as
    ``sender`` (the node's id; unique in the group, since replay windows are per sender)."""
    if not wire.sealed:
        return core
    return SealedDatagrams(
        core, keyring=wire.keyring(), session=new_session(sender), tracer=tracer, layer=layer
    )


def new_session(sender: str) -> envelope.SenderSession:
    """A sender session that starts now: wall-clock epoch, random session id."""
    return envelope.SenderSession(
        sender=sender, epoch=time.time_ns() // 1000, randbytes=secrets.token_bytes
    )


def stream_seals(wire: Wire, *, me: str, tracer: Tracer, layer: str) -> StreamSeals | None:
    """A node's sealed-stream state on a sealed wire (``None`` on the original wire)."""
    if not wire.sealed:
        return None
    return StreamSeals(
        keyring=wire.keyring(), me=me, new_session=new_session, tracer=tracer, layer=layer
    )


def rejected_by(core: object) -> Counter[str]:
    """What the envelope refused in front of a pumped ``core``, by reason (an empty
    counter when ``core`` is not sealed)."""
    return Counter(core.rejected) if isinstance(core, SealedDatagrams) else Counter()
