"""The error tree: whose fault, structured fields, one-line messages."""

from __future__ import annotations

from gossamer.errors import (
    ConfigError,
    CryptoError,
    DecodeError,
    GossamerError,
    LocalProtocolError,
    ProtocolError,
    RemoteProtocolError,
    TraceFormatError,
)


def test_hierarchy() -> None:
    assert issubclass(LocalProtocolError, ProtocolError)
    assert issubclass(RemoteProtocolError, ProtocolError)
    for cls in (ConfigError, ProtocolError, DecodeError, CryptoError):
        assert issubclass(cls, GossamerError)
    assert issubclass(TraceFormatError, DecodeError)
    # Callers that only know the standard library can still catch bad values.
    assert issubclass(DecodeError, ValueError) and issubclass(ConfigError, ValueError)


def test_structured_fields_and_message() -> None:
    err = DecodeError("truncated header", offset=3, needed=8)
    assert err.reason == "truncated header" and err.offset == 3
    assert err.fields == {"offset": 3, "needed": 8}
    assert str(err) == "truncated header (offset=3, needed=8)"
    assert str(RemoteProtocolError("unexpected LINKACK")) == "unexpected LINKACK"
    trace_err = TraceFormatError("not JSON", path="a/n0.jsonl", line=4)
    assert (trace_err.path, trace_err.line) == ("a/n0.jsonl", 4)
