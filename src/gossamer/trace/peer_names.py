"""``PeerNames``: a trace sink that renames ``ip:port`` peers to node names.

Drivers name a remote node by the address it spoke from; the analysis joins events on
node names (the ``node`` of the other side's trace). A process that knows which node
listens where (the lab from its static peer table, the daemon from the cards of its
peers) writes its trace through this sink, and the translation happens before the event
is written. ``names`` is read at every event, so a caller may keep adding to it.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

from gossamer.trace.schema import TraceEvent
from gossamer.trace.sink import TraceSink

__all__ = ["PeerNames"]

#: An ``ip:port`` endpoint inside a trace string.
_ENDPOINT = re.compile(r"\d{1,3}(?:\.\d{1,3}){3}:\d{1,5}")


class PeerNames:
    """Renames ``ip:port`` peers (and gossip ``attrs.dests``, and the endpoints inside
    link message ids and link incarnations) to node names, then writes to ``inner``.
    Endpoints ``names`` does not know are left as they are."""

    def __init__(self, inner: TraceSink, names: Mapping[str, str]) -> None:
        self.inner = inner
        self.names = names

    def _sub(self, text: str) -> str:
        return _ENDPOINT.sub(lambda m: self.names.get(m.group(0), m.group(0)), text)

    def emit(self, event: TraceEvent) -> None:
        peer = event.peer
        changes: dict[str, Any] = {}
        if peer is not None and peer in self.names:
            changes["peer"] = self.names[peer]
        if event.layer == "gossip" and event.attrs.get("dests"):
            ids = [self.names.get(d, d) for d in event.attrs["dests"].split(",")]
            changes["attrs"] = {**event.attrs, "dests": ",".join(ids)}
        elif event.layer == "link":
            # A link message id and a link incarnation start with each end's name: the
            # sender names itself by node name, the receiver names it by its address.
            if event.msg is not None:
                changes["msg"] = self._sub(event.msg)
            if "link" in event.attrs:
                changes["attrs"] = {**event.attrs, "link": self._sub(event.attrs["link"])}
        self.inner.emit(dataclasses.replace(event, **changes) if changes else event)
