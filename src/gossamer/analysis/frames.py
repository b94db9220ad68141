"""Build event DataFrames from in-memory trace events (tests, the lab, notebooks).

A loaded run has the trace columns plus ``file`` and ``line`` (``EVENTS_SCHEMA``).
Events built here get the file a node would have written (``<node>.jsonl``) and
line numbers in the order given, as if they had been read back from that file, so
checkers see exactly what they would see after ``gossamer analyze`` loads a run.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from gossamer.analysis.schema import EVENTS_SCHEMA
from gossamer.trace.schema import SCHEMA_VERSION, TraceEvent

__all__ = ["event", "events_frame"]


def event(
    node: str,
    t: float,
    layer: str,
    kind: str,
    *,
    msg: str | None = None,
    peer: str | None = None,
    seq: int | None = None,
    size: int | None = None,
    run: str = "run",
    **attrs: str,
) -> TraceEvent:
    """A ``TraceEvent`` in one short call: ``event("n0", 1.0, "isis", "deliver", msg="n1/0")``."""
    return TraceEvent(
        run=run,
        node=node,
        t=t,
        layer=layer,
        kind=kind,
        msg=msg,
        peer=peer,
        seq=seq,
        size=size,
        attrs=attrs,
    )


def events_frame(spark: SparkSession, events: Iterable[TraceEvent]) -> DataFrame:
    """The events as a loaded run: ``EVENTS_SCHEMA``, one file per node, lines in given order.

    The order of ``events`` is the order each node recorded them in (its file order);
    events of different nodes may be interleaved freely.
    """
    lines: Counter[str] = Counter()
    rows: list[tuple[Any, ...]] = []
    for e in events:
        if e.v != SCHEMA_VERSION:
            raise ValueError(f"event has schema version {e.v}, expected {SCHEMA_VERSION}")
        lines[e.node] += 1
        rows.append(
            (
                e.v,
                e.run,
                e.node,
                float(e.t),
                e.layer,
                e.kind,
                e.msg,
                e.peer,
                e.seq,
                e.size,
                dict(e.attrs),
                f"{e.node}.jsonl",
                lines[e.node],
            )
        )
    return spark.createDataFrame(rows, EVENTS_SCHEMA)
