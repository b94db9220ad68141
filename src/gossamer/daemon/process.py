"""What every long-running gossamer process does the same way (the node daemon,
``gossamer.daemon.run``; the lab app, ``gossamer.lab.app``): its JSON status lines on
standard output, its seeded random streams, and a clean stop on SIGTERM or SIGINT."""

from __future__ import annotations

import asyncio
import contextlib
import random
import signal
import time
from collections.abc import Iterator
from typing import Any, TextIO

import orjson

__all__ = ["StatusLines", "seeded", "stop_on_signals"]


class StatusLines:
    """Writes one JSON object per line to ``out`` and flushes it at once:
    ``{"status": ..., "node": node, "t": time.monotonic(), **extra}``."""

    def __init__(self, out: TextIO, node: str) -> None:
        self.out = out
        self.node = node

    def __call__(self, status: str, **extra: Any) -> None:
        line = {"status": status, "node": self.node, "t": time.monotonic(), **extra}
        self.out.write(orjson.dumps(line).decode() + "\n")
        self.out.flush()


def seeded(seed: int, salt: int) -> random.Random:
    """The random stream ``salt`` of a process seeded ``seed`` (each use its own salt, so
    one stream's draws never shift another's)."""
    return random.Random(seed * 1_000_003 + salt)


@contextlib.contextmanager
def stop_on_signals(stop: asyncio.Event) -> Iterator[None]:
    """Within the block, SIGTERM and SIGINT set ``stop`` (on this thread's running loop)
    instead of killing the process; the handlers are removed on the way out."""
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signum, stop.set)
    try:
        yield
    finally:
        for signum in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.remove_signal_handler(signum)
