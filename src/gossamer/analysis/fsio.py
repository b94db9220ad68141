"""Small files next to the big ones: listing runs, reading ``run.json``, writing reports.

Paths are plain local paths or Hadoop-compatible URIs (``hdfs://``, ``s3a://``,
``file:/``...). Local paths use Python's file functions; URIs go through Spark,
which knows every file system its classpath does. Writing a file to a URI needs the
classic (JVM) session: Spark Connect clients have no file system API, so with
``--remote`` the report directory must be local.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from gossamer.errors import ConfigError

__all__ = [
    "SourceFile",
    "is_uri",
    "join",
    "list_local_sources",
    "list_sources",
    "read_text",
    "write_text",
]

_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]+:")


@dataclass(frozen=True, slots=True, kw_only=True)
class SourceFile:
    """One trace file of a run: its name, full path or URI, size and modification time."""

    name: str
    path: str
    size: int
    mtime: str


def is_uri(path: str) -> bool:
    """True for ``scheme:...`` (two letters or more, so ``C:`` stays a path)."""
    return bool(_SCHEME.match(path))


def join(base: str, name: str) -> str:
    """``base/name`` for paths and URIs alike."""
    return f"{base.rstrip('/')}/{name}"


def _is_missing(exc: Exception) -> bool:
    text = str(exc)
    return "PATH_NOT_FOUND" in text or "does not exist" in text or "FileNotFound" in text


def list_local_sources(run: str, suffix: str = ".jsonl") -> list[SourceFile]:
    """``list_sources`` for a local path, without Spark (so before a session starts).

    Raises ``ConfigError`` when ``run`` does not exist or is not a directory.
    """
    root = Path(run)
    if not root.exists():
        raise ConfigError(f"run directory {run} does not exist")
    if not root.is_dir():
        raise ConfigError(f"{run} is not a directory (expected a run of <node>.jsonl files)")
    return [
        SourceFile(
            name=p.name,
            path=str(p.resolve()),
            size=p.stat().st_size,
            mtime=str(p.stat().st_mtime_ns),
        )
        for p in sorted(root.glob(f"*{suffix}"))
        if p.is_file()
    ]


def list_sources(spark: SparkSession, run: str, suffix: str = ".jsonl") -> list[SourceFile]:
    """The trace files directly inside ``run``, in name order.

    Raises ``ConfigError`` when ``run`` does not exist or is not a directory.
    """
    if not is_uri(run):
        return list_local_sources(run, suffix)

    def listing(pattern: str) -> list[Any]:
        # binaryFile lists without reading content when only metadata is selected.
        return (
            spark.read.format("binaryFile")
            .load(pattern)
            .select("path", "length", F.col("modificationTime").cast("string").alias("mtime"))
            .collect()
        )

    try:
        # A glob keeps to the directory itself: no recursion, no partition discovery.
        rows = listing(join(run, f"*{suffix}"))
    except Exception as exc:
        if not _is_missing(exc):
            raise
        try:
            listing(run)  # the directory exists but holds no trace files
        except Exception as inner:
            if _is_missing(inner):
                raise ConfigError(f"run directory {run} does not exist") from None
            raise
        return []
    files = [
        SourceFile(
            name=r["path"].rsplit("/", 1)[-1], path=r["path"], size=r["length"], mtime=r["mtime"]
        )
        for r in rows
    ]
    return sorted(files, key=lambda f: f.name)


def read_text(spark: SparkSession, path: str) -> str | None:
    """The text of a small file, or None if it does not exist."""
    if not is_uri(path):
        p = Path(path)
        return p.read_text(encoding="utf-8") if p.is_file() else None
    try:
        rows = spark.read.text(path, wholetext=True).collect()
    except Exception as exc:
        if _is_missing(exc):
            return None
        raise
    return str(rows[0]["value"]) if rows else ""


def write_text(spark: SparkSession, path: str, text: str) -> None:
    """Write a small file (creating parent directories), replacing it if it exists."""
    if not is_uri(path):
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8")
        return
    try:
        jvm: Any = spark._jvm
        jsc: Any = spark.sparkContext._jsc
    except Exception:  # Spark Connect: no JVM on this side
        jvm = jsc = None
    if jvm is None or jsc is None:
        raise ConfigError(
            f"cannot write {path}: a Spark Connect session has no file system API; "
            "give a local --out directory"
        )
    target = jvm.org.apache.hadoop.fs.Path(path)
    fs = target.getFileSystem(jsc.hadoopConfiguration())
    stream = fs.create(target, True)
    try:
        stream.write(bytearray(text.encode("utf-8")))
    finally:
        stream.close()
