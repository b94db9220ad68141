"""Scenario ``isis_views``: ISIS total order on agreed views (``gossamer.proto.group``)
under crashes, joins, restarts, partitions and network faults, checked for virtual
synchrony (``docs/cluster.md``).

Nodes ``n0`` .. ``n<N-1>`` run ``GroupCore`` on UDP port 7400. The nodes named by
``join=NODE@SECONDS`` start late, as joiners; the others found the group (view 1). Every
live member of the group multicasts a payload naming itself every ``interval`` seconds
until ``stop`` (from then on the run is quiet, and every check, validity too, applies).
Around the cores the scenario plays:

- the **failure detector**, as in scenario ``views``: an oracle ``detect`` seconds late
  (a crash suspected by every live node, a partition by each side of the other, a start or
  a heal reported with ``join_request``);
- the **application**: its state is the count of the messages it delivered and a digest
  chained over them (``gossamer.proto.isis.vsync.after``), handed to joiners;
- a node told it is ``Excluded`` restarts as a new incarnation after ``rejoin`` seconds.

The summary runs every check of ``gossamer.proto.isis.vsync`` and those of
``gossamer.proto.views.checks`` but the state check (``violations``), and reports the
views, the messages multicast and delivered, withdrawn and deferred ones, the Data of
closed views dropped (``stale_data``), and whether the live members converged.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gossamer.errors import LocalProtocolError
from gossamer.params import boolean
from gossamer.proto.group import GroupCore
from gossamer.proto.isis import Delivered
from gossamer.proto.isis.vsync import MemberLog, check_all, decode_state, encode_state
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

PORT = 7400


class GroupRun(ViewsRun):
    """The scenario's bookkeeping: each incarnation's log, and the layers around it (the
    failure detector is scenario ``views``'s)."""

    def __init__(self, sim: Simulator, params: Mapping[str, Any]) -> None:
        super().__init__(sim, params)
        self.logs: dict[MemberKey, MemberLog] = {}
        self.refused = 0  # multicasts asked of a node not (yet) in the group

    def log(self, node: SimNode) -> MemberLog:
        return self.logs.setdefault((node.node_id, node.incarnation), MemberLog())

    def on_event(self, node: SimNode, event: object) -> None:
        log = self.log(node)
        if isinstance(event, Delivered):
            log.delivered(event.data.decode())
        elif isinstance(event, ViewInstalled):
            given = decode_state(event.state) if event.state is not None else None
            log.installed(event.view.id, given)
            key = (node.node_id, node.incarnation)
            self.installs.setdefault(key, []).append(
                Installed.of(event.view, event.agreed_by, None)
            )
            self.last_install = self.sim.now
        elif isinstance(event, StateNeeded):
            view_id, state = event.view_id, encode_state(log.state)

            def provide(core: Any, now: float) -> None:
                core.provide_state(view_id, state, now)

            self.sim.local(node.node_id, provide)
        elif isinstance(event, Excluded):
            self.restart_excluded(node)

    # -- the workload ----------------------------------------------------------------

    def send(self, node_id: str, when: float) -> None:
        """Multicast from ``node_id`` every ``interval`` from ``when`` until ``stop``."""

        def send(core: Any, now: float) -> None:
            node = self.sim.nodes[node_id]
            log = self.log(node)
            payload = f"{node_id}#{node.incarnation}:{len(log.multicast) + 1}"
            try:
                core.multicast(payload.encode(), now)
            except LocalProtocolError:
                self.refused += 1  # a joiner not admitted yet
            else:
                log.multicast.append(payload)

        t = when
        while t < self.params["stop"]:
            self.sim.local(node_id, send, when=t)
            t += self.params["interval"]

    # -- summary ---------------------------------------------------------------------

    def live(self) -> list[MemberKey]:
        return [
            (n.node_id, n.incarnation)
            for n in self.sim.nodes.values()
            if isinstance(n.core, GroupCore) and not n.core.excluded
        ]

    def summary(self) -> dict[str, Any]:
        live = self.live()
        stuck = check_converged(self.installs, live)
        converged = not stuck
        # Validity needs a quiet end in one view of the live members.
        # The views' own checks but ``check_state``: the state here is the application's,
        # which ``check_cut_state`` checks.
        violations = (
            check_agreement(self.installs)
            + check_sequences(self.installs)
            + check_majority(self.installs)
            + check_all(self.logs, live if converged else None)
        )
        cores = [n.core for n in self.sim.nodes.values() if isinstance(n.core, GroupCore)]
        return {
            "violations": violations[:20],
            "violation_count": len(violations),
            "converged": converged,
            "not_converged": stuck[:10],
            "views_installed": max((r.id for s in self.installs.values() for r in s), default=0),
            "live": [f"{n}#{i}" for n, i in sorted(live)],
            "multicast": sum(len(log.multicast) for log in self.logs.values()),
            "delivered": {
                f"{n}#{i}": log.state[0] for (n, i), log in sorted(self.logs.items()) if log.views
            },
            "withdrawn": sum(c.isis.counters.withdrawn for c in cores if c.isis is not None),
            "deferred": sum(c.isis.counters.deferred for c in cores if c.isis is not None),
            "stale_data": sum(c.isis.counters.stale_data for c in cores if c.isis is not None),
            "refused": self.refused,
            "excluded": self.excluded,
            "last_install_s": round(self.last_install, 6),
        }


def _setup(sim: Simulator, nodes: int, params: Mapping[str, Any]) -> sc.Summarize:
    run = GroupRun(sim, params)
    sim.on_event = run.on_event
    sim.keep_events = False
    tunables = {
        name: params[name]
        for name in ("retransmit_initial", "retransmit_max", "batch_delay", "batch_turn")
    }

    def core(config: ViewsConfig, ctx: NodeContext) -> GroupCore:
        return GroupCore(config, isis=tunables, tracer=ctx.tracer, rng=ctx.rng, now=ctx.now)

    late = add_members(sim, run, nodes, params, port=PORT, core=core, scenario="isis_views")
    for name in sim.nodes:
        run.send(name, late.get(name, 0.0) + params["start"])
    return run.summary


_SECONDS = sc.non_negative_float

SCENARIO = sc.register(
    sc.Scenario(
        name="isis_views",
        description="ISIS on agreed views: virtual synchrony under crashes, joins, restarts",
        default_duration=30.0,
        params=membership_params(
            ("interval", _SECONDS, 0.05, "seconds between one member's multicasts"),
            ("start", _SECONDS, 0.1, "seconds from a node's start to its first multicast"),
            ("stop", _SECONDS, 15.0, "when every member stops multicasting"),
            ("retransmit_initial", _SECONDS, 0.2, "ISIS: the timeout before a round trip"),
            ("retransmit_max", _SECONDS, 4.0, "ISIS: the largest retransmission interval"),
            ("batch_delay", _SECONDS, 0.0, "ISIS: seconds a batch may wait (0: off)"),
            ("batch_turn", boolean, False,
             "on|off, ISIS: a batch leaves at the instant it was filled (excludes batch_delay)"),
        ),
        setup=_setup,
    )
)
