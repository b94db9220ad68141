"""Suite-wide settings: Hypothesis profiles and shared fixtures (``run``, ``netns``).

``GOSSAMER_HYPOTHESIS_PROFILE=thorough`` runs many more examples locally.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

from gossamer.testing.aio import Runner, make_runner

settings.register_profile(
    "default", max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "thorough", max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("GOSSAMER_HYPOTHESIS_PROFILE", "default"))

# Multi-host network-namespace fixtures (gossamer.testing.pytest_plugin).
pytest_plugins = ["gossamer.testing.pytest_plugin"]


@pytest.fixture(params=[True, False], ids=["uvloop", "asyncio"])
def run(request: pytest.FixtureRequest) -> Runner:
    """Runs a test coroutine on a fresh loop of each kind (every driver test runs on
    uvloop and on the default loop), bounded in time."""
    if request.param:
        pytest.importorskip("uvloop")
    return make_runner(use_uvloop=request.param)
