"""Cluster checkers: agreed views, rejoins, and 신경 routing across the cluster's nodes.

The inputs are what the components already trace:

- ``views``/``view_change`` of every daemon (``seq`` = the view id, ``attrs.members`` =
  ``name#incarnation,...`` in seniority order; the installing incarnation is the member
  named like the node);
- ``net``/``fault`` ``crash``, ``restart``, ``partition`` and ``heal`` (the lab's);
- the 신경 clients' ``gateway``/``client_ready``, ``client_send``, ``client_recv`` and the
  lab's ``client_query`` (QUERY_NODES answers), under the naming of the lab's cluster
  workload (``gossamer.lab.cluster_clients``): client ``<host>-<group>-<index>`` with
  metadata ``host`` and ``group``, nonce ``<client>/<TYPE>/<key>=<value>/<k>``, whose
  query is ``key == value``. So the checker evaluates every query itself, from the
  clients' names, never from what a gateway said it matched.

Every checker returns one row per violation: ``problem, ..., at, detail``.
"""

from __future__ import annotations

import math

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from gossamer.analysis.checks.common import attr, faults, layer_events, location, outages, settled

__all__ = ["HORIZON", "WARMUP", "installs", "owed", "rejoin", "routing", "view_agreement"]

#: Seconds before a message during which its nodes' views and its clients' connections
#: must already have been as they are (a new member's clients reach the others' replicas
#: over a link; a client's join spreads the same way).
WARMUP = 2.0
#: Seconds after a message during which nothing may change on its nodes for it to be owed
#: (a crash, a cut or a view change right after a send may lose it: nothing promises more).
HORIZON = 2.0

_DISTURBING = ("crash", "restart", "partition", "heal")
_NONCE = r"^([^/]+)/(SEND|BROADCAST|QUERY)/(host|group)=([^/]+)/[0-9]+$"
_CLIENT = r"^[^/]+/([^-/]+)-([^-/]+)-[0-9]+$"  # app/<host>-<group>-<index>


def installs(events: DataFrame) -> DataFrame:
    """``node, t, view, members, names, inc, file, line``: every view a node installed;
    ``inc`` the installing incarnation (null when the view lacks the node)."""
    raw = layer_events(events, "views", "view_change").select(
        "node", "t", F.col("seq").alias("view"), attr("members").alias("members"), "file", "line"
    )
    entries = F.split(F.coalesce(F.col("members"), F.lit("")), ",")
    own = F.filter(entries, lambda x: F.substring_index(x, "#", 1) == F.col("node"))
    return raw.select(
        "*",
        F.transform(entries, lambda x: F.substring_index(x, "#", 1)).alias("names"),
        F.try_element_at(own, F.lit(1)).alias("inc"),
    )


def _problem(installs: DataFrame, problem: str, detail: Column) -> DataFrame:
    """One ``views.agreement`` row per install: ``problem, node, view, at, detail``."""
    return installs.select(
        F.lit(problem).alias("problem"), "node", "view", location(), detail.alias("detail")
    )


def view_agreement(events: DataFrame) -> DataFrame:
    """Every two incarnations that install view v install the same members, and each
    incarnation installs views with ids increasing by one, each containing itself.

    Columns: ``problem, node, view, at, detail``.
    """
    installed = installs(events)
    disputed = (
        installed.groupBy("view")
        .agg(F.collect_set("members").alias("sets"))
        .where(F.size("sets") > 1)
    )
    differing = _problem(
        installed.join(disputed, "view"),
        "different members",
        F.format_string(
            "view %d: %s installed %s; installed across the cluster: %s",
            "view", "node", "members", F.array_join("sets", " | "),
        ),
    )
    alone = _problem(
        installed.where(F.col("inc").isNull()),
        "without itself",
        F.format_string("%s installed view %d of %s, without itself", "node", "view", "members"),
    )
    order = Window.partitionBy("node", "inc").orderBy("t", "file", "line")
    stepped = (
        installed.where(F.col("inc").isNotNull())
        .withColumn("previous", F.lag("view").over(order))
        .where(F.col("previous").isNotNull() & (F.col("view") != F.col("previous") + 1))
    )
    stepped = _problem(
        stepped,
        "not one after the other",
        F.format_string("%s installed view %d right after view %d", "inc", "view", "previous"),
    )
    return differing.unionByName(alone).unionByName(stepped)


def rejoin(events: DataFrame) -> DataFrame:
    """A restarted node installs a view containing its new incarnation (one it never had
    before the restart), and another node installs that view too.

    Columns: ``problem, node, restarted_at, at, detail``.
    """
    restarts = (
        faults(events)
        .where(F.col("fault") == "restart")
        .select("node", F.col("t").alias("restarted_at"), "file", "line")
    )
    installed = installs(events).where(F.col("inc").isNotNull())
    before = (
        restarts.join(installed.select("node", F.col("t").alias("ti"), "inc"), "node", "left")
        .where(F.col("ti") < F.col("restarted_at"))
        .groupBy("node", "restarted_at")
        .agg(F.collect_set("inc").alias("old"))
    )
    after = (
        restarts.join(
            installed.select("node", F.col("t").alias("ti"), "view", "inc", "members"), "node"
        )
        .where(F.col("ti") > F.col("restarted_at"))
        .join(before, ["node", "restarted_at"], "left")
        .where(~F.coalesce(F.array_contains("old", F.col("inc")), F.lit(False)))
        .select("node", "restarted_at", "view", "inc", "members")
    )
    others = installs(events).select(
        F.col("node").alias("other"), F.col("view"), F.col("members")
    )
    seen = (
        after.join(others, ["view", "members"])
        .where(F.col("other") != F.col("node"))
        .select("node", "restarted_at")
        .distinct()
    )
    never = restarts.join(after.select("node", "restarted_at").distinct(),
                          ["node", "restarted_at"], "left_anti").select(
        F.lit("never rejoined").alias("problem"),
        "node",
        "restarted_at",
        location(),
        F.format_string("%s restarted at t=%.3f and installed no view with a new incarnation",
                        "node", "restarted_at").alias("detail"),
    )
    unseen = (
        restarts.join(after.select("node", "restarted_at").distinct(), ["node", "restarted_at"])
        .join(seen, ["node", "restarted_at"], "left_anti")
        .select(
            F.lit("rejoined alone").alias("problem"),
            "node",
            "restarted_at",
            location(),
            F.format_string(
                "%s restarted at t=%.3f; no other node installed a view with its new "
                "incarnation", "node", "restarted_at",
            ).alias("detail"),
        )
    )
    return never.unionByName(unseen)


def _client_id(column: Column) -> Column:
    """``app/<id>`` -> ``<id>``."""
    return F.regexp_extract(column, r"^[^/]+/(.*)$", 1)


def _matches(key: Column, value: Column) -> Column:
    """The workload's query ``key == value`` on a client's ``host`` and ``group``."""
    return ((key == "host") & (F.col("host") == value)) | (
        (key == "group") & (F.col("group") == value)
    )


def _owing(events: DataFrame, warmup: float, horizon: float) -> tuple[DataFrame, ...]:
    """``gw, messages, readies, matching, sender_ok, owed`` of :func:`routing`."""
    gw = layer_events(events, "gateway", "client_send", "client_query", "client_recv",
                      "client_ready")
    messages = (
        gw.where(F.col("kind").isin("client_send", "client_query") & F.col("msg").rlike(_NONCE))
        .select(
            "msg", F.col("t").alias("ts"), "file", "line",
            F.regexp_extract("msg", _NONCE, 1).alias("sender"),
            F.regexp_extract("msg", _NONCE, 2).alias("type"),
            F.regexp_extract("msg", _NONCE, 3).alias("key"),
            F.regexp_extract("msg", _NONCE, 4).alias("value"),
            F.split(F.coalesce(attr("result"), F.lit("")), ",").alias("result"),
        )
        .withColumn("a", F.substring_index("sender", "-", 1))
    )
    messages = settled(messages)
    readies = gw.where((F.col("kind") == "client_ready") & attr("client").rlike(_CLIENT)).select(
        _client_id(attr("client")).alias("client"),
        F.regexp_extract(attr("client"), _CLIENT, 1).alias("host"),
        F.regexp_extract(attr("client"), _CLIENT, 2).alias("group"),
        F.col("t").alias("r"),
    )
    readies = settled(readies)
    clients = readies.select("client", "host", "group").distinct()
    matching = settled(
        messages.join(clients, _matches(F.col("key"), F.col("value"))).select(
            "msg", "ts", "type", "a", "sender", "client", F.col("host").alias("b")
        )
    )

    # Each message's view at the sender's node, and which nodes were undisturbed.
    installed = installs(events).select(
        F.col("node").alias("h"), F.col("t").alias("ti"), "view", "names"
    )
    # A view change is a moment; a crash lasts until the restart, a cut until the heal.
    disturbances = (
        installed.select("h", F.col("ti").alias("start"), F.col("ti").alias("end"))
        .unionByName(
            outages(events).select(
                F.col("node").alias("h"), "start", F.coalesce("end", F.lit(math.inf)).alias("end")
            )
        )
        .unionByName(
            faults(events).where(F.col("fault").isin(*_DISTURBING))
            .select(F.col("node").alias("h"), F.col("t").alias("start"), F.col("t").alias("end"))
        )
    )
    hosts = matching.select("msg", "ts", F.col("b").alias("h")).unionByName(
        messages.select("msg", "ts", F.col("a").alias("h"))
    ).distinct()
    views = (
        hosts.join(installed, "h")
        .where(F.col("ti") <= F.col("ts"))
        .groupBy("msg", "h")
        .agg(F.max_by(F.struct("view", "names"), "ti").alias("v"))
    )
    disturbed = (
        hosts.join(disturbances, "h")
        .where((F.col("start") <= F.col("ts") + horizon) & (F.col("end") >= F.col("ts") - warmup))
        .select("msg", "h")
        .distinct()
    )
    steady = settled(
        views.join(disturbed, ["msg", "h"], "left_anti").select(
            "msg", "h", F.col("v.view").alias("view")
        )
    )
    at_sender = (
        messages.join(views.withColumnRenamed("h", "a"), ["msg", "a"])
        .join(steady.withColumnRenamed("h", "a").withColumnRenamed("view", "va"), ["msg", "a"])
        .select("msg", F.col("v.view").alias("view"), F.col("v.names").alias("names"))
    )
    # Clients on one connection over the stretch (the sender too).
    connected = (
        matching.select("msg", "ts", "client")
        .unionByName(messages.select("msg", "ts", F.col("sender").alias("client")))
        .distinct()
        .join(readies.select("client", "r"), "client")
        .groupBy("msg", "client")
        .agg(
            F.max(F.when(F.col("r") <= F.col("ts") - warmup, F.col("r"))).alias("since"),
            F.count(F.when(F.col("r").between(F.col("ts") - warmup, F.col("ts") + horizon), 1))
            .alias("changed"),
        )
        .where(F.col("since").isNotNull() & (F.col("changed") == 0))
        .select("msg", "client")
    )
    connected = settled(connected)
    sender_ok = at_sender.join(
        messages.select("msg", F.col("sender").alias("client")), "msg"
    ).join(connected, ["msg", "client"], "left_semi").select("msg", "view", "names")
    sender_ok = settled(sender_ok)
    owed = (
        matching.join(sender_ok, "msg")
        .where(F.array_contains("names", F.col("b")) & F.array_contains("names", F.col("a")))
        .join(steady.withColumnRenamed("h", "b").withColumnRenamed("view", "vb"), ["msg", "b"])
        .where(F.col("vb") == F.col("view"))
        .join(connected, ["msg", "client"], "left_semi")
        .select("msg", "client")
    )
    return gw, messages, readies, matching, sender_ok, settled(owed)


def owed(events: DataFrame, *, warmup: float = WARMUP, horizon: float = HORIZON) -> DataFrame:
    """``msg, client``: every (message, matching client) pair :func:`routing` holds the
    cluster to (a run where few are owed proves little: the lab's test counts them)."""
    return _owing(events, warmup, horizon)[-1]


def routing(events: DataFrame, *, warmup: float = WARMUP, horizon: float = HORIZON) -> DataFrame:
    """Routing across the cluster, for the lab's cluster workload (module docstring).

    A message is *owed* to a matching client c when, from ``warmup`` seconds before it
    was sent to ``horizon`` seconds after: the sender's node A and c's node B had
    installed the same view, containing both, and neither installed another, was down
    (from a crash to its restart) or cut off (from a partition to its heal), or
    restarted; and the sender and c stayed on one connection
    (their last ``client_ready`` before that stretch, none in it). Then:

    - every BROADCAST reaches every client it is owed to (``not received``);
    - a SEND reaches exactly one matching client; it must reach one when its sender's
      node was undisturbed and it is owed to every matching client of the nodes in the
      sender's view that had connected by then (so whichever the gateway chose was
      owed it): ``not received``, ``received by several``;
    - no client receives a message twice (``received twice``) or one whose query it
      does not match (``unmatched client``);
    - a QUERY_NODES answer names only matching clients (``unmatched in answer``) and
      every client a BROADCAST sent then would be owed to (``missing from answer``).

    Columns: ``problem, msg, client, at, detail``.
    """
    gw, messages, readies, matching, sender_ok, owed = _owing(events, warmup, horizon)
    receipts = settled(
        gw.where((F.col("kind") == "client_recv") & F.col("msg").rlike(_NONCE))
        .groupBy("msg", _client_id(attr("client")).alias("client"))
        .agg(F.count("*").alias("n"), F.min(F.struct("file", "line")).alias("p"))
    )
    sends = messages.where(F.col("type") != "QUERY")

    def row(frame: DataFrame, problem: str, detail: Column, at: Column) -> DataFrame:
        return frame.select(F.lit(problem).alias("problem"), "msg", "client", at.alias("at"),
                            detail.alias("detail"))

    sent_at = F.concat_ws(":", "file", "line")
    recv_at = F.concat_ws(":", "p.file", "p.line")
    broadcasts = sends.where(F.col("type") == "BROADCAST").select("msg", "file", "line")
    lost_broadcasts = owed.join(broadcasts, "msg").join(receipts, ["msg", "client"], "left_anti")
    # SEND: owed to every matching client then connected on a node of the sender's view.
    candidates = (
        matching.join(sender_ok, "msg")
        .where(F.array_contains("names", F.col("b")))
        .join(readies.select("client", "r"), "client")
        .where(F.col("r") <= F.col("ts") + horizon)
        .select("msg", "client")
        .distinct()
    )
    fully_owed = (
        candidates.join(owed, ["msg", "client"], "left_anti").select("msg").distinct()
    )
    due_sends = (
        sends.where(F.col("type") == "SEND")
        .join(owed.select("msg").distinct(), "msg", "left_semi")
        .join(fully_owed, "msg", "left_anti")
    )
    lost_sends = due_sends.join(receipts.select("msg").distinct(), "msg", "left_anti").select(
        "msg", F.lit(None).cast("string").alias("client"), "file", "line"
    )
    several = (
        receipts.join(sends.where(F.col("type") == "SEND").select("msg"), "msg")
        .groupBy("msg")
        .agg(F.count("*").alias("k"), F.array_join(F.collect_list("client"), ",").alias("to"),
             F.min("p").alias("p"))
        .where(F.col("k") > 1)
        .select("msg", F.lit(None).cast("string").alias("client"), "k", "to", "p")
    )
    unmatched = (
        receipts.join(sends.select("msg"), "msg")
        .join(matching.select("msg", "client"), ["msg", "client"], "left_anti")
    )
    answers = messages.where(F.col("type") == "QUERY").select(
        "msg", "file", "line", F.explode("result").alias("named")
    ).where(F.col("named") != "").withColumn("client", _client_id(F.col("named")))
    wrong_answers = answers.join(matching.select("msg", "client"), ["msg", "client"], "left_anti")
    queries = messages.where(F.col("type") == "QUERY").select("msg", "file", "line")
    missing_answers = (
        owed.join(queries, "msg")
        .join(answers.select("msg", "client"), ["msg", "client"], "left_anti")
    )
    return (
        row(lost_broadcasts, "not received",
            F.format_string("BROADCAST %s (%s:%d) was owed to %s, which never received it",
                            "msg", "file", "line", "client"), sent_at)
        .unionByName(row(lost_sends, "not received",
                         F.format_string("SEND %s (%s:%d) reached no client, though every "
                                         "matching client was owed it", "msg", "file", "line"),
                         sent_at))
        .unionByName(row(several, "received by several",
                         F.format_string("SEND %s reached %d clients: %s", "msg", "k", "to"),
                         recv_at))
        .unionByName(row(receipts.where(F.col("n") > 1), "received twice",
                         F.format_string("%s received %s %d times", "client", "msg", "n"),
                         recv_at))
        .unionByName(row(unmatched, "unmatched client",
                         F.format_string("%s received %s, whose query it does not match",
                                         "client", "msg"), recv_at))
        .unionByName(row(wrong_answers, "unmatched in answer",
                         F.format_string("QUERY_NODES %s (%s:%d) named %s, which does not "
                                         "match", "msg", "file", "line", "client"), sent_at))
        .unionByName(row(missing_answers, "missing from answer",
                         F.format_string("QUERY_NODES %s (%s:%d) left out %s, connected and "
                                         "matching", "msg", "file", "line", "client"), sent_at))
    )
