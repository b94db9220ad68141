"""The queue checkers fail on broken histories (and pass on the sound version of each)."""

from __future__ import annotations

from gossamer.proto.gateway.queue_checks import (
    Confirmed,
    MemberLog,
    Received,
    Step,
    check_acked_never_again,
    check_confirm_majority,
    check_confirmed_acked,
    check_exclusive_holds,
    check_logs_agree,
    check_minority_never_confirms,
    check_none_lost,
)

VIEW = ("a#1", "b#1", "c#1")


def log(*steps: Step, through: int = 0, at: float = 0.0) -> MemberLog:
    history = MemberLog(steps=list(steps))
    history.applied.append((at, through or max((s.position for s in steps), default=0)))
    return history


def confirmed(message: str = "m1", position: int = 1, time: float = 1.0) -> Confirmed:
    return Confirmed("n1", message, "a#1", time, position, VIEW)


def test_a_confirm_needs_the_message_committed_by_a_majority_of_the_view() -> None:
    stored = Step(1, "enqueue", "m1")
    sound = {"a#1": log(stored), "b#1": log(stored), "c#1": log()}
    assert check_confirm_majority([confirmed()], sound) == []
    # b applied as many commands, but another one at that position: it does not count.
    other = {"a#1": log(stored), "b#1": log(Step(1, "enqueue", "x")), "c#1": log()}
    assert "committed by 1 of its view of 3" in check_confirm_majority([confirmed()], other)[0]
    # b stores it only after the confirm left.
    late = {"a#1": log(stored), "b#1": log(stored, at=2.0), "c#1": log()}
    assert check_confirm_majority([confirmed()], late) != []


def test_a_confirm_from_the_minority_side_is_caught() -> None:
    assert check_minority_never_confirms([confirmed(time=1.0)], [("b", 0.5, 2.0)]) == []
    assert check_minority_never_confirms([confirmed(time=1.0)], [("a", 0.5, 2.0)]) != []


def test_a_delivery_after_the_ack_is_caught() -> None:
    sound = log(Step(1, "deliver", "m1", "c1", 1), Step(2, "ack", "m1", "c1"))
    assert check_acked_never_again({"a#1": sound}) == []
    broken = log(Step(1, "ack", "m1", "c1"), Step(2, "deliver", "m1", "c2", 2))
    assert check_acked_never_again({"a#1": broken}) == [
        "a#1 delivered m1 at 2, acked at 1"
    ]


def test_two_holders_at_once_are_caught() -> None:
    sound = log(Step(1, "deliver", "m1", "c1", 1), Step(2, "return", "m1"),
                Step(2, "deliver", "m1", "c2", 2))
    assert check_exclusive_holds({"a#1": sound}) == []
    broken = log(Step(1, "deliver", "m1", "c1", 1), Step(2, "deliver", "m1", "c2", 2))
    assert "while c1 held it" in check_exclusive_holds({"a#1": broken})[0]


def test_members_that_did_different_things_at_one_position_are_caught() -> None:
    a = log(Step(1, "enqueue", "m1"), through=2)
    assert check_logs_agree({"a#1": a, "b#1": log(Step(1, "enqueue", "m1"), through=2)}) == []
    assert check_logs_agree({"a#1": a, "b#1": log(Step(1, "enqueue", "m2"), through=2)}) != []
    # A member that applied position 2 as a no-op while another acked there.
    c = log(Step(1, "enqueue", "m1"), Step(2, "ack", "m1", "c1"))
    assert check_logs_agree({"a#1": a, "c#1": c}) != []


def test_a_confirmed_message_never_received_acked_or_stored_is_caught() -> None:
    logs = {"a#1": log(Step(1, "enqueue", "m1"))}
    assert check_confirmed_acked([confirmed()], [], logs) == [
        "m1 (nonce n1) confirmed, never received"
    ]
    got = [Received("m1", "c1", 1, 2.0)]
    assert "never acked" in check_confirmed_acked([confirmed()], got, logs)[0]
    logs["a#1"].steps.append(Step(2, "ack", "m1", "c1"))
    assert check_confirmed_acked([confirmed()], got, logs) == []
    assert check_none_lost([confirmed()], logs, {"a#1": []}) == []
    unacked = {"a#1": log(Step(1, "enqueue", "m1"))}
    assert check_none_lost([confirmed()], unacked, {"a#1": ["m1"], "b#1": []}) == [
        "m1 (nonce n1) confirmed, not acked, missing on b#1"
    ]
