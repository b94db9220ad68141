"""Layering rules import-linter cannot express (DESIGN.md, "Layers")."""

from __future__ import annotations

import ast
from pathlib import Path

import gossamer

SRC = Path(gossamer.__file__).parent


def test_protocol_cores_draw_no_global_randomness() -> None:
    """Under proto/, ``random`` may be imported for its type only: every draw comes from an
    injected ``random.Random``, never from the module-level generator."""
    offenders = []
    for path in sorted((SRC / "proto").rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "random"
                and node.func.attr != "Random"
            ):
                offenders.append(f"{path.relative_to(SRC)}:{node.lineno}")
            if isinstance(node, ast.ImportFrom) and node.module == "random":
                names = {alias.name for alias in node.names}
                if names - {"Random"}:
                    offenders.append(f"{path.relative_to(SRC)}:{node.lineno}")
    assert offenders == []


def test_every_protocol_subpackage_is_in_the_independence_contract() -> None:
    """A new proto/<protocol> must be added to pyproject's independence contract."""
    pyproject = (SRC.parent.parent / "pyproject.toml").read_text()
    subpackages = sorted(p.name for p in (SRC / "proto").iterdir() if (p / "__init__.py").exists())
    assert subpackages, "no protocol subpackages found"
    for name in subpackages:
        assert f'"gossamer.proto.{name}"' in pyproject, name
