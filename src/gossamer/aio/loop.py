"""Event loop selection: uvloop wherever it is installed, the default loop otherwise.

uvloop receives UDP about 8x faster than the default selector loop on the
project's machines (the selector transport reads every datagram into a fresh
256 KiB buffer; see ``shared/reference/performance-baselines.md``), so every
gossamer process runs on it when it can. Nothing in ``gossamer.aio`` depends on
uvloop: the drivers use only the ``asyncio`` transport and protocol API, and the
tests run them on both loops.

uvloop is imported lazily, at the moment a loop is made, so that a process (or a
test) that makes it unimportable gets the default loop without reloading this
module.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

__all__ = ["loop_factory", "loop_name", "new_event_loop", "run", "uvloop_available"]

_T = TypeVar("_T")


def uvloop_available() -> bool:
    """True when ``uvloop`` can be imported in this process."""
    try:
        import uvloop  # noqa: F401, PLC0415
    except ImportError:
        return False
    return True


def loop_factory(*, use_uvloop: bool | None = None) -> Callable[[], asyncio.AbstractEventLoop]:
    """A callable that makes new event loops.

    ``use_uvloop=None`` (the default) means uvloop when importable, else the
    default loop; ``True`` demands uvloop (``ImportError`` when it is missing);
    ``False`` always gives the default loop.
    """
    if use_uvloop is False:
        return asyncio.new_event_loop
    try:
        import uvloop  # noqa: PLC0415
    except ImportError:
        if use_uvloop:
            raise
        return asyncio.new_event_loop
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def new_event_loop(*, use_uvloop: bool | None = None) -> asyncio.AbstractEventLoop:
    """A new event loop, uvloop when available (see ``loop_factory`` for ``use_uvloop``)."""
    return loop_factory(use_uvloop=use_uvloop)()


def run(
    main: Coroutine[Any, Any, _T],
    *,
    use_uvloop: bool | None = None,
    debug: bool | None = None,
) -> _T:
    """Run ``main`` to completion on a new loop and close it, like ``asyncio.run``.

    The loop is uvloop when available (see ``loop_factory``). Like ``asyncio.run``
    it cancels leftover tasks and shuts down async generators and the default
    executor before closing the loop.
    """
    with asyncio.Runner(debug=debug, loop_factory=loop_factory(use_uvloop=use_uvloop)) as runner:
        return runner.run(main)


def loop_name(loop: asyncio.AbstractEventLoop | None = None) -> str:
    """``"uvloop"`` or ``"asyncio"``: which implementation ``loop`` (default: the running loop) is.

    Used to label benchmark figures and traces; never to change behaviour.
    """
    if loop is None:
        loop = asyncio.get_running_loop()
    return "uvloop" if type(loop).__module__.startswith("uvloop") else "asyncio"
