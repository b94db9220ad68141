"""Discovery and membership (Prototari): time to full view, crash detection, false removals.

Trace conventions (``layer=discovery``): ``peer_up`` and ``peer_down`` at the node
whose view changed, ``peer`` = the other node's id, ``attrs.reason`` = ``handshake``,
``heartbeat`` or ``leave``; ``send``/``recv`` of each message. A node's view is the
set of peers it has seen come up and not yet go down; repeated ``peer_up`` for a
peer already in view (or ``peer_down`` for one not in it) changes nothing.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from gossamer.analysis.checks.common import (
    attr,
    correct_nodes,
    faults,
    layer_events,
    location,
    outages,
    position,
    shared,
)

__all__ = [
    "LAYER",
    "crash_detection",
    "detections",
    "false_removals",
    "full_view",
    "full_view_times",
    "participants",
    "view_changes",
]

LAYER = "discovery"


@shared
def view_changes(events: DataFrame) -> DataFrame:
    """Every ``peer_up``/``peer_down`` with ``delta`` (+1, -1 or 0) and ``size`` after it.

    Columns: ``node, peer, t, file, line, kind, reason, delta, size``.
    """
    ud = (
        layer_events(events, LAYER, "peer_up", "peer_down")
        .where(F.col("peer").isNotNull())
        .select("node", "peer", "t", "file", "line", "kind", attr("reason").alias("reason"))
    )
    per_peer = Window.partitionBy("node", "peer").orderBy("t", "file", "line")
    prev = F.lag("kind").over(per_peer)
    delta = (
        F.when((F.col("kind") == "peer_up") & (prev.isNull() | (prev == "peer_down")), 1)
        .when((F.col("kind") == "peer_down") & (prev == "peer_up"), -1)
        .otherwise(0)
    )
    with_delta = ud.withColumn("delta", delta)
    running = (
        Window.partitionBy("node")
        .orderBy("t", "file", "line")
        .rowsBetween(Window.unboundedPreceding, Window.currentRow)
    )
    return with_delta.withColumn("size", F.sum("delta").over(running))


@shared
def participants(events: DataFrame, *, nodes: DataFrame | None = None) -> DataFrame:
    """``node, start``: correct nodes that ran discovery, and their first event's time."""
    starts = events.groupBy("node").agg(F.min("t").alias("start"))
    ran = layer_events(events, LAYER).select("node").distinct()
    return correct_nodes(events, nodes).join(ran, "node", "left_semi").join(starts, "node", "left")


@shared
def full_view_times(
    events: DataFrame, *, nodes: DataFrame | None = None, max_peers: int = 64
) -> DataFrame:
    """``node, start, target, largest, full_at, seconds`` for every participant.

    ``target`` is min(max_peers, participants - 1); ``full_at`` is the first time the
    node's view held that many peers (null if never), ``seconds`` = ``full_at - start``.
    """
    who = participants(events, nodes=nodes)
    target = who.agg(F.least(F.lit(max_peers), F.count("*") - 1).cast("long").alias("target"))
    sizes = view_changes(events).join(who.select("node"), "node", "left_semi")
    per = who.crossJoin(F.broadcast(target)).join(
        sizes.groupBy("node").agg(F.max("size").alias("largest")), "node", "left"
    )
    reached = (
        sizes.join(F.broadcast(target), F.col("size") >= F.col("target"))
        .groupBy("node")
        .agg(F.min("t").alias("full_at"))
    )
    return per.join(reached, "node", "left").select(
        "node",
        "start",
        "target",
        F.coalesce("largest", F.lit(0)).alias("largest"),
        "full_at",
        (F.col("full_at") - F.col("start")).alias("seconds"),
    )


def full_view(
    events: DataFrame,
    *,
    nodes: DataFrame | None = None,
    max_peers: int = 64,
    within: float | None = None,
) -> DataFrame:
    """Correct nodes that never reached a full view, or reached it too late.

    Property: every correct node's view eventually holds min(max_peers, N - 1) peers
    (N = correct nodes that ran discovery), within ``within`` seconds of its start
    when a bound is given. Columns: ``node, target, largest, seconds, detail``.
    """
    times = full_view_times(events, nodes=nodes, max_peers=max_peers)
    return _never_or_late(times, "full_at", within).select(
        "node",
        "target",
        "largest",
        "seconds",
        _verdict(
            "full_at",
            within,
            never=F.format_string(
                "%s never had a full view: at most %d of %d peers", "node", "largest", "target"
            ),
            late=("%s took %.3f s to see %d peers", "node", "seconds", "target"),
        ),
    )


def _never_or_late(rows: DataFrame, done: str, within: float | None) -> DataFrame:
    """The ``rows`` whose ``done`` time is null (it never happened) or whose ``seconds``
    exceed the bound ``within`` (``None``: no bound)."""
    late = F.lit(False) if within is None else F.col("seconds") > F.lit(within)
    return rows.where(F.col(done).isNull() | late)


def _verdict(done: str, within: float | None, *, never: Column, late: tuple[str, ...]) -> Column:
    """The ``detail`` of a ``_never_or_late`` row: ``never`` when ``done`` is null, else
    the format and columns ``late`` followed by the bound."""
    fmt, *columns = late
    bound = F.lit(within if within is not None else 0.0)
    late_detail = F.format_string(f"{fmt} (bound %.3f s)", *columns, bound)
    return F.when(F.col(done).isNull(), never).otherwise(late_detail).alias("detail")


@shared
def detections(events: DataFrame, *, nodes: DataFrame | None = None) -> DataFrame:
    """``crashed, crashed_at, observer, removed_at, seconds`` per crash and observer.

    Observers are the correct participants that had the crashed node in view when it
    crashed; ``removed_at`` is their first ``peer_down`` for it afterwards (null: never).
    """
    crashes = (
        faults(events)
        .where(F.col("fault") == "crash")
        .select(F.col("node").alias("crashed"), F.col("t").alias("crashed_at"))
    )
    changes = view_changes(events).join(
        participants(events, nodes=nodes).select("node"), "node", "left_semi"
    )
    before = changes.join(
        F.broadcast(crashes),
        (F.col("peer") == F.col("crashed")) & (F.col("t") <= F.col("crashed_at")),
    )
    knew = (
        before.groupBy(F.col("node").alias("observer"), "crashed", "crashed_at")
        .agg(F.max_by("kind", position()).alias("state"))
        .where(F.col("state") == "peer_up")
        .drop("state")
    )
    downs = changes.where(F.col("kind") == "peer_down")
    after = downs.join(
        F.broadcast(crashes),
        (F.col("peer") == F.col("crashed")) & (F.col("t") >= F.col("crashed_at")),
    )
    removed = after.groupBy(F.col("node").alias("observer"), "crashed", "crashed_at").agg(
        F.min("t").alias("removed_at")
    )
    return knew.join(removed, ["observer", "crashed", "crashed_at"], "left").select(
        "crashed",
        "crashed_at",
        "observer",
        "removed_at",
        (F.col("removed_at") - F.col("crashed_at")).alias("seconds"),
    )


def crash_detection(
    events: DataFrame, *, nodes: DataFrame | None = None, within: float | None = None
) -> DataFrame:
    """Crashed nodes that a correct peer never removed from its view, or removed late.

    Property: every correct node that had a crashed node in view removes it, within
    ``within`` seconds of the crash when a bound is given (the spec's inactive-peer
    time + 3 x heartbeat wait, plus one interval). Columns: ``crashed, observer,
    crashed_at, seconds, detail``.
    """
    d = detections(events, nodes=nodes)
    return _never_or_late(d, "removed_at", within).select(
        "crashed",
        "observer",
        "crashed_at",
        "seconds",
        _verdict(
            "removed_at",
            within,
            never=F.format_string(
                "%s crashed at t=%.3f and %s never removed it", "crashed", "crashed_at", "observer"
            ),
            late=(
                "%s crashed at t=%.3f and %s removed it %.3f s later",
                "crashed",
                "crashed_at",
                "observer",
                "seconds",
            ),
        ),
    )


def false_removals(events: DataFrame, *, window: float = 30.0) -> DataFrame:
    """Peers removed from a view while they were alive and reachable.

    Property: a node removes a peer (``peer_down`` other than a clean ``leave``) only
    if that peer crashed, or one of the two was cut off by a partition, at some time
    in the ``window`` seconds before the removal. Columns: ``node, peer, t, reason,
    at, detail``.
    """
    downs = view_changes(events).where(
        (F.col("delta") == -1) & (F.coalesce(F.col("reason"), F.lit("")) != "leave")
    )
    # Renamed columns: both sides come from the same events, and Spark refuses
    # ambiguous self-join conditions.
    out = outages(events).select(
        F.col("node").alias("o_node"),
        F.col("outage").alias("o_kind"),
        F.col("start").alias("o_start"),
        F.col("end").alias("o_end"),
    )
    overlaps = (F.col("o_start") <= F.col("t")) & (
        F.col("o_end").isNull() | (F.col("o_end") >= F.col("t") - F.lit(window))
    )
    explains = overlaps & (
        (F.col("o_node") == F.col("peer"))
        | ((F.col("o_node") == F.col("node")) & (F.col("o_kind") == "partition"))
    )
    return downs.join(F.broadcast(out), explains, "left_anti").select(
        "node",
        "peer",
        "t",
        "reason",
        location(),
        F.format_string(
            "%s removed live peer %s at t=%.3f (reason %s, %s:%d)",
            "node",
            "peer",
            "t",
            F.coalesce("reason", F.lit("none")),
            "file",
            "line",
        ).alias("detail"),
    )
