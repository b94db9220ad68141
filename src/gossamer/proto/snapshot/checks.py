"""Checks on a global snapshot: the parts every member recorded for one snapshot id (pure).

``parts`` maps each member's name to its :meth:`SnapshotDone.to_json` (or the same JSON
read back from disk), for members whose local state comes from a
:class:`~gossamer.proto.snapshot.node.SnapshotNode` over ISIS.

- :func:`check_cut`: for every channel p -> q, the DataMessages p had sent when it
  recorded equal those q had received when it recorded plus those recorded on the
  channel (on a group with agreed views, those of the view the snapshot belongs to).
  That is the definition of a consistent cut with no message lost or counted twice,
  counted per channel; it holds for any workload.
- :func:`check_bank`: the bank workload's money is all there (``bank``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gossamer.proto.snapshot.bank import from_json, local_value, transfer_amount

__all__ = ["check_bank", "check_cut"]


def _isis(part: Mapping[str, Any]) -> Mapping[str, Any]:
    state: Mapping[str, Any] = part["local_state"]["isis"]
    return state


def _traffic(part: Mapping[str, Any]) -> tuple[int, Mapping[str, int]]:
    """``(Data sent, {sender: Data received})`` as a member recorded them: in its agreed
    view when it has one (a snapshot on views belongs to one view), else since it
    started."""
    isis = _isis(part)
    agreed = isis.get("agreed")
    if agreed:
        return int(agreed["sent"]), agreed["received_from"]
    return int(isis["msg_id"]), isis.get("received_from", {})


def check_cut(parts: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Violations of per-channel consistency (empty when the cut is consistent)."""
    problems: list[str] = []
    for q, part in sorted(parts.items()):
        received = _traffic(part)[1]
        for p, channel in sorted(part["channels"].items()):
            if channel.get("closed_by") != "marker" or p not in parts:
                continue  # a removed member's channel has no defined end
            sent = _traffic(parts[p])[0]
            before = int(received.get(p, 0))
            in_flight = len(channel["messages"])
            if sent != before + in_flight:
                problems.append(
                    f"cut: {p} had sent {sent} messages when it recorded, {q} had received "
                    f"{before} and recorded {in_flight} on the channel"
                )
            last = int(_isis(parts[p])["msg_id"])
            for message in channel["messages"]:
                if int(message["msg_id"]) > last:
                    problems.append(
                        f"cut: channel {p}->{q} holds {p}/{message['msg_id']}, sent after "
                        f"{p} recorded"
                    )
    missing = sorted(
        f"{q}<-{p}"
        for q, part in parts.items()
        for p in parts
        if p != q and p not in part["channels"]
    )
    problems += [f"cut: no state for channel {name}" for name in missing]
    return problems


def check_bank(parts: Mapping[str, Mapping[str, Any]], *, total: int) -> tuple[int, list[str]]:
    """The money found in the snapshot, and a violation if it is not ``total``."""
    found = 0
    for part in parts.values():
        state = part["local_state"]
        me = int(state["isis"]["id"])
        found += local_value(state)
        for channel in part["channels"].values():
            found += sum(transfer_amount(from_json(m["data"]), me) for m in channel["messages"])
    problems = [] if found == total else [f"bank: the snapshot holds {found}, not {total}"]
    return found, problems
