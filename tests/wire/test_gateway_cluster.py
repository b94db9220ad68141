"""gossamer.wire.gateway_cluster: the batch envelope and the acknowledgement record."""

from __future__ import annotations

from typing import Any

import msgpack
import pytest

from gossamer.errors import DecodeError
from gossamer.wire.gateway_cluster import (
    VERSION,
    Header,
    batch_overhead,
    decode_batch,
    encode_batch,
    join_batch,
    pack_record,
)

BIG = 1 << 20
TOP = (1 << 64) - 1


def test_the_header_and_an_acknowledgement_round_trip() -> None:
    header = Header("n1", incarnation=TOP, to=7, session=1 << 40, seq=3, base=2)
    records: list[list[Any]] = [["A", TOP, 9, True], ["A", 1, 0, False], ["R"]]
    data = encode_batch(header, records)
    assert decode_batch(data, max_size=BIG) == (header, records)
    assert join_batch(header, [pack_record(r) for r in records]) == data


def test_the_overhead_bounds_the_envelope() -> None:
    header = Header("node-with-a-long-name", TOP, TOP, TOP, TOP, TOP)
    assert len(join_batch(header, [])) <= batch_overhead(header.sender)


@pytest.mark.parametrize("record", [
    ["A", -1, 0, False],
    ["A", 1.0, 0, False],
    ["A", 1, 2, 1],  # rewind must be a boolean
    ["A", True, 2, False],  # a boolean is not a number
    ["A", 1, "2", False],
    ["A", 1, 2],
    ["A", 1, 2, False, None],
])
def test_a_malformed_acknowledgement_is_refused(record: list[Any]) -> None:
    with pytest.raises(DecodeError, match=r"acknowledgement|malformed record"):
        decode_batch(encode_batch(Header("n1"), [record]), max_size=BIG)


@pytest.mark.parametrize("value", [
    [VERSION, "n1", 0, 0, 0, 0, []],  # one number short
    [VERSION, "n1", 0, 0, 0, 0, -1, []],
    [VERSION, "n1", 0, 0, 0, 1.5, 0, []],
    [VERSION, "n1", 0, 0, False, 0, 0, []],
    [1, "n1", []],  # the previous version
    [VERSION, 5, 0, 0, 0, 0, 0, []],
    [VERSION, "n1", 0, 0, 0, 0, 0, "records"],
])
def test_a_malformed_envelope_is_refused(value: list[Any]) -> None:
    with pytest.raises(DecodeError, match="malformed batch"):
        decode_batch(msgpack.packb(value), max_size=BIG)


def test_an_unnumbered_batch_carries_only_acknowledgements() -> None:
    assert decode_batch(encode_batch(Header("n1"), [["A", 1, 2, False]]), max_size=BIG)
    with pytest.raises(DecodeError, match="only acknowledgements"):
        decode_batch(encode_batch(Header("n1"), [["A", 1, 2, False], ["R"]]), max_size=BIG)


def test_a_batch_over_the_size_bound_is_refused() -> None:
    data = encode_batch(Header("n1"), [["R"]] * 100)
    with pytest.raises(DecodeError, match="too large"):
        decode_batch(data, max_size=len(data) - 1)
