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
  chained over them (``gossamer.proto.group.checks.after``), handed to joiners;
- a node told it is ``Excluded`` restarts as a new incarnation after ``rejoin`` seconds.

The summary runs every check of ``gossamer.proto.group.checks`` and those of
``gossamer.proto.views.checks`` but the state check (``violations``), and reports the
views, the messages multicast and delivered, withdrawn and deferred ones, and whether
the live members converged.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gossamer.errors import ConfigError, LocalProtocolError
from gossamer.proto.group import GroupCore
from gossamer.proto.group.checks import MemberLog, check_all, decode_state, encode_state
from gossamer.proto.isis import Delivered
from gossamer.proto.views import Excluded, Member, StateNeeded, ViewInstalled, ViewsConfig
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

PORT = 7400


class GroupRun:
    """The scenario's bookkeeping: each incarnation's log, and the layers around it."""

    def __init__(self, sim: Simulator, params: Mapping[str, Any]) -> None:
        self.sim = sim
        self.params = params
        self.logs: dict[MemberKey, MemberLog] = {}
        self.installs: dict[MemberKey, list[Installed]] = {}
        self.excluded = 0
        self.refused = 0  # multicasts asked of a node not (yet) in the group
        self.last_install = 0.0

    def log(self, node: SimNode) -> MemberLog:
        return self.logs.setdefault((node.node_id, node.incarnation), MemberLog())

    def me(self, node: SimNode) -> Member:
        return Member(name=node.node_id, incarnation=node.incarnation, address=node.address)

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
            self.excluded += 1
            when = self.sim.now + self.params["rejoin"]
            self.sim.crash(node.node_id, self.sim.now)
            self.sim.restart(node.node_id, when)
            self.announce(node.node_id, when)

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

    # -- the failure detector (as scenario ``views``) -----------------------------------

    def suspect_later(self, observers: list[str], suspects: list[str], when: float) -> None:
        def capture() -> None:
            keys = [(n, self.sim.nodes[n].incarnation) for n in suspects]
            for observer in observers:
                for name, incarnation in keys:
                    if observer == name:
                        continue

                    def suspect(
                        core: Any, now: float, name: str = name, incarnation: int = incarnation
                    ) -> None:
                        core.suspect(name, now, incarnation=incarnation)

                    self.sim.local(observer, suspect, when=self.sim.now + self.params["detect"])

        self.sim.at(when, capture)

    def announce(self, node_id: str, when: float) -> None:
        def report() -> None:
            subject = self.sim.nodes[node_id]
            if not subject.alive:
                return
            member = self.me(subject)
            for other in self.sim.nodes:
                if other != node_id:
                    self.sim.local(other, lambda core, now: core.join_request(member, now))

        self.sim.at(when + self.params["detect"], report)

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
            "refused": self.refused,
            "excluded": self.excluded,
            "last_install_s": round(self.last_install, 6),
        }


def _setup(sim: Simulator, nodes: int, params: Mapping[str, Any]) -> sc.Summarize:
    run = GroupRun(sim, params)
    sim.on_event = run.on_event
    sim.keep_events = False
    hosts = [sim.network.add_host(f"h{i}") for i in range(nodes)]
    names = [f"n{i}" for i in range(nodes)]
    late = dict(params["join"])
    for name in late:
        if name not in names:
            raise ConfigError(f"join names unknown node {name!r} (nodes are n0..n{nodes - 1})")
    founders = tuple(
        Member(name=n, incarnation=1, address=(h.ip, PORT))
        for n, h in zip(names, hosts, strict=True)
        if n not in late
    )
    if not founders:
        raise ConfigError("the isis_views scenario needs a founder (not every node joins)")
    seeds = tuple(m.address for m in founders)
    tunables = {
        name: params[name] for name in ("retransmit_initial", "retransmit_max", "batch_delay")
    }

    def factory(ctx: NodeContext) -> GroupCore:
        me = Member(name=ctx.node_id, incarnation=ctx.incarnation, address=(ctx.host.ip, PORT))
        founding = ctx.incarnation == 1 and ctx.node_id not in late
        config = ViewsConfig(
            me=me, initial=founders if founding else (), seeds=seeds, retry=params["retry"]
        )
        return GroupCore(config, isis=tunables, tracer=ctx.tracer, rng=ctx.rng, now=ctx.now)

    for name, host in zip(names, hosts, strict=True):
        sim.add_node(name, host, PORT, factory, start=late.get(name, 0.0))
        run.send(name, late.get(name, 0.0) + params["start"])
    for name, when in late.items():
        run.announce(name, when)

    def crash(node_id: str, when: float) -> None:
        run.suspect_later([n for n in names if n != node_id], [node_id], when)
        sim.crash(node_id, when)

    sc.schedule_faults(sim, params, crash=crash)
    for name, when in params["restart"]:
        run.announce(name, when)
    if params["partition"] is not None:
        isolated, start, end = params["partition"]
        rest = [n for n in names if n not in isolated]
        run.suspect_later(isolated, rest, start)
        run.suspect_later(rest, isolated, start)
        if end is not None:
            for name in names:
                run.announce(name, end)
    return run.summary


_SECONDS = sc.non_negative_float

SCENARIO = sc.register(
    sc.Scenario(
        name="isis_views",
        description="ISIS on agreed views: virtual synchrony under crashes, joins, restarts",
        default_duration=30.0,
        params=(
            *sc.param_table(
                ("retry", _SECONDS, 0.1, "seconds between views retransmissions"),
                ("detect", _SECONDS, 0.5, "seconds until a crash, start or cut is reported"),
                ("rejoin", _SECONDS, 0.2, "seconds an excluded node takes to restart"),
                ("interval", _SECONDS, 0.05, "seconds between one member's multicasts"),
                ("start", _SECONDS, 0.1, "seconds from a node's start to its first multicast"),
                ("stop", _SECONDS, 15.0, "when every member stops multicasting"),
                ("retransmit_initial", _SECONDS, 0.2, "ISIS: the timeout before a round trip"),
                ("retransmit_max", _SECONDS, 4.0, "ISIS: the largest retransmission interval"),
                ("batch_delay", _SECONDS, 0.0, "ISIS: seconds a batch may wait (0: off)"),
            ),
            sc.Param(
                name="join",
                parse=sc.node_at_list,
                default=[],
                shown="none",
                help="NODE@SECONDS[,...]: nodes that start late and join",
            ),
            *sc.fault_params(),
        ),
        setup=_setup,
    )
)
