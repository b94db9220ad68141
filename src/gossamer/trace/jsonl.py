"""The JSON-lines trace codec and a forgiving reader.

One event per line, keys in schema order, UTF-8, ``\\n`` terminated. The encoder
is deterministic (same events, same bytes), which the simulator's byte-identical
replays rely on. The reader validates every line against ``FIELDS``; a torn or
malformed line is reported with its file and line number and skipped (or raised,
in strict mode) so one bad line never hides the rest of a trace.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from gossamer.errors import DecodeError, TraceFormatError
from gossamer.trace.schema import LAYERS, SCHEMA_VERSION, TraceEvent

__all__ = [
    "MAX_LINE_BYTES",
    "BadLine",
    "TraceReader",
    "decode_event",
    "encode_event",
    "read_run",
]

#: Longest line the reader accepts; anything longer is malformed by definition.
MAX_LINE_BYTES = 1 << 20

_KEYS = ("v", "run", "node", "t", "layer", "kind", "msg", "peer", "seq", "size", "attrs")
_KNOWN_LAYERS = frozenset(LAYERS)


def encode_event(event: TraceEvent) -> bytes:
    """One event as one JSON line, keys in schema order, newline included."""
    return (
        orjson.dumps(
            {
                "v": event.v,
                "run": event.run,
                "node": event.node,
                "t": float(event.t),
                "layer": event.layer,
                "kind": event.kind,
                "msg": event.msg,
                "peer": event.peer,
                "seq": event.seq,
                "size": event.size,
                "attrs": dict(event.attrs),
            }
        )
        + b"\n"
    )


def _require_str(obj: dict[str, Any], key: str, *, nullable: bool) -> str | None:
    value = obj.get(key)
    if value is None:
        if nullable:
            return None
        raise DecodeError(f"field {key!r} is missing or null")
    if not isinstance(value, str):
        raise DecodeError(f"field {key!r} must be a string, not {type(value).__name__}")
    return value


def _require_int(obj: dict[str, Any], key: str) -> int | None:
    value = obj.get(key)
    if value is None:
        return None
    # bool is an int subclass in Python but never a valid order number or size.
    if not isinstance(value, int) or isinstance(value, bool):
        raise DecodeError(f"field {key!r} must be an integer, not {type(value).__name__}")
    return value


def decode_event(line: bytes | str) -> TraceEvent:
    """Parse and validate one line. Raises only ``DecodeError``."""
    if len(line) > MAX_LINE_BYTES:
        raise DecodeError(f"line longer than {MAX_LINE_BYTES} bytes")
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise DecodeError(f"not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise DecodeError(f"a trace line must be a JSON object, not {type(obj).__name__}")
    unknown = sorted(set(obj) - set(_KEYS))
    if unknown:
        raise DecodeError(f"unknown fields {unknown}")
    version = _require_int(obj, "v")
    if version is None:
        raise DecodeError("field 'v' (schema version) is missing")
    if version != SCHEMA_VERSION:
        raise DecodeError(
            f"schema version {version} is not supported (this reader knows {SCHEMA_VERSION})"
        )
    t = obj.get("t")
    if not isinstance(t, int | float) or isinstance(t, bool):
        raise DecodeError("field 't' must be a number of seconds")
    layer = _require_str(obj, "layer", nullable=False)
    if layer not in _KNOWN_LAYERS:
        raise DecodeError(f"unknown layer {layer!r} (known: {', '.join(LAYERS)})")
    kind = _require_str(obj, "kind", nullable=False)
    if not kind:
        raise DecodeError("field 'kind' is empty")
    attrs = obj.get("attrs", {})
    if not isinstance(attrs, dict) or not all(isinstance(v, str) for v in attrs.values()):
        raise DecodeError("field 'attrs' must be an object of strings")
    run = _require_str(obj, "run", nullable=False)
    node = _require_str(obj, "node", nullable=False)
    assert run is not None and node is not None and layer is not None and kind is not None
    return TraceEvent(
        v=version,
        run=run,
        node=node,
        t=float(t),
        layer=layer,
        kind=kind,
        msg=_require_str(obj, "msg", nullable=True),
        peer=_require_str(obj, "peer", nullable=True),
        seq=_require_int(obj, "seq"),
        size=_require_int(obj, "size"),
        attrs=attrs,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class BadLine:
    """A line the reader skipped, and why."""

    path: str
    line: int
    reason: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.reason}"


class TraceReader:
    """Reads trace files, collecting bad lines instead of stopping at them.

    With ``strict=True`` the first bad line raises ``TraceFormatError`` instead.
    A last line without its newline is a torn write (the node crashed while
    writing it) and is reported like any other bad line, even if it parses.
    """

    def __init__(self, *, strict: bool = False) -> None:
        self.strict = strict
        self.bad_lines: list[BadLine] = []

    def _reject(self, path: Path, number: int, reason: str) -> None:
        if self.strict:
            raise TraceFormatError(reason, path=str(path), line=number)
        self.bad_lines.append(BadLine(path=str(path), line=number, reason=reason))

    def read(self, path: str | Path) -> Iterator[TraceEvent]:
        """Yield the valid events of one ``.jsonl`` file in file order."""
        path = Path(path)
        with open(path, "rb") as handle:
            for number, raw in enumerate(handle, start=1):
                if not raw.endswith(b"\n"):
                    self._reject(path, number, "torn line: no newline at end of file")
                    continue
                if not raw.strip():
                    self._reject(path, number, "empty line")
                    continue
                try:
                    yield decode_event(raw)
                except DecodeError as exc:
                    self._reject(path, number, str(exc))


def read_run(
    run_dir: str | Path, *, strict: bool = False
) -> tuple[list[TraceEvent], list[BadLine]]:
    """All events of a run directory (every ``*.jsonl``, files in name order)."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise DecodeError(f"{run_dir} is not a directory")
    reader = TraceReader(strict=strict)
    events: list[TraceEvent] = []
    for path in sorted(run_dir.glob("*.jsonl")):
        events.extend(reader.read(path))
    return events, reader.bad_lines
