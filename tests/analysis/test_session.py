"""Tests for gossamer.analysis.session: the settings every new session gets."""

from __future__ import annotations

import sys

import pytest

pytest.importorskip("pyspark", reason="pyspark is an optional extra (install gossamer[spark])")

from gossamer.analysis.session import build_session, session_settings
from gossamer.errors import ConfigError


def test_local_sessions_have_no_ui_or_progress_bars_and_fit_the_machine() -> None:
    got = session_settings(master=None, remote=None, cores=8)
    assert got["spark.ui.enabled"] == "false"
    assert got["spark.ui.showConsoleProgress"] == "false"
    assert got["spark.sql.shuffle.partitions"] == "16"
    assert got["spark.sql.session.timeZone"] == "UTC"
    # Python workers (the conversion of a local run) run this interpreter.
    assert got["spark.pyspark.python"] == sys.executable


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
