"""Chandy–Lamport snapshots: the recorded cut is consistent, and the workload invariant holds.

Trace conventions (``layer=snapshot``, ``attrs.snapshot`` = the snapshot id on every
snapshot event): ``local_state`` where a node records its state (``attrs.value`` = its
part of the workload's conserved quantity, e.g. its balance; optional ``attrs.total``
= the quantity's known global total), ``channel_state`` for each incoming channel
(``peer`` = the channel's sender, ``attrs.value`` = the amount recorded in flight,
``attrs.count`` = the number of messages recorded), ``marker`` and
``snapshot_done``. The workload's own messages are ``send`` (``peer`` = receiver)
and ``recv`` (``peer`` = sender) with one ``msg`` id and ``attrs.amount``.

A node's cut point for snapshot s is its ``local_state`` event; "before the cut"
means earlier in that node's own order, ``(t, file, line)``.

**On agreed views** (``gossamer.proto.snapshot_group``) a snapshot belongs to one view:
its recorded states say which (``$.isis.agreed.view`` in ``attrs.state``). One that a
view change ended is traced ``abandon`` by a member and is not judged; a member of its
view must record it if it went on into the next view (or ended the run in it, never
having crashed); the conserved quantity is the same in every snapshot of one view, but
changes from view to view (members leave with their share, joiners bring theirs). Peers
are named ``name#incarnation`` there: the checks compare the name.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from gossamer.analysis.checks.common import (
    attr,
    correct_nodes,
    crashed_nodes,
    layer_events,
    message_events,
    position,
)
from gossamer.analysis.checks.vsync import member_views

__all__ = ["LAYER", "consistency", "cuts", "invariant", "snapshot_totals"]

LAYER = "snapshot"


def abandoned(events: DataFrame) -> DataFrame:
    """``snapshot``: snapshots a view change ended at some member (not judged)."""
    return (
        layer_events(events, LAYER, "abandon")
        .select(attr("snapshot").alias("snapshot"))
        .where(F.col("snapshot").isNotNull())
        .distinct()
    )


def _name(column: str) -> Column:
    """A peer's name: ``name#incarnation`` on agreed views, the name elsewhere."""
    return F.regexp_replace(F.col(column), r"#[0-9]+$", "")


def _agreed_view() -> Column:
    """The agreed view a recorded state belongs to (null on a static group)."""
    return F.get_json_object(attr("state"), "$.isis.agreed.view").cast("long")


def cuts(events: DataFrame) -> DataFrame:
    """``node, snapshot, cut, value, total, view``: each node's recorded state per
    snapshot not abandoned; ``view`` is null but on agreed views."""
    return (
        layer_events(events, LAYER, "local_state")
        .where(attr("snapshot").isNotNull())
        .groupBy("node", attr("snapshot").alias("snapshot"))
        .agg(
            F.min(position()).alias("cut"),
            F.min_by(attr("value").cast("double"), position()).alias("value"),
            F.max(attr("total").cast("double")).alias("total"),
            F.max(_agreed_view()).alias("view"),
        )
        .join(abandoned(events), "snapshot", "left_anti")
    )


def _messages(events: DataFrame, kind: str, side: str) -> DataFrame:
    return message_events(events, LAYER, kind).select(
        "msg",
        F.col("node").alias(side),
        _name("peer").alias(f"{side}_peer"),
        position().alias(f"{side}_pos"),
        attr("amount").cast("double").alias(f"{side}_amount"),
    )


def _fmt(text: str, *cols: Column | str) -> Column:
    return F.format_string(text, *cols)


def consistency(events: DataFrame, *, nodes: DataFrame | None = None) -> DataFrame:
    """Orphan messages, missing local states and wrong channel states, per snapshot.

    Property (Chandy and Lamport, "Distributed snapshots", ACM TOCS 3(1), 1985): the
    cut is consistent, i.e. no message is received before its receiver's cut point
    but sent after its sender's (``orphan``); every correct node that takes part
    records its state (``missing local state``); and each channel's recorded state is
    exactly the messages sent before the sender's cut and received after the
    receiver's (``channel state``, checked on ``attrs.count`` and ``attrs.value`` when
    recorded). Columns: ``problem, snapshot, node, peer, msg, detail``.
    """
    c = cuts(events)
    sends = _messages(events, "send", "sender")
    recvs = _messages(events, "recv", "receiver")
    cut_s = c.select(F.col("node").alias("sender"), "snapshot", F.col("cut").alias("sender_cut"))
    cut_r = c.select(
        F.col("node").alias("receiver"), "snapshot", F.col("cut").alias("receiver_cut")
    )
    msgs = sends.join(recvs, "msg").join(cut_s, "sender").join(cut_r, ["receiver", "snapshot"])
    sent_before = F.col("sender_pos") < F.col("sender_cut")
    recv_before = F.col("receiver_pos") < F.col("receiver_cut")
    orphans = msgs.where(recv_before & ~sent_before).select(
        F.lit("orphan").alias("problem"),
        "snapshot",
        F.col("receiver").alias("node"),
        F.col("sender").alias("peer"),
        "msg",
        _fmt(
            "snapshot %s: %s recorded %s as received (%s:%d) but %s sent it after its cut (%s:%d)",
            "snapshot",
            "receiver",
            "msg",
            "receiver_pos.file",
            "receiver_pos.line",
            "sender",
            "sender_pos.file",
            "sender_pos.line",
        ).alias("detail"),
    )

    takers = correct_nodes(events, nodes).join(
        layer_events(events, LAYER).select("node").distinct(), "node", "left_semi"
    )
    static = takers.crossJoin(c.where(F.col("view").isNull()).select("snapshot").distinct())
    missing = (
        static.unionByName(_view_takers(events, c, takers))
        .join(c.select("node", "snapshot"), ["node", "snapshot"], "left_anti")
        .select(
            F.lit("missing local state").alias("problem"),
            "snapshot",
            "node",
            F.lit(None).cast("string").alias("peer"),
            F.lit(None).cast("string").alias("msg"),
            _fmt("snapshot %s: %s never recorded its local state", "snapshot", "node").alias(
                "detail"
            ),
        )
    )

    in_flight = (
        msgs.where(sent_before & ~recv_before)
        .groupBy("snapshot", "receiver", "sender")
        .agg(
            F.count("*").alias("flying"),
            F.sum(F.coalesce("sender_amount", "receiver_amount")).alias("flying_value"),
        )
    )
    recorded = (
        layer_events(events, LAYER, "channel_state")
        .where(attr("snapshot").isNotNull() & F.col("peer").isNotNull())
        .join(abandoned(events), attr("snapshot") == F.col("snapshot"), "left_anti")
        .select(
            attr("snapshot").alias("snapshot"),
            F.col("node").alias("receiver"),
            _name("peer").alias("sender"),
            attr("count").cast("long").alias("count"),
            attr("value").cast("double").alias("value"),
        )
    )
    channels = in_flight.join(recorded, ["snapshot", "receiver", "sender"], "full").select(
        "snapshot",
        "receiver",
        "sender",
        F.coalesce("flying", F.lit(0)).alias("flying"),
        F.coalesce("flying_value", F.lit(0.0)).alias("flying_value"),
        "count",
        "value",
    )
    value_off = F.abs(F.col("value") - F.col("flying_value")) > F.lit(1e-6) * F.greatest(
        F.lit(1.0), F.abs("flying_value")
    )
    wrong = channels.where(
        (F.col("count").isNotNull() & (F.col("count") != F.col("flying")))
        | (F.col("value").isNotNull() & value_off)
        | (F.col("count").isNull() & F.col("value").isNull() & (F.col("flying") > 0))
    ).select(
        F.lit("channel state").alias("problem"),
        "snapshot",
        F.col("receiver").alias("node"),
        F.col("sender").alias("peer"),
        F.lit(None).cast("string").alias("msg"),
        _fmt(
            "snapshot %s: channel %s->%s recorded %s messages worth %s, "
            "but %d worth %s were in flight",
            "snapshot",
            "sender",
            "receiver",
            F.coalesce(F.col("count").cast("string"), F.lit("no")),
            F.coalesce(F.col("value").cast("string"), F.lit("nothing")),
            "flying",
            F.col("flying_value").cast("string"),
        ).alias("detail"),
    )
    return orphans.unionByName(missing).unionByName(wrong)


def _view_takers(events: DataFrame, c: DataFrame, correct: DataFrame) -> DataFrame:
    """``node, snapshot``: on agreed views, the members of each snapshot's view that must
    record it: those that went on into the next view, and those that ended the run in it
    (never having crashed)."""
    views = c.where(F.col("view").isNotNull()).select("snapshot", "view").distinct()
    spans = member_views(events)
    moved_on = spans.where(F.col("complete"))
    stayed = spans.where(F.col("end").isNull()).join(correct, "node", "left_semi")
    members = moved_on.unionByName(stayed).select("node", "view").distinct()
    return views.join(members, "view").select("node", "snapshot")


def snapshot_totals(events: DataFrame) -> DataFrame:
    """``snapshot, nodes, local_sum, channel_sum, total, declared, members, shrunk, view``.

    Sums per snapshot. ``declared`` is the largest ``attrs.total`` any node recorded
    (null when none did); ``members`` the sorted ids of the nodes in the cut;
    ``shrunk`` is true when a node that had crashed before the snapshot began is not
    among them (its share of the quantity left with it); ``view`` the agreed view the
    snapshot belongs to (null but on agreed views).
    """
    c = cuts(events)
    local = c.groupBy("snapshot").agg(
        F.count("*").alias("nodes"),
        F.sum("value").alias("local_sum"),
        F.max("total").alias("declared"),
        F.array_sort(F.collect_set("node")).alias("members"),
        F.min(F.col("cut.t")).alias("began"),
        F.max("view").alias("view"),
    )
    chan = (
        layer_events(events, LAYER, "channel_state")
        .where(attr("snapshot").isNotNull())
        .groupBy(attr("snapshot").alias("snapshot"))
        .agg(F.sum(attr("value").cast("double")).alias("channel_sum"))
    )
    gone = (
        local.crossJoin(F.broadcast(crashed_nodes(events)))
        .where(F.col("crashed_at") <= F.col("began"))
        .where(~F.array_contains("members", F.col("node")))
        .select("snapshot")
        .distinct()
        .withColumn("shrunk", F.lit(True))
    )
    return (
        local.join(chan, "snapshot", "left")
        .join(gone, "snapshot", "left")
        .select(
            "snapshot",
            "nodes",
            "local_sum",
            F.coalesce("channel_sum", F.lit(0.0)).alias("channel_sum"),
            (F.col("local_sum") + F.coalesce("channel_sum", F.lit(0.0))).alias("total"),
            "declared",
            "members",
            F.coalesce("shrunk", F.lit(False)).alias("shrunk"),
            "view",
        )
    )


def invariant(events: DataFrame, *, tolerance: float = 1e-6) -> DataFrame:
    """Snapshots in which the workload's conserved quantity does not add up.

    Property: in every snapshot, the recorded local values plus the values recorded
    in channels equal the expected total: ``attrs.total`` when the workload declares
    it, otherwise the total most snapshots agree on. A crashed member takes its share
    with it, so a snapshot without a member that had crashed before it began
    (``shrunk``) is held to the total most snapshots with the same members agree on;
    on agreed views, a snapshot to the total most snapshots of its view agree on.
    Columns: ``snapshot, total, expected, local_sum, channel_sum, detail``.
    """
    on_views = F.col("view").isNotNull()
    totals = snapshot_totals(events).withColumn(
        "alike",  # the snapshots that must hold the same total
        F.when(on_views, F.array(F.format_string("view %d", "view"))).otherwise(F.col("members")),
    )
    rounded = F.round("total", 6)
    # The most common total per member set (or view); ties go to the larger total.
    usual = (
        totals.groupBy("alike", rounded.alias("usual"))
        .agg(F.count("*").alias("n"))
        .groupBy("alike")
        .agg(F.max_by("usual", F.struct("n", "usual")).alias("usual_here"))
    )
    overall = (
        totals.where(~F.col("shrunk") & ~on_views)
        .groupBy(rounded.alias("usual"))
        .agg(F.count("*").alias("n"))
        .agg(F.max_by("usual", F.struct("n", "usual")).alias("usual"))
    )
    expected = (
        F.when(on_views, F.coalesce("declared", "usual_here"))
        .when(F.col("shrunk"), F.col("usual_here"))
        .otherwise(F.coalesce("declared", "usual", "usual_here"))
    )
    off = F.abs(F.col("total") - F.col("expected")) > F.lit(tolerance) * F.greatest(
        F.lit(1.0), F.abs("expected")
    )
    return (
        totals.join(usual, "alike")
        .crossJoin(F.broadcast(overall))
        .withColumn("expected", expected)
        .where(off)
        .select(
            "snapshot",
            "total",
            "expected",
            "local_sum",
            "channel_sum",
            _fmt(
                "snapshot %s adds up to %s (%s in %d local states + %s in channels), expected %s",
                "snapshot",
                F.col("total").cast("string"),
                F.col("local_sum").cast("string"),
                "nodes",
                F.col("channel_sum").cast("string"),
                F.col("expected").cast("string"),
            ).alias("detail"),
        )
    )
