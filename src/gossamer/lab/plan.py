"""What a lab run will do, decided before anything exists: a ``LabRequest`` becomes a ``Plan``.

Contract: :func:`plan` validates everything the user gave (scenario, host count,
parameters, fault schedule) and raises ``ConfigError`` (one line, exit 2) before any
file, namespace or process is created. A :class:`Plan` is immutable and complete; the
later stages only read it.

``--param`` takes two kinds of names: the scenario's own (``isis_rate``, see ``gossamer
lab list``) and ``SECTION.FIELD`` for any field of a protocol's core configuration
(``isis.batch_delay=0.01``, ``discovery.answer_rate=8``,
``isis.retransmit_initial=0.1``; :mod:`gossamer.daemon.protocols`), which every node of
the run gets in that section of its file.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gossamer.daemon.protocols import PROTOCOLS, plain
from gossamer.errors import ConfigError
from gossamer.faults import Crash, Partition
from gossamer.lab import hosts as hosts_mod
from gossamer.lab import scenarios as scenarios_mod
from gossamer.lab.hosts import Mode
from gossamer.lab.scenarios import FaultSchedule, Scenario, Value
from gossamer.params import Sources, overrides

__all__ = ["LabRequest", "Plan", "plan"]


@dataclass(frozen=True, slots=True, kw_only=True)
class LabRequest:
    """Everything ``gossamer lab run`` was asked to do.

    ``drop``/``delay_ms`` ``None`` and empty ``crashes``/``partitions``/``restarts`` mean
    the scenario's defaults (the demo and the cluster have faults by default); giving any
    crash, partition or restart replaces the default ones. ``mode=None`` is automatic.
    """

    scenario: str
    hosts: int | None
    out: Path
    mode: Mode | None = None
    drop: float | None = None
    delay_ms: float | None = None
    crashes: tuple[Crash, ...] = ()
    partitions: tuple[Partition, ...] = ()
    restarts: tuple[Crash, ...] = ()
    params: Mapping[str, str] = field(default_factory=dict)
    seed: int = 0
    analyze: bool = True
    startup: float | None = None  # seconds from launch to start_at (default: from hosts)


@dataclass(frozen=True, slots=True, kw_only=True)
class Plan:
    """A validated request: the scenario, its parameter values, the node ids, the faults."""

    scenario: Scenario
    values: dict[str, Value]
    ids: tuple[str, ...]
    faults: FaultSchedule
    #: ``SECTION.FIELD`` parameters: each section's protocol keys, as TOML values.
    protocol: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def duration(self) -> float:
        """Workload seconds after the common start."""
        return float(self.values["duration"])  # type: ignore[arg-type]

    @property
    def linger(self) -> float:
        """Seconds the nodes keep serving after the workload."""
        return float(self.values["linger"])  # type: ignore[arg-type]

    @property
    def settle(self) -> float:
        """Seconds the nodes may keep serving after ``linger``, until nothing is in flight."""
        return float(self.values["settle"])  # type: ignore[arg-type]

    @property
    def services(self) -> tuple[str, ...]:
        """The services that run."""
        return self.scenario.enabled(self.values)


def plan(request: LabRequest) -> Plan:
    """Validate the request: scenario, hosts, parameters and faults (``ConfigError``)."""
    scenario = scenarios_mod.get(request.scenario)
    count = scenario.default_hosts if request.hosts is None else request.hosts
    ids = hosts_mod.node_ids(count)
    if count < scenario.min_hosts:
        raise ConfigError(f"scenario {scenario.name} needs at least {scenario.min_hosts} hosts")
    own, protocol = _split(request.params)
    values = scenario.resolve(own, ids)
    defaults = scenario.faults_for(ids)
    explicit = bool(request.crashes or request.partitions or request.restarts)
    faults = FaultSchedule(
        drop=defaults.drop if request.drop is None else request.drop,
        delay_ms=defaults.delay_ms if request.delay_ms is None else request.delay_ms,
        crashes=request.crashes if explicit else defaults.crashes,
        partitions=request.partitions if explicit else defaults.partitions,
        restarts=request.restarts if explicit else defaults.restarts,
    )
    the_plan = Plan(scenario=scenario, values=values, ids=ids, faults=faults, protocol=protocol)
    faults.validate(ids, the_plan.duration, restartable=scenario.daemons)
    return the_plan


def _split(raw: Mapping[str, str]) -> tuple[dict[str, str], dict[str, dict[str, Any]]]:
    """The scenario's own parameters, and the ``SECTION.FIELD`` ones typed and checked."""
    own: dict[str, str] = {}
    texts: dict[str, dict[str, str]] = {}
    for name, text in raw.items():
        section, dot, key = name.partition(".")
        if not dot:
            own[name] = text
        elif section in PROTOCOLS:
            texts.setdefault(section, {})[key] = text
        else:
            known = ", ".join(PROTOCOLS)
            raise ConfigError(f"--param {name}={text}: no protocol {section!r} (known: {known})")
    typed: dict[str, dict[str, Any]] = {}
    for section, given in texts.items():
        protocol = PROTOCOLS[section]
        try:
            managed = dict.fromkeys(protocol.managed)
            values = overrides(protocol.config, Sources(assignments=given), fixed=managed)
        except ConfigError as exc:
            raise ConfigError(f"--param {section}.{exc.reason}") from exc
        table: dict[str, Any] = plain(values)
        try:
            protocol.settings(table, section)  # the core's own checks
        except ConfigError as exc:
            raise ConfigError(f"--param {exc.reason}") from exc
        typed[section] = table
    return own, typed
