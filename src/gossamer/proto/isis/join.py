"""Members, and the state a joiner of an agreed view starts from.

A joiner's ISIS core must number the group's members as every other member does, know
which ids are taken (ids are never reused) and propose sequence numbers above every final
of the views before it. ``JoinState`` carries exactly that, as JSON bytes: the membership
layer hands it over with the view (``docs/cluster.md``, "Integrating it with ISIS").
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from gossamer._types import Address
from gossamer.errors import DecodeError

__all__ = ["JoinState", "Member"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Member:
    """A group member: its id (the original's 1-based hostfile line; with agreed views,
    founders 1..n and then each view's joiners in turn), its name (the trace ``node``) and
    its UDP address."""

    id: int
    name: str
    addr: Address


@dataclass(frozen=True, slots=True, kw_only=True)
class JoinState:
    """The next view's members with their ids, the first unused id, ``latest``: the
    largest sequence number the giver has seen, at least every final delivered before,
    and ``seen``: per member id, the highest of its message ids the giver finished
    (delivered or discarded). A message id at most that is of an earlier view: the joiner
    ignores a late copy of its Data (a higher one of an earlier view never had a final,
    since the giver never Acked it)."""

    members: tuple[Member, ...]
    next_id: int
    latest: int
    seen: tuple[tuple[int, int], ...] = ()

    def encode(self) -> bytes:
        body = {
            "members": [[m.id, m.name, m.addr[0], m.addr[1]] for m in self.members],
            "next_id": self.next_id,
            "latest": self.latest,
            "seen": [list(pair) for pair in self.seen],
        }
        return json.dumps(body, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, data: bytes) -> JoinState:
        """The state in ``data``; ``DecodeError`` when it is not one."""
        try:
            body: Any = json.loads(data)
            members = tuple(
                Member(id=_int(i), name=_str(name), addr=(_str(host), _int(port)))
                for i, name, host, port in body["members"]
            )
            seen = tuple((_int(member), _int(top)) for member, top in body.get("seen", []))
            return cls(
                members=members,
                next_id=_int(body["next_id"]),
                latest=_int(body["latest"]),
                seen=seen,
            )
        except (ValueError, TypeError, KeyError) as exc:
            raise DecodeError("not an ISIS join state") from exc


def _int(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise TypeError("expected a non-negative integer")
    return value


def _str(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError("expected a string")
    return value
