"""The part every driver shares: flush outputs, deliver events, keep one timer.

DESIGN.md, "The sans-I/O core contract": a driver is a thin pump. It feeds input with
``now`` from ``now()`` (``time.monotonic()``, the one clock of cores and traces), flushes
every output after every input, and re-arms one timer at ``next_deadline()``. This module
holds that loop once: the datagram and stream drivers differ only in how bytes reach the
core and leave it, and drivers of cores with many connections (the link node, the gateway
server and client, gossip) use the same ``Pump`` through two hooks instead of a loop of
their own.

The ``Pump`` API
----------------

``Pump(core, *, on_event=None, event_queue=None, flush_output=None, shutdown=None)``
drives a core that has ``handle_timer(now)``, ``next_deadline()`` and
``events_received()``. Either subclass it (``_flush_output``, ``_shutdown``: the stream
and datagram drivers) or give the two hooks (a driver of many connections):

- ``flush_output()`` moves the core's output to wherever it goes, once per pump, before
  the events are delivered: for a core with many connections, each connection's bytes
  to that connection's transport (``StreamDriver.pump()`` for a connection whose
  stream core reads them from the shared core; a direct ``transport.write``; a datagram
  driver), and the connections the core wants closed closed. It is not called once the
  pump is closing. Default without hook: nothing to move.
- ``shutdown()`` runs once, on ``close()`` (or when the core raised): close the
  transports. With the hook form, the pump counts as finished when it returns
  (``events()`` ends, ``wait_closed()`` returns); the driver awaits its transports itself.

Then, on the driver's side:

- ``start(loop=None)``: bind to the (running) loop and pump once (first outputs, the
  timer). Before ``start`` nothing is pumped.
- ``pump()``: flush outputs and events, then re-arm the one timer at ``next_deadline()``.
  Call it after every input the driver gave the core itself (fast paths).
- ``feed(method, *args)``: call a core input method (``core.receive_data``, ...) and pump.
- ``call(request)``: run ``request(now())`` on the core, then pump; the request's result
  or exception goes to the caller.
- the one timer: armed with ``loop.call_at(next_deadline())``; a deadline already due when
  it is armed runs at the end of this loop iteration (``loop.call_soon``) instead, so a
  core can ask to act once the inputs in hand are done (``IsisConfig.batch_turn``).
- ``flush_soon()``: one ``pump()`` at the end of this loop iteration, however many times it
  is asked for before then: drivers that batch the output of many inputs (the link node
  writes once per iteration) use it instead of ``pump()``.
- ``close()``: stop the timer and output at once, run the shutdown; idempotent.
- ``closed``, ``failure``, ``counters``, ``events()``, ``wait_closed()`` as documented below.

And for the services' ``timeout=`` arguments, ``deadline(timeout, what)``: an async
context manager like ``asyncio.timeout`` that raises ``gossamer.errors.TimedOutError``
(its cause the ``TimeoutError``) when the time is up.

A callback may call ``pump()``/``call()`` while events are delivered: the outer flush goes
round again, so events keep their order. A core or callback that raises stops the pump
(``failure``), as any bug does.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from gossamer.errors import ConfigError, LocalProtocolError, TimedOutError

__all__ = ["DriverCounters", "EventCallback", "Pump", "deadline", "now"]


def now() -> float:
    """The time cores are fed, in seconds: ``time.monotonic()``.

    It is the clock both event loops schedule with (the default loop's ``time()``
    is ``time.monotonic()``; uvloop's is the same CLOCK_MONOTONIC cached to whole
    milliseconds), so deadlines a core computes from it can be armed with
    ``loop.call_at``. Reading it directly keeps microsecond resolution, which
    round trips on loopback need: uvloop's ``loop.time()`` would round them to 0 or 1 ms.
    """
    return time.monotonic()


@asynccontextmanager
async def deadline(timeout: float | None, what: str) -> AsyncIterator[None]:
    """``asyncio.timeout(timeout)`` that raises ``TimedOutError`` (``what`` did not finish
    within ``timeout`` seconds; the ``TimeoutError`` as its cause). ``None``: no limit."""
    try:
        async with asyncio.timeout(timeout):
            yield
    except TimeoutError as exc:
        if isinstance(exc, TimedOutError):
            raise
        raise TimedOutError(f"{what} did not finish in time", timeout=timeout) from exc


_T = TypeVar("_T")

#: Called with each event a core produced, in order, right after the input that produced it.
EventCallback = Callable[[object], None]

# uvloop keeps time in whole milliseconds and rounds timer delays to the nearest
# one, so a timer can fire up to half a millisecond before the deadline it was
# armed for. A core must not be woken before its deadline (the contract says
# "once the deadline is due"), and re-arming for the sub-millisecond remainder
# would round to zero and spin; waiting one more millisecond does neither.
_EARLY_REARM = 0.001


class _TimedCore(Protocol):
    def handle_timer(self, now: float) -> None: ...

    def next_deadline(self) -> float | None: ...

    def events_received(self) -> Sequence[object]: ...


CoreT = TypeVar("CoreT", bound=_TimedCore)


@dataclass(slots=True)
class DriverCounters:
    """What a driver did, for tests, metrics and benchmarks.

    ``received``/``sent`` count datagrams (datagram driver) or reads/writes
    (stream driver); ``errors`` counts socket errors reported by the transport
    (for example ICMP port unreachable), which never stop a driver.
    """

    received: int = 0
    received_bytes: int = 0
    sent: int = 0
    sent_bytes: int = 0
    timers: int = 0
    events: int = 0
    errors: int = 0


class _End:
    """Marks the end of the event stream in the queue."""


_END = _End()


class Pump(Generic[CoreT]):
    """Drives one core: output flushing, event delivery, the one timer, failure.

    Subclasses call ``_start(loop)`` when they start, ``_feed()`` or ``_pump()``
    after every input they give the core, implement ``_flush_output()`` (move the
    core's bytes to the transport, unless closing) and ``_shutdown()`` (close
    transports), and call ``_finished()`` once their transports are gone. Drivers of
    many connections give the ``flush_output``/``shutdown`` hooks instead (module
    docstring) and use the public ``start``/``pump``/``feed``/``flush_soon``/``close``.
    Closing stops output and the timer at once; events are still delivered until
    the transports are gone, and then ``events()`` ends.

    Events go to ``on_event`` (if given) and, when ``event_queue`` is true (the
    default when there is no callback), to a queue read by ``events()``. The
    queue is unbounded: a driver cannot push back on a datagram network, so an
    application that asks for the queue must read it.

    An exception raised by the core or by ``on_event`` is a bug, not a network
    condition: the driver stops at once, and ``wait_closed()`` and ``events()``
    raise it.
    """

    def __init__(
        self,
        core: CoreT,
        *,
        on_event: EventCallback | None = None,
        event_queue: bool | None = None,
        flush_output: Callable[[], None] | None = None,
        shutdown: Callable[[], None] | None = None,
    ) -> None:
        self.core = core
        self._flush_hook = flush_output
        self._shutdown_hook = shutdown
        self._soon = False
        self.counters = DriverCounters()
        self._on_event = on_event
        if event_queue is None:
            event_queue = on_event is None
        self._queue: asyncio.Queue[object] | None = asyncio.Queue() if event_queue else None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: asyncio.Handle | None = None
        self._armed_for = 0.0
        self._flushing = False
        self._again = False
        self._closing = False
        self._closed: asyncio.Future[None] | None = None
        self._finished_flag = False
        #: Called once when the driver has finished (a server forgets the connection).
        self._on_finish: Callable[[], None] | None = None
        self._failure: BaseException | None = None

    # -- the application's side ------------------------------------------------

    @property
    def closed(self) -> bool:
        """True once ``close()`` was called or the driver stopped on its own."""
        return self._closing

    @property
    def failure(self) -> BaseException | None:
        """The exception that stopped the driver, if the core or a callback raised one."""
        return self._failure

    def start(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Bind to ``loop`` (default: the running loop) and pump once."""
        self._start(loop or asyncio.get_running_loop())
        self._pump()

    def pump(self) -> None:
        """Flush outputs and events, re-arm the timer: after an input given to the core."""
        self._pump()

    def feed(self, feed: Callable[..., None], *args: Any) -> None:
        """Call the core input method ``feed(*args)``, then pump; a raise stops the pump."""
        self._feed(feed, *args)

    def flush_soon(self) -> None:
        """Pump once at the end of this loop iteration (requests before then are merged)."""
        if self._soon or self._finished_flag or self._loop is None:
            return
        self._soon = True
        self._loop.call_soon(self._soon_due)

    def _soon_due(self) -> None:
        self._soon = False
        self._pump()

    @property
    def flush_pending(self) -> bool:
        """True while a ``flush_soon()`` pump is waiting to run."""
        return self._soon

    def close(self) -> None:
        """Stop the timer and output at once and shut the transports down. Idempotent."""
        self._begin_close()

    def call(self, request: Callable[[float], _T]) -> _T:
        """Run a local request on the core at loop time, then flush its outputs.

        ``driver.call(lambda now: core.send_x(..., now))``. The request's own
        exception (for example a ``LocalProtocolError``) propagates to the caller;
        whatever the core queued before raising is still flushed.
        """
        self._require_running()
        try:
            return request(now())
        finally:
            self._pump()

    async def events(self) -> AsyncIterator[object]:
        """Yield the core's events in order until the driver closes.

        Ends normally after ``close()``; raises the failure if the driver
        stopped because the core or a callback raised.
        """
        queue = self._queue
        if queue is None:
            raise ConfigError("this driver was made without an event queue (event_queue=False)")
        while True:
            item = await queue.get()
            if isinstance(item, _End):
                queue.put_nowait(item)  # so that every other reader ends too
                if self._failure is not None:
                    raise self._failure
                return
            yield item

    async def wait_closed(self) -> None:
        """Wait until the driver's transports are closed; raise its failure if any."""
        if not self._finished_flag:
            if self._closed is None:
                self._closed = asyncio.get_running_loop().create_future()
            await asyncio.shield(self._closed)
        if self._failure is not None:
            raise self._failure

    # -- for subclasses ----------------------------------------------------------

    def _start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    def _require_running(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            raise LocalProtocolError("the driver is not started")
        if self._closing:
            raise LocalProtocolError("the driver is closed")
        return self._loop

    def _flush_output(self) -> None:
        if self._flush_hook is not None and not self._closing:
            self._flush_hook()

    def _shutdown(self) -> None:
        try:
            if self._shutdown_hook is not None:
                self._shutdown_hook()
        finally:
            self._finished()

    def _pump(self) -> None:
        """Flush outputs and events, then re-arm the timer; a raise stops the driver."""
        if self._finished_flag:
            return
        try:
            self._flush()
            self._arm()
        except Exception as exc:
            self._fail(exc)

    def _flush(self) -> None:
        # A callback may call ``driver.call`` while events are being delivered.
        # Flushing from inside would deliver that call's events before the rest
        # of the current batch, so nested flushes only ask the outer one to go
        # round again: events reach the application in the order they were made.
        if self._flushing:
            self._again = True
            return
        self._flushing = True
        try:
            while True:
                self._again = False
                self._flush_output()
                for event in self.core.events_received():
                    self.counters.events += 1
                    if self._on_event is not None:
                        self._on_event(event)
                    if self._queue is not None:
                        self._queue.put_nowait(event)
                if not self._again:
                    break
        finally:
            self._flushing = False

    def _arm(self) -> None:
        """Keep exactly one timer, at the core's current deadline. A deadline already due
        runs at the end of this loop turn (``call_soon``), after the inputs the loop has
        in hand, not on a timer: uvloop's timers count whole milliseconds, so one armed
        for "now" could wait a millisecond or two (a core that batches a turn's output,
        ``IsisConfig.batch_turn``, relies on this)."""
        if self._closing:
            return
        deadline = self.core.next_deadline()
        if deadline is None:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            return
        if self._timer is not None:
            if deadline == self._armed_for:
                return
            self._timer.cancel()
        assert self._loop is not None
        self._armed_for = deadline
        if deadline <= now():
            self._timer = self._loop.call_soon(self._on_timer)
        else:
            self._timer = self._loop.call_at(deadline, self._on_timer)

    def _on_timer(self) -> None:
        assert self._loop is not None
        self._timer = None
        if self._closing:
            return
        current = now()
        if current < self._armed_for:
            self._timer = self._loop.call_later(
                max(self._armed_for - current, _EARLY_REARM), self._on_timer
            )
            return
        self.counters.timers += 1
        try:
            self.core.handle_timer(current)
        except Exception as exc:
            self._fail(exc)
            return
        self._pump()

    def _feed(self, feed: Callable[..., None], *args: Any) -> None:
        """Call a core input method, then pump; a raise stops the driver."""
        if self._finished_flag:
            return
        try:
            feed(*args)
        except Exception as exc:
            self._fail(exc)
            return
        self._pump()

    def _fail(self, exc: BaseException) -> None:
        if self._failure is None:
            self._failure = exc
        self._begin_close()

    def _begin_close(self) -> None:
        if self._closing:
            return
        self._closing = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._shutdown()

    def _finished(self) -> None:
        """Called by subclasses when the last transport is gone: end the event stream."""
        if self._finished_flag:
            return
        self._begin_close()
        self._finished_flag = True
        if self._queue is not None:
            self._queue.put_nowait(_END)
        if self._closed is not None and not self._closed.done():
            self._closed.set_result(None)
        if self._on_finish is not None:
            self._on_finish()
