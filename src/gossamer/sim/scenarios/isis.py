"""Scenario ``isis``: total-order multicast among all nodes, under loss, delay,
duplication, reordering and crashes.

Nodes ``n0`` .. ``n<N-1>`` are members 1..N of one static group on one subnet (UDP
port 10001, as the original). The first ``senders`` nodes each multicast ``messages``
payloads of ``size`` bytes, one every ``interval`` seconds from ``start``; with the
default ``size`` of 4 they are the original's uint32 values, the original driver's
``i + 10`` plus 100 per sender (``n0`` sends 11, 12, ...; ``n1`` 111, 112, ...), and a
larger ``size`` pads that value's bytes after a text label (:func:`sender_value`).
A node crashed with ``crash=NODE@SECONDS`` is removed from every survivor's view
``detect`` seconds later, which is what the membership layer's ``peer_down`` does in a
real node. ``drop_rate`` and ``ack_delay`` are the original program's own fault flags
(``--dropRate``; ``--delay`` of half the Acks and SeqAcks), on top of the simulator's
network faults (``--drop``, ``--dup``, ``--delay``, ``--reorder``). Every field of
``IsisConfig`` that tunes the protocol is a parameter of the same name, unit and
default (:data:`TUNABLES`; ``batch_turn``'s batch leaves at the same virtual instant,
after the events already due then), and ``wire`` picks gossamer's own behaviour (``sealed``, the
default: retransmission from measured round trips) or the original's (``original``: the
spec's schedule, one message per datagram; the simulator carries no envelope either way).

The summary checks integrity, validity, agreement and total order
(``gossamer.proto.isis.checks``) and reports latency and datagrams per message.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from typing import Any

from gossamer.params import parser_of
from gossamer.proto.isis import TUNABLES as ISIS_TUNABLES
from gossamer.proto.isis import (
    Delivered,
    IsisConfig,
    IsisCore,
    Member,
    members_from,
    payload_digest,
    tunable_defaults,
)
from gossamer.proto.isis.checks import Delivery as CheckedDelivery
from gossamer.proto.isis.checks import IsisRecord, check_all
from gossamer.sim.engine import NodeContext, SimNode, Simulator
from gossamer.sim.scenarios import (
    Param,
    Scenario,
    Summarize,
    check_nodes_exist,
    node_at_list,
    non_negative_float,
    positive_int,
    register,
)
from gossamer.wire.isis import MAX_DATA_SIZE, MULTICAST_PORT
from gossamer.wire.mode import WireMode, parse_wire

__all__ = ["TUNABLES", "IsisRun", "build_group", "sender_value"]

PORT = MULTICAST_PORT


def sender_value(sender_index: int, i: int, size: int = 4) -> bytes:
    """The ``i``-th (1-based) payload multicast by sender number ``sender_index``: the
    uint32 ``100 * sender_index + i + 10`` in 4 bytes, or ``size`` bytes that start with
    ``"<sender_index>/<i>"`` and repeat the value's bytes."""
    value = (100 * sender_index + i + 10).to_bytes(4, "big")
    if size == 4:
        return value
    label = f"{sender_index}/{i}:".encode()
    return (label + value * (size // 4 + 1))[:size]


class IsisRun:
    """Bookkeeping shared by the ``isis`` and ``snapshot`` scenarios: who multicast
    what and when, who delivered what and when."""

    def __init__(self, sim: Simulator, members: tuple[Member, ...]) -> None:
        self.sim = sim
        self.members = members
        self.names = {m.id: m.name for m in members}
        self.record = IsisRecord(multicasts={}, deliveries={})
        self.sent_at: dict[str, float] = {}
        self.latencies: list[float] = []
        self.crashed: set[str] = set()

    def multicasted(self, node: str, msg_id: int, data: bytes, now: float) -> None:
        msg = f"{node}/{msg_id}"
        self.record.multicasts.setdefault(node, {})[msg] = payload_digest(data)
        self.sent_at[msg] = now

    def on_event(self, node: SimNode, event: object) -> None:
        if isinstance(event, Delivered):
            msg = f"{event.sender}/{event.msg_id}"
            self.record.deliveries.setdefault(node.node_id, []).append(
                CheckedDelivery(
                    msg=msg,
                    seq=event.final_seq,
                    proposer=event.proposer,
                    data=payload_digest(event.data),
                )
            )
            if msg in self.sent_at:
                self.latencies.append(self.sim.now - self.sent_at[msg])

    def correct(self) -> list[str]:
        return [m.name for m in self.members if m.name not in self.crashed]

    def summary(self) -> dict[str, Any]:
        correct = self.correct()
        violations = check_all(self.record, correct, all_nodes=[m.name for m in self.members])
        multicast = sum(len(v) for v in self.record.multicasts.values())
        delivered = {n: len(self.record.deliveries.get(n, [])) for n in correct}
        result: dict[str, Any] = {
            "multicast": multicast,
            "delivered_per_correct_node": delivered,
            "violations": violations[:20],
            "violation_count": len(violations),
            "crashed": sorted(self.crashed),
        }
        if self.latencies:
            lat = sorted(self.latencies)
            q = statistics.quantiles(lat, n=100, method="inclusive") if len(lat) > 1 else lat * 99
            result["latency_ms_p50"] = round(q[49] * 1000, 3)
            result["latency_ms_p99"] = round(q[98] * 1000, 3)
        if multicast:
            result["datagrams_per_message"] = round(self.sim.stats["datagrams_sent"] / multicast, 2)
        return result


def build_group(sim: Simulator, nodes: int) -> tuple[Member, ...]:
    """Hosts ``h0``.. on subnet 0 and the group's members ``n0``.. (ids 1..N)."""
    hosts = [sim.network.add_host(f"h{i}") for i in range(nodes)]
    return members_from([(f"n{i}", (host.ip, PORT)) for i, host in enumerate(hosts)])


def isis_config(
    member: Member, members: tuple[Member, ...], params: Mapping[str, Any]
) -> IsisConfig:
    """The configuration every node of both scenarios uses: the tunables from ``params``
    (a ``retransmit_max`` below ``retransmit_initial`` is raised to it)."""
    tunables = {param.name: params[param.name] for param in TUNABLES}
    tunables["retransmit_max"] = max(tunables["retransmit_max"], tunables["retransmit_initial"])
    tunables["retransmit_granularity"] = min(
        tunables["retransmit_granularity"], tunables["retransmit_max"]
    )
    return IsisConfig(
        me=member.id,
        members=members,
        wire=params["wire"],
        **tunables,
    )


def schedule_crashes(sim: Simulator, run: IsisRun, params: Mapping[str, Any]) -> None:
    """Crash nodes as asked; ``detect`` seconds later every survivor removes them."""
    crashes = params["crash"]
    check_nodes_exist(sim, [n for n, _ in crashes], "crash")
    ids = {m.name: m.id for m in run.members}
    for node_id, when in crashes:
        sim.crash(node_id, when)
        run.crashed.add(node_id)
    for node_id, when in crashes:
        member = ids[node_id]
        for other in sim.nodes:
            if other not in run.crashed:

                def remove(core: Any, now: float, member: int = member) -> None:
                    core.remove_member(member, now)

                sim.local(other, remove, when=when + params["detect"])


def schedule_multicasts(
    sim: Simulator, run: IsisRun, senders: int, params: Mapping[str, Any]
) -> None:
    for s in range(min(senders, len(run.members))):
        node = run.members[s].name
        for i in range(1, params["messages"] + 1):
            data = sender_value(s, i, params["size"])

            def send(core: Any, now: float, node: str = node, data: bytes = data) -> None:
                msg_id = core.multicast(data, now)
                if msg_id is not None:
                    run.multicasted(node, msg_id, data, now)

            sim.local(node, send, when=params["start"] + (i - 1) * params["interval"])


def _payload_size(text: str) -> int:
    value = int(text)
    if not 0 <= value <= MAX_DATA_SIZE:
        raise ValueError(f"{text} is not a payload size from 0 to {MAX_DATA_SIZE} bytes")
    return value


#: ``IsisConfig``'s tunables as parameters: same names, units and defaults (``IsisConfig``
#: validates the values).
TUNABLES: tuple[Param, ...] = tuple(
    Param(name=name, parse=parser_of(default), default=default, help=ISIS_TUNABLES[name])
    for name, default in tunable_defaults().items()
)

COMMON_PARAMS: tuple[Param, ...] = (
    Param(name="senders", parse=positive_int, default=2, help="how many nodes multicast (n0..)"),
    Param(name="messages", parse=positive_int, default=5, help="messages per sender"),
    Param(name="size", parse=_payload_size, default=4,
          help="payload bytes per message (4: the original's uint32 values)"),
    Param(name="interval", parse=non_negative_float, default=0.05,
          help="seconds between one sender's multicasts"),
    Param(name="start", parse=non_negative_float, default=0.1, help="when senders begin"),
    Param(name="crash", parse=node_at_list, default=[], shown="none",
          help="NODE@SECONDS[,...]: crash nodes (survivors remove them after `detect`)"),
    Param(name="detect", parse=non_negative_float, default=1.0,
          help="seconds from a crash to its removal from every survivor's view"),
    Param(name="wire", parse=parse_wire, default=WireMode.SEALED, shown="sealed",
          help="sealed|original: the original's behaviour too (the spec's retransmission "
               "schedule, one message per datagram, uint32 payloads)"),
    *TUNABLES,
)  # fmt: skip


def _setup(sim: Simulator, nodes: int, params: Mapping[str, Any]) -> Summarize:
    members = build_group(sim, nodes)
    run = IsisRun(sim, members)
    sim.on_event = run.on_event

    def factory_for(member: Member) -> Any:
        def factory(ctx: NodeContext) -> IsisCore:
            return IsisCore(isis_config(member, members, params), tracer=ctx.tracer, rng=ctx.rng)

        return factory

    for member, host in zip(members, sim.network.hosts.values(), strict=True):
        sim.add_node(member.name, host, PORT, factory_for(member))
    schedule_multicasts(sim, run, params["senders"], params)
    schedule_crashes(sim, run, params)
    return run.summary


SCENARIO = register(
    Scenario(
        name="isis",
        description="ISIS total-order multicast: K senders of M messages, faults and crashes",
        default_duration=120.0,
        params=COMMON_PARAMS,
        setup=_setup,
    )
)
