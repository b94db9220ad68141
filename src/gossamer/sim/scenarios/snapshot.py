"""Scenario ``snapshot``: Chandy–Lamport snapshots of a bank running on ISIS.

Every node is an ISIS member (as in scenario ``isis``) wrapped in a
``SnapshotNode`` and holds a bank account of ``initial`` units. The first ``senders``
nodes each make ``messages`` transfers of random amounts to random other members,
one every ``interval`` seconds. ``snapshots`` snapshots are started during the
transfers, by ``n0``, ``n1``, ... in turn, evenly spaced (``overlap`` > 0 starts
each one that many seconds after the previous instead, so that they run concurrently).

The summary checks, for every snapshot, that every member finished its part, that
the cut is consistent channel by channel and that it holds all the money
(``gossamer.proto.snapshot.checks``); and the total-order properties of the transfers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gossamer.proto.isis import IsisCore, Member
from gossamer.proto.isis.core import Delivered
from gossamer.proto.snapshot import (
    Bank,
    SnapshotDone,
    SnapshotNode,
    check_bank,
    check_cut,
)
from gossamer.sim import scenarios as sc
from gossamer.sim.engine import NodeContext, SimNode, Simulator
from gossamer.sim.scenarios.isis import (
    COMMON_PARAMS,
    PORT,
    IsisRun,
    build_group,
    isis_config,
    schedule_crashes,
)

__all__ = ["SnapshotRun"]


class SnapshotRun(IsisRun):
    """``IsisRun`` plus the banks and every member's part of every snapshot."""

    def __init__(self, sim: Simulator, members: tuple[Member, ...], initial: int) -> None:
        super().__init__(sim, members)
        self.initial = initial
        self.banks: dict[str, Bank] = {}
        self.parts: dict[int, dict[str, dict[str, Any]]] = {}
        self.started: list[int] = []

    def on_event(self, node: SimNode, event: object) -> None:
        super().on_event(node, event)
        if isinstance(event, Delivered):
            self.banks[node.node_id].delivered(event.data)
        elif isinstance(event, SnapshotDone):
            self.parts.setdefault(event.snapshot_id, {})[node.node_id] = event.to_json()

    def snapshot_summary(self) -> dict[str, Any]:
        names = [m.name for m in self.members]
        total = self.initial * len(names)
        problems: list[str] = []
        money: dict[str, int] = {}
        for sid in self.started:
            parts = self.parts.get(sid, {})
            missing = sorted(set(self.correct()) - set(parts))
            if missing:
                problems.append(f"snapshot {sid}: no result from {missing}")
                continue
            problems += [f"snapshot {sid}: {p}" for p in check_cut(parts)]
            if not self.crashed:  # a crashed member's money is gone with it
                found, bank_problems = check_bank(parts, total=total)
                money[str(sid)] = found
                problems += [f"snapshot {sid}: {p}" for p in bank_problems]
        final = sum(bank.balance for bank in self.banks.values())
        if not self.crashed and final != total:
            problems.append(f"bank: the final balances hold {final}, not {total}")
        return {
            "snapshots_started": len(self.started),
            "snapshots_completed": sum(
                set(self.correct()) <= set(self.parts.get(sid, {})) for sid in self.started
            ),
            "money_per_snapshot": money,
            "total": total,
            "snapshot_violations": problems[:20],
            "snapshot_violation_count": len(problems),
        }

    def full_summary(self) -> dict[str, Any]:
        return {**self.summary(), **self.snapshot_summary()}


def _setup(sim: Simulator, nodes: int, params: Mapping[str, Any]) -> sc.Summarize:
    members = build_group(sim, nodes)
    run = SnapshotRun(sim, members, params["initial"])
    sim.on_event = run.on_event
    ids = [m.id for m in members]

    def factory_for(member: Member) -> Any:
        def factory(ctx: NodeContext) -> SnapshotNode:
            bank = Bank(me=member.id, members=ids, initial=params["initial"], rng=ctx.rng)
            run.banks[member.name] = bank
            core = IsisCore(isis_config(member, members, params), tracer=ctx.tracer, rng=ctx.rng)
            node = SnapshotNode(
                core,
                tracer=ctx.tracer,
                rng=ctx.rng,
                workload=bank.workload(total=params["initial"] * nodes),
            )

            def multicasted(msg_id: int, data: bytes, now: float) -> None:
                run.multicasted(member.name, msg_id, data, now)

            node.on_multicast = multicasted
            return node

        return factory

    for member, host in zip(members, sim.network.hosts.values(), strict=True):
        sim.add_node(member.name, host, PORT, factory_for(member))

    for s in range(min(params["senders"], nodes)):
        name = members[s].name
        for i in range(params["messages"]):

            def transfer(core: Any, now: float, name: str = name) -> None:
                data = run.banks[name].next_transfer()
                if data is not None:
                    core.multicast(data, now)  # may be held back by a snapshot

            sim.local(name, transfer, when=params["start"] + i * params["interval"])

    count = params["snapshots"]
    window = params["messages"] * params["interval"]
    for j in range(count):
        name = members[j % nodes].name
        when = (
            params["start"] + (j + 1) * params["overlap"]
            if params["overlap"] > 0
            else params["start"] + (j + 1) * window / (count + 1)
        )

        def initiate(core: Any, now: float) -> None:
            run.started.append(core.initiate_snapshot(now))

        sim.local(name, initiate, when=when)
    schedule_crashes(sim, run, params)
    return run.full_summary


SCENARIO = sc.register(
    sc.Scenario(
        name="snapshot",
        description="Chandy-Lamport snapshots of bank transfers multicast with ISIS",
        default_duration=120.0,
        params=(
            *COMMON_PARAMS,
            *sc.param_table(
                ("snapshots", sc.positive_int, 3, "snapshots to take"),
                ("initial", sc.positive_int, 1000, "units in each account at the start"),
                (
                    "overlap",
                    sc.non_negative_float,
                    0.0,
                    "if > 0, seconds between snapshot starts (they overlap)",
                ),
            ),
        ),
        setup=_setup,
    )
)
