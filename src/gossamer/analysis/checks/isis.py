"""ISIS total-order multicast: total order, agreement, validity, integrity, final sequence.

Trace conventions (``layer=isis``, docs/analysis.md has the full table):
``multicast`` at the sender (``msg`` = ``<sender>/<msg_id>``) and ``deliver`` at each
node that delivers it (``msg``, ``seq`` = the final sequence number,
``attrs.proposer`` = the node whose proposal won). Properties follow the usual
definitions of total-order broadcast (Défago, Schiper and Urbán, "Total order
broadcast and multicast algorithms", ACM Computing Surveys 36(4), 2004, §2.2):
total order and agreement are required of correct nodes, integrity of every node.

Agreement and validity are "eventually" properties: a run that stops its nodes while
a message is still on its way leaves it undelivered somewhere without anything being
lost. A lab node traces its clean stop (``net``/``stop``, when its shutdown begins)
and what ISIS left unfinished (``isis``/``stop``: ``attrs.held``, the messages in its
hold-back queue; ``attrs.outstanding``, its own messages some member had not yet
acknowledged). A missing delivery of m at a correct node r is then *unfinished*, and
marked so (column ``unfinished``) rather than counted as a violation, when r stopped
cleanly and the traces show m still in progress at that moment (``unfinished_at_stop``).
Anything else stays a violation: r never stopped cleanly (a simulated run, or a node
killed), or m was complete at every node that stopped and r still never delivered it.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, GroupedData, Window
from pyspark.sql import functions as F

from gossamer.analysis.checks.common import (
    UNFINISHED,
    attr,
    clean_stops,
    correct_nodes,
    crashed_nodes,
    delivery_integrity,
    layer_events,
    location,
    message_events,
    position,
    shared,
)

__all__ = [
    "CHUNK_SECONDS",
    "LAYER",
    "agreement",
    "deliveries",
    "final_sequence",
    "integrity",
    "multicasts",
    "never_delivered_own",
    "order_suspects",
    "own_undelivered",
    "short_messages",
    "stop_states",
    "total_order",
    "unfinished_at_stop",
    "validity",
]

LAYER = "isis"


@shared
def deliveries(events: DataFrame) -> DataFrame:
    """``node, msg, seq, proposer, t, file, line`` of every ISIS delivery."""
    return message_events(events, LAYER, "deliver").select(
        "node", "msg", "seq", attr("proposer").alias("proposer"), "t", "file", "line"
    )


@shared
def multicasts(events: DataFrame) -> DataFrame:
    """``node, msg, t, file, line`` of every ISIS multicast (at its sender)."""
    return message_events(events, LAYER, "multicast").select("node", "msg", "t", "file", "line")


@shared
def _correct_deliveries(events: DataFrame, nodes: DataFrame | None) -> DataFrame:
    # Every delivering node is in the run, so removing the crashed ones is enough; it
    # spares a pass over every event to list the run's nodes. ``nodes`` only adds
    # nodes without events, hence without deliveries.
    del nodes
    return deliveries(events).join(F.broadcast(crashed_nodes(events)), "node", "left_anti")


def _final(prefix: str = "") -> Column:
    return F.struct(
        F.col(f"{prefix}seq").alias("seq"), F.col(f"{prefix}proposer").alias("proposer")
    )


#: Width in trace seconds of the stretches a node's deliveries are cut into, so that
#: ``order_suspects`` sorts many small groups in parallel rather than one per node.
CHUNK_SECONDS = 1.0


def _disputed(grouped: GroupedData) -> DataFrame:
    """The groups whose deliveries do not all carry the same final ``(seq, proposer)``.

    Compared through two independent hashes of the pair (96 bits): Spark aggregates
    numbers with a hash table, where minimum and maximum of a struct or a string need
    a sort of every delivery. Two different finals would have to collide in both
    hashes to go unnoticed. Grouping by a hash of the message id (as ``order_suspects``
    does) can merge two messages, which only adds suspects.
    """
    h1, h2 = F.xxhash64("seq", "proposer"), F.hash("seq", "proposer")
    return grouped.agg(
        F.min(h1).alias("lo1"),
        F.max(h1).alias("hi1"),
        F.min(h2).alias("lo2"),
        F.max(h2).alias("hi2"),
    ).where((F.col("lo1") != F.col("hi1")) | (F.col("lo2") != F.col("hi2")))


def order_suspects(
    events: DataFrame, *, nodes: DataFrame | None = None, chunk_seconds: float = CHUNK_SECONDS
) -> DataFrame:
    """``node``: the correct nodes whose delivery order might disagree with another's.

    A cheap sufficient test, linear in the number of deliveries: if every message
    carries the same final ``(seq, proposer)`` at every node, no two messages share
    one, and every node delivers in increasing ``(seq, proposer)`` order, then all
    nodes follow one total order and no two of them can disagree. The suspects are
    the nodes where that test fails: a delivery with a smaller key than the one before
    it (or the same key on another message), or a message whose final sequence
    differs between nodes. Only suspects need the pairwise comparison of
    ``total_order``; in a run that keeps its promises there are none.

    A node's deliveries are checked in stretches of ``chunk_seconds`` (positions are
    ordered by time first, so every position of a stretch precedes the next
    stretch's): each stretch is sorted on its own, in parallel, and then only its
    first and last deliveries are compared with the neighbouring stretches'. A run
    of 8 nodes thus uses a whole cluster, not 8 tasks.

    Proposers are compared in natural order (``n2`` before ``n10``), as a group of
    numbered members breaks ties; an implementation that orders them otherwise makes
    nodes suspects on ties, which costs time, never correctness.
    """
    d = _correct_deliveries(events, nodes).withColumn(
        "chunk", F.floor(F.col("t") / F.lit(chunk_seconds))
    )
    # Natural order: shorter ids first, then by text. The message id travels as a
    # 64-bit hash, enough to tell "same message again" from "another message".
    key = F.struct(F.col("seq"), F.length("proposer").alias("n"), F.col("proposer"))
    msg_hash = F.xxhash64("msg")

    def stepped(df: DataFrame, *group: str) -> DataFrame:
        w = Window.partitionBy(*group).orderBy("t", "file", "line")
        return df.select(
            "*",
            F.lag("key").over(w).alias("prev"),
            F.lag("m").over(w).alias("prev_m"),
        ).withColumn(
            "bad",
            F.coalesce(
                (F.col("prev") > F.col("key"))
                | ((F.col("prev") == F.col("key")) & (F.col("prev_m") != F.col("m"))),
                F.lit(False),
            ),
        )

    keyed = d.select("node", "chunk", "t", "file", "line", key.alias("key"), msg_hash.alias("m"))
    in_chunk = Window.partitionBy("node", "chunk").orderBy("t", "file", "line")
    first_pass = stepped(keyed, "node", "chunk").withColumn(
        "edge",
        F.lag("key").over(in_chunk).isNull() | F.lead("key").over(in_chunk).isNull(),
    )
    # What is left is small: every out-of-order delivery, and the first and last of
    # each stretch. A node without the former is out of order only if some stretch
    # ends above where the next one starts, i.e. where consecutive edges step down.
    candidates = first_pass.where(F.col("bad") | F.col("edge")).select(
        "node", "t", "file", "line", "key", "m", F.col("bad").alias("was_bad")
    )
    inverted = stepped(candidates, "node").where(F.col("bad") | F.col("was_bad")).select("node")
    disputed = _disputed(d.groupBy(msg_hash.alias("m"))).limit(1)
    # A disputed message means the run is already broken (``final_sequence`` says
    # where), so rather than pay another pass to find who delivered it, every node
    # becomes a suspect; the list of nodes reads one narrow column.
    everyone = d.select("node").distinct()
    of_disputed = everyone.crossJoin(F.broadcast(disputed.select())).select("node")
    return inverted.unionByName(of_disputed).distinct()


def total_order(events: DataFrame, *, nodes: DataFrame | None = None) -> DataFrame:
    """Pairs of correct nodes that delivered two common messages in opposite orders.

    Property: for any two correct nodes p and q and messages m1, m2 delivered by both,
    p delivers m1 before m2 if and only if q does.

    For each suspect p (see ``order_suspects``) and every other node q, the messages
    both delivered are sorted by p's order; q's positions must then increase, and every
    place where they decrease is a violation (``msg_1`` before ``msg_2`` at ``node_a``,
    the other way round at ``node_b``). A pair where both nodes are suspects is
    compared once. Duplicate deliveries count at their first position (integrity
    reports the duplicates). Columns: ``node_a, node_b, msg_1, msg_2, at_a, at_b, detail``.
    """
    first = (
        _correct_deliveries(events, nodes)
        .groupBy("node", "msg")
        .agg(F.min(position()).alias("pos"))
    )
    suspects = order_suspects(events, nodes=nodes)
    a = first.join(F.broadcast(suspects), "node", "left_semi").select(
        F.col("node").alias("node_a"), "msg", F.col("pos").alias("pos_a")
    )
    b = first.select(F.col("node").alias("node_b"), "msg", F.col("pos").alias("pos_b"))
    b_suspect = suspects.select(F.col("node").alias("node_b"), F.lit(True).alias("b_suspect"))
    pairs = (
        a.join(b, "msg")
        .where(F.col("node_a") != F.col("node_b"))
        .join(F.broadcast(b_suspect), "node_b", "left")
        .where((F.col("node_a") < F.col("node_b")) | F.col("b_suspect").isNull())
    )
    along_a = Window.partitionBy("node_a", "node_b").orderBy("pos_a")
    stepped = pairs.select(
        "node_a",
        "node_b",
        F.lag("msg").over(along_a).alias("msg_1"),
        F.col("msg").alias("msg_2"),
        F.lag("pos_a").over(along_a).alias("pos_a1"),
        F.col("pos_a").alias("pos_a2"),
        F.lag("pos_b").over(along_a).alias("pos_b1"),
        F.col("pos_b").alias("pos_b2"),
    ).where(F.col("pos_b1") > F.col("pos_b2"))
    return stepped.select(
        "node_a",
        "node_b",
        "msg_1",
        "msg_2",
        location("pos_a1.").alias("at_a"),
        location("pos_b2.").alias("at_b"),
        F.format_string(
            "%s delivered %s before %s (%s:%d, %s:%d); %s delivered %s first (%s:%d, %s:%d)",
            "node_a",
            "msg_1",
            "msg_2",
            "pos_a1.file",
            "pos_a1.line",
            "pos_a2.file",
            "pos_a2.line",
            "node_b",
            "msg_2",
            "pos_b2.file",
            "pos_b2.line",
            "pos_b1.file",
            "pos_b1.line",
        ).alias("detail"),
    )


@shared
def stop_states(events: DataFrame) -> DataFrame:
    """``node, stopped_at, held, outstanding``: the nodes that stopped cleanly, when,
    and the ISIS messages they left unfinished (arrays of names; empty without an
    ``isis``/``stop`` event)."""

    def names(key: str) -> Column:
        return F.array_distinct(F.flatten(F.collect_list(F.split(attr(key), ",")))).alias(key)

    left = (
        layer_events(events, LAYER, "stop").groupBy("node").agg(names("held"), names("outstanding"))
    )
    empty = F.array().cast("array<string>")
    return (
        clean_stops(events)
        .join(left, "node", "left")
        .select(
            "node",
            "stopped_at",
            F.coalesce("held", empty).alias("held"),
            F.coalesce("outstanding", empty).alias("outstanding"),
        )
    )


def unfinished_at_stop(events: DataFrame, missing: DataFrame) -> DataFrame:
    """``missing`` (``msg, node``: a message the node never delivered) with ``unfinished``
    (boolean) and ``why`` (the evidence, or null).

    Unfinished means the node stopped cleanly and, at that moment, the message was still
    in progress as the traces show it: it was in the node's hold-back queue (``held``:
    received, waiting for its final sequence or for an earlier message); or its sender
    still waited for some member's acknowledgement when it stopped (``outstanding``);
    or its final sequence was only fixed at or after the node's stop (the sender then
    decides without a member that left). Everything else is a loss.
    """
    stops = stop_states(events)
    sender = multicasts(events).select("msg", F.col("node").alias("sender"))
    sender_left = stops.select(
        F.col("node").alias("sender"), F.col("outstanding").alias("sender_outstanding")
    )
    sequenced = (
        message_events(events, LAYER, "sequence")
        .groupBy("msg")
        .agg(F.min("t").alias("sequenced_at"))
    )
    joined = (
        missing.join(F.broadcast(stops), "node", "left")
        .join(sender, "msg", "left")
        .join(F.broadcast(sender_left), "sender", "left")
        .join(sequenced, "msg", "left")
    )
    why = (
        F.when(F.col("stopped_at").isNull(), F.lit(None))
        .when(F.array_contains("held", F.col("msg")), F.lit("held back at its stop"))
        .when(
            F.coalesce(F.array_contains("sender_outstanding", F.col("msg")), F.lit(False)),
            F.format_string("%s still awaited acknowledgements at its stop", "sender"),
        )
        .when(
            F.col("sequenced_at") >= F.col("stopped_at"),
            F.lit("ordered only after it stopped"),
        )
    )
    return joined.select(*missing.columns, why.isNotNull().alias(UNFINISHED), why.alias("why"))


@shared
def _delivered_by_correct(events: DataFrame, nodes: DataFrame | None) -> DataFrame:
    """``msg, node``: each message and each correct node that delivered it (once)."""
    return _correct_deliveries(events, nodes).select("msg", "node").distinct()


@shared
def short_messages(events: DataFrame, *, nodes: DataFrame | None = None) -> DataFrame:
    """``msg, delivered_by, expected``: messages some correct node delivered and fewer
    than all correct nodes did. Empty only if agreement holds: ``agreement``'s linear
    pre-check, and the messages it then looks into."""
    expected = correct_nodes(events, nodes).agg(F.count("*").alias("expected"))
    return (
        _delivered_by_correct(events, nodes)
        .groupBy("msg")
        .agg(F.count("*").alias("delivered_by"))
        .crossJoin(F.broadcast(expected))
        .where(F.col("delivered_by") < F.col("expected"))
    )


def agreement(events: DataFrame, *, nodes: DataFrame | None = None) -> DataFrame:
    """Messages delivered by some correct node but not by every correct node.

    Property: if a correct node delivers m, every correct node delivers m.
    Columns: ``msg, delivered_by, expected, missing, unfinished, detail`` (``missing``
    lists up to ten of the correct nodes that never delivered it). ``unfinished`` is
    true when every one of them stopped cleanly with m still in progress
    (``unfinished_at_stop``): the run ended before m could finish, nothing was lost.
    """
    correct = correct_nodes(events, nodes)
    d = _delivered_by_correct(events, nodes)
    short = short_messages(events, nodes=nodes)
    # Only for the (few) short messages: who did not deliver them, and why.
    missing = (
        short.select("msg")
        .crossJoin(F.broadcast(correct))
        .join(d.join(short.select("msg"), "msg", "left_semi"), ["msg", "node"], "left_anti")
    )
    judged = (
        unfinished_at_stop(events, missing)
        .groupBy("msg")
        .agg(
            F.slice(F.sort_array(F.collect_list("node")), 1, 10).alias("missing"),
            (F.min(F.col(UNFINISHED).cast("int")) == 1).alias(UNFINISHED),
            F.sort_array(F.collect_list(F.concat_ws(": ", "node", "why"))).alias("whys"),
        )
    )
    return short.join(judged, "msg").select(
        "msg",
        "delivered_by",
        "expected",
        "missing",
        UNFINISHED,
        F.when(
            F.col(UNFINISHED),
            F.format_string(
                "%s was delivered by %d of %d correct nodes; unfinished at the clean stop of %s",
                "msg",
                "delivered_by",
                "expected",
                F.array_join(F.slice("whys", 1, 10), "; "),
            ),
        )
        .otherwise(
            F.format_string(
                "%s was delivered by %d of %d correct nodes; not by %s",
                "msg",
                "delivered_by",
                "expected",
                F.array_join("missing", ", "),
            )
        )
        .alias("detail"),
    )


def validity(events: DataFrame, *, nodes: DataFrame | None = None) -> DataFrame:
    """Messages multicast by a correct node that this node never delivered itself.

    Property: if a correct node multicasts m, it eventually delivers m (with agreement,
    every correct node then does). Columns: ``node, msg, t, at, unfinished, detail``;
    ``unfinished`` when the sender stopped cleanly with m still in progress
    (``unfinished_at_stop``).
    """
    never = never_delivered_own(events, nodes=nodes)
    return own_undelivered(events, never, F.lit(" and never delivered it"))


@shared
def never_delivered_own(events: DataFrame, *, nodes: DataFrame | None = None) -> DataFrame:
    """``node, msg, t, file, line``: multicasts of correct nodes that their sender never
    delivered. Empty only if validity holds: ``validity``'s linear pre-check, and the
    messages it then judges."""
    sent = multicasts(events).join(F.broadcast(correct_nodes(events, nodes)), "node", "left_semi")
    own = deliveries(events).select("node", "msg")
    return sent.join(own, ["node", "msg"], "left_anti")


def own_undelivered(events: DataFrame, never: DataFrame, lost: Column) -> DataFrame:
    """The rows of a validity check: ``never`` (``node, msg, t, file, line``: messages
    their sender owed itself and never delivered) judged by ``unfinished_at_stop``.
    Columns: ``node, msg, t, at, unfinished, detail``; ``lost`` ends the detail of a row
    that is not unfinished (after ``<node> multicast <msg> at t=... (file:line)``)."""
    judged = unfinished_at_stop(events, never.select("msg", "node"))
    return never.join(judged, ["msg", "node"]).select(
        "node",
        "msg",
        "t",
        location(),
        UNFINISHED,
        F.when(
            F.col(UNFINISHED),
            F.format_string(
                "%s multicast %s at t=%.6f (%s:%d); unfinished at its clean stop (%s)",
                "node",
                "msg",
                "t",
                "file",
                "line",
                "why",
            ),
        )
        .otherwise(
            F.format_string(
                "%s multicast %s at t=%.6f (%s:%d)%s", "node", "msg", "t", "file", "line", lost
            )
        )
        .alias("detail"),
    )


def integrity(events: DataFrame) -> DataFrame:
    """Duplicate deliveries, and deliveries of messages that nobody multicast.

    Property (every node, crashed or not): a node delivers a message at most once,
    and only if some node multicast it. Columns: ``problem, node, msg, count, at, detail``
    with ``problem`` = ``duplicate`` or ``never multicast``.
    """
    return delivery_integrity(deliveries(events), multicasts(events), verb="multicast")


def final_sequence(events: DataFrame) -> DataFrame:
    """Messages delivered with different final ``(seq, proposer)`` at different nodes.

    Property: every node that delivers m agrees on its final sequence number and
    proposer (the spec's final sequence is the largest proposal, ties broken by the
    smallest proposer id, and is sent to everyone). Disputed messages are found by a
    hash aggregation over all deliveries; only theirs are then examined. Columns:
    ``msg, node_lo, final_lo, node_hi, final_hi, detail``.
    """
    d = deliveries(events)
    disputed = _disputed(d.groupBy("msg")).select("msg")
    text = F.concat_ws("/", F.col("seq").cast("string"), F.col("proposer"))
    return (
        d.join(disputed, "msg", "left_semi")
        .groupBy("msg")
        .agg(
            F.min_by("node", _final()).alias("node_lo"),
            F.max_by("node", _final()).alias("node_hi"),
            F.min_by(text, _final()).alias("final_lo"),
            F.max_by(text, _final()).alias("final_hi"),
        )
        .select(
            "msg",
            "node_lo",
            "final_lo",
            "node_hi",
            "final_hi",
            F.format_string(
                "%s has final sequence %s at %s but %s at %s",
                "msg",
                "final_lo",
                "node_lo",
                "final_hi",
                "node_hi",
            ).alias("detail"),
        )
    )
