"""Spark's line validation agrees with the Python trace reader, line for line."""

from __future__ import annotations

import random

import orjson
import pytest

pytest.importorskip("pyspark", reason="pyspark is an optional extra (install gossamer[spark])")

from pyspark.sql import SparkSession

from gossamer.analysis.parse import PARSED_COLUMNS, parse_lines
from gossamer.errors import DecodeError
from gossamer.trace import TraceEvent, decode_event, encode_event

pytestmark = pytest.mark.spark

GOOD = TraceEvent(
    run="r",
    node="n0",
    t=1.5,
    layer="isis",
    kind="deliver",
    msg="n1/3",
    peer="n1",
    seq=7,
    size=20,
    attrs={"proposer": "n2"},
)

CORPUS = [
    encode_event(GOOD).decode().rstrip("\n"),
    '{"v":1,"run":"r","node":"n0","t":1,"layer":"net","kind":"fault"}',
    '{"v":1,"run":"r","node":"n0","t":1e3,"layer":"isis","kind":"x","size":12345678901234}',
    '{"v":1,"run":"r","node":"n0","t":1,"layer":"isis","kind":"deliver","msg":5}',
    '{"v":1,"run":"r","node":"n0","t":1,"layer":"isis","kind":"deliver","seq":true}',
    '{"v":1,"run":"r","node":"n0","t":1,"layer":"isis","kind":"deliver","seq":1.5}',
    '{"v":1,"run":"r","node":"n0","t":1,"layer":"isis","kind":"deliver","attrs":{"a":1}}',
    '{"v":1,"run":"r","node":"n0","t":1,"layer":"isis","kind":"deliver","attrs":null}',
    '{"v":1,"run":"r","node":"n0","t":1,"layer":"isis","kind":"deliver","attrs":[]}',
    '{"v":1,"run":"r","node":"n0","t":"x","layer":"isis","kind":"deliver","extra":1,"zz":2}',
    '{"v":2,"run":"r","node":"n0","t":1,"layer":"isis","kind":"deliver"}',
    '{"v":"1","run":"r","node":"n0","t":1,"layer":"isis","kind":"deliver"}',
    '{"run":"r","node":"n0","t":1,"layer":"isis","kind":"deliver"}',
    '{"v":1,"run":"r","node":"n0","t":true,"layer":"isis","kind":"deliver"}',
    '{"v":1,"run":"r","node":"n0","t":1,"layer":"bogus","kind":"deliver"}',
    '{"v":1,"run":"r","node":"n0","t":1,"layer":3,"kind":"deliver"}',
    '{"v":1,"run":"r","node":"n0","t":1,"kind":"deliver"}',
    '{"v":1,"run":"r","node":"n0","t":1,"layer":"isis","kind":""}',
    '{"v":1,"run":"r","node":null,"t":1,"layer":"isis","kind":"x"}',
    '{"v":1,"run":"r","node":"n0","t":1,"layer":"isis","kind":"x","peer":{}}',
    '{"v":1}',
    "not json",
    "[1,2]",
    '"str"',
    "null",
    "5",
    '{"v":1,"run":"r","node":"n0","t":1,"layer":"isis","kind":"deliver"',
]


def mutations(seed: int, count: int) -> list[str]:
    """Lines derived from a valid event by deleting, retyping or adding one field."""
    rng = random.Random(seed)
    base = orjson.loads(encode_event(GOOD))
    values: list[object] = [None, True, 0, -3, 2.5, "", "x", [], {}, {"k": "v"}, {"k": 1}, 2**40]
    out = []
    for _ in range(count):
        obj = dict(base)
        key = rng.choice([*obj, "extra"])
        if rng.random() < 0.2 and key in obj:
            del obj[key]
        else:
            obj[key] = rng.choice(values)
        out.append(orjson.dumps(obj).decode())
    return out


def python_reason(line: str) -> str | None:
    if not line.strip():
        return "empty line"  # what TraceReader says before decoding
    try:
        decode_event(line)
    except DecodeError as exc:
        return str(exc)
    return None


def test_every_line_gets_the_python_readers_verdict(spark: SparkSession) -> None:
    lines = [*CORPUS, "", "   ", *mutations(7, 300)]
    raw = spark.createDataFrame(
        [(text, "n0.jsonl", i + 1) for i, text in enumerate(lines)],
        "value string, file string, line long",
    )
    parsed = parse_lines(raw)
    assert tuple(parsed.columns) == PARSED_COLUMNS
    rows = sorted(parsed.collect(), key=lambda r: r["line"])
    assert len(rows) == len(lines)
    rejected = 0
    for text, row in zip(lines, rows, strict=True):
        expected = python_reason(text)
        if expected is not None and expected.startswith("not JSON"):
            # orjson's own words after "not JSON" are not reproduced.
            assert row["reason"] == "not JSON", text
        else:
            assert row["reason"] == expected, text
        if expected is None:
            event = decode_event(text)
            got = {
                k: row[k]
                for k in ("v", "run", "node", "t", "layer", "kind", "msg", "peer", "seq", "size")
            }
            assert got == {k: getattr(event, k) for k in got}, text
            assert row["attrs"] == dict(event.attrs)
            assert row["text"] is None
        else:
            rejected += 1
            assert row["text"] == text[:200]
    assert rejected > 100  # the mutations really produced bad lines


def test_bad_lines_keep_the_unknown_layer_and_the_version(spark: SparkSession) -> None:
    raw = spark.createDataFrame(
        [(CORPUS[14], "a.jsonl", 1), (CORPUS[10], "a.jsonl", 2)],
        "value string, file string, line long",
    )
    rows = sorted(parse_lines(raw).collect(), key=lambda r: r["line"])
    assert (rows[0]["bad_layer"], rows[0]["version"]) == ("bogus", 1)
    assert (rows[1]["bad_layer"], rows[1]["version"]) == (None, 2)
