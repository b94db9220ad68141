"""Helpers for tests that run real asyncio drivers (on both event loops)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from gossamer.aio import loop as aio_loop

__all__ = ["Runner", "make_runner", "until"]

#: Runs one test coroutine to completion on a fresh loop.
Runner = Callable[[Coroutine[Any, Any, None]], None]


def make_runner(*, use_uvloop: bool, timeout: float = 30.0) -> Runner:
    """A runner that gives each coroutine a fresh loop of the chosen kind and fails it
    with ``TimeoutError`` after ``timeout`` seconds instead of hanging the suite."""

    def runner(main: Coroutine[Any, Any, None]) -> None:
        async def bounded() -> None:
            async with asyncio.timeout(timeout):
                await main

        aio_loop.run(bounded(), use_uvloop=use_uvloop)

    return runner


async def until(condition: Callable[[], bool], timeout: float = 20.0) -> None:
    """Wait (polling the loop) until ``condition()`` holds."""
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.002)
