"""The shared back-off schedule (``gossamer.proto.backoff``)."""

from __future__ import annotations

import math
from random import Random

import pytest

from gossamer.errors import ConfigError
from gossamer.proto.backoff import AROUND, FULL_JITTER, NO_JITTER, Backoff


def test_ceiling_doubles_up_to_the_maximum() -> None:
    backoff = Backoff(base=0.25, maximum=3.0)
    assert [backoff.ceiling(n) for n in range(6)] == [0.25, 0.5, 1.0, 2.0, 3.0, 3.0]
    assert backoff.ceiling(10_000) == 3.0  # no float overflow on endless retries


def test_no_jitter_is_exact_and_draws_nothing() -> None:
    rng = Random(1)
    backoff = Backoff(base=0.2, spread=NO_JITTER)
    assert [backoff.delay(n, rng) for n in range(4)] == [0.2, 0.4, 0.8, 1.6]
    assert rng.random() == Random(1).random()


@pytest.mark.parametrize(("spread", "low", "high"), [(FULL_JITTER, 0.0, 1.0), (AROUND, 0.5, 1.5)])
def test_jitter_stays_in_its_spread(spread: tuple[float, float], low: float, high: float) -> None:
    rng = Random(7)
    backoff = Backoff(base=1.0, maximum=4.0, spread=spread)
    for attempt in range(8):
        ceiling = backoff.ceiling(attempt)
        delays = [backoff.delay(attempt, rng) for _ in range(200)]
        assert all(low * ceiling <= d <= high * ceiling for d in delays)
        assert max(delays) - min(delays) > 0.5 * (high - low) * ceiling  # it does spread


def test_same_seed_same_schedule() -> None:
    backoff = Backoff(base=0.05, maximum=2.0, spread=AROUND)
    first = [backoff.delay(n, Random(3)) for n in range(10)]
    assert first == [backoff.delay(n, Random(3)) for n in range(10)]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"base": 0.0},
        {"base": -1.0},
        {"base": 2.0, "maximum": 1.0},
        {"base": math.nan},
        {"base": 1.0, "spread": (1.0, 0.5)},
        {"base": 1.0, "spread": (-0.5, 1.0)},
    ],
)
def test_bad_backoff_is_a_config_error(kwargs: dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        Backoff(**kwargs)  # type: ignore[arg-type]
