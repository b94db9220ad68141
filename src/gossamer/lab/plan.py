"""What a lab run will do, decided before anything exists: a ``LabRequest`` becomes a ``Plan``.

Contract: :func:`plan` validates everything the user gave (scenario, host count,
parameters, fault schedule) and raises ``ConfigError`` (one line, exit 2) before any
file, namespace or process is created. A :class:`Plan` is immutable and complete; the
later stages only read it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from gossamer.errors import ConfigError
from gossamer.faults import Crash, Partition
from gossamer.lab import hosts as hosts_mod
from gossamer.lab import scenarios as scenarios_mod
from gossamer.lab.hosts import Mode
from gossamer.lab.scenarios import FaultSchedule, Scenario, Value

__all__ = ["LabRequest", "Plan", "plan"]


@dataclass(frozen=True, slots=True, kw_only=True)
class LabRequest:
    """Everything ``gossamer lab run`` was asked to do.

    ``drop``/``delay_ms`` ``None`` and empty ``crashes``/``partitions`` mean the
    scenario's defaults (only the demo has faults by default); giving any crash or
    partition replaces the demo's crash and partition. ``mode=None`` is automatic.
    """

    scenario: str
    hosts: int | None
    out: Path
    mode: Mode | None = None
    drop: float | None = None
    delay_ms: float | None = None
    crashes: tuple[Crash, ...] = ()
    partitions: tuple[Partition, ...] = ()
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

    @property
    def duration(self) -> float:
        """Workload seconds after the common start."""
        return float(self.values["duration"])  # type: ignore[arg-type]

    @property
    def linger(self) -> float:
        """Seconds the nodes keep serving after the workload."""
        return float(self.values["linger"])  # type: ignore[arg-type]

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
    values = scenario.resolve(request.params, ids)
    defaults = scenario.faults_for(ids)
    explicit = bool(request.crashes or request.partitions)
    faults = FaultSchedule(
        drop=defaults.drop if request.drop is None else request.drop,
        delay_ms=defaults.delay_ms if request.delay_ms is None else request.delay_ms,
        crashes=request.crashes if explicit else defaults.crashes,
        partitions=request.partitions if explicit else defaults.partitions,
    )
    the_plan = Plan(scenario=scenario, values=values, ids=ids, faults=faults)
    faults.validate(ids, the_plan.duration)
    return the_plan
