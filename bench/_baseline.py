"""An earlier gossamer tree to measure beside this one, in the same session.

Benchmarks state their figures as ratios against a baseline run right next to them
(``docs/benchmarks.md``); when the baseline is an earlier gossamer, ``baseline_tree``
gives its sources, and ``baseline_env`` the environment that runs them.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def baseline_tree(spec: str, stack: contextlib.ExitStack) -> str:
    """The baseline's source tree: ``spec`` itself when it is a directory, else that git
    revision of this repository exported into a temporary directory that ``stack``
    removes (with this tree's built native envelope when the revision's C source is the
    same, so that both trees seal alike)."""
    if Path(spec).is_dir():
        return spec
    tree = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="gossamer-baseline-")))
    git = ["git", "-C", str(ROOT), "archive", spec]
    archive = subprocess.run(git, capture_output=True, check=False)
    if archive.returncode != 0:
        raise SystemExit(f"--baseline {spec}: neither a directory nor a git revision here")
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
    ours = ROOT / "src" / "gossamer" / "wire"
    theirs = tree / "src" / "gossamer" / "wire"
    source = "_envelope_native.c"
    if (theirs / source).exists() and (theirs / source).read_bytes() == (
        ours / source
    ).read_bytes():
        for built in ours.glob("_envelope_native*.so"):
            shutil.copy(built, theirs)
    return str(tree)


def baseline_env(tree: str) -> dict[str, str]:
    """This process's environment with ``tree``'s sources first on the import path (the
    processes it starts, and theirs, inherit it)."""
    env = dict(os.environ)
    src = str(Path(tree).resolve() / "src")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
    return env
