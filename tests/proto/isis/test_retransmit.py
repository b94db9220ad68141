"""The ContinuousMsgSender schedule: per message, 200 ms doubling to the 4000 ms cap, then 200."""

from __future__ import annotations

import itertools

import pytest

from gossamer.errors import ConfigError
from gossamer.proto.isis.retransmit import (
    RetransmitSchedule,
    RttEstimator,
    RttTransmitter,
    Transmitter,
)


def test_default_schedule_is_the_spec_sequence() -> None:
    # Spec "ContinuousMsgSender": 200, 400, 800, 1600, 3200 ms, then back to 200 ms
    # (4000 is never used: 6400 > 4000 resets).
    first = list(itertools.islice(RetransmitSchedule().intervals(), 12))
    assert [round(x * 1000) for x in first] == [
        200, 400, 800, 1600, 3200, 200, 400, 800, 1600, 3200, 200, 400,
    ]  # fmt: skip


def test_schedule_is_configurable_and_the_maximum_itself_may_be_used() -> None:
    schedule = RetransmitSchedule(initial=0.01, maximum=0.04)
    assert [schedule.interval(i) for i in range(5)] == [0.01, 0.02, 0.04, 0.01, 0.02]
    tripled = RetransmitSchedule(initial=1.0, maximum=10.0, factor=3.0)
    assert [tripled.interval(i) for i in range(4)] == [1.0, 3.0, 9.0, 1.0]


@pytest.mark.parametrize(
    "kwargs", [{"initial": 0.0}, {"initial": 1.0, "maximum": 0.5}, {"factor": 1.0}]
)
def test_bad_schedules_are_config_errors(kwargs: dict[str, float]) -> None:
    with pytest.raises(ConfigError):
        RetransmitSchedule(**kwargs)


def make() -> tuple[Transmitter, list[tuple[float, bytes, int]], list[float]]:
    sent: list[tuple[float, bytes, int]] = []
    clock = [0.0]
    tx = Transmitter(RetransmitSchedule(), lambda payload, to: sent.append((clock[0], payload, to)))
    return tx, sent, clock


def run_until(tx: Transmitter | RttTransmitter, clock: list[float], end: float) -> None:
    while (deadline := tx.next_deadline()) is not None and deadline <= end:
        clock[0] = deadline
        tx.due(deadline)


def test_first_send_at_once_then_only_to_recipients_that_have_not_answered() -> None:
    tx, sent, clock = make()
    tx.start("m", b"x", {2, 3}, 0.0, label="DataMsg", msg="a/1")
    assert sent == [(0.0, b"x", 2), (0.0, b"x", 3)]
    assert tx.answered("m", 2) is True
    assert tx.answered("m", 2) is False  # a duplicate answer is recognised as such
    run_until(tx, clock, 1.5)
    times = [round(t, 6) for t, _, to in sent if to == 3]
    assert times == [0.0, 0.2, 0.6, 1.4]
    assert all(to == 3 for t, _, to in sent if t > 0)
    assert tx.answered("m", 3) is True
    assert "m" not in tx and tx.next_deadline() is None


def test_each_message_has_its_own_back_off() -> None:
    """Reference (a) bug 4: the original shared one counter, so a new message waited for
    an old message's long interval. Here a later message starts at 200 ms."""
    tx, sent, clock = make()
    tx.start("old", b"o", {2}, 0.0, label="DataMsg", msg="a/1")
    run_until(tx, clock, 3.0)  # old is now on its 1.6 s interval
    tx.start("new", b"n", {2}, 3.0, label="DataMsg", msg="a/2")
    run_until(tx, clock, 3.7)
    assert [round(t, 6) for t, p, _ in sent if p == b"n"] == [3.0, 3.2, 3.6]


def test_retarget_drop_member_and_cancel() -> None:
    tx, sent, _ = make()
    tx.start("s", b"s", {2}, 0.0, label="StatementAck", msg="c/1")
    tx.retarget("s", {3}, 0.1)
    assert sent[-1] == (0.0, b"s", 3)  # the new target gets it at once
    tx.start("d", b"d", {2, 3}, 0.0, label="DataMsg", msg="a/1")
    tx.drop_member(3)
    assert "s" not in tx and tx.get("d") is not None and tx.get("d").recipients == {2}  # type: ignore[union-attr]
    tx.cancel("d")
    assert len(tx) == 0 and tx.next_deadline() is None
    assert tx.start("e", b"e", set(), 0.0, label="DataMsg", msg="a/2") is None


# -- gossamer's own wire: RttTransmitter ---------------------------------------------------


def make_rtt() -> tuple[RttTransmitter, list[tuple[float, bytes, int]], list[float]]:
    sent: list[tuple[float, bytes, int]] = []
    clock = [0.0]
    tx = RttTransmitter(
        RttEstimator(initial=0.2, granularity=0.001, maximum=4.0),
        lambda payload, to: sent.append((clock[0], payload, to)),
    )
    return tx, sent, clock


def test_rfc6298_estimator_first_and_later_samples() -> None:
    rtt = RttEstimator(initial=1.0, granularity=0.001, maximum=60.0)
    assert rtt.rto == 1.0  # before any sample
    rtt.sample(0.1)
    assert (rtt.srtt, rtt.rttvar) == (0.1, 0.05)
    assert rtt.rto == pytest.approx(0.1 + 4 * 0.05)
    rtt.sample(0.2)
    assert rtt.rttvar == pytest.approx(0.75 * 0.05 + 0.25 * 0.1)
    assert rtt.srtt == pytest.approx(0.875 * 0.1 + 0.125 * 0.2)
    for _ in range(100):
        rtt.sample(0.05)
    assert rtt.rto == pytest.approx(0.05 + 0.001, abs=1e-6)  # G bounds the margin from below
    assert RttEstimator(initial=1.0, granularity=0.001, maximum=0.5).rto == 0.5


def test_karn_a_retransmitted_copys_answer_neither_samples_nor_ends_the_back_off() -> None:
    tx, sent, clock = make_rtt()
    tx.start("a", b"a", {2}, 0.0, label="DataMsg", msg="n1/1")
    run_until(tx, clock, 0.25)  # timed out once at 0.2: sent twice
    assert [t for t, _, _ in sent] == [0.0, 0.2]
    clock[0] = 0.3
    assert tx.answered("a", 2, 0.3) is True
    estimate = tx.estimator(2)
    assert estimate.srtt is None and estimate.rto == 0.2  # no sample: ambiguous answer
    tx.start("b", b"b", {2}, 0.3, label="DataMsg", msg="n1/2")
    clock[0] = 0.65
    # Still backed off (0.3 + 2 x 0.2 = 0.7): a timeout shorter than the round trip must
    # not come back on an ambiguous answer, or every copy would time out again.
    assert tx.answered("b", 2, 0.65) is True
    assert [round(t, 6) for t, p, _ in sent if p == b"b"] == [0.3]
    # The answer to a copy sent once is a sample (0.35 s) and ends the back-off: the next
    # copy gets the tail-loss probe after two round trips (0.7 s, under the 1.05 s
    # timeout), which only a member that is not backed off gets.
    assert estimate.srtt == pytest.approx(0.35)
    assert estimate.rto == pytest.approx(0.35 + 4 * 0.175)
    tx.start("c", b"c", {2}, 0.65, label="DataMsg", msg="n1/3")
    run_until(tx, clock, 1.4)
    assert [round(t, 6) for t, p, _ in sent if p == b"c"] == [0.65, 1.35]


def test_a_member_silent_for_two_round_trips_gets_one_probe_whose_answer_repairs_the_tail() -> None:
    causes: list[tuple[bytes, str]] = []
    sent: list[tuple[float, bytes, int]] = []
    clock = [0.0]
    tx = RttTransmitter(
        RttEstimator(initial=0.2, granularity=0.001, maximum=4.0),
        lambda payload, to: sent.append((clock[0], payload, to)),
        lambda item, to, cause: causes.append((item.payload, cause)),
    )
    # Round trips of 10 ms, then one of 30 ms: a jittery member (timeout > 2 SRTT).
    for i, rtt in enumerate([0.01, 0.03]):
        tx.start(i, b"x", {2}, clock[0], label="DataMsg", msg=f"n1/{i}")
        clock[0] += rtt
        tx.answered(i, 2, clock[0])
        clock[0] += 0.1
    estimate = tx.estimator(2)
    assert estimate.srtt is not None and 2 * estimate.srtt < estimate.rto
    start = clock[0]
    for key in ("a", "b", "c"):  # a burst whose every copy is lost: member 2 goes silent
        tx.start(key, key.encode(), {2}, start, label="DataMsg", msg=key)
    sent.clear()
    run_until(tx, clock, start + 2 * estimate.srtt + 0.001)
    assert [p for _, p, _ in sent] == [b"c"]  # one probe: the newest copy, not all three
    assert causes == [(b"c", "probe")]
    clock[0] += 0.012
    assert tx.answered("c", 2, clock[0])  # its answer shows a and b lost: sent at once
    assert [p for _, p, _ in sent] == [b"c", b"a", b"b"]
    assert causes[1:] == [(b"a", "gap"), (b"b", "gap")]


def test_back_off_is_per_member_and_a_fresh_answer_ends_it() -> None:
    tx, sent, clock = make_rtt()
    tx.start("a", b"a", {2, 3}, 0.0, label="DataMsg", msg="n1/1")
    assert tx.answered("a", 3, 0.01)  # member 3 answers at once: a 10 ms sample
    run_until(tx, clock, 1.5)  # member 2 stays silent: 0.2, then 0.4, then 0.8
    assert [round(t, 6) for t, _, to in sent if to == 2] == [0.0, 0.2, 0.6, 1.4]
    clock[0] = 1.5
    tx.start("b", b"b", {2, 3}, 1.5, label="DataMsg", msg="n1/2")
    run_until(tx, clock, 1.55)
    # Member 3's timers are its own, unaffected by member 2's back-off: the tail-loss probe
    # after two round trips (20 ms), then its timeout (10 ms + 4 x 5 ms) from there.
    assert [round(t, 6) for t, p, to in sent if p == b"b" and to == 3] == [1.5, 1.52, 1.55]


def test_a_prompt_answer_to_a_retransmitted_copy_ends_the_back_off_once_a_round_trip_is_known() -> (
    None
):
    tx, sent, clock = make_rtt()
    estimate = tx.estimator(2)
    for _ in range(30):  # a steady 10 ms round trip: timeout 10 ms + G, and no probe
        estimate.sample(0.010)
    assert estimate.rto == pytest.approx(0.011, abs=1e-6)
    tx.start("b", b"b", {2}, 0.0, label="DataMsg", msg="n1/2")
    run_until(tx, clock, 0.015)  # lost: sent again at 0.011, and the member backed off
    assert [round(t, 6) for t, _, _ in sent] == [0.0, 0.011]
    clock[0] = 0.016
    assert tx.answered("b", 2, 0.016)  # 5 ms after the retransmission: within 11 ms
    tx.start("c", b"c", {2}, 0.016, label="DataMsg", msg="n1/3")
    run_until(tx, clock, 0.030)
    # One plain timeout (0.016 + 0.011), not a doubled one (0.016 + 0.022).
    assert [round(t, 6) for t, p, _ in sent if p == b"c"] == [0.016, 0.027]
    assert estimate.srtt == pytest.approx(0.010)  # the ambiguous answer is no sample
