"""Child processes in tests: wait until one says it is ready.

A test that starts a program (in a network namespace, say) must not talk to it before
it has bound its sockets. :func:`wait_ready` waits for the program's first line on
standard output, ``ready``, without buffering anything after it, so that
``communicate()`` later still gets the rest of the output.
"""

from __future__ import annotations

import os
import select
import subprocess
import time
from typing import Any

__all__ = ["wait_ready"]


def wait_ready(proc: subprocess.Popen[Any], *, timeout: float, what: str) -> None:
    """Return once ``proc`` wrote the line ``ready`` on its stdout (a pipe).

    It is read byte by byte on the raw file descriptor, so nothing after the line is
    buffered here. When the process ends or ``timeout`` seconds pass first, it is killed
    and ``AssertionError`` says ``<what> did not start`` with its standard error.
    """
    assert proc.stdout is not None, "wait_ready needs stdout=subprocess.PIPE"
    fd = proc.stdout.fileno()
    line = b""
    deadline = time.monotonic() + timeout
    while not line.endswith(b"\n"):
        readable, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        chunk = os.read(fd, 1) if readable else b""
        if not chunk:
            proc.kill()
            _, err = proc.communicate(timeout=10)
            raise AssertionError(f"{what} did not start: {err}")
        line += chunk
    assert line == b"ready\n", f"{what} started with {line!r}, not ready"
