"""The life of one gateway connection as a table: ``(state, input) -> next state``.

States (singyeong.md "Basic 신경 Lifecycle"; singyeong-as-coded §3-§5):

- ``AWAITING_IDENTIFY``: hello (op 0) was sent; only identify (op 1) is acceptable.
- ``READY``: identified (op 2 sent); heartbeats and dispatches flow.
- ``CLOSED``: the gateway decided to close (op 8 or goodbye sent, or the transport
  ended). Anything that still arrives is ignored.

Inputs are what a received frame or an outside event turned out to be. Identify is
split by outcome because the outcome decides the next state. Every pair is in the
table (a test sweeps them); a missing pair would be a ``LocalProtocolError``.
"""

from __future__ import annotations

from enum import Enum
from typing import Final

from gossamer.proto.transitions import lookup

__all__ = ["TRANSITIONS", "ConnInput", "ConnState", "next_state"]


class ConnState(Enum):
    AWAITING_IDENTIFY = "awaiting_identify"
    READY = "ready"
    CLOSED = "closed"


class ConnInput(Enum):
    #: op 1 that passed every check.
    IDENTIFY_OK = "identify_ok"
    #: op 1 refused (malformed, duplicate, rate-limited, ETF while restricted...).
    IDENTIFY_REJECTED = "identify_rejected"
    #: op 5.
    HEARTBEAT = "heartbeat"
    #: op 4.
    DISPATCH = "dispatch"
    #: op 0, 2, 3, 6, 7 or 8 sent by a client: server-only opcodes.
    SERVER_OP = "server_op"
    #: A frame that does not decode (bad JSON, wrong frame type, unknown op...).
    DECODE_ERROR = "decode_error"
    #: The heartbeat (or identify) deadline passed.
    DEADLINE = "deadline"
    #: The gateway is shutting down (op 7 goodbye).
    SHUTDOWN = "shutdown"
    #: The transport ended (peer closed, reset).
    TRANSPORT_CLOSED = "transport_closed"


_A, _R, _C = ConnState.AWAITING_IDENTIFY, ConnState.READY, ConnState.CLOSED
_I = ConnInput

TRANSITIONS: Final[dict[tuple[ConnState, ConnInput], ConnState]] = {
    (_A, _I.IDENTIFY_OK): _R,
    (_A, _I.IDENTIFY_REJECTED): _C,
    # §4: "any non-identify op before identify -> op 8 ... close".
    (_A, _I.HEARTBEAT): _C,
    (_A, _I.DISPATCH): _C,
    (_A, _I.SERVER_OP): _C,
    (_A, _I.DECODE_ERROR): _C,
    (_A, _I.DEADLINE): _C,
    (_A, _I.SHUTDOWN): _C,
    (_A, _I.TRANSPORT_CLOSED): _C,
    # A second identify on a ready socket is answered with op 3 (the reference
    # registers a second client, §4); a refused one never closes a ready socket.
    (_R, _I.IDENTIFY_OK): _R,
    (_R, _I.IDENTIFY_REJECTED): _R,
    (_R, _I.HEARTBEAT): _R,
    (_R, _I.DISPATCH): _R,
    (_R, _I.SERVER_OP): _C,
    (_R, _I.DECODE_ERROR): _C,
    (_R, _I.DEADLINE): _C,
    (_R, _I.SHUTDOWN): _C,
    (_R, _I.TRANSPORT_CLOSED): _C,
    **{(_C, event): _C for event in ConnInput},
}


def next_state(state: ConnState, event: ConnInput) -> ConnState:
    """The state after ``event`` in ``state``; ``LocalProtocolError`` if undefined."""
    return lookup(TRANSITIONS, state, event)
