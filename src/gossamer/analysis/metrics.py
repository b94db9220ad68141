"""Metrics: latency, traffic, retransmissions, faults and timelines, as DataFrames.

Pure transforms over a loaded run, like the checkers; the job collects their
(small) results for ``summary.json`` and the report. Latencies compare times taken
on different nodes, which is exact in the simulator (one virtual clock) and on one
host (drivers stamp events with the loop's monotonic clock, shared by every process
of a machine, network namespaces included); across machines it is only as good as
their clock synchronisation.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from gossamer.analysis.checks import discovery, gossip
from gossamer.analysis.checks.common import faults, layer_events

__all__ = [
    "DISCRETE_FAULTS",
    "ORIGIN_KINDS",
    "QUANTILES",
    "activity",
    "depth_histogram",
    "fault_counts",
    "fault_timeline",
    "latencies",
    "latency_cdf",
    "latency_stats",
    "latency_summary",
    "membership_timeline",
    "outage_events",
    "per_node",
    "time_range",
    "timeline",
    "traffic",
]

#: Event kinds that mark a message's start; its latency runs from the earliest.
ORIGIN_KINDS: tuple[str, ...] = ("send", "multicast", "broadcast", "route", "enqueue")

#: Percentiles reported for latencies.
QUANTILES: tuple[float, ...] = (0.5, 0.9, 0.99)

#: Faults that are one-off events (drawn as marks), unlike per-datagram faults (counted).
DISCRETE_FAULTS: tuple[str, ...] = ("crash", "restart", "partition", "heal")

_ACCURACY = 10_000  # percentile_approx: rank error at most 1/10000 of the count


def latencies(events: DataFrame) -> DataFrame:
    """``layer, node, msg, latency``: each delivery's time since the message started.

    A message starts at the earliest event of an origin kind (``ORIGIN_KINDS``) with
    its id in the same layer (a ping's send, an ISIS multicast, a gossip broadcast);
    ``latency`` is the delivering node's ``deliver`` time minus that start.
    """
    with_msg = events.where(F.col("msg").isNotNull() & (F.col("layer") != "net"))
    origins = (
        with_msg.where(F.col("kind").isin(*ORIGIN_KINDS))
        .groupBy("layer", "msg")
        .agg(F.min("t").alias("t0"))
    )
    delivered = with_msg.where(F.col("kind") == "deliver").select("layer", "node", "msg", "t")
    return delivered.join(origins, ["layer", "msg"]).select(
        "layer", "node", "msg", (F.col("t") - F.col("t0")).alias("latency")
    )


def latency_summary(lat: DataFrame, by: Sequence[str] = ("layer",)) -> DataFrame:
    """``by..., count, mean, p50, p90, p99, max`` of latencies (approximate percentiles)."""
    q = F.percentile_approx("latency", list(QUANTILES), _ACCURACY)
    return (
        lat.groupBy(*by)
        .agg(
            F.count("*").alias("count"),
            F.mean("latency").alias("mean"),
            q.alias("q"),
            F.max("latency").alias("max"),
        )
        .select(
            *by,
            "count",
            "mean",
            *[F.col("q")[i].alias(f"p{round(p * 100)}") for i, p in enumerate(QUANTILES)],
            "max",
        )
    )


def latency_cdf(lat: DataFrame, points: int = 100) -> DataFrame:
    """``layer, count, mean, max, quantiles``: latency at fractions 0, 1/points, ..., 1.

    With ``points=100``, ``quantiles[50]``, ``[90]`` and ``[99]`` are the p50, p90 and
    p99 of ``latency_summary``: one job gives the table and the CDF plot.
    """
    probs = [i / points for i in range(points + 1)]
    return lat.groupBy("layer").agg(
        F.count("*").alias("count"),
        F.mean("latency").alias("mean"),
        F.max("latency").alias("max"),
        F.percentile_approx("latency", probs, _ACCURACY).alias("quantiles"),
    )


def latency_stats(lat: DataFrame, points: int = 100) -> DataFrame:
    """``latency_cdf`` per layer and per (layer, node) in one job (a rollup).

    Rows with a null ``node`` are whole layers. With ``points=100``, ``quantiles[50]``,
    ``[90]`` and ``[99]`` are the p50, p90 and p99.
    """
    probs = [i / points for i in range(points + 1)]
    return (
        lat.rollup("layer", "node")
        .agg(
            F.count("*").alias("count"),
            F.mean("latency").alias("mean"),
            F.max("latency").alias("max"),
            F.percentile_approx("latency", probs, _ACCURACY).alias("quantiles"),
        )
        .where(F.col("layer").isNotNull())
    )


def traffic(events: DataFrame) -> DataFrame:
    """Per ``layer, node``: messages and bytes sent and received, deliveries, retransmissions."""
    kind = F.col("kind")
    size = F.coalesce(F.col("size"), F.lit(0))
    return (
        events.where(F.col("layer") != "net")
        .groupBy("layer", "node")
        .agg(
            F.count(F.when(kind == "send", 1)).alias("sent"),
            F.sum(F.when(kind == "send", size).otherwise(0)).alias("bytes_sent"),
            F.count(F.when(kind == "recv", 1)).alias("received"),
            F.sum(F.when(kind == "recv", size).otherwise(0)).alias("bytes_received"),
            F.count(F.when(kind == "deliver", 1)).alias("delivered"),
            F.count(F.when(kind == "retransmit", 1)).alias("retransmitted"),
        )
    )


def per_node(events: DataFrame) -> DataFrame:
    """``traffic`` and ``fault_counts`` in one pass: ``layer, node, fault`` plus both counts.

    Rows with ``layer`` other than ``net`` carry traffic (``fault`` null); ``net`` rows
    carry ``faults`` per fault name.
    """
    kind = F.col("kind")
    size = F.coalesce(F.col("size"), F.lit(0))
    fault = F.when((F.col("layer") == "net") & (kind == "fault"), F.col("attrs").getItem("fault"))
    return events.groupBy("layer", "node", fault.alias("fault")).agg(
        F.count(F.when(kind == "send", 1)).alias("sent"),
        F.sum(F.when(kind == "send", size).otherwise(0)).alias("bytes_sent"),
        F.count(F.when(kind == "recv", 1)).alias("received"),
        F.sum(F.when(kind == "recv", size).otherwise(0)).alias("bytes_received"),
        F.count(F.when(kind == "deliver", 1)).alias("delivered"),
        F.count(F.when(kind == "retransmit", 1)).alias("retransmitted"),
        F.count(F.when(kind == "fault", 1)).alias("faults"),
    )


def fault_counts(events: DataFrame) -> DataFrame:
    """``fault, node, count``: injected faults per node."""
    return faults(events).groupBy("fault", "node").agg(F.count("*").alias("count"))


def time_range(events: DataFrame) -> DataFrame:
    """One row: ``t_min, t_max`` over the run."""
    return events.agg(F.min("t").alias("t_min"), F.max("t").alias("t_max"))


def _binned(df: DataFrame, t_min: float, t_max: float, bins: int) -> DataFrame:
    width = (t_max - t_min) / bins if t_max > t_min else 1.0
    b = F.least(F.floor((F.col("t") - F.lit(t_min)) / F.lit(width)), F.lit(bins - 1))
    return df.withColumn("bin", b.cast("int"))


def timeline(events: DataFrame, t_min: float, t_max: float, bins: int = 100) -> DataFrame:
    """``bin, layer, events, deliveries``: activity per time bin and layer."""
    return (
        _binned(events, t_min, t_max, bins)
        .groupBy("bin", "layer")
        .agg(
            F.count("*").alias("events"),
            F.count(F.when(F.col("kind") == "deliver", 1)).alias("deliveries"),
        )
    )


def activity(events: DataFrame, t_min: float, t_max: float, bins: int = 100) -> DataFrame:
    """``timeline`` and ``fault_timeline`` in one pass: ``bin, layer, fault, events, deliveries``.

    ``fault`` names the injected fault on ``net`` fault events and is null elsewhere.
    """
    fault = F.when(
        (F.col("layer") == "net") & (F.col("kind") == "fault"), F.col("attrs").getItem("fault")
    )
    return (
        _binned(events, t_min, t_max, bins)
        .groupBy("bin", "layer", fault.alias("fault"))
        .agg(
            F.count("*").alias("events"),
            F.count(F.when(F.col("kind") == "deliver", 1)).alias("deliveries"),
        )
    )


def fault_timeline(events: DataFrame, t_min: float, t_max: float, bins: int = 100) -> DataFrame:
    """``bin, fault, count``: per-datagram faults (drops, duplicates...) per time bin."""
    f = faults(events).where(~F.col("fault").isin(*DISCRETE_FAULTS))
    return _binned(f, t_min, t_max, bins).groupBy("bin", "fault").agg(F.count("*").alias("count"))


def outage_events(events: DataFrame) -> DataFrame:
    """``t, node, fault``: crashes, restarts, partitions and heals, in time order."""
    return (
        faults(events)
        .where(F.col("fault").isin(*DISCRETE_FAULTS))
        .select("t", "node", "fault")
        .orderBy("t", "node")
    )


def depth_histogram(events: DataFrame) -> DataFrame:
    """``hop, nodes``: how many (broadcast, node) pairs got their first copy at each hop."""
    return gossip.first_hops(events).groupBy("hop").agg(F.count("*").alias("nodes"))


def membership_timeline(
    events: DataFrame, t_min: float, t_max: float, bins: int = 100
) -> DataFrame:
    """``node, bin, size``: each discovery node's view size at the end of each time bin."""
    changes = _binned(discovery.view_changes(events), t_min, t_max, bins)
    last = changes.groupBy("node", "bin").agg(
        F.max_by("size", F.struct("t", "file", "line")).alias("size")
    )
    grid = (
        layer_events(events, discovery.LAYER)
        .select("node")
        .distinct()
        .crossJoin(
            F.broadcast(
                events.sparkSession.range(bins).select(F.col("id").cast("int").alias("bin"))
            )
        )
    )
    filled = grid.join(last, ["node", "bin"], "left")
    upto = Window.partitionBy("node").orderBy("bin").rowsBetween(Window.unboundedPreceding, 0)
    return filled.select(
        "node",
        "bin",
        F.coalesce(F.last("size", ignorenulls=True).over(upto), F.lit(0)).alias("size"),
    )
