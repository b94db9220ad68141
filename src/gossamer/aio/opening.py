"""``Opening``: what every ``gossamer.open_*`` returns, awaitable and an async context manager.

In the manner of ``websockets.connect``::

    service = await gossamer.open_gossip(...)      # started; close it yourself
    async with gossamer.open_gossip(...) as service:
        ...                                         # closed on the way out, even on error

An ``Opening`` runs its start coroutine once, on the first ``await`` or ``async with``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator
from typing import Any, Generic, Protocol, TypeVar

from gossamer.errors import LocalProtocolError

__all__ = ["Closable", "Opening"]


class Closable(Protocol):
    async def close(self) -> None: ...


_S = TypeVar("_S", bound=Closable)


class Opening(Generic[_S]):
    """A service being opened: ``await`` it for the service, or use it with ``async with``."""

    def __init__(self, start: Callable[[], Awaitable[_S]]) -> None:
        self._start: Callable[[], Awaitable[_S]] | None = start
        self._service: _S | None = None

    async def _open(self) -> _S:
        start = self._start
        if start is None:
            raise LocalProtocolError("this opening was already awaited; open the service again")
        self._start = None
        self._service = await start()
        return self._service

    def __await__(self) -> Generator[Any, None, _S]:
        return self._open().__await__()

    async def __aenter__(self) -> _S:
        return await self._open()

    async def __aexit__(self, *exc_info: object) -> None:
        if self._service is not None:
            await self._service.close()
