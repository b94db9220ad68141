"""The ISIS state tables: every (state, input) pair is defined or a protocol error."""

from __future__ import annotations

import pytest

from gossamer.errors import LocalProtocolError
from gossamer.proto.isis.machine import (
    RECEIVER,
    SENDER,
    RecvAction,
    RecvInput,
    RecvState,
    SendAction,
    SendInput,
    SendState,
    step,
)


def test_every_receiver_pair_is_a_transition_or_a_protocol_error() -> None:
    defined = 0
    for state in RecvState:
        for event in RecvInput:
            if (state, event) in RECEIVER:
                nxt, action = step(RECEIVER, state, event)
                assert isinstance(nxt, RecvState) and isinstance(action, RecvAction)
                defined += 1
            else:
                # Only the internal HEAD input is undefined, and only where the entry is
                # not both queued and deliverable.
                assert event is RecvInput.HEAD and state is not RecvState.ORDERED
                with pytest.raises(LocalProtocolError):
                    step(RECEIVER, state, event)
    assert defined == 16


def test_every_sender_pair_is_a_transition_or_a_protocol_error() -> None:
    for state in SendState:
        for event in SendInput:
            if (state, event) in SENDER:
                nxt, action = step(SENDER, state, event)
                assert isinstance(nxt, SendState) and isinstance(action, SendAction)
            else:
                assert event in (SendInput.ALL_ACKED, SendInput.ALL_SEQ_ACKED)
                with pytest.raises(LocalProtocolError):
                    step(SENDER, state, event)


@pytest.mark.parametrize(
    ("state", "event", "expected"),
    [
        # Spec: a duplicate Data is dropped and the same Ack repeated.
        (RecvState.PROPOSED, RecvInput.DATA, (RecvState.PROPOSED, RecvAction.RESEND_ACK)),
        # Reference (a) bug 2: a Data after the Seq crashed the original.
        (RecvState.ORDERED, RecvInput.DATA, (RecvState.ORDERED, RecvAction.IGNORE_LATE_DATA)),
        # Reference (a) bug 1: a Data after delivery could be re-added and delivered twice.
        (RecvState.DELIVERED, RecvInput.DATA,
         (RecvState.DELIVERED, RecvAction.IGNORE_LATE_DATA)),
        # A duplicate Seq is re-acknowledged in every state, never re-delivered.
        (RecvState.ORDERED, RecvInput.SEQ, (RecvState.ORDERED, RecvAction.RESEND_SEQ_ACK)),
        (RecvState.DELIVERED, RecvInput.SEQ, (RecvState.DELIVERED, RecvAction.RESEND_SEQ_ACK)),
        (RecvState.UNKNOWN, RecvInput.SEQ, (RecvState.UNKNOWN, RecvAction.IGNORE_UNKNOWN)),
        (RecvState.DELIVERED, RecvInput.DISCARD, (RecvState.DELIVERED, RecvAction.CONFLICT)),
    ],
)  # fmt: skip
def test_duplicate_and_late_rows(
    state: RecvState, event: RecvInput, expected: tuple[RecvState, RecvAction]
) -> None:
    assert step(RECEIVER, state, event) == expected


def test_sender_rows_for_late_and_duplicate_answers() -> None:
    assert step(SENDER, SendState.SEQUENCING, SendInput.ACK) == (
        SendState.SEQUENCING,
        SendAction.IGNORE,
    )
    assert step(SENDER, SendState.COLLECTING, SendInput.ALL_ACKED)[1] is SendAction.SEND_SEQ
    assert step(SENDER, SendState.SEQUENCING, SendInput.ALL_SEQ_ACKED) == (
        SendState.DONE,
        SendAction.FORGET,
    )
