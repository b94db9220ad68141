"""The ISIS state machines as tables: ``(state, input) -> (next state, action)``.

Two machines, one instance per message:

- :data:`RECEIVER`, at every member (the sender included: it delivers its own
  messages through the same path, spec "How a process delivers its own message?"),
  for a message ``(sender, msg_id)``;
- :data:`SENDER`, at the member that multicast the message.

Every duplicate case of the spec ("What happens if a message is dropped or
delayed?") is one row, and the rows fix the original's bugs (reference (a),
"Bugs and gaps noticed"):

- a Data that arrives after the message was ordered or delivered is ignored: the
  original erased the wrong id after delivery and could re-add such a Data
  (bug 1, a double delivery) or crash on it (bug 2, ``ackMessageCache.at``);
- a duplicate Seq is re-acknowledged whatever the entry's state, delivered included;
- a Seq for a message never received, an Ack or SeqAck for a message never sent:
  ignored and counted, never a crash (bug 7).

``DISCARD`` is the outcome of the view-change flush for a crashed sender's message
that no survivor can order (see ``core`` and ``docs/isis.md``). A pair missing from
a table is a protocol error: :func:`step` raises ``LocalProtocolError`` for it.
"""

from __future__ import annotations

from enum import Enum
from typing import TypeVar

from gossamer.errors import LocalProtocolError

__all__ = [
    "RECEIVER",
    "SENDER",
    "RecvAction",
    "RecvInput",
    "RecvState",
    "SendAction",
    "SendInput",
    "SendState",
    "step",
]


class _Enum(Enum):
    """An enum whose members hash by identity (members are singletons, and equality is
    identity): table lookups happen for every message, and ``Enum.__hash__`` is Python."""

    __hash__ = object.__hash__


class RecvState(_Enum):
    UNKNOWN = "unknown"  # never received
    PROPOSED = "proposed"  # in the hold-back queue, undeliverable, our proposal sent
    ORDERED = "ordered"  # in the hold-back queue, final sequence known (deliverable)
    DELIVERED = "delivered"
    DISCARDED = "discarded"  # a crashed sender's message the survivors agreed to drop


class RecvInput(_Enum):
    DATA = "data"  # a DataMessage
    SEQ = "seq"  # a SeqMessage with a final sequence (>= 1)
    DISCARD = "discard"  # a SeqMessage with final sequence 0: the flush decided to drop it
    HEAD = "head"  # internal: the entry is at the head of the queue and deliverable


class RecvAction(_Enum):
    PROPOSE = "propose"  # latest += 1, enqueue undeliverable, send Ack with the proposal
    RESEND_ACK = "resend_ack"  # duplicate Data: the same Ack again (repairs a lost Ack)
    IGNORE_LATE_DATA = "ignore_late_data"  # Data after the final is known: nothing to do
    MARK = "mark"  # record the final, latest = max, SeqAck, deliver from the head
    RESEND_SEQ_ACK = "resend_seq_ack"  # duplicate Seq: the SeqAck again (repairs a lost one)
    DELIVER = "deliver"
    DROP_ENTRY = "drop_entry"  # remove from the queue, remember as discarded, SeqAck
    RECORD_DISCARD = "record_discard"  # remember as discarded (so late Data is ignored), SeqAck
    IGNORE_UNKNOWN = "ignore_unknown"  # Seq for a message never received: count, no answer
    CONFLICT = "conflict"  # contradicts what we know: count and ignore (never happens in a
    #                        correct run; kept so that no datagram can corrupt the order)


class SendState(_Enum):
    COLLECTING = "collecting"  # Data being sent, waiting for every member's Ack
    SEQUENCING = "sequencing"  # final sequence chosen, Seq being sent, waiting for SeqAcks
    DONE = "done"  # every member acknowledged the Seq; the message is forgotten


class SendInput(_Enum):
    ACK = "ack"  # an Ack from a member we still wait for
    ACK_DUP = "ack_dup"  # an Ack from a member that already answered (or is no member)
    ALL_ACKED = "all_acked"  # internal: no member left to wait for
    SEQ_ACK = "seq_ack"  # a SeqAck from a member we still wait for
    SEQ_ACK_DUP = "seq_ack_dup"
    ALL_SEQ_ACKED = "all_seq_acked"  # internal


class SendAction(_Enum):
    RECORD_PROPOSAL = "record_proposal"
    SEND_SEQ = "send_seq"  # final = largest proposal, ties to the smallest proposer
    STOP_SEQ = "stop_seq"  # stop sending the Seq to that member
    FORGET = "forget"
    IGNORE = "ignore"


S, IN, A = RecvState, RecvInput, RecvAction

RECEIVER: dict[tuple[RecvState, RecvInput], tuple[RecvState, RecvAction]] = {
    (S.UNKNOWN, IN.DATA): (S.PROPOSED, A.PROPOSE),
    (S.PROPOSED, IN.DATA): (S.PROPOSED, A.RESEND_ACK),
    (S.ORDERED, IN.DATA): (S.ORDERED, A.IGNORE_LATE_DATA),
    (S.DELIVERED, IN.DATA): (S.DELIVERED, A.IGNORE_LATE_DATA),
    (S.DISCARDED, IN.DATA): (S.DISCARDED, A.IGNORE_LATE_DATA),
    (S.UNKNOWN, IN.SEQ): (S.UNKNOWN, A.IGNORE_UNKNOWN),
    (S.PROPOSED, IN.SEQ): (S.ORDERED, A.MARK),
    (S.ORDERED, IN.SEQ): (S.ORDERED, A.RESEND_SEQ_ACK),
    (S.DELIVERED, IN.SEQ): (S.DELIVERED, A.RESEND_SEQ_ACK),
    (S.DISCARDED, IN.SEQ): (S.DISCARDED, A.CONFLICT),
    (S.UNKNOWN, IN.DISCARD): (S.DISCARDED, A.RECORD_DISCARD),
    (S.PROPOSED, IN.DISCARD): (S.DISCARDED, A.DROP_ENTRY),
    (S.ORDERED, IN.DISCARD): (S.ORDERED, A.CONFLICT),
    (S.DELIVERED, IN.DISCARD): (S.DELIVERED, A.CONFLICT),
    (S.DISCARDED, IN.DISCARD): (S.DISCARDED, A.RESEND_SEQ_ACK),
    (S.ORDERED, IN.HEAD): (S.DELIVERED, A.DELIVER),
}

SS, SI, SA = SendState, SendInput, SendAction

SENDER: dict[tuple[SendState, SendInput], tuple[SendState, SendAction]] = {
    (SS.COLLECTING, SI.ACK): (SS.COLLECTING, SA.RECORD_PROPOSAL),
    (SS.COLLECTING, SI.ACK_DUP): (SS.COLLECTING, SA.IGNORE),
    (SS.COLLECTING, SI.ALL_ACKED): (SS.SEQUENCING, SA.SEND_SEQ),
    # A SeqAck before any Seq was sent cannot come from a correct member.
    (SS.COLLECTING, SI.SEQ_ACK): (SS.COLLECTING, SA.IGNORE),
    (SS.COLLECTING, SI.SEQ_ACK_DUP): (SS.COLLECTING, SA.IGNORE),
    (SS.SEQUENCING, SI.ACK): (SS.SEQUENCING, SA.IGNORE),  # late or duplicate Ack
    (SS.SEQUENCING, SI.ACK_DUP): (SS.SEQUENCING, SA.IGNORE),
    (SS.SEQUENCING, SI.SEQ_ACK): (SS.SEQUENCING, SA.STOP_SEQ),
    (SS.SEQUENCING, SI.SEQ_ACK_DUP): (SS.SEQUENCING, SA.IGNORE),
    (SS.SEQUENCING, SI.ALL_SEQ_ACKED): (SS.DONE, SA.FORGET),
    (SS.DONE, SI.ACK): (SS.DONE, SA.IGNORE),
    (SS.DONE, SI.ACK_DUP): (SS.DONE, SA.IGNORE),
    (SS.DONE, SI.SEQ_ACK): (SS.DONE, SA.IGNORE),
    (SS.DONE, SI.SEQ_ACK_DUP): (SS.DONE, SA.IGNORE),
}

del S, IN, A, SS, SI, SA

_St = TypeVar("_St")
_In = TypeVar("_In")
_Ac = TypeVar("_Ac")


def step(table: dict[tuple[_St, _In], tuple[_St, _Ac]], state: _St, event: _In) -> tuple[_St, _Ac]:
    """Look a transition up; a missing pair is a ``LocalProtocolError`` (a bug here)."""
    try:
        return table[(state, event)]
    except KeyError:
        raise LocalProtocolError(
            "no transition for this input in this state", state=state, input=event
        ) from None
