"""Socket types, their compatibility, the link decision, and the request envelope.

Socket types and compatibility follow the Java ``SocketsTable`` (reference (c), "Socket
types"), plus PAIR, which the notes discuss ("limit links to 1 via maxLinks") and the
Java code never built. The wire carries the type as a u16 (``LinkMetadata.socket_type``);
PAIR takes 11, the first number after the Java ids.

The decision on a peer's metadata (:func:`decide`) checks fatal reasons before
transient ones, so a fatal refusal always wins (the Java code let the last failed check
win: a closed socket at its link limit answered "temporarily unavailable" and the peer
retried forever, reference (c) bug 1).

Request-reply sockets (REQ, REP, DEALER, ROUTER) put an *envelope* in front of every
DATA payload, a stack of u32 ids in the ZeroMQ manner::

    count u8 | count x id u32 | body

REQ pushes a request id; REP replies with the envelope it received; ROUTER tells the
application which link a message came from (a routing id); DEALER passes envelopes
through, so a DEALER can talk to a REP and a REQ to a ROUTER.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gossamer.errors import ConfigError, DecodeError
from gossamer.wire.exon import LinkDecision, LinkMetadata, SocketType

__all__ = [
    "BY_NAME",
    "ENVELOPE_ROOM",
    "MAX_HOPS",
    "PAIR",
    "PATTERNS",
    "Authorizer",
    "Pattern",
    "decide",
    "pattern_for",
    "pull_envelope",
    "push_envelope",
]

#: PAIR's socket type on the wire (not in the Java table; see the module docstring).
PAIR = 11

#: Most ids an envelope may stack (ZeroMQ allows any; a bound keeps the receiver's
#: memory bound: a DATA is at most ``max_message + ENVELOPE_ROOM`` bytes of payload).
MAX_HOPS = 16
ENVELOPE_ROOM = 1 + 4 * MAX_HOPS


@dataclass(frozen=True, slots=True, kw_only=True)
class Pattern:
    """What a socket type may do and whom it may link with."""

    kind: int
    name: str
    compatible: frozenset[int]
    #: The socket sends DATA (PULL and SUB do not).
    sends: bool
    #: The socket receives DATA (PUSH and PUB do not): its capacity is 0 otherwise.
    receives: bool
    #: At most this many links (PAIR: 1); ``None``: the socket's ``max_links`` option.
    link_limit: int | None = None
    #: DATA payloads carry the request envelope.
    enveloped: bool = False


def _p(kind: int, name: str, compatible: Sequence[int], **kw: object) -> Pattern:
    return Pattern(kind=kind, name=name, compatible=frozenset(compatible), **kw)  # type: ignore[arg-type]


def _request_reply(kind: int, name: str, compatible: Sequence[int]) -> Pattern:
    """The request-reply family: each sends and receives, every payload enveloped."""
    return _p(kind, name, compatible, sends=True, receives=True, enveloped=True)


T = SocketType
PATTERNS: dict[int, Pattern] = {
    p.kind: p
    for p in (
        _p(T.PUSH, "push", [T.PULL], sends=True, receives=False),
        _p(T.PULL, "pull", [T.PUSH], sends=False, receives=True),
        _request_reply(T.REQ, "req", [T.REP, T.ROUTER]),
        _request_reply(T.REP, "rep", [T.REQ, T.DEALER]),
        _request_reply(T.ROUTER, "router", [T.REQ, T.DEALER, T.ROUTER]),
        _request_reply(T.DEALER, "dealer", [T.REP, T.DEALER, T.ROUTER]),
        _p(T.PUB, "pub", [T.SUB, T.XSUB], sends=True, receives=False),
        _p(T.SUB, "sub", [T.PUB, T.XPUB], sends=False, receives=True),
        _p(PAIR, "pair", [PAIR], sends=True, receives=True, link_limit=1),
    )
}
BY_NAME: dict[str, Pattern] = {p.name: p for p in PATTERNS.values()}


def pattern_for(kind: int | str) -> Pattern:
    """The pattern of a socket type given by number or name (``"push"``)."""
    found = BY_NAME.get(kind.lower()) if isinstance(kind, str) else PATTERNS.get(kind)
    if found is None:
        known = ", ".join(sorted(BY_NAME))
        raise ConfigError(f"unknown or unsupported socket type {kind!r} (known: {known})")
    return found


#: An application's own link check (notes: "custom logic, such as ... authorization"):
#: given the peer's metadata, ``None`` accepts, a ``LinkDecision`` refuses.
Authorizer = Callable[[LinkMetadata], LinkDecision | None]


def decide(
    own: Pattern,
    peer: LinkMetadata,
    *,
    closing: bool = False,
    incoming: bool = False,
    allow_incoming: bool = True,
    at_limit: bool = False,
    authorize: Authorizer | None = None,
) -> LinkDecision:
    """Our decision on a peer socket's metadata.

    ``incoming`` is true when the peer asked first (we have no link record for it);
    ``at_limit`` when accepting would exceed the link limit. Fatal reasons are checked
    first, so one of them always wins over "temporarily unavailable".
    """
    if closing:
        return LinkDecision.CLOSED
    if incoming and not allow_incoming:
        return LinkDecision.INCOMING_NOT_ALLOWED
    if peer.socket_type not in own.compatible:
        # Notes: incompatibility is the one refusal that is static for the socket's
        # life, hence fatal.
        return LinkDecision.INCOMPATIBLE
    verdict = authorize(peer) if authorize is not None else None
    if verdict is not None and verdict.fatal:
        return verdict
    # Only transient reasons are left: any of them refuses for now.
    if verdict is not None and verdict is not LinkDecision.SUCCESS:
        return verdict
    if at_limit:
        return LinkDecision.TEMPORARILY_UNAVAILABLE
    return LinkDecision.SUCCESS


_ID = struct.Struct(">I")


def push_envelope(ids: Sequence[int], body: bytes) -> bytes:
    """``count u8 | ids u32... | body``. Raises ``ValueError`` for more than
    :data:`MAX_HOPS` ids or an id that does not fit in 32 bits."""
    if len(ids) > MAX_HOPS:
        raise ValueError(f"an envelope holds at most {MAX_HOPS} ids, not {len(ids)}")
    try:
        head = struct.pack(f">B{len(ids)}I", len(ids), *ids)
    except struct.error:
        raise ValueError(f"envelope ids must be unsigned 32-bit integers: {ids!r}") from None
    return head + body


def pull_envelope(payload: bytes) -> tuple[tuple[int, ...], bytes]:
    """Split a request-reply payload into its ids and body. Raises only ``DecodeError``."""
    if not payload:
        raise DecodeError("empty request-reply payload: no envelope", offset=0)
    count = payload[0]
    if count > MAX_HOPS:
        raise DecodeError(f"envelope of {count} ids exceeds {MAX_HOPS}", offset=0)
    end = 1 + 4 * count
    if len(payload) < end:
        raise DecodeError(
            f"envelope of {count} ids needs {end} bytes, payload has {len(payload)}", offset=0
        )
    ids = struct.unpack_from(f">{count}I", payload, 1)
    return ids, payload[end:]
