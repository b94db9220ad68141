"""Spark sessions for the analysis: local, a cluster master, or Spark Connect.

Local sessions get settings that suit trace analysis on one machine (few shuffle
partitions, no UI, UTC); a cluster keeps its own defaults, with adaptive query
execution (on since Spark 3.2) coalescing small shuffles.

A local session for a *small* run (``SMALL_RUN_BYTES`` of traces or less, the size
of a lab demo) stops paying for what small data do not need. There, a query's cost
is not its rows but its fixed costs: planning, compiling generated code, the JVM's
own just-in-time compiler. So it gets one shuffle partition, no adaptive
re-planning, interpreted expressions instead of generated code, joins without
broadcasts (each broadcast is a Spark job of its own), small batches in the
in-memory cache, and a JVM that starts fast (client compiler only, shared class
data, serial collector). Measured on the demo: about half the CPU time of the
general settings (``docs/benchmarks.md``).

A classic session's JVM writes its log (log4j) and anything it prints on its
standard error into ``log_file`` when one is given, so the console shows only the
command's own output.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

from pyspark.errors import PySparkException
from pyspark.sql import SparkSession

from gossamer.errors import ConfigError

try:
    from py4j.protocol import Py4JError  # type: ignore[import-untyped]

    _SPARK_ERRORS: tuple[type[BaseException], ...] = (PySparkException, Py4JError)
except ImportError:  # pragma: no cover - a Spark Connect-only installation
    _SPARK_ERRORS = (PySparkException,)

__all__ = [
    "SMALL_RUN_BYTES",
    "active_session",
    "build_session",
    "is_spark_error",
    "session_settings",
]

#: Runs with at most this many bytes of traces get the small-run settings (a lab
#: demo has about 4 MB; 1 M events about 140 MB).
SMALL_RUN_BYTES = 32 * 1024 * 1024

#: JVM options of a small run's local session: the client compiler only (the
#: optimising one would spend more CPU compiling than a small run takes), class data
#: sharing, and the serial collector (no parallel collector threads to start).
_FAST_START_JVM = "-XX:TieredStopAtLevel=1 -Xshare:auto -XX:+UseSerialGC"

#: log4j2 configuration of a session that logs to a file: everything at WARN and
#: above, one line each, nothing on the console.
_LOG4J2 = """\
rootLogger.level = warn
rootLogger.appenderRef.file.ref = file
appender.file.type = File
appender.file.name = file
appender.file.fileName = {path}
appender.file.append = true
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = %d{{yy/MM/dd HH:mm:ss}} %p %c{{1}}: %m%n%ex
"""


def active_session() -> SparkSession | None:
    """The session already running in this process, if any (tests share one)."""
    return SparkSession.getActiveSession()


def build_session(
    *,
    master: str | None = None,
    remote: str | None = None,
    conf: Mapping[str, str] | None = None,
    app_name: str = "gossamer-analyze",
    small: bool = False,
    log_file: str | None = None,
) -> SparkSession:
    """A new session: ``local[*]`` by default, ``master`` (a cluster URL) or ``remote``.

    ``small``: the run is small (see the module docstring; local sessions only).
    ``log_file``: a local file that receives the JVM's log and standard error
    (classic sessions only; without one, only errors are logged, to the console).
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
    settings = session_settings(
        master=master, remote=remote, cores=os.cpu_count() or 2, small=small
    )
    if log_file and not remote:
        config = Path(log_file).with_suffix(".log4j2.properties")
        config.parent.mkdir(parents=True, exist_ok=True)
        config.write_text(_LOG4J2.format(path=Path(log_file).resolve()), encoding="utf-8")
        java = settings.get("spark.driver.extraJavaOptions", "")
        settings["spark.driver.extraJavaOptions"] = (
            f"{java} -Dlog4j2.configurationFile={config.resolve()}".strip()
        )
    settings.update(conf or {})
    for key, value in settings.items():
        builder = builder.config(key, value)
    if remote:
        return builder.getOrCreate()
    if not log_file:
        spark = builder.getOrCreate()
        spark.sparkContext.setLogLevel("ERROR")
        return spark
    with _stderr_into(log_file):
        return builder.getOrCreate()


@contextlib.contextmanager
def _stderr_into(log_file: str) -> Iterator[None]:
    """Point file descriptor 2 at ``log_file`` while the JVM starts (it inherits it).

    The JVM prints a few lines of its own on its standard error before any logging
    is configured (incubator modules, the launcher's notes); it keeps the file
    descriptor it started with, so these and any later ones land in the log file.
    """
    with open(log_file, "ab") as log:
        saved = os.dup(2)
        try:
            os.dup2(log.fileno(), 2)
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def session_settings(
    *, master: str | None, remote: str | None, cores: int, small: bool = False
) -> dict[str, str]:
    """The settings ``build_session`` gives a new session before the caller's ``conf``.

    Always UTC. For a classic session: no web UI and no console progress bars (they
    would interleave with the command's own output), local files read and written
    without checksum side files, partitioned Parquet written without a sort; in
    local mode, Python workers running this interpreter, shuffle partitions sized to
    the machine's ``cores`` and a 2 GB driver, or for a ``small`` run the small-run
    settings of the module docstring.
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
    # The conversion writes one file per (layer, kind) and task: with a writer open
    # for each, a task need not sort its rows by partition first (a run has a few
    # dozen kinds; past this many, Spark falls back to sorting).
    settings["spark.sql.maxConcurrentOutputFileWriters"] = "64"
    if (master or "local[*]").startswith("local"):
        # The Python workers (the conversion of a local run runs there) use this
        # interpreter, which has gossamer and pyarrow, not whatever python3 is first
        # on the PATH.
        settings["spark.pyspark.python"] = sys.executable
        settings["spark.sql.shuffle.partitions"] = str(max(4, 2 * cores))
        settings["spark.driver.memory"] = "2g"
        if small:
            settings.update(_SMALL_RUN)
    return settings


#: Settings of a small run's local session (see the module docstring).
_SMALL_RUN = {
    "spark.sql.shuffle.partitions": "1",
    "spark.sql.adaptive.enabled": "false",
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
    "spark.driver.extraJavaOptions": _FAST_START_JVM,
    # A small run is kept in memory sorted by layer and kind (``load.load_in_memory``):
    # batches of this many rows let a scan of a few kinds skip every other batch by
    # its statistics, where one batch of 10,000 (the default) would hold them all.
    "spark.sql.inMemoryColumnarStorage.batchSize": "1000",
    # No broadcast joins: each broadcast is a Spark job of its own (collect, then
    # broadcast), where a shuffled hash join of a few thousand rows is one more stage
    # of the same job. The checks' broadcast hints are for large runs; here they are
    # ignored. Measured on the demo: a quarter of the jobs (100 -> 24 for the checks).
    "spark.sql.autoBroadcastJoinThreshold": "-1",
    "spark.sql.optimizer.disableHints": "true",
    "spark.sql.join.preferSortMergeJoin": "false",
}


def is_spark_error(exc: BaseException) -> bool:
    """True for errors raised by Spark (a bad URI, a lost cluster), as opposed to bugs."""
    return isinstance(exc, _SPARK_ERRORS)
