"""Message handlers: how user payloads become bytes and back (Chatter's ``MessageHandler``).

Chatter asks the user for five things per payload type (specs/chatter.md, "What is a message
handler"): the type (its *tag* on the wire is XXH32, seed 0, of the type name,
chatter-as-coded.md §6.3), ``extract_netids`` (NetIDs the payload refers to, so that they
enter the message's NetID table), ``encode_with``/``decode_with`` (payload <-> bytes, given
the NetID table as a map) and ``dispatch`` (what to do on arrival). The registry plays the
part of Chatter's ``SerializerDB``.

Payloads are found by type. Chatter's payloads are tuples whose first element is an atom
naming the type; here a payload is matched by ``payload_type`` (``isinstance``) when the
handler declares one, or else, Chatter-style, as a tuple whose first element is the type
name (``("hello", "world")``).

Differences from Chatter, on purpose:

- Two names with one tag (a 32-bit hash collision) are refused at registration; Chatter
  never noticed (§6.3).
- An unknown tag is a ``RemoteProtocolError`` naming the tag (Chatter raised a bare
  ``MatchError``); broadcasting an unregistered payload is a ``LocalProtocolError``.
- ``decode_with`` returns the payload; it must raise ``DecodeError`` on malformed bytes
  (Chatter's returned ``{payload, rest}`` and ignored ``rest``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import cast

from gossamer.errors import ConfigError, LocalProtocolError, RemoteProtocolError
from gossamer.wire.chatter import NetID, type_tag

__all__ = ["HandlerRegistry", "MessageHandler", "bytes_handler", "no_netids", "text_handler"]


def no_netids(payload: object) -> Sequence[NetID]:
    """``extract_netids`` for payloads that refer to no NetID (the docs' example)."""
    return ()


@dataclass(frozen=True, slots=True, kw_only=True)
class MessageHandler:
    """One payload type: its name, codec and dispatch (Chatter's five callbacks).

    - ``name``: the type name; the wire tag is ``type_tag(name)`` (XXH32 of its UTF-8).
      For Chatter interoperability use what Chatter hashes: ``"hello"`` for ``:hello``,
      ``"Elixir.Foo"`` for a module atom ``Foo``.
    - ``encode_with(payload, id_map)``: the payload's bytes; ``id_map`` maps each NetID of
      the message's table to its index, for payloads that refer to NetIDs compactly.
    - ``decode_with(data, index_map)``: the payload from its bytes; ``index_map`` maps table
      indexes back to NetIDs. Must raise ``DecodeError`` on malformed input.
    - ``dispatch(payload)``: called by the driver once per delivered broadcast.
    - ``extract_netids(payload)``: NetIDs that ``encode_with`` will refer to.
    - ``payload_type``: a Python class whose instances this handler carries; without it the
      handler matches tuples whose first element is ``name``.
    """

    name: str
    encode_with: Callable[[object, Mapping[NetID, int]], bytes]
    decode_with: Callable[[bytes, Mapping[int, NetID]], object]
    dispatch: Callable[[object], object] = lambda payload: None
    extract_netids: Callable[[object], Sequence[NetID]] = no_netids
    payload_type: type | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ConfigError("a handler needs a non-empty type name", name=self.name)

    @property
    def tag(self) -> int:
        """The payload type tag on the wire: XXH32 (seed 0) of ``name``."""
        return type_tag(self.name)

    def matches(self, payload: object) -> bool:
        """True when this handler carries ``payload``."""
        if self.payload_type is not None:
            return isinstance(payload, self.payload_type)
        return isinstance(payload, tuple) and len(payload) > 0 and payload[0] == self.name


def text_handler() -> MessageHandler:
    """Text payloads ``("text", str)`` carried as UTF-8 (what ``gossamer gossip`` and the
    lab's nodes send); undecodable bytes arrive as replacement characters."""

    def encode(payload: object, id_map: Mapping[NetID, int]) -> bytes:
        if not (isinstance(payload, tuple) and len(payload) == 2):
            raise LocalProtocolError("a text payload is ('text', str)", payload=repr(payload))
        return str(payload[1]).encode()

    return MessageHandler(
        name="text",
        encode_with=encode,
        decode_with=lambda data, index_map: ("text", data.decode(errors="replace")),
    )


def bytes_handler() -> MessageHandler:
    """Plain ``bytes`` payloads, carried as they are (type ``bytes``): what
    ``gossamer.open_gossip`` registers so that ``send(b"...")`` works without a handler."""
    return MessageHandler(
        name="bytes",
        encode_with=lambda payload, id_map: bytes(cast(bytes, payload)),
        decode_with=lambda data, index_map: bytes(data),
        payload_type=bytes,
    )


class HandlerRegistry:
    """The registered handlers, by tag and by payload type (Chatter's ``SerializerDB``)."""

    __slots__ = ("_by_name", "_by_tag", "_by_type")

    def __init__(self, handlers: Iterable[MessageHandler] = ()) -> None:
        self._by_tag: dict[int, MessageHandler] = {}
        self._by_name: dict[str, MessageHandler] = {}
        self._by_type: dict[type, MessageHandler] = {}
        for handler in handlers:
            self.add(handler)

    def __len__(self) -> int:
        return len(self._by_tag)

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def add(self, handler: MessageHandler) -> None:
        """Register ``handler``; re-registering a name replaces its handler.

        Raises ``ConfigError`` when another name already has the same tag (a collision of
        the 32-bit hash) or another handler already claims ``payload_type``.
        """
        if not isinstance(handler, MessageHandler):
            raise ConfigError("add takes a MessageHandler", handler=handler)
        tag = handler.tag
        other = self._by_tag.get(tag)
        if other is not None and other.name != handler.name:
            raise ConfigError(
                "two payload type names hash to one tag",
                tag=tag,
                names=(other.name, handler.name),
            )
        if handler.payload_type is not None:
            claimed = self._by_type.get(handler.payload_type)
            if claimed is not None and claimed.name != handler.name:
                raise ConfigError(
                    "another handler already carries this payload type",
                    payload_type=handler.payload_type.__name__,
                    handler=claimed.name,
                )
        previous = self._by_name.get(handler.name)
        if previous is not None and previous.payload_type is not None:
            del self._by_type[previous.payload_type]
        self._by_tag[tag] = handler
        self._by_name[handler.name] = handler
        if handler.payload_type is not None:
            self._by_type[handler.payload_type] = handler

    def remove(self, name: str) -> None:
        """Unregister the handler called ``name``; ``ConfigError`` if there is none."""
        handler = self._by_name.pop(name, None)
        if handler is None:
            raise ConfigError("no handler registered under this name", name=name)
        del self._by_tag[handler.tag]
        if handler.payload_type is not None:
            del self._by_type[handler.payload_type]

    def for_tag(self, tag: int) -> MessageHandler:
        """The handler of a received tag; ``RemoteProtocolError`` for an unknown one."""
        handler = self._by_tag.get(tag)
        if handler is None:
            raise RemoteProtocolError(
                f"no handler registered for payload type tag {tag} (0x{tag:08x})", tag=tag
            )
        return handler

    def for_payload(self, payload: object) -> MessageHandler:
        """The handler that carries ``payload``; ``LocalProtocolError`` if none does."""
        handler = self._by_type.get(type(payload))
        if handler is not None:
            return handler
        for candidate in self._by_type.values():
            if candidate.matches(payload):
                return candidate
        if isinstance(payload, tuple) and payload and isinstance(payload[0], str):
            named = self._by_name.get(payload[0])
            if named is not None and named.payload_type is None:
                return named
        raise LocalProtocolError(
            "no handler registered for this payload (register a MessageHandler first)",
            payload_type=type(payload).__name__,
        )

    def handlers(self) -> list[MessageHandler]:
        """Every registered handler, in registration order."""
        return list(self._by_name.values())
