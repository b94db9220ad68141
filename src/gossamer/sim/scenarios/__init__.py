"""The scenario registry: named, parameterised simulations.

A scenario declares its parameters (typed, with defaults and help) and a
``setup`` that adds nodes and schedules workload and faults on a ``Simulator``.
``setup`` returns a ``summarize`` function called after the run, whose dict is
stored in ``run.json`` and printed by the demo. A protocol registers its
scenarios by adding a module to this package that calls ``register`` at import
time; every module here is imported on first use of the registry.
"""

from __future__ import annotations

import importlib
import math
import pkgutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from gossamer.errors import ConfigError
from gossamer.faults import node_at_list, partition_spec
from gossamer.params import Param, non_negative_float, positive_int, resolve
from gossamer.sim.engine import Simulator

__all__ = [
    "Param",
    "Scenario",
    "check_nodes_exist",
    "fault_params",
    "get",
    "node_at_list",
    "non_negative_float",
    "param_table",
    "partition_spec",
    "positive_int",
    "register",
    "scenarios",
    "schedule_faults",
    "subnets_param",
]

Summarize = Callable[[], dict[str, Any]]


@dataclass(frozen=True, slots=True, kw_only=True)
class Scenario:
    """A named simulation: parameters, a default duration and a setup function.

    Parameters are :class:`gossamer.params.Param`, the same as the lab's; their parsers
    for scheduled faults (``node_at_list``, ``partition_spec``) come from
    :mod:`gossamer.faults`, the one grammar of ``NODE@SECONDS`` and ``A,B@FROM-TO``.
    """

    name: str
    description: str
    params: tuple[Param, ...]
    default_duration: float
    setup: Callable[[Simulator, int, Mapping[str, Any]], Summarize]
    #: Nodes per subnet when ``--param subnets`` is not given (0: one subnet for all):
    #: broadcast and multicast cost grows with a subnet's size squared, so a scenario
    #: that broadcasts keeps its subnets bounded and its cost linear in the node count.
    lan: int = 0

    def subnet_count(self, nodes: int, params: Mapping[str, Any]) -> int:
        """The subnets of a run of ``nodes``: the ``subnets`` parameter if given (at most
        one per node), else one per ``lan`` nodes."""
        given = params.get("subnets")
        if given is None:
            return math.ceil(nodes / self.lan) if self.lan else 1
        return max(1, min(int(given), nodes))

    def parse_params(self, raw: Mapping[str, str]) -> dict[str, Any]:
        """Typed parameter values: defaults overridden by ``raw``. One-line ``ConfigError``
        naming the parameter for an unknown name or a bad value."""
        return resolve(self.params, raw, owner=f"scenario {self.name}")


_REGISTRY: dict[str, Scenario] = {}
_loaded = False


def register(scenario: Scenario) -> Scenario:
    """Add a scenario to the registry (module import time)."""
    if scenario.name in _REGISTRY:
        raise ConfigError(f"scenario {scenario.name!r} is registered twice")
    _REGISTRY[scenario.name] = scenario
    return scenario


def _load() -> None:
    global _loaded  # noqa: PLW0603 - a one-time lazy import guard
    if not _loaded:
        _loaded = True
        for module in sorted(m.name for m in pkgutil.iter_modules(__path__)):
            importlib.import_module(f"{__name__}.{module}")


def scenarios() -> list[Scenario]:
    """Every registered scenario, by name."""
    _load()
    return [_REGISTRY[name] for name in sorted(_REGISTRY)]


def get(name: str) -> Scenario:
    """The scenario called ``name``; a one-line ``ConfigError`` listing the known ones otherwise."""
    _load()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ConfigError(
            f"unknown scenario {name!r} (known: {', '.join(sorted(_REGISTRY))})"
        ) from None


# -- checks shared by scenarios ------------------------------------------------


def check_nodes_exist(sim: Simulator, names: list[str], what: str) -> None:
    """One-line ``ConfigError`` when a parameter names a node the scenario did not create."""
    for name in names:
        if name not in sim.nodes:
            raise ConfigError(
                f"{what} names unknown node {name!r} (nodes are n0..n{len(sim.nodes) - 1})"
            )


def param_table(*rows: tuple[str, Callable[[str], Any], Any, str]) -> tuple[Param, ...]:
    """Parameters from ``(name, parse, default, help)`` rows, for scenarios with many."""
    return tuple(Param(name=n, parse=parse, default=d, help=h) for n, parse, d, h in rows)


def subnets_param(lan: int = 0) -> Param:
    """The ``subnets`` parameter; its default is "auto": one subnet per ``lan`` nodes
    (``Scenario.lan``), or one subnet when ``lan`` is 0."""
    return Param(
        name="subnets",
        parse=positive_int,
        default=None,
        shown=f"one per {lan} nodes" if lan else "1",
        help="subnets (broadcast and multicast domains) the nodes are spread over",
    )


def fault_params(
    *, crash: str = "crash nodes", restart: bool = True, more: tuple[Param, ...] = ()
) -> tuple[Param, ...]:
    """The ``crash``, ``restart`` (unless ``restart`` is false) and ``partition``
    parameters, as ``schedule_faults`` applies them; ``crash`` is its help text, and
    ``more`` are a scenario's own fault parameters, listed before ``partition``."""
    return (
        Param(
            name="crash",
            parse=node_at_list,
            default=[],
            shown="none",
            help=f"NODE@SECONDS[,...]: {crash}",
        ),
        *(
            [
                Param(
                    name="restart",
                    parse=node_at_list,
                    default=[],
                    shown="none",
                    help="NODE@SECONDS[,...]: restart crashed nodes with fresh state",
                )
            ]
            if restart
            else []
        ),
        *more,
        Param(
            name="partition",
            parse=partition_spec,
            default=None,
            shown="none",
            help="NODE,NODE@FROM-TO: cut these nodes off from the rest",
        ),
    )


def schedule_faults(
    sim: Simulator,
    params: Mapping[str, Any],
    *,
    crash: Callable[[str, float], None] | None = None,
) -> None:
    """Schedule the ``crash``, ``restart`` and ``partition`` parameters (``fault_params``)
    on ``sim``; a one-line ``ConfigError`` if one names a node that does not exist.
    ``crash`` replaces ``sim.crash`` (``StreamNetwork.crash`` also resets connections)."""
    for what in ("crash", "restart"):
        items = params.get(what, [])
        check_nodes_exist(sim, [node for node, _ in items], what)
        schedule = (crash or sim.crash) if what == "crash" else sim.restart
        for node_id, when in items:
            schedule(node_id, when)
    if params.get("partition") is not None:
        isolated, start, end = params["partition"]
        check_nodes_exist(sim, isolated, "partition")
        sim.partition(isolated, start, end)
