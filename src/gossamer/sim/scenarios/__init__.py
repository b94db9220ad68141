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
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from gossamer.errors import ConfigError
from gossamer.sim.engine import Simulator

__all__ = [
    "Param",
    "Scenario",
    "fault_params",
    "get",
    "node_at_list",
    "param_table",
    "partition_spec",
    "register",
    "scenarios",
    "schedule_faults",
    "subnets_param",
]

Summarize = Callable[[], dict[str, Any]]


@dataclass(frozen=True, slots=True, kw_only=True)
class Param:
    """One scenario parameter: parsed from its ``--param KEY=VALUE`` text."""

    name: str
    parse: Callable[[str], Any]
    default: Any
    help: str
    #: How the default is shown in ``gossamer sim --list``.
    shown: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Scenario:
    """A named simulation: parameters, a default duration and a setup function."""

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
        for an unknown name or an unparsable value."""
        known = {p.name: p for p in self.params}
        for name in raw:
            if name not in known:
                names = ", ".join(known) or "none"
                raise ConfigError(
                    f"unknown parameter {name!r} for scenario {self.name!r} (known: {names})"
                )
        values: dict[str, Any] = {}
        for param in self.params:
            if param.name in raw:
                try:
                    values[param.name] = param.parse(raw[param.name])
                except (ValueError, ConfigError) as exc:
                    reason = exc.reason if isinstance(exc, ConfigError) else str(exc)
                    raise ConfigError(f"bad value for parameter {param.name!r}: {reason}") from None
            else:
                values[param.name] = param.default
        return values


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


# -- parameter parsers shared by scenarios ------------------------------------

_NODE_AT = re.compile(r"^(?P<node>[A-Za-z0-9_.:-]+)@(?P<t>\d+(\.\d+)?)$")
_PARTITION = re.compile(
    r"^(?P<nodes>[A-Za-z0-9_.:,-]+)@(?P<start>\d+(\.\d+)?)-(?P<end>\d+(\.\d+)?)$"
)


def positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise ValueError(f"{value} is not a positive integer")
    return value


def non_negative_float(text: str) -> float:
    value = float(text)
    if not value >= 0:  # also rejects NaN
        raise ValueError(f"{text} is not a non-negative number")
    return value


def node_at_list(text: str) -> list[tuple[str, float]]:
    """``n3@5,n4@7.5`` -> ``[("n3", 5.0), ("n4", 7.5)]``."""
    items = []
    for part in text.split(","):
        match = _NODE_AT.match(part.strip())
        if match is None:
            raise ValueError(f"{part!r} is not NODE@SECONDS")
        items.append((match["node"], float(match["t"])))
    return items


def partition_spec(text: str) -> tuple[list[str], float, float]:
    """``n1,n2@5-10`` -> the nodes cut off from the rest from 5 s to 10 s."""
    match = _PARTITION.match(text.strip())
    if match is None:
        raise ValueError(f"{text!r} is not NODE,NODE@FROM-TO")
    start, end = float(match["start"]), float(match["end"])
    if end <= start:
        raise ValueError("a partition must end after it starts")
    return match["nodes"].split(","), start, end


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


def schedule_faults(sim: Simulator, params: Mapping[str, Any]) -> None:
    """Schedule the ``crash``, ``restart`` and ``partition`` parameters (``fault_params``)
    on ``sim``; a one-line ``ConfigError`` if one names a node that does not exist."""
    for what in ("crash", "restart"):
        items = params.get(what, [])
        check_nodes_exist(sim, [node for node, _ in items], what)
        schedule = sim.crash if what == "crash" else sim.restart
        for node_id, when in items:
            schedule(node_id, when)
    if params.get("partition") is not None:
        isolated, start, end = params["partition"]
        check_nodes_exist(sim, isolated, "partition")
        sim.partition(isolated, start, end)
