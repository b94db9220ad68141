"""Spark sessions for the analysis: local, a cluster master, or Spark Connect.

Local sessions get settings that suit trace analysis on one machine (few shuffle
partitions, no UI, UTC); a cluster keeps its own defaults, with adaptive query
execution (on since Spark 3.2) coalescing small shuffles.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from pyspark.errors import PySparkException
from pyspark.sql import SparkSession

from gossamer.errors import ConfigError

try:
    from py4j.protocol import Py4JError  # type: ignore[import-untyped]

    _SPARK_ERRORS: tuple[type[BaseException], ...] = (PySparkException, Py4JError)
except ImportError:  # pragma: no cover - a Spark Connect-only installation
    _SPARK_ERRORS = (PySparkException,)

__all__ = ["active_session", "build_session", "is_spark_error", "session_settings"]


def active_session() -> SparkSession | None:
    """The session already running in this process, if any (tests share one)."""
    return SparkSession.getActiveSession()


def build_session(
    *,
    master: str | None = None,
    remote: str | None = None,
    conf: Mapping[str, str] | None = None,
    app_name: str = "gossamer-analyze",
) -> SparkSession:
    """A new session: ``local[*]`` by default, ``master`` (a cluster URL) or ``remote``.

    Raises ``ConfigError`` when both are given, or when Spark Connect's client
    libraries are missing.
    """
    if master and remote:
        raise ConfigError("give --master or --remote, not both")
    builder = SparkSession.builder.appName(app_name)
    if remote:
        try:
            # Spark Connect's client needs grpcio, pandas and pyarrow, which classic
            # PySpark does not: check for them only when asked to connect.
            import pyspark.sql.connect.session  # noqa: F401, PLC0415
        except ImportError as exc:
            raise ConfigError(
                f"--remote needs the Spark Connect client ({exc.name} is missing): "
                "pip install 'pyspark[connect]'"
            ) from None
        builder = builder.remote(remote)
    else:
        builder = builder.master(master or "local[*]")
    settings = session_settings(master=master, remote=remote, cores=os.cpu_count() or 2)
    settings.update(conf or {})
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    if not remote:
        spark.sparkContext.setLogLevel("ERROR")
    return spark


def session_settings(*, master: str | None, remote: str | None, cores: int) -> dict[str, str]:
    """The settings ``build_session`` gives a new session before the caller's ``conf``.

    Always UTC. For a classic session: no web UI and no console progress bars (they
    would interleave with the command's own output), local files read and written
    without checksum side files; in local mode, shuffle
    partitions sized to the machine's ``cores`` and a 2 GB driver.
    """
    settings = {"spark.sql.session.timeZone": "UTC"}
    if remote:
        return settings
    settings["spark.ui.enabled"] = "false"
    settings["spark.ui.showConsoleProgress"] = "false"
    # Local files without Hadoop's .crc side files: its checksummed file system builds
    # the side file's name as a relative path, which fails on a colon, and trace files
    # are named after node ids such as ``10.0.0.1:29999``.
    settings["spark.hadoop.fs.file.impl"] = "org.apache.hadoop.fs.RawLocalFileSystem"
    if (master or "local[*]").startswith("local"):
        settings["spark.sql.shuffle.partitions"] = str(max(4, 2 * cores))
        settings["spark.driver.memory"] = "2g"
    return settings


def is_spark_error(exc: BaseException) -> bool:
    """True for errors raised by Spark (a bad URI, a lost cluster), as opposed to bugs."""
    return isinstance(exc, _SPARK_ERRORS)
