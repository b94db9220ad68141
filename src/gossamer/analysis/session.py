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

Such a session also keeps the JVM's classes in a class data archive (AppCDS, see
``ClassArchive``): a JVM that starts from it maps the ten thousand or so classes a
Spark session loads instead of reading, parsing and verifying each from its jar,
which is about half the CPU time of starting a session and reading a small run.
The first analysis writes the archive when its JVM exits (``stop_session``); later
ones start from it.

A classic session's JVM writes its log (log4j) and anything it prints on its
standard error into ``log_file`` when one is given, so the console shows only the
command's own output.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
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
    "CLASS_ARCHIVE_ENV",
    "SMALL_RUN_BYTES",
    "ClassArchive",
    "active_session",
    "build_session",
    "export_worker_python",
    "is_spark_error",
    "session_settings",
    "stop_session",
]

#: Runs with at most this many bytes of traces get the small-run settings (a lab
#: demo has about 4 MB; 1 M events about 140 MB).
SMALL_RUN_BYTES = 32 * 1024 * 1024

#: JVM option of every local session: the JVM's own warnings (unified logging) go to
#: its standard error, which a session with a log file sends there, not to its standard
#: output, the console. A JVM writing a class archive as it exits warns there of every
#: class it cannot archive: some 800 lines on the first analysis of a machine.
_JVM_WARNINGS_TO_STDERR = "-Xlog:disable -Xlog:all=warning:stderr"

#: JVM options of a small run's local session: the client compiler only (the
#: optimising one would spend more CPU compiling than a small run takes), class data
#: sharing, and the serial collector (no parallel collector threads to start).
_FAST_START_JVM = f"{_JVM_WARNINGS_TO_STDERR} -XX:TieredStopAtLevel=1 -Xshare:auto -XX:+UseSerialGC"

#: Environment variable: the directory of the JVM class archives of small runs' sessions
#: (default ``$XDG_CACHE_HOME/gossamer`` or ``~/.cache/gossamer``), or ``off`` for none.
CLASS_ARCHIVE_ENV = "GOSSAMER_SPARK_CLASS_ARCHIVE"
#: Seconds ``stop_session`` waits for a JVM to write its class archive and exit.
_ARCHIVE_WAIT = 120.0

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
    class_archive: bool = False,
) -> SparkSession:
    """A new session: ``local[*]`` by default, ``master`` (a cluster URL) or ``remote``.

    ``small``: the run is small (see the module docstring; local sessions only).
    ``log_file``: a local file that receives the JVM's log and standard error
    (classic sessions only; without one, only errors are logged, to the console).
    ``class_archive``: a small run's local JVM starts from the class archive
    (``ClassArchive``), or writes it as it exits: the caller then stops the session
    with ``stop_session``.
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
    # Only a small run's own local JVM (the one its options are for) gets an archive.
    archive = None
    local = not remote and (master or "local[*]").startswith("local")
    if class_archive and small and local and "spark.driver.extraJavaOptions" not in (conf or {}):
        java = settings.get("spark.driver.extraJavaOptions", "")
        archive = ClassArchive.find(java)
        if archive is not None:
            settings["spark.driver.extraJavaOptions"] = f"{java} {archive.jvm_option()}".strip()
    if log_file and not remote:
        config = Path(log_file).with_suffix(".log4j2.properties")
        config.parent.mkdir(parents=True, exist_ok=True)
        config.write_text(_LOG4J2.format(path=Path(log_file).resolve()), encoding="utf-8")
        java = settings.get("spark.driver.extraJavaOptions", "")
        settings["spark.driver.extraJavaOptions"] = (
            f"{java} {jvm_path_option('-Dlog4j2.configurationFile=', config.resolve())}".strip()
        )
    settings.update(conf or {})
    export_worker_python(settings)
    for key, value in settings.items():
        builder = builder.config(key, value)
    if remote:
        return builder.getOrCreate()
    from pyspark import SparkContext  # noqa: PLC0415

    # Only a JVM started now gets the options (a running one is reused as it is).
    new_jvm = SparkContext._gateway is None
    if not log_file:
        spark = builder.getOrCreate()
        spark.sparkContext.setLogLevel("ERROR")
    else:
        with _stderr_into(log_file):
            spark = builder.getOrCreate()
    if new_jvm and archive is not None and not archive.exists():
        _DUMPING[id(spark)] = archive
    return spark


#: Sessions whose JVM writes a class archive when it exits (``stop_session``).
_DUMPING: dict[int, ClassArchive] = {}


@dataclass(frozen=True, slots=True)
class ClassArchive:
    """A JVM class data archive (AppCDS) for one Spark installation, JVM and options.

    ``path`` is named after a hash of what the archive depends on (the Java
    executable, Spark's jars, the JVM options), so an upgrade starts a new one; the
    JVM also checks the archive and runs without it, after a warning in its log, if
    it does not match. A JVM without an archive writes one to ``pending`` (its own
    name: concurrent first analyses do not collide) when it exits, and
    ``stop_session`` moves it into place.
    """

    path: Path
    pending: Path

    @staticmethod
    def find(java_options: str) -> ClassArchive | None:
        """The archive for sessions with these JVM options, or None when disabled."""
        where = os.environ.get(CLASS_ARCHIVE_ENV, "")
        if where.lower() == "off":
            return None
        if not where:
            cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
            where = str(Path(cache) / "gossamer")
        key = hashlib.sha256(_installation(java_options).encode()).hexdigest()[:16]
        path = Path(where) / f"spark-classes-{key}.jsa"
        for stale in path.parent.glob(f"{path.name}.*.tmp"):
            # Left by a process that ended before its JVM did (killed, or a crash).
            writer = stale.suffixes[-2].lstrip(".")
            if writer.isdigit() and not _alive(int(writer)):
                stale.unlink(missing_ok=True)
        return ClassArchive(path=path, pending=path.with_name(f"{path.name}.{os.getpid()}.tmp"))

    def exists(self) -> bool:
        return self.path.is_file() and self.path.stat().st_size > 0

    def jvm_option(self) -> str:
        """Start from the archive, or write one at exit when there is none yet."""
        if self.exists():
            return jvm_path_option("-XX:SharedArchiveFile=", self.path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        return jvm_path_option("-XX:ArchiveClassesAtExit=", self.pending)


def jvm_path_option(option: str, path: Path) -> str:
    """``option`` and ``path`` as one word of ``spark.driver.extraJavaOptions``, which
    Spark's launcher splits at white space outside double quotes: a path with a space (an
    ``--out`` directory, a home directory) is quoted, its quotes and backslashes escaped."""
    text = str(path)
    if any(c.isspace() or c in "\"'\\" for c in text):
        text = '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return f"{option}{text}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _installation(java_options: str) -> str:
    """What a class archive depends on: the JVM, Spark's jars and the JVM options."""
    import pyspark  # noqa: PLC0415

    home = Path(os.environ.get("SPARK_HOME") or Path(pyspark.__file__).parent)
    jars = sorted((j.name, j.stat().st_size) for j in (home / "jars").glob("*.jar"))
    java_home = os.environ.get("JAVA_HOME")
    java = str(Path(java_home) / "bin" / "java") if java_home else shutil.which("java") or ""
    return repr((pyspark.__version__, os.path.realpath(java) if java else "", jars, java_options))


def stop_session(spark: SparkSession) -> None:
    """Stop a session ``build_session`` started; if its JVM is to write a class archive,
    end the JVM (it writes the archive as it exits) and put the archive in place.

    The JVM of a local PySpark session exits when its standard input closes. A later
    session in this process then starts a new JVM.
    """
    archive = _DUMPING.pop(id(spark), None)
    spark.stop()
    if archive is None:
        return
    from pyspark import SparkContext  # noqa: PLC0415

    gateway = SparkContext._gateway
    proc = getattr(gateway, "proc", None)
    if proc is None or proc.stdin is None:
        return
    with contextlib.suppress(OSError):
        gateway.shutdown()  # type: ignore[union-attr]
    SparkContext._gateway = None
    SparkContext._jvm = None
    with contextlib.suppress(OSError):
        proc.stdin.close()
    try:
        proc.wait(timeout=_ARCHIVE_WAIT)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    if archive.pending.is_file() and archive.pending.stat().st_size > 0 and proc.returncode == 0:
        os.replace(archive.pending, archive.path)
    else:
        archive.pending.unlink(missing_ok=True)


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
    the machine's ``cores``, a 2 GB driver whose JVM warns on its standard error
    (``_JVM_WARNINGS_TO_STDERR``), or for a ``small`` run the small-run
    settings of the module docstring.
    """
    settings = {"spark.sql.session.timeZone": "UTC"}
    if remote:
        return settings
    settings["spark.ui.enabled"] = "false"
    # No Python call site recorded for each DataFrame operation: PySpark's "DataFrame
    # debugging" makes about eight round trips to the JVM per call to name the caller
    # in a failing query's message, which is half of the round trips building the
    # checks' queries (measured on the demo: 26,354 -> 13,500, 11.0 -> 6.7 s). The
    # queries are gossamer's own; a failure still reports Spark's error and the plan.
    settings["spark.python.sql.dataFrameDebugging.enabled"] = "false"
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
        settings["spark.driver.extraJavaOptions"] = _JVM_WARNINGS_TO_STDERR
        if small:
            settings.update(_SMALL_RUN)
    return settings


def export_worker_python(settings: Mapping[str, str]) -> None:
    """Make ``settings``' ``spark.pyspark.python`` (``session_settings`` gives a local
    session this interpreter) the Python workers' interpreter of the sessions this process
    creates from now on. PySpark's driver names it from ``PYSPARK_PYTHON`` alone, not from
    the configuration ("python3" on the PATH otherwise, which may lack gossamer and
    pyarrow); a ``PYSPARK_PYTHON`` already set is kept."""
    if "spark.pyspark.python" in settings:
        os.environ.setdefault("PYSPARK_PYTHON", settings["spark.pyspark.python"])


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
