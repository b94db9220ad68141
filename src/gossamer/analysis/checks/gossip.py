"""Gossip (Chatter) broadcast: coverage, hop depth, integrity, and redundancy figures.

Trace conventions (``layer=gossip``): ``broadcast`` at the origin (``msg`` =
``<origin>/<seqno>``, optional ``attrs.dests`` = comma-separated node ids when the
broadcast is addressed to a subset), ``send`` of each copy (``peer``, ``size``,
``attrs.via`` = ``tcp`` or ``multicast``), ``recv`` of each copy (``peer`` = the node
it came from, ``attrs.hop`` = transmissions from the origin, 1 for a copy received
straight from it), and ``deliver`` once per node.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from gossamer.analysis.checks.common import (
    attr,
    correct_nodes,
    delivery_integrity,
    layer_events,
    message_events,
    outages,
    shared,
)

__all__ = [
    "LAYER",
    "broadcasts",
    "coverage",
    "coverage_suspects",
    "depth",
    "first_hops",
    "integrity",
    "redundancy",
]

LAYER = "gossip"


@shared
def broadcasts(events: DataFrame) -> DataFrame:
    """``msg, origin, t, dests``: each broadcast at its origin (``dests`` null = everyone)."""
    return (
        message_events(events, LAYER, "broadcast")
        .groupBy("msg")
        .agg(
            F.min_by("node", "t").alias("origin"),
            F.min("t").alias("t"),
            F.min_by(attr("dests"), "t").alias("dests"),
        )
    )


#: Seconds after a broadcast during which a partition still excuses a miss: Chatter
#: keeps nothing to forward later, so a copy in flight when the cut comes is lost.
PARTITION_GRACE = 1.0


def coverage(
    events: DataFrame,
    *,
    nodes: DataFrame | None = None,
    min_coverage: float = 1.0,
    grace: float = PARTITION_GRACE,
) -> DataFrame:
    """Broadcasts that reached too few of the correct nodes they were meant for.

    Property: every correct destination delivers every broadcast (``min_coverage`` =
    1.0), or at least that fraction of them. Destinations are ``attrs.dests`` when
    given, else every node of the run; the origin counts as covered. A destination
    cut off by a partition (traced ``partition`` to ``heal`` on the isolated nodes)
    between the broadcast and ``grace`` seconds after it is not expected to deliver
    it; nor is anyone when the origin was cut off then (the trace does not say who
    was on its side), or crashed then: validity binds a correct origin only, and a
    broadcast its origin was killed while sending may reach a part of the tree or none
    (what it handed to a socket before ``SIGKILL`` may never leave the host). Columns:
    ``msg, origin, delivered, expected, coverage, missing, detail``.
    """
    correct = correct_nodes(events, nodes)
    b = broadcasts(events)
    out = outages(events)
    cut = out.where(F.col("outage") == "partition")
    during = (F.col("start") <= F.col("t") + F.lit(grace)) & (
        F.col("end").isNull() | (F.col("end") >= F.col("t"))
    )
    origin_cut = (
        b.join(out.withColumnRenamed("node", "origin"), "origin").where(during).select("msg")
    )
    b = b.join(origin_cut, "msg", "left_anti")
    everyone = correct.agg(F.collect_set("node").alias("everyone"))
    targets = b.crossJoin(F.broadcast(everyone)).select(
        "msg",
        "origin",
        "t",
        F.when(F.col("dests").isNull(), F.col("everyone"))
        .otherwise(F.array_intersect(F.split("dests", ","), F.col("everyone")))
        .alias("targets"),
    )
    wanted = targets.select("msg", "origin", "t", F.explode("targets").alias("node"))
    excused = wanted.join(cut, "node").where(during).select("msg", "node")
    wanted = wanted.join(excused, ["msg", "node"], "left_anti").drop("t")
    got = (
        layer_events(events, LAYER, "deliver")
        .select("msg", "node")
        .unionByName(b.select("msg", F.col("origin").alias("node")))
        .distinct()
    )
    reached = wanted.join(got.withColumn("hit", F.lit(True)), ["msg", "node"], "left")
    per = reached.groupBy("msg", "origin").agg(
        F.count("*").alias("expected"),
        F.count("hit").alias("delivered"),
        F.slice(
            F.sort_array(F.collect_list(F.when(F.col("hit").isNull(), F.col("node")))), 1, 10
        ).alias("missing"),
    )
    cov = F.when(F.col("expected") > 0, F.col("delivered") / F.col("expected")).otherwise(1.0)
    return (
        per.select("msg", "origin", "delivered", "expected", cov.alias("coverage"), "missing")
        .where(F.col("coverage") < F.lit(min_coverage) - F.lit(1e-12))
        .select(
            "*",
            F.format_string(
                "%s from %s reached %d of %d correct destinations (%.1f%%); not %s",
                "msg",
                "origin",
                "delivered",
                "expected",
                F.col("coverage") * 100,
                F.array_join("missing", ", "),
            ).alias("detail"),
        )
    )


def coverage_suspects(events: DataFrame, *, nodes: DataFrame | None = None) -> DataFrame:
    """``msg``: broadcasts that some correct node neither sent nor delivered. Empty only
    if ``coverage`` holds, whatever its ``min_coverage``, destinations and partitions:
    its linear pre-check."""
    correct = correct_nodes(events, nodes)
    b = broadcasts(events)
    reached = (
        layer_events(events, LAYER, "deliver")
        .select("msg", "node")
        .unionByName(b.select("msg", F.col("origin").alias("node")))
        .join(F.broadcast(correct), "node", "left_semi")
        .distinct()
        .groupBy("msg")
        .agg(F.count("*").alias("reached"))
    )
    everyone = correct.agg(F.count("*").alias("everyone"))
    return (
        b.select("msg")
        .join(reached, "msg", "left")
        .crossJoin(F.broadcast(everyone))
        .where(F.coalesce("reached", F.lit(0)) < F.col("everyone"))
        .select("msg")
    )


def first_hops(events: DataFrame) -> DataFrame:
    """``msg, node, hop, receptions``: each node's first (smallest) hop count per broadcast."""
    return (
        message_events(events, LAYER, "recv")
        .select("msg", "node", attr("hop").cast("long").alias("hop"))
        .groupBy("msg", "node")
        .agg(F.min("hop").alias("hop"), F.count("*").alias("receptions"))
    )


def depth(events: DataFrame, *, max_depth: int) -> DataFrame:
    """Broadcasts whose tree was deeper than ``max_depth`` hops.

    Property: the depth of a broadcast (the largest over nodes of the hop count of
    their first copy) is at most the bound, e.g. ceil(log2 N) over TCP only and
    ceil(log2 S) + 2 with S multicast subnets (docs/gossip.md). Columns:
    ``msg, depth, bound, deepest, detail``.
    """
    return (
        first_hops(events)
        .groupBy("msg")
        .agg(F.max("hop").alias("depth"), F.max_by("node", "hop").alias("deepest"))
        .where(F.col("depth") > max_depth)
        .select(
            "msg",
            "depth",
            F.lit(max_depth).alias("bound"),
            "deepest",
            F.format_string(
                "%s needed %d hops to reach %s; the bound is %d",
                "msg",
                "depth",
                "deepest",
                F.lit(max_depth),
            ).alias("detail"),
        )
    )


def integrity(events: DataFrame) -> DataFrame:
    """Broadcasts delivered twice by one node, or delivered but never broadcast.

    Property: each node delivers each broadcast at most once, and only broadcasts
    some node made. Columns: ``problem, node, msg, count, at, detail``.
    """
    delivered = message_events(events, LAYER, "deliver")
    return delivery_integrity(delivered, broadcasts(events), verb="broadcast")


def redundancy(events: DataFrame) -> DataFrame:
    """Per broadcast: ``msg, depth, receivers, receptions, redundant, tcp_sends, bytes``.

    ``redundant`` counts receptions beyond each node's first: the price of the
    multicast shortcut and of re-planned chunks. A figure, not a property.
    """
    hops = (
        first_hops(events)
        .groupBy("msg")
        .agg(
            F.max("hop").alias("depth"),
            F.count("*").alias("receivers"),
            F.sum("receptions").alias("receptions"),
        )
    )
    sends = (
        message_events(events, LAYER, "send")
        .groupBy("msg")
        .agg(
            F.count(F.when(F.coalesce(attr("via"), F.lit("tcp")) == "tcp", 1)).alias("tcp_sends"),
            F.coalesce(F.sum("size"), F.lit(0)).alias("bytes"),
        )
    )
    return hops.join(sends, "msg", "full").select(
        "msg",
        "depth",
        F.coalesce("receivers", F.lit(0)).alias("receivers"),
        F.coalesce("receptions", F.lit(0)).alias("receptions"),
        (F.coalesce("receptions", F.lit(0)) - F.coalesce("receivers", F.lit(0))).alias("redundant"),
        F.coalesce("tcp_sends", F.lit(0)).alias("tcp_sends"),
        F.coalesce("bytes", F.lit(0)).alias("bytes"),
    )
