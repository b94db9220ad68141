"""Token buckets that bound how often a node answers."""

from __future__ import annotations

import pytest

from gossamer.errors import ConfigError
from gossamer.proto.discovery import AnswerLimiter, TokenBucket

A = ("10.0.0.1", 21450)
B = ("10.0.0.2", 21450)


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


def test_bad_bucket_is_a_config_error() -> None:
    with pytest.raises(ConfigError):
        TokenBucket.full(rate=-1.0, burst=1, now=0.0)
    with pytest.raises(ConfigError):
        TokenBucket.full(rate=1.0, burst=0, now=0.0)
    with pytest.raises(ConfigError):
        AnswerLimiter(rate=1, burst=1, global_rate=1, global_burst=1, table_size=0, now=0.0)


def test_per_source_and_global_limits() -> None:
    limiter = AnswerLimiter(rate=0.0, burst=2, global_rate=0.0, global_burst=3, table_size=8, now=0)
    assert [limiter.allow(A, 0.0) for _ in range(3)] == [True, True, False]  # per source
    assert [limiter.allow(B, 0.0) for _ in range(2)] == [True, False]  # global: 3 in all


def test_a_refusal_by_one_bucket_spends_nothing_from_the_other() -> None:
    limiter = AnswerLimiter(rate=0.0, burst=1, global_rate=0.0, global_burst=2, table_size=8, now=0)
    assert limiter.allow(A, 0.0)
    for _ in range(10):
        assert not limiter.allow(A, 0.0)  # A's bucket is empty; the global one keeps its token
    assert limiter.allow(B, 0.0)


def test_source_table_is_bounded_least_recently_used_first() -> None:
    limiter = AnswerLimiter(
        rate=0.0, burst=1, global_rate=0.0, global_burst=1000, table_size=2, now=0
    )
    sources = [("10.0.0.9", port) for port in range(1, 100)]
    for source in sources:
        assert limiter.allow(source, 0.0)
    assert limiter.tracked_sources == 2


def test_solicited_answers_skip_the_global_bucket_but_not_their_source_s() -> None:
    limiter = AnswerLimiter(rate=0.0, burst=1, global_rate=0.0, global_burst=1, table_size=8, now=0)
    assert limiter.allow(A, 0.0)  # the one global token
    assert not limiter.allow(B, 0.0)
    assert limiter.allow(B, 0.0, solicited=True)  # a reply to our own broadcast
    assert not limiter.allow(B, 0.0, solicited=True)  # B's own bucket is empty now
