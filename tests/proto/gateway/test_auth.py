"""The password guard: verdicts, the guessing budget per source, bounded memory (times explicit)."""

from __future__ import annotations

import pytest

from gossamer.errors import ConfigError
from gossamer.proto.gateway.auth import PasswordGuard, Verdict, source_of
from gossamer.proto.gateway.core import GatewayConfig

RIGHT, WRONG, REFUSED = Verdict.RIGHT, Verdict.WRONG, Verdict.REFUSED


def guard(**kw: float) -> PasswordGuard:
    return PasswordGuard("s3cret", rate=kw.pop("rate", 0.2), burst=kw.pop("burst", 10),
                         max_sources=int(kw.pop("max_sources", 1024)))


def test_verdicts_without_a_budget_in_play() -> None:
    g = guard()
    assert g.check("1.2.3.4", "s3cret", 0.0) is RIGHT
    assert g.check("1.2.3.4", "s3cret!", 0.0) is WRONG  # a longer password, not a prefix
    assert g.check("1.2.3.4", "s3cre", 0.0) is WRONG
    assert g.check("1.2.3.4", None, 0.0) is WRONG  # no password: restricted, not a guess
    assert g.check("1.2.3.4", "\ud800", 0.0) is WRONG  # a lone surrogate does not raise
    open_ = PasswordGuard(None, rate=0.2, burst=10)
    assert open_.check("1.2.3.4", "anything", 0.0) is RIGHT
    assert open_.check("1.2.3.4", None, 0.0) is RIGHT


def test_the_rate_must_be_positive() -> None:
    with pytest.raises(ConfigError):
        PasswordGuard("pw", rate=0.0, burst=10)
    with pytest.raises(ConfigError):
        GatewayConfig(password="pw", password_guess_rate=0.0)


def test_distinct_guesses_are_bounded_per_source_at_any_attempt_rate() -> None:
    """A guesser sending a new password every 0.1 s for 100 s (and the right one now and
    then) gets verdicts on at most burst + rate * 100 = 30 of its guesses."""
    g = guard(rate=0.2, burst=10)
    verdicts = [g.check("6.6.6.6", f"guess{i}", i / 10) for i in range(1000)]
    answered = verdicts.count(WRONG)
    assert 29 <= answered <= 10 + 0.2 * 100
    assert verdicts.count(REFUSED) == 1000 - answered
    assert verdicts[:10] == [WRONG] * 10 and verdicts[10] is REFUSED
    # Refused means unread: the right password gets the same answer while the budget is out.
    assert g.check("6.6.6.6", "s3cret", 100.0) is REFUSED


def test_the_right_password_spends_nothing_and_is_read_once_a_token_is_back() -> None:
    g = guard(rate=0.2, burst=1)
    assert g.check("6.6.6.6", "guess1", 0.0) is WRONG
    assert g.check("6.6.6.6", "s3cret", 0.0) is REFUSED
    assert g.check("6.6.6.6", "s3cret", 4.9) is REFUSED
    assert [g.check("6.6.6.6", "s3cret", 5.0) for _ in range(50)] == [RIGHT] * 50
    assert g.check("6.6.6.6", "guess2", 5.0) is WRONG  # the token was still there
    assert g.check("6.6.6.6", "guess3", 5.0) is REFUSED


def test_a_wrong_password_retried_spends_one_token_at_any_rate() -> None:
    g = guard(rate=0.2, burst=2)
    assert [g.check("6.6.6.6", "stale", t / 100) for t in range(10_000)] == [WRONG] * 10_000
    # One token went on "stale"; the right password and one more new guess still get in.
    assert g.check("6.6.6.6", "s3cret", 100.0) is RIGHT
    assert g.check("6.6.6.6", "other", 100.0) is WRONG
    assert g.check("6.6.6.6", "s3cret", 100.0) is RIGHT


def test_a_repeat_is_free_only_for_the_source_that_tried_it() -> None:
    g = guard(rate=0.001, burst=2)
    assert g.check("6.6.6.6", "stale", 0.0) is WRONG
    assert g.check("7.7.7.7", "stale", 0.0) is WRONG  # 7.7.7.7's own first guess: a token
    assert g.check("7.7.7.7", "stale", 0.0) is WRONG  # its repeat: free
    assert g.check("7.7.7.7", "other", 0.0) is WRONG  # its second token
    assert g.check("7.7.7.7", "s3cret", 0.0) is REFUSED
    # While a source is refused, a repeat is refused too: nothing is read, so a refused
    # source cannot ask whether a password was tried from it before.
    assert g.check("7.7.7.7", "stale", 0.0) is REFUSED


def test_an_ipv6_source_is_its_64_and_a_mapped_ipv4_its_address() -> None:
    assert source_of("2001:db8::1") == source_of("2001:db8::ffff:2") == "2001:db8::/64"
    assert source_of("2001:db8:0:1::1") == "2001:db8:0:1::/64"
    assert source_of("::ffff:10.0.0.1") == "10.0.0.1"
    assert source_of("10.0.0.1") == "10.0.0.1" and source_of("host-a") == "host-a"
    g = guard(rate=0.001, burst=2)
    assert g.check("2001:db8::1", "a", 0.0) is WRONG
    assert g.check("2001:db8::2", "b", 0.0) is WRONG
    assert g.check("2001:db8::3", "s3cret", 0.0) is REFUSED  # one /64, one budget
    assert g.check("2001:db8:0:1::3", "s3cret", 0.0) is RIGHT


def test_memory_stays_bounded_under_a_flood_of_sources_and_passwords() -> None:
    g = guard(rate=0.2, burst=10, max_sources=100)
    for i in range(20_000):
        g.check(f"10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}", f"guess{i}", 0.0)
        g.check("6.6.6.6", f"guess{i}", 0.0)
    assert g.tracked_sources <= 100 and g.remembered_wrong <= 100
    g.prune(1000.0)  # every bucket is full again: nothing left to remember about them
    assert g.tracked_sources == 0
