"""Every checker with its property, its parameters and how its violations are listed.

``CHECKS`` is the list ``gossamer analyze`` runs, in report order. Parameters
(``PARAMS``) have defaults; a scenario can supply bounds through its ``run.json``
(``derive_params``), and the command line overrides both
(``--param gossip.max_depth=5``). A check whose bound is unknown is skipped and
says which parameter it needs, rather than guessing.
"""

from __future__ import annotations

import builtins
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame

from gossamer.analysis.checks import (
    cluster,
    demo,
    discovery,
    gateway,
    gossip,
    isis,
    link,
    queues,
    snapshot,
    vsync,
)
from gossamer.errors import ConfigError

__all__ = ["CHECKS", "PARAMS", "Check", "CheckInputs", "Param", "derive_params", "resolve_params"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Param:
    """A tunable bound or threshold of a checker."""

    name: str
    default: float | None
    help: str


PARAMS: tuple[Param, ...] = (
    Param(
        name="discovery.max_peers",
        default=64,
        help="the nodes' max peers: a full view is min(max_peers, N - 1) peers",
    ),
    Param(
        name="discovery.full_view_within",
        default=None,
        help="seconds from a node's start to its full view (none: only eventually)",
    ),
    Param(
        name="discovery.detect_within",
        default=None,
        help="seconds from a crash to its removal by every peer (none: only eventually)",
    ),
    Param(
        name="discovery.removal_window",
        default=30.0,
        help="a removal is justified by a crash or partition this many seconds before it",
    ),
    Param(
        name="gossip.min_coverage",
        default=1.0,
        help="fraction of correct destinations each broadcast must reach",
    ),
    Param(name="gossip.max_depth", default=None, help="largest allowed hop depth of a broadcast"),
    Param(name="snapshot.tolerance", default=1e-6, help="relative tolerance of the invariant"),
    Param(
        name="queue.drain",
        default=queues.DRAIN,
        help="seconds a confirmed message is given to be acked before the consumers stop",
    ),
    Param(
        name="queue.ack_grace",
        default=queues.ACK_GRACE,
        help="seconds after an ack is applied during which a dispatch already sent may arrive",
    ),
    Param(
        name="queue.ack_timeout",
        default=15.0,
        help="the gateways' queue ack timeout: how long a consumer holds an unacked message",
    ),
)
_PARAM_NAMES = {p.name for p in PARAMS}


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckInputs:
    """What a check gets besides the events: extra nodes and resolved parameters."""

    nodes: DataFrame | None
    params: Mapping[str, float]


@dataclass(frozen=True, slots=True, kw_only=True)
class Check:
    """One property: the checker that finds its violations and how to list them.

    ``name`` is ``<layer>.<property>``: the layer whose events the check reads comes
    from it. ``shortcut``, when given, is a cheap transform that is empty only if the
    property certainly holds; the job runs it first and skips ``run`` when it is empty.
    """

    name: str
    property: str
    order: tuple[str, ...]
    run: Callable[[DataFrame, CheckInputs], DataFrame]
    needs: tuple[str, ...] = ()
    #: Event kinds of its layer the check needs at least one of (none: any event of the
    #: layer will do); without them it is skipped, e.g. when the gateway's clients do
    #: not trace.
    kinds: tuple[str, ...] = ()
    #: Events of other layers the check needs, each ``layer/kind``: without one of them
    #: it is skipped (the cluster's routing check needs the daemons' views).
    requires: tuple[str, ...] = ()
    #: Events (``layer/kind``) in whose presence the property does not apply: with one
    #: of them the check is skipped, saying why (``unless_note``).
    unless: tuple[str, ...] = ()
    unless_note: str = ""
    shortcut: Callable[[DataFrame, CheckInputs], DataFrame] | None = None

    @builtins.property  # the field ``property`` hides the builtin in this class body
    def layer(self) -> str:
        """The layer whose events the check reads (the part of ``name`` before the dot)."""
        return self.name.partition(".")[0]


def _p(inputs: CheckInputs, name: str) -> float:
    return inputs.params[name]


def _opt(inputs: CheckInputs, name: str) -> float | None:
    return inputs.params.get(name)


#: The ISIS checks need messages: a group whose members only changed views (the node
#: daemon's, when nothing is multicast) exercises none of them.
ISIS_MESSAGES = ("multicast", "deliver")
#: A group on agreed views (the node daemons': virtual synchrony) owes a message only to
#: the members of the view it was sent in, which isis.agreement and isis.validity, over
#: every node of the run, do not know: they skip such runs, and isis.view_agreement and
#: isis.view_validity (which require the views) judge them instead.
ON_VIEWS = ("views/view_change",)
ON_VIEWS_NOTE = "the group runs on agreed views (judged by isis.view_*, views.* and queue.*)"


def _on_views(
    name: str, prop: str, order: tuple[str, ...], checker: Callable[[DataFrame], DataFrame]
) -> Check:
    """An ISIS check of virtual synchrony: it needs messages, and runs only on views."""
    return Check(
        name=name,
        property=prop,
        order=order,
        run=lambda e, i: checker(e),
        kinds=ISIS_MESSAGES,
        requires=ON_VIEWS,
    )


CHECKS: tuple[Check, ...] = (
    Check(
        name="isis.total_order",
        property="every two correct nodes deliver their common messages in the same order",
        order=("node_a", "node_b", "at_a"),
        run=lambda e, i: isis.total_order(e, nodes=i.nodes),
        shortcut=lambda e, i: isis.order_suspects(e, nodes=i.nodes),
        kinds=ISIS_MESSAGES,
    ),
    Check(
        name="isis.agreement",
        property="a message delivered by one correct node is delivered by every correct node",
        order=("msg",),
        run=lambda e, i: isis.agreement(e, nodes=i.nodes),
        shortcut=lambda e, i: isis.short_messages(e, nodes=i.nodes),
        kinds=ISIS_MESSAGES,
        unless=ON_VIEWS,
        unless_note=ON_VIEWS_NOTE,
    ),
    Check(
        name="isis.validity",
        property="a correct node delivers every message it multicast",
        order=("node", "msg"),
        run=lambda e, i: isis.validity(e, nodes=i.nodes),
        shortcut=lambda e, i: isis.never_delivered_own(e, nodes=i.nodes),
        kinds=ISIS_MESSAGES,
        unless=ON_VIEWS,
        unless_note=ON_VIEWS_NOTE,
    ),
    _on_views(
        "isis.view_agreement",
        "every two members that install view v and then v + 1 delivered the same messages in v",
        ("view", "msg"),
        vsync.view_agreement,
    ),
    _on_views(
        "isis.view_validity",
        "a member that multicast a message and stayed a member to the end delivered it (or "
        "withdrew it at a view change and multicast it again)",
        ("node", "msg"),
        vsync.view_validity,
    ),
    Check(
        name="isis.integrity",
        property="no node delivers a message twice, or one that nobody multicast",
        order=("problem", "node", "msg"),
        run=lambda e, i: isis.integrity(e),
        kinds=ISIS_MESSAGES,
    ),
    Check(
        name="isis.final_sequence",
        property="every node delivers a message with the same final sequence and proposer",
        order=("msg",),
        run=lambda e, i: isis.final_sequence(e),
        kinds=ISIS_MESSAGES,
    ),
    Check(
        name="gossip.coverage",
        property="every broadcast reaches its correct destinations (gossip.min_coverage of them)",
        order=("coverage", "msg"),
        run=lambda e, i: gossip.coverage(
            e, nodes=i.nodes, min_coverage=_p(i, "gossip.min_coverage")
        ),
        shortcut=lambda e, i: gossip.coverage_suspects(e, nodes=i.nodes),
    ),
    Check(
        name="gossip.depth",
        property="no broadcast needs more hops than gossip.max_depth",
        order=("msg",),
        run=lambda e, i: gossip.depth(e, max_depth=int(_p(i, "gossip.max_depth"))),
        needs=("gossip.max_depth",),
    ),
    Check(
        name="gossip.integrity",
        property="each node delivers each broadcast at most once, and only real broadcasts",
        order=("problem", "node", "msg"),
        run=lambda e, i: gossip.integrity(e),
    ),
    Check(
        name="discovery.full_view",
        property="every correct node reaches a full view (within discovery.full_view_within)",
        order=("node",),
        run=lambda e, i: discovery.full_view(
            e,
            nodes=i.nodes,
            max_peers=int(_p(i, "discovery.max_peers")),
            within=_opt(i, "discovery.full_view_within"),
        ),
    ),
    Check(
        name="discovery.crash_detection",
        property="every crashed node is removed by its correct peers "
        "(within discovery.detect_within)",
        order=("crashed_at", "crashed", "observer"),
        run=lambda e, i: discovery.crash_detection(
            e, nodes=i.nodes, within=_opt(i, "discovery.detect_within")
        ),
    ),
    Check(
        name="discovery.false_removals",
        property="no live, reachable peer is removed from a view",
        order=("t", "node", "peer"),
        run=lambda e, i: discovery.false_removals(e, window=_p(i, "discovery.removal_window")),
    ),
    Check(
        name="snapshot.consistency",
        property="every snapshot is a consistent cut with complete local and channel states",
        order=("snapshot", "problem", "node", "msg"),
        run=lambda e, i: snapshot.consistency(e, nodes=i.nodes),
    ),
    Check(
        name="snapshot.invariant",
        property="the workload's conserved total adds up in every snapshot",
        order=("snapshot",),
        run=lambda e, i: snapshot.invariant(e, tolerance=_p(i, "snapshot.tolerance")),
    ),
    Check(
        name="link.delivery",
        property="every message sent on a link is delivered exactly once; none is invented",
        order=("problem", "msg"),
        run=lambda e, i: link.delivery(e, nodes=i.nodes),
        shortcut=lambda e, i: link.delivery_suspects(e, nodes=i.nodes),
    ),
    Check(
        name="link.credit",
        property="no sender exceeds the credit its receiver granted",
        order=("node", "peer", "link", "used"),
        run=lambda e, i: link.credit(e),
    ),
    Check(
        name="gateway.routing",
        property="every routed message reaches the clients its query selected, and only them",
        order=("problem", "msg", "client"),
        run=lambda e, i: gateway.routing(e),
    ),
    Check(
        name="gateway.queues",
        property="queues lose nothing and never redeliver a message after its ack is stored",
        order=("problem", "msg"),
        run=lambda e, i: gateway.queues(e),
    ),
    Check(
        name="gateway.client_delivery",
        property="every SEND or BROADCAST a client sent and the gateway routed reached each "
        "target client (end to end, from the clients' own traces)",
        order=("msg", "client"),
        run=lambda e, i: gateway.client_delivery(e),
        shortcut=lambda e, i: gateway.unreceived(e),
        kinds=("client_send",),
    ),
    Check(
        name="views.agreement",
        property="every two members that install view v install the same members, and each "
        "incarnation installs views one after the other",
        order=("view", "problem", "node"),
        run=lambda e, i: cluster.view_agreement(e),
    ),
    Check(
        name="views.rejoin",
        property="a restarted node rejoins: it and another node install a view with its new "
        "incarnation",
        order=("restarted_at", "node"),
        run=lambda e, i: cluster.rejoin(e),
    ),
    Check(
        name="gateway.cluster_routing",
        property="across the cluster, every BROADCAST reaches every matching client once, every "
        "SEND one matching client, QUERY_NODES names them (the lab's cluster workload)",
        order=("problem", "msg", "client"),
        run=lambda e, i: cluster.routing(e),
        kinds=("client_send", "client_query"),
        requires=("views/view_change",),
    ),
    Check(
        name="queue.confirmed_delivered",
        property="every confirmed message is received and acked by a consumer at least once "
        "(when the consumers had queue.drain seconds left)",
        order=("problem", "msg"),
        run=lambda e, i: queues.confirmed_delivered(e, drain=_p(i, "queue.drain")),
        kinds=("confirm",),
    ),
    Check(
        name="queue.no_redelivery_after_ack",
        property="no consumer receives a message in a new attempt after its ack was applied",
        order=("msg", "consumer"),
        run=lambda e, i: queues.no_redelivery_after_ack(e, grace=_p(i, "queue.ack_grace")),
        kinds=("receive",),
    ),
    Check(
        name="queue.no_double_holding",
        property="no message is held by two consumers at once while both are connected to "
        "the majority",
        order=("problem", "msg", "consumer"),
        run=lambda e, i: queues.no_double_holding(e, ack_timeout=_p(i, "queue.ack_timeout")),
        kinds=("receive",),
    ),
    Check(
        name="queue.minority_refused",
        property="nothing pushed to a node outside the majority is confirmed before it is back",
        order=("msg",),
        run=lambda e, i: queues.minority_refused(e),
        kinds=("confirm",),
        requires=("views/view_change",),
    ),
    Check(
        name="demo.pings",
        property="every ping is answered or given up exactly once, and only real pings",
        order=("problem", "node", "msg"),
        run=lambda e, i: demo.pings(e, nodes=i.nodes),
    ),
)


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def derive_params(metadata: Mapping[str, Any]) -> dict[str, float]:
    """Bounds a run's ``run.json`` implies (see docs/analysis.md, "Parameters").

    * ``analysis`` (top level) or ``summary.analysis``: explicit ``{param: number}``;
    * scenario parameter ``max_peers`` -> ``discovery.max_peers``;
    * a ``gossip`` run without crashed nodes -> ``gossip.max_depth`` =
      ceil(log2 S) + 2 with the multicast shortcut over S subnets, ceil(log2 N) without
      (issue 5's targets).
    """
    derived: dict[str, float] = {}
    params = metadata.get("params") or {}
    if not isinstance(params, Mapping):
        params = {}
    max_peers = _number(params.get("max_peers"))
    if max_peers is not None:
        derived["discovery.max_peers"] = max_peers
    if metadata.get("scenario") == "gossip":
        nodes = _number(metadata.get("nodes"))
        subnets = _number(params.get("subnets")) or 1.0
        crashed = _number(params.get("crashed")) or 0.0
        multicast = str(params.get("multicast", "on")).lower() in ("on", "true", "1", "yes")
        if nodes and crashed == 0:
            if multicast:
                derived["gossip.max_depth"] = math.ceil(math.log2(max(subnets, 1.0))) + 2
            else:
                derived["gossip.max_depth"] = max(1, math.ceil(math.log2(max(nodes, 2.0))))
    summary = metadata.get("summary")
    for source in (
        metadata.get("analysis"),
        summary.get("analysis") if isinstance(summary, Mapping) else None,
    ):
        if isinstance(source, Mapping):
            for name, value in source.items():
                number = _number(value)
                if name in _PARAM_NAMES and number is not None:
                    derived[name] = number
    return derived


def resolve_params(derived: Mapping[str, float], overrides: Mapping[str, str]) -> dict[str, float]:
    """Defaults, then ``derived``, then command-line ``overrides`` (validated)."""
    params = {p.name: float(p.default) for p in PARAMS if p.default is not None}
    params.update(derived)
    for name, text in overrides.items():
        if name not in _PARAM_NAMES:
            known = ", ".join(sorted(_PARAM_NAMES))
            raise ConfigError(f"unknown check parameter {name!r} (known: {known})")
        value = _number(text)
        if value is None or math.isnan(value):
            raise ConfigError(f"check parameter {name} needs a number, not {text!r}")
        params[name] = value
    return params
