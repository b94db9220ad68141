"""``gossamer lab run``: the stages of one run, in order, and the cleanup on every path out.

One run (docs/lab.md):

1. :func:`gossamer.lab.plan.plan` validates the request: scenario, parameters, fault
   schedule (a bad argument is one line and exit 2, before anything is created);
2. the nodes are placed (:mod:`gossamer.lab.hosts`): network namespaces when root,
   otherwise 127.0.0.1;
3. the run directory gets a fresh key and one checked ``config/<node>.toml`` per node
   (:mod:`gossamer.lab.rundir`);
4. every node starts with a common ``start_at`` a few seconds ahead
   (:mod:`gossamer.lab.processes`); its ``ready``/``progress``/``done`` lines drive the
   progress display;
5. crashes and partitions happen on schedule (:mod:`gossamer.lab.inject`);
6. after the workload the group settles (:mod:`gossamer.lab.settle`): the nodes keep
   serving for ``linger`` seconds, then until none has anything in flight, for at
   most ``settle`` seconds more;
7. then every node gets SIGTERM and is waited for; ``run.json`` is written
   (:mod:`gossamer.lab.record`); the namespaces are torn down;
8. ``gossamer analyze`` judges the traces (:mod:`gossamer.lab.verdict`) and its exit code
   is the run's (0 held, 1 violated, 2 unusable).

Contract: the runner kills only the processes it started, and tears the namespaces down
on every path out: normal end, error, ``Ctrl-C`` or ``SIGTERM``.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, TextIO

import orjson

from gossamer.errors import GossamerError
from gossamer.lab import LabError
from gossamer.lab import hosts as hosts_mod
from gossamer.lab import scenarios as scenarios_mod
from gossamer.lab.cluster import client_configs, daemon_configs
from gossamer.lab.hosts import Mode, Placement
from gossamer.lab.inject import Injector, timeline
from gossamer.lab.netns import Host, Topology
from gossamer.lab.plan import LabRequest, Plan, plan
from gossamer.lab.processes import (
    STOP_TIMEOUT,
    Line,
    Nodes,
    TerminatedError,
    node_command,
    sigterm_as_interrupt,
    stderr_tail,
)
from gossamer.lab.progress import Progress
from gossamer.lab.record import RunLog
from gossamer.lab.record import metadata as run_metadata
from gossamer.lab.rundir import prepare_out, write_config, write_daemon_config, write_secret
from gossamer.lab.settle import Settling
from gossamer.lab.verdict import conclude

__all__ = ["LabResult", "run_lab"]

#: Seconds after ``start_at`` by which every node must have said ``ready``.
READY_GRACE: Final = 20.0


@dataclass(frozen=True, slots=True, kw_only=True)
class LabResult:
    """What a run produced: its directory, report, exit code and ``run.json`` contents."""

    run_dir: Path
    report: Path | None
    code: int
    metadata: dict[str, Any]


class _Run:
    """One run's mutable state; ``execute`` drives it, ``cleanup`` always runs."""

    def __init__(self, request: LabRequest, the_plan: Plan, stream: TextIO) -> None:
        self.request = request
        self.plan = the_plan
        self.stream = stream
        self.out = request.out.resolve()
        self.nodes = Nodes()
        self.log = RunLog(out=self.out, seed=request.seed)
        self.topology: Topology | None = None
        self.netns_hosts: dict[str, Host] = {}
        self.progress: Progress | None = None
        self.settling: Settling | None = None

    # -- setup --------------------------------------------------------------------------

    def place(self, mode: Mode) -> Placement:
        count = len(self.plan.ids)
        if mode == "loopback":
            return hosts_mod.loopback_placement(count)
        topology = hosts_mod.new_topology(count)
        self.topology = topology
        topology.__enter__()
        placement = hosts_mod.netns_placement(topology)
        self.netns_hosts = {
            spec.id: host for spec, host in zip(placement.hosts, topology.hosts, strict=True)
        }
        return placement

    def launch(self, placement: Placement) -> None:
        log = self.log
        # The run's id is its directory's name (``./run demo`` makes it
        # ``demo-<UTC timestamp>``), so that a report names the directory it came from.
        log.run = self.out.name
        key_file = self.out / "secrets" / "cluster.key"
        write_secret(key_file)
        startup = self.request.startup
        if startup is None:
            # Python start-up and imports of N nodes share the machine's cores.
            startup = 3.0 + 0.6 * len(placement.hosts)
        log.launched_at = time.monotonic()
        log.start_at = log.launched_at + startup
        if self.plan.scenario.daemons:
            self._launch_cluster(placement, key_file)
            return
        docs = scenarios_mod.node_configs(
            self.plan.scenario,
            self.plan.values,
            placement,
            self.plan.faults,
            run=log.run,
            out=self.out,
            key_file=key_file,
            start_at=log.start_at,
            seed=log.seed,
            protocol=self.plan.protocol,
        )
        paths: dict[str, Path] = {}
        for node, doc in docs.items():
            paths[node] = self.out / "config" / f"{node}.toml"
            write_config(paths[node], doc)
        for spec in placement.hosts:
            self.nodes.start(
                spec.id, paths[spec.id], self.out / "logs", self.netns_hosts.get(spec.id)
            )

    def _launch_cluster(self, placement: Placement, key_file: Path) -> None:
        """The ``cluster`` and ``queues`` scenarios: a daemon and a client app per host
        (:mod:`gossamer.lab.cluster`); the daemons start first."""
        log, values = self.log, self.plan.values
        daemons = daemon_configs(
            values, placement, run=log.run, out=self.out, key_file=key_file, seed=log.seed,
            protocol=self.plan.protocol,
        )
        apps = client_configs(
            values, placement, run=log.run, out=self.out, key_file=key_file,
            start_at=log.start_at, seed=log.seed, workload=self.plan.scenario.workload,
        )
        logs = self.out / "logs"
        for spec, (host, doc) in zip(placement.hosts, daemons.items(), strict=True):
            path = self.out / "config" / f"{host}.toml"
            write_daemon_config(path, doc)
            self.nodes.start(host, path, logs, self.netns_hosts.get(spec.id),
                             argv=node_command(path), settles=False)
        for spec, (name, doc) in zip(placement.hosts, apps.items(), strict=True):
            path = self.out / "config" / f"{name}.toml"
            write_config(path, doc)
            self.nodes.start(name, path, logs, self.netns_hosts.get(spec.id))

    # -- the run ------------------------------------------------------------------------

    def _handle(self, node_id: str, line: Line, now: float) -> None:
        progress = self.progress
        assert progress is not None
        status = self.nodes[node_id].apply(line)
        if status == "ready":
            self.log.ready_at[node_id] = now
            progress.ready(node_id)
        elif status == "progress":
            assert isinstance(line, dict)
            progress.update(node_id, line)
            if self.settling is not None:
                self.settling.update(node_id, line)
        elif status == "done":
            progress.set_state(node_id, "done")

    def _check_exits(self) -> None:
        """Notice nodes that exited on their own; one that never became ready fails the run."""
        assert self.progress is not None
        for node in self.nodes.newly_exited():
            self.log.unexpected[node.id] = node.exit_code
            tail = stderr_tail(node.stderr_path)
            if not node.ready:
                last = tail.splitlines()[-1] if tail else "no error output"
                raise LabError(
                    f"node {node.id} exited with status {node.exit_code} before it was ready: "
                    f"{last} (see {node.stderr_path})"
                )
            self.progress.set_state(node.id, "exited")
            self.progress.note(
                f"node {node.id} exited early with status {node.exit_code}"
                + (f":\n{tail}" if tail else "")
            )

    def execute(self) -> None:
        duration, linger, start_at = self.plan.duration, self.plan.linger, self.log.start_at
        self.progress = Progress(
            self.stream, [n.id for n in self.nodes], start_at=start_at, duration=duration,
            linger=linger,
        )
        netns = None if self.topology is None else (self.topology, self.netns_hosts)
        injector = Injector(
            self.nodes, self.log, self.progress, netns, freeze=self.plan.scenario.daemons
        )
        schedule = timeline(self.plan.faults)
        workload_end = start_at + duration
        self.settling = settling = Settling(
            workload_end=workload_end, linger=linger, settle=self.plan.settle
        )
        ready_deadline = start_at + READY_GRACE
        warned_late = False
        while True:
            self.nodes.drain(0.2, self._handle)
            now = time.monotonic()
            self._check_exits()
            # A restarted node was ready once: its second start is not held to the grace.
            not_ready = [
                n.id
                for n in self.nodes
                if not n.ready and not n.crashed and n.id not in self.log.ready_at
            ]
            if not_ready and now >= start_at and not warned_late:
                warned_late = True
                self.progress.note(
                    f"warning: not ready at the common start: {', '.join(not_ready)}"
                )
            if not_ready and now >= ready_deadline:
                raise LabError(
                    f"nodes never became ready: {', '.join(not_ready)}; see {self.out / 'logs'}"
                )
            while schedule and now >= start_at + schedule[0].at:
                injector.perform(schedule.pop(0))
            live = self._settling()
            if now >= workload_end:
                self.progress.settling(settling.pending(live))
            self.progress.tick(now)
            if settling.done(live, now):
                break
            if all(n.exit_code is not None for n in self.nodes):
                break
        now = time.monotonic()
        self.progress.finish(now)
        self.log.settle = result = settling.result(self._settling(), now)
        self.progress.note(_settle_line(result))

    def _settling(self) -> list[str]:
        """The nodes the settling waits for: those still running (neither crashed by the
        lab nor exited) whose progress lines say whether they are idle (not daemons)."""
        return [n.id for n in self.nodes if not n.crashed and n.exit_code is None and n.settles]

    def stop(self, *, timeout: float = STOP_TIMEOUT) -> list[str]:
        """SIGTERM every live node, wait for it, SIGKILL what remains; the killed ids."""
        killed = self.nodes.stop(timeout=timeout)
        if self.progress is not None:
            self.nodes.drain_now(self._handle)
        return killed

    def cleanup(self) -> list[str]:
        """Kill our own processes and tear the namespaces down; problems found, if any."""
        problems: list[str] = []
        self.nodes.kill_all()
        if self.topology is not None:
            topology, self.topology = self.topology, None
            try:
                topology.close()
            except GossamerError as exc:
                problems.append(str(exc))
        return problems

    def metadata(self, placement: Placement, killed: list[str], started: float) -> dict[str, Any]:
        wall_seconds = time.monotonic() - started
        return run_metadata(
            self.plan, placement, self.nodes, self.log, killed=killed, wall_seconds=wall_seconds
        )


def _settle_line(result: dict[str, Any]) -> str:
    if result["settled"]:
        return (
            f"lab: settled {result['seconds']:.2f} s after the workload (every node idle: "
            f"nothing in flight); stopping the nodes after {result['stopped_after']:.2f} s"
        )
    pending = ", ".join(
        f"{node} ({'?' if n is None else n} pending)" for node, n in result["pending"].items()
    )
    return (
        f"lab: NOT settled {result['stopped_after']:.2f} s after the workload "
        f"(linger {result['linger']:g} + settle {result['settle']:g} s): {pending}; "
        "stopping the nodes anyway (the analysis reports what was unfinished)"
    )


def _announce(the_plan: Plan, placement: Placement, why: str | None, out: Path) -> str:
    where = (
        f"network namespaces, {len(placement.subnets)} subnet(s) {list(placement.subnets)}"
        if placement.mode == "netns"
        else f"127.0.0.1 ({why})"
    )
    faults = the_plan.faults
    return (
        f"lab: scenario {the_plan.scenario.name}, {len(the_plan.ids)} hosts on {where}\n"
        f"lab: services {', '.join(the_plan.services)}; faults: "
        f"drop {faults.drop:g}, delay {faults.delay_ms:g} ms"
        + "".join(f", crash {c}" for c in faults.crashes)
        + "".join(f", partition {p}" for p in faults.partitions)
        + "".join(f", restart {r}" for r in faults.restarts)
        + f"\nlab: output in {out}\n"
    )


def run_lab(request: LabRequest, stream: TextIO | None = None) -> LabResult:
    """Run the request end to end (see the module docstring) and return its result.

    Raises ``ConfigError`` for bad arguments (before anything is created) and
    ``LabError`` when the run cannot proceed; ``KeyboardInterrupt`` propagates after
    the nodes are stopped and the namespaces are gone.
    """
    stream = stream if stream is not None else sys.stdout
    the_plan = plan(request)
    mode, why = hosts_mod.choose_mode(request.mode)
    prepare_out(request.out)
    started = time.monotonic()
    run = _Run(request, the_plan, stream)
    try:
        with sigterm_as_interrupt():
            placement = run.place(mode)
            stream.write(_announce(the_plan, placement, why, run.out))
            stream.flush()
            run.launch(placement)
            run.execute()
            killed = run.stop()
            for node_id in killed:
                stream.write(
                    f"warning: {node_id} did not stop within {STOP_TIMEOUT:g} s of SIGTERM\n"
                )
            metadata = run.metadata(placement, killed, started)
            (run.out / "run.json").write_bytes(
                orjson.dumps(metadata, option=orjson.OPT_INDENT_2) + b"\n"
            )
    except (KeyboardInterrupt, TerminatedError):
        stream.write("\nlab: interrupted; stopping the nodes\n")
        run.stop(timeout=3.0)
        raise KeyboardInterrupt from None
    finally:
        problems = run.cleanup()
        for problem in problems:
            stream.write(f"lab: teardown problem: {problem}\n")
    code, report = conclude(
        run.out, metadata, run.log.unexpected, run_analysis=request.analyze, stream=stream
    )
    return LabResult(run_dir=run.out, report=report, code=code, metadata=metadata)
