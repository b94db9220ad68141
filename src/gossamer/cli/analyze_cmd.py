"""``gossamer analyze RUN_DIR``: check a run's traces on Spark and write a report.

Exit codes (as every ``gossamer`` command): 0 when every property holds, 1 when any
is violated, 2 for unusable input (missing or empty run, mixed schema versions,
malformed lines with ``--strict``, bad options) or when Spark fails. PySpark is an
optional extra, imported only when this command runs.

A local run directory is listed before Spark starts: a missing or empty one is one
line of error and no Spark at all, and its size decides whether the session gets
the small-run settings (``gossamer.analysis.session``). The JVM's log and warnings
go to ``spark.log`` in the report directory (a temporary directory when that is a
URI), not to the console.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Sequence

from gossamer.cli.command import Command
from gossamer.errors import ConfigError, GossamerError

__all__ = ["COMMAND", "main", "run"]

EXIT_OK, EXIT_VIOLATED, EXIT_UNUSABLE = 0, 1, 2
_SHOWN_BAD_LINES = 20


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", metavar="RUN_DIR", help="a run directory (local path or URI)")
    p.add_argument(
        "--out",
        metavar="REPORT_DIR",
        help="where to write summary.json, report.html and the Parquet data "
        "(default RUN_DIR/analysis)",
    )
    where = p.add_mutually_exclusive_group()
    where.add_argument("--master", metavar="URL", help="Spark master (default local[*])")
    where.add_argument("--remote", metavar="URL", help="Spark Connect server, e.g. sc://host")
    p.add_argument("--strict", action="store_true", help="fail (exit 2) on any malformed line")
    p.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a check parameter, e.g. gossip.max_depth=5 (repeatable; see docs/analysis.md)",
    )
    p.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Spark setting, e.g. spark.driver.memory=4g (repeatable)",
    )


def _pairs(items: Sequence[str], flag: str) -> dict[str, str]:
    pairs: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"{flag} {item!r} is not KEY=VALUE")
        pairs[key] = value
    return pairs


def run(args: argparse.Namespace) -> int:
    params = _pairs(args.param, "--param")
    conf = _pairs(args.conf, "--conf")
    try:
        # Imported here so that gossamer works without PySpark until this command runs.
        from gossamer.analysis import fsio, job, load, report, session  # noqa: PLC0415
    except ImportError as exc:
        print(
            f"gossamer analyze needs PySpark ({exc.name} is missing): "
            "pip install 'gossamer[spark]'",
            file=sys.stderr,
        )
        return EXIT_UNUSABLE
    small = False
    if not fsio.is_uri(args.run_dir):
        sources = fsio.list_local_sources(args.run_dir)
        load.check_sources(args.run_dir, sources)
        small = sum(s.size for s in sources) <= session.SMALL_RUN_BYTES
    log_file = None
    spark = None if (args.master or args.remote or conf) else session.active_session()
    owned = spark is None
    try:
        if spark is None:
            log_dir = args.out or fsio.join(args.run_dir, "analysis")
            if fsio.is_uri(log_dir):
                log_dir = tempfile.mkdtemp(prefix="gossamer-analyze-")
            log_file = fsio.join(log_dir, "spark.log")
            spark = session.build_session(
                master=args.master,
                remote=args.remote,
                conf=conf,
                small=small,
                log_file=log_file,
                class_archive=True,
            )
        analysis = job.analyze(spark, args.run_dir, args.out, strict=args.strict, params=params)
    except GossamerError:
        raise
    except Exception as exc:
        if not session.is_spark_error(exc):
            raise
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        where = f" (Spark's log: {log_file})" if log_file else ""
        print(f"gossamer: error: Spark failed: {first}{where}", file=sys.stderr)
        return EXIT_UNUSABLE
    finally:
        if owned and spark is not None:
            session.stop_session(spark)
    for bad in analysis.input.first_bad[:_SHOWN_BAD_LINES]:
        print(f"skipped {bad}", file=sys.stderr)
    if analysis.input.bad_lines > _SHOWN_BAD_LINES:
        print(
            f"... and {analysis.input.bad_lines - _SHOWN_BAD_LINES} more malformed lines",
            file=sys.stderr,
        )
    for warning in analysis.input.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    print(report.text_table(analysis.summary))
    print(f"report: {analysis.report_path}")
    return EXIT_VIOLATED if analysis.violated else EXIT_OK


COMMAND = Command("analyze", __doc__, add_arguments, run)
main = COMMAND.main


if __name__ == "__main__":
    sys.exit(main())
