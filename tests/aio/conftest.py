"""Every driver test runs on uvloop and on the default loop."""

from __future__ import annotations

import pytest

from gossamer.testing.aio import Runner, make_runner


@pytest.fixture(params=[True, False], ids=["uvloop", "asyncio"])
def run(request: pytest.FixtureRequest) -> Runner:
    """Runs a test coroutine on a fresh loop of each kind, bounded in time."""
    if request.param:
        pytest.importorskip("uvloop")
    return make_runner(use_uvloop=request.param)
