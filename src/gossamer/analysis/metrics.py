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

from gossamer.analysis.checks import cluster, discovery, gossip, isis
from gossamer.analysis.checks.common import (
    attr,
    crashed_nodes,
    faults,
    layer_events,
    message_events,
    outages,
)

__all__ = [
    "BROADCAST_ORIGINS_LIMIT",
    "DEFAULT_ORIGIN_KINDS",
    "DISCRETE_FAULTS",
    "HISTOGRAM_BASE",
    "HISTOGRAM_FLOOR",
    "ORIGIN_KINDS",
    "OUTSIDE_CRASH",
    "OUTSIDE_FAULTS",
    "QUANTILES",
    "activity",
    "bucket_value",
    "depth_histogram",
    "fault_counts",
    "fault_timeline",
    "fault_windows",
    "histogram_summary",
    "is_origin",
    "latencies",
    "latency_histogram",
    "latency_summary",
    "membership_timeline",
    "outage_events",
    "per_node",
    "renamed",
    "time_range",
    "timeline",
    "traffic",
    "windowed_latencies",
    "windowed_latency_histogram",
]

#: The event that starts a message, per layer: the application's request (an ISIS
#: multicast, a gossip broadcast, a gateway route or enqueue), not the datagrams that
#: carry it. Other layers start at ``send``. A message's latency runs from the earliest.
ORIGIN_KINDS: dict[str, tuple[str, ...]] = {
    # An ISIS multicast asked for during a view change is traced ``hold`` when asked
    # for, and ``multicast`` when it goes out in the next view.
    "isis": ("multicast", "hold"),
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


def latencies(
    events: DataFrame, *, broadcast_origins: bool = False, renamed: DataFrame | None = None
) -> DataFrame:
    """``layer, node, msg, latency``: each delivery's time since its message started.

    A message starts at its earliest origin event (``ORIGIN_KINDS``: an ISIS multicast,
    a gossip broadcast, a ping's send...) with its id in the same layer, or, when
    ``renamed`` (:func:`renamed`) says it is an earlier message sent again under a new
    id, where that first message started; ``latency`` is the delivering node's
    ``deliver`` time minus that start. Deliveries of messages without an origin event
    are left out.

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
        _starts(with_msg.where(is_origin()), renamed)
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


def renamed(events: DataFrame) -> DataFrame:
    """``layer, msg, first``: each message sent again under a new id ``msg``, and the
    id ``first`` it was first multicast under.

    An ISIS sender on agreed views withdraws its messages that lack an Ack at a view
    change and multicasts their data again in the next view under new ids, tracing
    ``withdraw`` (``attrs.as``: the new id). A message withdrawn again follows the chain
    to its first id. One small job, collected: there is one row per withdrawal.
    """
    rows = (
        message_events(events, isis.LAYER, "withdraw")
        .select("msg", attr("as").alias("again"))
        .where(F.col("again").isNotNull())
        .collect()
    )
    earlier = {r["again"]: r["msg"] for r in rows}

    def first(name: str) -> str:
        seen = {name}
        while name in earlier and earlier[name] not in seen:  # a cycle would be a bug
            name = earlier[name]
            seen.add(name)
        return name

    return events.sparkSession.createDataFrame(
        [(isis.LAYER, again, first(again)) for again in sorted(earlier)],
        "layer string, msg string, first string",
    )


def _starts(origins: DataFrame, renamed: DataFrame | None) -> DataFrame:
    """``layer, msg, t`` of ``origins`` (origin events), and, for each message in
    ``renamed``, the origin times of its first id as its own."""
    starts = origins.select("layer", "msg", "t")
    if renamed is None:
        return starts
    firsts = F.broadcast(
        renamed.select("layer", F.col("first").alias("msg"), F.col("msg").alias("again"))
    )
    again = starts.join(firsts, ["layer", "msg"]).select("layer", F.col("again").alias("msg"), "t")
    return starts.unionByName(again)


def latency_histogram(lat: DataFrame, by: Sequence[str] = ("layer", "node")) -> DataFrame:
    """``by..., bucket, count, total, low, high``: a log-bucket histogram per group
    (``by``: per layer and node unless told otherwise).

    Small whatever the run's size (a few hundred buckets per node), mergeable across
    nodes, and read by ``histogram_summary``; ``total``, ``low`` and ``high`` are the
    exact sum, minimum and maximum of each bucket's latencies.
    """
    bucket = F.when(
        F.col("latency") > HISTOGRAM_FLOOR,
        F.floor(F.log(F.col("latency") / HISTOGRAM_FLOOR) / math.log(HISTOGRAM_BASE)),
    ).otherwise(-1)
    return lat.groupBy(*by, bucket.cast("int").alias("bucket")).agg(
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
    retransmissions (``traffic`` and ``per_node`` count the same way).

    Bytes add up the sizes the events carry; where none carries one (snapshot markers
    travel inside other layers' datagrams) the sum is null, shown blank, not 0."""
    kind = F.col("kind")
    size = F.col("size")
    return [
        F.count(F.when(kind == "send", 1)).alias("sent"),
        F.sum(F.when(kind == "send", size)).alias("bytes_sent"),
        F.count(F.when(kind == "recv", 1)).alias("received"),
        F.sum(F.when(kind == "recv", size)).alias("bytes_received"),
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


# -- fault windows: ISIS latency outside the time a crash or partition held it up --------------

#: The latency scopes of ``windowed_latencies``: deliveries of messages whose lifetime
#: overlaps no crash window, and those overlapping no fault window at all.
OUTSIDE_CRASH, OUTSIDE_FAULTS = "outside_crash", "outside_faults"


def fault_windows(events: DataFrame) -> DataFrame:
    """``fault, node, start, end, last``: when an injected fault held up the ISIS group.

    A total order waits for every member of the view, so a fault delays messages until
    the group has dealt with it; these windows say when, from the traces alone:

    * ``crash``: from the crash of ISIS member ``node`` (``net/fault``, ``crash``) to the
      moment the last correct ISIS member installed a view without it (its first
      ``isis/view_change`` naming it as ``peer``; a removal before the crash counts as
      at the crash). ``last`` is that member. ``end`` is null when some correct member
      never removed it: the window lasts to the end of the run.
    * ``partition``: from a partition of ``node`` to its heal (``end`` null: never
      healed); a member cut off cannot answer, so nothing is ordered without it.
      ``last`` is null.

    Correct members are the nodes with ISIS events that never crashed (as the
    checkers' correct nodes). In a group with agreed views (the daemons'), ISIS names a
    member ``<node>#<incarnation>``: only the removal of the incarnation that crashed
    (the last one its node installed a view as, before the crash) handles the crash, not
    that of an earlier incarnation excluded by a partition. Small: one row per crash or
    partition.
    """
    members = layer_events(events, isis.LAYER).select("node").distinct()
    crashed_members = crashed_nodes(events).join(members, "node", "left_semi")
    crashes = _crashed_incarnations(crashed_members, events)
    survivors = members.join(crashes, "node", "left_anti").select(F.col("node").alias("survivor"))
    removals = layer_events(events, isis.LAYER, "view_change").select(
        F.col("node").alias("survivor"),
        F.substring_index("peer", "#", 1).alias("node"),
        F.col("peer").alias("removed"),
        F.col("t").alias("removed_t"),
    )
    removal = (
        crashes.join(removals, "node")
        .where(F.col("incarnation").isNull() | (F.col("removed") == F.col("incarnation")))
        .groupBy("node", "crashed_at", "survivor")
        .agg(F.min("removed_t").alias("removed_at"))
    )
    handled = F.greatest(F.col("removed_at"), F.col("crashed_at"))
    crash_windows = (
        crashes.select("node", "crashed_at")
        .crossJoin(survivors)
        .join(removal, ["node", "crashed_at", "survivor"], "left")
        .groupBy("node", "crashed_at")
        .agg(
            F.count_if(F.col("removed_at").isNull()).alias("never"),
            F.max(handled).alias("handled_at"),
            F.max_by("survivor", handled).alias("last"),
        )
        .select(
            F.lit("crash").alias("fault"),
            "node",
            F.col("crashed_at").alias("start"),
            F.when(F.col("never") == 0, F.col("handled_at")).alias("end"),
            F.when(F.col("never") == 0, F.col("last")).alias("last"),
        )
    )
    partition_windows = (
        outages(events)
        .where(F.col("outage") == "partition")
        .select(
            F.lit("partition").alias("fault"),
            "node",
            "start",
            "end",
            F.lit(None).cast("string").alias("last"),
        )
    )
    return crash_windows.unionByName(partition_windows)


def _crashed_incarnations(crashes: DataFrame, events: DataFrame) -> DataFrame:
    """``crashes`` (``node, crashed_at``) with ``incarnation``: the ``<node>#<n>`` the node
    last installed a view as before it crashed (``cluster.installs``); null without
    agreed views (the lab's static ISIS group)."""
    own = (
        cluster.installs(events)
        .where(F.col("inc").isNotNull())
        .select(F.col("node").alias("installer"), F.col("t").alias("installed_at"), "inc")
    )
    return (
        crashes.join(
            own,
            (F.col("installer") == F.col("node")) & (F.col("installed_at") <= F.col("crashed_at")),
            "left",
        )
        .groupBy("node", "crashed_at")
        .agg(F.max_by("inc", "installed_at").alias("incarnation"))
    )


def windowed_latencies(
    events: DataFrame, windows: DataFrame, renamed: DataFrame | None = None
) -> DataFrame:
    """``node, msg, latency, in_crash, in_fault``: each ISIS delivery, and its message's
    relation to the ``fault_windows``.

    A message's lifetime runs from its start to its last delivery at any node; it
    is in a window when the two intervals overlap (a window without an ``end`` lasts
    to the end of the run). ``in_crash``: it overlaps a crash window; ``in_fault``: a
    window of any fault. The start and ``latency`` are as in ``latencies``.
    """
    origins = message_events(events, isis.LAYER, *ORIGIN_KINDS[isis.LAYER])
    started = _starts(origins, renamed).groupBy("msg").agg(F.min("t").alias("t0"))
    lat = (
        isis.deliveries(events)
        .join(started, "msg")
        .select("node", "msg", "t0", (F.col("t") - F.col("t0")).alias("latency"))
    )
    spans = lat.groupBy("msg").agg(
        F.min("t0").alias("born"), F.max(F.col("t0") + F.col("latency")).alias("done")
    )
    w = windows.select(
        F.col("fault").alias("w_fault"),
        F.col("start").alias("w_start"),
        F.col("end").alias("w_end"),
    )
    overlaps = (F.col("w_start") <= F.col("done")) & (
        F.col("w_end").isNull() | (F.col("w_end") >= F.col("born"))
    )
    flags = (
        spans.join(F.broadcast(w), overlaps)
        .groupBy("msg")
        .agg(
            F.max((F.col("w_fault") == "crash").cast("int")).alias("crash"),
            F.count("*").alias("any"),
        )
    )
    return lat.join(flags, "msg", "left").select(
        "node",
        "msg",
        "latency",
        (F.coalesce(F.col("crash"), F.lit(0)) > 0).alias("in_crash"),
        F.col("any").isNotNull().alias("in_fault"),
    )


def windowed_latency_histogram(
    events: DataFrame, windows: DataFrame, renamed: DataFrame | None = None
) -> DataFrame:
    """``scope, bucket, count, total, low, high``: ``latency_histogram`` of the ISIS
    deliveries outside the crash windows (``scope`` = ``OUTSIDE_CRASH``) and outside
    every fault window (``OUTSIDE_FAULTS``), from one pass (``windowed_latencies``)."""
    lat = windowed_latencies(events, windows, renamed)
    scopes = F.array(
        F.when(~F.col("in_crash"), F.lit(OUTSIDE_CRASH)),
        F.when(~F.col("in_fault"), F.lit(OUTSIDE_FAULTS)),
    )
    scoped = lat.select(F.explode(scopes).alias("scope"), "latency").where(
        F.col("scope").isNotNull()
    )
    return latency_histogram(scoped, by=("scope",))
