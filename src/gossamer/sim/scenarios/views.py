"""Scenario ``views``: agreed group membership under crashes, joins, restarts, partitions
and network faults, checked for the guarantees of ``docs/cluster.md``.

Nodes ``n0`` .. ``n<N-1>`` run ``ViewsCore`` on UDP port 7300. The nodes named by
``join=NODE@SECONDS`` start late, as joiners; the others found the group (view 1).
The layer above and the membership layer are played by the scenario:

- the **failure detector** is an oracle ``detect`` seconds late: a crash is suspected by
  every live node, a partition by each side of the other, and a node that starts (a
  joiner, a restart) or a partition that heals is reported with ``join_request`` (the
  membership layer's "peer up"); messages can still be lost, duplicated and reordered;
- the **layer above** answers ``FlushRequired`` and ``StateNeeded`` after ``flush``
  seconds; the state it hands joiners says which view it is the end of (``cut_state``);
- a node told it is ``Excluded`` stops and restarts as a new incarnation, as a real one
  must.

The summary runs every check of ``gossamer.proto.views.checks`` (``violations``; with
``converged`` true when every live incarnation ends in one view of exactly the live
incarnations) and reports the views installed, exclusions, blocked periods and when the
last view was installed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from gossamer.errors import ConfigError
from gossamer.proto.core import DatagramCore
from gossamer.proto.views import (
    Blocked,
    Excluded,
    FlushRequired,
    Member,
    StateNeeded,
    ViewInstalled,
    ViewsConfig,
    ViewsCore,
)
from gossamer.proto.views.checks import Installed, check_all, check_converged, cut_state
from gossamer.proto.views.model import MemberKey
from gossamer.sim import scenarios as sc
from gossamer.sim.engine import NodeContext, SimNode, Simulator

PORT = 7300


class ViewsRun:
    """The scenario's bookkeeping: what each incarnation installed, and the two layers
    around every core (failure detector, flush and state)."""

    def __init__(self, sim: Simulator, params: Mapping[str, Any]) -> None:
        self.sim = sim
        self.params = params
        self.installs: dict[MemberKey, list[Installed]] = {}
        self.excluded = 0
        self.blocked = 0
        self.last_install = 0.0

    def me(self, node: SimNode) -> Member:
        return Member(name=node.node_id, incarnation=node.incarnation, address=node.address)

    def on_event(self, node: SimNode, event: object) -> None:
        sim, delay = self.sim, self.params["flush"]
        key = (node.node_id, node.incarnation)
        if isinstance(event, ViewInstalled):
            self.installs.setdefault(key, []).append(
                Installed.of(event.view, event.agreed_by, event.state)
            )
            self.last_install = sim.now
        elif isinstance(event, FlushRequired):
            view_id = event.view_id

            def flush(core: Any, now: float) -> None:
                core.flush_done(view_id, now)

            sim.local(node.node_id, flush, when=sim.now + delay)
        elif isinstance(event, StateNeeded):
            state_for = event.view_id

            def provide(core: Any, now: float) -> None:
                view = core.view
                if view is not None and view.id + 1 == state_for:
                    keys = tuple(m.key for m in view.members)
                    core.provide_state(state_for, cut_state(view.id, keys), now)

            sim.local(node.node_id, provide, when=sim.now + delay)
        elif isinstance(event, Excluded):
            self.restart_excluded(node)
        elif isinstance(event, Blocked):
            self.blocked += 1

    def restart_excluded(self, node: SimNode) -> None:
        """A node told it is ``Excluded`` stops and restarts as a new incarnation after
        ``rejoin`` seconds, as a real one must (and is reported up again)."""
        self.excluded += 1
        when = self.sim.now + self.params["rejoin"]
        self.sim.crash(node.node_id, self.sim.now)
        self.sim.restart(node.node_id, when)
        self.announce(node.node_id, when)

    # -- the failure detector ------------------------------------------------------

    def suspect_later(self, observers: list[str], suspects: list[str], when: float) -> None:
        """At ``when``, the incarnations of ``suspects`` alive then are suspected by the
        ``observers`` ``detect`` seconds later (a crash: dead ones too)."""

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
        """At ``when`` + ``detect``, every other node's membership layer reports
        ``node_id`` up (``join_request`` with its incarnation of that moment)."""

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
            if isinstance(n.core, ViewsCore) and not n.core.excluded
        ]

    def summary(self) -> dict[str, Any]:
        live = self.live()
        violations = check_all(self.installs)
        stuck = check_converged(self.installs, live)
        finals = {f"{n}#{i}": seq[-1].id for (n, i), seq in self.installs.items() if seq}
        return {
            "violations": violations[:20],
            "violation_count": len(violations),
            "converged": not stuck,
            "not_converged": stuck[:10],
            "views_installed": max((r.id for s in self.installs.values() for r in s), default=0),
            "final_views": dict(sorted(finals.items())),
            "live": [f"{n}#{i}" for n, i in sorted(live)],
            "excluded": self.excluded,
            "blocked": self.blocked,
            "last_install_s": round(self.last_install, 6),
        }


def _setup(sim: Simulator, nodes: int, params: Mapping[str, Any]) -> sc.Summarize:
    run = ViewsRun(sim, params)
    sim.on_event = run.on_event
    ViewsConfig(
        me=Member(name="check", incarnation=1, address=("0.0.0.0", PORT)),
        seeds=(("0.0.0.0", PORT),),
        retry=params["retry"],
    )

    def core(config: ViewsConfig, ctx: NodeContext) -> ViewsCore:
        return ViewsCore(config, tracer=ctx.tracer, rng=ctx.rng, now=ctx.now)

    add_members(sim, run, nodes, params, port=PORT, core=core, scenario="views")
    return run.summary


def add_members(
    sim: Simulator,
    run: ViewsRun,
    nodes: int,
    params: Mapping[str, Any],
    *,
    port: int,
    core: Callable[[ViewsConfig, NodeContext], DatagramCore],
    scenario: str,
) -> dict[str, float]:
    """Nodes ``n0``.. on hosts ``h0``.. at ``port``, their cores made by ``core`` from
    their views configuration: founders, the joiners of ``params["join"]`` (returned, with
    their start times) and restarted incarnations; and the scheduled faults with the
    failure detector's oracle (``run``) reporting them."""
    hosts = [sim.network.add_host(f"h{i}") for i in range(nodes)]
    names = [f"n{i}" for i in range(nodes)]
    late = dict(params["join"])
    for name in late:
        if name not in names:
            raise ConfigError(f"join names unknown node {name!r} (nodes are n0..n{nodes - 1})")
    founders = tuple(
        Member(name=n, incarnation=1, address=(h.ip, port))
        for n, h in zip(names, hosts, strict=True)
        if n not in late
    )
    if not founders:
        raise ConfigError(
            f"the {scenario} scenario needs at least one founder (not every node joins)"
        )
    seeds = tuple(m.address for m in founders)

    def factory(ctx: NodeContext) -> DatagramCore:
        me = Member(name=ctx.node_id, incarnation=ctx.incarnation, address=(ctx.host.ip, port))
        founding = ctx.incarnation == 1 and ctx.node_id not in late
        config = ViewsConfig(
            me=me, initial=founders if founding else (), seeds=seeds, retry=params["retry"]
        )
        return core(config, ctx)

    for name, host in zip(names, hosts, strict=True):
        sim.add_node(name, host, port, factory, start=late.get(name, 0.0))
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
    return late


_SECONDS = sc.non_negative_float


def membership_params(*rows: tuple[str, Callable[[str], Any], Any, str]) -> tuple[sc.Param, ...]:
    """The parameters of a scenario built on ``add_members``: ``retry``, ``detect``,
    ``rejoin``, the scenario's own ``rows`` (``sc.param_table``), ``join`` and the faults."""
    return (
        *sc.param_table(
            ("retry", _SECONDS, 0.1, "seconds between views retransmissions"),
            ("detect", _SECONDS, 0.5, "seconds until a crash, start or cut is reported"),
            ("rejoin", _SECONDS, 0.2, "seconds an excluded node takes to restart"),
            *rows,
        ),
        sc.Param(
            name="join",
            parse=sc.node_at_list,
            default=[],
            shown="none",
            help="NODE@SECONDS[,...]: nodes that start late and join",
        ),
        *sc.fault_params(),
    )


SCENARIO = sc.register(
    sc.Scenario(
        name="views",
        description="agreed group membership: crashes, joins, restarts, partitions, checked",
        default_duration=60.0,
        params=membership_params(
            ("flush", _SECONDS, 0.01, "seconds the layer above takes to flush or give state"),
        ),
        setup=_setup,
    )
)
