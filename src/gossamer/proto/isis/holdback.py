"""The hold-back queue: received multicasts waiting for their turn to be delivered.

Spec, "HoldBackQueue":

- at most one entry per ``(sender, msg_id)``: the duplicate detector for Data;
- an entry is *undeliverable* while its final sequence is unknown; it then sorts
  by the receiver's own proposal ``(proposed_seq, own id)``;
- once its SeqMessage arrives it is *deliverable* and sorts by
  ``(final_seq, final_seq_proposer)``;
- order: ascending sequence; at an equal sequence an undeliverable entry goes
  **before** a deliverable one; at an equal sequence and equal deliverability the
  smaller proposer goes first;
- the head is delivered while it is deliverable.

Why "undeliverable first" (reference (a), "HoldBackQueue ordering"): an
undeliverable entry's final sequence will be at least its local proposal ``s``
(the final is the largest proposal, and ours is one of them), but its final
proposer may be smaller than any deliverable entry's at ``s``; so a deliverable
entry at ``s`` must wait behind it. Proposals of one process strictly increase,
so ``(sequence, proposer)`` is unique and the order is total.

Implemented as a binary heap with lazy invalidation: re-keying an entry pushes
a new heap item and bumps the entry's version, so the stale item is skipped
when it surfaces. Every operation is O(log n).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from gossamer.errors import LocalProtocolError

__all__ = ["HoldBackQueue", "MsgKey", "PendingMsg"]

#: ``(sender, msg_id)``: identifies a multicast message (the original's ``MsgIdentifier``).
MsgKey = tuple[int, int]


@dataclass(slots=True, kw_only=True)
class PendingMsg:
    """One entry of the hold-back queue (the original's ``PendingMsg``)."""

    sender: int
    msg_id: int
    data: bytes
    #: The receiver's own proposal, kept to resend the same Ack on a duplicate Data.
    proposal: int
    #: The proposal while undeliverable, the final sequence once deliverable.
    seq: int
    proposer: int
    deliverable: bool = False
    version: int = 0

    @property
    def key(self) -> MsgKey:
        return (self.sender, self.msg_id)

    def sort_key(self) -> tuple[int, int, int, int, int]:
        """The spec's order; sender and msg_id only make ties (which a correct run never
        has) deterministic."""
        return (self.seq, 1 if self.deliverable else 0, self.proposer, self.sender, self.msg_id)


class HoldBackQueue:
    """Entries keyed by ``(sender, msg_id)``, ordered by the spec's rule."""

    __slots__ = ("_entries", "_heap")

    def __init__(self) -> None:
        self._entries: dict[MsgKey, PendingMsg] = {}
        self._heap: list[tuple[tuple[int, int, int, int, int], int, MsgKey]] = []

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def get(self, key: MsgKey) -> PendingMsg | None:
        return self._entries.get(key)

    def add(self, *, sender: int, msg_id: int, data: bytes, proposal: int, me: int) -> PendingMsg:
        """Add an undeliverable entry carrying the local proposal ``(proposal, me)``."""
        key = (sender, msg_id)
        if key in self._entries:
            raise LocalProtocolError(
                "message already in the hold-back queue", sender=sender, msg_id=msg_id
            )
        entry = PendingMsg(
            sender=sender, msg_id=msg_id, data=data, proposal=proposal, seq=proposal, proposer=me
        )
        self._entries[key] = entry
        self._push(entry)
        return entry

    def mark_deliverable(self, key: MsgKey, final_seq: int, proposer: int) -> PendingMsg:
        """Record the final sequence of an entry and re-sort it."""
        entry = self._entries.get(key)
        if entry is None:
            raise LocalProtocolError("no such message in the hold-back queue", key=key)
        entry.seq = final_seq
        entry.proposer = proposer
        entry.deliverable = True
        entry.version += 1
        self._push(entry)
        return entry

    def discard(self, key: MsgKey) -> PendingMsg:
        """Remove an entry that will never be delivered (a crashed sender's, see core)."""
        entry = self._entries.pop(key, None)
        if entry is None:
            raise LocalProtocolError("no such message in the hold-back queue", key=key)
        entry.version += 1
        return entry

    def head(self) -> PendingMsg | None:
        """The first entry in the spec's order, or ``None`` when empty."""
        heap = self._heap
        while heap:
            _, version, key = heap[0]
            entry = self._entries.get(key)
            if entry is not None and entry.version == version:
                return entry
            heapq.heappop(heap)
        return None

    def pop_deliverable(self) -> list[PendingMsg]:
        """Remove and return the entries from the head while the head is deliverable, in
        order (an empty list when the head is not deliverable)."""
        heap = self._heap
        entries = self._entries
        ready: list[PendingMsg] = []
        while heap:
            _, version, key = heap[0]
            entry = entries.get(key)
            if entry is not None and entry.version == version:
                if not entry.deliverable:
                    break
                del entries[key]
                ready.append(entry)
            heapq.heappop(heap)  # delivered now, or stale (re-keyed or discarded)
        return ready

    def ordered(self) -> list[PendingMsg]:
        """Every entry in the spec's order (for state dumps and tests; O(n log n))."""
        return sorted(self._entries.values(), key=PendingMsg.sort_key)

    def _push(self, entry: PendingMsg) -> None:
        heapq.heappush(self._heap, (entry.sort_key(), entry.version, entry.key))
