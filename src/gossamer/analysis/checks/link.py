"""Exon/A3M links: nothing lost, duplicated or invented on a link; credit never exceeded.

Trace conventions (``layer=link``; ``attrs.link`` names a link incarnation, unique
for its two ends, e.g. ``<src tag>><dst tag>#<incarnation>``): ``link_up`` at each end
(``peer``; on the sending side ``attrs.credits`` = the credits it starts with),
``link_down`` (``attrs.reason``), ``send`` of each message (``msg`` unique per link
message, ``peer`` = the receiving node), ``deliver`` when the receiving application
takes it (``peer`` = the sending node), ``credit`` when a sender is granted credits
(``peer`` = the receiver that granted them, ``attrs.amount``, negative when the
receiver lowered its capacity).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from gossamer.analysis.checks.common import (
    UNFINISHED,
    attr,
    clean_stops,
    correct_nodes,
    layer_events,
    location,
    message_events,
    position,
)

__all__ = ["LAYER", "credit", "delivery", "delivery_suspects"]

LAYER = "link"


def delivery(events: DataFrame, *, nodes: DataFrame | None = None) -> DataFrame:
    """Messages lost between correct nodes, delivered twice, or delivered but never sent.

    Property: each message sent on a link between two correct nodes is delivered to
    the receiver exactly once (Exon promised exactly-once per incarnation, over UDP
    too), and nothing is delivered that was not sent. A message still in flight when
    its link ended at a clean stop of either end is ``unfinished``, not lost. Columns:
    ``problem, msg, sender, receiver, count, at, detail, unfinished``.
    """
    sends = (
        message_events(events, LAYER, "send")
        .groupBy("msg", F.col("node").alias("sender"), F.col("peer").alias("receiver"))
        .agg(F.min(position()).alias("p"), F.first(attr("link")).alias("link"))
    )
    delivs = message_events(events, LAYER, "deliver").select(
        "msg",
        F.col("node").alias("receiver"),
        F.col("peer").alias("sender"),
        position().alias("p"),
    )
    correct = correct_nodes(events, nodes)
    ok_sender = correct.select(F.col("node").alias("sender"))
    ok_receiver = correct.select(F.col("node").alias("receiver"))
    missing = (
        sends.join(F.broadcast(ok_sender), "sender", "left_semi")
        .join(F.broadcast(ok_receiver), "receiver", "left_semi")
        .join(delivs.select("msg", "receiver"), ["msg", "receiver"], "left_anti")
    )
    # In flight when its link ended at a clean stop of either end (the sender traced the
    # link's end after the send): unfinished, not lost.
    stopped = clean_stops(events).select("node")
    ends = layer_events(events, LAYER, "link_down").select(
        F.col("node").alias("sender"), attr("link").alias("link"), position().alias("end")
    )
    ended = (
        missing.join(ends, ["sender", "link"])
        .where(F.col("end") > F.col("p"))
        .select("msg", "sender", "receiver")
        .distinct()
    )
    at_stop = (
        ended.join(stopped.select(F.col("node").alias("sender")), "sender", "left_semi")
        .unionByName(
            ended.join(stopped.select(F.col("node").alias("receiver")), "receiver", "left_semi")
        )
        .distinct()
        .withColumn(UNFINISHED, F.lit(True))
    )
    lost = _problems(
        missing.join(at_stop, ["msg", "sender", "receiver"], "left").fillna(
            False, subset=[UNFINISHED]
        ),
        "lost",
        F.lit(0).cast("long"),
        F.format_string(
            "%s sent %s to %s (%s:%d) and it was never delivered",
            "sender",
            "msg",
            "receiver",
            "p.file",
            "p.line",
        ),
    )
    dups = _problems(
        delivs.groupBy("msg", "receiver")
        .agg(
            F.count("*").alias("count"),
            F.first("sender").alias("sender"),
            F.max("p").alias("p"),
        )
        .where(F.col("count") > 1),
        "duplicate",
        F.col("count"),
        F.format_string(
            "%s delivered %s %d times (last %s:%d)", "receiver", "msg", "count", "p.file", "p.line"
        ),
    )
    invented = _problems(
        delivs.join(sends.select("msg"), "msg", "left_anti"),
        "never sent",
        F.lit(1).cast("long"),
        F.format_string(
            "%s delivered %s (%s:%d) but nobody sent it", "receiver", "msg", "p.file", "p.line"
        ),
    )
    return lost.unionByName(dups).unionByName(invented)


def delivery_suspects(events: DataFrame, *, nodes: DataFrame | None = None) -> DataFrame:
    """``msg, receiver``: where ``delivery`` may find something; empty only if it holds.

    ``delivery``'s linear pre-check, one aggregation: per message and receiver, the
    sends (all, and those between correct nodes) and the deliveries. A pair is suspect
    if it was delivered more than once, sent between correct nodes and never
    delivered, or delivered without being sent to that receiver.
    """
    correct = correct_nodes(events, nodes)

    def counted(kind: str, node: str, peer: str) -> DataFrame:
        return message_events(events, LAYER, kind).select(
            "msg", F.col(node).alias("sender"), F.col(peer).alias("receiver")
        )

    sends = counted("send", "node", "peer")
    between_correct = sends.join(
        F.broadcast(correct.select(F.col("node").alias("sender"))), "sender", "left_semi"
    ).join(F.broadcast(correct.select(F.col("node").alias("receiver"))), "receiver", "left_semi")
    tally = (
        sends.select(
            "msg", "receiver", F.lit(1).alias("s"), F.lit(0).alias("ok"), F.lit(0).alias("d")
        )
        .unionByName(
            between_correct.select(
                "msg", "receiver", F.lit(0).alias("s"), F.lit(1).alias("ok"), F.lit(0).alias("d")
            )
        )
        .unionByName(
            counted("deliver", "peer", "node").select(
                "msg", "receiver", F.lit(0).alias("s"), F.lit(0).alias("ok"), F.lit(1).alias("d")
            )
        )
        .groupBy("msg", "receiver")
        .agg(F.sum("s").alias("s"), F.sum("ok").alias("ok"), F.sum("d").alias("d"))
    )
    return tally.where(
        (F.col("d") > 1)
        | ((F.col("ok") > 0) & (F.col("d") == 0))
        | ((F.col("d") > 0) & (F.col("s") == 0))
    ).select("msg", "receiver")


def _problems(rows: DataFrame, problem: str, count: Column, detail: Column) -> DataFrame:
    """``rows`` (``msg, sender, receiver, p`` and what ``count`` and ``detail`` use; and
    ``UNFINISHED`` if they have it) as ``delivery`` results: ``problem, msg, sender,
    receiver, count, at, detail, unfinished``."""
    unfinished = F.col(UNFINISHED) if UNFINISHED in rows.columns else F.lit(False)
    return rows.select(
        F.lit(problem).alias("problem"),
        "msg",
        "sender",
        "receiver",
        count.alias("count"),
        location("p."),
        detail.alias("detail"),
        unfinished.alias(UNFINISHED),
    )


def credit(events: DataFrame) -> DataFrame:
    """Sends that went beyond the credit the receiver had granted.

    Property: on every link incarnation, the number of messages sent never exceeds
    the initial credits plus every grant received so far (grants may be negative).
    Only links with credit information (``attrs.credits`` on ``link_up`` or any
    ``credit`` event) are checked; a new ``link_up`` starts a new count. Columns:
    ``node, peer, link, msg, used, granted, at, detail``.
    """
    e = layer_events(events, LAYER, "link_up", "credit", "send").select(
        "node",
        "peer",
        F.coalesce(attr("link"), F.lit("")).alias("link"),
        "kind",
        "msg",
        "t",
        "file",
        "line",
        F.when(F.col("kind") == "link_up", attr("credits").cast("long"))
        .when(F.col("kind") == "credit", attr("amount").cast("long"))
        .alias("grant"),
    )
    key = ["node", "peer", "link"]
    informed = e.where(F.col("grant").isNotNull()).select(*key).distinct()
    e = e.join(informed, key, "left_semi")
    upto = Window.partitionBy(*key).orderBy("t", "file", "line")
    e = e.withColumn(
        "epoch",
        F.sum(F.when(F.col("kind") == "link_up", 1).otherwise(0)).over(
            upto.rowsBetween(Window.unboundedPreceding, Window.currentRow)
        ),
    )
    running = (
        Window.partitionBy(*key, "epoch")
        .orderBy("t", "file", "line")
        .rowsBetween(Window.unboundedPreceding, Window.currentRow)
    )
    counted = e.select(
        *key,
        "kind",
        "msg",
        "file",
        "line",
        F.sum(F.when(F.col("kind") == "send", 1).otherwise(0)).over(running).alias("used"),
        F.coalesce(F.sum("grant").over(running), F.lit(0)).alias("granted"),
    )
    return counted.where((F.col("kind") == "send") & (F.col("used") > F.col("granted"))).select(
        *key,
        "msg",
        "used",
        "granted",
        location(),
        F.format_string(
            "%s sent message %d (%s) to %s with only %d credits granted (%s:%d)",
            "node",
            "used",
            F.coalesce("msg", F.lit("?")),
            "peer",
            "granted",
            "file",
            "line",
        ).alias("detail"),
    )
