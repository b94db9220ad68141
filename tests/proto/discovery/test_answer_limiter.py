"""The answer limiter: per-source and global buckets bound how often a node answers."""

from __future__ import annotations

import pytest

from gossamer.errors import ConfigError
from gossamer.proto.discovery import AnswerLimiter

A = ("10.0.0.1", 21450)
B = ("10.0.0.2", 21450)


def test_bad_limiter_is_a_config_error() -> None:
    with pytest.raises(ConfigError):
        AnswerLimiter(rate=-1, burst=1, global_rate=1, global_burst=1, table_size=8, now=0.0)
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
