"""gossamer.testing.daemons: a server process's lines, kept and waited for."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from gossamer.testing.daemons import ServerProcess

#: Says ``oops`` on stderr, prints a JSON status line and a plain line, then sleeps (so it
#: runs until it is stopped).
SERVER = (
    "import sys, time\n"
    "print('oops', file=sys.stderr, flush=True)\n"
    "print('{\"status\": \"ready\", \"n\": 1}', flush=True)\n"
    "print('listening on 127.0.0.1:1', flush=True)\n"
    "time.sleep(600)\n"
)


def test_lines_already_printed_are_found_json_or_text(tmp_path: Path) -> None:
    process = ServerProcess([sys.executable, "-c", SERVER], name="server", cwd=tmp_path)
    try:
        text = process.wait(lambda line: "text" in line, "its plain line")
        assert text == {"text": "listening on 127.0.0.1:1"}
        # Printed before the first wait returned: found among the lines already seen.
        assert process.wait(lambda line: line.get("status") == "ready", "ready")["n"] == 1
    finally:
        code = process.stop()
    assert code == -15  # SIGTERM: the program has no handler
    assert process.errors() == "oops\n"
    assert process.stderr.parent == tmp_path


def test_a_line_that_never_comes_kills_the_process_and_says_why(tmp_path: Path) -> None:
    process = ServerProcess([sys.executable, "-c", SERVER], name="server", cwd=tmp_path)
    process.wait(lambda line: "text" in line, "its plain line")  # stderr written by then
    process.patience = 0.5
    with pytest.raises(AssertionError, match="server: no view of three: oops"):
        process.wait(lambda line: line.get("status") == "view", "view of three")
    assert process.proc.poll() == -9
    assert process.stop() == -9


def test_done_before_the_awaited_line_fails(tmp_path: Path) -> None:
    program = "print('{\"status\": \"done\"}', flush=True)"
    process = ServerProcess([sys.executable, "-c", program], name="quitter", cwd=tmp_path)
    try:
        with pytest.raises(AssertionError, match="quitter stopped before ready"):
            process.wait(lambda line: line.get("status") == "ready", "ready")
        process.proc.wait(timeout=30)  # it ends by itself after ``done``
    finally:
        code = process.stop()
    assert code == 0
