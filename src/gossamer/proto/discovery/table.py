"""The Prototari per-address state machine as a table: ``(state, input) -> (state, actions)``.

A node keeps one state per remote identity (address and unicast port). The
core classifies every datagram and timer into an ``Input`` (the classification
folds in the conditions the spec puts on each step: a free slot, a recent
broadcast of ours, the answer rate), looks the pair up here, and carries out
the ``Action`` list in order. A pair that is not in the table cannot happen
when the core is correct; ``transition`` raises ``LocalProtocolError`` for it.

States (spec section in brackets)::

    UNKNOWN   no entry: not a peer, nothing reserved
    RESERVED  we answered its pelotari? with aupa! and hold a slot for it;
              waiting for its dale! (1b steps 3-5)
    PEER      registered, heard from within the inactive-peer time (1c, 2)
    PROBING   registered, silent for the inactive-peer time: hor? sent,
              waiting up to the heartbeat max wait, counting misses (2)

See ``docs/discovery.md`` for the diagram and for why some rows differ from
the original Go code.
"""

from __future__ import annotations

from enum import Enum

from gossamer.proto.transitions import lookup

__all__ = ["TRANSITIONS", "Action", "Input", "PeerState", "transition"]


class PeerState(Enum):
    UNKNOWN = "unknown"
    RESERVED = "reserved"
    PEER = "peer"
    PROBING = "probing"


class Input(Enum):
    """What happened, as classified by the core."""

    #: pelotari? we may answer: a free slot (or one already reserved for it) and answer budget.
    DISCOVER = "discover"
    #: pelotari? we must not answer: no free slot (1b step 2) or over the answer rate.
    DISCOVER_REFUSED = "discover_refused"
    #: pelotari? from a registered peer on the original wire, where a broadcast is the only
    #: sign of life a peer that never answers hor? (the Go original) gives.
    DISCOVER_ALIVE = "discover_alive"
    #: aupa! within the handshake timeout of our own broadcast, a slot for it, answer budget.
    RESPOND = "respond"
    #: aupa! to our recent broadcast while we have no free slot, with answer budget left.
    RESPOND_FULL = "respond_full"
    #: aupa! we did not ask for (no recent broadcast of ours), or over the answer rate.
    RESPOND_REFUSED = "respond_refused"
    CONFIRM = "confirm"  # dale!
    #: hor? we may answer (answer budget left).
    HEARTBEAT = "heartbeat"
    #: hor? over the answer rate.
    HEARTBEAT_REFUSED = "heartbeat_refused"
    HEARTBEAT_REPLY = "heartbeat_reply"  # hemen nago!
    DISCONNECT = "disconnect"  # agur!
    DATA = "data"
    #: Local decision: free this peer's slot for a stranded broadcaster ("rebalance").
    EVICT = "evict"
    #: Timer: re-send the request of this state (aupa! while RESERVED, hor? while PROBING).
    RETRY_DUE = "retry_due"
    #: Timer: the reservation's handshake timeout passed without dale! (1b step 5).
    RESERVATION_EXPIRED = "reservation_expired"
    #: Timer: nothing heard from the peer for the inactive-peer time (2 step 2).
    INACTIVE = "inactive"
    #: Timer: a heartbeat wait ended without an answer; fewer than max misses so far (2 step 5).
    MISS = "miss"
    #: Timer: the wait that brings the missed count to the maximum (2 step 6).
    LAST_MISS = "last_miss"


class Action(Enum):
    """What the core does, in table order."""

    RESERVE = "reserve"  # start (or restart) a reservation and its timers
    RELEASE = "release"  # give the reserved slot back
    REGISTER = "register"  # add as peer (converting a reservation); peer_up, reason handshake
    REMOVE_LEAVE = "remove_leave"  # peer said agur!: peer_down, reason leave
    REMOVE_HEARTBEAT = "remove_heartbeat"  # third miss: peer_down, reason heartbeat
    REMOVE_EVICT = "remove_evict"  # we said agur! to make room: peer_down, reason leave
    SEEN = "seen"  # last seen = now, missed count = 0
    START_PROBE = "start_probe"  # open a heartbeat wait window
    COUNT_MISS = "count_miss"  # missed += 1 and open the next window
    DELIVER = "deliver"  # hand the application datagram up
    SEND_RESPOND = "send_respond"  # aupa!
    SEND_CONFIRM = "send_confirm"  # dale!
    SEND_HEARTBEAT = "send_heartbeat"  # hor?
    SEND_HEARTBEAT_REPLY = "send_heartbeat_reply"  # hemen nago!
    SEND_DISCONNECT = "send_disconnect"  # agur!
    DROP_REFUSED = "drop_refused"  # counted: we may not answer (full or rate-limited)
    DROP_UNSOLICITED = "drop_unsolicited"  # counted: aupa!/dale! we did not ask for
    DROP_NON_PEER = "drop_non_peer"  # counted: peer-only message from a non-peer
    DROP_NON_PEER_DATA = "drop_non_peer_data"  # counted: application datagram from a non-peer
    DROP_UNEXPECTED = "drop_unexpected"  # counted: makes no sense in this state
    IGNORE_PEER_BROADCAST = "ignore_peer_broadcast"  # counted: 1b step 1


S, I, A = PeerState, Input, Action  # noqa: E741 - the table reads better with short names
_Row = tuple[PeerState, tuple[Action, ...]]

# Rows shared by PEER and PROBING: any unicast message from a registered peer is
# "seen" (spec 2 step 4, generalised: any message proves the peer is there) and
# ends a probe. pelotari? is not: see docs/discovery.md, "What counts as seen".
_REGISTERED: dict[Input, _Row] = {
    I.RESPOND: (S.PEER, (A.SEEN, A.SEND_CONFIRM)),  # repairs a lost dale! (1c step 3 again)
    I.RESPOND_REFUSED: (S.PEER, (A.SEEN,)),
    I.CONFIRM: (S.PEER, (A.SEEN,)),  # duplicate dale!, or simultaneous discovery
    I.HEARTBEAT: (S.PEER, (A.SEEN, A.SEND_HEARTBEAT_REPLY)),
    I.HEARTBEAT_REFUSED: (S.PEER, (A.SEEN,)),
    I.HEARTBEAT_REPLY: (S.PEER, (A.SEEN,)),
    I.DISCONNECT: (S.UNKNOWN, (A.REMOVE_LEAVE,)),
    I.DATA: (S.PEER, (A.SEEN, A.DELIVER)),
}

TRANSITIONS: dict[tuple[PeerState, Input], _Row] = {
    # -- a stranger ------------------------------------------------------------------
    (S.UNKNOWN, I.DISCOVER): (S.RESERVED, (A.RESERVE, A.SEND_RESPOND)),  # 1b steps 3-4
    (S.UNKNOWN, I.DISCOVER_REFUSED): (S.UNKNOWN, (A.DROP_REFUSED,)),  # 1b step 2
    (S.UNKNOWN, I.RESPOND): (S.PEER, (A.REGISTER, A.SEND_CONFIRM)),  # 1c steps 2-3
    # 1c step 1. Saying agur! lets the responder release the slot it reserved for us
    # now rather than after the handshake timeout, so it can answer someone with room.
    (S.UNKNOWN, I.RESPOND_FULL): (S.UNKNOWN, (A.DROP_REFUSED, A.SEND_DISCONNECT)),
    (S.UNKNOWN, I.RESPOND_REFUSED): (S.UNKNOWN, (A.DROP_UNSOLICITED,)),
    (S.UNKNOWN, I.CONFIRM): (S.UNKNOWN, (A.DROP_UNSOLICITED,)),  # unsolicited or late (1b 5)
    # It believes we are its peer and we are not: say so, so it removes us at once
    # instead of after three missed heartbeats.
    (S.UNKNOWN, I.HEARTBEAT): (S.UNKNOWN, (A.DROP_NON_PEER, A.SEND_DISCONNECT)),
    (S.UNKNOWN, I.HEARTBEAT_REFUSED): (S.UNKNOWN, (A.DROP_NON_PEER,)),
    (S.UNKNOWN, I.HEARTBEAT_REPLY): (S.UNKNOWN, (A.DROP_NON_PEER,)),
    (S.UNKNOWN, I.DISCONNECT): (S.UNKNOWN, (A.DROP_NON_PEER,)),
    (S.UNKNOWN, I.DATA): (S.UNKNOWN, (A.DROP_NON_PEER_DATA,)),  # Delivery: non-peers ignored
    # -- we answered it and hold a slot ----------------------------------------------
    # Its next broadcast means our aupa! or its dale! was lost: answer again and
    # restart the reservation (the slot is already held, so "full" does not apply).
    (S.RESERVED, I.DISCOVER): (S.RESERVED, (A.RESERVE, A.SEND_RESPOND)),
    (S.RESERVED, I.DISCOVER_REFUSED): (S.RESERVED, (A.DROP_REFUSED,)),
    # Simultaneous discovery: both broadcast, both answered; its aupa! completes ours.
    (S.RESERVED, I.RESPOND): (S.PEER, (A.REGISTER, A.SEND_CONFIRM)),
    (S.RESERVED, I.RESPOND_REFUSED): (S.RESERVED, (A.DROP_UNSOLICITED,)),
    (S.RESERVED, I.CONFIRM): (S.PEER, (A.REGISTER,)),  # 1b step 5
    # It sends hor? or data only to a peer it registered, and it registered us only
    # because of our aupa!: its dale! was lost, and this confirms the handshake.
    (S.RESERVED, I.HEARTBEAT): (S.PEER, (A.REGISTER, A.SEND_HEARTBEAT_REPLY)),
    (S.RESERVED, I.HEARTBEAT_REFUSED): (S.PEER, (A.REGISTER,)),
    (S.RESERVED, I.DATA): (S.PEER, (A.REGISTER, A.DELIVER)),
    (S.RESERVED, I.HEARTBEAT_REPLY): (S.RESERVED, (A.DROP_UNEXPECTED,)),
    (S.RESERVED, I.DISCONNECT): (S.UNKNOWN, (A.RELEASE,)),
    (S.RESERVED, I.RETRY_DUE): (S.RESERVED, (A.SEND_RESPOND,)),
    (S.RESERVED, I.RESERVATION_EXPIRED): (S.UNKNOWN, (A.RELEASE,)),  # 1b step 5
    # -- registered and recently heard ------------------------------------------------
    (S.PEER, I.DISCOVER): (S.PEER, (A.IGNORE_PEER_BROADCAST,)),  # 1b step 1
    (S.PEER, I.DISCOVER_REFUSED): (S.PEER, (A.IGNORE_PEER_BROADCAST,)),
    (S.PEER, I.DISCOVER_ALIVE): (S.PEER, (A.SEEN, A.IGNORE_PEER_BROADCAST)),
    **{(S.PEER, i): row for i, row in _REGISTERED.items()},
    (S.PEER, I.INACTIVE): (S.PROBING, (A.START_PROBE, A.SEND_HEARTBEAT)),  # 2 step 2
    (S.PEER, I.EVICT): (S.UNKNOWN, (A.SEND_DISCONNECT, A.REMOVE_EVICT)),
    # -- registered, silent, being probed --------------------------------------------
    (S.PROBING, I.DISCOVER): (S.PROBING, (A.IGNORE_PEER_BROADCAST,)),
    (S.PROBING, I.DISCOVER_REFUSED): (S.PROBING, (A.IGNORE_PEER_BROADCAST,)),
    (S.PROBING, I.DISCOVER_ALIVE): (S.PEER, (A.SEEN, A.IGNORE_PEER_BROADCAST)),
    **{(S.PROBING, i): row for i, row in _REGISTERED.items()},  # 2 step 4
    (S.PROBING, I.EVICT): (S.UNKNOWN, (A.SEND_DISCONNECT, A.REMOVE_EVICT)),
    (S.PROBING, I.RETRY_DUE): (S.PROBING, (A.SEND_HEARTBEAT,)),
    (S.PROBING, I.MISS): (S.PROBING, (A.COUNT_MISS, A.SEND_HEARTBEAT)),  # 2 step 5
    (S.PROBING, I.LAST_MISS): (S.UNKNOWN, (A.REMOVE_HEARTBEAT,)),  # 2 step 6
}


def transition(state: PeerState, event: Input) -> _Row:
    """The next state and the actions for ``event`` in ``state``.

    Raises ``LocalProtocolError`` for a pair the table does not define: the
    core asked for something impossible (for example a heartbeat timer for an
    address that is not registered), which is a bug on this side.
    """
    return lookup(TRANSITIONS, state, event)
