"""End-to-end gateway latency: from a client's send to each receiving client's receipt.

The gateway server's own latency (``metrics.latencies``, ``route`` to ``deliver``) is
measured inside the server, from routing a message to handing it to the connections:
it leaves out both websockets and both clients. This module measures what a user
waits for, from the clients' own trace events (``gossamer.proto.gateway.tracing``):
a ``client_send`` (the application handed the message to its client) to each
``client_recv`` of it (a client got the dispatch), joined on the message's nonce.

The two times are taken by different clients, usually in different processes and, in
the lab, on different hosts (network namespaces). They are comparable because every
lab host is a namespace of one machine and every process stamps its events with the
same ``CLOCK_MONOTONIC`` (``time.monotonic()``; namespaces do not have their own
monotonic clock), as the simulator's are with its one virtual clock. Across real
machines the figure is only as good as their clock synchronisation.

A nonce that more than one ``client_send`` carries (two senders chose the same one, or
one sent it twice) is ambiguous and left out, as are receipts without a nonce and
receipts of messages no traced client sent (a third-party sender): they join nothing.
For queued messages only the first delivery counts (``attrs.attempt`` 1), and their
latency includes the time the message waited in its queue for a consumer's request.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from gossamer.analysis.checks.common import attr, message_events
from gossamer.trace.schema import GATEWAY_CLIENT_KINDS

LAYER = "gateway"
CLIENT_READY, CLIENT_SEND, CLIENT_RECV = GATEWAY_CLIENT_KINDS

__all__ = ["CLIENT_READY", "CLIENT_RECV", "CLIENT_SEND", "client_latencies", "unique_sends"]


def unique_sends(events: DataFrame) -> DataFrame:
    """``msg, type, sender, sender_node, t0``: each nonce exactly one traced send carries."""
    return (
        message_events(events, LAYER, CLIENT_SEND)
        .groupBy("msg")
        .agg(
            F.count("*").alias("sends"),
            F.first(attr("type")).alias("type"),
            F.first(attr("client")).alias("sender"),
            F.first("node").alias("sender_node"),
            F.min("t").alias("t0"),
        )
        .where(F.col("sends") == 1)
        .drop("sends")
    )


def client_latencies(events: DataFrame) -> DataFrame:
    """``layer, node, msg, client, latency``: each receipt's time since its client send.

    ``layer`` is the dispatch type (SEND, BROADCAST, QUEUE), so that
    ``metrics.latency_histogram`` summarises one row per type; ``node`` and ``client``
    are the receiving node and client.
    """
    first_receipts = message_events(events, LAYER, CLIENT_RECV).where(
        F.coalesce(attr("attempt"), F.lit("1")) == "1"
    )
    return first_receipts.select(
        "msg", "node", attr("client").alias("client"), F.col("t").alias("t1")
    ).join(unique_sends(events), "msg").select(
        F.col("type").alias("layer"),
        "node",
        "msg",
        "client",
        (F.col("t1") - F.col("t0")).alias("latency"),
    )
