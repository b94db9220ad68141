"""The node processes of a run: start them, read their status lines, stop or kill them.

Every node is ``python -m gossamer.cli.main lab app --config FILE`` (in the ``cluster``
scenario also ``... node --config FILE``, the daemon) in a session of its own
(a Ctrl-C in the terminal reaches only the lab, which then stops the nodes in order),
inside its namespace host when there is one. A thread per node forwards its stdout lines
(``docs/lab-app.md``: JSON ``ready``/``progress``/``done`` objects) to one queue.

Contract: only processes started here are signalled, by their ``Popen``;
:meth:`Nodes.stop` is SIGTERM, a grace period, then SIGKILL; :meth:`Nodes.kill_all`
leaves no process of ours behind on any path out.
"""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import IO, Any, Final

import orjson

from gossamer.lab.netns import Host

__all__ = [
    "STOP_TIMEOUT",
    "NodeProcess",
    "Nodes",
    "TerminatedError",
    "app_command",
    "node_command",
    "sigterm_as_interrupt",
    "stderr_tail",
]

#: Seconds a node gets to print ``done`` and exit after SIGTERM (the contract says 5).
STOP_TIMEOUT: Final = 8.0
_STDERR_TAIL: Final = 15

#: One stdout line of a node: a JSON object, other text, or ``None`` at end of file.
Line = dict[str, Any] | str | None


class TerminatedError(Exception):
    """SIGTERM to the lab itself: handled like Ctrl-C."""


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Within the block, SIGTERM to the lab raises ``TerminatedError`` (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        raise TerminatedError

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def app_command(config: Path) -> list[str]:
    """``python -m gossamer.cli.main lab app --config FILE``: the lab's program on a host."""
    return [sys.executable, "-m", "gossamer.cli.main", "lab", "app", "--config", str(config)]


def node_command(config: Path) -> list[str]:
    """``python -m gossamer.cli.main node --config FILE``: a cluster daemon."""
    return [sys.executable, "-m", "gossamer.cli.main", "node", "--config", str(config)]


def stderr_tail(path: Path) -> str:
    """The last lines a node wrote to its stderr file ("" if none)."""
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").strip().splitlines()
    except OSError:
        return ""
    return "\n".join(lines[-_STDERR_TAIL:])


@dataclass(slots=True, kw_only=True)
class NodeProcess:
    """One node process and what its status lines said so far."""

    id: str
    proc: subprocess.Popen[bytes]
    stderr_path: Path
    reader: threading.Thread
    argv: list[str] = field(default_factory=list)
    host: Host | None = None
    #: Whether its progress lines say ``idle`` (lab apps): the settling waits for these.
    settles: bool = True
    ready: bool = False
    done: bool = False
    crashed: bool = False
    eof: bool = False
    exit_code: int | None = None
    last: dict[str, Any] = field(default_factory=dict)
    other_lines: list[str] = field(default_factory=list)

    def apply(self, line: Line) -> str | None:
        """Record one stdout line; the status it announced (``ready``, ``progress``,
        ``done``) or ``None``."""
        if line is None:
            self.eof = True
            return None
        if isinstance(line, str):
            self.other_lines.append(line)
            return None
        status = line.get("status")
        if status == "ready":
            self.ready = True
        elif status == "progress":
            self.last = line
        elif status == "done":
            self.done = True
        else:
            return None
        return str(status)

    def kill(self) -> None:
        """SIGKILL the process (if it still runs) and reap it."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)


def _pump(node: str, stream: IO[bytes], sink: queue.Queue[tuple[str, Line]]) -> None:
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


class Nodes:
    """The node processes of one run, by node id, and the queue of their stdout lines."""

    def __init__(self) -> None:
        self.by_id: dict[str, NodeProcess] = {}
        self.lines: queue.Queue[tuple[str, Line]] = queue.Queue()
        self._env = dict(os.environ, PYTHONUNBUFFERED="1")

    def __getitem__(self, node_id: str) -> NodeProcess:
        return self.by_id[node_id]

    def __iter__(self) -> Iterator[NodeProcess]:
        return iter(self.by_id.values())

    def start(
        self,
        node_id: str,
        config: Path,
        logs: Path,
        host: Host | None,
        *,
        argv: list[str] | None = None,
        settles: bool = True,
    ) -> NodeProcess:
        """Start the node of ``config`` (in ``host`` when given); stderr to ``logs``.

        ``argv`` replaces the lab app's command (``app_command(config)``); ``settles``
        is false for a process whose progress lines do not say ``idle``."""
        return self._spawn(
            node_id, argv or app_command(config), logs / f"{node_id}.stderr", host, settles,
            mode="wb",
        )

    def restart(self, node_id: str) -> NodeProcess:
        """Start ``node_id`` again, as it was started (it must have exited or been
        killed); its stderr file is appended to."""
        old = self.by_id[node_id]
        assert old.proc.poll() is not None, f"{node_id} still runs"
        old.reader.join(timeout=2.0)
        if old.proc.stdout is not None:
            with contextlib.suppress(OSError):
                old.proc.stdout.close()
        return self._spawn(node_id, old.argv, old.stderr_path, old.host, old.settles, mode="ab")

    def _spawn(
        self,
        node_id: str,
        argv: list[str],
        stderr_path: Path,
        host: Host | None,
        settles: bool,
        *,
        mode: str,
    ) -> NodeProcess:
        with open(stderr_path, mode) as err:
            kwargs: dict[str, Any] = {
                "stdin": subprocess.DEVNULL,
                "stdout": subprocess.PIPE,
                "stderr": err,
                "env": self._env,
                "start_new_session": True,
            }
            if host is not None:
                proc: subprocess.Popen[bytes] = host.popen(argv, **kwargs)
            else:
                proc = subprocess.Popen(argv, **kwargs)
        assert proc.stdout is not None
        reader = threading.Thread(
            target=_pump,
            args=(node_id, proc.stdout, self.lines),
            daemon=True,
            name=f"lab-{node_id}-stdout",
        )
        node = NodeProcess(
            id=node_id, proc=proc, stderr_path=stderr_path, reader=reader, argv=argv, host=host,
            settles=settles,
        )
        self.by_id[node_id] = node
        reader.start()
        return node

    def drain(self, timeout: float, handle: Callable[[str, Line, float], None]) -> None:
        """Hand every line that arrives within ``timeout`` seconds to ``handle``."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            try:
                node_id, line = self.lines.get(timeout=max(0.0, left))
            except queue.Empty:
                return
            handle(node_id, line, time.monotonic())
            if left <= 0:
                return

    def drain_now(self, handle: Callable[[str, Line, float], None]) -> None:
        """Hand every line already queued to ``handle``, without waiting."""
        while True:
            try:
                node_id, line = self.lines.get_nowait()
            except queue.Empty:
                return
            handle(node_id, line, time.monotonic())

    def newly_exited(self) -> list[NodeProcess]:
        """Nodes that exited on their own since the last call (crashed ones excluded);
        their ``exit_code`` is set."""
        exited: list[NodeProcess] = []
        for node in self:
            if node.exit_code is not None or node.crashed:
                continue
            code = node.proc.poll()
            if code is None:
                continue
            node.exit_code = code
            exited.append(node)
        return exited

    def stop(self, *, timeout: float = STOP_TIMEOUT) -> list[str]:
        """SIGTERM every live node, wait for it, SIGKILL what remains; the killed ids."""
        live = [n for n in self if n.proc.poll() is None]
        for node in live:
            with contextlib.suppress(ProcessLookupError):
                node.proc.send_signal(signal.SIGCONT)  # a frozen (partitioned) node too
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
        for node in self:
            node.reader.join(timeout=2.0)
        return killed

    def kill_all(self) -> None:
        """SIGKILL whatever of ours still runs and close the pipes (every path out)."""
        for node in self:
            if node.proc.poll() is None:
                node.proc.kill()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    node.proc.wait(timeout=10)
            if node.proc.stdout is not None:
                with contextlib.suppress(OSError):
                    node.proc.stdout.close()
