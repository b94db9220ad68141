"""The hop state table: every (state, input) pair is defined or refused."""

from __future__ import annotations

import pytest

from gossamer.errors import LocalProtocolError
from gossamer.proto.gossip.hops import (
    TERMINAL,
    TRANSITIONS,
    HopAction,
    HopInput,
    HopState,
    transition,
)


@pytest.mark.parametrize("state", list(HopState))
@pytest.mark.parametrize("event", list(HopInput))
def test_every_pair_is_in_the_table_or_refused(state: HopState, event: HopInput) -> None:
    if state in TERMINAL:
        # Terminal entries are deleted: no input can reach them.
        with pytest.raises(LocalProtocolError):
            transition(state, event)
        return
    assert (state, event) in TRANSITIONS
    next_state, action = transition(state, event)
    assert isinstance(next_state, HopState) and isinstance(action, HopAction)


def test_failures_of_a_live_hop_replan_and_nothing_else_does() -> None:
    replans = {pair for pair, (_, action) in TRANSITIONS.items() if action is HopAction.REPLAN}
    assert replans == {
        (HopState.AWAITING_ACK, HopInput.TIMEOUT),
        (HopState.AWAITING_ACK, HopInput.STREAM_FAILED),
        (HopState.HELD, HopInput.STREAM_FAILED),
    }
    # A hop is re-planned at most once: no transition leaves REPLANNED for a live state.
    assert all(
        nxt in (HopState.REPLANNED, *TERMINAL)
        for (state, _), (nxt, _) in TRANSITIONS.items()
        if state is HopState.REPLANNED
    )
    assert transition(HopState.REPLANNED, HopInput.ACK) == (HopState.GONE, HopAction.LATE_ACK)
    assert transition(HopState.AWAITING_ACK, HopInput.ACK) == (HopState.ACKED, HopAction.NONE)
