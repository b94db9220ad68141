"""Trace events: the one contract shared by cores, simulator, drivers and analysis."""

from gossamer.trace.jsonl import BadLine, TraceReader, decode_event, encode_event, read_run
from gossamer.trace.schema import (
    FIELDS,
    GATEWAY_CLIENT_KINDS,
    LAYERS,
    SCHEMA_VERSION,
    FieldSpec,
    TraceEvent,
)
from gossamer.trace.sink import JsonlSink, MemorySink, NullSink, Tracer, TraceSink

__all__ = [
    "FIELDS",
    "GATEWAY_CLIENT_KINDS",
    "LAYERS",
    "SCHEMA_VERSION",
    "BadLine",
    "FieldSpec",
    "JsonlSink",
    "MemorySink",
    "NullSink",
    "TraceEvent",
    "TraceReader",
    "TraceSink",
    "Tracer",
    "decode_event",
    "encode_event",
    "read_run",
]
