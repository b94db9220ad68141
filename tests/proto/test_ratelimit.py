"""The shared token bucket and bucket table (``gossamer.proto.ratelimit``)."""

from __future__ import annotations

import math

import pytest

from gossamer.errors import ConfigError
from gossamer.proto.ratelimit import BucketTable, TokenBucket


def test_bucket_spends_burst_then_refills_at_rate() -> None:
    bucket = TokenBucket.full(rate=2.0, burst=3, now=0.0)
    assert [bucket.take(0.0) for _ in range(4)] == [True, True, True, False]
    assert not bucket.take(0.4)  # 0.8 tokens
    assert bucket.take(0.5)  # 1.0 token
    assert [bucket.take(100.0) for _ in range(4)] == [True, True, True, False]  # capped at burst


def test_bucket_ignores_a_clock_going_backwards() -> None:
    bucket = TokenBucket.full(rate=1.0, burst=1, now=10.0)
    assert bucket.take(10.0)
    assert not bucket.take(5.0)
    assert not bucket.take(10.5)
    assert bucket.take(11.0)


def test_available_spends_nothing() -> None:
    bucket = TokenBucket.full(rate=0.0, burst=1, now=0.0)
    assert bucket.available(0.0) and bucket.available(0.0)
    assert bucket.take(0.0)
    assert not bucket.available(1e9)  # rate 0 never refills


def test_when_available_and_full_at() -> None:
    bucket = TokenBucket.full(rate=4.0, burst=2, now=0.0)
    assert bucket.when_available(0.0) == 0.0 and bucket.full_at(0.0) == 0.0
    bucket.take(0.0)
    bucket.take(0.0)
    assert bucket.when_available(0.0) == pytest.approx(0.25)
    assert bucket.full_at(0.0) == pytest.approx(0.5)
    never = TokenBucket.full(rate=0.0, burst=1, now=0.0)
    never.take(0.0)
    assert never.when_available(1.0) == math.inf and never.full_at(1.0) == math.inf


@pytest.mark.parametrize(("rate", "burst"), [(-1.0, 1.0), (1.0, 0.0), (math.nan, 1.0)])
def test_bad_bucket_is_a_config_error(rate: float, burst: float) -> None:
    with pytest.raises(ConfigError):
        TokenBucket.full(rate=rate, burst=burst, now=0.0)
    with pytest.raises(ConfigError):
        BucketTable[str](rate=rate, burst=burst, size=1)


def test_table_needs_room() -> None:
    with pytest.raises(ConfigError):
        BucketTable[str](rate=1.0, burst=1.0, size=0)


def test_table_forgets_the_least_recently_used_key() -> None:
    table = BucketTable[str](rate=0.0, burst=1, size=2)
    assert table.bucket("a", 0.0).take(0.0)
    assert table.bucket("b", 0.0).take(0.0)
    table.bucket("a", 0.0)  # a is now the most recent
    table.bucket("c", 0.0)  # forgets b
    assert len(table) == 2 and table.get("b") is None
    assert not table.bucket("a", 0.0).take(0.0)  # a kept its empty bucket
    assert table.bucket("b", 0.0).take(0.0)  # b starts again full


def test_get_makes_nothing_and_prune_forgets_full_buckets() -> None:
    table = BucketTable[str](rate=1.0, burst=1, size=8)
    assert table.get("a") is None and len(table) == 0
    table.bucket("a", 0.0).take(0.0)
    table.bucket("b", 0.0)
    table.prune(0.5)
    assert table.get("b") is None and table.get("a") is not None  # a is still refilling
    table.prune(1.0)
    assert len(table) == 0
