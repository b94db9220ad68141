"""How far a member has committed the cluster's order: one small datagram.

A member of a cluster whose queues ride on the total order reports to the other members,
after each batch of commands it committed to its store (and again now and then, since a
datagram may be lost), the highest position of the order it has committed
(``applied_through``); the node that proposed a Push confirms it once a majority of
the view reports at least its position (``proto.gateway.commits``). One report is
``GCR1`` then msgpack ``[member, view_id, position]``: ``member`` is the reporting
incarnation (``name#incarnation``), ``view_id`` the view it is in, ``position`` the
count of commands it committed. The datagram travels sealed with the cluster key.

``decode`` raises ``DecodeError`` only.
"""

from __future__ import annotations

from typing import Final, NamedTuple

import msgpack

from gossamer.errors import DecodeError

__all__ = ["MAGIC", "CommitReport", "decode_report", "encode_report"]

MAGIC: Final = b"GCR1"
_U63: Final = 1 << 63
_MAX: Final = 1024


class CommitReport(NamedTuple):
    """``member`` (``name#incarnation``) committed the order through ``position`` in view
    ``view_id``."""

    member: str
    view_id: int
    position: int


def encode_report(report: CommitReport) -> bytes:
    packed: bytes = msgpack.packb(list(report))
    return MAGIC + packed


def decode_report(data: bytes) -> CommitReport:
    """The report in ``data``; ``DecodeError`` naming what is wrong otherwise."""
    if len(data) > _MAX:
        raise DecodeError("commit report too long", size=len(data))
    if not data.startswith(MAGIC):
        raise DecodeError("not a commit report")
    try:
        body = msgpack.unpackb(data[len(MAGIC):], use_list=True, raw=False)
    except (ValueError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError) as exc:
        raise DecodeError(f"malformed commit report: {exc}") from exc
    if not isinstance(body, list) or len(body) != 3:
        raise DecodeError("a commit report is [member, view_id, position]")
    member, view_id, position = body
    if not isinstance(member, str) or not 0 < len(member) <= 300:
        raise DecodeError("commit report: bad member")
    for value in (view_id, position):
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < _U63:
            raise DecodeError("commit report: bad number")
    return CommitReport(member, view_id, position)
