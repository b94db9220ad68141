"""``run.json``: what a lab run was and what it produced, in the simulator's layout.

Contract: :func:`metadata` is the document ``gossamer analyze`` reads next to the traces
(``run``, ``scenario``, ``nodes``, ``params``, ``faults``, ``analysis`` hints as for a
simulated run) plus a ``lab`` block (placement, injected faults, exits, expected checks)
and a ``summary`` of the nodes' last progress lines. It reads the traces only to count
events and ``net/fault`` events.
"""

from __future__ import annotations

import math
import platform
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from gossamer._version import __version__
from gossamer.lab.hosts import Placement
from gossamer.lab.plan import Plan
from gossamer.lab.processes import Nodes
from gossamer.trace import SCHEMA_VERSION

__all__ = ["RunLog", "count_traces", "metadata"]


@dataclass(slots=True, kw_only=True)
class RunLog:
    """What happened during a run, as the stages learn it (``run.json`` reports it)."""

    out: Path
    seed: int
    run: str = ""
    launched_at: float = 0.0
    start_at: float = 0.0
    #: When each node said ``ready`` (``time.monotonic()``).
    ready_at: dict[str, float] = field(default_factory=dict)
    #: The scheduled faults performed (``gossamer.lab.inject``).
    injected: list[dict[str, Any]] = field(default_factory=list)
    #: Nodes that exited on their own, with their status.
    unexpected: dict[str, int | None] = field(default_factory=dict)
    #: How the settling after the workload went (``gossamer.lab.settle``).
    settle: dict[str, Any] = field(default_factory=dict)


def count_traces(out: Path) -> tuple[int, dict[str, int]]:
    """Events in the run's traces and injected faults by kind (``net/fault`` events)."""
    events = 0
    counts: dict[str, int] = {}
    for path in sorted(out.glob("*.jsonl")):
        with open(path, "rb") as handle:
            for line in handle:
                if not line.strip():
                    continue
                events += 1
                if b'"net"' not in line or b'"fault"' not in line:
                    continue
                try:
                    obj = orjson.loads(line)
                except orjson.JSONDecodeError:
                    continue
                if obj.get("layer") == "net" and obj.get("kind") == "fault":
                    fault = (obj.get("attrs") or {}).get("fault")
                    if isinstance(fault, str):
                        counts[fault] = counts.get(fault, 0) + 1
    return events, dict(sorted(counts.items()))


def metadata(
    the_plan: Plan,
    placement: Placement,
    nodes: Nodes,
    log: RunLog,
    *,
    killed: Sequence[str],
    wall_seconds: float,
) -> dict[str, Any]:
    """The ``run.json`` document of a finished run."""
    values = the_plan.values
    faults = the_plan.faults
    ready_at = log.ready_at
    events, fault_counts = count_traces(log.out)
    per_node = {
        node.id: {
            "sent": int(node.last.get("sent", 0) or 0),
            "delivered": int(node.last.get("delivered", 0) or 0),
            "faults": int(node.last.get("faults", 0) or 0),
            "peers": int(node.last.get("peers", 0) or 0),
            "ready_after": round(ready_at[node.id] - log.launched_at, 3)
            if node.id in ready_at
            else None,
            "exit_code": node.exit_code,
            "crashed": node.crashed,
            "done": node.done,
        }
        for node in nodes
    }
    multicast = placement.mode == "netns" and values.get("multicast") is True
    params: dict[str, Any] = dict(values)
    for section, settings in the_plan.protocol.items():
        params.update({f"{section}.{name}": value for name, value in settings.items()})
    # What gossamer.analysis.catalog.derive_params reads (as for the simulator's runs).
    params.update(
        subnets=len(placement.subnets),
        multicast="on" if multicast else "off",
        crashed=len(faults.crashes),
    )
    analysis: dict[str, float] = {"discovery.max_peers": float(values.get("max_peers") or 64)}
    if "gossip" in the_plan.services and not faults.crashes:
        # gossamer.analysis.catalog.derive_params's bound (issue 5's targets), which it
        # derives itself only for runs whose scenario is called "gossip"; with a crash
        # the tree is repaired and no bound is claimed, so gossip.depth is skipped.
        subnets = len(placement.subnets)
        analysis["gossip.max_depth"] = (
            math.ceil(math.log2(max(subnets, 1))) + 2
            if multicast
            else max(1, math.ceil(math.log2(max(len(the_plan.ids), 2))))
        )
    return {
        "run": log.run,
        "schema_version": SCHEMA_VERSION,
        "scenario": the_plan.scenario.name,
        "nodes": len(the_plan.ids),
        "seed": log.seed,
        "duration": values["duration"],
        "faults": {
            "drop": faults.drop,
            "duplicate": 0.0,
            "delay_ms": faults.delay_ms,
            "delay_rate": values["delay_rate"] if faults.delay_ms > 0 else 0.0,
            "reorder": 0.0,
            "crash": [str(c) for c in faults.crashes],
            "partition": [str(p) for p in faults.partitions],
            "restart": [str(r) for r in faults.restarts],
        },
        "params": params,
        "versions": {"gossamer": __version__, "python": platform.python_version()},
        "fault_counts": fault_counts,
        "events": events,
        "analysis": analysis,
        "lab": {
            "mode": placement.mode,
            "subnets": list(placement.subnets),
            "hosts": [
                {"id": h.id, "address": h.address, "subnet": h.subnet, "ports": h.ports}
                for h in placement.hosts
            ],
            "services": list(the_plan.services),
            "expected_checks": [
                name
                for name in the_plan.scenario.expected_checks(values)
                if not (name == "gossip.depth" and "gossip.max_depth" not in analysis)
            ],
            "start_at": log.start_at,
            "settle": log.settle,
            "injected": log.injected,
            "unexpected_exits": log.unexpected,
            "killed_after_sigterm": list(killed),
            "wall_seconds": round(wall_seconds, 3),
        },
        "summary": {
            "sent": sum(n["sent"] for n in per_node.values()),
            "delivered": sum(n["delivered"] for n in per_node.values()),
            "nodes": per_node,
        },
    }
