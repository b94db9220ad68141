"""Scenario ``gateway``: 신경 clients on one gateway, over simulated TCP and websockets.

    gossamer sim --scenario gateway --nodes N --param reset=n2@6 --param partition=n3@9-14

Node ``n0`` is the gateway (``GatewayCore`` behind ``GatewayConnections``, listening on
port 4567); ``n1``..``n<N-1>`` are clients of application ``sim`` (``ClientCore`` behind
``ClientConnections``), each a real websocket client: HTTP upgrade, masked frames,
closing handshake, all over ``gossamer.sim.streams``. Odd clients are *workers*, even
ones *reporters*. Every client identifies with ``{"index", "role", "load"}`` and then,
every ``interval`` seconds from ``start``:

- updates its ``load`` metadata (a seeded random value);
- a reporter SENDs a message to one worker (the one with the least load: a selector)
  and BROADCASTs one to every worker, and QUEUEs a job on ``jobs`` for the workers;
- a worker, on ready (again after every reconnect), asks for ``credits`` jobs
  (QUEUE_REQUEST), and acknowledges each job it gets (QUEUE_ACK), asking for one more.

With ``subnets=S`` the nodes spread over S subnets (the gateway in the first; clients in
other subnets are a WAN latency away). Faults: ``reset=NODE@T,...`` resets a client's
connection (both ends lose it; the client reconnects after its back-off),
``partition=NODES@FROM-TO`` cuts clients off (their connections stall; heartbeats run
late, and past ``heartbeat_ms`` x 1.5 the gateway closes them), ``crash=NODE@T,...``
crashes clients for good (the gateway redelivers their jobs). The fault plan
(``--drop`` ...) is for datagrams and does not apply: TCP hides loss.

Client nodes trace ``layer=gateway`` events: their cores' ``client_ready`` (``attrs.
reconnect``), ``client_send`` and ``client_recv`` (``msg`` = the nonce, which is also
the payload's id; ``gossamer.proto.gateway.tracing``), and the scenario's
``client_invalid`` (``attrs.error``) and ``client_disconnected``; the
gateway traces its own (``gossamer.proto.gateway.core``) and the streams theirs
(``layer=net``). The summary counts what was sent, received and queued, and checks that
every job confirmed by the gateway was acknowledged by the end (``jobs_unacked``).

The golden trace ``tests/sim/golden/gateway.jsonl`` is this scenario's default run
with 5 nodes, seed 1 and the faults of ``tests/sim/test_gateway_scenario.py``; the
test's module docstring says how to regenerate it.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

from gossamer.errors import ConfigError
from gossamer.proto.gateway.client import (
    ClientConfig,
    ClientCore,
    Disconnected,
    Dispatch,
    Invalid,
    Ready,
)
from gossamer.proto.gateway.core import GatewayConfig, GatewayCore
from gossamer.proto.gateway.queues import QueueConfig
from gossamer.proto.gateway.websocket import ClientConnections, GatewayConnections
from gossamer.sim import scenarios as registry
from gossamer.sim.engine import NodeContext, SimNode, Simulator
from gossamer.sim.scenarios import Param, Scenario, Summarize
from gossamer.sim.streams import StreamNetwork

__all__ = ["APP", "PORT", "QUEUE"]

PORT = 4567
APP = "sim"
QUEUE = "jobs"
GATEWAY = "n0"
_WORKERS = {"application": APP, "ops": [{"path": "/role", "op": "$eq", "to": {"value": "worker"}}]}


#: What the summary always reports, even when it is zero.
_COUNTS = (
    "broadcast_received", "broadcasts", "disconnects", "invalid", "jobs", "jobs_received",
    "metadata_updates", "readies", "send_received", "sends",
)


def _partitions(text: str) -> list[tuple[list[str], float, float]]:
    return [registry.partition_spec(part) for part in text.split(";")] if text else []


def _role(index: int) -> str:
    return "worker" if index % 2 else "reporter"


class GatewayRun:
    """The workload and the tallies of one run (see the module docstring)."""

    def __init__(self, sim: Simulator, streams: StreamNetwork, params: Mapping[str, Any]) -> None:
        self.sim = sim
        self.streams = streams
        self.params = params
        self.rng = random.Random(sim.rng.getrandbits(64))
        self.counts: Counter[str] = Counter(dict.fromkeys(_COUNTS, 0))
        self.confirmed: set[str] = set()  # job ids the gateway confirmed (QUEUE_CONFIRM)
        self.acked: set[str] = set()

    # -- the nodes ----------------------------------------------------------------

    def gateway(self, ctx: NodeContext) -> GatewayConnections:
        config = GatewayConfig(
            node_id=ctx.node_id,
            heartbeat_interval_ms=self.params["heartbeat_ms"],
            queues=QueueConfig(ack_timeout=self.params["ack_timeout"]),
        )
        return GatewayConnections(GatewayCore(config, rng=ctx.rng, tracer=ctx.tracer))

    def client(self, index: int) -> Callable[[NodeContext], ClientConnections]:
        gateway = self.sim.node(GATEWAY).address

        def factory(ctx: NodeContext) -> ClientConnections:
            config = ClientConfig(application_id=APP, client_id=ctx.node_id,
                                  reconnect_base=0.5, reconnect_max=4.0)
            metadata = {"index": index, "role": _role(index), "load": 0}
            core = ClientCore(config, rng=ctx.rng, metadata=metadata, tracer=ctx.tracer)
            return ClientConnections(core, gateway)

        return factory

    # -- the workload ---------------------------------------------------------------

    def schedule(self, node_id: str, index: int) -> None:
        params = self.params
        for step in range(params["rounds"]):
            when = params["start"] + step * params["interval"]
            load = self.rng.randrange(100)

            def update(connections: Any, now: float, load: int = load) -> None:
                self._update(connections, load)

            self.streams.local(node_id, update, when)
            if _role(index) == "reporter":

                def report(connections: Any, now: float, step: int = step) -> None:
                    self._report(connections, node_id, step, now)

                self.streams.local(node_id, report, when + params["interval"] / 2)

    def _update(self, connections: ClientConnections, load: int) -> None:
        connections.core.update_metadata({"load": load})
        self.counts["metadata_updates"] += 1

    def _report(
        self, connections: ClientConnections, node_id: str, step: int, now: float
    ) -> None:
        core = connections.core
        one = {**_WORKERS, "selector": {"$min": "load"}}
        core.dispatch("SEND", {"target": one, "nonce": f"{node_id}/s{step}",
                               "payload": {"id": f"{node_id}/s{step}"}}, now)
        core.dispatch("BROADCAST", {"target": _WORKERS, "nonce": f"{node_id}/b{step}",
                                    "payload": {"id": f"{node_id}/b{step}"}}, now)
        core.dispatch("QUEUE", {"queue": QUEUE, "target": _WORKERS, "nonce": f"{node_id}/q{step}",
                                "payload": {"id": f"{node_id}/q{step}"}}, now)
        self.counts["sends"] += 1
        self.counts["broadcasts"] += 1
        self.counts["jobs"] += 1

    # -- reactions --------------------------------------------------------------------

    def on_event(self, node: SimNode, event: object) -> None:
        if node.node_id == GATEWAY:
            return
        trace = node.tracer
        now = self.sim.now
        if isinstance(event, Ready):
            self.counts["readies"] += 1
            if _role(int(node.node_id[1:])) == "worker":
                credits = self.params["credits"]
                self.streams.local(node.node_id, lambda c, t: c.core.dispatch(
                    "QUEUE_REQUEST", {"queue": QUEUE, "count": credits}, t))
        elif isinstance(event, Dispatch):
            self._dispatch(node, event)
        elif isinstance(event, Invalid):
            self.counts["invalid"] += 1
            trace(now, "gateway", "client_invalid", attrs={"error": event.error})
        elif isinstance(event, Disconnected):
            self.counts["disconnects"] += 1
            trace(now, "gateway", "client_disconnected")

    def _dispatch(self, node: SimNode, event: Dispatch) -> None:
        if event.event == "QUEUE_CONFIRM":
            d = event.d if isinstance(event.d, dict) else {}
            self.confirmed.add(str(d.get("id")))
            return
        payload = event.payload
        if event.event == "QUEUE" and isinstance(payload, dict):
            job = str(payload.get("id"))
            self.counts["jobs_received"] += 1

            def ack(connections: ClientConnections, t: float) -> None:
                connections.core.dispatch("QUEUE_ACK", {"queue": QUEUE, "id": job}, t)
                connections.core.dispatch("QUEUE_REQUEST", {"queue": QUEUE, "count": 1}, t)
                self.acked.add(job)

            self.streams.local(node.node_id, ack)
            return
        if isinstance(payload, dict):
            self.counts[f"{event.event.lower()}_received"] += 1

    def summary(self) -> dict[str, Any]:
        gateway = self.sim.node(GATEWAY)
        port = gateway.core
        clients = 0
        if port is not None:
            clients = len(port.inner.core.directory.clients)  # type: ignore[attr-defined]
        return {
            **dict(sorted(self.counts.items())),
            "clients_at_end": clients,
            "jobs_confirmed": len(self.confirmed),
            "jobs_unacked": len(self.confirmed - self.acked),
        }


_INT, _SECONDS, _AT = registry.positive_int, registry.non_negative_float, registry.node_at_list
PARAMS: tuple[Param, ...] = (
    Param(name="subnets", parse=_INT, default=1, help="subnets the clients spread over"),
    Param(name="rounds", parse=_INT, default=8, help="rounds of update, SEND, BROADCAST, QUEUE"),
    Param(name="interval", parse=_SECONDS, default=2.0, help="seconds between rounds"),
    Param(name="start", parse=_SECONDS, default=1.0, help="when the first round is"),
    Param(name="credits", parse=_INT, default=2, help="jobs a worker asks for at once"),
    Param(name="heartbeat_ms", parse=_INT, default=2000, help="the gateway's heartbeat, ms"),
    Param(name="ack_timeout", parse=_SECONDS, default=5.0, help="seconds before a redelivery"),
    Param(name="reset", parse=_AT, default=[], shown="none",
          help="NODE@SECONDS[,...]: reset a client's connection"),
    Param(name="partition", parse=_partitions, default=[], shown="none",
          help="NODES@FROM-TO[;...]: cut clients off from the gateway for a while"),
    Param(name="crash", parse=_AT, default=[], shown="none",
          help="NODE@SECONDS[,...]: crash clients for good"),
)  # fmt: skip


def _setup(sim: Simulator, nodes: int, params: Mapping[str, Any]) -> Summarize:
    if nodes < 2:
        raise ConfigError("the gateway scenario needs a gateway and a client (--nodes >= 2)")
    streams = StreamNetwork(sim)
    run = GatewayRun(sim, streams, params)
    sim.on_event = run.on_event
    subnets = sim.network.subnets
    hosts = [sim.network.add_host(f"h{i}", subnet=i % subnets) for i in range(nodes)]
    streams.add_node(GATEWAY, hosts[0], PORT, run.gateway)
    for index in range(1, nodes):
        streams.add_node(f"n{index}", hosts[index], PORT, run.client(index), listen=False)
        run.schedule(f"n{index}", index)
    for node_id, when in params["reset"]:
        registry.check_nodes_exist(sim, [node_id], "reset")
        streams.reset(node_id, GATEWAY, when)
    for names, start, end in params["partition"]:
        registry.check_nodes_exist(sim, names, "partition")
        sim.partition(names, start, end)
    for node_id, when in params["crash"]:
        registry.check_nodes_exist(sim, [node_id], "crash")
        streams.crash(node_id, when)
    return run.summary


SCENARIO = registry.register(
    Scenario(
        name="gateway",
        description="신경 gateway: clients identify, update metadata, SEND, BROADCAST and "
        "queue jobs over simulated TCP; resets, partitions, crashes",
        default_duration=30.0,
        params=PARAMS,
        setup=_setup,
    )
)
