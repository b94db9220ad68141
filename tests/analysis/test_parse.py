"""Spark's line validation agrees with the Python trace reader, line for line."""

from __future__ import annotations

import random

import orjson
import pytest

pytest.importorskip("pyspark", reason="pyspark is an optional extra (install gossamer[spark])")

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from gossamer.analysis.parse import (
    PARSED_COLUMNS,
    has_fast_shape,
    parse_lines,
    parse_shaped,
)
from gossamer.analysis.schema import TRACE_SCHEMA
from gossamer.errors import DecodeError
from gossamer.trace import TraceEvent, decode_event, encode_event
from gossamer.trace.schema import LAYERS

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


def _line(node: str = '"n0"', t: str = "1.5", seq: str = "null", attrs: str = "{}") -> str:
    return (
        f'{{"v":1,"run":"r","node":{node},"t":{t},"layer":"isis","kind":"k","msg":null,'
        f'"peer":null,"seq":{seq},"size":null,"attrs":{attrs}}}'
    )


#: Lines at the edge of the fast path's shape: escapes, numbers, key order, spacing.
EDGES = [
    _line(node=r'"a\"b\\c\/d\b\f\n\r\t\u00e9\u0000"'),
    _line(node=r'"\ud83d\ude00"'),
    _line(node=r'"\ud800"'),
    _line(node=r'"\udc00x"'),
    _line(node='"a\x01b"'),
    _line(node='"a\x7fb\u00e9\u2028"'),
    _line() + " ",
    " " + _line(),
    _line(attrs='{"a":"1","b":"2","c":"3","d":"4","e":"5"}'),
    _line(attrs='{"attrs":"{"}'),
    _line(node=r'"\"attrs\":{"', attrs='{"a":"1","b":"2"}'),
    _line(attrs="null"),
    _line(attrs='{"a":null}'),
    _line(attrs='{"a":1}'),
    *[
        _line(t=t)
        for t in (
            "-1.5",
            "-0.0",
            "1E+02",
            "0.1",
            "12345678901234567890",
            "1.00000000000000000001",
            "01",
            ".5",
            "1.",
            "+1",
            "1e-99",
            "5e-324",
            "1.7976931348623157e308",
            "NaN",
            "Infinity",
            '"1"',
            "true",
        )
    ],
    *[
        _line(seq=seq)
        for seq in (
            "9223372036854775807",
            "-9223372036854775808",
            "123456789012345678",
            "1e2",
            "-0",
            "18446744073709551616",
            '"1"',
        )
    ],
    _line().replace('"v":1', '"v":1.0'),
    _line().replace('"v":1', '"v":01'),
    _line().replace('"v":1', '"v": 1'),
    _line().replace('{"v":1,', '{"v":1 ,'),
    _line().replace('"v":1,"run":"r"', '"run":"r","v":1'),
    _line().replace('"kind":"k"', '"kind":""'),
    _line().replace('"layer":"isis"', '"layer":"isis2"'),
    _line().replace('"layer":"isis"', '"layer":"\\u0069sis"'),
    _line().replace(',"attrs":{}', ""),
    _line().replace(',"msg":null,"peer":null,"seq":null,"size":null', ""),
]

#: Lines the Python reader and Spark judge differently, and what Spark says: trailing
#: content after the object (orjson refuses it), repeated keys (orjson keeps the last;
#: VARIANT refuses the line), an infinite time and an integer beyond a long.
KNOWN_DIFFERENCES = {
    _line() + "x": None,
    _line() + "\u2028": None,
    _line(attrs='{"a":"1","a":"2"}'): "not JSON",
    _line(attrs=r'{"a":"1","\u0061":"2"}'): "not JSON",
    _line().replace(',"msg":null', ',"msg":null,"msg":"m"'): "not JSON",
    _line(t="1e400"): None,
    _line(seq="9223372036854775808"): "field 'seq' must be an integer, not float",
}


def near_misses(seed: int, count: int) -> list[str]:
    """Encoder lines with one character inserted, deleted or replaced."""
    rng = random.Random(seed)
    out = []
    for text in (encode_event(e).decode().rstrip("\n") for e in events(seed, count)):
        i = rng.randrange(len(text))
        op = rng.randrange(3)
        extra = rng.choice(' \t"\\{}[],:0eE.-nul\x01')
        out.append(text[:i] + extra * (op < 2) + text[i + (op > 0) :])
    return out


def events(seed: int, count: int) -> list[TraceEvent]:
    """Events with awkward strings (quotes, escapes, control and non-ASCII characters)."""
    rng = random.Random(seed)
    alphabet = 'ab"\\/\n\t\x00\x1f\x7f é€😀\u2028{}[],:'

    def text(low: int = 0) -> str:
        return "".join(rng.choice(alphabet) for _ in range(rng.randint(low, 6)))

    def maybe(value: object) -> object:
        return value if rng.random() < 0.7 else None

    return [
        TraceEvent(
            run=text(),
            node=text(),
            t=rng.choice([0.0, rng.random() * 10 ** rng.randint(-8, 12), float(rng.randint(0, 9))]),
            layer=rng.choice(LAYERS),
            kind=text(1),
            msg=maybe(text()),  # type: ignore[arg-type]
            peer=maybe(text()),  # type: ignore[arg-type]
            seq=maybe(rng.randint(-(10**18) + 1, 10**18 - 1)),  # type: ignore[arg-type]
            size=maybe(rng.randint(0, 2**40)),  # type: ignore[arg-type]
            attrs={text(): text() for _ in range(rng.randint(0, 4))},
        )
        for _ in range(count)
    ]


def _frame(spark: SparkSession, lines: list[str]) -> DataFrame:
    return spark.createDataFrame(
        [(text, "n0.jsonl", i + 1) for i, text in enumerate(lines)],
        "value string, file string, line long",
    )


def _by_line(df: DataFrame) -> list[dict[str, object]]:
    return [r.asDict() for r in sorted(df.collect(), key=lambda r: r["line"])]


def test_the_fast_path_changes_no_verdict_and_no_value(spark: SparkSession) -> None:
    lines = [
        *CORPUS,
        *EDGES,
        *KNOWN_DIFFERENCES,
        *mutations(11, 300),
        *near_misses(5, 600),
        *(encode_event(e).decode().rstrip("\n") for e in events(3, 300)),
    ]
    raw = _frame(spark, lines)
    fast = _by_line(parse_lines(raw))
    assert fast == _by_line(parse_lines(raw, fast_path=False))
    # The fast lines alone, read only by the typed reader, give the same rows too.
    shaped = raw.where(has_fast_shape(F.col("value")))
    numbers = {r["line"] for r in shaped.select("line").collect()}
    assert _by_line(parse_shaped(shaped)) == [r for r in fast if r["line"] in numbers]
    assert 300 < len(numbers) < len(lines) - 300  # both paths did real work


def test_edge_lines_get_the_python_readers_verdict(spark: SparkSession) -> None:
    rows = _by_line(parse_lines(_frame(spark, [*EDGES, *KNOWN_DIFFERENCES])))
    for text, row in zip([*EDGES, *KNOWN_DIFFERENCES], rows, strict=True):
        expected = python_reason(text)
        if text in KNOWN_DIFFERENCES:
            assert row["reason"] == KNOWN_DIFFERENCES[text] != expected, text
        elif expected is not None and expected.startswith("not JSON"):
            assert row["reason"] == "not JSON", text
        else:
            assert row["reason"] == expected, text


def test_every_encoder_line_takes_the_fast_path(spark: SparkSession) -> None:
    """What the trace encoder writes, or Spark's own JSON writer, never needs the slow path."""
    encoded = [encode_event(e).decode().rstrip("\n") for e in events(9, 500)]
    frame = _frame(spark, encoded)
    assert frame.where(~has_fast_shape(F.col("value"))).count() == 0
    # Spark's writer leaves nulls out and spells doubles its own way (1.0E-4).
    parsed = parse_lines(frame, fast_path=False).where(F.col("reason").isNull())
    respelled = parsed.select(
        F.to_json(F.struct(*[f.name for f in TRACE_SCHEMA.fields])).alias("value")
    )
    assert respelled.where(~has_fast_shape(F.col("value"))).count() == 0
    assert respelled.count() == 500
