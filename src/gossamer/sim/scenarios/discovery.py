"""Scenario ``discovery``: Prototari nodes on one LAN find each other and notice failures.

Every node runs ``DiscoveryCore``. Nodes start together at time 0 (each jitters
its first broadcast), so the run shows convergence to a full view, then steady
heartbeats; ``crash``, ``restart``, ``leave`` (a clean stop with ``agur!``) and
``partition`` perturb it. The summary reports what the issue asks to measure:

- ``full_view_s``: when every node had held ``min(max_peers, N - 1)`` peers at
  least once (``null`` if some node never did), and its per-node median;
  ``settled_s``: when the last node came up to that count for the last time,
  if every live node ends the run there (rebalancing may take a node below it
  for a while after it first got there);
- ``detection_s_max`` / ``detection_s_p50``: from each crash to its removal by
  each node that had the crashed node as a peer, and ``undetected`` pairs;
- ``leave_removals`` / ``leave_s_max``: removals of nodes that stopped cleanly
  (``leave``), and the longest time from the stop to such a removal;
- ``false_removals``: ``peer_down`` with reason ``heartbeat`` of a peer that was
  up and not partitioned from the remover; ``spurious_leaves``: ``peer_down``
  with reason ``leave`` of a peer that had not stopped (a one-sided
  registration cleaned up by an ``agur!`` answer to ``hor?``);
- final peer counts, one-sided pairs left at the end, and datagrams by type.

Ports. As on a LAN, every node has its own host, its unicast port (21450), and
also listens on the broadcast port 21451 (``add_node(..., extra_ports=(21451,))``);
it sends everything, its broadcast included, from the unicast port.

Subnets. Node ``i`` sits on subnet ``i % subnets``; a subnet is as large as it needs
to be. Every broadcast reaches its whole subnet, so a subnet of L nodes costs about L
squared while its nodes look for peers: unless ``--param subnets=K`` says otherwise
there is one subnet per 128 nodes, which keeps a run's cost linear in the node count
(``bench/sim_scale.py``). A node can only find peers on its own subnet, so its target
view is ``min(max_peers, its subnet's nodes - 1)``.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import statistics
from collections.abc import Mapping
from typing import Any

from gossamer._types import Address
from gossamer.proto.discovery import (
    DiscoveryConfig,
    DiscoveryCore,
    DiscoveryCounters,
    PeerDown,
    PeerUp,
)
from gossamer.sim.engine import NodeContext, SimNode, Simulator
from gossamer.sim.scenarios import (
    Param,
    Scenario,
    Summarize,
    check_nodes_exist,
    fault_params,
    node_at_list,
    non_negative_float,
    positive_int,
    register,
    subnets_param,
)
from gossamer.wire.prototari import BROADCAST_PORT, UNICAST_PORT

#: Nodes per subnet unless ``--param subnets`` says otherwise (see "Subnets").
LAN = 128
_COUNTER_NAMES = tuple(f.name for f in dataclasses.fields(DiscoveryCounters))


def _positive_float(text: str) -> float:
    value = non_negative_float(text)
    if value == 0:
        raise ValueError("must be positive")
    return value


def _setup(sim: Simulator, nodes: int, params: Mapping[str, Any]) -> Summarize:
    subnets = sim.network.subnets
    ids = [f"n{i}" for i in range(nodes)]
    hosts = [
        sim.network.add_host(f"h{i % subnets}-{i // subnets}", i % subnets) for i in range(nodes)
    ]
    addresses: list[Address] = [(host.ip, UNICAST_PORT) for host in hosts]
    names: dict[Address, str] = dict(zip(addresses, ids, strict=True))

    template = DiscoveryConfig(
        address=addresses[0],
        broadcast_address="255.255.255.255",
        broadcast_port=BROADCAST_PORT,
        max_peers=params["max_peers"],
        broadcast_interval=params["interval"],
        inactive_time=params["inactive"],
        heartbeat_wait=params["wait"],
        heartbeat_attempts=params["attempts"],
        rebalance=params["rebalance"],
        names=names,
    )  # validates the timing parameters before any node exists

    def factory_for(i: int) -> Any:
        def factory(ctx: NodeContext) -> DiscoveryCore:
            config = dataclasses.replace(
                template,
                address=addresses[i],
                broadcast_address=hosts[i].broadcast,
                start=ctx.now,
            )
            return DiscoveryCore(config, tracer=ctx.tracer, rng=ctx.rng)

        return factory

    for i in range(nodes):
        sim.add_node(ids[i], hosts[i], UNICAST_PORT, factory_for(i), extra_ports=(BROADCAST_PORT,))

    # -- faults and workload ------------------------------------------------------------
    down_since: dict[str, float] = {}  # node -> when it crashed or left (while down)
    stopped: set[str] = set()  # nodes that left cleanly (their agur! removals are expected)
    cut: dict[str, int] = {}  # node -> partition side while partitioned

    crashes = params["crash"]
    check_nodes_exist(sim, [n for n, _ in crashes], "crash")

    def _crashed(node_id: str) -> None:
        down_since.setdefault(node_id, sim.now)

    def _back(node_id: str) -> None:
        down_since.pop(node_id, None)
        stopped.discard(node_id)

    def _left(node_id: str) -> None:
        if sim.nodes[node_id].alive:
            down_since.setdefault(node_id, sim.now)
            stopped.add(node_id)

    def _stop(core: DiscoveryCore, now: float) -> None:
        core.stop(now)

    for node_id, when in crashes:
        sim.crash(node_id, when)
        sim.at(when, functools.partial(_crashed, node_id))
    restarts = params["restart"]
    check_nodes_exist(sim, [n for n, _ in restarts], "restart")
    for node_id, when in restarts:
        sim.restart(node_id, when)
        sim.at(when, functools.partial(_back, node_id))
    leaves = params["leave"]
    check_nodes_exist(sim, [n for n, _ in leaves], "leave")
    for node_id, when in leaves:
        sim.at(when, functools.partial(_left, node_id))
        sim.local(node_id, _stop, when=when)
    if params["partition"] is not None:
        isolated, start, end = params["partition"]
        check_nodes_exist(sim, isolated, "partition")
        sim.partition(isolated, start, end)

        def _cut() -> None:
            cut.update(dict.fromkeys(isolated, 1))

        def _heal() -> None:
            for n in isolated:
                cut.pop(n, None)

        sim.at(start, _cut)
        sim.at(end, _heal)
    if params["data"] > 0:
        period = params["data"]

        def chat(node_id: str) -> None:
            def request(core: DiscoveryCore, now: float) -> None:
                if not core.stopped:
                    core.send_to_peers(f"{node_id}@{now:.3f}".encode(), now)
                sim.local(node_id, request, when=now + period)

            sim.local(node_id, request, when=period)

        for node_id in ids:
            chat(node_id)

    # -- measurements -------------------------------------------------------------------
    # A node's target view: every other node of its subnet, or max_peers of them.
    subnet_of = {n: i % subnets for i, n in enumerate(ids)}
    subnet_size = [len(range(s, nodes, subnets)) for s in range(subnets)]
    targets = {n: min(template.max_peers, subnet_size[subnet_of[n]] - 1) for n in ids}
    views: dict[str, set[str]] = {n: set() for n in ids}
    reached: dict[str, float] = {}  # node -> when it first held its target of peers
    last_reached: dict[str, float] = {}  # node -> when it last came up to its target
    for n in ids:
        if targets[n] == 0:
            reached[n] = last_reached[n] = 0.0
    detections: list[float] = []
    leave_delays: list[float] = []
    false_removals: list[dict[str, Any]] = []
    spurious_leaves = 0
    evicted: set[tuple[str, str]] = set()  # (victim, evicter) of rebalancing agur!s

    def on_event(node: SimNode, event: object) -> None:
        nonlocal spurious_leaves
        now = sim.now
        view = views[node.node_id]
        if isinstance(event, PeerUp):
            view.add(event.name)
            if len(view) == targets[node.node_id]:
                last_reached[node.node_id] = now
                reached.setdefault(node.node_id, now)
        elif isinstance(event, PeerDown):
            view.discard(event.name)
            if event.local:
                if node.node_id not in stopped:  # it made room for a stranded node
                    evicted.add((event.name, node.node_id))
                return
            peer = event.name
            if peer in down_since and peer not in stopped:
                detections.append(now - down_since[peer])
            elif peer in stopped and event.reason == "leave":
                leave_delays.append(now - down_since[peer])
            elif event.reason == "heartbeat" and cut.get(peer, 0) == cut.get(node.node_id, 0):
                false_removals.append({"t": round(now, 3), "node": node.node_id, "peer": peer})
            elif (
                event.reason == "leave"
                and peer not in stopped
                and (node.node_id, peer) not in evicted
                and sim.nodes[peer].incarnation == 1  # a restarted node rightly says agur!
            ):
                spurious_leaves += 1

    sim.on_event = on_event

    # Crashes whose victims were peers of others at crash time: expected detections.
    expected: list[tuple[str, str]] = []

    def snapshot_peers(victim: str) -> None:
        expected.extend((n, victim) for n in ids if victim in views[n] and sim.nodes[n].alive)

    for node_id, when in crashes:
        # Runs right after the crash at the same instant: views change only on core
        # events, and a crash produces none, so this is the view at the crash.
        sim.at(when, functools.partial(snapshot_peers, node_id))

    def summarize() -> dict[str, Any]:
        live = [n for n in ids if sim.nodes[n].alive and n not in stopped]
        final = [len(views[n]) for n in live]
        one_sided = sum(1 for a in live for b in views[a] if a not in views.get(b, set()))
        counters = DiscoveryCounters()
        for n in live:
            core = sim.nodes[n].core
            if isinstance(core, DiscoveryCore):
                for name in _COUNTER_NAMES:
                    setattr(counters, name, getattr(counters, name) + getattr(core.counters, name))
        times = sorted(reached.get(n, math.inf) for n in ids)
        live_in = [0] * subnets
        for n in live:
            live_in[subnet_of[n]] += 1
        result: dict[str, Any] = {
            "target_peers": min(targets.values()),
            "full_view_s": None if math.isinf(times[-1]) else round(times[-1], 3),
            "full_view_s_p50": _round(statistics.median(times)),
            "settled_s": (
                _round(max((last_reached.get(n, math.inf) for n in live), default=0.0))
                if all(len(views[n]) >= targets[n] for n in live)
                else None
            ),
            "nodes_never_full": sum(1 for t in times if math.isinf(t)),
            "final_peers_min": min(final, default=0),
            "final_peers_max": max(final, default=0),
            "final_peers_mean": round(statistics.fmean(final), 3) if final else 0,
            "nodes_below_target_at_end": sum(
                1
                for n in live
                if len(views[n]) < min(template.max_peers, live_in[subnet_of[n]] - 1)
            ),
            "one_sided_at_end": one_sided,
            "crash_pairs": len(expected),
            "detections": len(detections),
            "undetected": max(0, len(expected) - len(detections)),
            "detection_s_max": _round(max(detections, default=math.nan)),
            "detection_s_p50": _round(statistics.median(detections) if detections else math.nan),
            "leave_removals": len(leave_delays),
            "leave_s_max": _round(max(leave_delays, default=math.nan)),
            "false_removals": len(false_removals),
            "false_removal_examples": false_removals[:5],
            "spurious_leaves": spurious_leaves,
            "rebalances": len(evicted),
            "counters": {
                name: getattr(counters, name) for name in _COUNTER_NAMES if getattr(counters, name)
            },
        }
        return result

    return summarize


def _boolean(text: str) -> bool:
    if text not in ("0", "1", "true", "false"):
        raise ValueError(f"{text!r} is not 0, 1, true or false")
    return text in ("1", "true")


def _round(value: float) -> float | None:
    return None if math.isnan(value) or math.isinf(value) else round(value, 3)


SCENARIO = register(
    Scenario(
        name="discovery",
        description="Prototari nodes on a LAN discover each other, heartbeat, and detect failures",
        default_duration=60.0,
        params=(
            Param(name="max_peers", parse=positive_int, default=64, help="peers per node at most"),
            Param(
                name="interval",
                parse=_positive_float,
                default=5.0,
                help="broadcast interval, seconds",
            ),
            Param(
                name="inactive",
                parse=_positive_float,
                default=10.0,
                help="inactive-peer time before hor?, seconds",
            ),
            Param(
                name="wait",
                parse=_positive_float,
                default=1.0,
                help="heartbeat max wait, seconds",
            ),
            Param(
                name="attempts",
                parse=positive_int,
                default=3,
                help="hor? datagrams per heartbeat wait (1: the spec read literally)",
            ),
            Param(
                name="rebalance",
                parse=_boolean,
                default=True,
                help="full nodes make room for stranded broadcasters (0 or 1)",
            ),
            Param(
                name="data",
                parse=non_negative_float,
                default=0.0,
                help="every node sends a datagram to all its peers every SECONDS (0: never)",
            ),
            subnets_param(LAN),
            *fault_params(
                crash="crash nodes (no agur!)",
                more=(
                    Param(
                        name="leave",
                        parse=node_at_list,
                        default=[],
                        shown="none",
                        help="NODE@SECONDS[,...]: stop nodes cleanly (agur! to their peers)",
                    ),
                ),
            ),
        ),
        setup=_setup,
        lan=LAN,
    )
)
