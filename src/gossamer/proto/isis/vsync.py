"""Checkers of virtual synchrony: ISIS on agreed views, over what group members recorded
(``docs/cluster.md``, "ISIS on the views").

A run is recorded as one ``MemberLog`` per member incarnation: the views it installed,
what it delivered in each, the application state it had when it installed each (a
joiner: the state it was given) and what it multicast. Messages are named by their
payload, which the workload makes unique, so that a message withdrawn by a view change
and multicast again in the next view is one message. Each check returns human-readable
violations (empty: the guarantee held):

- ``check_same_deliveries``: two members that install views v and v+1 delivered the
  same messages in v, in the same order;
- ``check_cut_state``: every member that installs view v has the same application state
  then (a joiner the state it was given): the state reflects exactly the messages
  delivered in the views before;
- ``check_one_view``: a message is delivered in one view, by everyone who delivers it;
- ``check_integrity``: a member delivers a message at most once, and only one that was
  multicast;
- ``check_total_order``: any two members deliver the messages they both deliver in the
  same relative order;
- ``check_validity``: at the end, every message a live member multicast was delivered by
  it and by every live member that was in the group by the view it was delivered in.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

__all__ = [
    "AppState",
    "MemberLog",
    "check_all",
    "check_cut_state",
    "check_integrity",
    "check_one_view",
    "check_same_deliveries",
    "check_total_order",
    "check_validity",
]

#: A member incarnation: ``(name, incarnation)``, as the views name it.
MemberKey = tuple[str, int]

#: An application's state in these checks: how many messages it delivered, and a
#: digest chained over them in order.
AppState = tuple[int, str]
EMPTY: AppState = (0, "")


def after(state: AppState, message: str) -> AppState:
    """The state after delivering ``message``."""
    count, chain = state
    digest = hashlib.blake2b(f"{chain}|{message}".encode(), digest_size=8).hexdigest()
    return (count + 1, digest)


def encode_state(state: AppState) -> bytes:
    return f"{state[0]}:{state[1]}".encode()


def decode_state(data: bytes) -> AppState:
    count, _, chain = data.decode().partition(":")
    return (int(count), chain)


@dataclass(slots=True)
class MemberLog:
    """What one member incarnation did, as the application above the group saw it."""

    state: AppState = EMPTY
    views: list[int] = field(default_factory=list)
    states: dict[int, AppState] = field(default_factory=dict)  # at the install of each view
    deliveries: dict[int, list[str]] = field(default_factory=dict)  # per view, in order
    multicast: list[str] = field(default_factory=list)

    def installed(self, view_id: int, given: AppState | None) -> None:
        if given is not None:
            self.state = given
        self.views.append(view_id)
        self.states[view_id] = self.state
        self.deliveries[view_id] = []

    def delivered(self, message: str) -> None:
        view = self.views[-1] if self.views else 0
        self.deliveries.setdefault(view, []).append(message)
        self.state = after(self.state, message)

    def in_order(self) -> list[str]:
        return [m for v in sorted(self.deliveries) for m in self.deliveries[v]]


Logs = Mapping[MemberKey, MemberLog]


def _who(key: MemberKey) -> str:
    return f"{key[0]}#{key[1]}"


def check_same_deliveries(logs: Logs) -> list[str]:
    out = []
    by_view: dict[int, tuple[MemberKey, list[str]]] = {}
    for key, log in logs.items():
        for v in log.views:
            if v + 1 not in log.states:
                continue  # did not install the next view: nothing promised
            first = by_view.setdefault(v, (key, log.deliveries.get(v, [])))
            if first[1] != log.deliveries.get(v, []):
                out.append(
                    f"view {v}: {_who(first[0])} delivered {first[1][:8]}... "
                    f"({len(first[1])}), {_who(key)} {log.deliveries.get(v, [])[:8]}... "
                    f"({len(log.deliveries.get(v, []))})"
                )
    return out


def check_cut_state(logs: Logs) -> list[str]:
    out = []
    seen: dict[int, tuple[MemberKey, AppState]] = {}
    for key, log in logs.items():
        for v, state in log.states.items():
            first = seen.setdefault(v, (key, state))
            if first[1] != state:
                out.append(
                    f"view {v}: {_who(first[0])} installed it with state {first[1]}, "
                    f"{_who(key)} with {state}"
                )
    return out


def check_one_view(logs: Logs) -> list[str]:
    out = []
    where: dict[str, tuple[int, MemberKey]] = {}
    for key, log in logs.items():
        for v, messages in log.deliveries.items():
            for m in messages:
                first = where.setdefault(m, (v, key))
                if first[0] != v:
                    out.append(
                        f"{m} delivered in view {first[0]} by {_who(first[1])}, "
                        f"in view {v} by {_who(key)}"
                    )
    return out


def check_integrity(logs: Logs) -> list[str]:
    out = []
    sent = {m for log in logs.values() for m in log.multicast}
    for key, log in logs.items():
        messages = log.in_order()
        if len(set(messages)) != len(messages):
            dups = sorted({m for m in messages if messages.count(m) > 1})
            out.append(f"{_who(key)} delivered {dups[:5]} more than once")
        never = [m for m in messages if m not in sent]
        if never:
            out.append(f"{_who(key)} delivered {never[:5]}, never multicast")
    return out


def check_total_order(logs: Logs) -> list[str]:
    out = []
    orders = {key: log.in_order() for key, log in logs.items()}
    for (a, first), (b, second) in itertools.combinations(orders.items(), 2):
        common = set(first) & set(second)
        x = [m for m in first if m in common]
        y = [m for m in second if m in common]
        if x != y:
            at = next(i for i, (p, q) in enumerate(zip(x, y, strict=True)) if p != q)
            out.append(f"{_who(a)} and {_who(b)} differ at {at}: {x[at]} against {y[at]}")
    return out


def check_validity(logs: Logs, live: Iterable[MemberKey]) -> list[str]:
    out = []
    live = [k for k in live if k in logs]
    view_of = {
        m: v for log in logs.values() for v, messages in log.deliveries.items() for m in messages
    }
    for key in live:
        for m in logs[key].multicast:
            v = view_of.get(m)
            if v is None:
                out.append(f"{m} of {_who(key)} (live) was never delivered")
                continue
            for other in live:
                log = logs[other]
                if log.views and log.views[0] <= v and m not in log.deliveries.get(v, []):
                    out.append(f"{m} (view {v}) not delivered by {_who(other)}")
    return out


def check_all(logs: Logs, live: Iterable[MemberKey] | None = None) -> list[str]:
    """Every safety check, and validity among ``live`` when given (a quiet end)."""
    out = (
        check_same_deliveries(logs)
        + check_cut_state(logs)
        + check_one_view(logs)
        + check_integrity(logs)
        + check_total_order(logs)
    )
    if live is not None:
        out += check_validity(logs, live)
    return out
