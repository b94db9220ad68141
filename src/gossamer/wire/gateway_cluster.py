"""Node-to-node messages of a clustered 신경 gateway (``proto.gateway.cluster``).

One link message is a *batch*: msgpack ``[2, sender node, incarnation, to, session, seq,
base, [record, ...]]`` (``Header`` names the numbers, unsigned 64-bit integers):

- ``incarnation``: the sender process's own id (a restarted node draws a new one);
  ``to``: the receiver's incarnation as the sender last heard it (0: not yet heard), so
  that a restarted receiver refuses what was meant for its previous life;
- ``session``: the sender's random id of its exchange with this receiver (a new one
  each time it adds the receiver as a peer); ``seq``: the batch's number in the
  session, from 1 (0: an unnumbered batch, only ``A`` records, never resent);
  ``base``: the oldest number the sender has not had acknowledged (everything before
  it was acknowledged, so a receiver new to the session starts there).

Records are lists whose first element says what they are:

- ``["S"]`` ... ``["E"]``: a snapshot, the sender's whole set of clients as ``J``
  records between the two (over as many batches as needed); it replaces what the
  receiver held of the sender: a client of the sender not named between them is gone;
- ``["J", client]``: a client identified on the sender (or named by a snapshot);
- ``["L", app, client]``: a client of the sender left;
- ``["M", app, client, {key: [type, value]}]``: a client of the sender changed metadata;
- ``["D", msg, t, d, [[app, client], ...], reroute]``: deliver dispatch ``d`` of type
  ``t`` to these clients of the receiver;
- ``["U", t, d, reroute]``: a SEND the receiver could not deliver (its client had
  left), back to its origin;
- ``["A", session, seq, rewind]``: the sender received every batch of the receiver's
  ``session`` up to ``seq`` (cumulative); ``rewind`` true: it missed the next one, send
  again every batch not acknowledged;
- ``["R"]``: send me a snapshot (a node that has just added the receiver as a peer asks,
  in case the receiver's earlier snapshot reached it before it knew the receiver).

``client`` is ``[app, client, restricted, encoding, ip, receive_client_updates,
receive_metadata_updates, {key: [type, value]}]`` with JSON values (a version as its
text); ``reroute`` is ``[sender app, sender client, target, attempt]`` for a SEND (so
that its origin can route it again) and ``None`` otherwise; ``msg`` names the routed
message in traces (or ``None``).

Decoding checks the envelope and each record's shape and raises ``DecodeError`` only;
values (metadata types, queries) are the gateway core's to validate, as a client's are.
"""

from __future__ import annotations

from typing import Any, Final, NamedTuple, TypeAlias

import msgpack

from gossamer.errors import DecodeError
from gossamer.wire.packed import unpack_value

__all__ = ["VERSION", "Header", "Record", "batch_overhead", "decode_batch", "encode_batch",
           "join_batch", "pack_record"]

VERSION: Final = 2
#: One record: a list whose first element is its kind (table above).
Record: TypeAlias = list[Any]

_CLIENT_FIELDS: Final = 8
#: kind -> number of elements (the kind included).
_SHAPES: Final = {"S": 1, "E": 1, "J": 2, "L": 3, "M": 4, "D": 6, "U": 4, "R": 1, "A": 4}
_NUMBERS: Final = 5
_U64: Final = 1 << 64


class Header(NamedTuple):
    """A batch's envelope (module docstring): who sends, to which incarnation, and the
    batch's place in the sender's session."""

    sender: str
    incarnation: int = 0
    to: int = 0
    session: int = 0
    seq: int = 0
    base: int = 0


def encode_batch(header: Header, records: list[Record]) -> bytes:
    """The link message carrying ``records`` with envelope ``header``."""
    return join_batch(header, [pack_record(record) for record in records])


def pack_record(record: Record) -> bytes:
    """One record, packed (``join_batch`` puts packed records into a batch)."""
    packed: bytes = msgpack.packb(record, use_bin_type=True)
    return packed


def _array_header(count: int) -> bytes:
    if count < 16:
        return bytes([0x90 | count])
    if count < 1 << 16:
        return b"\xdc" + count.to_bytes(2, "big")
    return b"\xdd" + count.to_bytes(4, "big")


def batch_overhead(sender: str) -> int:
    """Bytes of a batch besides its packed records (at most)."""
    return 1 + len(msgpack.packb(VERSION)) + len(msgpack.packb(sender)) + 9 * _NUMBERS + 5


def join_batch(header: Header, packed: list[bytes]) -> bytes:
    """The batch of already packed records (the same bytes as ``encode_batch``)."""
    return b"".join([
        b"\x98",
        msgpack.packb(VERSION),
        msgpack.packb(header.sender, use_bin_type=True),
        *(msgpack.packb(number) for number in header[1:]),
        _array_header(len(packed)),
        *packed,
    ])


def _number(value: Any) -> bool:
    return type(value) is int and 0 <= value < _U64


def _client(value: Any) -> None:
    if (
        not isinstance(value, list)
        or len(value) != _CLIENT_FIELDS
        or not isinstance(value[0], str)
        or not isinstance(value[1], str)
        or not isinstance(value[7], dict)
    ):
        raise DecodeError("gateway cluster: malformed client record")


def _identity(value: Any) -> None:
    if (
        not isinstance(value, list)
        or len(value) != 2
        or not isinstance(value[0], str)
        or not isinstance(value[1], str)
    ):
        raise DecodeError("gateway cluster: malformed client identity")


def _reroute(value: Any) -> None:
    if value is None:
        return
    if (
        not isinstance(value, list)
        or len(value) != 4
        or not isinstance(value[0], str)
        or not isinstance(value[1], str)
        or type(value[3]) is not int
    ):
        raise DecodeError("gateway cluster: malformed reroute")


def _check(record: Any) -> None:
    if not isinstance(record, list) or not record or _SHAPES.get(record[0]) != len(record):
        raise DecodeError("gateway cluster: malformed record")
    kind = record[0]
    if kind == "J":
        _client(record[1])
    elif kind in ("L", "M"):
        _identity(record[1:3])
        if kind == "M" and not isinstance(record[3], dict):
            raise DecodeError("gateway cluster: malformed metadata change")
    elif kind == "D":
        if not isinstance(record[2], str) or not isinstance(record[4], list):
            raise DecodeError("gateway cluster: malformed delivery")
        for identity in record[4]:
            _identity(identity)
        _reroute(record[5])
    elif kind == "U":
        if not isinstance(record[1], str) or record[3] is None:
            raise DecodeError("gateway cluster: malformed bounce")
        _reroute(record[3])
    elif kind == "A" and (
        not _number(record[1]) or not _number(record[2]) or type(record[3]) is not bool
    ):
        raise DecodeError("gateway cluster: malformed acknowledgement")


def decode_batch(data: bytes, *, max_size: int) -> tuple[Header, list[Record]]:
    """``(header, records)`` of a link message; ``DecodeError`` when malformed."""
    value = unpack_value(data, max_size=max_size, what="gateway cluster: batch")
    if (
        not isinstance(value, list)
        or len(value) != 3 + _NUMBERS
        or value[0] != VERSION
        or not isinstance(value[1], str)
        or not all(_number(n) for n in value[2:-1])
        or not isinstance(value[-1], list)
    ):
        raise DecodeError("gateway cluster: malformed batch")
    records = value[-1]
    for record in records:
        _check(record)
    if value[6] == 0 and any(record[0] != "A" for record in records):
        raise DecodeError("gateway cluster: an unnumbered batch carries only acknowledgements")
    return Header(value[1], *value[2:-1]), records
