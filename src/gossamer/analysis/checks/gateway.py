"""신경 (singyeong) gateway: routed messages reach matching clients; queues lose nothing.

Trace conventions (``layer=gateway``, recorded by the gateway node): ``route`` when a
message is matched (``msg``; ``attrs.matched`` = comma-separated ids of the clients
its query matched; ``attrs.targets`` = the ones chosen to receive it, e.g. one for
SEND and all for BROADCAST), ``deliver`` to a client (``peer`` = client id),
``enqueue`` (``attrs.queue``), ``ack`` once the ack is stored, ``redeliver`` after
an ack timeout (``peer``), ``dead_letter``. Clients that trace record
``client_ready``, ``client_send`` and ``client_recv`` (``trace.schema.GATEWAY_CLIENT_KINDS``),
named by the dispatch's nonce, which the server's ``route`` carries as ``attrs.nonce``.

In a cluster (``gossamer node`` daemons whose gateways route for each other), a
message routed on one node to a client connected to another (its ``peer_up`` is in
another node's trace) crosses a link and may be lost with that node or link by design:
``routing`` and ``client_delivery`` check the targets connected to the routing node (all
of them on one gateway), and ``gateway.cluster_routing`` (``checks.cluster``) judges
the cross-node ones, knowing the cluster's faults.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from gossamer.analysis.checks.common import (
    attr,
    crashed_nodes,
    layer_events,
    location,
    message_events,
    position,
    shared,
)
from gossamer.trace.schema import GATEWAY_CLIENT_KINDS

_READY, _SEND, _RECV = GATEWAY_CLIENT_KINDS

__all__ = ["LAYER", "client_delivery", "queues", "routing", "unreceived"]

LAYER = "gateway"


def _ids(text: Column) -> Column:
    return F.filter(F.split(F.coalesce(text, F.lit("")), ","), lambda x: F.trim(x) != "")


def _on_routing_node(targets: DataFrame, events: DataFrame) -> DataFrame:
    """The rows of ``targets`` (``node``, ``client``, ...) whose client is connected to
    the routing ``node``, or to no traced node: a client another node's gateway holds
    is left to ``gateway.cluster_routing``."""
    homes = (
        layer_events(events, LAYER, "peer_up")
        .select("node", F.col("peer").alias("client"))
        .distinct()
    )
    here = targets.join(homes, ["node", "client"], "left_semi")
    unknown = targets.join(homes.select("client"), "client", "left_anti")
    return here.unionByName(unknown)


def routing(events: DataFrame) -> DataFrame:
    """Routed messages delivered to a client that was not chosen, or not delivered.

    Property: every delivery of a routed message goes to one of its targets (to a
    client its query matched, when ``attrs.targets`` is absent), and every target
    connected to the routing node receives it (at least one matched client does, when
    ``attrs.targets`` is absent).
    Columns: ``problem, msg, client, at, detail``.
    """
    routes = message_events(events, LAYER, "route").select(
        "node",
        "msg",
        _ids(attr("matched")).alias("matched"),
        F.when(attr("targets").isNotNull(), _ids(attr("targets"))).alias("targets"),
        location(),
    )
    allowed = routes.groupBy("msg").agg(
        F.array_distinct(F.flatten(F.collect_list(F.coalesce("targets", "matched")))).alias(
            "allowed"
        )
    )
    delivs = message_events(events, LAYER, "deliver").select(
        "msg", F.col("peer").alias("client"), "file", "line"
    )
    stray = (
        delivs.join(allowed, "msg")
        .where(~F.coalesce(F.array_contains("allowed", F.col("client")), F.lit(False)))
        .select(
            F.lit("unmatched client").alias("problem"),
            "msg",
            "client",
            location(),
            F.format_string(
                "%s was delivered to %s (%s:%d), which its query did not select",
                "msg",
                F.coalesce("client", F.lit("?")),
                "file",
                "line",
            ).alias("detail"),
        )
    )
    targeted = _on_routing_node(
        routes.where(F.col("targets").isNotNull()).select(
            "node", "msg", F.explode("targets").alias("client"), "at"
        ),
        events,
    ).drop("node")
    undelivered = targeted.join(delivs.select("msg", "client"), ["msg", "client"], "left_anti")
    untargeted = routes.where(F.col("targets").isNull() & (F.size("matched") > 0)).select(
        "msg", F.lit(None).cast("string").alias("client"), "at"
    )
    nobody = untargeted.join(delivs.select("msg"), "msg", "left_anti")
    missed = (
        undelivered.unionByName(nobody)
        .distinct()
        .select(
            F.lit("not delivered").alias("problem"),
            "msg",
            "client",
            "at",
            F.format_string(
                "%s was routed (%s) but never delivered to %s",
                "msg",
                "at",
                F.coalesce("client", F.lit("any matching client")),
            ).alias("detail"),
        )
    )
    return stray.unionByName(missed)


def queues(events: DataFrame) -> DataFrame:
    """Queued messages that were lost, or delivered again after their ack was stored.

    Property: every enqueued message ends acked or dead-lettered (queues lose
    nothing), and once its ack is stored it is never delivered or redelivered again.
    Columns: ``problem, msg, queue, at, detail``.
    """
    enq = (
        message_events(events, LAYER, "enqueue")
        .groupBy("msg")
        .agg(
            F.first(attr("queue"), ignorenulls=True).alias("queue"),
            F.min(position()).alias("p"),
        )
    )
    acks = (
        message_events(events, LAYER, "ack")
        .groupBy("msg")
        .agg(F.min_by("node", position()).alias("ack_node"), F.min(position()).alias("ack"))
    )
    dead = layer_events(events, LAYER, "dead_letter").select("msg")
    lost = (
        enq.join(acks.select("msg"), "msg", "left_anti")
        .join(dead, "msg", "left_anti")
        .select(
            F.lit("lost").alias("problem"),
            "msg",
            "queue",
            location("p."),
            F.format_string(
                "%s was enqueued on %s (%s:%d) and never acked nor dead-lettered",
                "msg",
                F.coalesce("queue", F.lit("?")),
                "p.file",
                "p.line",
            ).alias("detail"),
        )
    )
    again = (
        message_events(events, LAYER, "deliver", "redeliver")
        .select("msg", "node", "kind", position().alias("p"))
        .join(acks, "msg")
    )
    # Order is exact on the gateway that stored the ack; across gateways, compare times.
    after = F.when(F.col("node") == F.col("ack_node"), F.col("p") > F.col("ack")).otherwise(
        F.col("p.t") > F.col("ack.t")
    )
    late = (
        again.where(after)
        .join(enq.select("msg", "queue"), "msg", "left")
        .select(
            F.lit("delivered after ack").alias("problem"),
            "msg",
            "queue",
            location("p."),
            F.format_string(
                "%s was acked (%s:%d) and then %sed again (%s:%d)",
                "msg",
                "ack.file",
                "ack.line",
                "kind",
                "p.file",
                "p.line",
            ).alias("detail"),
        )
    )
    return lost.unionByName(late)


@shared
def _routed(events: DataFrame) -> DataFrame:
    """``node, msg, sender, targets, routed, file, line``: the routes of nodes that never
    crashed."""
    crashed = crashed_nodes(events).select("node")
    return (
        layer_events(events, LAYER, "route")
        .join(crashed, "node", "left_anti")
        .select(
            "node",
            attr("nonce").alias("msg"),
            F.col("peer").alias("sender"),
            _ids(attr("targets")).alias("targets"),
            F.col("t").alias("routed"),
            "file",
            "line",
        )
    )


@shared
def _receipts(events: DataFrame) -> DataFrame:
    """``msg, client``: every ``client_recv``."""
    return message_events(events, LAYER, _RECV).select("msg", attr("client").alias("client"))


@shared
def unreceived(events: DataFrame) -> DataFrame:
    """``msg, client, routed, file, line``: routes to a traced target that never received
    them. Empty only if ``client_delivery`` holds: its linear pre-check, and the rows it
    then excuses or reports."""
    sends = (
        message_events(events, LAYER, _SEND)
        .where(attr("type").isin("SEND", "BROADCAST"))
        .groupBy("msg")
        .agg(F.count("*").alias("sends"), F.first(attr("client")).alias("sender"))
        .where(F.col("sends") == 1)
    )
    crashed = crashed_nodes(events).select("node")
    # Clients that trace, into the file of a node that never crashed.
    traced = (
        layer_events(events, LAYER, _READY)
        .join(crashed, "node", "left_anti")
        .select(attr("client").alias("client"))
        .distinct()
    )
    expected = (
        _on_routing_node(
            _routed(events)
            .join(sends.select("msg", "sender"), ["msg", "sender"])
            .select("node", "msg", F.explode("targets").alias("client"), "routed", "file", "line"),
            events,
        )
        .drop("node")
        .join(traced, "client", "left_semi")
    )
    return expected.join(_receipts(events), ["msg", "client"], "left_anti")


def client_delivery(events: DataFrame) -> DataFrame:
    """Client sends the gateway routed that a traced target client never received.

    Property: every SEND or BROADCAST a traced client sent (``client_send``) and the
    gateway accepted and routed (``route`` from that client with the same nonce) reaches
    each of the route's targets that traces (it has a ``client_ready``) as a
    ``client_recv`` of that nonce: the gateway's hand-over reached the client (targets
    connected to the routing node; see the module docstring for a cluster). A missing
    receipt is excused when the target's connection ended (the server's ``peer_down``)
    after the route and before anything routed to it later arrived: the protocol does not
    promise delivery over a lost connection, and a message routed while the client was
    closing at the end of a run is one of those. Routes of nonces that more than one
    client send carries are left out (ambiguous), as are routes by a gateway and
    receivers tracing into a node that crashed (``net/fault`` crash), whose traces end
    with it. Columns: ``problem, msg, client, at,
    detail``.
    """
    missing = unreceived(events)
    routes = _routed(events)
    receipts = _receipts(events)
    # When the target's connection ended after the route, unless it later received a
    # message routed to it after this one (one connection delivers in order).
    downs = layer_events(events, LAYER, "peer_down").select(
        F.col("peer").alias("client"), F.col("t").alias("down")
    )
    first_down = (
        missing.join(downs, "client")
        .where(F.col("down") >= F.col("routed"))
        .groupBy("msg", "client", "routed")
        .agg(F.min("down").alias("down"))
    )
    later = (
        routes.select("msg", F.explode("targets").alias("client"), F.col("routed").alias("r2"))
        .join(receipts, ["msg", "client"], "left_semi")
        .select("client", "r2")
    )
    excused = (
        first_down.join(later, "client", "left")
        .groupBy("msg", "client", "routed", "down")
        .agg(
            F.count(
                F.when((F.col("r2") > F.col("routed")) & (F.col("r2") < F.col("down")), 1)
            ).alias("later")
        )
        .where(F.col("later") == 0)
        .select("msg", "client", "routed")
    )
    return missing.join(excused, ["msg", "client", "routed"], "left_anti").select(
        F.lit("not received").alias("problem"),
        "msg",
        "client",
        location(),
        F.format_string(
            "%s was routed to %s (%s:%d) and that client never received it",
            "msg",
            "client",
            "file",
            "line",
        ).alias("detail"),
    )
