"""Credit arithmetic of one link (Java InFlowControlState / OutFlowControlState)."""

from __future__ import annotations

from collections import deque

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gossamer.errors import ConfigError
from gossamer.proto.link.credit import InFlow, batch_size


def test_batch_size_rules() -> None:
    assert batch_size(250, 0.15) == 37  # the Java defaults: 37.5 floors to 37
    assert batch_size(100, 0.5) == 50
    assert batch_size(3, 0.1) == 1  # at least one while capacity is positive
    assert batch_size(0, 1.0) == 0
    assert batch_size(-25, 1.0) == 0
    with pytest.raises(ConfigError):
        InFlow(10, 0.0)
    with pytest.raises(ConfigError):
        InFlow(10, 1.5)


def test_the_worked_example_of_the_java_suite() -> None:
    # capacityAndBatchRelatedOperations: capacity 100, batch 50%; the sender sends 25;
    # capacity to 0 gives it -25; batch 100% and +5; draining leaves it exactly 5.
    receiver = InFlow(100, 0.5)
    sender = 100
    for _ in range(25):
        assert receiver.arrived()
        sender -= 1
    sender += receiver.set_capacity(0)
    assert sender == -25
    assert receiver.set_fraction(1.0) == 0
    sender += receiver.adjust_capacity(5)
    assert (receiver.capacity, receiver.batch) == (5, 5)
    returned = [receiver.taken() for _ in range(25)]
    assert returned == [0, 0, 0, 0, 5] * 5
    sender += sum(returned)
    assert sender == 5
    assert receiver.pending == 0


def test_zero_capacity_returns_each_credit_at_once() -> None:
    receiver = InFlow(0, 0.5)
    assert receiver.batch == 0
    assert [receiver.taken() for _ in range(3)] == [1, 1, 1]


def test_a_smaller_batch_returns_the_whole_batches_pending() -> None:
    receiver = InFlow(100, 0.5)
    for _ in range(23):
        assert receiver.taken() == 0
    assert receiver.set_fraction(0.1) == 20  # batch 10: two whole batches, 3 kept
    assert receiver.pending == 3
    assert receiver.set_fraction(0.5) == 0


def test_capacity_changes_carry_the_pending_batch() -> None:
    receiver = InFlow(10, 0.5)
    receiver.taken()
    receiver.taken()
    assert receiver.set_capacity(4) == -6 + 2
    assert receiver.adjust_capacity(3) == 3
    assert receiver.capacity == 7


def test_the_bound_of_a_correct_sender_ignores_withdrawals() -> None:
    receiver = InFlow(2, 0.5)
    receiver.set_capacity(0)  # -2: a sender may not have seen it yet
    assert receiver.granted_max == 2
    assert receiver.arrived() and receiver.arrived()
    assert not receiver.arrived()  # a third DATA is beyond any credit ever granted
    receiver2 = InFlow(1, 1.0)
    assert receiver2.arrived()
    assert receiver2.taken() == 1
    assert receiver2.granted_max == 2 and receiver2.arrived()


@settings(max_examples=200, deadline=None)
@given(
    capacity=st.integers(1, 40),
    fraction=st.floats(0.01, 1.0),
    steps=st.lists(st.sampled_from(["send", "deliver", "take", "flow"]), max_size=300),
)
def test_credits_in_flight_queued_and_pending_add_up_to_the_capacity(
    capacity: int, fraction: float, steps: list[str]
) -> None:
    """With a fixed capacity: sender credits + DATA in flight + queued + pending batch +
    credits in flight back = capacity, and the sender never needs more than that."""
    receiver = InFlow(capacity, fraction)
    credits = capacity
    to_receiver = 0
    queued = 0
    flows: deque[int] = deque()
    for op in steps:
        if op == "send" and credits > 0:
            credits -= 1
            to_receiver += 1
        elif op == "deliver" and to_receiver:
            to_receiver -= 1
            assert receiver.arrived()
            queued += 1
        elif op == "take" and queued:
            queued -= 1
            variation = receiver.taken()
            if variation:
                flows.append(variation)
        elif op == "flow" and flows:
            credits += flows.popleft()
        assert credits + to_receiver + queued + receiver.pending + sum(flows) == capacity
        assert 0 <= queued <= capacity
