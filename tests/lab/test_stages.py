"""The lab's stages on their own: the plan, the fault timeline, the run directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from gossamer.errors import ConfigError
from gossamer.faults import Crash, Partition
from gossamer.lab.inject import timeline
from gossamer.lab.plan import LabRequest, plan
from gossamer.lab.rundir import prepare_out
from gossamer.lab.scenarios import FaultSchedule


def test_timeline_orders_heals_crashes_then_cuts() -> None:
    cut = Partition(hosts=("h2",), start=2.0, end=4.0)
    crash = Crash(host="h1", at=4.0)
    again = Partition(hosts=("h3",), start=4.0, end=5.0)
    actions = timeline(FaultSchedule(crashes=(crash,), partitions=(again, cut)))
    assert [(a.at, a.fault, a.heal) for a in actions] == [
        (2.0, cut, False),
        (4.0, cut, True),
        (4.0, crash, False),
        (4.0, again, False),
        (5.0, again, True),
    ]


def test_the_plan_takes_the_demo_faults_unless_told_otherwise(tmp_path: Path) -> None:
    demo = plan(LabRequest(scenario="demo", hosts=None, out=tmp_path))
    assert demo.ids == ("h1", "h2", "h3", "h4", "h5", "h6")
    assert demo.faults.crashes == (Crash(host="h1", at=13.0),)
    assert demo.duration == 24.0 and demo.linger == 4.0
    mine = plan(
        LabRequest(
            scenario="demo", hosts=3, out=tmp_path, drop=0.0, crashes=(Crash(host="h3", at=1),)
        )
    )
    assert mine.faults.crashes == (Crash(host="h3", at=1),) and mine.faults.partitions == ()
    assert mine.faults.drop == 0.0 and mine.faults.delay_ms == 20.0
    assert not tmp_path.joinpath("config").exists()  # planning creates nothing


def test_the_run_directory_is_new_or_empty(tmp_path: Path) -> None:
    prepare_out(tmp_path / "run")
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["config", "logs", "state"]
    with pytest.raises(ConfigError, match="is not empty"):
        prepare_out(tmp_path / "run")
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match="is not a directory"):
        prepare_out(tmp_path / "file")
