"""The command line, end to end through main(argv) and the installed console script."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gossamer import __version__
from gossamer.cli.main import main


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out.strip() == f"gossamer {__version__}"


def test_sim_list_shows_scenarios_and_parameters(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sim", "--list"]) == 0
    out = capsys.readouterr().out
    assert "\nping: " in f"\n{out}"
    assert "--param count=" in out and "(default 10)" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["sim", "--scenario", "nope", "--out", "x"], "unknown scenario 'nope'"),
        (
            ["sim", "--scenario", "ping", "--param", "count=abc", "--out", "x"],
            "--param count=abc: expected an integer",
        ),
        (["sim", "--scenario", "ping", "--param", "count", "--out", "x"], "is not KEY=VALUE"),
        (["sim", "--scenario", "ping", "--drop", "2", "--out", "x"], "drop must be a probability"),
        (["sim", "--scenario", "ping", "--nodes", "0", "--out", "x"], "--nodes must be between"),
        (["sim", "--scenario", "ping", "--nodes", "many", "--out", "x"], "invalid int value"),
        (["sim", "--scenario", "ping"], "--out DIR is required"),
        (["frobnicate"], "invalid choice"),
        (["trace", "summary", "/nonexistent"], "is not a directory"),
    ],
)
def test_errors_are_one_line_with_exit_code_2(
    argv: list[str],
    message: str,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err
    assert not (tmp_path / "x").exists()


def test_sim_then_trace_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    assert (
        main(
            [
                "sim",
                "--scenario",
                "ping",
                "--nodes",
                "4",
                "--seed",
                "1",
                "--drop",
                "0.3",
                "--param",
                "count=5",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    meta = json.loads((out / "run.json").read_text())
    assert meta["fault_counts"]["drop"] > 0 and meta["params"]["count"] == 5
    capsys.readouterr()
    with (out / "n0.jsonl").open("ab") as handle:
        handle.write(b"garbage\n")
    assert main(["trace", "summary", str(out)]) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith("4 node files, ")
    assert "demo/send" in captured.out and "net/fault" in captured.out
    assert "n0.jsonl" in captured.err and "not JSON" in captured.err


def test_console_script_is_installed() -> None:
    # The demo itself (`./run demo`, the lab's demo scenario) is tested in tests/lab.
    exe = Path(sys.executable).with_name("gossamer")
    assert exe.exists(), "the gossamer console script is not installed next to the interpreter"
    proc = subprocess.run(
        [exe, "--version"], capture_output=True, text=True, check=True, timeout=60
    )
    assert __version__ in proc.stdout
