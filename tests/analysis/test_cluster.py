"""The pipeline on a real Spark standalone cluster: a master and a worker on 127.0.0.1.

Both daemons are started from the installed PySpark (``spark-class``), the analysis
runs as ``python -m gossamer.cli.analyze_cmd --master spark://...`` in its own
process (one SparkContext per process: the shared test session stays untouched),
and the test proves that the work ran in an executor the worker launched. Every
process started here is stopped by its own process group id at the end.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from gossamer.testing import free_port

pyspark = pytest.importorskip(
    "pyspark", reason="pyspark is an optional extra (install gossamer[spark])"
)

pytestmark = [pytest.mark.spark, pytest.mark.slow]

GOLDEN = Path(__file__).parent / "golden" / "ping-n4-s7"
HOST = "127.0.0.1"


def wait_for(what: str, check: object, timeout: float, logs: list[Path]) -> object:
    assert callable(check)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = check()
        if result:
            return result
        time.sleep(0.5)
    tails = "\n".join(f"--- {p}\n{p.read_text()[-3000:]}" for p in logs if p.exists())
    pytest.fail(f"timed out waiting for {what}\n{tails}")


def master_state(ui_port: int) -> dict[str, object] | None:
    try:
        with urllib.request.urlopen(f"http://{HOST}:{ui_port}/json/", timeout=2) as r:
            state: dict[str, object] = json.loads(r.read())
            return state
    except OSError:
        return None


class Daemons:
    """The master and worker processes, stopped by process group at teardown."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.procs: list[subprocess.Popen[bytes]] = []
        self.logs: list[Path] = []
        home = Path(pyspark.__file__).parent
        self.spark_class = home / "bin" / "spark-class"
        self.env = {
            **os.environ,
            "SPARK_HOME": str(home),
            "SPARK_LOCAL_IP": HOST,
            "SPARK_LOG_DIR": str(tmp / "logs"),
            "SPARK_WORKER_DIR": str(tmp / "work"),
            "PYSPARK_PYTHON": sys.executable,
        }

    def start(self, name: str, *args: str) -> None:
        log = self.tmp / f"{name}.log"
        self.logs.append(log)
        with open(log, "wb") as handle:
            self.procs.append(
                subprocess.Popen(
                    [str(self.spark_class), *args],
                    stdout=handle,
                    stderr=subprocess.STDOUT,
                    env=self.env,
                    start_new_session=True,  # its own process group: we stop exactly it
                )
            )

    def stop(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in reversed(self.procs):
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[str, int, Path]]:
    if shutil.which("java") is None and "JAVA_HOME" not in os.environ:
        pytest.skip("no Java runtime for a Spark cluster")
    daemons = Daemons(tmp_path)
    port, ui = free_port(), free_port()
    daemons.start(
        "master",
        "org.apache.spark.deploy.master.Master",
        "--host",
        HOST,
        "--port",
        str(port),
        "--webui-port",
        str(ui),
    )
    try:
        wait_for("the master", lambda: master_state(ui), 90, daemons.logs)
        daemons.start(
            "worker",
            "org.apache.spark.deploy.worker.Worker",
            f"spark://{HOST}:{port}",
            "--host",
            HOST,
            "--port",
            str(free_port()),
            "--webui-port",
            str(free_port()),
            "--cores",
            "1",
            "--memory",
            "1g",
            "--work-dir",
            str(tmp_path / "work"),
        )
        wait_for(
            "the worker to register",
            lambda: (master_state(ui) or {}).get("aliveworkers") == 1,
            90,
            daemons.logs,
        )
        yield f"spark://{HOST}:{port}", ui, tmp_path / "work"
    finally:
        daemons.stop()


def test_the_analysis_runs_on_remote_executors(
    cluster: tuple[str, int, Path], tmp_path: Path
) -> None:
    master, ui, work = cluster
    run = tmp_path / "run"
    shutil.copytree(GOLDEN, run)
    out = tmp_path / "report"
    env = {**os.environ, "SPARK_LOCAL_IP": HOST, "PYSPARK_PYTHON": sys.executable}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "gossamer.cli.analyze_cmd",
            str(run),
            "--master",
            master,
            "--out",
            str(out),
            "--conf",
            "spark.executor.memory=512m",
            "--conf",
            "spark.driver.memory=1g",
            "--conf",
            f"spark.driver.host={HOST}",
            "--conf",
            f"spark.driver.bindAddress={HOST}",
            "--conf",
            "spark.sql.shuffle.partitions=2",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=280,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr[-4000:]
    assert "verdict: PASS" in proc.stdout
    summary = json.loads((out / "summary.json").read_text())
    assert summary["spark"]["master"] == master
    assert summary["input"]["events"] == 178
    # The work ran in an executor that the worker launched for this application.
    app_id = summary["spark"]["app_id"]
    assert app_id.startswith("app-")
    executors = list((work / app_id).iterdir())
    assert executors, f"no executor directory under {work / app_id}"
    assert any((e / "stderr").stat().st_size > 0 for e in executors)
    state = master_state(ui) or {}
    finished = [a for a in state.get("completedapps", []) if a["id"] == app_id]  # type: ignore[attr-defined]
    assert finished and finished[0]["cores"] >= 1
