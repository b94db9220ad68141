"""The per-address state table: every (state, input) pair is defined or refused."""

from __future__ import annotations

import itertools

import pytest

from gossamer.errors import LocalProtocolError
from gossamer.proto.discovery import TRANSITIONS, Action, Input, PeerState, transition

S, I, A = PeerState, Input, Action  # noqa: E741

TIMERS = {I.RETRY_DUE, I.RESERVATION_EXPIRED, I.INACTIVE, I.MISS, I.LAST_MISS, I.EVICT}
MESSAGES = set(Input) - TIMERS
# Inputs that the core never produces in a state (it classifies around them).
IMPOSSIBLE = {
    (S.UNKNOWN, i) for i in TIMERS
} | {
    (S.RESERVED, I.INACTIVE), (S.RESERVED, I.MISS), (S.RESERVED, I.LAST_MISS),
    (S.RESERVED, I.EVICT), (S.RESERVED, I.RESPOND_FULL),
    (S.PEER, I.RETRY_DUE), (S.PEER, I.RESERVATION_EXPIRED), (S.PEER, I.MISS),
    (S.PEER, I.LAST_MISS), (S.PEER, I.RESPOND_FULL),
    (S.PROBING, I.RESERVATION_EXPIRED), (S.PROBING, I.INACTIVE), (S.PROBING, I.RESPOND_FULL),
    # A broadcast as a sign of life (original wire) comes only from registered peers.
    (S.UNKNOWN, I.DISCOVER_ALIVE), (S.RESERVED, I.DISCOVER_ALIVE),
}  # fmt: skip


@pytest.mark.parametrize(("state", "event"), list(itertools.product(PeerState, Input)))
def test_every_pair_is_defined_or_refused(state: PeerState, event: Input) -> None:
    if (state, event) in IMPOSSIBLE:
        with pytest.raises(LocalProtocolError) as info:
            transition(state, event)
        assert info.value.fields == {"state": state.value, "input": event.value}
    else:
        next_state, actions = transition(state, event)
        assert isinstance(next_state, PeerState)
        assert all(isinstance(a, Action) for a in actions)


def test_table_has_exactly_the_possible_pairs() -> None:
    assert set(TRANSITIONS) == set(itertools.product(PeerState, Input)) - IMPOSSIBLE


def test_every_message_is_handled_in_every_state() -> None:
    # A datagram can arrive in any state; only timers are state-specific. RESPOND_FULL
    # ("no slot for this aupa!") is classified only for strangers: others hold a slot.
    for state, event in itertools.product(
        PeerState, MESSAGES - {I.RESPOND_FULL, I.DISCOVER_ALIVE}
    ):
        assert (state, event) in TRANSITIONS
    assert [s for s in PeerState if (s, I.RESPOND_FULL) in TRANSITIONS] == [S.UNKNOWN]
    alive = [s for s in PeerState if (s, I.DISCOVER_ALIVE) in TRANSITIONS]
    assert alive == [S.PEER, S.PROBING]
    assert all(A.SEEN in TRANSITIONS[s, I.DISCOVER_ALIVE][1] for s in alive)


def test_only_solicited_paths_register() -> None:
    # Registration from UNKNOWN only on an aupa! answering our broadcast (1c); from
    # RESERVED only after we answered its broadcast (1b). Nothing else registers.
    registering = {pair for pair, (_, actions) in TRANSITIONS.items() if A.REGISTER in actions}
    assert registering == {
        (S.UNKNOWN, I.RESPOND),
        (S.RESERVED, I.RESPOND),
        (S.RESERVED, I.CONFIRM),
        (S.RESERVED, I.HEARTBEAT),
        (S.RESERVED, I.HEARTBEAT_REFUSED),
        (S.RESERVED, I.DATA),
    }
    assert transition(S.UNKNOWN, I.CONFIRM) == (S.UNKNOWN, (A.DROP_UNSOLICITED,))
    assert transition(S.UNKNOWN, I.RESPOND_REFUSED) == (S.UNKNOWN, (A.DROP_UNSOLICITED,))


def test_removal_only_by_third_miss_agur_or_eviction() -> None:
    removing = {
        pair
        for pair, (_, actions) in TRANSITIONS.items()
        if {A.REMOVE_LEAVE, A.REMOVE_HEARTBEAT, A.REMOVE_EVICT} & set(actions)
    }
    assert removing == {
        (S.PEER, I.DISCONNECT),
        (S.PROBING, I.DISCONNECT),
        (S.PROBING, I.LAST_MISS),
        (S.PEER, I.EVICT),
        (S.PROBING, I.EVICT),
    }


def test_registered_peer_broadcast_is_ignored_and_not_seen() -> None:
    for state in (S.PEER, S.PROBING):
        assert transition(state, I.DISCOVER) == (state, (A.IGNORE_PEER_BROADCAST,))


def test_any_unicast_message_from_a_probed_peer_ends_the_probe() -> None:
    for event in (I.RESPOND, I.CONFIRM, I.HEARTBEAT, I.HEARTBEAT_REPLY, I.DATA):
        next_state, actions = transition(S.PROBING, event)
        assert next_state is S.PEER and actions[0] is A.SEEN
