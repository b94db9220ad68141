"""The link state table: every (state, input) pair is defined, and its shape is sound."""

from __future__ import annotations

from pathlib import Path

import pytest

from gossamer.errors import LocalProtocolError
from gossamer.proto.link.machine import (
    KNOWS_PEER,
    LOCAL_INPUTS,
    TABLE,
    Action,
    LinkInput,
    LinkState,
    Transition,
    mermaid,
    step,
)

S, I, A = LinkState, LinkInput, Action  # noqa: E741 - short names keep the checks readable
HANDSHAKE = {S.LINKING, S.ACK_FIRST, S.DECIDED, S.RETRY_WAIT, S.CANCEL_WAIT, S.CANCEL_DECIDED}
DOCS = Path(__file__).resolve().parents[3] / "docs" / "links.md"


def test_every_pair_is_a_transition_or_a_local_protocol_error() -> None:
    assert len(TABLE) == len(LinkState) * len(LinkInput) == 220
    rejected = set()
    for state in LinkState:
        for event in LinkInput:
            entry = TABLE[(state, event)]
            assert isinstance(entry, Transition)
            if A.REJECT in entry.actions:
                assert entry.actions == (A.REJECT,) and entry.next is state
                with pytest.raises(LocalProtocolError) as info:
                    step(state, event)
                assert info.value.fields == {"state": state.value, "input": event.value}
                rejected.add((state, event))
            else:
                assert step(state, event) is entry
    # A peer can never make the core raise: the only remote input that is rejected is
    # LINK_AGAIN, which the core produces only in the states that know the peer.
    remote_rejects = {(s, e) for s, e in rejected if e not in LOCAL_INPUTS}
    assert remote_rejects == {(s, I.LINK_AGAIN) for s in LinkState if s not in KNOWS_PEER}
    # Internal inputs exist only where the core produces them.
    assert {s for s in LinkState if (s, I.RETRY_TIMER) not in rejected} == {S.RETRY_WAIT}
    assert {s for s in LinkState if (s, I.GIVE_UP) not in rejected} == {S.RETRY_WAIT}
    assert {s for s in LinkState if (s, I.DRAINED) not in rejected} == {S.DRAINING}
    # Local requests rejected: unlinking nothing, linking while a link is ending.
    local = {(s, e) for s, e in rejected if e in (I.LINK, I.UNLINK)}
    assert local == {
        (S.IDLE, I.UNLINK),
        (S.CANCEL_WAIT, I.LINK),
        (S.CANCEL_DECIDED, I.LINK),
        (S.UNLINKING, I.LINK),
        (S.DRAINING, I.LINK),
    }


def _reachable(start: LinkState) -> set[LinkState]:
    seen = {start}
    todo = [start]
    while todo:
        state = todo.pop()
        for event in LinkInput:
            entry = TABLE[(state, event)]
            if A.REJECT not in entry.actions and entry.next not in seen:
                seen.add(entry.next)
                todo.append(entry.next)
    return seen


def test_every_state_is_reachable_and_no_state_is_a_trap() -> None:
    assert _reachable(S.IDLE) == set(LinkState)
    for state in LinkState:
        assert S.IDLE in _reachable(state), state


def test_links_close_and_establish_only_where_they_should() -> None:
    for (state, event), entry in TABLE.items():
        if A.CLOSE in entry.actions:
            assert entry.next is S.IDLE, (state, event)
            assert entry.actions[-1] is A.CLOSE
        if entry.next is S.IDLE and state is not S.IDLE and A.REJECT not in entry.actions:
            assert A.CLOSE in entry.actions, (state, event)  # nothing vanishes unreported
        if A.ESTABLISH in entry.actions:
            # From a state whose own decision was positive, into a state with a link.
            assert state in {S.LINKING, S.ACK_FIRST, S.DECIDED, S.CANCEL_DECIDED}, state
            assert entry.next in {S.ESTABLISHED, S.UNLINKING, S.DRAINING}
        if entry.next is S.ESTABLISHED and state is not S.ESTABLISHED:
            assert A.ESTABLISH in entry.actions
        if A.DELIVER in entry.actions:
            assert entry.next in {S.ESTABLISHED, S.UNLINKING, S.DRAINING}


def test_a_fatal_refusal_always_wins() -> None:
    # Whatever the handshake is waiting for, a fatal answer of the peer ends it for
    # good, even while a transient refusal waits to be retried (Java bug 1).
    for state in HANDSHAKE:
        assert TABLE[(state, I.ACK_FATAL)].next is S.IDLE, state
        assert A.SCHEDULE_RETRY not in TABLE[(state, I.ACK_FATAL)].actions
    # A transient refusal schedules a retry (or gives up past the limit), never closes
    # straight away in the states where we asked for the link.
    for state in (S.LINKING, S.DECIDED):
        assert TABLE[(state, I.ACK_TRANSIENT)].next is S.RETRY_WAIT
        assert TABLE[(state, I.ACK_TRANSIENT)].actions == (A.SCHEDULE_RETRY,)


def test_data_confirms_a_link_and_late_decisions_are_ignored() -> None:
    # Notes AF-B: DATA before the LINKACK establishes; the LINKACK is then ignored.
    assert TABLE[(S.DECIDED, I.DATA)] == Transition(
        next=S.ESTABLISHED, actions=(A.ESTABLISH, A.DELIVER)
    )
    assert TABLE[(S.ESTABLISHED, I.ACK_OK)].actions == (A.IGNORE,)
    # Without the peer's metadata a DATA cannot confirm anything: "socket not linked".
    for state in (S.IDLE, S.LINKING, S.ACK_FIRST, S.RETRY_WAIT, S.CANCEL_WAIT):
        assert TABLE[(state, I.DATA)].actions == (A.SEND_NOT_LINKED,), state


def test_unlinking_waits_for_every_message_in_flight() -> None:
    assert TABLE[(S.ESTABLISHED, I.UNLINK)].actions == (A.SEND_UNLINK,)
    assert TABLE[(S.UNLINKING, I.DATA)].actions == (A.DELIVER,)
    assert TABLE[(S.DRAINING, I.DATA)].actions == (A.DELIVER, A.CHECK_DRAINED)
    assert TABLE[(S.DRAINING, I.DRAINED)].next is S.IDLE
    assert TABLE[(S.ESTABLISHED, I.UNLINK_MSG)].actions[-1] is A.CHECK_DRAINED


def test_the_diagram_is_generated_from_the_table_and_is_in_the_docs() -> None:
    text = mermaid()
    assert text.startswith("stateDiagram-v2")
    edges = [line for line in text.splitlines() if "-->" in line and "[*]" not in line]
    for (state, event), entry in TABLE.items():
        quiet = entry.next is state and set(entry.actions) <= {A.IGNORE, A.REJECT}
        if quiet or A.REJECT in entry.actions:
            continue
        prefix = f"    {state.value} --> {entry.next.value}: "
        assert any(
            line.startswith(prefix) and event.value in line[len(prefix) :].split(", ")
            for line in edges
        ), (state, event)
    docs = DOCS.read_text(encoding="utf-8")
    assert text in docs, "docs/links.md is out of date: paste machine.mermaid()"
