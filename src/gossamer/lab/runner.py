"""``gossamer lab run``: real node processes, faults on schedule, traces, analysis, verdict.

One run (docs/lab.md):

1. resolve the scenario's parameters and the fault schedule (all validation happens
   before anything is created, so a bad argument is one line and exit 2);
2. place the nodes (:mod:`gossamer.lab.hosts`): network namespaces built with
   ``gossamer.testing.netns.Topology`` when root, otherwise 127.0.0.1;
3. write ``<out>/secrets/cluster.key`` (32 random bytes, mode 0600, fresh per run) and
   one ``<out>/config/<node>.toml`` per node, each checked with
   ``gossamer.lab.config.load_config`` (the node's own loader);
4. start every node (``python -m gossamer.cli.main node --config ...``) with a common
   ``start_at`` a few seconds ahead, read their ``ready``/``progress``/``done`` lines;
5. inject the faults the nodes cannot inject themselves: a crash is ``SIGKILL`` plus a
   ``net/fault crash`` line appended to the victim's trace; a partition cuts the real
   links in namespaces (loopback nodes drop the datagrams themselves, from their
   ``[[faults.partition]]``) and is traced as ``partition``/``heal`` on the isolated
   nodes in both placements;
6. at the end ``SIGTERM`` every node and wait for its ``done``; write ``run.json``;
   tear the namespaces down;
7. run ``gossamer analyze <out> --out <out>/analysis``, print its verdict table and the
   report path, and return its exit code (0 held, 1 violated, 2 unusable).

The runner kills only the processes it started (by their ``Popen``), and tears the
namespaces down on every path out: normal end, error, ``Ctrl-C`` or ``SIGTERM``.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import platform
import queue
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import IO, Any, Final, TextIO

import orjson

from gossamer._version import __version__
from gossamer.errors import ConfigError, GossamerError
from gossamer.faults import Crash, Partition
from gossamer.lab import hosts as hosts_mod
from gossamer.lab import scenarios as scenarios_mod
from gossamer.lab.config import NodeConfig, parse_config
from gossamer.lab.hosts import Mode, Placement
from gossamer.lab.progress import Progress
from gossamer.lab.scenarios import FaultSchedule, Scenario, Value
from gossamer.testing.netns import Host, Topology
from gossamer.trace import SCHEMA_VERSION, JsonlSink, Tracer

__all__ = [
    "EXIT_HELD",
    "EXIT_UNUSABLE",
    "EXIT_VIOLATED",
    "LabError",
    "LabRequest",
    "LabResult",
    "run_lab",
    "write_config",
    "write_secret",
]

EXIT_HELD, EXIT_VIOLATED, EXIT_UNUSABLE = 0, 1, 2
#: Seconds a node gets to print ``done`` and exit after SIGTERM (the contract says 5).
STOP_TIMEOUT: Final = 8.0
#: Seconds after ``start_at`` by which every node must have said ``ready``.
READY_GRACE: Final = 20.0
_STDERR_TAIL: Final = 15


class LabError(GossamerError):
    """The lab could not run the scenario (a node failed to start, a command failed)."""


class _TerminatedError(Exception):
    """SIGTERM to the lab itself: handled like Ctrl-C."""


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
class LabResult:
    """What a run produced: its directory, report, exit code and ``run.json`` contents."""

    run_dir: Path
    report: Path | None
    code: int
    metadata: dict[str, Any]


# -- files ----------------------------------------------------------------------------------


def write_secret(path: Path, size: int = 32) -> None:
    """Write ``size`` fresh random bytes to ``path``, created with mode 0600 (never reused).

    ``O_EXCL``: an existing key is an error rather than silently shared between runs.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(secrets.token_bytes(size))


def write_config(path: Path, doc: Mapping[str, Any]) -> NodeConfig:
    """Validate a node's configuration with the node's own rules and write it as TOML.

    What is written is ``NodeConfig.to_toml()``, so the node reads back exactly what was
    checked here; a document the node would reject raises ``LabError`` naming the key.
    """
    try:
        config = parse_config(doc, base=path.parent, env={})
    except GossamerError as exc:
        raise LabError(f"the lab built a config the node rejects: {path}: {exc}") from exc
    path.write_text(config.to_toml(), encoding="utf-8")
    return config


def _node_command(config: Path) -> list[str]:
    """``python -m gossamer.cli.main node --config FILE``."""
    return [sys.executable, "-m", "gossamer.cli.main", "node", "--config", str(config)]


# -- processes ------------------------------------------------------------------------------


@dataclass(slots=True, kw_only=True)
class _Node:
    id: str
    proc: subprocess.Popen[bytes]
    stderr_path: Path
    reader: threading.Thread
    ready: bool = False
    done: bool = False
    crashed: bool = False
    eof: bool = False
    exit_code: int | None = None
    last: dict[str, Any] = field(default_factory=dict)
    other_lines: list[str] = field(default_factory=list)


def _pump(
    node: str, stream: IO[bytes], sink: queue.Queue[tuple[str, dict[str, Any] | str | None]]
) -> None:
    """Forward a node's stdout lines to ``sink``: JSON objects parsed, others as text."""
    try:
        for raw in stream:
            line = raw.decode("utf-8", "replace").strip()
            if not line:
                continue
            try:
                obj = orjson.loads(line)
            except orjson.JSONDecodeError:
                sink.put((node, line))
                continue
            sink.put((node, obj if isinstance(obj, dict) else line))
    except (OSError, ValueError):  # the pipe was closed under us at teardown
        pass
    finally:
        sink.put((node, None))


def _stderr_tail(path: Path) -> str:
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").strip().splitlines()
    except OSError:
        return ""
    return "\n".join(lines[-_STDERR_TAIL:])


def _trace_fault(path: Path, *, run: str, node: str, fault: str, **attrs: str) -> float:
    """Append one ``net/fault`` event to ``path`` (O_APPEND, one write) and return its time.

    The node's own sink also appends one whole line per write, so a line the lab adds
    to a live node's trace never interleaves with the node's lines.
    """
    now = time.monotonic()
    with JsonlSink(path) as sink:
        Tracer(sink, run=run, node=node)(now, "net", "fault", attrs={"fault": fault, **attrs})
    return now


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """Within the block, SIGTERM to the lab raises ``_TerminatedError`` (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        raise _TerminatedError

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@dataclass(frozen=True, slots=True, kw_only=True)
class _Plan:
    scenario: Scenario
    values: dict[str, Value]
    ids: tuple[str, ...]
    faults: FaultSchedule


def plan(request: LabRequest) -> _Plan:
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
    duration = float(values["duration"])  # type: ignore[arg-type]
    faults.validate(ids, duration)
    return _Plan(scenario=scenario, values=values, ids=ids, faults=faults)


def _prepare_out(out: Path) -> None:
    if out.exists():
        if not out.is_dir():
            raise ConfigError(f"--out {out} exists and is not a directory")
        if any(out.iterdir()):
            raise ConfigError(f"--out {out} exists and is not empty (the lab never mixes runs)")
    out.mkdir(parents=True, exist_ok=True)
    for sub in ("config", "logs", "state"):
        (out / sub).mkdir(exist_ok=True)


class _Run:
    """One run's mutable state; ``execute`` drives it, ``cleanup`` always runs."""

    def __init__(self, request: LabRequest, the_plan: _Plan, stream: TextIO) -> None:
        self.request = request
        self.plan = the_plan
        self.stream = stream
        self.out = request.out.resolve()
        self.nodes: dict[str, _Node] = {}
        self.events: queue.Queue[tuple[str, dict[str, Any] | str | None]] = queue.Queue()
        self.topology: Topology | None = None
        self.netns_hosts: dict[str, Host] = {}
        self.injected: list[dict[str, Any]] = []
        self.unexpected: dict[str, int | None] = {}
        self.progress: Progress | None = None
        self.run_id = ""
        self.start_at = 0.0
        self.launched_at = 0.0
        self.ready_at: dict[str, float] = {}

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
        scenario, values = self.plan.scenario, self.plan.values
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
        self.run_id = f"lab-{scenario.name}-{stamp}"
        key_file = self.out / "secrets" / "cluster.key"
        write_secret(key_file)
        count = len(placement.hosts)
        startup = self.request.startup
        if startup is None:
            # Python start-up and imports of N nodes share the machine's cores.
            startup = 3.0 + 0.6 * count
        self.launched_at = time.monotonic()
        self.start_at = self.launched_at + startup
        docs = scenarios_mod.node_configs(
            scenario,
            values,
            placement,
            self.plan.faults,
            run=self.run_id,
            out=self.out,
            key_file=key_file,
            start_at=self.start_at,
            seed=self.request.seed,
        )
        paths: dict[str, Path] = {}
        for node, doc in docs.items():
            path = self.out / "config" / f"{node}.toml"
            write_config(path, doc)
            paths[node] = path
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        for spec in placement.hosts:
            argv = _node_command(paths[spec.id])
            stderr_path = self.out / "logs" / f"{spec.id}.stderr"
            with open(stderr_path, "wb") as err:
                # A session of their own: a Ctrl-C in the terminal reaches only the lab,
                # which then stops the nodes in order (SIGTERM, then SIGKILL).
                kwargs: dict[str, Any] = {
                    "stdin": subprocess.DEVNULL,
                    "stdout": subprocess.PIPE,
                    "stderr": err,
                    "env": env,
                    "start_new_session": True,
                }
                if spec.id in self.netns_hosts:
                    proc: subprocess.Popen[bytes] = self.netns_hosts[spec.id].popen(argv, **kwargs)
                else:
                    proc = subprocess.Popen(argv, **kwargs)
            assert proc.stdout is not None
            reader = threading.Thread(
                target=_pump,
                args=(spec.id, proc.stdout, self.events),
                daemon=True,
                name=f"lab-{spec.id}-stdout",
            )
            self.nodes[spec.id] = _Node(
                id=spec.id, proc=proc, stderr_path=stderr_path, reader=reader
            )
            reader.start()

    # -- the run ------------------------------------------------------------------------

    def _handle(self, node_id: str, item: dict[str, Any] | str | None, now: float) -> None:
        node = self.nodes[node_id]
        progress = self.progress
        assert progress is not None
        if item is None:
            node.eof = True
            return
        if isinstance(item, str):
            node.other_lines.append(item)
            return
        status = item.get("status")
        if status == "ready":
            node.ready = True
            self.ready_at[node_id] = now
            progress.ready(node_id)
        elif status == "progress":
            node.last = item
            progress.update(node_id, item)
        elif status == "done":
            node.done = True
            progress.set_state(node_id, "done")

    def _drain(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            try:
                node_id, item = self.events.get(timeout=max(0.0, left))
            except queue.Empty:
                return
            self._handle(node_id, item, time.monotonic())
            if left <= 0:
                return

    def _check_exits(self) -> None:
        """Notice nodes that exited on their own; one that never became ready fails the run."""
        assert self.progress is not None
        for node in self.nodes.values():
            if node.exit_code is not None or node.crashed:
                continue
            code = node.proc.poll()
            if code is None:
                continue
            node.exit_code = code
            self.unexpected[node.id] = code
            tail = _stderr_tail(node.stderr_path)
            if not node.ready:
                last = tail.splitlines()[-1] if tail else "no error output"
                raise LabError(
                    f"node {node.id} exited with status {code} before it was ready: {last} "
                    f"(see {node.stderr_path})"
                )
            self.progress.set_state(node.id, "exited")
            self.progress.note(
                f"node {node.id} exited early with status {code}" + (f":\n{tail}" if tail else "")
            )

    def _crash(self, crash: Crash) -> None:
        assert self.progress is not None
        node = self.nodes[crash.host]
        node.crashed = True
        if node.proc.poll() is None:
            node.proc.kill()
            node.proc.wait(timeout=10)
        t = _trace_fault(
            self.out / f"{crash.host}.jsonl", run=self.run_id, node=crash.host, fault="crash"
        )
        node.exit_code = node.proc.returncode
        self.progress.set_state(crash.host, "crashed")
        self.progress.injected_fault("crash")
        self.injected.append(
            {"fault": "crash", "node": crash.host, "t": t, "at": t - self.start_at}
        )
        self.progress.note(f"fault: {crash.host} crashed (SIGKILL) at +{t - self.start_at:.1f} s")

    def _partition(self, part: Partition, *, heal: bool) -> None:
        assert self.progress is not None
        if self.topology is not None:
            for host in part.hosts:
                if heal:
                    self.topology.heal(self.netns_hosts[host])
                else:
                    self.topology.cut(self.netns_hosts[host])
        kind = "heal" if heal else "partition"
        t = time.monotonic()
        for host in part.hosts if self.topology is not None else ():
            # On loopback every node traces its own [[faults.partition]] windows.
            if self.nodes[host].crashed:
                continue  # a dead node's trace ends with its crash
            t = _trace_fault(
                self.out / f"{host}.jsonl",
                run=self.run_id,
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

    def execute(self) -> None:
        faults = self.plan.faults
        duration = float(self.plan.values["duration"])  # type: ignore[arg-type]
        linger = float(self.plan.values["linger"])  # type: ignore[arg-type]
        self.progress = Progress(
            self.stream,
            list(self.plan.ids),
            start_at=self.start_at,
            duration=duration,
            linger=linger,
        )
        schedule: list[tuple[float, int, Any]] = []
        for crash in faults.crashes:
            schedule.append((crash.at, 1, crash))
        for part in faults.partitions:
            schedule.append((part.start, 2, ("cut", part)))
            schedule.append((part.end, 0, ("heal", part)))
        schedule.sort(key=lambda item: (item[0], item[1]))
        end_at = self.start_at + duration + linger
        ready_deadline = self.start_at + READY_GRACE
        warned_late = False
        while True:
            self._drain(0.2)
            now = time.monotonic()
            self._check_exits()
            not_ready = [n.id for n in self.nodes.values() if not n.ready and not n.crashed]
            if not_ready and now >= self.start_at and not warned_late:
                warned_late = True
                self.progress.note(
                    f"warning: not ready at the common start: {', '.join(not_ready)}"
                )
            if not_ready and now >= ready_deadline:
                raise LabError(
                    f"nodes never became ready: {', '.join(not_ready)}; see {self.out / 'logs'}"
                )
            while schedule and now >= self.start_at + schedule[0][0]:
                _, _, action = schedule.pop(0)
                if isinstance(action, Crash):
                    self._crash(action)
                elif action[0] == "cut":
                    self._partition(action[1], heal=False)
                else:
                    self._partition(action[1], heal=True)
            self.progress.tick(now)
            if now >= end_at:
                break
            if all(n.exit_code is not None for n in self.nodes.values()):
                break
        self.progress.finish(time.monotonic())

    def stop(self, *, timeout: float = STOP_TIMEOUT) -> list[str]:
        """SIGTERM every live node, wait for it, SIGKILL what remains; the killed ids."""
        live = [n for n in self.nodes.values() if n.proc.poll() is None]
        for node in live:
            with contextlib.suppress(ProcessLookupError):
                node.proc.terminate()
        deadline = time.monotonic() + timeout
        killed: list[str] = []
        for node in live:
            try:
                node.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                node.proc.kill()
                node.proc.wait(timeout=10)
                killed.append(node.id)
            if node.exit_code is None:
                node.exit_code = node.proc.returncode
        for node in self.nodes.values():
            node.reader.join(timeout=2.0)
        if self.progress is not None:
            while True:
                try:
                    node_id, item = self.events.get_nowait()
                except queue.Empty:
                    break
                self._handle(node_id, item, time.monotonic())
        return killed

    def cleanup(self) -> list[str]:
        """Kill our own processes and tear the namespaces down; problems found, if any."""
        problems: list[str] = []
        for node in self.nodes.values():
            if node.proc.poll() is None:
                node.proc.kill()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    node.proc.wait(timeout=10)
            if node.proc.stdout is not None:
                with contextlib.suppress(OSError):
                    node.proc.stdout.close()
        if self.topology is not None:
            topology, self.topology = self.topology, None
            try:
                topology.close()
            except GossamerError as exc:
                problems.append(str(exc))
        return problems


def _count_traces(out: Path) -> tuple[int, dict[str, int]]:
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


def _metadata(
    run: _Run, placement: Placement, killed: Sequence[str], started: float
) -> dict[str, Any]:
    the_plan = run.plan
    values = the_plan.values
    faults = the_plan.faults
    events, fault_counts = _count_traces(run.out)
    per_node = {
        node.id: {
            "sent": int(node.last.get("sent", 0) or 0),
            "delivered": int(node.last.get("delivered", 0) or 0),
            "faults": int(node.last.get("faults", 0) or 0),
            "peers": int(node.last.get("peers", 0) or 0),
            "ready_after": round(run.ready_at[node.id] - run.launched_at, 3)
            if node.id in run.ready_at
            else None,
            "exit_code": node.exit_code,
            "crashed": node.crashed,
            "done": node.done,
        }
        for node in run.nodes.values()
    }
    multicast = placement.mode == "netns" and values.get("multicast") is True
    params: dict[str, Any] = dict(values)
    # What gossamer.analysis.catalog.derive_params reads (as for the simulator's runs).
    params.update(
        subnets=len(placement.subnets),
        multicast="on" if multicast else "off",
        crashed=len(faults.crashes),
    )
    analysis: dict[str, float] = {"discovery.max_peers": float(values.get("max_peers") or 64)}
    if "gossip" in the_plan.scenario.enabled(values) and not faults.crashes:
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
        "run": run.run_id,
        "schema_version": SCHEMA_VERSION,
        "scenario": the_plan.scenario.name,
        "nodes": len(the_plan.ids),
        "seed": run.request.seed,
        "duration": values["duration"],
        "faults": {
            "drop": faults.drop,
            "duplicate": 0.0,
            "delay_ms": faults.delay_ms,
            "delay_rate": values["delay_rate"] if faults.delay_ms > 0 else 0.0,
            "reorder": 0.0,
            "crash": [str(c) for c in faults.crashes],
            "partition": [str(p) for p in faults.partitions],
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
            "services": list(the_plan.scenario.enabled(values)),
            "expected_checks": [
                name
                for name in the_plan.scenario.expected_checks(values)
                if not (name == "gossip.depth" and "gossip.max_depth" not in analysis)
            ],
            "start_at": run.start_at,
            "injected": run.injected,
            "unexpected_exits": run.unexpected,
            "killed_after_sigterm": list(killed),
            "wall_seconds": round(time.monotonic() - started, 3),
        },
        "summary": {
            "sent": sum(n["sent"] for n in per_node.values()),
            "delivered": sum(n["delivered"] for n in per_node.values()),
            "nodes": per_node,
        },
    }


def _analyze(out: Path, stream: TextIO) -> tuple[int, Path | None]:
    """Run ``gossamer analyze`` on the run; print its table; (exit code, report path)."""
    report_dir = out / "analysis"
    argv = [sys.executable, "-m", "gossamer.cli.analyze_cmd", str(out), "--out", str(report_dir)]
    stderr_path = out / "logs" / "analyze.stderr"
    with (
        open(stderr_path, "wb") as err,
        subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err, text=True) as proc,
    ):
        assert proc.stdout is not None
        lines: list[str] = []
        try:
            for line in proc.stdout:
                lines.append(line.rstrip("\n"))
                stream.write(line)
                stream.flush()
            code = proc.wait()
        except BaseException:
            # Ctrl-C: let Spark stop as it would on its own Ctrl-C, then insist.
            proc.send_signal(signal.SIGINT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=15)
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            raise
    for line in stderr_path.read_text(encoding="utf-8", errors="replace").splitlines():
        if line.startswith(("warning:", "gossamer", "skipped", "...")) or code == EXIT_UNUSABLE:
            stream.write(line + "\n")
    report: Path | None = None
    for line in lines:
        if line.startswith("report: "):
            report = Path(line.removeprefix("report: ").strip())
    if report is None and (report_dir / "report.html").exists():
        report = report_dir / "report.html"
    return code, report


def _skipped_expected(out: Path, expected: Sequence[str]) -> list[str]:
    path = out / "analysis" / "summary.json"
    try:
        summary = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    status = {
        c.get("name"): c.get("status") for c in summary.get("checks", []) if isinstance(c, dict)
    }
    return [name for name in expected if status.get(name) not in ("pass", "fail")]


def run_lab(request: LabRequest, stream: TextIO | None = None) -> LabResult:
    """Run the request end to end (see the module docstring) and return its result.

    Raises ``ConfigError`` for bad arguments (before anything is created) and
    ``LabError`` when the run cannot proceed; ``KeyboardInterrupt`` propagates after
    the nodes are stopped and the namespaces are gone.
    """
    stream = stream if stream is not None else sys.stdout
    the_plan = plan(request)
    mode, why = hosts_mod.choose_mode(request.mode)
    _prepare_out(request.out)
    started = time.monotonic()
    run = _Run(request, the_plan, stream)
    scenario = the_plan.scenario
    try:
        with _sigterm_as_interrupt():
            placement = run.place(mode)
            where = (
                f"network namespaces, {len(placement.subnets)} subnet(s) {list(placement.subnets)}"
                if mode == "netns"
                else f"127.0.0.1 ({why})"
            )
            stream.write(
                f"lab: scenario {scenario.name}, {len(the_plan.ids)} hosts on {where}\n"
                f"lab: services {', '.join(scenario.enabled(the_plan.values))}; faults: "
                f"drop {the_plan.faults.drop:g}, delay {the_plan.faults.delay_ms:g} ms"
                + "".join(f", crash {c}" for c in the_plan.faults.crashes)
                + "".join(f", partition {p}" for p in the_plan.faults.partitions)
                + f"\nlab: output in {run.out}\n"
            )
            stream.flush()
            run.launch(placement)
            run.execute()
            killed = run.stop()
            for node_id in killed:
                stream.write(
                    f"warning: {node_id} did not stop within {STOP_TIMEOUT:g} s of SIGTERM\n"
                )
            metadata = _metadata(run, placement, killed, started)
            (run.out / "run.json").write_bytes(
                orjson.dumps(metadata, option=orjson.OPT_INDENT_2) + b"\n"
            )
    except (KeyboardInterrupt, _TerminatedError):
        stream.write("\nlab: interrupted; stopping the nodes\n")
        run.stop(timeout=3.0)
        raise KeyboardInterrupt from None
    finally:
        problems = run.cleanup()
        for problem in problems:
            stream.write(f"lab: teardown problem: {problem}\n")
    fc = ", ".join(f"{k} {v}" for k, v in metadata["fault_counts"].items()) or "none"
    summary = metadata["summary"]
    stream.write(
        f"lab: {metadata['events']} trace events; sent {summary['sent']}, "
        f"delivered {summary['delivered']}; faults traced: {fc}\n"
    )
    code = EXIT_HELD
    report: Path | None = None
    if request.analyze:
        stream.write("lab: analyzing the traces with Spark (gossamer analyze)...\n")
        stream.flush()
        code, report = _analyze(run.out, stream)
        skipped = _skipped_expected(run.out, metadata["lab"]["expected_checks"])
        if skipped and code != EXIT_UNUSABLE:
            stream.write(f"note: expected checks that did not run: {', '.join(skipped)}\n")
    if run.unexpected:
        stream.write(
            "lab: nodes exited on their own: "
            + ", ".join(f"{n} (status {c})" for n, c in run.unexpected.items())
            + f"; see {run.out / 'logs'}\n"
        )
        code = max(code, EXIT_VIOLATED)
    if report is not None:
        stream.write(f"lab: HTML report: {report}\n")
    if not request.analyze:
        verdict = "run complete, not analyzed" if code == EXIT_HELD else "a node failed"
        stream.write(f"lab: {verdict} (exit {code}); analyze with: gossamer analyze {run.out}\n")
        stream.flush()
        return LabResult(run_dir=run.out, report=None, code=code, metadata=metadata)
    verdict = {
        EXIT_HELD: "every property held",
        EXIT_VIOLATED: "a property was VIOLATED",
        EXIT_UNUSABLE: "the analysis could not judge the run",
    }.get(code, f"exit {code}")
    stream.write(f"lab: verdict: {verdict} (exit {code})\n")
    stream.flush()
    return LabResult(run_dir=run.out, report=report, code=code, metadata=metadata)
