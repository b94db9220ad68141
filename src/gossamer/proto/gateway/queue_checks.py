"""Checkers of the replicated queues' promises (``docs/cluster.md``, "Replicated queues").

Pure functions over a history, so that the simulator's scenario ``queues`` and the lab's
analysis can run the same checks. A history has two sides:

- **members** (``MemberLog``, one per node incarnation): what its ``ReplicatedQueues``
  did at each position of the order (``Step``: a message enqueued, delivered to a
  consumer, acked, returned from its holder, dead-lettered), and when it had applied
  (committed) through which position (``applied``: ``(time, position)``, a joiner's
  restored state included);
- **clients**: the confirms the producers got (``Confirmed``: with the position of the
  Push and the view of the confirming node at that moment) and what the consumers
  received (``Received``).

Each checker returns a list of violations (short sentences; empty: the promise held).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

__all__ = [
    "Confirmed",
    "MemberLog",
    "Received",
    "Step",
    "check_acked_never_again",
    "check_confirm_majority",
    "check_confirmed_acked",
    "check_exclusive_holds",
    "check_logs_agree",
    "check_minority_never_confirms",
    "check_none_lost",
]


@dataclass(frozen=True, slots=True)
class Step:
    """One thing the machine did at ``position``: ``kind`` is ``enqueue``, ``deliver``
    (to ``consumer``, delivery ``attempt``), ``ack``, ``return`` or ``dead``."""

    position: int
    kind: str
    message_id: str
    consumer: str = ""
    attempt: int = 0


@dataclass(slots=True)
class MemberLog:
    """One member incarnation's side of the history."""

    steps: list[Step] = field(default_factory=list)
    #: ``(time, position)``: from ``time`` on, this member had committed through
    #: ``position`` (non-decreasing in both).
    applied: list[tuple[float, int]] = field(default_factory=list)
    #: The first position it applied itself (a joiner's state covers what came before).
    first: int = 1
    #: Ids of the messages in the state it restored (a joiner).
    restored: set[str] = field(default_factory=set)


@dataclass(frozen=True, slots=True)
class Confirmed:
    """A producer got QUEUE_CONFIRM for ``message_id`` from ``node`` at ``time``; the
    Push was at ``position`` and ``node``'s view then had ``view`` as members."""

    nonce: str
    message_id: str
    node: str
    time: float
    position: int
    view: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Received:
    """Consumer ``consumer`` received delivery ``attempt`` of ``message_id``."""

    message_id: str
    consumer: str
    attempt: int
    time: float


def _committed(log: MemberLog, message_id: str, position: int, time: float) -> bool:
    """Whether the member had stored ``message_id`` (it enqueued it itself, or its
    restored state had it) and committed through ``position`` by ``time``."""
    stored = message_id in log.restored or any(
        s.kind == "enqueue" and s.message_id == message_id for s in log.steps
    )
    return stored and any(t <= time and p >= position for t, p in log.applied)


def check_confirm_majority(
    confirms: Iterable[Confirmed], logs: Mapping[str, MemberLog]
) -> list[str]:
    """A confirmed Push was stored and committed by more than half of the confirming
    node's view when the confirm was sent (the message itself, not merely as many
    commands: a member about to leave may have applied others at those positions)."""
    bad = []
    for c in confirms:
        holders = [
            m for m in c.view
            if m in logs and _committed(logs[m], c.message_id, c.position, c.time)
        ]
        if 2 * len(holders) <= len(c.view):
            bad.append(
                f"{c.message_id} confirmed by {c.node} at {c.time:.3f} but committed by "
                f"{len(holders)} of its view of {len(c.view)} ({', '.join(sorted(holders))})"
            )
    return bad


def check_minority_never_confirms(
    confirms: Iterable[Confirmed], minority: Iterable[tuple[str, float, float]]
) -> list[str]:
    """No confirm comes from a node while it is on a minority side: ``minority`` lists
    ``(node name, from, to)`` periods (node names without incarnation)."""
    periods = list(minority)
    return [
        f"{c.message_id} confirmed by {c.node} at {c.time:.3f}, on a minority side"
        for c in confirms
        for name, start, end in periods
        if c.node.split("#", 1)[0] == name and start < c.time < end
    ]


def _acked(logs: Mapping[str, MemberLog]) -> set[str]:
    return {s.message_id for log in logs.values() for s in log.steps if s.kind == "ack"}


def check_confirmed_acked(
    confirms: Iterable[Confirmed],
    received: Iterable[Received],
    logs: Mapping[str, MemberLog],
) -> list[str]:
    """Every confirmed message was received by a consumer and acked, at least once (a
    run whose consumers kept consuming to a quiet end)."""
    got = {r.message_id for r in received}
    acked = _acked(logs)
    bad = []
    for c in confirms:
        if c.message_id not in got:
            bad.append(f"{c.message_id} (nonce {c.nonce}) confirmed, never received")
        elif c.message_id not in acked:
            bad.append(f"{c.message_id} (nonce {c.nonce}) confirmed and received, never acked")
    return bad


def check_none_lost(
    confirms: Iterable[Confirmed],
    logs: Mapping[str, MemberLog],
    stored: Mapping[str, Iterable[str]],
) -> list[str]:
    """A confirmed message is acked or still stored on every live member at the end
    (``stored``: live member -> ids its store holds)."""
    acked = _acked(logs)
    held = {member: set(ids) for member, ids in stored.items()}
    return [
        f"{c.message_id} (nonce {c.nonce}) confirmed, not acked, missing on {member}"
        for c in confirms
        if c.message_id not in acked
        for member, ids in sorted(held.items())
        if c.message_id not in ids
    ]


def check_acked_never_again(logs: Mapping[str, MemberLog]) -> list[str]:
    """No member delivers a message after it applied an ack of it."""
    bad = []
    for member, log in sorted(logs.items()):
        acked: dict[str, int] = {}
        for s in log.steps:
            if s.kind == "ack":
                acked.setdefault(s.message_id, s.position)
            elif s.kind == "deliver" and s.message_id in acked:
                bad.append(
                    f"{member} delivered {s.message_id} at {s.position}, "
                    f"acked at {acked[s.message_id]}"
                )
    return bad


def check_exclusive_holds(logs: Mapping[str, MemberLog]) -> list[str]:
    """A message goes to a consumer only when nobody holds it: between two deliveries
    of a message its holder gave it back (ack, return) in the order."""
    bad = []
    for member, log in sorted(logs.items()):
        holder: dict[str, str] = {}
        for s in log.steps:
            if s.kind == "deliver":
                if s.message_id in holder:
                    bad.append(
                        f"{member} gave {s.message_id} to {s.consumer} at {s.position} while "
                        f"{holder[s.message_id]} held it"
                    )
                holder[s.message_id] = s.consumer
            elif s.kind in ("ack", "return"):
                holder.pop(s.message_id, None)
    return bad


def check_logs_agree(logs: Mapping[str, MemberLog]) -> list[str]:
    """The members did the same things at the same positions (state machine
    replication): at each position two of them applied, their steps are equal. Give it
    the members that stayed to the end: one that left (crashed, cut off) may have
    applied, last, a message the others discarded (ISIS delivery is not uniform)."""
    at: dict[int, tuple[str, tuple[Step, ...]]] = {}
    bad = []
    for member, log in sorted(logs.items()):
        by_position: dict[int, list[Step]] = {}
        for s in log.steps:
            by_position.setdefault(s.position, []).append(s)
        last = max((p for _t, p in log.applied), default=0)
        for position in range(log.first, last + 1):
            steps = tuple(by_position.get(position, ()))
            seen = at.setdefault(position, (member, steps))
            if seen[1] != steps:
                bad.append(f"at {position}, {seen[0]} did {_show(seen[1])}, "
                           f"{member} did {_show(steps)}")
    return bad


def _show(steps: Sequence[Step]) -> str:
    return "[" + ", ".join(f"{s.kind} {s.message_id} {s.consumer}".strip() for s in steps) + "]"
