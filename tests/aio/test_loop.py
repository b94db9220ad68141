"""gossamer.aio.loop: uvloop when importable, the default loop otherwise."""

from __future__ import annotations

import asyncio
import sys

import pytest

from gossamer.aio import loop as aio_loop


async def _running_loop_name() -> str:
    await asyncio.sleep(0)
    return aio_loop.loop_name()


def test_uvloop_is_picked_when_importable() -> None:
    uvloop = pytest.importorskip("uvloop")
    assert aio_loop.uvloop_available()
    loop = aio_loop.new_event_loop()
    try:
        assert isinstance(loop, uvloop.Loop)
        assert aio_loop.loop_name(loop) == "uvloop"
    finally:
        loop.close()
    assert aio_loop.run(_running_loop_name()) == "uvloop"


def test_default_loop_when_uvloop_is_not_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    # A None entry in sys.modules makes ``import uvloop`` raise ImportError, exactly
    # as on a machine without it.
    monkeypatch.setitem(sys.modules, "uvloop", None)
    assert not aio_loop.uvloop_available()
    loop = aio_loop.new_event_loop()
    try:
        assert isinstance(loop, asyncio.BaseEventLoop)
        assert aio_loop.loop_name(loop) == "asyncio"
    finally:
        loop.close()
    assert aio_loop.run(_running_loop_name()) == "asyncio"
    with pytest.raises(ImportError):
        aio_loop.new_event_loop(use_uvloop=True)


def test_use_uvloop_false_forces_the_default_loop() -> None:
    assert aio_loop.run(_running_loop_name(), use_uvloop=False) == "asyncio"


@pytest.mark.parametrize("use_uvloop", [True, False], ids=["uvloop", "asyncio"])
def test_run_returns_the_result_and_cancels_leftover_tasks(use_uvloop: bool) -> None:
    if use_uvloop:
        pytest.importorskip("uvloop")
    cancelled: list[bool] = []

    async def forever() -> None:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    async def main() -> int:
        asyncio.get_running_loop().create_task(forever())
        await asyncio.sleep(0)
        return 42

    assert aio_loop.run(main(), use_uvloop=use_uvloop) == 42
    assert cancelled == [True]
