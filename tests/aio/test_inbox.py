"""``Inbox``: receive with a timeout, iteration until the end, a failure as the cause."""

from __future__ import annotations

import asyncio

import pytest

from gossamer.aio.inbox import Inbox
from gossamer.errors import ClosedError, TimedOutError
from gossamer.testing.aio import Runner


def test_items_drain_after_the_end_then_closed(run: Runner) -> None:
    async def main() -> None:
        inbox: Inbox[int] = Inbox("the test")
        with pytest.raises(TimedOutError, match=r"within 0\.01 s") as timed_out:
            await inbox.get(timeout=0.01)
        assert isinstance(timed_out.value.__cause__, TimeoutError)
        waiter = asyncio.ensure_future(inbox.get())
        await asyncio.sleep(0)
        inbox.put(1)
        assert await waiter == 1
        inbox.put(2)
        inbox.put(3)
        inbox.end()
        inbox.put(4)  # after the end: ignored
        assert await inbox.get(timeout=1) == 2
        assert [item async for item in inbox] == [3]
        with pytest.raises(ClosedError, match="the test is closed"):
            await inbox.get()

    run(main())


def test_a_failure_ends_iteration_with_it_as_the_cause(run: Runner) -> None:
    async def main() -> None:
        inbox: Inbox[int] = Inbox("the test")
        reader = asyncio.ensure_future(inbox.get())
        await asyncio.sleep(0)
        bug = RuntimeError("a core bug")
        inbox.end(bug)
        inbox.end()  # idempotent: the first failure stays
        with pytest.raises(ClosedError) as closed:
            await reader
        assert closed.value.__cause__ is bug
        with pytest.raises(ClosedError):
            async for _ in inbox:
                pass

    run(main())
