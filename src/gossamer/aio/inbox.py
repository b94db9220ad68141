"""``Inbox``: what a service received, for ``receive(timeout=)`` and ``async for``.

The one mechanism behind the receiving half of ``docs/api.md`` (rules 5 and 6) for the
drivers that queue what their core delivers::

    inbox.put(message)          # the driver, as the core delivers
    await inbox.get(timeout=1)  # the application: the next message, or TimedOutError
    async for message in inbox: # until the service closes
    inbox.end()                 # the driver, at close: readers drain, then ClosedError

After ``end`` the messages already queued are still returned, then ``get`` raises
``ClosedError`` and iteration stops. ``end(failure)`` (the driver failed) chains the
failure as the cause of that ``ClosedError``, and iteration raises it instead of stopping
quietly. Not thread-safe; use from the event loop that runs the driver.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Generic, TypeVar

from gossamer.errors import ClosedError, TimedOutError

__all__ = ["Inbox"]

_T = TypeVar("_T")


class Inbox(Generic[_T]):
    """A first-in first-out queue with an end. ``what`` names the service in errors."""

    def __init__(self, what: str) -> None:
        self.what = what
        self._items: deque[_T] = deque()
        self._ready = asyncio.Event()
        self._ended = False
        self._failure: BaseException | None = None

    def __len__(self) -> int:
        return len(self._items)

    def pending(self) -> list[_T]:
        """The items queued and not taken yet, oldest first (a copy)."""
        return list(self._items)

    @property
    def ended(self) -> bool:
        return self._ended

    def put(self, item: _T) -> None:
        """Queue ``item`` for the readers (ignored once ended)."""
        if not self._ended:
            self._items.append(item)
            self._ready.set()

    def end(self, failure: BaseException | None = None) -> None:
        """No more items will come. Idempotent; the first failure given is kept."""
        if self._failure is None:
            self._failure = failure
        self._ended = True
        self._ready.set()

    async def get(self, timeout: float | None = None) -> _T:
        """The next item. Raises ``TimedOutError`` (its cause the ``TimeoutError``) when
        nothing came within ``timeout`` seconds, and ``ClosedError`` once ended and empty."""
        if timeout is None:
            return await self._next()
        try:
            async with asyncio.timeout(timeout):
                return await self._next()
        except TimeoutError as exc:
            raise TimedOutError(
                f"nothing received from {self.what} within {timeout} s", timeout=timeout
            ) from exc

    async def _next(self) -> _T:
        while not self._items:
            if self._ended:
                raise ClosedError(f"{self.what} is closed") from self._failure
            self._ready.clear()
            await self._ready.wait()
        return self._items.popleft()

    def __aiter__(self) -> Inbox[_T]:
        return self

    async def __anext__(self) -> _T:
        try:
            return await self._next()
        except ClosedError:
            if self._failure is not None:
                raise
            raise StopAsyncIteration from None
