"""Metrics: latency, traffic, retransmissions, faults and timelines, as DataFrames.

Pure transforms over a loaded run, like the checkers; the job collects their
(small) results for ``summary.json`` and the report. Latencies compare times taken
on different nodes, which is exact in the simulator (one virtual clock) and on one
host (drivers stamp events with the loop's monotonic clock, shared by every process
of a machine, network namespaces included); across machines it is only as good as
their clock synchronisation.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from gossamer.analysis.checks import discovery, gossip
from gossamer.analysis.checks.common import faults, layer_events

__all__ = [
    "BROADCAST_ORIGINS_LIMIT",
    "DEFAULT_ORIGIN_KINDS",
    "DISCRETE_FAULTS",
    "HISTOGRAM_BASE",
    "HISTOGRAM_FLOOR",
    "ORIGIN_KINDS",
    "QUANTILES",
    "activity",
    "bucket_value",
    "depth_histogram",
    "fault_counts",
    "fault_timeline",
    "histogram_summary",
    "is_origin",
    "latencies",
    "latency_histogram",
    "latency_summary",
    "membership_timeline",
    "outage_events",
    "per_node",
    "time_range",
    "timeline",
    "traffic",
]

#: The event that starts a message, per layer: the application's request (an ISIS
#: multicast, a gossip broadcast, a gateway route or enqueue), not the datagrams that
#: carry it. Other layers start at ``send``. A message's latency runs from the earliest.
ORIGIN_KINDS: dict[str, tuple[str, ...]] = {
    "isis": ("multicast",),
    "gossip": ("broadcast",),
    "gateway": ("route", "enqueue"),
}
DEFAULT_ORIGIN_KINDS: tuple[str, ...] = ("send",)


def is_origin() -> Column:
    """True on the events that start a message (``ORIGIN_KINDS``)."""
    layer, kind = F.col("layer"), F.col("kind")
    cond = ~layer.isin(*ORIGIN_KINDS) & kind.isin(*DEFAULT_ORIGIN_KINDS)
    for name, kinds in ORIGIN_KINDS.items():
        cond = cond | ((layer == name) & kind.isin(*kinds))
    return cond


#: Percentiles reported for latencies.
QUANTILES: tuple[float, ...] = (0.5, 0.9, 0.99)

#: Faults that are one-off events (drawn as marks), unlike per-datagram faults (counted).
DISCRETE_FAULTS: tuple[str, ...] = ("crash", "restart", "partition", "heal")

#: Latency histograms use logarithmic buckets: bucket b holds latencies in
#: [FLOOR * BASE**b, FLOOR * BASE**(b+1)), so a percentile read from the histogram
#: is within 1% of the true value, whatever the scale (HdrHistogram's and DDSketch's
#: idea). Latencies at or below FLOOR (and negative ones, from skewed clocks) share
#: bucket -1.
HISTOGRAM_BASE = 1.02
HISTOGRAM_FLOOR = 1e-6
#: Below this many message origins, ``latencies`` broadcasts them (see its docstring).
BROADCAST_ORIGINS_LIMIT = 1_000_000

_ACCURACY = 10_000  # percentile_approx: rank error at most 1/10000 of the count


def latencies(events: DataFrame, *, broadcast_origins: bool = False) -> DataFrame:
    """``layer, node, msg, latency``: each delivery's time since its message started.

    A message starts at its earliest origin event (``ORIGIN_KINDS``: an ISIS multicast,
    a gossip broadcast, a ping's send...) with its id in the same layer; ``latency``
    is the delivering node's ``deliver`` time minus that start. Deliveries of
    messages without an origin event are left out.

    Messages are matched on two independent hashes of ``(layer, msg)`` (96 bits), which
    Spark joins much faster than strings and ships more cheaply to every task: two
    messages would have to collide in both to be confused, a chance of about n^2 / 2^97
    for n messages (below 1e-11 for a billion). The join is keyed on the 64-bit hash
    alone, which Spark looks up in a map of longs, and the 32-bit one is compared after
    it (an equality of both would key the join on both, a generic map of rows: about 12%
    more CPU for this job at 10 M events, ``bench/analysis.py``); XOR, as a subtraction
    could overflow. ``broadcast_origins`` ships the origins to every task instead of
    shuffling the deliveries: faster while they fit in memory
    (``BROADCAST_ORIGINS_LIMIT``).
    """
    with_msg = events.where(F.col("msg").isNotNull() & (F.col("layer") != "net"))
    key, check = F.xxhash64("layer", "msg"), F.hash("layer", "msg")
    origins = (
        with_msg.where(is_origin())
        .groupBy(key.alias("key"), check.alias("origin_check"))
        .agg(F.min("t").alias("t0"))
    )
    delivered = with_msg.where(F.col("kind") == "deliver").select(
        key.alias("key"), check.alias("check"), "layer", "node", "msg", "t"
    )
    if broadcast_origins:
        origins = F.broadcast(origins)
    same_message = F.col("check").bitwiseXOR(F.col("origin_check")) == 0
    return (
        delivered.join(origins, "key")
        .where(same_message)
        .select("layer", "node", "msg", (F.col("t") - F.col("t0")).alias("latency"))
    )


def latency_histogram(lat: DataFrame) -> DataFrame:
    """``layer, node, bucket, count, total, low, high``: a log-bucket histogram per node.

    Small whatever the run's size (a few hundred buckets per node), mergeable across
    nodes, and read by ``histogram_summary``; ``total``, ``low`` and ``high`` are the
    exact sum, minimum and maximum of each bucket's latencies.
    """
    bucket = F.when(
        F.col("latency") > HISTOGRAM_FLOOR,
        F.floor(F.log(F.col("latency") / HISTOGRAM_FLOOR) / math.log(HISTOGRAM_BASE)),
    ).otherwise(-1)
    return lat.groupBy("layer", "node", bucket.cast("int").alias("bucket")).agg(
        F.count("*").alias("count"),
        F.sum("latency").alias("total"),
        F.min("latency").alias("low"),
        F.max("latency").alias("high"),
    )


def bucket_value(bucket: int) -> float:
    """The value a histogram bucket stands for: its geometric middle (0 for bucket -1)."""
    if bucket < 0:
        return 0.0
    return float(HISTOGRAM_FLOOR * HISTOGRAM_BASE ** (bucket + 0.5))


def histogram_summary(rows: Sequence[Mapping[str, Any]], points: int = 100) -> dict[str, Any]:
    """Count, mean, min, max and ``points + 1`` quantiles of histogram rows of one group.

    ``rows`` are ``latency_histogram`` rows (any mix of nodes: their buckets add up).
    Quantile q is the value of the bucket holding the ceil(q * count)-th smallest
    latency (nearest rank), clamped to the exact minimum and maximum.
    """
    merged: dict[int, int] = {}
    count, total = 0, 0.0
    low, high = math.inf, -math.inf
    for r in rows:
        merged[int(r["bucket"])] = merged.get(int(r["bucket"]), 0) + int(r["count"])
        count += int(r["count"])
        total += float(r["total"])
        low, high = min(low, float(r["low"])), max(high, float(r["high"]))
    if not count:
        return {"count": 0, "mean": None, "min": None, "max": None, "quantiles": []}
    order = sorted(merged.items())
    quantiles: list[float] = []
    i, seen = 0, order[0][1]
    for k in range(points + 1):
        rank = max(1, math.ceil(k / points * count))
        while seen < rank:
            i += 1
            seen += order[i][1]
        quantiles.append(min(max(bucket_value(order[i][0]), low), high))
    quantiles[0], quantiles[-1] = low, high  # the extremes are known exactly
    return {"count": count, "mean": total / count, "min": low, "max": high, "quantiles": quantiles}


def latency_summary(lat: DataFrame, by: Sequence[str] = ("layer",)) -> DataFrame:
    """``by..., count, mean, p50, p90, p99, max`` with Spark's ``percentile_approx``.

    An alternative to the histograms for ad-hoc use (notebooks): rank error at most
    1/10000 instead of a 1% value error, at several times the cost.
    """
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


def _traffic_columns() -> list[Column]:
    """The traffic aggregates: messages and bytes sent and received, deliveries,
    retransmissions (``traffic`` and ``per_node`` count the same way)."""
    kind = F.col("kind")
    size = F.coalesce(F.col("size"), F.lit(0))
    return [
        F.count(F.when(kind == "send", 1)).alias("sent"),
        F.sum(F.when(kind == "send", size).otherwise(0)).alias("bytes_sent"),
        F.count(F.when(kind == "recv", 1)).alias("received"),
        F.sum(F.when(kind == "recv", size).otherwise(0)).alias("bytes_received"),
        F.count(F.when(kind == "deliver", 1)).alias("delivered"),
        F.count(F.when(kind == "retransmit", 1)).alias("retransmitted"),
    ]


def traffic(events: DataFrame) -> DataFrame:
    """Per ``layer, node``: messages and bytes sent and received, deliveries, retransmissions."""
    return events.where(F.col("layer") != "net").groupBy("layer", "node").agg(*_traffic_columns())


def per_node(events: DataFrame) -> DataFrame:
    """``traffic`` and ``fault_counts`` in one pass: ``layer, node, fault`` plus both counts.

    Rows with ``layer`` other than ``net`` carry traffic (``fault`` null); ``net`` rows
    carry ``faults`` per fault name.
    """
    kind = F.col("kind")
    fault = F.when((F.col("layer") == "net") & (kind == "fault"), F.col("attrs").getItem("fault"))
    return events.groupBy("layer", "node", fault.alias("fault")).agg(
        *_traffic_columns(), F.count(F.when(kind == "fault", 1)).alias("faults")
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
