"""The verdict of a run: ``gossamer analyze`` on its traces, and the lab's exit code.

Contract: the exit code is the analysis's (0 every property held, 1 one was violated,
2 the analysis could not judge the run), raised to at least 1 when a node exited on its
own; without analysis it is 0 unless a node failed. A run that held with messages
unfinished at the nodes' clean stop exits 0, and its verdict line says how many. The
analysis runs as a child process (Spark) that is interrupted with SIGINT, then killed,
if the lab is.
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

__all__ = [
    "EXIT_HELD",
    "EXIT_UNUSABLE",
    "EXIT_VIOLATED",
    "analyze",
    "conclude",
    "skipped_expected",
    "unfinished_at_stop",
    "verdict_line",
]

EXIT_HELD, EXIT_VIOLATED, EXIT_UNUSABLE = 0, 1, 2


def analyze(out: Path, stream: TextIO) -> tuple[int, Path | None]:
    """Run ``gossamer analyze`` on the run; print its table; (exit code, report path)."""
    report_dir = out / "analysis"
    argv = [sys.executable, "-m", "gossamer.cli.analyze_cmd", str(out), "--out", str(report_dir)]
    stderr_path = out / "logs" / "analyze.stderr"
    with (
        open(stderr_path, "wb") as err,
        subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err, text=True) as proc,
    ):
        assert proc.stdout is not None
        lines: list[str] = []
        try:
            for line in proc.stdout:
                lines.append(line.rstrip("\n"))
                stream.write(line)
                stream.flush()
            code = proc.wait()
        except BaseException:
            # Ctrl-C: let Spark stop as it would on its own Ctrl-C, then insist.
            proc.send_signal(signal.SIGINT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=15)
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            raise
    for line in stderr_path.read_text(encoding="utf-8", errors="replace").splitlines():
        if line.startswith(("warning:", "gossamer", "skipped", "...")) or code == EXIT_UNUSABLE:
            stream.write(line + "\n")
    report: Path | None = None
    for line in lines:
        if line.startswith("report: "):
            report = Path(line.removeprefix("report: ").strip())
    if report is None and (report_dir / "report.html").exists():
        report = report_dir / "report.html"
    return code, report


def unfinished_at_stop(out: Path) -> int:
    """Messages the analysis found unfinished at the nodes' clean stop (0 if unknown)."""
    try:
        summary = json.loads((out / "analysis" / "summary.json").read_text(encoding="utf-8"))
        return int(summary["counts"].get("unfinished") or 0)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return 0


def verdict_line(code: int, unfinished: int = 0) -> str:
    """``lab: verdict: ... (exit N)``; a run that held with messages unfinished at the
    nodes' stop says how many rather than passing silently."""
    held = (
        f"every property held, but {unfinished} message(s) were unfinished when the nodes "
        "stopped (see the report)"
        if unfinished
        else "every property held"
    )
    verdict = {
        EXIT_HELD: held,
        EXIT_VIOLATED: "a property was VIOLATED",
        EXIT_UNUSABLE: "the analysis could not judge the run",
    }.get(code, f"exit {code}")
    return f"lab: verdict: {verdict} (exit {code})"


def skipped_expected(out: Path, expected: Sequence[str]) -> list[str]:
    """The expected checks the analysis did not run (neither passed nor failed)."""
    path = out / "analysis" / "summary.json"
    try:
        summary = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    status = {
        c.get("name"): c.get("status") for c in summary.get("checks", []) if isinstance(c, dict)
    }
    return [name for name in expected if status.get(name) not in ("pass", "fail")]


def conclude(
    out: Path,
    metadata: Mapping[str, Any],
    unexpected: Mapping[str, int | None],
    *,
    run_analysis: bool,
    stream: TextIO,
) -> tuple[int, Path | None]:
    """Print the run's totals, analyze it (when asked) and the verdict: (exit code, report)."""
    fc = ", ".join(f"{k} {v}" for k, v in metadata["fault_counts"].items()) or "none"
    summary = metadata["summary"]
    stream.write(
        f"lab: {metadata['events']} trace events; sent {summary['sent']}, "
        f"delivered {summary['delivered']}; faults traced: {fc}\n"
    )
    code = EXIT_HELD
    report: Path | None = None
    if run_analysis:
        stream.write("lab: analyzing the traces with Spark (gossamer analyze)...\n")
        stream.flush()
        code, report = analyze(out, stream)
        skipped = skipped_expected(out, metadata["lab"]["expected_checks"])
        if skipped and code != EXIT_UNUSABLE:
            stream.write(f"note: expected checks that did not run: {', '.join(skipped)}\n")
    if unexpected:
        stream.write(
            "lab: nodes exited on their own: "
            + ", ".join(f"{n} (status {c})" for n, c in unexpected.items())
            + f"; see {out / 'logs'}\n"
        )
        code = max(code, EXIT_VIOLATED)
    if report is not None:
        stream.write(f"lab: HTML report: {report}\n")
    if not run_analysis:
        verdict = "run complete, not analyzed" if code == EXIT_HELD else "a node failed"
        stream.write(f"lab: {verdict} (exit {code}); analyze with: gossamer analyze {out}\n")
        stream.flush()
        return code, None
    unfinished = unfinished_at_stop(out) if code == EXIT_HELD else 0
    stream.write(verdict_line(code, unfinished) + "\n")
    stream.flush()
    return code, report
