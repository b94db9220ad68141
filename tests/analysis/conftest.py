"""One small Spark session shared by every analysis test (DESIGN.md convention 6)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    pytest.importorskip("pyspark", reason="pyspark is an optional extra (install gossamer[spark])")
    from pyspark.sql import SparkSession

    from gossamer.analysis.session import export_worker_python, session_settings

    # What `gossamer analyze` gets, scaled down: one core, one shuffle partition.
    settings = session_settings(master="local[1]", remote=None, cores=1)
    settings.update({"spark.sql.shuffle.partitions": "1", "spark.driver.memory": "1g"})
    export_worker_python(settings)
    builder = SparkSession.builder.master("local[1]").appName("gossamer-tests")
    for key, value in settings.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    yield session
    session.stop()
