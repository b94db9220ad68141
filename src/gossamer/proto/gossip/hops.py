"""The life of one TCP hop as a table: ``(state, input) -> (next state, action)``.

Chatter sent each chunk to its head and forgot it: "a failed ``send`` is ignored", and a
connect that never failed blocked forever (chatter-as-coded.md §8, §10). So a dead next
hop cut off its whole chunk. gossamer keeps every chunk it hands to a next hop until the
hop is known to have taken it; if the hop fails, the chunk is *re-planned*: sent to another
member of it, which carries on with the rest (Chatter's own retry rule for a failed connect,
``broadcast_to(rest, ...)``, applied to every failure).

States::

    AWAITING_ACK  sealed mode: sent, waiting for the next hop's ACK
    HELD          original-wire mode: sent, no ACK will come; kept ``ack_timeout`` seconds
                  in case the driver reports the connection failed
    REPLANNED     the hop failed and its chunk went elsewhere; kept ``ack_timeout`` seconds
                  so that a late ACK is recognised (and counted: it means duplicates)

Inputs: ``ACK`` (the next hop acknowledged), ``TIMEOUT`` (the state's deadline passed),
``STREAM_FAILED`` (the driver could not connect or write to the next hop).

``ACKED`` and ``GONE`` are terminal: the entry is deleted. A pair missing from the table
cannot happen in a correct core; ``transition`` raises ``LocalProtocolError``.
"""

from __future__ import annotations

from enum import Enum

from gossamer.proto.transitions import lookup

__all__ = ["TERMINAL", "TRANSITIONS", "HopAction", "HopInput", "HopState", "transition"]


class HopState(Enum):
    AWAITING_ACK = "awaiting_ack"
    HELD = "held"
    REPLANNED = "replanned"
    #: Terminal: the next hop took the chunk.
    ACKED = "acked"
    #: Terminal: nothing more to do.
    GONE = "gone"


class HopInput(Enum):
    ACK = "ack"
    TIMEOUT = "timeout"
    STREAM_FAILED = "stream_failed"


class HopAction(Enum):
    NONE = "none"
    #: Send the chunk to another of its members (or give up if none is left).
    REPLAN = "replan"
    #: An ACK for a hop already re-planned: the hop was slow, not dead; count it.
    LATE_ACK = "late_ack"
    #: An ACK where none was expected (an original Chatter peer sent one): count and ignore.
    UNEXPECTED_ACK = "unexpected_ack"


_S, _I, _A = HopState, HopInput, HopAction

TRANSITIONS: dict[tuple[HopState, HopInput], tuple[HopState, HopAction]] = {
    (_S.AWAITING_ACK, _I.ACK): (_S.ACKED, _A.NONE),
    (_S.AWAITING_ACK, _I.TIMEOUT): (_S.REPLANNED, _A.REPLAN),
    (_S.AWAITING_ACK, _I.STREAM_FAILED): (_S.REPLANNED, _A.REPLAN),
    (_S.HELD, _I.ACK): (_S.HELD, _A.UNEXPECTED_ACK),
    (_S.HELD, _I.TIMEOUT): (_S.GONE, _A.NONE),
    (_S.HELD, _I.STREAM_FAILED): (_S.REPLANNED, _A.REPLAN),
    (_S.REPLANNED, _I.ACK): (_S.GONE, _A.LATE_ACK),
    (_S.REPLANNED, _I.TIMEOUT): (_S.GONE, _A.NONE),
    (_S.REPLANNED, _I.STREAM_FAILED): (_S.REPLANNED, _A.NONE),
}

#: States whose entries are deleted on arrival.
TERMINAL = frozenset({HopState.ACKED, HopState.GONE})


def transition(state: HopState, event: HopInput) -> tuple[HopState, HopAction]:
    """The next state and the action for ``event`` in ``state``."""
    return lookup(TRANSITIONS, state, event)
