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
    "get",
    "node_at_list",
    "non_negative_float",
    "partition_spec",
    "positive_int",
    "register",
    "scenarios",
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
