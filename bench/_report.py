"""Writes benchmark results into ``docs/benchmarks.md``.

Each benchmark owns one section, delimited by HTML comments, and replaces only
that section, so benchmarks can be run one at a time in any order::

    <!-- bench:chatter-codec -->
    ...
    <!-- /bench:chatter-codec -->
"""

from __future__ import annotations

import argparse
import platform
import re
from pathlib import Path

DOC = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"

_HEADER = """# Benchmarks

Every figure is measured by a script in `bench/` and written here by it. Figures are
reported as ratios against a baseline measured in the same run, because these 2-core
machines are shared and noisy (differences under about 1.3x are noise). Re-run a
section with the command given in it.
"""


def quick_parser(prog: str, quick: str = "small sizes (CI smoke run)") -> argparse.ArgumentParser:
    """The command line of ``python -m PROG``, with ``--quick`` (helped by ``quick``)."""
    parser = argparse.ArgumentParser(prog=prog)
    parser.add_argument("--quick", action="store_true", help=quick)
    return parser


def command(prog: str, quick: bool) -> str:
    """How the section's figures were taken: ``python -m PROG [--quick]``."""
    return f"python -m {prog}" + (" --quick" if quick else "")


def publish(name: str, heading: str, *blocks: str) -> None:
    """Write the section ``name``, ``## heading`` and then ``blocks`` (paragraphs,
    tables), a blank line between each, into the benchmarks document, and print it."""
    markdown = "\n\n".join([f"## {heading}", *blocks])
    update_section(name, markdown)
    print(markdown)


def machine() -> str:
    """One line describing where the figures were taken."""
    return f"{platform.python_implementation()} {platform.python_version()}, {platform.machine()}"


def update_section(name: str, markdown: str, *, doc: Path = DOC) -> None:
    """Replace (or append) the section ``name`` of the benchmarks document."""
    text = doc.read_text() if doc.exists() else _HEADER
    block = f"<!-- bench:{name} -->\n{markdown.rstrip()}\n<!-- /bench:{name} -->"
    pattern = re.compile(
        rf"<!-- bench:{re.escape(name)} -->.*?<!-- /bench:{re.escape(name)} -->", re.S
    )
    text = (
        pattern.sub(lambda _m: block, text)
        if pattern.search(text)
        else f"{text.rstrip()}\n\n{block}\n"
    )
    doc.parent.mkdir(parents=True, exist_ok=True)
    doc.write_text(text)


def table(header: list[str], rows: list[list[object]]) -> str:
    """A Markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)
