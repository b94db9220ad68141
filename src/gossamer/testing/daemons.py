"""Server processes on 127.0.0.1 for tests and benchmarks, and the lines they print.

:class:`Daemon` runs ``gossamer node --config FILE`` (``docs/node.md``) and waits for its
JSON status lines (``ready``, ``view``, ``progress``, ``done``); :class:`ServerProcess`
does the same for any other server command (``gossamer gateway``, say). The lines are
read by a thread as they come and kept, so a wait finds a line printed before it was
asked for. A wait that runs out of patience kills the process and fails with the end of
its standard error, which is kept in a file beside its configuration.
"""

from __future__ import annotations

import queue
import signal
import subprocess
import sys
import threading
import time
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

__all__ = ["HOST", "PATIENCE", "Daemon", "Popen", "ServerProcess", "gateway_port"]

HOST = "127.0.0.1"
#: Seconds a wait allows for what a cluster on a loaded 2-core machine does in about one.
PATIENCE = 60.0
#: How a process is started: ``subprocess.Popen`` or a namespace host's ``Host.popen``.
Popen = Callable[..., "subprocess.Popen[Any]"]


def gateway_port(config: Path) -> int:
    """The gateway port a daemon's file gives it."""
    port: int = tomllib.loads(config.read_text())["ports"]["gateway"]
    return port


class ServerProcess:
    """One server process and the lines it printed on stdout (read by a thread).

    A line that is a JSON object is kept as that object; any other line as
    ``{"text": line}`` (without its line break).
    """

    def __init__(
        self, argv: list[str], *, name: str, cwd: Path, popen: Popen = subprocess.Popen,
        patience: float = PATIENCE,
    ) -> None:
        """Start ``argv`` in ``cwd`` with ``popen``; its standard error goes to a new
        file ``cwd/NAME.<ns>.err``. ``name`` names it in errors; a wait gives up after
        ``patience`` seconds."""
        self.name = name
        self.patience = patience
        self.stderr = cwd / f"{name}.{time.monotonic_ns()}.err"
        with self.stderr.open("wb") as err:
            self.proc = popen(argv, stdout=subprocess.PIPE, stderr=err, cwd=cwd)
        self.lines: queue.Queue[dict[str, Any]] = queue.Queue()
        self.seen: list[dict[str, Any]] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            try:
                line = orjson.loads(raw)
            except orjson.JSONDecodeError:
                line = None
            if not isinstance(line, dict):
                line = {"text": raw.decode(errors="replace").rstrip("\r\n")}
            self.lines.put(line)

    def wait(self, test: Callable[[dict[str, Any]], bool], what: str) -> dict[str, Any]:
        """The first line (from now on, or already seen) that passes ``test``.

        ``AssertionError`` (saying ``what`` was awaited) when the process says ``done``
        first, or when none comes within its patience: then it is killed first.
        """
        for line in self.seen:
            if test(line):
                return line
        deadline = time.monotonic() + self.patience
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                self.proc.kill()
                self.proc.wait(timeout=10)
                raise AssertionError(
                    f"{self.name}: no {what}: {self.errors()[-3000:]}"
                ) from None
            if line.get("status") == "done" and not test(line):
                raise AssertionError(f"{self.name} stopped before {what}")
            self.seen.append(line)
            if test(line):
                return line

    def kill(self) -> None:
        """SIGKILL it and reap it."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)
        self._finish()

    def _finish(self) -> None:
        self.reader.join(timeout=10)
        assert self.proc.stdout is not None
        self.proc.stdout.close()

    def errors(self) -> str:
        """What it wrote on its standard error so far."""
        return self.stderr.read_text(errors="replace")

    def stop(self) -> int:
        """SIGTERM (SIGKILL if it does not end); the exit code. ``AssertionError`` when
        it had to be killed."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
            raise AssertionError(f"{self.name} ignored SIGTERM") from None
        finally:
            self._finish()


class Daemon(ServerProcess):
    """One ``gossamer node`` process and the status lines it printed."""

    def __init__(
        self, config: Path, popen: Popen = subprocess.Popen, *, patience: float = PATIENCE
    ) -> None:
        """Start ``gossamer node --config CONFIG`` in the file's directory with ``popen``
        (a namespace host's ``Host.popen`` runs it in that host); it is named for the
        file (``a.toml``: ``a``)."""
        self.config = config
        super().__init__(
            [sys.executable, "-m", "gossamer.cli.main", "node", "--config", str(config)],
            name=config.stem, cwd=config.parent, popen=popen, patience=patience,
        )

    def view_with(
        self, names: set[str], *, including: str = "", after: int = 0, since: float = 0.0
    ) -> dict[str, Any]:
        """The first view this node installs whose members have exactly ``names``
        (and whose member list includes ``including``, ``name#incarnation``, if given;
        whose id is above ``after`` and whose time ``t``, the machine's monotonic clock,
        is above ``since``: earlier views are not what follows a fault)."""
        return self.wait(
            lambda line: line.get("status") == "view" and line["id"] > after
            and line["t"] > since
            and {m.split("#")[0] for m in line["members"]} == names
            and (not including or including in line["members"]),
            f"view of {sorted(names)} {including} after view {after}",
        )

    def gateway_peers(self, names: set[str]) -> dict[str, Any]:
        """The first progress line saying its gateway is linked to exactly ``names``."""
        return self.wait(
            lambda line: line.get("status") == "progress"
            and set(line["gateway_peers"] or ()) == names,
            f"gateway peers {sorted(names)}",
        )
