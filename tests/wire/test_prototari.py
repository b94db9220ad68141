"""The Prototari datagram codec: exact control strings and gossamer's data datagram."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gossamer.errors import DecodeError
from gossamer.wire import prototari
from gossamer.wire.prototari import ControlKind, ControlMessage, DataMessage

messages = st.one_of(
    st.builds(ControlMessage, kind=st.sampled_from(ControlKind)),
    st.builds(DataMessage, payload=st.binary(max_size=200)),
)


# The exact datagrams: spec sections 1a (pelotari?), 1b (aupa!), 1c (dale!), 2 (hor?,
# hemen nago!); agur! from the reference notes, part (b) "Constants and defaults": no
# terminator, no newline, compared as whole datagrams.
@pytest.mark.parametrize(
    ("kind", "wire"),
    [
        (ControlKind.DISCOVER, b"pelotari?"),
        (ControlKind.RESPOND, b"aupa!"),
        (ControlKind.CONFIRM, b"dale!"),
        (ControlKind.HEARTBEAT, b"hor?"),
        (ControlKind.HEARTBEAT_REPLY, b"hemen nago!"),
        (ControlKind.DISCONNECT, b"agur!"),
    ],
)
def test_control_strings_are_exact(kind: ControlKind, wire: bytes) -> None:
    assert prototari.encode(ControlMessage(kind=kind)) == wire
    assert prototari.decode(wire) == ControlMessage(kind=kind)


def test_discovery_message_is_nine_bytes() -> None:
    # Reference (b): "exact bytes `pelotari?` (9 bytes, no terminator)".
    assert len(prototari.encode(ControlMessage(kind=ControlKind.DISCOVER))) == 9


@pytest.mark.parametrize(
    "data",
    [b"pelotari?\n", b"pelotari?\x00", b"Pelotari?", b"pelotari", b" aupa!", b"AUPA!", b"hor"],
)
def test_near_misses_are_not_control_messages(data: bytes) -> None:
    # The Go code compares whole datagrams: a trailing newline or any extra byte means
    # the message is not recognised (reference (b)).
    with pytest.raises(DecodeError, match="not a prototari"):
        prototari.decode(data)


def test_data_datagram_layout() -> None:
    assert prototari.encode(DataMessage(payload=b"hi")) == b"\x00\x01hi"
    assert prototari.decode(b"\x00\x01") == DataMessage(payload=b"")


def test_no_control_string_can_be_read_as_data() -> None:
    for kind in ControlKind:
        assert kind.value[0] != prototari.DATA_MAGIC
        assert all(0x20 <= byte < 0x7F for byte in kind.value)


@given(messages)
def test_round_trip(msg: prototari.PrototariMessage) -> None:
    assert prototari.decode(prototari.encode(msg)) == msg


@given(st.binary(max_size=64))
def test_random_bytes_raise_only_decode_error(data: bytes) -> None:
    try:
        msg = prototari.decode(data)
    except DecodeError:
        return
    # Whatever decodes is canonical: it re-encodes to the same datagram.
    assert prototari.encode(msg) == data


@given(st.sampled_from(ControlKind))
def test_every_truncation_of_a_control_string_is_rejected(kind: ControlKind) -> None:
    for cut in range(len(kind.value)):
        with pytest.raises(DecodeError):
            prototari.decode(kind.value[:cut])


def test_truncated_data_header_and_unknown_version_are_rejected() -> None:
    # A data datagram's payload length is the datagram's, so only a cut inside the
    # two-byte header is detectable.
    with pytest.raises(DecodeError, match="empty"):
        prototari.decode(b"")
    with pytest.raises(DecodeError, match="version byte"):
        prototari.decode(b"\x00")
    with pytest.raises(DecodeError, match="unsupported data datagram version 2"):
        prototari.decode(b"\x00\x02payload")


def test_size_bound() -> None:
    with pytest.raises(DecodeError, match="exceeds 10"):
        prototari.decode(b"\x00\x01" + b"x" * 9, max_size=10)
    assert prototari.decode(b"\x00\x01" + b"x" * 8, max_size=10) == DataMessage(payload=b"x" * 8)
    with pytest.raises(ValueError, match="exceeds"):
        prototari.encode(DataMessage(payload=b"x" * prototari.MAX_DATAGRAM))


def test_ports_match_the_spec() -> None:
    # Spec: 21451 receives broadcasts, 21450 carries all unicast.
    assert (prototari.BROADCAST_PORT, prototari.UNICAST_PORT) == (21451, 21450)
