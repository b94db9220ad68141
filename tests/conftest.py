"""Suite-wide settings: Hypothesis profiles and shared fixtures (``run``, ``netns``,
``spark``: one small Spark session shared by every test that asks for it, DESIGN.md
convention 6).

``GOSSAMER_HYPOTHESIS_PROFILE=thorough`` runs many more examples locally.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

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


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    pytest.importorskip("pyspark", reason="pyspark is an optional extra (install gossamer[spark])")
    from pyspark.sql import SparkSession

    from gossamer.analysis.session import export_worker_python, session_settings

    # What `gossamer analyze` gets for a run of a lab's size (the tests' frames are
    # smaller still), on one core; but the JVM keeps both just-in-time compilers, as it
    # serves the whole suite rather than one analysis.
    config = session_settings(master="local[1]", remote=None, cores=1, small=True)
    general = session_settings(master="local[1]", remote=None, cores=1)
    config.update(
        {
            "spark.driver.memory": "1g",
            "spark.driver.extraJavaOptions": general["spark.driver.extraJavaOptions"],
        }
    )
    export_worker_python(config)
    builder = SparkSession.builder.master("local[1]").appName("gossamer-tests")
    for key, value in config.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    yield session
    session.stop()
