"""The lab's live status: hosts up, messages sent and delivered, faults, time left.

The runner feeds a :class:`Progress` with what the nodes report on stdout (``ready``,
``progress``, ``done`` lines of the node contract) and with the faults it injects
itself, and calls :meth:`Progress.tick` regularly. On a terminal the status is one
line redrawn in place; otherwise (a pipe, a CI log) it is a plain line every
``interval`` seconds, so logs stay readable. Notable events (a crash, a partition, a
node that exited) are always printed as their own line.

Nothing here reads a clock: every call gets ``now`` (``time.monotonic()``) from the
caller, which keeps the rendering testable.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TextIO

__all__ = ["NodeStatus", "Progress"]


@dataclass(slots=True, kw_only=True)
class NodeStatus:
    """The latest figures one node reported (mutable: updated by each progress line)."""

    state: str = "starting"  # starting, up, crashed, exited, done
    sent: int = 0
    delivered: int = 0
    faults: int = 0
    peers: int = 0


class Progress:
    """Aggregates node reports and renders one status line.

    ``start_at`` is the common workload start (monotonic seconds); ``duration`` and
    ``linger`` give the end. ``tty=None`` asks ``stream.isatty()``.
    """

    def __init__(
        self,
        stream: TextIO,
        nodes: Sequence[str],
        *,
        start_at: float,
        duration: float,
        linger: float,
        tty: bool | None = None,
        interval: float = 2.0,
    ) -> None:
        self.stream = stream
        self.nodes = {node: NodeStatus() for node in nodes}
        self.start_at = start_at
        self.duration = duration
        self.linger = linger
        self.tty = stream.isatty() if tty is None else tty
        self.interval = interval
        self.injected: dict[str, int] = {}  # faults the lab injected itself: crash, partition
        self._last_plain: float | None = None
        self._pending: dict[str, int | None] | None = None
        self._drawn = False

    # -- input ---------------------------------------------------------------------------

    def ready(self, node: str) -> None:
        self.nodes[node].state = "up"

    def update(self, node: str, report: dict[str, object]) -> None:
        """Take a node's ``progress`` line; missing or non-integer figures are ignored."""
        status = self.nodes[node]
        if status.state == "starting":
            status.state = "up"
        for name in ("sent", "delivered", "faults", "peers"):
            value = report.get(name)
            if isinstance(value, int) and not isinstance(value, bool):
                setattr(status, name, value)

    def set_state(self, node: str, state: str) -> None:
        self.nodes[node].state = state

    def settling(self, pending: dict[str, int | None]) -> None:
        """After the workload: the nodes not yet settled and what they have pending."""
        self._pending = pending

    def injected_fault(self, kind: str) -> None:
        self.injected[kind] = self.injected.get(kind, 0) + 1

    # -- output --------------------------------------------------------------------------

    def status_line(self, now: float) -> str:
        """``[ 12.0/24.0 s] hosts 6/6 up | sent 1234 | delivered 5678 | faults 42 ...``."""
        up = sum(s.state == "up" for s in self.nodes.values())
        sent = sum(s.sent for s in self.nodes.values())
        delivered = sum(s.delivered for s in self.nodes.values())
        datagram_faults = sum(s.faults for s in self.nodes.values())
        elapsed = now - self.start_at
        if elapsed < 0:
            clock = f"starting in {-elapsed:4.1f} s"
        elif elapsed <= self.duration:
            clock = f"{elapsed:5.1f}/{self.duration:g} s, {self.duration - elapsed:4.1f} s left"
        else:
            left = max(0.0, self.duration + self.linger - elapsed)
            waiting = self._pending
            busy = (
                ""
                if waiting is None
                else f", {len(waiting)} node(s) busy, {sum(n or 0 for n in waiting.values())}"
                " pending"
            )
            clock = (
                f"workload done, lingering {left:3.1f} s{busy}"
                if left > 0
                else f"workload done, settling{busy}"
            )
        lab = "".join(f", {n} {kind}" for kind, n in sorted(self.injected.items()))
        return (
            f"[{clock}] hosts {up}/{len(self.nodes)} up | sent {sent} | delivered {delivered}"
            f" | faults {datagram_faults} datagram{lab}"
        )

    def tick(self, now: float, *, force: bool = False) -> None:
        """Redraw (terminal) or print a plain line when ``interval`` has passed."""
        if self.tty:
            self.stream.write("\r" + self.status_line(now) + "\x1b[K")
            self._drawn = True
            self.stream.flush()
            return
        if force or self._last_plain is None or now - self._last_plain >= self.interval:
            self._last_plain = now
            self.stream.write(self.status_line(now) + "\n")
            self.stream.flush()

    def note(self, text: str) -> None:
        """Print ``text`` on a line of its own (clearing a redrawn status first)."""
        if self.tty and self._drawn:
            self.stream.write("\r\x1b[K")
            self._drawn = False
        self.stream.write(text + "\n")
        self.stream.flush()

    def finish(self, now: float) -> None:
        """Leave the final status on its own line."""
        if self.tty:
            self.tick(now)
            self.stream.write("\n")
            self._drawn = False
            self.stream.flush()
        else:
            self.tick(now, force=True)
