"""The scheduled faults the nodes cannot inject themselves: crashes, partitions, restarts.

- A crash is ``SIGKILL`` of the node plus one ``net/fault crash`` event appended to its
  trace (the node cannot write it: it is dead).
- A restart (the ``cluster`` scenario's daemons) starts a crashed node again with the
  same command and configuration, after one ``net/fault restart`` event in its trace;
  the daemon appends to its trace and rejoins as a new incarnation.
- A partition cuts the hosts' real links in network namespaces and traces
  ``partition``/``heal`` on each isolated live node. On loopback the lab apps drop the
  datagrams themselves, from their ``[[faults.partition]]`` windows, and trace them;
  daemons have no such windows, so on loopback (``freeze``) the isolated hosts' daemons
  are frozen instead (``SIGSTOP`` until the heal's ``SIGCONT``: to every other process
  the host is cut off), and the lab traces ``partition``/``heal`` on them.

Per-datagram faults (drop, delay) are the nodes' own (``[faults]``); nothing here
touches them. Contract: :func:`timeline` orders the actions (heals, then crashes, then
cuts at the same second); :class:`Injector` performs one action when told, records
it in ``injected`` (what ``run.json`` reports) and never signals a process that is not
one of the run's nodes.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from gossamer.faults import Crash, Partition
from gossamer.lab.netns import Host, Topology
from gossamer.lab.processes import Nodes
from gossamer.lab.progress import Progress
from gossamer.lab.record import RunLog
from gossamer.lab.scenarios import FaultSchedule
from gossamer.trace import JsonlSink, Tracer

__all__ = ["Action", "Injector", "Netns", "timeline", "trace_fault"]

#: A namespace placement: the topology and each node's host in it.
Netns = tuple[Topology, Mapping[str, Host]]


@dataclass(frozen=True, slots=True)
class Action:
    """One scheduled action: ``at`` seconds after the start, a crash, a cut or a heal."""

    at: float
    fault: Crash | Partition
    heal: bool = False
    restart: bool = False


def timeline(faults: FaultSchedule) -> list[Action]:
    """Every action of ``faults`` in the order it happens."""
    keyed: list[tuple[float, int, Action]] = []
    for crash in faults.crashes:
        keyed.append((crash.at, 1, Action(crash.at, crash)))
    for restart in faults.restarts:
        keyed.append((restart.at, 1, Action(restart.at, restart, restart=True)))
    for part in faults.partitions:
        keyed.append((part.start, 2, Action(part.start, part)))
        keyed.append((part.end, 0, Action(part.end, part, heal=True)))
    keyed.sort(key=lambda item: (item[0], item[1]))
    return [action for _, _, action in keyed]


def trace_fault(path: Path, *, run: str, node: str, fault: str, **attrs: str) -> float:
    """Append one ``net/fault`` event to ``path`` (O_APPEND, one write) and return its time.

    The node's own sink also appends one whole line per write, so a line the lab adds
    to a live node's trace never interleaves with the node's lines.
    """
    now = time.monotonic()
    with JsonlSink(path) as sink:
        Tracer(sink, run=run, node=node)(now, "net", "fault", attrs={"fault": fault, **attrs})
    return now


class Injector:
    """Performs the run's scheduled faults on its nodes (see the module docstring)."""

    def __init__(
        self,
        nodes: Nodes,
        log: RunLog,
        progress: Progress,
        netns: Netns | None,
        *,
        freeze: bool = False,
    ) -> None:
        self.nodes = nodes
        self.freeze = freeze and netns is None
        self.out = log.out
        self.run = log.run
        self.start_at = log.start_at
        self.progress = progress
        self.netns = netns
        #: What was done, as ``run.json``'s ``lab.injected`` lists it.
        self.injected = log.injected

    def perform(self, action: Action) -> None:
        """Do ``action`` now."""
        if isinstance(action.fault, Crash) and action.restart:
            self.restart(action.fault)
        elif isinstance(action.fault, Crash):
            self.crash(action.fault)
        else:
            self.partition(action.fault, heal=action.heal)

    def crash(self, crash: Crash) -> None:
        """SIGKILL ``crash.host`` and trace it."""
        node = self.nodes[crash.host]
        node.crashed = True
        node.kill()
        t = trace_fault(
            self.out / f"{crash.host}.jsonl", run=self.run, node=crash.host, fault="crash"
        )
        node.exit_code = node.proc.returncode
        self.progress.set_state(crash.host, "crashed")
        self.progress.injected_fault("crash")
        self.injected.append(
            {"fault": "crash", "node": crash.host, "t": t, "at": t - self.start_at}
        )
        self.progress.note(f"fault: {crash.host} crashed (SIGKILL) at +{t - self.start_at:.1f} s")

    def restart(self, restart: Crash) -> None:
        """Start the crashed ``restart.host`` again and trace it."""
        t = trace_fault(
            self.out / f"{restart.host}.jsonl", run=self.run, node=restart.host, fault="restart"
        )
        self.nodes.restart(restart.host)
        self.progress.set_state(restart.host, "starting")
        self.progress.injected_fault("restart")
        self.injected.append(
            {"fault": "restart", "node": restart.host, "t": t, "at": t - self.start_at}
        )
        self.progress.note(f"fault: {restart.host} restarted at +{t - self.start_at:.1f} s")

    def partition(self, part: Partition, *, heal: bool) -> None:
        """Cut (or heal) ``part.hosts`` from the rest and trace it."""
        if self.freeze:
            for host in part.hosts:
                node = self.nodes[host]
                if not node.crashed and node.proc.poll() is None:
                    node.proc.send_signal(signal.SIGCONT if heal else signal.SIGSTOP)
        if self.netns is not None:
            topology, hosts = self.netns
            for host in part.hosts:
                if heal:
                    topology.heal(hosts[host])
                else:
                    topology.cut(hosts[host])
        kind = "heal" if heal else "partition"
        t = time.monotonic()
        for host in part.hosts if self.netns is not None or self.freeze else ():
            # On loopback every lab app traces its own [[faults.partition]] windows.
            if self.nodes[host].crashed:
                continue  # a dead node's trace ends with its crash
            t = trace_fault(
                self.out / f"{host}.jsonl",
                run=self.run,
                node=host,
                fault=kind,
                hosts=",".join(part.hosts),
            )
        if not heal:
            self.progress.injected_fault("partition")
        self.injected.append(
            {
                "fault": kind,
                "nodes": list(part.hosts),
                "t": t,
                "at": time.monotonic() - self.start_at,
            }
        )
        self.progress.note(
            f"fault: {kind} {','.join(part.hosts)} at +{time.monotonic() - self.start_at:.1f} s"
        )
