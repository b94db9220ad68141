"""The commands of the replicated queues (``proto.gateway.replicated_queues``) on the wire.

A node proposes a queue command by multicasting it in the cluster's total order; every
member decodes it and applies it to its ``ReplicatedQueues``. One command is msgpack
``[1, kind, field, ...]`` (``1`` is the format's version):

======  ==========================================================================
kind    fields
======  ==========================================================================
``P``   Push: queue, message_id, nonce, target, payload, node, app, client
``R``   Request: queue, node, app, client, restricted, metadata, count, session
``C``   Cancel: queue, node, app, client
``A``   Ack: queue, message_id, node, app, client
``X``   Expire: message_id, attempt
``G``   ClientGone: node, app, client, session
``L``   Replay: queue, ids (a list of message ids, or nil for every dead letter)
======  ==========================================================================

``node`` names the proposing node's incarnation (the daemon's ``name#incarnation``, the
same string the driver gives ``NodeGone`` when that incarnation leaves the view);
``app``/``client`` identify the gateway client. ``nonce``, ``target`` and ``payload`` are
JSON values (the client's own); ``metadata`` is the requesting client's metadata at
request time, ``{key: [type, value]}`` with JSON values (a version as its text), as
``wire.gateway_cluster`` carries it; ``count`` and ``attempt`` are positive integers;
``session`` names the client's connection at its node (any string the node makes unique
per connection, "" for none): the order may put a node's commands in another order than
it proposed them, and a ``ClientGone`` of an old connection must not remove the client's
new one.

An ``applied_through`` report (``encode_report``), which a member sends the others of
its view after committing (not a command: it is not ordered), is msgpack
``[1, "T", member, position, chain]``: the member's node name, the position it has
committed through and the history digest there (``ReplicatedQueues.chain``).

``NodeGone`` has no wire form: it is never proposed (the driver applies it at a view
install), so a datagram cannot forge one.

Decoding is strict: a wrong version, an unknown kind, a wrong number of fields or a field
of the wrong type raises ``DecodeError`` whose ``reason`` names what was wrong; values the
machine validates itself (the target as a query, the metadata's types) are checked there,
deterministically, so a member never diverges because of what it received.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, TypeAlias

import msgpack

from gossamer.errors import DecodeError
from gossamer.wire.packed import unpack_value

__all__ = [
    "MAX_COMMAND",
    "VERSION",
    "Ack",
    "Cancel",
    "ClientAt",
    "ClientGone",
    "ClientQueue",
    "Command",
    "Expire",
    "NodeGone",
    "Push",
    "Replay",
    "Report",
    "Request",
    "decode",
    "decode_report",
    "encode",
    "encode_report",
]

VERSION: Final = 1
#: The largest encoded command ``decode`` accepts by default (a message's payload
#: dominates; the gateway bounds what a client may send well below this).
MAX_COMMAND: Final = 1 << 20
_U63: Final = 1 << 63


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientAt:
    """The gateway client ``(app, client)`` connected to ``node`` (a command names the
    client it comes from; an effect, the client it is for)."""

    node: str
    app: str
    client: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientQueue(ClientAt):
    """A client's command (or effect) about ``queue``."""

    queue: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Push(ClientQueue):
    """Append a message to ``queue``. ``message_id`` is made by the proposing node and is
    unique (``name#incarnation/n``): a second Push of a known id changes nothing, so a
    re-proposal after a view change is harmless."""

    message_id: str
    nonce: Any
    target: Any
    payload: Any


@dataclass(frozen=True, slots=True, kw_only=True)
class Request(ClientQueue):
    """``count`` credits on ``queue`` for the client, whose metadata (at request time)
    the messages' targets are matched against."""

    restricted: bool
    metadata: dict[str, Any]
    count: int = 1
    #: The connection the client asks from (a new one returns what the old one held).
    session: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Cancel(ClientQueue):
    """Take back every credit the client has on ``queue``."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Ack(ClientQueue):
    """The client acknowledges ``message_id``: it is removed for good."""

    message_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Expire:
    """The ack timer of delivery ``attempt`` of ``message_id`` fired at the holder's node;
    applied only if that very delivery is still outstanding."""

    message_id: str
    attempt: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientGone(ClientAt):
    """The client disconnected from ``node``: its credits go, what it holds returns.
    Only the connection ``session`` (any, when "") is gone."""

    session: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Replay:
    """Dead letters of ``queue`` (``ids``, or all when ``None``) back to its tail."""

    queue: str
    ids: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeGone:
    """``node`` left the view: applied by every member at the view install (never
    proposed, no wire form)."""

    node: str


Command: TypeAlias = Push | Request | Cancel | Ack | Expire | ClientGone | Replay | NodeGone


def encode(command: Command) -> bytes:
    """The wire form of a proposable command (module docstring). ``TypeError`` for
    ``NodeGone``, which is never proposed."""
    if isinstance(command, Push):
        fields: list[Any] = ["P", command.queue, command.message_id, command.nonce,
                             command.target, command.payload, command.node, command.app,
                             command.client]
    elif isinstance(command, Request):
        fields = ["R", command.queue, command.node, command.app, command.client,
                  command.restricted, command.metadata, command.count, command.session]
    elif isinstance(command, Cancel):
        fields = ["C", command.queue, command.node, command.app, command.client]
    elif isinstance(command, Ack):
        fields = ["A", command.queue, command.message_id, command.node, command.app,
                  command.client]
    elif isinstance(command, Expire):
        fields = ["X", command.message_id, command.attempt]
    elif isinstance(command, ClientGone):
        fields = ["G", command.node, command.app, command.client, command.session]
    elif isinstance(command, Replay):
        fields = ["L", command.queue, None if command.ids is None else list(command.ids)]
    else:
        raise TypeError(f"{type(command).__name__} has no wire form")
    packed: bytes = msgpack.packb([VERSION, *fields], use_bin_type=True)
    return packed


def _fail(reason: str, **details: Any) -> DecodeError:
    return DecodeError(f"queue command: {reason}", **details)


def _text(value: Any, name: str) -> str:
    if not isinstance(value, str):
        raise _fail(f"{name} is not a string")
    return value


def _count(value: Any, name: str) -> int:
    if type(value) is not int or not 0 < value < _U63:
        raise _fail(f"{name} is not a positive integer")
    return value


#: kind -> number of fields after the kind.
_SHAPES: Final = {"P": 8, "R": 8, "C": 4, "A": 5, "X": 2, "G": 4, "L": 2}


def decode(data: bytes, *, max_size: int = MAX_COMMAND) -> Command:
    """The command encoded in ``data``; ``DecodeError`` (its ``reason`` says why) otherwise."""
    value = unpack_value(data, max_size=max_size, what="queue command")
    if not isinstance(value, list) or len(value) < 2:
        raise _fail("not a command array")
    if value[0] != VERSION or type(value[0]) is not int:
        raise _fail("unknown version", version=repr(value[0])[:20])
    kind = value[1]
    if not isinstance(kind, str) or kind not in _SHAPES:
        raise _fail("unknown kind", kind=repr(kind)[:20])
    f = value[2:]
    if len(f) != _SHAPES[kind]:
        raise _fail("wrong number of fields", kind=kind, fields=len(f))
    if kind == "P":
        return Push(queue=_text(f[0], "queue"), message_id=_text(f[1], "message_id"),
                    nonce=f[2], target=f[3], payload=f[4], node=_text(f[5], "node"),
                    app=_text(f[6], "app"), client=_text(f[7], "client"))
    if kind == "R":
        if type(f[4]) is not bool:
            raise _fail("restricted is not a boolean")
        if not isinstance(f[5], dict) or not all(isinstance(k, str) for k in f[5]):
            raise _fail("metadata is not a map of strings")
        return Request(queue=_text(f[0], "queue"), node=_text(f[1], "node"),
                       app=_text(f[2], "app"), client=_text(f[3], "client"),
                       restricted=f[4], metadata=f[5], count=_count(f[6], "count"),
                       session=_text(f[7], "session"))
    if kind == "C":
        return Cancel(queue=_text(f[0], "queue"), node=_text(f[1], "node"),
                      app=_text(f[2], "app"), client=_text(f[3], "client"))
    if kind == "A":
        return Ack(queue=_text(f[0], "queue"), message_id=_text(f[1], "message_id"),
                   node=_text(f[2], "node"), app=_text(f[3], "app"),
                   client=_text(f[4], "client"))
    if kind == "X":
        return Expire(message_id=_text(f[0], "message_id"), attempt=_count(f[1], "attempt"))
    if kind == "G":
        return ClientGone(node=_text(f[0], "node"), app=_text(f[1], "app"),
                          client=_text(f[2], "client"), session=_text(f[3], "session"))
    ids = f[1]
    if ids is not None and (
        not isinstance(ids, list) or not all(isinstance(i, str) for i in ids)
    ):
        raise _fail("ids is not a list of strings")
    return Replay(queue=_text(f[0], "queue"), ids=None if ids is None else tuple(ids))


@dataclass(frozen=True, slots=True, kw_only=True)
class Report:
    """``member`` committed the order through ``position``, whose history digest is
    ``chain`` (module docstring)."""

    member: str
    position: int
    chain: str


def encode_report(report: Report) -> bytes:
    """The wire form of an ``applied_through`` report."""
    packed: bytes = msgpack.packb(
        [VERSION, "T", report.member, report.position, report.chain], use_bin_type=True
    )
    return packed


#: A report is a few dozen bytes; anything much longer is not one.
MAX_REPORT: Final = 1024


def decode_report(data: bytes, *, max_size: int = MAX_REPORT) -> Report:
    """The report encoded in ``data``; ``DecodeError`` (its ``reason`` says why) otherwise."""
    value = unpack_value(data, max_size=max_size, what="queue report")
    if not isinstance(value, list) or len(value) != 5 or value[:2] != [VERSION, "T"]:
        raise DecodeError("queue report: not a report")
    position = value[3]
    if type(position) is not int or not 0 <= position < _U63:
        raise DecodeError("queue report: position is not a non-negative integer")
    member, chain = value[2], value[4]
    if not isinstance(member, str) or not isinstance(chain, str):
        raise DecodeError("queue report: member or chain is not a string")
    return Report(member=member, position=position, chain=chain)
