"""The JSON-lines codec and the forgiving reader."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gossamer.errors import DecodeError, TraceFormatError
from gossamer.trace import LAYERS, TraceEvent, TraceReader, decode_event, encode_event, read_run

names = st.text(min_size=1, max_size=20)
optional_names = st.none() | names
events = st.builds(
    TraceEvent,
    run=names,
    node=names,
    t=st.floats(min_value=0, max_value=1e9, allow_nan=False),
    layer=st.sampled_from(LAYERS),
    kind=names,
    msg=optional_names,
    peer=optional_names,
    seq=st.none() | st.integers(min_value=-(2**63), max_value=2**63 - 1),
    size=st.none() | st.integers(min_value=0, max_value=2**40),
    attrs=st.dictionaries(names, st.text(max_size=20), max_size=4),
)


@given(events)
def test_round_trip(event: TraceEvent) -> None:
    line = encode_event(event)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert decode_event(line) == event


@given(events)
def test_encoding_is_deterministic_and_in_schema_order(event: TraceEvent) -> None:
    line = encode_event(event)
    assert line == encode_event(event)
    assert line.startswith(b'{"v":1,"run":')


@given(st.binary(max_size=300))
def test_random_bytes_raise_only_decode_error(data: bytes) -> None:
    with contextlib.suppress(DecodeError):
        decode_event(data)


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        (b"[1,2]", "must be a JSON object"),
        (b'{"v":1}', "must be a number of seconds"),
        (b'{"v":2,"run":"r","node":"n","t":0,"layer":"isis","kind":"k","attrs":{}}', "version 2"),
        (
            b'{"v":1,"run":"r","node":"n","t":0,"layer":"bogus","kind":"k","attrs":{}}',
            "unknown layer",
        ),
        (b'{"v":1,"run":"r","node":"n","t":0,"layer":"isis","kind":"k","attrs":{"a":1}}', "attrs"),
        (
            b'{"v":1,"run":"r","node":"n","t":0,"layer":"isis","kind":"k","seq":true,"attrs":{}}',
            "seq",
        ),
        (
            b'{"v":1,"run":"r","node":"n","t":0,"layer":"isis","kind":"k","extra":1,"attrs":{}}',
            "unknown",
        ),
        (b'{"v":1,"run":5,"node":"n","t":0,"layer":"isis","kind":"k","attrs":{}}', "'run'"),
        (b'{"v":1,"run":"r","node":"n","t":0,"layer":"isis","kind":"","attrs":{}}', "empty"),
    ],
)
def test_malformed_lines_say_why(line: bytes, reason: str) -> None:
    with pytest.raises(DecodeError, match=reason):
        decode_event(line)


def _good(i: int) -> bytes:
    return encode_event(TraceEvent(run="r", node="n0", t=float(i), layer="demo", kind="send"))


def test_reader_skips_and_reports_bad_lines_with_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "n0.jsonl"
    path.write_bytes(_good(1) + b"not json\n" + _good(2) + b"\n" + _good(3) + _good(4)[:-9])
    reader = TraceReader()
    events = list(reader.read(path))
    assert [e.t for e in events] == [1.0, 2.0, 3.0]
    assert [(b.line, b.reason.split(":")[0]) for b in reader.bad_lines] == [
        (2, "not JSON"),
        (4, "empty line"),
        (6, "torn line"),
    ]
    assert str(reader.bad_lines[0]).startswith(f"{path}:2: ")


def test_a_complete_last_line_without_newline_is_still_torn(tmp_path: Path) -> None:
    path = tmp_path / "n0.jsonl"
    path.write_bytes(_good(1) + _good(2).rstrip(b"\n"))
    reader = TraceReader()
    assert len(list(reader.read(path))) == 1
    assert reader.bad_lines[0].line == 2


def test_strict_reader_raises_with_location(tmp_path: Path) -> None:
    path = tmp_path / "n0.jsonl"
    path.write_bytes(_good(1) + b"{}\n")
    with pytest.raises(TraceFormatError) as info:
        list(TraceReader(strict=True).read(path))
    assert info.value.line == 2 and info.value.path == str(path)


def test_read_run_reads_every_node_file(tmp_path: Path) -> None:
    (tmp_path / "a.jsonl").write_bytes(_good(1))
    (tmp_path / "b.jsonl").write_bytes(_good(2) + b"x\n")
    (tmp_path / "run.json").write_text("{}")
    events, bad = read_run(tmp_path)
    assert sorted(e.t for e in events) == [1.0, 2.0]
    assert len(bad) == 1 and bad[0].path.endswith("b.jsonl")
    with pytest.raises(DecodeError, match="not a directory"):
        read_run(tmp_path / "missing")
