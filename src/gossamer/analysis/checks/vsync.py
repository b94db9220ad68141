"""ISIS on agreed views: virtual synchrony, stated over the node daemons' traces.

A group on agreed views (``docs/cluster.md``, "ISIS on the views") owes a message only
to the members of the view it was sent in, so ``isis.agreement`` and ``isis.validity``
(every node of the run) do not apply; these checks state what it does promise. They read:

- ``views``/``view_change`` (``seq`` = the view id, ``attrs.members`` =
  ``name#incarnation,...``; ``cluster.installs`` names the installing incarnation) and
  ``views``/``excluded``;
- ISIS's ``multicast`` (``attrs.digest``, of the payload), ``deliver`` and ``discard``
  (a sender withdraws its messages that still lack an Ack at a view change: it discards
  them everywhere and multicasts their data again, under new ids, in the next view);
- ``net``/``fault`` ``crash``, ``partition`` and ``heal``, and the clean stop
  (``net``/``stop``).

A node's deliveries between its install of view v and its next install belong to v, by
the node's own order ``(t, file, line)``; clocks of different nodes are never compared.
"""

from __future__ import annotations

import math

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from gossamer.analysis.checks.cluster import installs
from gossamer.analysis.checks.common import (
    attr,
    faults,
    layer_events,
    message_events,
    outages,
    position,
)
from gossamer.analysis.checks.isis import LAYER, deliveries, own_undelivered

__all__ = ["member_views", "view_agreement", "view_validity"]


def member_views(events: DataFrame) -> DataFrame:
    """``node, member, view, start, end, complete``: each view an incarnation installed
    (``member`` = ``name#incarnation``), from its install (``start``, a position) to the
    node's next install (``end``, null for the last); ``complete`` when that next install
    is view + 1 by the same incarnation (then the member moved from v to v + 1 and owes
    the others the same deliveries in v)."""
    along = Window.partitionBy("node").orderBy("t", "file", "line")
    return (
        installs(events)
        .where(F.col("inc").isNotNull())
        .select(
            "node",
            F.col("inc").alias("member"),
            "view",
            position().alias("start"),
            F.lead(position()).over(along).alias("end"),
            (
                (F.lead("inc").over(along) == F.col("inc"))
                & (F.lead("view").over(along) == F.col("view") + 1)
            ).alias("complete"),
        )
        .fillna(False, subset=["complete"])
    )


def _delivered_in_views(events: DataFrame, spans: DataFrame) -> DataFrame:
    """``member, view, complete, msg``: each delivery placed in the view the node was in."""
    d = deliveries(events).select(F.col("node").alias("d_node"), "msg", position().alias("p"))
    inside = (
        (F.col("d_node") == F.col("node"))
        & (F.col("p") >= F.col("start"))
        & (F.col("end").isNull() | (F.col("p") < F.col("end")))
    )
    return d.join(F.broadcast(spans), inside).select("member", "view", "complete", "msg")


def view_agreement(events: DataFrame) -> DataFrame:
    """Messages that one member delivered in view v and another did not, both having
    installed v and then v + 1.

    Property (virtual synchrony): every two members that install v and its successor
    deliver the same set of messages while in v. Order within v is total order's
    (``isis.total_order``). Members that never install v + 1 (crashed, excluded, or
    stopped in v) are owed nothing and not compared. Deliveries are counted per view
    and message (a hash aggregation) against the view's moving members.
    Columns: ``view, msg, delivered_by, missing, detail`` (``missing``: up to ten members
    that moved on from v without delivering m in it, with the view they delivered it in,
    if any).
    """
    spans = member_views(events)
    placed = _delivered_in_views(events, spans)
    moving = (
        spans.where("complete")
        .groupBy("view")
        .agg(F.count("*").alias("expected"), F.collect_set("member").alias("members"))
    )
    short = (
        placed.where("complete")
        .select("view", "msg", "member")
        .distinct()
        .groupBy("view", "msg")
        .agg(F.count("*").alias("count"), F.collect_set("member").alias("by"))
        .join(F.broadcast(moving), "view")
        .where(F.col("count") < F.col("expected"))
    )
    # Only for the (few) short messages: where each missing member delivered them.
    absent = short.select("view", "msg", F.explode(F.array_except("members", "by")).alias("member"))
    elsewhere = placed.join(short.select("msg"), "msg", "left_semi").select(
        "msg", "member", F.col("view").alias("other")
    )
    where = (
        absent.join(elsewhere, ["msg", "member"], "left")
        .groupBy("view", "msg", "member")
        .agg(F.min("other").alias("other"))
        .select(
            "view",
            "msg",
            F.when(F.col("other").isNull(), F.format_string("%s (never)", "member"))
            .otherwise(F.format_string("%s (in view %d)", "member", "other"))
            .alias("who"),
        )
        .groupBy("view", "msg")
        .agg(F.slice(F.sort_array(F.collect_list("who")), 1, 10).alias("missing"))
    )
    return short.join(where, ["view", "msg"]).select(
        "view",
        "msg",
        F.slice(F.sort_array("by"), 1, 10).alias("delivered_by"),
        "missing",
        F.format_string(
            "view %d: %s delivered %s in it, not %s, though each installed view %d and then %d",
            "view",
            F.array_join(F.slice(F.sort_array("by"), 1, 10), ", "),
            "msg",
            F.array_join("missing", ", "),
            "view",
            F.col("view") + 1,
        ).alias("detail"),
    )


def view_validity(events: DataFrame) -> DataFrame:
    """Messages that a member multicast and never delivered, though it stayed a member
    to the end.

    Property: if a member multicasts m and is never crashed nor excluded afterwards (so
    it stays the same incarnation, in every view to the end), it delivers m, or withdraws
    it at a view change (``withdraw`` at the sender, ``attrs.as`` the new id) and
    multicasts its data again under that id (a message then owed in its turn). A missing
    delivery at a sender that stopped cleanly with m still in progress is *unfinished*
    (``isis.unfinished_at_stop``). A node cut off by a partition that lasts to the end
    of the run may never hear of its exclusion: none of its messages is judged.
    Columns: ``node, msg, t, at, unfinished, detail``.
    """
    sent = message_events(events, LAYER, "multicast").select("node", "msg", "t", "file", "line")
    ends = (
        faults(events)
        .where(F.col("fault") == "crash")
        .select("node", "t")
        .unionByName(layer_events(events, "views", "excluded").select("node", "t"))
        .unionByName(
            outages(events)
            .where((F.col("outage") == "partition") & F.col("end").isNull())
            .select("node", F.lit(math.inf).alias("t"))
        )
        .groupBy("node")
        .agg(F.max("t").alias("last_end"))
    )
    staying = sent.join(F.broadcast(ends), "node", "left").where(
        F.col("last_end").isNull() | (F.col("last_end") < F.col("t"))
    )
    own = deliveries(events).select("node", "msg")
    withdrawals = message_events(events, LAYER, "withdraw").select(
        "node", "msg", attr("as").alias("again")
    )
    undelivered = staying.join(own, ["node", "msg"], "left_anti")
    withdrawn = undelivered.join(withdrawals, ["node", "msg"])
    resent = withdrawn.join(
        sent.select("node", F.col("msg").alias("again")), ["node", "again"], "left_semi"
    )
    never = undelivered.join(resent.select("node", "msg"), ["node", "msg"], "left_anti").join(
        withdrawn.select("node", "msg", F.lit(True).alias("was_withdrawn")), ["node", "msg"], "left"
    )
    lost = F.when(
        F.col("was_withdrawn"),
        F.lit(", stayed a member to the end, and withdrew it and never multicast its data again"),
    ).otherwise(F.lit(", stayed a member to the end, and never delivered it"))
    return own_undelivered(events, never, lost)
