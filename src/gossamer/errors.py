"""The one error tree of gossamer.

Every error says whose fault it is and carries structured fields::

    GossamerError
    ├── ConfigError             the caller's configuration or parameters are unusable
    ├── ProtocolError           a protocol rule was broken
    │   ├── LocalProtocolError  ... by the local caller (a bug or misuse on this side)
    │   │   ├── ClosedError     ... the service is closed (and, for receive, drained)
    │   │   └── LinkError       ... a link request failed: the link was refused or went down
    │   └── RemoteProtocolError ... by the peer (it sent something the protocol forbids)
    ├── DecodeError             bytes or text could not be decoded (malformed, truncated, too big)
    │   └── TraceFormatError    a trace line is malformed (carries file and line number)
    ├── CryptoError             authentication failed: wrong key, forged or replayed message
    ├── NetworkError            the operating system refused (bind, connect, resolve); an OSError
    ├── NoRouteError            nothing matches the destination (no peer, no client, no route)
    └── TimedOutError           an operation given a deadline did not finish; a TimeoutError

Errors that have a cause (the ``OSError`` behind a ``NetworkError``, the timeout behind a
``TimedOutError``) keep it as ``__cause__``: ``raise NetworkError(...) from exc``.

``DecodeError`` is deliberately not a ``RemoteProtocolError``: decoders also read
local files (traces, stores), and the driver that received the bytes knows who sent them.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "ClosedError",
    "ConfigError",
    "CryptoError",
    "DecodeError",
    "GossamerError",
    "LinkError",
    "LocalProtocolError",
    "NetworkError",
    "NoRouteError",
    "ProtocolError",
    "RemoteProtocolError",
    "TimedOutError",
    "TraceFormatError",
]


class GossamerError(Exception):
    """Root of every error raised by gossamer.

    ``reason`` is a short human sentence; ``fields`` holds structured context
    (offsets, node ids, limits) that callers and counters can use without parsing text.
    """

    def __init__(self, reason: str, **fields: Any) -> None:
        super().__init__(reason)
        self.reason = reason
        self.fields: dict[str, Any] = fields

    def __str__(self) -> str:
        if not self.fields:
            return self.reason
        context = ", ".join(f"{key}={value!r}" for key, value in self.fields.items())
        return f"{self.reason} ({context})"


class ConfigError(GossamerError, ValueError):
    """A configuration value or parameter supplied by the local user is unusable."""


class ProtocolError(GossamerError):
    """A protocol rule was broken; see the subclasses for whose fault it was."""


class LocalProtocolError(ProtocolError):
    """The local caller asked for something the protocol does not allow in this state."""


class ClosedError(LocalProtocolError):
    """The service is closed: nothing more can be sent, and nothing is left to receive."""


class LinkError(LocalProtocolError):
    """A link request could not be carried out because the link was refused or went down.

    ``cause`` is the link's reason (``refused:incompatible``, ``gave_up:...``,
    ``transport_lost``, ``closed``), also in ``fields``.
    """

    def __init__(self, reason: str, *, cause: str, **fields: Any) -> None:
        super().__init__(reason, cause=cause, **fields)
        self.cause = cause


class RemoteProtocolError(ProtocolError):
    """The remote peer sent something the protocol does not allow."""


class DecodeError(GossamerError, ValueError):
    """Malformed, truncated or oversized input. Decoders raise only this on bad input.

    ``offset`` is the byte (or character) position where decoding failed, when known.
    """

    def __init__(self, reason: str, *, offset: int | None = None, **fields: Any) -> None:
        if offset is not None:
            fields = {"offset": offset, **fields}
        super().__init__(reason, **fields)
        self.offset = offset


class TraceFormatError(DecodeError):
    """One line of a trace file is malformed; ``path`` and ``line`` say where."""

    def __init__(self, reason: str, *, path: str, line: int) -> None:
        super().__init__(reason, path=path, line=line)
        self.path = path
        self.line = line


class CryptoError(GossamerError):
    """A message failed authentication: wrong or unknown key, forgery, or replay."""


class NetworkError(GossamerError, OSError):
    """The operating system refused a network operation: a port in use, an address that
    does not resolve, a connection refused. The ``OSError`` is the ``__cause__``."""


class NoRouteError(GossamerError):
    """Nothing matches the destination: no such peer, no client matching a query."""


class TimedOutError(GossamerError, TimeoutError):
    """An operation given a deadline (``timeout=``) did not finish in time.

    It is a ``TimeoutError`` too, so ``except TimeoutError`` keeps working.
    """
