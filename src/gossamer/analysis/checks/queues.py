"""Replicated queues, judged like Jepsen: from what the queue's clients saw.

The lab's ``queues`` workload (``gossamer.lab.queue_clients``) traces every client
operation in layer ``queue`` (``attrs.client`` or ``attrs.consumer`` the client id,
``attrs.host`` the daemon it is connected to):

- ``push`` (``msg`` = the nonce): a producer handed a QUEUE to its client;
- ``confirm`` (``msg`` = the message id, ``attrs.nonce``): its QUEUE_CONFIRM arrived;
- ``refused`` (``msg`` = the nonce, ``attrs.reason``): the node answered op 3 instead;
- ``receive`` (``msg`` = the id, ``attrs.attempt``, ``attrs.consumer``): a QUEUE dispatch
  arrived;
- ``ack`` (``msg`` = the id, ``attrs.attempt``): the consumer sent QUEUE_ACK.

A push with neither a confirm nor a refusal is *indeterminate*: nothing is owed for it
(nor for a refused one, which a node may refuse after ordering it). QUEUE_ACK has no
answer in the 신경 protocol (a node outside the majority refuses it), so whether an ack
took effect is read from the nodes: ``applied_acks``, the daemons' ``queue``/``ack``
(node events of layer ``queue`` never carry ``attrs.host``) or a single gateway's
``gateway``/``ack``, traced once the ack is applied and stored. Whether a node was in
the majority is read from the node daemons' traces too:
``views``/``blocked`` until ``unblocked`` or a ``view_change``, ``excluded`` until the
next ``view_change``, a restart until the first ``view_change`` after it, a crash until
the restart, and the lab's ``net``/``fault`` ``partition`` (``attrs.hosts``, traced on
each isolated host) until its ``heal`` when the isolated hosts are fewer than half of the
cluster's hosts (every name a ``view_change`` ever listed). Times of different processes
are compared: the lab's processes share one monotonic clock.

Every checker returns one row per violation: ``problem, msg, ..., at, detail``.
"""

from __future__ import annotations

import math

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from gossamer.analysis.checks.common import (
    UNFINISHED,
    attr,
    clean_stops,
    faults,
    layer_events,
    location,
)

__all__ = [
    "ACK_GRACE",
    "DRAIN",
    "LAYER",
    "SLACK",
    "applied_acks",
    "confirmed_delivered",
    "minority_periods",
    "minority_refused",
    "no_double_holding",
    "no_redelivery_after_ack",
]

#: The trace layer of the queue clients' events.
LAYER = "queue"
#: Seconds a confirmed message is given to be delivered and acked before the consumers
#: stop: one confirmed later and not acked is *unfinished*, not lost.
DRAIN = 10.0
#: Seconds after an ack is stored during which a delivery already on its way may still
#: arrive (a dispatch sent just before the ack was applied).
ACK_GRACE = 1.0
#: Seconds around the edges of a node's time outside the majority (a push right at a
#: cut, a view change seen a moment later by a client) that are given the benefit of
#: the doubt.
SLACK = 0.5


def _queue(events: DataFrame, kind: str) -> DataFrame:
    """The clients' events of ``kind`` (the daemons trace in layer ``queue`` too, never
    with ``attrs.host``)."""
    return layer_events(events, LAYER, kind).where(
        F.col("msg").isNotNull() & attr("host").isNotNull()
    )


def applied_acks(events: DataFrame) -> DataFrame:
    """``msg, t, node``: every ack a node applied: the daemons' ``queue``/``ack`` (no
    ``attrs.host``), a single gateway's ``gateway``/``ack``."""
    daemons = layer_events(events, LAYER, "ack").where(attr("host").isNull())
    return daemons.unionByName(layer_events(events, "gateway", "ack")).where(
        F.col("msg").isNotNull()
    ).select("msg", "t", "node")


def _attempt() -> Column:
    return attr("attempt").cast("int")


def _violations(frame: DataFrame, problem: str, who: str, detail: Column) -> DataFrame:
    """``problem, msg, <who>, at, detail``: one row per row of ``frame`` (which has
    ``msg``, ``who`` and the ``file``/``line`` of the event to point at)."""
    return frame.select(
        F.lit(problem).alias("problem"), "msg", who, location(), detail.alias("detail")
    )


def _next_after(starts: DataFrame, ends: DataFrame) -> DataFrame:
    """``host, start, end``: each start with the first end on the same host after it
    (``end`` infinite when there is none)."""
    return (
        starts.join(ends, "host", "left")
        .where(F.col("e").isNull() | (F.col("e") > F.col("start")))
        .groupBy("host", "start")
        .agg(F.coalesce(F.min("e"), F.lit(math.inf)).alias("end"))
    )


def minority_periods(events: DataFrame, *, crashes: bool = True) -> DataFrame:
    """``host, start, end``: when each node daemon was outside the majority (see the
    module docstring), a crash until its restart included when ``crashes``."""
    views = layer_events(events, "views").select(F.col("node").alias("host"), "t", "kind")
    installs = views.where(F.col("kind") == "view_change").select("host", F.col("t").alias("e"))
    unblocks = views.where(F.col("kind").isin("view_change", "unblocked")).select(
        "host", F.col("t").alias("e")
    )
    f = faults(events).select(F.col("node").alias("host"), "t", "fault", "file", "line")
    periods = (
        _next_after(
            views.where(F.col("kind") == "blocked").select("host", F.col("t").alias("start")),
            unblocks,
        )
        .unionByName(
            _next_after(
                views.where(F.col("kind") == "excluded").select("host", F.col("t").alias("start")),
                installs,
            )
        )
        .unionByName(
            _next_after(
                f.where(F.col("fault") == "restart").select("host", F.col("t").alias("start")),
                installs,
            )
        )
    )
    if crashes:
        restarts = f.where(F.col("fault") == "restart").select("host", F.col("t").alias("e"))
        periods = periods.unionByName(
            _next_after(
                f.where(F.col("fault") == "crash").select("host", F.col("t").alias("start")),
                restarts,
            )
        )
    # A cut of fewer than half of the cluster's hosts: those hosts are the minority.
    named = layer_events(events, "views", "view_change").select(
        F.explode(F.split(F.coalesce(attr("members"), F.lit("")), ",")).alias("m")
    )
    cluster = named.where(F.col("m") != "").select(
        F.substring_index("m", "#", 1).alias("name")
    ).distinct().agg(F.count("*").alias("n"))
    cuts = (
        layer_events(events, "net", "fault")
        .where(attr("fault") == "partition")
        .select(
            F.col("node").alias("host"),
            F.col("t").alias("start"),
            F.size(F.split(F.coalesce(attr("hosts"), F.col("node")), ",")).alias("isolated"),
        )
        .crossJoin(cluster)
        .where(2 * F.col("isolated") < F.col("n"))
        .select("host", "start")
    )
    heals = f.where(F.col("fault") == "heal").select("host", F.col("t").alias("e"))
    return periods.unionByName(_next_after(cuts, heals))


def confirmed_delivered(events: DataFrame, *, drain: float = DRAIN) -> DataFrame:
    """Every confirmed message is received by a consumer, and a consumer's ack of it is
    applied (``applied_acks``), at least once.

    What the run did not let the consumers drain is marked unfinished (``UNFINISHED``),
    not lost: every message missing when a consumer still received something less than
    ``drain`` seconds before the consumers stopped (the first clean stop, ``net``/``stop``,
    of a process that traces queue events; else the last queue event), and otherwise a
    message confirmed less than ``drain`` seconds before that stop.
    Columns: ``problem, msg, nonce, at, detail, unfinished``.
    """
    confirms = (
        _queue(events, "confirm")
        .groupBy("msg")
        .agg(F.min_by(F.struct("t", "file", "line", attr("nonce").alias("nonce")), "t").alias("c"))
    )
    received = _queue(events, "receive").select("msg").distinct()
    acked = applied_acks(events).select("msg").distinct()
    tracing = layer_events(events, LAYER).select("node").distinct()
    stop = (
        clean_stops(events)
        .join(tracing, "node", "left_semi")
        .agg(F.min("stopped_at").alias("stop"))
        .crossJoin(layer_events(events, LAYER).agg(F.max("t").alias("last")))
        .crossJoin(_queue(events, "receive").agg(F.max("t").alias("received")))
        .select(F.coalesce("stop", "last").alias("end"), "received")
    )
    missing = (
        confirms.join(acked, "msg", "left_anti")
        .join(received.withColumn("got", F.lit(True)), "msg", "left")
        .crossJoin(stop)
    )
    return missing.select(
        F.when(F.col("got"), F.lit("never acked")).otherwise(F.lit("lost")).alias("problem"),
        "msg",
        F.col("c.nonce").alias("nonce"),
        location("c."),
        F.format_string(
            "%s (nonce %s) was confirmed at t=%.3f (%s:%d) and %s",
            "msg", F.coalesce("c.nonce", F.lit("?")), "c.t", "c.file", "c.line",
            F.when(F.col("got"), F.lit("received but never acked"))
            .otherwise(F.lit("never received by any consumer")),
        ).alias("detail"),
        (
            (F.col("c.t") > F.col("end") - drain)
            | F.coalesce(F.col("received") > F.col("end") - drain, F.lit(False))
        ).alias(UNFINISHED),
    )


def no_redelivery_after_ack(events: DataFrame, *, grace: float = ACK_GRACE) -> DataFrame:
    """No consumer receives a message after its ack was applied (a node traced
    ``gateway``/``ack`` of it), in a delivery attempt newer than every attempt any
    consumer had received by then; ``grace`` seconds after the ack are allowed for
    a dispatch already on its way.

    Columns: ``problem, msg, consumer, at, detail``.
    """
    stored = (
        applied_acks(events)
        .groupBy("msg")
        .agg(F.min_by(F.struct("t", "node"), "t").alias("s"))
    )
    receives = _queue(events, "receive").select(
        "msg", "t", "file", "line", _attempt().alias("attempt"),
        attr("consumer").alias("consumer"),
    )
    seen = (
        receives.join(stored, "msg")
        .where(F.col("t") <= F.col("s.t"))
        .groupBy("msg")
        .agg(F.max("attempt").alias("seen"))
    )
    late = (
        receives.join(stored, "msg")
        .join(seen, "msg", "left")
        .where(
            (F.col("t") > F.col("s.t") + grace)
            & (F.coalesce("attempt", F.lit(0)) > F.coalesce("seen", F.lit(0)))
        )
    )
    return _violations(late, "delivered after ack", "consumer", F.format_string(
        "%s received %s (attempt %d) at t=%.3f; its ack was applied on %s at t=%.3f",
        "consumer", "msg", F.coalesce("attempt", F.lit(0)), "t", "s.node", "s.t",
    ))


def no_double_holding(
    events: DataFrame, *, ack_timeout: float = 15.0, slack: float = SLACK
) -> DataFrame:
    """No message is held by two consumers at once while both are connected to the
    majority, and no delivery attempt reaches two consumers.

    Consumer c1 holds message m from its ``receive`` until the first of: its ``ack``
    of m, its reconnection (a ``gateway``/``client_ready`` of c1), ``ack_timeout``
    seconds. A ``receive`` of m by another consumer c2 within that time is a violation
    when neither consumer's node was outside the majority (``minority_periods``,
    widened by ``slack``) at any moment from the first receive to the second. Two
    receives of one attempt by different consumers are a violation whatever happened.

    Columns: ``problem, msg, consumer, at, detail``.
    """
    receives = _queue(events, "receive").select(
        "msg", "t", "file", "line", _attempt().alias("attempt"),
        attr("consumer").alias("consumer"), attr("host").alias("host"),
    )
    acks = _queue(events, "ack").select(
        "msg", attr("consumer").alias("consumer"), F.col("t").alias("e")
    )
    readies = layer_events(events, "gateway", "client_ready").select(
        F.regexp_extract(attr("client"), r"^[^/]*/(.*)$", 1).alias("consumer"),
        F.col("t").alias("e"),
    )
    first = receives.select(
        "msg", F.col("consumer").alias("c1"), F.col("host").alias("h1"),
        F.col("t").alias("t1"), F.col("attempt").alias("a1"),
    )
    ends = (
        first.join(acks.withColumnRenamed("consumer", "c1"), ["msg", "c1"], "left")
        .where(F.col("e").isNull() | (F.col("e") > F.col("t1")))
        .groupBy("msg", "c1", "t1")
        .agg(F.min("e").alias("acked"))
    )
    reconnects = (
        first.select("c1", "t1").distinct()
        .join(readies.withColumnRenamed("consumer", "c1"), "c1")
        .where(F.col("e") > F.col("t1"))
        .groupBy("c1", "t1")
        .agg(F.min("e").alias("reconnected"))
    )
    holds = (
        first.join(ends, ["msg", "c1", "t1"], "left")
        .join(reconnects, ["c1", "t1"], "left")
        .select(
            "*",
            F.least(
                F.coalesce("acked", F.lit(math.inf)),
                F.coalesce("reconnected", F.lit(math.inf)),
                F.col("t1") + ack_timeout,
            ).alias("until"),
        )
    )
    pairs = holds.join(receives, "msg").where(F.col("consumer") != F.col("c1"))
    outside = minority_periods(events)
    overlapping = (
        pairs.select("msg", "c1", "t1", "consumer", "t", "h1", "host")
        .join(
            outside.withColumnRenamed("host", "h"),
            ((F.col("h") == F.col("h1")) | (F.col("h") == F.col("host")))
            & (F.col("start") - slack <= F.col("t"))
            & (F.col("end") + slack >= F.col("t1")),
        )
        .select("msg", "c1", "t1", "consumer", "t")
        .distinct()
    )
    during = pairs.where((F.col("t") > F.col("t1")) & (F.col("t") < F.col("until"))).join(
        overlapping, ["msg", "c1", "t1", "consumer", "t"], "left_anti"
    )
    same_attempt = pairs.where(
        F.col("a1").isNotNull() & (F.col("a1") == F.col("attempt"))
        & (F.col("c1") < F.col("consumer"))
    )
    return _violations(during, "held twice", "consumer", F.format_string(
        "%s received %s at t=%.3f while %s held it (received at t=%.3f, not acked), "
        "both connected to the majority", "consumer", "msg", "t", "c1", "t1",
    )).unionByName(_violations(same_attempt, "one attempt twice", "consumer", F.format_string(
        "%s and %s both received attempt %d of %s", "c1", "consumer", "attempt", "msg",
    )))


def minority_refused(events: DataFrame, *, slack: float = SLACK) -> DataFrame:
    """Nothing pushed to a node while it was outside the majority is confirmed before
    it was back: a push made at least ``slack`` seconds into such a period
    (``minority_periods``, crashes aside) whose confirm arrived before the period ended.

    Columns: ``problem, msg, client, at, detail``.
    """
    pushes = _queue(events, "push").select(
        F.col("msg").alias("nonce"), F.col("t").alias("tp"), attr("host").alias("host"),
        attr("client").alias("client"),
    )
    confirms = _queue(events, "confirm").select(
        "msg", attr("nonce").alias("nonce"), "t", "file", "line"
    )
    periods = minority_periods(events, crashes=False)
    found = (
        pushes.join(confirms, "nonce")
        .join(periods, "host")
        .where(
            (F.col("tp") >= F.col("start") + slack)
            & (F.col("tp") < F.col("end"))
            & (F.col("t") < F.col("end"))
        )
    )
    return _violations(found, "confirmed in minority", "client", F.format_string(
        "%s pushed %s to %s at t=%.3f, outside the majority since t=%.3f, and it was "
        "confirmed at t=%.3f (before t=%.3f)", "client", "nonce", "host", "tp", "start", "t",
        "end",
    ))
