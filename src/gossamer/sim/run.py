"""Run a registered scenario and write its traces: ``<out>/<node>.jsonl`` and ``run.json``.

The output is a pure function of the request: no wall-clock time, host name or
random state that is not derived from the seed ends up in it, so two runs with
the same arguments give byte-identical files.
"""

from __future__ import annotations

import math
import platform
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from gossamer._version import __version__
from gossamer.errors import ConfigError
from gossamer.faults import FaultPlan
from gossamer.sim import scenarios
from gossamer.sim.engine import Simulator
from gossamer.sim.network import Network
from gossamer.trace.jsonl import encode_event
from gossamer.trace.schema import SCHEMA_VERSION, TraceEvent

__all__ = ["RunResult", "SimRequest", "SpoolSink", "TraceSpool", "replay_command", "run_simulation"]

MAX_NODES = 100_000


class TraceSpool:
    """Holds the encoded events of every node, up to a budget for them all, and appends
    them to the nodes' files (``<out>/<node>.jsonl``) when that is reached and at the end.

    The budget is ``BUDGET`` bytes or ``PER_NODE`` bytes per node, whichever is more: a
    flush opens every node's file once, so the budget grows with the nodes to keep the
    bytes written per open, and hence the cost per event, the same at any size, while
    memory stays a few KB per node. Files are opened only to append, so a simulation of
    thousands of nodes never holds thousands of open file descriptors. A file's content
    does not depend on when it is flushed.
    """

    BUDGET = 4 * 1024 * 1024
    PER_NODE = 8 * 1024

    def __init__(self, out: Path, budget: int | None = None) -> None:
        self.out = out
        self.budget = self.BUDGET if budget is None else budget
        self.pending = 0
        self.sinks: dict[str, SpoolSink] = {}

    def sink(self, node_id: str) -> SpoolSink:
        """The sink of node ``node_id`` (a new one replaces any earlier one)."""
        sink = self.sinks[node_id] = SpoolSink(self.out / f"{node_id}.jsonl", self)
        self.budget = max(self.budget, self.PER_NODE * len(self.sinks))
        return sink

    @property
    def events(self) -> int:
        return sum(sink.count for sink in self.sinks.values())

    def flush(self) -> None:
        """Append everything pending; every node's file exists afterwards."""
        for sink in self.sinks.values():
            sink.flush()
        self.pending = 0


class SpoolSink:
    """One node's share of a ``TraceSpool``: its encoded events not yet written."""

    __slots__ = ("_created", "_pending", "_spool", "count", "path")

    def __init__(self, path: Path, spool: TraceSpool) -> None:
        self.path = path
        self.count = 0
        self._spool = spool
        self._pending: list[bytes] = []
        self._created = False  # the file is created (truncated) on the first flush

    def emit(self, event: TraceEvent) -> None:
        line = encode_event(event)
        self._pending.append(line)
        self.count += 1
        spool = self._spool
        spool.pending += len(line)
        if spool.pending >= spool.budget:
            spool.flush()

    def flush(self) -> None:
        """Write what is pending; the first call creates the file even if nothing is."""
        if self._pending or not self._created:
            with open(self.path, "ab" if self._created else "wb") as handle:
                handle.write(b"".join(self._pending))
            self._created = True
            self._pending.clear()


@dataclass(frozen=True, slots=True, kw_only=True)
class SimRequest:
    """Everything that determines a simulated run."""

    scenario: str
    nodes: int
    seed: int
    out: Path
    faults: FaultPlan = field(default_factory=FaultPlan)
    duration: float | None = None
    params: Mapping[str, str] = field(default_factory=dict)
    run: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class RunResult:
    """What a run produced: where, how much, which faults, and the scenario's summary."""

    request: SimRequest
    run_dir: Path
    run: str
    events: int
    fault_counts: dict[str, int]
    stats: dict[str, int]
    summary: dict[str, Any]
    metadata: dict[str, Any]


def run_simulation(request: SimRequest) -> RunResult:
    """Run the requested scenario to its duration and write the run directory.

    Raises ``ConfigError`` (one line) for an unknown scenario or bad parameters,
    before anything is written.
    """
    scenario = scenarios.get(request.scenario)
    params = scenario.parse_params(request.params)
    if not 1 <= request.nodes <= MAX_NODES:
        raise ConfigError(f"--nodes must be between 1 and {MAX_NODES}", nodes=request.nodes)
    duration = scenario.default_duration if request.duration is None else request.duration
    if not duration > 0:
        raise ConfigError("--duration must be a positive number of seconds", duration=duration)
    run_id = request.run or f"{scenario.name}-n{request.nodes}-s{request.seed}"

    out = request.out
    spool = TraceSpool(out)
    subnets = scenario.subnet_count(request.nodes, params)
    if params.get("subnets", 0) is None:
        params["subnets"] = subnets  # "auto", as resolved for this run
    sim = Simulator(
        seed=request.seed,
        run=run_id,
        network=Network(
            subnets=subnets, hosts_per_subnet=max(254, math.ceil(request.nodes / subnets))
        ),
        faults=request.faults,
        sink_for=spool.sink,
    )
    summarize = scenario.setup(sim, request.nodes, params)
    # Setup validated every parameter; only now touch the output directory.
    out.mkdir(parents=True, exist_ok=True)
    for stale in out.glob("*.jsonl"):
        stale.unlink()  # a previous run's nodes must not mix into this one
    sim.run(until=duration)
    spool.flush()

    summary = summarize()
    metadata: dict[str, Any] = {
        "run": run_id,
        "schema_version": SCHEMA_VERSION,
        "scenario": scenario.name,
        "nodes": request.nodes,
        "seed": request.seed,
        "duration": duration,
        "faults": {
            "drop": request.faults.drop,
            "duplicate": request.faults.duplicate,
            "delay_ms": request.faults.delay * 1000,
            "reorder": request.faults.reorder,
        },
        "params": {k: _jsonable(v) for k, v in params.items()},
        "versions": {"gossamer": __version__, "python": platform.python_version()},
        "fault_counts": dict(sorted(sim.fault_counts.items())),
        "network": dict(sorted(sim.stats.items())),
        "events": spool.events,
        "summary": summary,
    }
    (out / "run.json").write_bytes(orjson.dumps(metadata, option=orjson.OPT_INDENT_2) + b"\n")
    return RunResult(
        request=request,
        run_dir=out,
        run=run_id,
        events=metadata["events"],
        fault_counts=metadata["fault_counts"],
        stats=metadata["network"],
        summary=summary,
        metadata=metadata,
    )


def _jsonable(value: Any) -> Any:
    if isinstance(value, tuple | list):
        return [_jsonable(v) for v in value]
    return value


def replay_command(request: SimRequest) -> str:
    """The ``gossamer sim`` command line that reproduces ``request`` exactly."""
    words = [
        "gossamer",
        "sim",
        "--scenario",
        request.scenario,
        "--nodes",
        str(request.nodes),
        "--seed",
        str(request.seed),
    ]
    faults = request.faults
    for flag, value in (
        ("--drop", faults.drop),
        ("--dup", faults.duplicate),
        ("--delay", faults.delay * 1000),
        ("--reorder", faults.reorder),
    ):
        if value:
            words += [flag, f"{value:g}"]
    if request.duration is not None:
        words += ["--duration", f"{request.duration:g}"]
    for key, text in request.params.items():
        words += ["--param", f"{key}={text}"]
    if request.run is not None:
        words += ["--run", request.run]
    words += ["--out", str(request.out)]
    return shlex.join(words)
