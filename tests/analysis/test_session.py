"""Tests for gossamer.analysis.session: the settings every new session gets."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("pyspark", reason="pyspark is an optional extra (install gossamer[spark])")

from gossamer.analysis.session import (
    CLASS_ARCHIVE_ENV,
    ClassArchive,
    build_session,
    session_settings,
)
from gossamer.errors import ConfigError


def test_local_sessions_have_no_ui_or_progress_bars_and_fit_the_machine() -> None:
    got = session_settings(master=None, remote=None, cores=8)
    assert got["spark.ui.enabled"] == "false"
    assert got["spark.ui.showConsoleProgress"] == "false"
    assert got["spark.sql.shuffle.partitions"] == "16"
    assert got["spark.sql.session.timeZone"] == "UTC"
    # Python workers (the conversion of a local run) run this interpreter.
    assert got["spark.pyspark.python"] == sys.executable
    # The JVM's own warnings go to its standard error (a log file), not the console.
    assert got["spark.driver.extraJavaOptions"] == "-Xlog:disable -Xlog:all=warning:stderr"
    small = session_settings(master=None, remote=None, cores=8, small=True)
    assert small["spark.driver.extraJavaOptions"].startswith(got["spark.driver.extraJavaOptions"])


def test_python_workers_run_this_interpreter(spark: object) -> None:
    # The conversion of a local run imports gossamer and pyarrow in the workers: they
    # must run this interpreter, not whatever python3 is first on the PATH.
    def where(_: object) -> tuple[str, str]:
        import pyarrow

        return sys.executable, pyarrow.__version__

    got = spark.sparkContext.parallelize([0], 1).map(where).collect()  # type: ignore[attr-defined]
    assert got[0][0] == sys.executable


def test_cluster_sessions_leave_sizing_to_the_cluster() -> None:
    got = session_settings(master="spark://host:7077", remote=None, cores=2)
    assert got["spark.ui.showConsoleProgress"] == "false"
    assert "spark.sql.shuffle.partitions" not in got and "spark.driver.memory" not in got


def test_spark_connect_sessions_only_get_the_time_zone() -> None:
    assert session_settings(master=None, remote="sc://h:15002", cores=2) == {
        "spark.sql.session.timeZone": "UTC"
    }


def test_master_and_remote_together_are_refused() -> None:
    with pytest.raises(ConfigError, match="not both"):
        build_session(master="local[1]", remote="sc://h:15002")


def test_local_files_are_read_without_checksum_side_files() -> None:
    # Hadoop's checksummed local file system cannot open "10.0.0.1:29999.jsonl".
    got = session_settings(master=None, remote=None, cores=2)
    assert got["spark.hadoop.fs.file.impl"] == "org.apache.hadoop.fs.RawLocalFileSystem"


def test_small_local_runs_skip_what_small_data_do_not_need() -> None:
    got = session_settings(master=None, remote=None, cores=2, small=True)
    assert got["spark.sql.shuffle.partitions"] == "1"
    assert got["spark.sql.adaptive.enabled"] == "false"
    assert got["spark.sql.codegen.wholeStage"] == "false"
    assert "-XX:TieredStopAtLevel=1" in got["spark.driver.extraJavaOptions"]
    assert got["spark.sql.autoBroadcastJoinThreshold"] == "-1"
    assert got["spark.sql.inMemoryColumnarStorage.batchSize"] == "1000"
    # A cluster sizes itself whatever the run's size.
    cluster = session_settings(master="spark://host:7077", remote=None, cores=2, small=True)
    assert "spark.sql.adaptive.enabled" not in cluster
    assert "spark.driver.extraJavaOptions" not in cluster


def test_a_class_archive_is_written_once_then_started_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CLASS_ARCHIVE_ENV, str(tmp_path))
    archive = ClassArchive.find("-XX:TieredStopAtLevel=1")
    assert archive is not None and archive.path.parent == tmp_path
    # None yet: the JVM writes one when it exits, under a name of this process's own.
    assert archive.jvm_option() == f"-XX:ArchiveClassesAtExit={archive.pending}"
    assert str(os.getpid()) in archive.pending.name
    archive.path.write_bytes(b"archive")
    assert archive.jvm_option() == f"-XX:SharedArchiveFile={archive.path}"
    # Other JVM options, another archive; the same ones, the same archive.
    assert ClassArchive.find("-XX:+UseSerialGC").path != archive.path  # type: ignore[union-attr]
    assert ClassArchive.find("-XX:TieredStopAtLevel=1") == archive


def test_a_class_archive_left_half_written_by_a_dead_process_is_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CLASS_ARCHIVE_ENV, str(tmp_path))
    archive = ClassArchive.find("")
    assert archive is not None
    gone = archive.path.with_name(f"{archive.path.name}.{_ended_pid()}.tmp")
    mine = archive.pending
    gone.write_bytes(b"half")
    mine.write_bytes(b"half")
    ClassArchive.find("")
    assert not gone.exists() and mine.exists()


def _ended_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_class_archives_can_be_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CLASS_ARCHIVE_ENV, "off")
    assert ClassArchive.find("") is None
