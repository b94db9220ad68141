"""Node daemons as real processes on 127.0.0.1: their files, their status lines."""

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
import tomli_w

from gossamer.daemon.config import DEFAULT_PORTS
from gossamer.testing import free_ports

HOST = "127.0.0.1"
#: Seconds a test waits for what a cluster on a loaded 2-core machine does in about one.
PATIENCE = 60.0
#: How a daemon is started: ``subprocess.Popen`` or a namespace host's ``Host.popen``.
Popen = Callable[..., "subprocess.Popen[Any]"]


def write_key(tmp: Path) -> Path:
    key = tmp / "cluster.key"
    key.write_bytes(bytes(range(32)))
    return key


def node_file(
    tmp: Path, name: str, ports: dict[str, int], *, seeds: list[str], bootstrap: bool,
    address: str = HOST, **extra: dict[str, Any],
) -> Path:
    """A daemon's TOML file with lab-speed timers (and loopback discovery unless
    ``extra`` gives ``discovery.broadcast_address``)."""
    document: dict[str, Any] = {
        "cluster": {"name": "test", "key_file": "cluster.key", "seeds": seeds,
                    "bootstrap": bootstrap, "bootstrap_wait": 2.0},
        "node": {"name": name, "address": address, "trace": f"{name}.jsonl"},
        "ports": ports,
        "discovery": {"broadcast_interval": 0.3, "inactive_time": 1.0, "heartbeat_wait": 0.3},
        "views": {"retry": 0.05},
    }
    for section, values in extra.items():
        document.setdefault(section, {}).update(values)
    path = tmp / f"{name}.toml"
    path.write_text(tomli_w.dumps(document))
    return path


def mesh(tmp: Path, names: list[str], **extra: dict[str, Any]) -> dict[str, Path]:
    """One file per node: the first may found (bootstrap) and names the others as seeds,
    so that, restarted, it joins them; the others name it as their seed. ``extra``
    sections are added to every file (``gateway={"password": "pw"}``)."""
    write_key(tmp)
    numbers = free_ports(len(names) * len(DEFAULT_PORTS))
    ports = {
        name: dict(zip(DEFAULT_PORTS, numbers[i * len(DEFAULT_PORTS):], strict=False))
        for i, name in enumerate(names)
    }
    first = names[0]
    files = {}
    for name in names:
        seeds = [f"{HOST}:{ports[other]['discovery']}" for other in names
                 if other != name and first in (name, other)]
        files[name] = node_file(tmp, name, ports[name], seeds=seeds, bootstrap=name == first,
                                **extra)
    return files


def gateway_port(config: Path) -> int:
    """The gateway port a daemon's file gives it."""
    port: int = tomllib.loads(config.read_text())["ports"]["gateway"]
    return port


class Daemon:
    """One ``gossamer node`` process and the status lines it printed (read by a thread)."""

    def __init__(self, config: Path, popen: Popen = subprocess.Popen) -> None:
        """Start ``gossamer node --config CONFIG`` with ``popen`` (a namespace host's
        ``Host.popen`` runs it in that host)."""
        self.config = config
        self.stderr = config.with_suffix(f".{time.monotonic_ns()}.err")
        with self.stderr.open("wb") as err:
            self.proc = popen(
                [sys.executable, "-m", "gossamer.cli.main", "node", "--config", str(config)],
                stdout=subprocess.PIPE, stderr=err, cwd=config.parent,
            )
        self.lines: queue.Queue[dict[str, Any]] = queue.Queue()
        self.seen: list[dict[str, Any]] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            self.lines.put(orjson.loads(raw))

    def wait(self, test: Callable[[dict[str, Any]], bool], what: str) -> dict[str, Any]:
        """The first status line (from now on, or already seen) that passes ``test``."""
        for line in self.seen:
            if test(line):
                return line
        deadline = time.monotonic() + PATIENCE
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                self.proc.kill()
                self.proc.wait(timeout=10)
                raise AssertionError(
                    f"{self.config.stem}: no {what}: {self.errors()[-3000:]}"
                ) from None
            if line.get("status") == "done" and not test(line):
                raise AssertionError(f"{self.config.stem} stopped before {what}")
            self.seen.append(line)
            if test(line):
                return line

    def view_with(self, names: set[str], *, including: str = "") -> dict[str, Any]:
        """The first view this node installs whose members have exactly ``names``
        (and whose member list includes ``including``, ``name#incarnation``, if given)."""
        return self.wait(
            lambda line: line["status"] == "view"
            and {m.split("#")[0] for m in line["members"]} == names
            and (not including or including in line["members"]),
            f"view of {sorted(names)} {including}",
        )

    def gateway_peers(self, names: set[str]) -> dict[str, Any]:
        """The first progress line saying its gateway is linked to exactly ``names``."""
        return self.wait(
            lambda line: line["status"] == "progress"
            and set(line["gateway_peers"] or ()) == names,
            f"gateway peers {sorted(names)}",
        )

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)
        self._finish()

    def _finish(self) -> None:
        self.reader.join(timeout=10)
        assert self.proc.stdout is not None
        self.proc.stdout.close()

    def errors(self) -> str:
        return self.stderr.read_text(errors="replace")

    def stop(self) -> int:
        """SIGTERM (SIGKILL if it does not end); the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
            raise AssertionError(f"{self.config.stem} ignored SIGTERM") from None
        finally:
            self._finish()
