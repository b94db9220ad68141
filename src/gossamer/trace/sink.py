"""Where trace events go.

Cores receive a ``Tracer`` (bound to a run and a node) and never know whether
events end in memory, in a file, or nowhere. Sinks are deliberately dumb: they
store or write; they never decide anything.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import IO, Protocol

from gossamer.trace.jsonl import encode_event
from gossamer.trace.schema import TraceEvent

__all__ = ["JsonlSink", "MemorySink", "NullSink", "TraceSink", "Tracer"]


class TraceSink(Protocol):
    """Anything that accepts trace events."""

    def emit(self, event: TraceEvent) -> None: ...


class NullSink:
    """Discards every event (for benchmarks and code that does not trace)."""

    def emit(self, event: TraceEvent) -> None:
        pass


class MemorySink:
    """Keeps events in a list, in emission order (tests, the simulator)."""

    def __init__(self) -> None:
        self.events: list[TraceEvent] = []

    def emit(self, event: TraceEvent) -> None:
        self.events.append(event)

    def select(self, *, layer: str | None = None, kind: str | None = None) -> list[TraceEvent]:
        """The events with the given layer and/or kind."""
        return [
            e
            for e in self.events
            if (layer is None or e.layer == layer) and (kind is None or e.kind == kind)
        ]


class JsonlSink:
    """Writes one JSON line per event to ``path`` (``<run>/<node>.jsonl``).

    With ``durable=True`` (the default, for real nodes) each line is handed to the
    operating system as soon as it is emitted, in one ``write`` of a complete line,
    so a crashed process loses at most the line being written. The simulator
    passes ``durable=False`` to batch writes; it has no process to lose.
    """

    def __init__(self, path: str | Path, *, durable: bool = True) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._durable = durable
        # Unbuffered binary file: a write() is exactly one system call per line.
        self._file: IO[bytes] = open(self.path, "ab", buffering=0 if durable else -1)  # noqa: SIM115
        self.count = 0

    def emit(self, event: TraceEvent) -> None:
        self._file.write(encode_event(event))
        self.count += 1

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        if not self._file.closed:
            self._file.flush()
            self._file.close()

    def __enter__(self) -> JsonlSink:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class Tracer:
    """Stamps events with a run id and a node id and hands them to a sink.

    Cores take a ``Tracer`` instead of a bare sink so that they only supply what
    varies per event; ``now`` always comes from the caller, never from a clock.
    """

    __slots__ = ("node", "run", "sink")

    def __init__(self, sink: TraceSink, *, run: str, node: str) -> None:
        self.sink = sink
        self.run = run
        self.node = node

    def __call__(
        self,
        now: float,
        layer: str,
        kind: str,
        *,
        msg: str | None = None,
        peer: str | None = None,
        seq: int | None = None,
        size: int | None = None,
        attrs: Mapping[str, str] | None = None,
    ) -> None:
        self.sink.emit(
            TraceEvent(
                run=self.run,
                node=self.node,
                t=now,
                layer=layer,
                kind=kind,
                msg=msg,
                peer=peer,
                seq=seq,
                size=size,
                attrs=dict(attrs) if attrs else {},
            )
        )
