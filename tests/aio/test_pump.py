"""The shared Pump in its hook form (drivers of many connections)."""

from __future__ import annotations

import asyncio

from gossamer.aio._pump import Pump, now
from gossamer.testing.aio import Runner


class _Core:
    """A core with one deadline that records timers and makes one event per input."""

    def __init__(self, deadline: float | None) -> None:
        self.deadline = deadline
        self.timers: list[float] = []
        self.inputs: list[bytes] = []
        self.out: list[bytes] = []
        self._events: list[object] = []

    def receive(self, data: bytes, now: float) -> None:
        self.inputs.append(data)
        self.out.append(data.upper())
        self._events.append(("got", data))

    def handle_timer(self, now: float) -> None:
        self.timers.append(now)
        self.deadline = None
        self._events.append("timer")

    def next_deadline(self) -> float | None:
        return self.deadline

    def events_received(self) -> list[object]:
        out, self._events = self._events, []
        return out


def test_hooks_flush_after_every_input_and_the_timer_fires(run: Runner) -> None:
    run(_hooks())


async def _hooks() -> None:
    core = _Core(now() + 0.01)
    written: list[bytes] = []
    shut: list[bool] = []

    def flush_output() -> None:
        written.extend(core.out)
        core.out.clear()

    pump = Pump(core, flush_output=flush_output, shutdown=lambda: shut.append(True))
    pump.start()
    pump.feed(core.receive, b"a", now())
    assert written == [b"A"]
    events = pump.events()
    assert await anext(events) == ("got", b"a")
    assert await asyncio.wait_for(anext(events), 2.0) == "timer"
    assert len(core.timers) == 1
    pump.close()
    pump.close()
    await pump.wait_closed()
    assert shut == [True]
    assert [e async for e in events] == []


def test_flush_soon_merges_requests_into_one_pump(run: Runner) -> None:
    run(_soon())


async def _soon() -> None:
    core = _Core(None)
    flushes: list[int] = []
    pump = Pump(core, flush_output=lambda: flushes.append(1), event_queue=False)
    pump.start()
    flushes.clear()
    for _ in range(5):
        pump.flush_soon()
    pending = pump.flush_pending
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert flushes == [1]
    assert (pending, pump.flush_pending) == (True, False)
    pump.close()


def test_a_deadline_already_due_runs_at_the_end_of_this_loop_turn(run: Runner) -> None:
    run(_due())


async def _due() -> None:
    # Not on a (millisecond) timer: before anything the loop is asked to do after it.
    core = _Core(now())
    pump = Pump(core, event_queue=False)
    seen: list[int] = []
    pump.start()
    asyncio.get_running_loop().call_soon(lambda: seen.append(len(core.timers)))
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert seen == [1] and len(core.timers) == 1
    pump.close()
