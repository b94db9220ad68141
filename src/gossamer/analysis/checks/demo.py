"""The foundation's ping demo (``layer=demo``): every ping is answered or given up, once.

Trace conventions (``gossamer.proto.ping``): ``send``/``recv`` of every datagram
(``attrs.type`` = ``ping`` or ``pong``, ``msg`` = ``<pinger>/<seq>`` for both),
``retransmit``, ``deliver`` at the pinger when a pong completes its ping, ``lost``
when the retries ran out.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from gossamer.analysis.checks.common import attr, correct_nodes, layer_events, message_events

__all__ = ["LAYER", "pings"]

LAYER = "demo"


def pings(events: DataFrame, *, nodes: DataFrame | None = None) -> DataFrame:
    """Pings completed twice or without being sent, and pings never resolved.

    Property: at the pinger, every ping it sent ends exactly once, either delivered
    (its pong arrived) or lost (retries ran out), and nothing else is delivered.
    Pingers that crashed are exempt from "unresolved". Columns: ``problem, node, msg,
    count, detail``.
    """
    sent = (
        layer_events(events, LAYER, "send")
        .where(F.col("msg").isNotNull() & (attr("type") == "ping"))
        .select("node", "msg")
        .distinct()
    )
    ends = message_events(events, LAYER, "deliver", "lost")
    per = ends.groupBy("node", "msg").agg(
        F.count("*").alias("count"),
        F.sum(F.when(F.col("kind") == "deliver", 1).otherwise(0)).alias("delivered"),
    )
    twice = per.where(F.col("count") > 1).select(
        F.lit("resolved twice").alias("problem"),
        "node",
        "msg",
        "count",
        F.format_string(
            "%s resolved ping %s %d times (%d deliveries)", "node", "msg", "count", "delivered"
        ).alias("detail"),
    )
    invented = per.join(sent, ["node", "msg"], "left_anti").select(
        F.lit("never sent").alias("problem"),
        "node",
        "msg",
        "count",
        F.format_string("%s resolved ping %s that it never sent", "node", "msg").alias("detail"),
    )
    unresolved = (
        sent.join(F.broadcast(correct_nodes(events, nodes)), "node", "left_semi")
        .join(per.select("node", "msg"), ["node", "msg"], "left_anti")
        .select(
            F.lit("unresolved").alias("problem"),
            "node",
            "msg",
            F.lit(0).cast("long").alias("count"),
            F.format_string(
                "%s sent ping %s and it was neither answered nor given up", "node", "msg"
            ).alias("detail"),
        )
    )
    return twice.unionByName(invented).unionByName(unresolved)
