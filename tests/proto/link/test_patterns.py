"""Socket types, compatibility, the link decision and the request envelope."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gossamer.errors import ConfigError, DecodeError
from gossamer.proto.link.patterns import (
    BY_NAME,
    MAX_HOPS,
    PAIR,
    PATTERNS,
    decide,
    pattern_for,
    pull_envelope,
    push_envelope,
)
from gossamer.wire.exon import LinkDecision, LinkMetadata, SocketType


def meta(kind: int) -> LinkMetadata:
    return LinkMetadata(socket_type=kind, credits=10)


def test_the_compatibility_table_of_the_java_code_plus_pair() -> None:
    T = SocketType  # noqa: N806 - the enum, short
    expected = {
        "push": {T.PULL},
        "pull": {T.PUSH},
        "req": {T.REP, T.ROUTER},
        "rep": {T.REQ, T.DEALER},
        "router": {T.REQ, T.DEALER, T.ROUTER},
        "dealer": {T.REP, T.DEALER, T.ROUTER},
        "pub": {T.SUB, T.XSUB},
        "sub": {T.PUB, T.XPUB},
        "pair": {PAIR},
    }
    assert {name: set(p.compatible) for name, p in BY_NAME.items()} == expected
    # Among the implemented types, compatibility is symmetric.
    for a in PATTERNS.values():
        for b in PATTERNS.values():
            assert (b.kind in a.compatible) == (a.kind in b.compatible), (a.name, b.name)
    assert pattern_for("PUSH") is pattern_for(int(SocketType.PUSH))
    with pytest.raises(ConfigError):
        pattern_for("xpub")  # listed for compatibility, not implemented
    assert not BY_NAME["push"].receives and not BY_NAME["pull"].sends
    assert BY_NAME["pair"].link_limit == 1


def test_fatal_reasons_win_over_transient_ones() -> None:
    pull = BY_NAME["pull"]
    # Java bug 1: a closed socket at its link limit answered "temporarily unavailable".
    assert decide(pull, meta(SocketType.PUSH), closing=True, at_limit=True) is (LinkDecision.CLOSED)
    assert decide(pull, meta(SocketType.PUB), at_limit=True) is LinkDecision.INCOMPATIBLE
    assert (
        decide(pull, meta(SocketType.PUSH), incoming=True, allow_incoming=False, at_limit=True)
        is LinkDecision.INCOMING_NOT_ALLOWED
    )
    assert decide(pull, meta(SocketType.PUSH), at_limit=True) is (
        LinkDecision.TEMPORARILY_UNAVAILABLE
    )
    assert decide(pull, meta(SocketType.PUSH)) is LinkDecision.SUCCESS
    # Incoming links disallowed only refuse links the peer asked for.
    assert decide(pull, meta(SocketType.PUSH), allow_incoming=False) is LinkDecision.SUCCESS


def test_an_authorizer_refuses_but_cannot_hide_a_fatal_reason() -> None:
    pull = BY_NAME["pull"]

    def later(_: LinkMetadata) -> LinkDecision:
        return LinkDecision.TEMPORARILY_UNAVAILABLE

    def never(_: LinkMetadata) -> LinkDecision:
        return LinkDecision.INCOMING_NOT_ALLOWED

    assert decide(pull, meta(SocketType.PUSH), authorize=later) is (
        LinkDecision.TEMPORARILY_UNAVAILABLE
    )
    assert decide(pull, meta(SocketType.REQ), authorize=later) is LinkDecision.INCOMPATIBLE
    assert decide(pull, meta(SocketType.PUSH), authorize=never, at_limit=True) is (
        LinkDecision.INCOMING_NOT_ALLOWED
    )
    assert decide(pull, meta(SocketType.PUSH), authorize=lambda m: None) is LinkDecision.SUCCESS


@given(ids=st.lists(st.integers(0, 2**32 - 1), max_size=MAX_HOPS), body=st.binary(max_size=64))
def test_envelopes_round_trip(ids: list[int], body: bytes) -> None:
    assert pull_envelope(push_envelope(ids, body)) == (tuple(ids), body)


@given(st.binary(max_size=80))
def test_random_bytes_decode_or_raise_decode_error(data: bytes) -> None:
    try:
        ids, body = pull_envelope(data)
    except DecodeError:
        return
    assert push_envelope(ids, body) == data


def test_envelope_limits() -> None:
    with pytest.raises(ValueError, match="at most"):
        push_envelope(list(range(MAX_HOPS + 1)), b"")
    with pytest.raises(ValueError, match="32-bit"):
        push_envelope([2**32], b"")
    with pytest.raises(DecodeError):
        pull_envelope(bytes([MAX_HOPS + 1]) + bytes(4 * (MAX_HOPS + 1)))
    with pytest.raises(DecodeError):
        pull_envelope(b"")
