"""The trace event schema: one record per protocol event, for every layer.

This module is the single definition of the schema. The JSON-lines codec, the
simulator, the drivers and the Spark pipeline (``gossamer.analysis.schema``) all
derive from ``FIELDS``; a test checks that the Spark schema agrees with it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = [
    "FIELDS",
    "GATEWAY_CLIENT_KINDS",
    "LAYERS",
    "SCHEMA_VERSION",
    "FieldSpec",
    "TraceEvent",
]

#: Bumped whenever a field is added, removed or changes meaning.
SCHEMA_VERSION = 1

#: Layers a trace event may belong to. ``demo`` is the foundation's example core
#: (``gossamer.proto.ping``); ``net`` carries the simulator's and drivers' injected faults;
#: ``queue`` is what queue clients saw (the lab's ``queues`` workload, ``docs/analysis.md``).
LAYERS: tuple[str, ...] = (
    "discovery",
    "gossip",
    "isis",
    "snapshot",
    "link",
    "gateway",
    "views",
    "net",
    "demo",
    "queue",
)

#: Kinds the gateway's *clients* trace, in layer ``gateway`` beside the server's own
#: (``route``, ``deliver``, ...). Kinds grow inside a layer; a new layer is for a new
#: protocol. The writers (``gossamer.proto.gateway.tracing``) and the analysis
#: (``gossamer.analysis.client_latency``) both take the names from here:
#:
#: - ``client_ready``: identified (``attrs.client`` = ``app/client``, ``attrs.reconnect``);
#: - ``client_send``: the application handed over a SEND, BROADCAST or QUEUE
#:   (``msg`` = its nonce, ``attrs.type``, ``attrs.client``, ``attrs.buffered``);
#: - ``client_recv``: such a dispatch arrived (``msg`` = its nonce, ``attrs.type``,
#:   ``attrs.client``; for QUEUE ``attrs.id`` and ``attrs.attempt``).
#:
#: The nonce is also ``attrs.nonce`` of the server's ``route`` and ``enqueue``.
GATEWAY_CLIENT_KINDS: tuple[str, ...] = ("client_ready", "client_send", "client_recv")


@dataclass(frozen=True, slots=True, kw_only=True)
class FieldSpec:
    """One column of the schema: its name, Python type name and nullability."""

    name: str
    type: str  # one of: "int", "float", "str", "map<str,str>"
    nullable: bool
    doc: str


FIELDS: tuple[FieldSpec, ...] = (
    FieldSpec(name="v", type="int", nullable=False, doc="schema version"),
    FieldSpec(name="run", type="str", nullable=False, doc="run id"),
    FieldSpec(name="node", type="str", nullable=False, doc="node that recorded the event"),
    FieldSpec(name="t", type="float", nullable=False, doc="seconds: virtual or loop time"),
    FieldSpec(name="layer", type="str", nullable=False, doc="protocol layer"),
    FieldSpec(name="kind", type="str", nullable=False, doc="event kind, e.g. send, deliver"),
    FieldSpec(name="msg", type="str", nullable=True, doc="message id unique within the run"),
    FieldSpec(name="peer", type="str", nullable=True, doc="the other node involved"),
    FieldSpec(name="seq", type="int", nullable=True, doc="an order number"),
    FieldSpec(name="size", type="int", nullable=True, doc="bytes on the wire"),
    FieldSpec(name="attrs", type="map<str,str>", nullable=False, doc="anything else"),
)


@dataclass(frozen=True, slots=True, kw_only=True)
class TraceEvent:
    """One protocol event as recorded by one node.

    Field order and meaning follow ``FIELDS``. ``attrs`` values are strings so
    that every layer shares one column type; producers format numbers themselves.
    """

    run: str
    node: str
    t: float
    layer: str
    kind: str
    msg: str | None = None
    peer: str | None = None
    seq: int | None = None
    size: int | None = None
    attrs: Mapping[str, str] = field(default_factory=dict)
    v: int = SCHEMA_VERSION
