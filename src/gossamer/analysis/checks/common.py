"""Building blocks shared by the checkers: positions, attributes, nodes and faults.

Every function here is a pure DataFrame transform over a loaded run
(``gossamer.analysis.schema.EVENTS_SCHEMA``); nothing reads or writes anything.

Two conventions hold everywhere:

* **Order within a node** is ``(t, file, line)``: a node's clock orders its events,
  and its trace file breaks the ties (one input often causes several events at the
  same instant). Positions of different nodes are never compared with each other.
* **Correct nodes** are the nodes of the run that never crashed: the simulator and
  the lab trace each crash as ``layer=net, kind=fault, attrs.fault=crash`` on the
  node that crashed. A restarted node lost its state, so it is not correct either.
* **A clean stop** is ``layer=net, kind=stop``, traced by a lab node when its shutdown
  begins (it sends and delivers nothing new afterwards). Work a node left unfinished
  at its clean stop is *unfinished*, not lost: checkers that can tell the two apart
  mark such rows with the boolean column ``UNFINISHED``, and the job counts them
  apart from violations.

The frames that many checkers and metrics start from (a layer's events, the faults,
the correct nodes...) are ``shared``: built once per events frame and reused.
"""

from __future__ import annotations

import functools
import threading
import weakref
from collections.abc import Callable, Hashable
from typing import Concatenate, ParamSpec

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

__all__ = [
    "OUTAGE_ENDS",
    "UNFINISHED",
    "attr",
    "clean_stops",
    "correct_nodes",
    "crashed_nodes",
    "delivery_integrity",
    "faults",
    "layer_events",
    "location",
    "message_events",
    "outages",
    "population",
    "position",
    "settled",
    "shared",
]

#: The column that marks a checker's row as unfinished at a clean stop (not a violation).
UNFINISHED = "unfinished"

#: Faults that start an outage of a node, and the fault that ends each kind.
OUTAGE_ENDS: dict[str, str] = {"crash": "restart", "partition": "heal"}


_P = ParamSpec("_P")
_BUILT: weakref.WeakKeyDictionary[DataFrame, dict[Hashable, DataFrame]] = (
    weakref.WeakKeyDictionary()
)
_BUILT_LOCK = threading.Lock()


def shared(
    transform: Callable[Concatenate[DataFrame, _P], DataFrame],
) -> Callable[Concatenate[DataFrame, _P], DataFrame]:
    """``transform(events, ...)`` built once per events frame and arguments, then reused.

    Building a DataFrame costs the driver a Spark analysis per operation (about 5 to
    50 ms each in a small run's JVM, where the whole analysis of a demo is a few
    thousand operations), and the checks and metrics of one analysis derive the same
    frames again and again. The frame built first is returned to every later caller
    with the same ``events`` object and arguments (which must be hashable; DataFrames
    hash by identity); it is forgotten with ``events``. The result is the same frame
    either way: the transforms are pure.
    """

    @functools.wraps(transform)
    def built_once(events: DataFrame, /, *args: _P.args, **kwargs: _P.kwargs) -> DataFrame:
        key = (transform, args, tuple(sorted(kwargs.items())))
        with _BUILT_LOCK:
            frames = _BUILT.setdefault(events, {})
            found = frames.get(key)
        if found is None:
            # Built outside the lock: two threads may both build it; either is right.
            found = transform(events, *args, **kwargs)
            with _BUILT_LOCK:
                found = frames.setdefault(key, found)
        return found

    return built_once


def settled(frame: DataFrame) -> DataFrame:
    """``frame``, computed now and kept as a leaf of the plans built on it.

    For an intermediate result that a checker joins again and again: every operation
    makes Spark analyse the new frame's whole plan, and a frame joined from joins carries
    all of theirs, so a checker whose branches share a few such results spends most of
    its time planning the same subplans (``gateway.cluster_routing``: a thousand-line
    plan of about a hundred joins). A settled frame is computed once (one Spark job) and
    planned as a scan of its rows (``localCheckpoint``). Only for frames of a few rows
    per message, client or view: their rows stay with the executors (in memory, or on
    disk when memory is short) as long as the frame is referenced."""
    return frame.localCheckpoint(eager=True)


def position(prefix: str = "") -> Column:
    """A node-local position ``struct(t, file, line)`` that orders one node's events."""
    return F.struct(
        F.col(f"{prefix}t").alias("t"),
        F.col(f"{prefix}file").alias("file"),
        F.col(f"{prefix}line").alias("line"),
    )


def location(prefix: str = "") -> Column:
    """The ``at`` column of a violation: ``file:line`` of an event, to point a reader at
    the trace line (``prefix`` names a position struct, e.g. ``"p."``)."""
    return F.concat_ws(":", f"{prefix}file", f"{prefix}line").alias("at")


def attr(name: str) -> Column:
    """The string attribute ``attrs[name]`` (null when absent)."""
    return F.col("attrs").getItem(name)


@shared
def layer_events(events: DataFrame, layer: str, *kinds: str) -> DataFrame:
    """The events of one layer, optionally only of the given kinds."""
    cond = F.col("layer") == layer
    if kinds:
        cond = cond & F.col("kind").isin(*kinds)
    return events.where(cond)


@shared
def message_events(events: DataFrame, layer: str, *kinds: str) -> DataFrame:
    """``layer_events`` that name a message (``msg`` set): what per-message checks read."""
    return layer_events(events, layer, *kinds).where(F.col("msg").isNotNull())


@shared
def faults(events: DataFrame) -> DataFrame:
    """Injected faults: ``node, t, fault, peer, size, file, line`` (``layer=net, kind=fault``)."""
    return layer_events(events, "net", "fault").select(
        "node", "t", attr("fault").alias("fault"), "peer", "size", "file", "line"
    )


@shared
def population(events: DataFrame, nodes: DataFrame | None = None) -> DataFrame:
    """Every node of the run: those with events, plus ``nodes`` (e.g. one per trace file)."""
    seen = events.select("node").distinct()
    if nodes is not None:
        seen = seen.unionByName(nodes.select("node")).distinct()
    return seen


@shared
def crashed_nodes(events: DataFrame) -> DataFrame:
    """``node, crashed_at``: nodes that crashed at least once, and their first crash."""
    return (
        faults(events)
        .where(F.col("fault") == "crash")
        .groupBy("node")
        .agg(F.min("t").alias("crashed_at"))
    )


@shared
def clean_stops(events: DataFrame) -> DataFrame:
    """``node, stopped_at``: nodes that stopped cleanly (``net/stop``), and when."""
    return layer_events(events, "net", "stop").groupBy("node").agg(F.min("t").alias("stopped_at"))


@shared
def correct_nodes(events: DataFrame, nodes: DataFrame | None = None) -> DataFrame:
    """``node``: the nodes of the run that never crashed."""
    return population(events, nodes).join(crashed_nodes(events), "node", "left_anti")


@shared
def outages(events: DataFrame) -> DataFrame:
    """``node, outage, start, end``: crash-to-restart and partition-to-heal intervals.

    ``end`` is null when the outage lasted to the end of the run. A partition is
    traced on every node it isolated, so each of them gets its own interval.
    """
    f = faults(events)
    starts = f.where(F.col("fault").isin(*OUTAGE_ENDS)).select(
        "node", F.col("fault").alias("outage"), F.col("t").alias("start")
    )
    end_of = F.create_map(*[F.lit(x) for pair in OUTAGE_ENDS.items() for x in pair])
    ends = f.where(F.col("fault").isin(*OUTAGE_ENDS.values())).select(
        F.col("node").alias("end_node"),
        F.col("fault").alias("end_fault"),
        F.col("t").alias("t_end"),
    )
    joined = starts.join(
        ends,
        (F.col("node") == F.col("end_node"))
        & (end_of[F.col("outage")] == F.col("end_fault"))
        & (F.col("t_end") >= F.col("start")),
        "left",
    )
    return joined.groupBy("node", "outage", "start").agg(F.min("t_end").alias("end"))


def delivery_integrity(deliveries: DataFrame, origins: DataFrame, *, verb: str) -> DataFrame:
    """Duplicate deliveries, and deliveries of messages that never started.

    ``deliveries`` has ``node, msg, t, file, line``; ``origins`` lists the messages that
    did start (``msg``), e.g. ISIS multicasts or gossip broadcasts; ``verb`` names that
    start in the reasons (``multicast``, ``broadcast``). Columns: ``problem, node, msg,
    count, at, detail`` with ``problem`` = ``duplicate`` or ``never <verb>``.
    """
    # Counting is a hash aggregation; positions (structs, which need a sort) are
    # gathered only for the few duplicated pairs.
    twice = deliveries.groupBy("node", "msg").count().where(F.col("count") > 1)
    dups = (
        deliveries.join(twice, ["node", "msg"], "left_semi")
        .groupBy("node", "msg")
        .agg(
            F.count("*").alias("count"),
            F.min(position()).alias("p1"),
            F.max(position()).alias("p2"),
        )
        .select(
            F.lit("duplicate").alias("problem"),
            "node",
            "msg",
            "count",
            location("p2."),
            F.format_string(
                "%s delivered %s %d times (first %s:%d, last %s:%d)",
                "node",
                "msg",
                "count",
                "p1.file",
                "p1.line",
                "p2.file",
                "p2.line",
            ).alias("detail"),
        )
    )
    invented = deliveries.join(origins.select("msg"), "msg", "left_anti").select(
        F.lit(f"never {verb}").alias("problem"),
        "node",
        "msg",
        F.lit(1).cast("long").alias("count"),
        location(),
        F.format_string(
            f"%s delivered %s (%s:%d) but no node {verb} it", "node", "msg", "file", "line"
        ).alias("detail"),
    )
    return dups.unionByName(invented)
