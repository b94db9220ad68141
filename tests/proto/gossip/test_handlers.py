"""Message handlers: Chatter's type tags, registration, and clear errors for unknown types."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

from gossamer.errors import ConfigError, LocalProtocolError, RemoteProtocolError
from gossamer.proto.gossip.handlers import HandlerRegistry, MessageHandler
from gossamer.wire.chatter import NetID

VECTORS = Path(__file__).parent / "vectors" / "type_tags.json"


def text_handler(name: str, payload_type: type | None = None) -> MessageHandler:
    return MessageHandler(
        name=name,
        encode_with=lambda p, ids: str(p).encode(),
        decode_with=lambda b, ids: (name, b.decode()),
        payload_type=payload_type,
    )


def test_tags_are_chatters_type_tags() -> None:
    tags = json.loads(VECTORS.read_text())["tags"]
    assert len(tags) >= 10
    for case in tags:
        assert text_handler(case["hashed_string"] or "x").tag == (
            case["xxh32_seed0"] if case["hashed_string"] else text_handler("x").tag
        )
    assert text_handler("hello").tag == 4211111929


def test_registry_finds_handlers_by_tag_and_by_payload() -> None:
    @dataclass
    class Ping:
        n: int

    hello, ping = text_handler("hello"), text_handler("ping", Ping)
    registry = HandlerRegistry([hello, ping])
    assert len(registry) == 2 and "hello" in registry
    assert registry.for_tag(hello.tag) is hello
    assert registry.for_payload(("hello", "world")) is hello  # Chatter-style tuple
    assert registry.for_payload(Ping(1)) is ping
    assert registry.handlers() == [hello, ping]


def test_an_unknown_tag_is_a_remote_error_naming_it() -> None:
    registry = HandlerRegistry([text_handler("hello")])
    with pytest.raises(RemoteProtocolError, match="no handler registered for payload type tag 42"):
        registry.for_tag(42)


def test_an_unregistered_payload_is_a_local_error() -> None:
    registry = HandlerRegistry([text_handler("hello")])
    with pytest.raises(LocalProtocolError, match="no handler registered"):
        registry.for_payload(("world", 1))
    with pytest.raises(LocalProtocolError):
        registry.for_payload(3.5)


def test_colliding_tags_are_refused() -> None:
    # XXH32("t22690") == XXH32("t823309") == 3478599150: Chatter would mix the two up.
    registry = HandlerRegistry([text_handler("t22690")])
    assert text_handler("t823309").tag == text_handler("t22690").tag
    with pytest.raises(ConfigError, match="hash to one tag"):
        registry.add(text_handler("t823309"))


def test_registration_replaces_and_removes() -> None:
    class A:
        pass

    registry = HandlerRegistry([text_handler("a", A)])
    replacement = text_handler("a", A)
    registry.add(replacement)
    assert registry.for_payload(A()) is replacement
    with pytest.raises(ConfigError, match="already carries"):
        registry.add(text_handler("b", A))
    registry.remove("a")
    with pytest.raises(LocalProtocolError):
        registry.for_payload(A())
    with pytest.raises(ConfigError):
        registry.remove("a")
    with pytest.raises(ConfigError):
        MessageHandler(name="", encode_with=lambda p, m: b"", decode_with=lambda b, m: None)


def test_handlers_use_the_netid_table_both_ways() -> None:
    # Chatter's upstream test payload {:broadcast_id, origin, seqno}: the origin travels as
    # its index in the message's NetID table.
    def encode(p: object, ids: Mapping[NetID, int]) -> bytes:
        assert isinstance(p, tuple)
        return bytes([ids[p[1]], p[2]])

    def decode(b: bytes, table: Mapping[int, NetID]) -> object:
        return ("broadcast_id", table[b[0]], b[1])

    handler = MessageHandler(
        name="broadcast_id",
        encode_with=encode,
        decode_with=decode,
        extract_netids=lambda p: [p[1]] if isinstance(p, tuple) else [],
    )
    origin = NetID("1.2.3.4", 1)
    data = handler.encode_with(("broadcast_id", origin, 111), {origin: 0})
    assert data == b"\x00\x6f"
    assert handler.decode_with(data, {0: origin}) == ("broadcast_id", origin, 111)
    assert handler.extract_netids(("broadcast_id", origin, 111)) == [origin]


def test_the_text_handler_carries_utf8_and_refuses_other_payloads() -> None:
    from gossamer.errors import LocalProtocolError
    from gossamer.proto.gossip import text_handler

    handler = text_handler()
    data = handler.encode_with(("text", "héllo"), {})
    assert data == "héllo".encode()
    assert handler.decode_with(data, {}) == ("text", "héllo")
    assert handler.decode_with(b"\xff", {}) == ("text", "\ufffd")
    with pytest.raises(LocalProtocolError, match="text payload"):
        handler.encode_with("bare string", {})
