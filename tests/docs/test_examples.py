"""Every Python example in the docs is a complete program, and this test runs each one.

A fenced block tagged ``python`` in ``README.md`` or ``docs/*.md`` is run as a script in a
fresh interpreter (the suite's, with gossamer importable), in a scratch directory, and
must exit 0 within its time limit. A block that is not a program must carry another tag
(``text``, ``console``, ``toml``). So no example can drift from the code: a renamed
function or a missing import fails here, naming the file and the line of the block.

Examples talk only to 127.0.0.1, as every test does.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
TIME_LIMIT = 120.0


@dataclass(frozen=True)
class Example:
    path: Path
    line: int
    code: str

    @property
    def name(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def examples() -> list[Example]:
    found = []
    for path in DOCS:
        text = path.read_text(encoding="utf-8")
        for match in FENCE.finditer(text):
            if match.group(1) == "python":
                line = text.count("\n", 0, match.start()) + 1
                found.append(Example(path, line, match.group(2)))
    return found


EXAMPLES = examples()


def test_the_docs_have_examples() -> None:
    # The guard against a fence pattern that silently matches nothing.
    assert len(EXAMPLES) >= 5, [e.name for e in EXAMPLES]


@pytest.mark.parametrize("example", EXAMPLES, ids=[e.name for e in EXAMPLES])
def test_example_runs(example: Example, tmp_path: Path) -> None:
    script = tmp_path / "example.py"
    script.write_text(example.code, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    try:
        done = subprocess.run(
            [sys.executable, str(script)],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=TIME_LIMIT,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{example.name} did not finish in {TIME_LIMIT:.0f} s: {exc.stdout!r}")
    assert done.returncode == 0, (
        f"{example.name} exited with {done.returncode}\n"
        f"--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"
    )
