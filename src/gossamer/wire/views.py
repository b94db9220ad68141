"""Wire format of the views protocol (``gossamer.proto.views``): agreed group membership.

Every datagram is one message: a common header, then the body of its type::

    0      2     3      4            12        13
    +------+-----+------+------------+---------+--------------+-----------------+------+
    | "GV" | ver | type | view (u64) | len (n) | sender (n B) | incarnation u64 | body |
    +------+-----+------+------------+---------+--------------+-----------------+------+

``ver`` is 1; ``view`` is the sender's current view id (0: it has none yet, a joiner);
the sender is named by its member name (UTF-8, 1 to 255 bytes) and incarnation. Bodies:

========== ==== =======================================================================
type       code body
========== ==== =======================================================================
PREPARE    1    ballot
PROMISE    2    ballot, flag (u8: 1 if something was accepted), [accepted ballot, members]
PROPOSE    3    ballot, members
ACCEPTED   4    ballot (the sender flushed and accepts the proposal of this ballot)
NACK       5    ballot (the higher one the sender promised, or the refused one)
INSTALL    6    view id (u64), members, installer name, agreed names, flag, [state]
INSTALLED  7    view id (u64)
CHANGE     8    suspected members, joining members
STATUS     9    (empty: the header says the sender's view)
EXCLUDED   10   view id (u64), incarnation (u64): the receiver's incarnation named is not
                in that view of the sender's (another incarnation at the same address,
                a restarted process, ignores it)
========== ==== =======================================================================

A ballot is ``round (u32), len (u8), name``; a list of members is ``count (u16)`` members,
each ``name, incarnation (u64), host (len u8 + UTF-8), port (u16)``; a list of names is
``count (u16)`` names; ``state`` is ``len (u32)`` bytes. Bounds: at most
``MAX_MEMBERS`` members in a list and ``MAX_STATE`` bytes of state (larger state belongs
on a stream: the layer above can hand over a reference); a datagram is at most
``MAX_SIZE`` bytes. Decoders raise only ``DecodeError``; encoders refuse, with
``ValueError``, what a decoder would refuse.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum

from gossamer.errors import DecodeError
from gossamer.wire.buffer import Buffer

__all__ = [
    "MAGIC",
    "MAX_MEMBERS",
    "MAX_SIZE",
    "MAX_STATE",
    "Ballot",
    "MemberRecord",
    "ViewsMessage",
    "ViewsType",
    "decode",
    "encode",
]

MAGIC = b"GV"
VERSION = 1
MAX_MEMBERS = 1024
MAX_STATE = 32 * 1024
MAX_SIZE = 65_507  # the largest UDP payload over IPv4
_HEAD = struct.Struct(">2sBB")
_U64 = 1 << 64


class ViewsType(IntEnum):
    PREPARE = 1
    PROMISE = 2
    PROPOSE = 3
    ACCEPTED = 4
    NACK = 5
    INSTALL = 6
    INSTALLED = 7
    CHANGE = 8
    STATUS = 9
    EXCLUDED = 10


@dataclass(frozen=True, slots=True, kw_only=True, order=True)
class Ballot:
    """A proposal number: rounds compare first, the proposer's name breaks ties, so two
    proposers never share a ballot."""

    round: int
    name: str


@dataclass(frozen=True, slots=True, kw_only=True)
class MemberRecord:
    """One member: its name, its incarnation (a restarted process is a new member) and
    the address its views datagrams come from."""

    name: str
    incarnation: int
    host: str
    port: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ViewsMessage:
    """One datagram. ``view`` and the sender are in every message; the other fields are
    those of ``type`` (module docstring) and keep their defaults otherwise."""

    type: ViewsType
    #: The sender's current view id (0: none yet) and the sender, in every message.
    view: int
    sender: str
    incarnation: int
    #: PROMISE and PROPOSE: a proposed view; INSTALL: the view; CHANGE: the suspected.
    members: tuple[MemberRecord, ...] = ()
    #: PREPARE, PROMISE, PROPOSE, ACCEPTED, NACK: the ballot; PROMISE: what was accepted.
    ballot: Ballot | None = None
    accepted: Ballot | None = None
    #: CHANGE: the members that ask to join (a joiner sends itself).
    joins: tuple[MemberRecord, ...] = ()
    #: INSTALL, INSTALLED, EXCLUDED: the view meant.
    new_view: int = 0
    #: EXCLUDED: the incarnation of the receiver it is meant for.
    excluded: int = 0
    #: INSTALL: who decided it, who accepted it, and a joiner's state.
    installer: str = ""
    agreed: tuple[str, ...] = ()
    state: bytes | None = None


_BALLOT_TYPES = {
    ViewsType.PREPARE,
    ViewsType.PROMISE,
    ViewsType.PROPOSE,
    ViewsType.ACCEPTED,
    ViewsType.NACK,
}
_VIEW_TYPES = {ViewsType.INSTALL, ViewsType.INSTALLED, ViewsType.EXCLUDED}
_TYPES = frozenset(int(t) for t in ViewsType)


# -- encoding --------------------------------------------------------------------


def _push_name(buf: bytearray, name: str) -> None:
    raw = name.encode()
    if not 1 <= len(raw) <= 255:
        raise ValueError(f"name {name!r} must be 1 to 255 bytes of UTF-8")
    buf.append(len(raw))
    buf += raw


def _push_u64(buf: bytearray, value: int, what: str) -> None:
    if not 0 <= value < _U64:
        raise ValueError(f"{what} {value} does not fit in 64 bits")
    buf += value.to_bytes(8, "big")


def _push_ballot(buf: bytearray, ballot: Ballot | None) -> None:
    if ballot is None:
        raise ValueError("this message type needs a ballot")
    if not 0 <= ballot.round < 1 << 32:
        raise ValueError(f"ballot round {ballot.round} does not fit in 32 bits")
    buf += ballot.round.to_bytes(4, "big")
    _push_name(buf, ballot.name)


def _push_members(buf: bytearray, members: tuple[MemberRecord, ...]) -> None:
    if len(members) > MAX_MEMBERS:
        raise ValueError(f"{len(members)} members exceed {MAX_MEMBERS}")
    buf += len(members).to_bytes(2, "big")
    for m in members:
        _push_name(buf, m.name)
        _push_u64(buf, m.incarnation, "incarnation")
        _push_name(buf, m.host)
        if not 0 <= m.port < 1 << 16:
            raise ValueError(f"port {m.port} does not fit in 16 bits")
        buf += m.port.to_bytes(2, "big")


def encode(msg: ViewsMessage) -> bytes:
    """The datagram for ``msg``; ``ValueError`` for a value the format cannot carry."""
    buf = bytearray(_HEAD.pack(MAGIC, VERSION, msg.type))
    _push_u64(buf, msg.view, "view")
    _push_name(buf, msg.sender)
    _push_u64(buf, msg.incarnation, "incarnation")
    kind = msg.type
    if kind in _BALLOT_TYPES:
        _push_ballot(buf, msg.ballot)
    if kind is ViewsType.PROMISE:
        buf.append(0 if msg.accepted is None else 1)
        if msg.accepted is not None:
            _push_ballot(buf, msg.accepted)
            _push_members(buf, msg.members)
    elif kind is ViewsType.PROPOSE:
        _push_members(buf, msg.members)
    elif kind in _VIEW_TYPES:
        _push_u64(buf, msg.new_view, "view id")
    elif kind is ViewsType.CHANGE:
        _push_members(buf, msg.members)
        _push_members(buf, msg.joins)
    if kind is ViewsType.EXCLUDED:
        _push_u64(buf, msg.excluded, "incarnation")
    if kind is ViewsType.INSTALL:
        _push_members(buf, msg.members)
        _push_name(buf, msg.installer)
        if len(msg.agreed) > MAX_MEMBERS:
            raise ValueError(f"{len(msg.agreed)} names exceed {MAX_MEMBERS}")
        buf += len(msg.agreed).to_bytes(2, "big")
        for name in msg.agreed:
            _push_name(buf, name)
        buf.append(0 if msg.state is None else 1)
        if msg.state is not None:
            if len(msg.state) > MAX_STATE:
                raise ValueError(f"state of {len(msg.state)} bytes exceeds {MAX_STATE}")
            buf += len(msg.state).to_bytes(4, "big")
            buf += msg.state
    if len(buf) > MAX_SIZE:
        raise ValueError(f"message of {len(buf)} bytes exceeds {MAX_SIZE}")
    return bytes(buf)


# -- decoding --------------------------------------------------------------------


def _pull_name(buf: Buffer, what: str) -> str:
    length = buf.pull_uint8(f"{what} length")
    if length == 0:
        raise DecodeError(f"empty {what}", offset=buf.position)
    try:
        return buf.pull_bytes(length, what).decode()
    except UnicodeDecodeError:
        raise DecodeError(f"{what} is not UTF-8", offset=buf.position) from None


def _pull_ballot(buf: Buffer) -> Ballot:
    return Ballot(round=buf.pull_uint32("ballot round"), name=_pull_name(buf, "ballot name"))


def _pull_count(buf: Buffer, what: str) -> int:
    count = buf.pull_uint16(f"{what} count")
    if count > MAX_MEMBERS:
        raise DecodeError(f"{count} {what} exceed {MAX_MEMBERS}", offset=buf.position)
    return count


def _pull_members(buf: Buffer) -> tuple[MemberRecord, ...]:
    return tuple(
        MemberRecord(
            name=_pull_name(buf, "member name"),
            incarnation=buf.pull_uint64("incarnation"),
            host=_pull_name(buf, "member host"),
            port=buf.pull_uint16("member port"),
        )
        for _ in range(_pull_count(buf, "members"))
    )


def _pull_flag(buf: Buffer, what: str) -> bool:
    flag = buf.pull_uint8(what)
    if flag > 1:
        raise DecodeError(f"{what} flag is {flag}, not 0 or 1", offset=buf.position)
    return flag == 1


def decode(data: bytes) -> ViewsMessage:
    """Decode exactly one datagram; trailing bytes are malformed. Raises only
    ``DecodeError``."""
    if len(data) > MAX_SIZE:
        raise DecodeError(f"datagram of {len(data)} bytes exceeds {MAX_SIZE}")
    buf = Buffer(data)
    magic, version, raw_type = _HEAD.unpack(buf.pull_bytes(_HEAD.size, "header"))
    for bad, reason in (
        (magic != MAGIC, "bad magic: not a gossamer views datagram"),
        (version != VERSION, f"unsupported version {version}"),
        (raw_type not in _TYPES, f"unknown message type {raw_type}"),
    ):
        if bad:
            raise DecodeError(reason, offset=0)
    kind = ViewsType(raw_type)
    view = buf.pull_uint64("view")
    sender = _pull_name(buf, "sender")
    incarnation = buf.pull_uint64("incarnation")
    ballot = _pull_ballot(buf) if kind in _BALLOT_TYPES else None
    accepted: Ballot | None = None
    members: tuple[MemberRecord, ...] = ()
    joins: tuple[MemberRecord, ...] = ()
    new_view = 0
    excluded = 0
    installer = ""
    agreed: tuple[str, ...] = ()
    state: bytes | None = None
    if kind is ViewsType.PROMISE:
        if _pull_flag(buf, "accepted"):
            accepted = _pull_ballot(buf)
            members = _pull_members(buf)
    elif kind is ViewsType.PROPOSE:
        members = _pull_members(buf)
    elif kind in _VIEW_TYPES:
        new_view = buf.pull_uint64("view id")
    elif kind is ViewsType.CHANGE:
        members = _pull_members(buf)
        joins = _pull_members(buf)
    if kind is ViewsType.EXCLUDED:
        excluded = buf.pull_uint64("incarnation")
    if kind is ViewsType.INSTALL:
        members = _pull_members(buf)
        installer = _pull_name(buf, "installer")
        agreed = tuple(
            _pull_name(buf, "agreed name") for _ in range(_pull_count(buf, "agreed names"))
        )
        if _pull_flag(buf, "state"):
            length = buf.pull_uint32("state length")
            if length > MAX_STATE:
                raise DecodeError(
                    f"state of {length} bytes exceeds {MAX_STATE}", offset=buf.position
                )
            state = buf.pull_bytes(length, "state")
    buf.expect_end("views message")
    return ViewsMessage(
        type=kind,
        view=view,
        sender=sender,
        incarnation=incarnation,
        ballot=ballot,
        accepted=accepted,
        members=members,
        joins=joins,
        new_view=new_view,
        excluded=excluded,
        installer=installer,
        agreed=agreed,
        state=state,
    )
