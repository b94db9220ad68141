"""The views codec (``gossamer.wire.views``): every message type round trips, bad input
raises only ``DecodeError``, and encoders refuse what decoders would refuse."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gossamer.errors import DecodeError
from gossamer.wire import views
from gossamer.wire.views import Ballot, MemberRecord, ViewsMessage, ViewsType

names = st.text(min_size=1, max_size=20).filter(lambda s: len(s.encode()) <= 255)
u64 = st.integers(0, 2**64 - 1)
ballots = st.builds(Ballot, round=st.integers(0, 2**32 - 1), name=names)
records = st.builds(
    MemberRecord, name=names, incarnation=u64, host=names, port=st.integers(0, 65535)
)
member_lists = st.lists(records, max_size=5).map(tuple)


@st.composite
def messages(draw: st.DrawFn) -> ViewsMessage:
    kind = draw(st.sampled_from(ViewsType))
    fields: dict[str, object] = {}
    if kind in {
        ViewsType.PREPARE,
        ViewsType.PROPOSE,
        ViewsType.ACCEPTED,
        ViewsType.NACK,
        ViewsType.PROMISE,
    }:
        fields["ballot"] = draw(ballots)
    if kind is ViewsType.PROMISE and draw(st.booleans()):
        fields["accepted"] = draw(ballots)
        fields["members"] = draw(member_lists)
    if kind is ViewsType.PROPOSE:
        fields["members"] = draw(member_lists)
    if kind in {ViewsType.INSTALL, ViewsType.INSTALLED, ViewsType.EXCLUDED}:
        fields["new_view"] = draw(u64)
    if kind is ViewsType.CHANGE:
        fields["members"] = draw(member_lists)
        fields["joins"] = draw(member_lists)
    if kind is ViewsType.INSTALL:
        fields["members"] = draw(member_lists)
        fields["installer"] = draw(names)
        fields["agreed"] = tuple(draw(st.lists(names, max_size=4)))
        fields["state"] = draw(st.none() | st.binary(max_size=100))
    return ViewsMessage(
        type=kind, view=draw(u64), sender=draw(names), incarnation=draw(u64), **fields
    )  # type: ignore[arg-type]


@given(messages())
def test_every_message_round_trips(msg: ViewsMessage) -> None:
    assert views.decode(views.encode(msg)) == msg


@settings(max_examples=40)
@given(messages())
def test_every_truncation_and_trailing_byte_is_refused(msg: ViewsMessage) -> None:
    data = views.encode(msg)
    for end in range(len(data)):
        with pytest.raises(DecodeError):
            views.decode(data[:end])
    with pytest.raises(DecodeError, match="trailing"):
        views.decode(data + b"\x00")


@given(st.binary(max_size=200))
def test_random_bytes_raise_only_decode_error(data: bytes) -> None:
    with contextlib.suppress(DecodeError):
        views.decode(data)


def _status() -> bytes:
    return views.encode(ViewsMessage(type=ViewsType.STATUS, view=3, sender="a", incarnation=1))


def test_exact_header_bytes() -> None:
    assert _status() == b"GV\x01\x09" + (3).to_bytes(8, "big") + b"\x01a" + (1).to_bytes(8, "big")


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"XV" + _status()[2:], "bad magic"),
        (b"GV\x02" + _status()[3:], "unsupported version"),
        (b"GV\x01\x63" + _status()[4:], "unknown message type 99"),
        (_status()[:12] + b"\x00" + _status()[13:], "empty sender"),
        (_status()[:13] + b"\xff" + _status()[14:], "not UTF-8"),
        (b"\x00" * (views.MAX_SIZE + 1), "exceeds"),
    ],
)
def test_malformed_headers_say_why(data: bytes, reason: str) -> None:
    with pytest.raises(DecodeError, match=reason):
        views.decode(data)


def test_counts_flags_and_state_are_bounded_before_reading() -> None:
    base = ViewsMessage(type=ViewsType.CHANGE, view=1, sender="a", incarnation=1)
    too_many = views.encode(base)[:-4] + (views.MAX_MEMBERS + 1).to_bytes(2, "big") + b"\x00\x00"
    with pytest.raises(DecodeError, match="exceed"):
        views.decode(too_many)
    install = views.encode(
        ViewsMessage(
            type=ViewsType.INSTALL, view=1, sender="a", incarnation=1, new_view=2, installer="a"
        )
    )
    with pytest.raises(DecodeError, match="flag"):
        views.decode(install[:-1] + b"\x02")
    huge = install[:-1] + b"\x01" + (views.MAX_STATE + 1).to_bytes(4, "big")
    with pytest.raises(DecodeError, match="state of"):
        views.decode(huge)


def test_encoders_refuse_what_decoders_refuse() -> None:
    with pytest.raises(ValueError, match="ballot"):
        views.encode(ViewsMessage(type=ViewsType.PREPARE, view=1, sender="a", incarnation=1))
    with pytest.raises(ValueError, match="1 to 255"):
        views.encode(ViewsMessage(type=ViewsType.STATUS, view=1, sender="", incarnation=1))
    with pytest.raises(ValueError, match="64 bits"):
        views.encode(ViewsMessage(type=ViewsType.STATUS, view=2**64, sender="a", incarnation=1))
    with pytest.raises(ValueError, match="state of"):
        views.encode(
            ViewsMessage(
                type=ViewsType.INSTALL,
                view=1,
                sender="a",
                incarnation=1,
                installer="a",
                state=b"x" * (views.MAX_STATE + 1),
            )
        )
    record = MemberRecord(name="a", incarnation=1, host="h", port=70000)
    with pytest.raises(ValueError, match="16 bits"):
        views.encode(
            ViewsMessage(
                type=ViewsType.PROPOSE,
                view=1,
                sender="a",
                incarnation=1,
                ballot=Ballot(round=1, name="a"),
                members=(record,),
            )
        )
