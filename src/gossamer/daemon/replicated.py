"""The simplest state on a cluster's total order (``Membership``'s ``Replicated``).

A summary of what a member delivered (the daemon's own state is its queues,
``gossamer.daemon.queues``; this one serves a program that orders messages of its own,
and the tests of the order): how many messages, and a digest chained over them in
order (the state the simulator's ``isis_views`` scenario checks,
``gossamer.proto.isis.vsync``). Two members
with the same summary delivered the same messages in the same order; a joiner starts
from the members' summary, so it stays equal to theirs from then on.
"""

from __future__ import annotations

from gossamer.errors import DecodeError
from gossamer.proto.isis import Delivered
from gossamer.proto.isis.vsync import EMPTY, AppState, after, decode_state, encode_state

__all__ = ["DeliveryDigest"]


class DeliveryDigest:
    """``count`` messages delivered, ``digest`` chained over them (hex; ``""`` for none)."""

    def __init__(self) -> None:
        self.count, self.digest = EMPTY

    @property
    def state(self) -> AppState:
        """``(count, digest)``."""
        return (self.count, self.digest)

    def apply(self, delivered: Delivered) -> None:
        """Chain one delivered message: its sender, its id and its data."""
        message = f"{delivered.sender}/{delivered.msg_id}/{delivered.data.hex()}"
        self.count, self.digest = after(self.state, message)

    async def snapshot(self) -> bytes:
        return encode_state(self.state)

    def restore(self, state: bytes) -> None:
        """Start from a member's ``snapshot()``; ``DecodeError`` for anything else."""
        try:
            count, digest = decode_state(state)
            int(digest or "0", 16)
        except (UnicodeDecodeError, ValueError) as exc:
            raise DecodeError("not a delivery digest", size=len(state)) from exc
        if count < 0 or (count == 0) != (digest == ""):
            raise DecodeError("not a delivery digest", size=len(state))
        self.count, self.digest = count, digest
