"""Scenario ``snapshot_views``: Chandy–Lamport snapshots of a bank on a group with agreed
views (``gossamer.proto.snapshot_group``) under crashes, joins, restarts, partitions and
network faults.

Nodes ``n0`` .. ``n<N-1>`` run ``SnapshotGroup`` on UDP port 7500, with the failure
detector, the joins, restarts and exclusions of scenario ``isis_views``. Each member
opens an account of ``initial`` units when it first has a view (a restarted or rejoining
process is a new member, with a new account), and until ``stop``:

- every ``interval`` seconds transfers a random amount to a random member of its view;
- every ``every`` seconds starts a snapshot (member ``n<i>`` ``i * every / N`` seconds
  after the others, so that the members take turns), unless its view is changing.

The summary sorts every snapshot started: **complete** (every member of its view
recorded its part), **abandoned** (a view change ended it first, at some member), or
**cut short** (the members missing never got to say: they crashed or were excluded),
or, when the run does not end quiet, **unfinished**.
A complete snapshot must be a consistent cut (``check_cut``, on the view's own traffic),
and every complete snapshot of one view must hold the same money: the founders' view
``N x initial`` (counted over its founders), and in the last view, at a quiet end, what
the live members' accounts hold. Any other snapshot is a violation (``no result``). The
run is ``converged`` when it ends quiet: every live member in one view of exactly the
live members, with nothing in flight and no snapshot under way. The
views' own safety checks run too; the total order itself is scenario ``isis_views``'s
to check.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

from gossamer.errors import LocalProtocolError
from gossamer.proto.isis import Delivered
from gossamer.proto.snapshot import Bank, SnapshotDone, Workload, check_bank, check_cut
from gossamer.proto.snapshot_group import SnapshotAbandoned, SnapshotGroup
from gossamer.proto.views import Excluded, StateNeeded, ViewInstalled, ViewsConfig
from gossamer.proto.views.checks import (
    Installed,
    check_agreement,
    check_converged,
    check_majority,
    check_sequences,
)
from gossamer.proto.views.model import MemberKey
from gossamer.sim import scenarios as sc
from gossamer.sim.engine import NodeContext, SimNode, Simulator
from gossamer.sim.scenarios.views import ViewsRun, add_members, membership_params

PORT = 7500


class BankRun(ViewsRun):
    """The banks, the snapshots' parts and the views they belong to."""

    def __init__(self, sim: Simulator, params: Mapping[str, Any]) -> None:
        super().__init__(sim, params)
        self.banks: dict[MemberKey, Bank] = {}
        self.members: dict[int, set[str]] = {}  # view id -> its members' ISIS names
        self.founders = 0
        self.started: dict[int, int] = {}  # snapshot id -> its view
        self.parts: dict[int, dict[str, dict[str, Any]]] = {}
        self.abandoned: set[int] = set()
        self.left: set[str] = set()  # ISIS names of incarnations that crashed or left

    def on_event(self, node: SimNode, event: object) -> None:
        key = (node.node_id, node.incarnation)
        core = node.core
        assert isinstance(core, SnapshotGroup)
        if isinstance(event, Delivered):
            self.banks[key].delivered(event.data, event.sender_id)
        elif isinstance(event, ViewInstalled):
            self.installs.setdefault(key, []).append(
                Installed.of(event.view, event.agreed_by, None)
            )
            self.last_install = self.sim.now
            self.members[event.view.id] = {f"{m.name}#{m.incarnation}" for m in event.view.members}
            self.banks[key].view_changed(core.member_ids(event.view))
        elif isinstance(event, SnapshotDone):
            self.parts.setdefault(event.snapshot_id, {})[event.node] = event.to_json()
        elif isinstance(event, SnapshotAbandoned):
            self.abandoned.add(event.snapshot_id)
        elif isinstance(event, StateNeeded):
            view_id = event.view_id

            def provide(core: Any, now: float) -> None:
                core.provide_state(view_id, b"", now)  # accounts are private: no state

            self.sim.local(node.node_id, provide)
        elif isinstance(event, Excluded):
            self.left.add(f"{node.node_id}#{node.incarnation}")
            self.restart_excluded(node)

    # -- the workload --------------------------------------------------------------------

    def transfers(self, node_id: str, when: float) -> None:
        def transfer(core: Any, now: float) -> None:
            bank = self.banks.get((node_id, self.sim.nodes[node_id].incarnation))
            data = bank.next_transfer() if bank is not None else None
            if data is not None:
                # Excluded meanwhile (``LocalProtocolError``): the money leaves with it.
                with contextlib.suppress(LocalProtocolError):
                    core.multicast(data, now)

        self._every(node_id, when, self.params["interval"], transfer)

    def snapshots(self, node_id: str, when: float) -> None:
        def initiate(core: Any, now: float) -> None:
            sid = core.initiate_snapshot(now)
            if sid is not None:
                self.started[sid] = core.view.id

        self._every(node_id, when, self.params["every"], initiate)

    def _every(self, node_id: str, when: float, step: float, action: Any) -> None:
        t = when
        while step > 0 and t < self.params["stop"]:
            self.sim.local(node_id, action, when=t)
            t += step

    # -- summary ---------------------------------------------------------------------

    def live(self) -> list[MemberKey]:
        return [
            (n.node_id, n.incarnation)
            for n in self.sim.nodes.values()
            if isinstance(n.core, SnapshotGroup) and n.alive and not n.core.excluded
        ]

    def busy(self) -> list[str]:
        """The live members with messages or snapshots still under way."""
        busy = []
        for n in self.sim.nodes.values():
            core = n.core
            if isinstance(core, SnapshotGroup) and n.alive and not core.excluded:
                isis, node = core.isis, core.node
                snapshots = node.snapshot.in_progress if node is not None else []
                if (isis is not None and not isis.quiescent) or snapshots:
                    busy.append(f"{n.node_id}#{n.incarnation}")
        return busy

    def summary(self) -> dict[str, Any]:
        live = self.live()
        # A quiet end in one view: nothing in flight, so the accounts hold all the money.
        stuck = check_converged(self.installs, live) + [f"{b} busy" for b in self.busy()]
        violations = (
            check_agreement(self.installs)
            + check_sequences(self.installs)
            + check_majority(self.installs)
        )
        live_names = {f"{n}#{i}" for n, i in live}
        gone = {
            f"{n.node_id}#{i}"
            for n in self.sim.nodes.values()
            for i in range(1, n.incarnation + 1)
            if f"{n.node_id}#{i}" not in live_names
        }
        money: dict[int, set[int]] = {}
        counts = {"complete": 0, "abandoned": 0, "cut_short": 0, "unfinished": 0}
        for sid, view_id in sorted(self.started.items()):
            parts = self.parts.get(sid, {})
            missing = self.members[view_id] - set(parts)
            if sid in self.abandoned:
                counts["abandoned"] += 1
            elif missing and missing <= gone:
                counts["cut_short"] += 1
            elif missing and stuck:
                counts["unfinished"] += 1  # under way at the end
            elif missing:
                violations.append(f"snapshot {sid} of view {view_id}: no result from {missing}")
            else:
                counts["complete"] += 1
                violations += [f"snapshot {sid}: {p}" for p in check_cut(parts)]
                money.setdefault(view_id, set()).add(check_bank(parts, total=0)[0])
        for view_id, amounts in sorted(money.items()):
            if len(amounts) > 1:
                violations.append(f"view {view_id}: its snapshots found {sorted(amounts)}")
        expected = self.founders * self.params["initial"]
        if money.get(1, {expected}) != {expected}:
            violations.append(f"view 1: its snapshots found {sorted(money[1])}, not {expected}")
        final = sum(self.banks[k].balance for k in live if k in self.banks)  # admitted ones
        last = max((r.id for s in self.installs.values() for r in s), default=0)
        if not stuck and money.get(last, {final}) != {final}:
            violations.append(f"view {last}: the accounts end with {final}, the snapshots "
                              f"found {sorted(money[last])}")  # fmt: skip
        return {
            "violations": violations[:20],
            "violation_count": len(violations),
            "converged": not stuck,
            "not_converged": stuck[:10],
            "views_installed": last,
            "live": [f"{n}#{i}" for n, i in sorted(live)],
            "snapshots_started": len(self.started),
            **counts,
            "views_with_complete_snapshots": len(money),
            "money_per_view": {str(v): sorted(f) for v, f in sorted(money.items())},
            "final_money": final,
            "refunds": sum(b.refunds for b in self.banks.values()),
            "stale_markers": sum(
                n.core.counters["stale_markers"]
                for n in self.sim.nodes.values()
                if isinstance(n.core, SnapshotGroup)
            ),
            "excluded": self.excluded,
        }


def _setup(sim: Simulator, nodes: int, params: Mapping[str, Any]) -> sc.Summarize:
    run = BankRun(sim, params)
    sim.on_event = run.on_event
    sim.keep_events = False
    tunables = {name: params[name] for name in ("retransmit_initial", "retransmit_max")}

    def core(config: ViewsConfig, ctx: NodeContext) -> SnapshotGroup:
        key = (ctx.node_id, ctx.incarnation)

        def workload(me: int) -> Workload:
            bank = Bank(me=me, members=[me], initial=params["initial"], rng=ctx.rng)
            run.banks[key] = bank
            return bank.workload()

        return SnapshotGroup(
            config, isis=tunables, tracer=ctx.tracer, rng=ctx.rng, now=ctx.now, workload=workload
        )

    late = add_members(sim, run, nodes, params, port=PORT, core=core, scenario="snapshot_views")
    run.founders = nodes - len(late)
    for i, name in enumerate(sim.nodes):
        start = late.get(name, 0.0) + params["start"]
        run.transfers(name, start)
        run.snapshots(name, start + i * params["every"] / nodes)
    return run.summary


_SECONDS = sc.non_negative_float

SCENARIO = sc.register(
    sc.Scenario(
        name="snapshot_views",
        description="Chandy-Lamport snapshots of a bank on agreed views, per view",
        default_duration=30.0,
        params=membership_params(
            ("interval", _SECONDS, 0.05, "seconds between one member's transfers"),
            ("every", _SECONDS, 1.0, "seconds between one member's snapshots (0: none)"),
            ("initial", sc.positive_int, 1000, "units in each new account"),
            ("start", _SECONDS, 0.1, "seconds from a node's start to its first transfer"),
            ("stop", _SECONDS, 15.0, "when every member stops transferring and snapshotting"),
            ("retransmit_initial", _SECONDS, 0.2, "ISIS: the timeout before a round trip"),
            ("retransmit_max", _SECONDS, 4.0, "ISIS: the largest retransmission interval"),
        ),
        setup=_setup,
    )
)
