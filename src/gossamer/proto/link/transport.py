"""What a link node asks of its transport (``udp``, ``tcp``): the node
hands it frames for a peer, marks the peer ``dirty`` and asks for deadlines. What a
transport asks of the node is :class:`~.host.TransportHost`: it gives the node the
bytes that arrive and says when a peer's transport is lost."""

from __future__ import annotations

from gossamer._types import Datagram
from gossamer.proto.link.records import Peer

__all__ = ["LinkTransport"]


class LinkTransport:
    """How a node's frames reach its peers. The node marks a peer ``dirty`` after
    handing it output; the transport sends what is dirty when asked to."""

    def send_frame(self, peer: Peer, frame: bytes) -> None:
        """Queue one encoded frame for ``peer``."""
        raise NotImplementedError

    def send_data(self, peer: Peer, header: bytes, payload: bytes) -> None:
        """Queue one DATA frame for ``peer``, given as its header and its payload."""
        raise NotImplementedError

    def flush(self, now: float) -> None:
        """Send the output of local requests (once per driver loop iteration)."""

    def handle_timer(self, now: float) -> None:
        """The node's deadline passed."""

    def next_deadline(self, retry: float | None, now: float) -> float | None:
        """The node's next deadline, given its earliest link retry ``retry``."""
        return retry

    def links_changed(self, peer: Peer) -> None:
        """``peer`` gained its first link or lost its last one."""

    def datagrams_to_send(self) -> list[Datagram]:
        """Datagram transports: what to send, with where."""
        return []
