"""Checkers of the views guarantees over what members installed (``docs/cluster.md``).

A run is recorded as ``Installs``: for every member incarnation ``(name, incarnation)``,
the views it installed in order, as ``Installed`` records. The checks return
human-readable violations (empty: the guarantee held):

- ``check_agreement``: every two incarnations that install view v install the same
  members for it (so no two views are installed with one id);
- ``check_sequences``: each incarnation installs views with ids increasing by exactly one
  (no view skipped, none repeated), so two members present in the same views installed
  the same sequence of them;
- ``check_majority``: every view after the first was accepted by a majority of the view
  before it (``agreed_by``) and keeps a majority of its members: the primary-partition
  rule;
- ``check_state``: a joiner's first view comes with the state at the cut of the view
  before it (``cut_state`` of that agreed view), a founder's first view is view 1;
- ``check_converged``: at the end, every live incarnation is in one view whose members
  are exactly the live incarnations (liveness, once faults stop).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gossamer.proto.views.model import MemberKey, View

__all__ = [
    "Installed",
    "Installs",
    "check_agreement",
    "check_all",
    "check_converged",
    "check_majority",
    "check_sequences",
    "check_state",
    "cut_state",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class Installed:
    """One view as a member installed it."""

    id: int
    members: tuple[MemberKey, ...]
    agreed_by: tuple[str, ...]
    state: bytes | None = None

    @classmethod
    def of(cls, view: View, agreed_by: tuple[str, ...], state: bytes | None) -> Installed:
        return cls(
            id=view.id, members=tuple(m.key for m in view.members), agreed_by=agreed_by, state=state
        )


Installs = Mapping[MemberKey, list[Installed]]


def cut_state(view_id: int, members: Iterable[MemberKey]) -> bytes:
    """The state a test layer hands joiners: which view it was taken at the end of."""
    return f"{view_id}:{','.join(f'{n}#{i}' for n, i in members)}".encode()


def _agreed_views(installs: Installs) -> dict[int, tuple[MemberKey, ...]]:
    views: dict[int, tuple[MemberKey, ...]] = {}
    for seq in installs.values():
        for rec in seq:
            views.setdefault(rec.id, rec.members)
    return views


def check_agreement(installs: Installs) -> list[str]:
    seen: dict[int, tuple[tuple[MemberKey, ...], MemberKey]] = {}
    out = []
    for who, seq in installs.items():
        for rec in seq:
            first = seen.setdefault(rec.id, (rec.members, who))
            if first[0] != rec.members:
                out.append(f"view {rec.id}: {first[1]} installed {first[0]}, {who} {rec.members}")
    return out


def check_sequences(installs: Installs) -> list[str]:
    out = []
    for who, seq in installs.items():
        ids = [rec.id for rec in seq]
        if any(b != a + 1 for a, b in itertools.pairwise(ids)):
            out.append(f"{who} installed views {ids}: not one after the other")
        if any(who not in rec.members for rec in seq):
            out.append(f"{who} installed a view without itself")
    return out


def check_majority(installs: Installs) -> list[str]:
    views = _agreed_views(installs)
    out = []
    for view_id, _ in sorted(views.items()):
        if view_id == 1:
            continue
        previous = views.get(view_id - 1)
        if previous is None:
            out.append(f"view {view_id} was installed, view {view_id - 1} by nobody recorded")
            continue
        names = {n for n, _ in previous}
        agreed = next(
            rec.agreed_by for seq in installs.values() for rec in seq if rec.id == view_id
        )
        if not set(agreed) <= names or 2 * len(set(agreed)) <= len(previous):
            out.append(f"view {view_id} agreed by {agreed}: no majority of {sorted(names)}")
        kept = set(views[view_id]) & set(previous)
        if 2 * len(kept) <= len(previous):
            out.append(f"view {view_id} keeps {sorted(kept)}: no majority of {sorted(names)}")
    return out


def check_state(installs: Installs) -> list[str]:
    views = _agreed_views(installs)
    out = []
    for who, seq in installs.items():
        if not seq:
            continue
        first = seq[0]
        if first.id == 1:
            continue  # a founder
        previous = views.get(first.id - 1)
        expected = None if previous is None else cut_state(first.id - 1, previous)
        if first.state != expected:
            out.append(f"{who} joined view {first.id} with state {first.state!r}, not {expected!r}")
    return out


def check_converged(installs: Installs, live: Iterable[MemberKey]) -> list[str]:
    live = sorted(live)
    finals = {who: installs[who][-1] if installs.get(who) else None for who in live}
    out = []
    for who, last in finals.items():
        if last is None:
            out.append(f"{who} is alive and installed no view")
        elif sorted(last.members) != live:
            out.append(f"{who} ends in view {last.id} of {sorted(last.members)}, live: {live}")
    return out


def check_all(installs: Installs, live: Iterable[MemberKey] | None = None) -> list[str]:
    """Every safety check, and convergence when ``live`` is given."""
    out = (
        check_agreement(installs)
        + check_sequences(installs)
        + check_majority(installs)
        + check_state(installs)
    )
    if live is not None:
        out += check_converged(installs, live)
    return out
