"""``gossamer lab``: TOML and secrets, the progress display, the CLI, and real runs on loopback.

The runs start real ``gossamer lab app`` processes on 127.0.0.1 (nothing is broadcast or
multicast outside a namespace). The ``spark`` tests run the whole lab, analysis
included: the demo must pass, and a deliberately broken node must make it fail.
"""

from __future__ import annotations

import io
import json
import os
import stat
from pathlib import Path
from typing import Any

import orjson
import pytest

from gossamer.cli import lab_cmd
from gossamer.faults import Crash, Partition
from gossamer.lab import LabError
from gossamer.lab.config import load_config
from gossamer.lab.plan import LabRequest
from gossamer.lab.progress import Progress
from gossamer.lab.rundir import write_config, write_secret
from gossamer.lab.runner import run_lab
from gossamer.trace import read_run

HOST = "127.0.0.1"


def test_configs_are_written_as_the_node_reads_them(tmp_path: Path) -> None:
    key = tmp_path / "cluster.key"
    write_secret(key)
    doc: dict[str, Any] = {
        "node": {
            "id": "h1",
            "run": "r",
            "trace": str(tmp_path / "h1.jsonl"),
            "address": HOST,
            "key_file": str(key),
        },
        "peers": [{"id": "h2", "address": HOST, "ports": {"isis": 7113}}],
        "faults": {"drop": 0.25, "partition": [{"peers": ["h2"], "from": 1.0, "to": 2.0}]},
        "gossip": {"enabled": True},
        "isis": {"enabled": True, "members": ["h1", "h2"], "rate": 1e-3},
    }
    path = tmp_path / "h1.toml"
    written = write_config(path, doc)
    assert load_config(path, env={}) == written
    assert written.faults.partitions[0].peers == ("h2",) and written.isis.rate == 1e-3
    doc["isis"]["rate"] = -1
    with pytest.raises(LabError, match=r"isis\.rate: must be >= 0"):
        write_config(tmp_path / "bad.toml", doc)
    assert not (tmp_path / "bad.toml").exists()


def test_write_secret_is_fresh_private_and_never_overwritten(tmp_path: Path) -> None:
    a, b = tmp_path / "s" / "a.key", tmp_path / "s" / "b.key"
    write_secret(a)
    write_secret(b)
    assert stat.S_IMODE(os.stat(a).st_mode) == 0o600
    assert len(a.read_bytes()) == 32
    assert a.read_bytes() != b.read_bytes()
    with pytest.raises(FileExistsError):
        write_secret(a)


def _progress(tty: bool) -> tuple[Progress, io.StringIO]:
    stream = io.StringIO()
    progress = Progress(
        stream, ["h1", "h2"], start_at=100.0, duration=10.0, linger=2.0, tty=tty, interval=2.0
    )
    return progress, stream


def test_progress_plain_lines_at_an_interval() -> None:
    progress, stream = _progress(tty=False)
    progress.tick(98.0)
    progress.ready("h1")
    progress.update("h2", {"sent": 5, "delivered": 9, "faults": 2, "peers": 1, "t": 1.0})
    progress.update("h1", {"sent": 1, "delivered": True, "faults": "x"})  # ignored figures
    progress.tick(99.0)  # within the interval: nothing
    progress.injected_fault("crash")
    progress.set_state("h2", "crashed")
    progress.tick(101.0)
    progress.note("fault: h2 crashed")
    progress.finish(111.0)
    lines = stream.getvalue().splitlines()
    assert lines[0] == (
        "[starting in  2.0 s] hosts 0/2 up | sent 0 | delivered 0 | faults 0 datagram"
    )
    assert lines[1] == (
        "[  1.0/10 s,  9.0 s left] hosts 1/2 up | sent 6 | delivered 9 | faults 2 datagram, 1 crash"
    )
    assert lines[2] == "fault: h2 crashed"
    assert lines[3].startswith("[workload done, lingering 1.0 s] hosts 1/2 up")
    assert len(lines) == 4
    assert "\r" not in stream.getvalue()


def test_progress_redraws_one_line_on_a_terminal() -> None:
    progress, stream = _progress(tty=True)
    progress.tick(100.5)
    progress.tick(100.6)
    progress.note("fault: partition h1")
    progress.finish(101.0)
    text = stream.getvalue()
    assert text.count("\r") >= 3 and "\x1b[K" in text
    assert "\r\x1b[Kfault: partition h1\n" in text
    assert text.endswith("\n")


def test_lab_list_shows_every_scenario(capsys: pytest.CaptureFixture[str]) -> None:
    assert lab_cmd.main(["list"]) == 0
    out = capsys.readouterr().out
    for name in ("discovery", "gossip", "isis", "snapshot", "link", "gateway", "demo"):
        assert f"\n{name}: " in f"\n{out}"
    assert "--param broken=...  TEST ONLY" in out
    isis = "\n    isis (IsisConfig): ack_delay, batch_bytes, batch_delay, batch_turn, drop_rate"
    assert isis in out
    assert "default faults: --drop 0.02, --delay 20, --crash h1@13, --partition h2@6-8" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["run", "--scenario", "nope"], "unknown scenario 'nope'"),
        (["run", "--scenario", "isis", "--hosts", "0"], "--hosts must be an integer"),
        (["run", "--scenario", "isis", "--hosts", "1"], "needs at least 2 hosts"),
        (["run", "--scenario", "isis", "--crash", "h3"], "expected HOST@SECONDS"),
        (["run", "--scenario", "isis", "--crash", "h9@1"], "no such host"),
        (["run", "--scenario", "isis", "--partition", "h1@3-2"], "FROM must be before TO"),
        (["run", "--scenario", "isis", "--param", "x"], "is not KEY=VALUE"),
        (["run", "--scenario", "isis", "--param", "rate=1"], "has no parameter 'rate'"),
        (["run", "--scenario", "isis", "--param", "isis.rte=1"], "unknown key of IsisConfig"),
        (["run", "--scenario", "isis", "--param", "isis.batch_delay=x"], "expected a number"),
        (["run", "--scenario", "isis", "--drop", "2"], "must be a probability"),
        (["run", "--scenario", "isis", "--hosts", "two"], "invalid int value"),
        (["run", "--scenario", "isis", "--netns", "--loopback"], "not allowed with"),
        (["run", "--hosts", "3"], "the following arguments are required: --scenario"),
        (["walk"], "invalid choice: 'walk'"),
    ],
)
def test_bad_arguments_are_one_line_and_exit_2(
    argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if "--scenario" in argv and "--out" not in argv:
        argv = [*argv, "--out", str(tmp_path / "run")]
    assert lab_cmd.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err
    assert len(err.splitlines()) == 1
    assert not (tmp_path / "run").exists()  # nothing was created


def test_a_used_output_directory_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "old.jsonl").write_text("{}\n")
    argv = ["run", "--scenario", "isis", "--loopback", "--out", str(tmp_path)]
    assert lab_cmd.main(argv) == 2
    assert "is not empty" in capsys.readouterr().err


def _events(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


@pytest.mark.slow
def test_a_short_loopback_run_with_a_crash_and_a_partition(tmp_path: Path) -> None:
    out = tmp_path / "run"
    stream = io.StringIO()
    request = LabRequest(
        scenario="isis",
        hosts=3,
        out=out,
        mode="loopback",
        drop=0.05,
        crashes=(Crash(host="h3", at=3.0),),
        partitions=(Partition(hosts=("h2",), start=1.0, end=2.0),),
        params={
            "duration": "5",
            "linger": "1",
            "isis_rate": "5",
            # Protocol fields reach every node's core (docs/lab.md, "Parameters").
            "isis.batch_delay": "0.002",
            "isis.retransmit_initial": "0.1",
            "discovery.handshake_timeout": "1.5",
        },
        seed=3,
        analyze=False,
    )
    result = run_lab(request, stream)
    text = stream.getvalue()
    assert result.code == 0, text
    assert result.report is None
    assert "fault: h3 crashed (SIGKILL)" in text
    meta = json.loads((out / "run.json").read_text())
    assert meta == result.metadata
    assert meta["scenario"] == "isis" and meta["nodes"] == 3 and meta["seed"] == 3
    assert meta["faults"]["crash"] == ["h3@3"] and meta["faults"]["partition"] == ["h2@1-2"]
    assert meta["lab"]["mode"] == "loopback"
    assert meta["params"]["isis.batch_delay"] == 0.002
    node_config = load_config(out / "config" / "h1.toml", env={})
    assert node_config.isis.protocol["batch_delay"] == 0.002
    assert node_config.isis.protocol["retransmit_initial"] == 0.1
    assert node_config.discovery.protocol["handshake_timeout"] == 1.5
    assert meta["lab"]["unexpected_exits"] == {}
    nodes = meta["summary"]["nodes"]
    assert nodes["h3"]["crashed"] and nodes["h3"]["exit_code"] == -9
    for node in ("h1", "h2"):  # stopped by SIGTERM: done, exit 0
        assert nodes[node]["done"] and nodes[node]["exit_code"] == 0
        assert nodes[node]["sent"] > 0 and nodes[node]["delivered"] > 0
    assert meta["fault_counts"]["crash"] == 1
    assert meta["fault_counts"]["drop"] > 0
    # The crash is the last line of h3's trace, in the trace schema.
    h3 = _events(out / "h3.jsonl")
    assert h3[-1]["layer"] == "net" and h3[-1]["attrs"] == {"fault": "crash"}
    assert h3[-1]["run"] == meta["run"] and h3[-1]["node"] == "h3"
    # Loopback partitions are applied and traced by the nodes themselves.
    h2 = _events(out / "h2.jsonl")
    h2_faults = [e["attrs"]["fault"] for e in h2 if e["layer"] == "net" and e["kind"] == "fault"]
    assert "partition" in h2_faults and "heal" in h2_faults
    # The survivors settled, then stopped cleanly: net/stop, then isis/stop with nothing
    # left unfinished; the crashed h3 has no clean stop.
    settle = meta["lab"]["settle"]
    assert settle["settled"] is True and settle["settle"] == 20.0, text
    assert "lab: settled" in text
    for node in ("h1", "h2"):
        stops = [
            (e["layer"], e["attrs"]) for e in _events(out / f"{node}.jsonl") if e["kind"] == "stop"
        ]
        assert [layer for layer, _ in stops] == ["net", "isis"]
        assert stops[1][1]["held"] == "" and stops[1][1]["outstanding"] == ""
    assert not [e for e in h3 if e["kind"] == "stop"]
    assert stat.S_IMODE(os.stat(out / "secrets" / "cluster.key").st_mode) == 0o600
    assert sorted(p.name for p in (out / "config").iterdir()) == ["h1.toml", "h2.toml", "h3.toml"]
    assert meta["events"] == sum(len(_events(out / f"h{i}.jsonl")) for i in (1, 2, 3))


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.timeout(480)
def test_the_demo_passes_on_loopback(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "demo"
    code = lab_cmd.main(["run", "--scenario", "demo", "--loopback", "--out", str(out)])
    text = capsys.readouterr().out
    assert code == 0, text
    summary = json.loads((out / "analysis" / "summary.json").read_text())
    assert summary["verdict"] == "pass"
    status = {c["name"]: c["status"] for c in summary["checks"]}
    meta = json.loads((out / "run.json").read_text())
    for name in meta["lab"]["expected_checks"]:
        assert status[name] == "pass", name
    assert meta["fault_counts"]["crash"] == 1
    assert meta["fault_counts"]["partition"] >= 1 and meta["fault_counts"]["drop"] > 0
    # The group is on agreed views: the others excluded h2 while it was cut off, and it
    # rejoined as its next incarnation; snapshots completed in more than one view.
    events, _ = read_run(out)
    installs = [e for e in events if e.layer == "views" and e.kind == "view_change"]
    assert any("h2#2" in e.attrs["members"] for e in installs if e.node == "h2")
    views = {
        orjson.loads(e.attrs["state"])["isis"]["agreed"]["view"]
        for e in events
        if e.layer == "snapshot" and e.kind == "local_state"
    }
    assert len(views) > 1, views
    assert f"lab: HTML report: {out.resolve() / 'analysis' / 'report.html'}" in text
    assert (out / "analysis" / "report.html").stat().st_size > 0
    assert "lab: verdict: every property held (exit 0)" in text


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_broken_node_fails_the_lab(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "broken"
    argv = ["run", "--scenario", "isis", "--hosts", "3", "--loopback", "--out", str(out)]
    for param in ("broken=h2", "discovery=off", "duration=4", "linger=2", "isis_rate=5"):
        argv += ["--param", param]
    code = lab_cmd.main(argv)
    text = capsys.readouterr().out
    assert code == 1, text
    summary = json.loads((out / "analysis" / "summary.json").read_text())
    status = {c["name"]: c["status"] for c in summary["checks"]}
    assert status["isis.total_order"] == "fail"
    assert "lab: verdict: a property was VIOLATED (exit 1)" in text


def test_a_node_that_cannot_start_fails_the_run_with_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The lab validates its configs without the environment; the nodes read it.
    monkeypatch.setenv("GOSSAMER__ISIS__RATE", "-1")
    out = tmp_path / "run"
    argv = ["run", "--scenario", "isis", "--hosts", "2", "--loopback", "--out", str(out)]
    assert lab_cmd.main([*argv, "--no-analyze"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("gossamer: error: node h")
    assert "exited with status 2 before it was ready: " in err
    assert "isis.rate" in err
    assert len(err.splitlines()) == 1


def test_lab_without_an_action_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert lab_cmd.main([]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "gossamer lab: choose an action: run, list or app (see gossamer lab --help)"


def test_progress_shows_who_is_still_busy_while_the_group_settles() -> None:
    progress, stream = _progress(tty=False)
    progress.settling({"h1": 3, "h2": None})
    progress.tick(111.0)
    progress.settling({})
    progress.tick(113.0)
    lines = stream.getvalue().splitlines()
    assert lines[0].startswith("[workload done, lingering 1.0 s, 2 node(s) busy, 3 pending]")
    assert lines[1].startswith("[workload done, settling, 0 node(s) busy, 0 pending]")


def test_the_verdict_line_counts_messages_unfinished_at_stop(tmp_path: Path) -> None:
    from gossamer.lab.verdict import conclude, unfinished_at_stop, verdict_line

    (tmp_path / "analysis").mkdir()
    assert unfinished_at_stop(tmp_path) == 0  # no analysis: nothing known
    summary = {"verdict": "pass", "counts": {"pass": 5, "fail": 0, "unfinished": 12}}
    (tmp_path / "analysis" / "summary.json").write_text(json.dumps(summary))
    assert unfinished_at_stop(tmp_path) == 12
    metadata = {"fault_counts": {}, "events": 10, "summary": {"sent": 1, "delivered": 1}}
    stream = io.StringIO()
    code, _ = conclude(tmp_path, metadata, {}, run_analysis=False, stream=stream)
    assert code == 0 and "unfinished" not in stream.getvalue()  # not analyzed: not claimed
    assert verdict_line(0, 12) == (
        "lab: verdict: every property held, but 12 message(s) were unfinished when the nodes "
        "stopped (see the report) (exit 0)"
    )
    assert verdict_line(0) == "lab: verdict: every property held (exit 0)"
    assert verdict_line(1, 0) == "lab: verdict: a property was VIOLATED (exit 1)"
