"""The hold-back queue's ordering rules (spec, "HoldBackQueue")."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gossamer.errors import LocalProtocolError
from gossamer.proto.isis.holdback import HoldBackQueue


def keys(queue: HoldBackQueue) -> list[tuple[int, int]]:
    return [e.key for e in queue.ordered()]


def test_ascending_sequence_and_head_delivery_while_deliverable() -> None:
    q = HoldBackQueue()
    q.add(sender=1, msg_id=1, data=b"11", proposal=1, me=3)
    q.add(sender=2, msg_id=1, data=b"21", proposal=2, me=3)
    q.mark_deliverable((2, 1), 2, 3)
    # The head (1,1) is undeliverable: nothing is delivered even though (2,1) could be.
    assert list(q.pop_deliverable()) == []
    q.mark_deliverable((1, 1), 5, 2)  # final 5 > 2: (2,1) moves to the head
    assert keys(q) == [(2, 1), (1, 1)]
    assert [e.key for e in q.pop_deliverable()] == [(2, 1), (1, 1)]
    assert len(q) == 0 and q.head() is None


def test_equal_sequence_undeliverable_goes_before_deliverable() -> None:
    q = HoldBackQueue()
    q.add(sender=1, msg_id=1, data=b"", proposal=4, me=3)  # undeliverable at (4, 3)
    q.add(sender=2, msg_id=1, data=b"", proposal=5, me=3)
    q.mark_deliverable((2, 1), 4, 1)  # deliverable at (4, 1): proposer 1 < 3, yet it waits
    assert keys(q) == [(1, 1), (2, 1)]
    assert list(q.pop_deliverable()) == []
    # Its final is (4, 2): after (4, 1), so (2, 1) now leads and both go, in that order.
    q.mark_deliverable((1, 1), 4, 2)
    assert [e.key for e in q.pop_deliverable()] == [(2, 1), (1, 1)]


def test_equal_sequence_and_deliverability_smaller_proposer_first() -> None:
    q = HoldBackQueue()
    q.add(sender=1, msg_id=1, data=b"", proposal=1, me=3)
    q.add(sender=1, msg_id=2, data=b"", proposal=2, me=3)
    q.mark_deliverable((1, 2), 7, 1)
    q.mark_deliverable((1, 1), 7, 2)
    assert [e.key for e in q.pop_deliverable()] == [(1, 2), (1, 1)]


def test_one_entry_per_message_and_unknown_keys_are_local_errors() -> None:
    q = HoldBackQueue()
    q.add(sender=1, msg_id=1, data=b"", proposal=1, me=2)
    with pytest.raises(LocalProtocolError):
        q.add(sender=1, msg_id=1, data=b"", proposal=2, me=2)
    with pytest.raises(LocalProtocolError):
        q.mark_deliverable((9, 9), 1, 1)
    with pytest.raises(LocalProtocolError):
        q.discard((9, 9))
    assert q.discard((1, 1)).key == (1, 1) and (1, 1) not in q and q.head() is None


@given(st.lists(st.tuples(st.integers(1, 30), st.booleans(), st.integers(1, 5)), max_size=25))
def test_order_matches_the_spec_rule_for_any_contents(
    items: list[tuple[int, bool, int]],
) -> None:
    """Entries are kept in (seq, undeliverable before deliverable, proposer) order, and
    pop_deliverable yields exactly the deliverable prefix."""
    q = HoldBackQueue()
    me = 9
    used_own: set[int] = set()
    used_final: set[tuple[int, int]] = set()
    for n, (seq, deliverable, proposer) in enumerate(items):
        if deliverable and (seq, proposer) in used_final:
            continue  # a (final, proposer) pair names one message only
        used_final.add((seq, proposer))
        proposal = seq
        while proposal in used_own:  # own proposals are unique
            proposal += 100
        used_own.add(proposal)
        q.add(sender=1, msg_id=n + 1, data=b"", proposal=proposal, me=me)
        if deliverable:
            q.mark_deliverable((1, n + 1), seq, proposer)
    expected = sorted(
        q.ordered(), key=lambda e: (e.seq, e.deliverable, e.proposer, e.sender, e.msg_id)
    )
    assert q.ordered() == expected
    prefix = []
    for e in expected:
        if not e.deliverable:
            break
        prefix.append(e.key)
    assert [e.key for e in q.pop_deliverable()] == prefix
