"""The link state machine as a table: ``(state, input) -> (next state, actions)``.

One link joins one local socket to one remote socket (a peer address and tag). The
design notes (``exon-middleware-notes.pt.md``, "Establishing a link") reduce linking to
three phases: waiting for the counterpart's metadata, waiting for its decision, and
computing the final decision; both decisions must be positive. The Java code
(reference (c), "Link state machine") adds cancelling, unlinking with a delivery
count, clock ids and retries. This table merges both; every pair of
:class:`LinkState` and :class:`LinkInput` has an entry, so nothing is left to chance
(a test sweeps every pair, and ``docs/links.md`` draws its diagram from this table).

States:

- ``IDLE``: no link (never linked, or closed and forgotten).
- ``LINKING``: our LINK (with our metadata) is sent; nothing heard yet (phase 1).
- ``ACK_FIRST``: our LINK is sent and the peer's positive LINKACK *without* metadata
  arrived before its own LINK (simultaneous LINKs, reordered); its decision is kept
  until its metadata arrives (Java ``linkReplyMsgReceived``).
- ``DECIDED``: we hold the peer's metadata and sent our positive decision; waiting
  for the peer's decision (phase 2). A DATA, FLOW or control message from the peer
  also proves its decision was positive (notes AF-B, "DATA confirming a link").
- ``RETRY_WAIT``: refused for now (temporarily unavailable, link exists, socket not
  found): a new LINK goes out after a randomized back-off, up to a limit (notes
  footnote 4; the Java code retried forever at a fixed 50 ms, bug 2).
- ``CANCEL_WAIT``: the application cancelled before we sent any decision; waiting
  for the peer's answer (or its LINK) to refuse it with ``CANCELED``.
- ``CANCEL_DECIDED``: the application cancelled after our positive decision left;
  if the peer accepts too, the link is up at its end, so we unlink it properly.
- ``ESTABLISHED``: both decisions positive; DATA flows under credits.
- ``UNLINKING``: our UNLINK (with our DATA count) is sent; waiting for the peer's.
- ``DRAINING``: both UNLINKs known; waiting until every DATA the peer sent has
  arrived, so nothing in flight is lost (Java "delivery counter equals sentCounter").

Inputs are classified by the core before the table is consulted: an incoming LINK is
``LINK_ACCEPT``, ``LINK_REFUSE_FATAL`` or ``LINK_REFUSE_TRANSIENT`` according to our
own decision, or ``LINK_AGAIN`` when we already hold metadata of that peer socket (a
new incarnation while the old link lives: answered "link exists", transient, as the
Java code does). A LINKACK is ``ACKMETA_*`` when it brings metadata we still need (the
suffix is then *our* decision on it, the peer's being positive), else ``ACK_OK``,
``ACK_FATAL`` or ``ACK_TRANSIENT`` by the peer's decision. Messages whose clock names
another incarnation never reach the table (they are dropped as stale first).

A fatal refusal always wins over a transient one: our own decision checks fatal
reasons first (:func:`gossamer.proto.link.patterns.decide`), and a fatal LINKACK ends a
link even while it waits to retry after a transient refusal (the Java code let the
last failed check win and could retry forever against a closed socket, bug 1).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from enum import Enum

from gossamer.errors import LocalProtocolError

__all__ = [
    "KNOWS_PEER",
    "LOCAL_INPUTS",
    "NEEDS_METADATA",
    "TABLE",
    "Action",
    "LinkInput",
    "LinkState",
    "Transition",
    "mermaid",
    "step",
    "transitions",
]


class LinkState(Enum):
    IDLE = "idle"
    LINKING = "linking"
    ACK_FIRST = "ack_first"
    DECIDED = "decided"
    RETRY_WAIT = "retry_wait"
    CANCEL_WAIT = "cancel_wait"
    CANCEL_DECIDED = "cancel_decided"
    ESTABLISHED = "established"
    UNLINKING = "unlinking"
    DRAINING = "draining"


class LinkInput(Enum):
    # local requests and internal conditions
    LINK = "link"
    UNLINK = "unlink"
    RETRY_TIMER = "retry_timer"
    GIVE_UP = "give_up"
    DRAINED = "drained"
    TRANSPORT_LOST = "transport_lost"
    VIOLATION = "violation"
    # classified messages from the peer socket
    LINK_ACCEPT = "link_accept"
    LINK_REFUSE_FATAL = "link_refuse_fatal"
    LINK_REFUSE_TRANSIENT = "link_refuse_transient"
    LINK_AGAIN = "link_again"
    ACKMETA_ACCEPT = "ackmeta_accept"
    ACKMETA_REFUSE_FATAL = "ackmeta_refuse_fatal"
    ACKMETA_REFUSE_TRANSIENT = "ackmeta_refuse_transient"
    ACK_OK = "ack_ok"
    ACK_FATAL = "ack_fatal"
    ACK_TRANSIENT = "ack_transient"
    DATA = "data"
    FLOW = "flow"
    UNLINK_MSG = "unlink_msg"
    ERR_NOT_FOUND = "err_not_found"
    ERR_NOT_LINKED = "err_not_linked"


#: Inputs that come from the local application or the core itself, not from the peer.
LOCAL_INPUTS = frozenset(
    {
        LinkInput.LINK,
        LinkInput.UNLINK,
        LinkInput.RETRY_TIMER,
        LinkInput.GIVE_UP,
        LinkInput.DRAINED,
        LinkInput.TRANSPORT_LOST,
        LinkInput.VIOLATION,
    }
)


#: States in which we hold the peer's metadata and our decision is out: a LINK from the
#: same peer socket is then a new incarnation, classified ``LINK_AGAIN``.
KNOWS_PEER = frozenset(
    {
        LinkState.DECIDED,
        LinkState.CANCEL_DECIDED,
        LinkState.ESTABLISHED,
        LinkState.UNLINKING,
        LinkState.DRAINING,
    }
)

#: States in which a positive LINKACK's metadata is still needed (classified ``ACKMETA_*``).
NEEDS_METADATA = frozenset({LinkState.LINKING, LinkState.CANCEL_WAIT})


class Action(Enum):
    """What the core does on a transition, in the order listed."""

    NEW_CLOCK = "new_clock"  # a new incarnation: fresh local clock, forget peer metadata
    SEND_LINK = "send_link"  # LINK with our metadata
    STORE_META = "store_meta"  # keep the peer's metadata, clock and initial credits
    SEND_ACK = "send_ack"  # LINKACK with our decision, no metadata (already sent)
    SEND_ACK_META = "send_ack_meta"  # LINKACK with our decision and our metadata
    SEND_ACK_CANCELED = "send_ack_canceled"  # LINKACK(CANCELED)
    SEND_ACK_EXISTS = "send_ack_exists"  # LINKACK(LINK_EXISTS) + metadata, to a new incarnation
    STASH_ACK = "stash_ack"  # remember the peer's positive decision until its LINK arrives
    ESTABLISH = "establish"  # credits from the peer's metadata, link_up, writable
    SCHEDULE_RETRY = "schedule_retry"  # randomized back-off, or GIVE_UP past the limit
    CANCEL_RETRY = "cancel_retry"
    DELIVER = "deliver"  # DATA into the socket queue (control: handled by the pattern)
    APPLY_FLOW = "apply_flow"  # credit variation
    SEND_UNLINK = "send_unlink"  # UNLINK with our DATA count
    RECORD_PEER_SENT = "record_peer_sent"  # the peer's DATA count from its UNLINK
    CHECK_DRAINED = "check_drained"  # DRAINED once every DATA the peer sent arrived
    SEND_NOT_LINKED = "send_not_linked"  # ERROR(SOCKET_NOT_LINKED) for the message
    IGNORE = "ignore"  # counted and traced as a drop, nothing else
    CLOSE = "close"  # forget the link; link_down with the input's reason
    REJECT = "reject"  # a local request not allowed here: LocalProtocolError


@dataclass(frozen=True, slots=True, kw_only=True)
class Transition:
    next: LinkState
    actions: tuple[Action, ...] = ()


S = LinkState
I = LinkInput  # noqa: E741 - short names keep the table readable
A = Action


def _t(next_state: LinkState, *actions: Action) -> Transition:
    return Transition(next=next_state, actions=actions)


# Rows shared by several states --------------------------------------------------------

_STALE = (A.IGNORE,)

#: The internal inputs that exist only in one state are impossible elsewhere: asking
#: for them is a bug of the core, reported as a LocalProtocolError.
_IMPOSSIBLE_INTERNAL = {I.RETRY_TIMER, I.GIVE_UP, I.DRAINED}


def _base(state: LinkState) -> dict[LinkInput, Transition]:
    """Defaults for a state: stale replies ignored, internal inputs impossible."""
    row: dict[LinkInput, Transition] = {}
    for each in LinkInput:
        if each in _IMPOSSIBLE_INTERNAL:
            row[each] = _t(state, A.REJECT)
        elif each in LOCAL_INPUTS:
            continue  # every state spells out its local inputs
        else:
            row[each] = _t(state, *_STALE)
    return row


def _table() -> dict[tuple[LinkState, LinkInput], Transition]:
    rows: dict[LinkState, dict[LinkInput, Transition]] = {s: _base(s) for s in LinkState}
    # A peer's UNLINK proves its positive decision, as its DATA does: establish, then
    # drain what it sent (in DECIDED and in CANCEL_DECIDED alike).
    unlinked_by_peer = _t(
        S.DRAINING, A.ESTABLISH, A.RECORD_PEER_SENT, A.SEND_UNLINK, A.CHECK_DRAINED
    )

    # IDLE: nothing known about the peer socket.
    rows[S.IDLE].update(
        {
            I.LINK: _t(S.LINKING, A.NEW_CLOCK, A.SEND_LINK),
            I.UNLINK: _t(S.IDLE, A.REJECT),
            I.TRANSPORT_LOST: _t(S.IDLE),
            I.VIOLATION: _t(S.IDLE, A.IGNORE),
            # Notes "Establishing a link": the receiver of a LINK decides at once and
            # answers with its decision and its metadata (it has sent none yet).
            I.LINK_ACCEPT: _t(S.DECIDED, A.NEW_CLOCK, A.STORE_META, A.SEND_ACK_META),
            # A refused requester is not remembered (notes: "not obligated to retain").
            I.LINK_REFUSE_FATAL: _t(S.IDLE, A.SEND_ACK_META),
            I.LINK_REFUSE_TRANSIENT: _t(S.IDLE, A.SEND_ACK_META),
            I.LINK_AGAIN: _t(S.IDLE, A.REJECT),  # needs metadata we hold: not in IDLE
            # Notes "Socket Not Linked": any message but LINK from an unlinked socket.
            I.DATA: _t(S.IDLE, A.SEND_NOT_LINKED),
            # A FLOW carries no message: a late one (its link just closed) loses nothing.
            I.FLOW: _t(S.IDLE, A.IGNORE),
            I.UNLINK_MSG: _t(S.IDLE, A.SEND_NOT_LINKED),
        }
    )

    # LINKING: our LINK is out, nothing heard.
    rows[S.LINKING].update(
        {
            I.LINK: _t(S.LINKING),
            I.UNLINK: _t(S.CANCEL_WAIT),
            I.TRANSPORT_LOST: _t(S.IDLE, A.CLOSE),
            I.VIOLATION: _t(S.LINKING, A.IGNORE),
            # Simultaneous LINKs (scenario 2): our metadata went in our LINK, so our
            # decision goes without it.
            I.LINK_ACCEPT: _t(S.DECIDED, A.STORE_META, A.SEND_ACK),
            I.LINK_REFUSE_FATAL: _t(S.IDLE, A.SEND_ACK, A.CLOSE),
            I.LINK_REFUSE_TRANSIENT: _t(S.RETRY_WAIT, A.SEND_ACK, A.SCHEDULE_RETRY),
            I.LINK_AGAIN: _t(S.LINKING, A.REJECT),
            # Scenario 1: the peer's decision and metadata arrive together.
            I.ACKMETA_ACCEPT: _t(S.ESTABLISHED, A.STORE_META, A.SEND_ACK, A.ESTABLISH),
            I.ACKMETA_REFUSE_FATAL: _t(S.IDLE, A.SEND_ACK, A.CLOSE),
            I.ACKMETA_REFUSE_TRANSIENT: _t(S.RETRY_WAIT, A.SEND_ACK, A.SCHEDULE_RETRY),
            I.ACK_OK: _t(S.ACK_FIRST, A.STASH_ACK),
            I.ACK_FATAL: _t(S.IDLE, A.CLOSE),
            I.ACK_TRANSIENT: _t(S.RETRY_WAIT, A.SCHEDULE_RETRY),
            # The peer cannot have established: it has no decision of ours yet.
            I.DATA: _t(S.LINKING, A.SEND_NOT_LINKED),
            I.FLOW: _t(S.LINKING, A.SEND_NOT_LINKED),
            # The socket may appear later (Java: retry after "not found").
            I.ERR_NOT_FOUND: _t(S.RETRY_WAIT, A.SCHEDULE_RETRY),
        }
    )

    # ACK_FIRST: the peer accepted; its LINK (with its metadata) is still on its way.
    rows[S.ACK_FIRST].update(
        {
            I.LINK: _t(S.ACK_FIRST),
            I.UNLINK: _t(S.CANCEL_WAIT),
            I.TRANSPORT_LOST: _t(S.IDLE, A.CLOSE),
            I.VIOLATION: _t(S.ACK_FIRST, A.IGNORE),
            I.LINK_ACCEPT: _t(S.ESTABLISHED, A.STORE_META, A.SEND_ACK, A.ESTABLISH),
            I.LINK_REFUSE_FATAL: _t(S.IDLE, A.SEND_ACK, A.CLOSE),
            I.LINK_REFUSE_TRANSIENT: _t(S.RETRY_WAIT, A.SEND_ACK, A.SCHEDULE_RETRY),
            I.LINK_AGAIN: _t(S.ACK_FIRST, A.REJECT),
            # A fatal refusal wins even over a decision already received.
            I.ACK_FATAL: _t(S.IDLE, A.CLOSE),
            I.DATA: _t(S.ACK_FIRST, A.SEND_NOT_LINKED),
            I.FLOW: _t(S.ACK_FIRST, A.SEND_NOT_LINKED),
        }
    )

    # DECIDED: our positive decision is out; waiting for the peer's.
    rows[S.DECIDED].update(
        {
            I.LINK: _t(S.DECIDED),
            I.UNLINK: _t(S.CANCEL_DECIDED),
            I.TRANSPORT_LOST: _t(S.IDLE, A.CLOSE),
            I.VIOLATION: _t(S.DECIDED, A.IGNORE),
            I.LINK_AGAIN: _t(S.DECIDED, A.SEND_ACK_EXISTS),
            I.ACK_OK: _t(S.ESTABLISHED, A.ESTABLISH),
            I.ACK_FATAL: _t(S.IDLE, A.CLOSE),
            I.ACK_TRANSIENT: _t(S.RETRY_WAIT, A.SCHEDULE_RETRY),
            # Notes AF-B: DATA (or FLOW, or a control message) can only flow once the
            # peer has established, so it proves the peer's positive decision.
            I.DATA: _t(S.ESTABLISHED, A.ESTABLISH, A.DELIVER),
            I.FLOW: _t(S.ESTABLISHED, A.ESTABLISH, A.APPLY_FLOW),
            I.UNLINK_MSG: unlinked_by_peer,
            I.ERR_NOT_FOUND: _t(S.RETRY_WAIT, A.SCHEDULE_RETRY),
            I.ERR_NOT_LINKED: _t(S.IDLE, A.CLOSE),
        }
    )

    # RETRY_WAIT: refused for now; a timer sends a new LINK (new incarnation).
    rows[S.RETRY_WAIT].update(
        {
            I.LINK: _t(S.RETRY_WAIT),
            I.UNLINK: _t(S.IDLE, A.CANCEL_RETRY, A.CLOSE),
            I.RETRY_TIMER: _t(S.LINKING, A.NEW_CLOCK, A.SEND_LINK),
            I.GIVE_UP: _t(S.IDLE, A.CLOSE),
            I.TRANSPORT_LOST: _t(S.RETRY_WAIT),
            I.VIOLATION: _t(S.RETRY_WAIT, A.IGNORE),
            # The peer links to us while we wait: it has none of our metadata (our
            # refused attempt was another incarnation), so we send it.
            I.LINK_ACCEPT: _t(S.DECIDED, A.CANCEL_RETRY, A.NEW_CLOCK, A.STORE_META,
                              A.SEND_ACK_META),
            I.LINK_REFUSE_FATAL: _t(S.IDLE, A.CANCEL_RETRY, A.SEND_ACK_META, A.CLOSE),
            I.LINK_REFUSE_TRANSIENT: _t(S.RETRY_WAIT, A.SEND_ACK_META),
            I.LINK_AGAIN: _t(S.RETRY_WAIT, A.REJECT),
            # Fatal wins over transient: a late fatal answer ends the wait for good.
            I.ACK_FATAL: _t(S.IDLE, A.CANCEL_RETRY, A.CLOSE),
            I.DATA: _t(S.RETRY_WAIT, A.SEND_NOT_LINKED),
            I.FLOW: _t(S.RETRY_WAIT, A.SEND_NOT_LINKED),
        }
    )

    # CANCEL_WAIT: cancelled before any decision of ours left.
    rows[S.CANCEL_WAIT].update(
        {
            I.LINK: _t(S.CANCEL_WAIT, A.REJECT),
            I.UNLINK: _t(S.CANCEL_WAIT),
            I.TRANSPORT_LOST: _t(S.IDLE, A.CLOSE),
            I.VIOLATION: _t(S.CANCEL_WAIT, A.IGNORE),
            # Java: "the peer's LINK is answered with the fatal AC_CANCELED".
            I.LINK_ACCEPT: _t(S.IDLE, A.SEND_ACK_CANCELED, A.CLOSE),
            I.LINK_REFUSE_FATAL: _t(S.IDLE, A.SEND_ACK_CANCELED, A.CLOSE),
            I.LINK_REFUSE_TRANSIENT: _t(S.IDLE, A.SEND_ACK_CANCELED, A.CLOSE),
            I.LINK_AGAIN: _t(S.CANCEL_WAIT, A.REJECT),
            # The peer waits for our decision: it is "canceled".
            I.ACKMETA_ACCEPT: _t(S.IDLE, A.SEND_ACK_CANCELED, A.CLOSE),
            I.ACKMETA_REFUSE_FATAL: _t(S.IDLE, A.SEND_ACK_CANCELED, A.CLOSE),
            I.ACKMETA_REFUSE_TRANSIENT: _t(S.IDLE, A.SEND_ACK_CANCELED, A.CLOSE),
            # Simultaneous case: its LINK is still coming; refuse that one.
            I.ACK_OK: _t(S.CANCEL_WAIT, A.STASH_ACK),
            I.ACK_FATAL: _t(S.IDLE, A.CLOSE),
            I.ACK_TRANSIENT: _t(S.IDLE, A.CLOSE),
            I.DATA: _t(S.CANCEL_WAIT, A.SEND_NOT_LINKED),
            I.FLOW: _t(S.CANCEL_WAIT, A.SEND_NOT_LINKED),
            I.ERR_NOT_FOUND: _t(S.IDLE, A.CLOSE),
        }
    )

    # CANCEL_DECIDED: cancelled after our positive decision left.
    rows[S.CANCEL_DECIDED].update(
        {
            I.LINK: _t(S.CANCEL_DECIDED, A.REJECT),
            I.UNLINK: _t(S.CANCEL_DECIDED),
            I.TRANSPORT_LOST: _t(S.IDLE, A.CLOSE),
            I.VIOLATION: _t(S.CANCEL_DECIDED, A.IGNORE),
            I.LINK_AGAIN: _t(S.CANCEL_DECIDED, A.SEND_ACK_EXISTS),
            # Java: "a positive reply from the peer leads to UNLINKING and an UNLINK".
            I.ACK_OK: _t(S.UNLINKING, A.ESTABLISH, A.SEND_UNLINK),
            I.ACK_FATAL: _t(S.IDLE, A.CLOSE),
            I.ACK_TRANSIENT: _t(S.IDLE, A.CLOSE),
            I.DATA: _t(S.UNLINKING, A.ESTABLISH, A.DELIVER, A.SEND_UNLINK),
            I.FLOW: _t(S.UNLINKING, A.ESTABLISH, A.APPLY_FLOW, A.SEND_UNLINK),
            I.UNLINK_MSG: unlinked_by_peer,
            I.ERR_NOT_FOUND: _t(S.IDLE, A.CLOSE),
            I.ERR_NOT_LINKED: _t(S.IDLE, A.CLOSE),
        }
    )

    # ESTABLISHED.
    rows[S.ESTABLISHED].update(
        {
            I.LINK: _t(S.ESTABLISHED),
            I.UNLINK: _t(S.UNLINKING, A.SEND_UNLINK),
            I.TRANSPORT_LOST: _t(S.IDLE, A.CLOSE),
            # A peer that breaks the credit rules is cut off, loudly.
            I.VIOLATION: _t(S.IDLE, A.SEND_NOT_LINKED, A.CLOSE),
            # A new incarnation while this one lives (e.g. its UNLINK is still in
            # flight): "link exists", transient, so the peer retries (Java).
            I.LINK_AGAIN: _t(S.ESTABLISHED, A.SEND_ACK_EXISTS),
            # AF-B-4: a LINKACK after a DATA that confirmed the link is ignored.
            I.DATA: _t(S.ESTABLISHED, A.DELIVER),
            I.FLOW: _t(S.ESTABLISHED, A.APPLY_FLOW),
            I.UNLINK_MSG: _t(S.DRAINING, A.RECORD_PEER_SENT, A.SEND_UNLINK, A.CHECK_DRAINED),
            I.ERR_NOT_FOUND: _t(S.IDLE, A.CLOSE),
            I.ERR_NOT_LINKED: _t(S.IDLE, A.CLOSE),
        }
    )

    # UNLINKING: our UNLINK is out; DATA still arriving is delivered.
    rows[S.UNLINKING].update(
        {
            I.LINK: _t(S.UNLINKING, A.REJECT),
            I.UNLINK: _t(S.UNLINKING),
            I.TRANSPORT_LOST: _t(S.IDLE, A.CLOSE),
            I.VIOLATION: _t(S.IDLE, A.SEND_NOT_LINKED, A.CLOSE),
            I.LINK_AGAIN: _t(S.UNLINKING, A.SEND_ACK_EXISTS),
            I.DATA: _t(S.UNLINKING, A.DELIVER),
            I.FLOW: _t(S.UNLINKING, A.APPLY_FLOW),
            I.UNLINK_MSG: _t(S.DRAINING, A.RECORD_PEER_SENT, A.CHECK_DRAINED),
            I.ERR_NOT_FOUND: _t(S.IDLE, A.CLOSE),
            I.ERR_NOT_LINKED: _t(S.IDLE, A.CLOSE),
        }
    )

    # DRAINING: the peer's count is known; wait for the rest of its DATA.
    rows[S.DRAINING].update(
        {
            I.LINK: _t(S.DRAINING, A.REJECT),
            I.UNLINK: _t(S.DRAINING),
            I.DRAINED: _t(S.IDLE, A.CLOSE),
            I.TRANSPORT_LOST: _t(S.IDLE, A.CLOSE),
            I.VIOLATION: _t(S.IDLE, A.SEND_NOT_LINKED, A.CLOSE),
            I.LINK_AGAIN: _t(S.DRAINING, A.SEND_ACK_EXISTS),
            I.DATA: _t(S.DRAINING, A.DELIVER, A.CHECK_DRAINED),
            I.FLOW: _t(S.DRAINING, A.APPLY_FLOW),
            I.ERR_NOT_FOUND: _t(S.IDLE, A.CLOSE),
            I.ERR_NOT_LINKED: _t(S.IDLE, A.CLOSE),
        }
    )

    table: dict[tuple[LinkState, LinkInput], Transition] = {}
    for state, row in rows.items():
        for each in LinkInput:
            table[(state, each)] = row[each]  # KeyError here = a state forgot an input
    return table


#: Every ``(state, input)`` pair and what it does.
TABLE: dict[tuple[LinkState, LinkInput], Transition] = _table()


def step(state: LinkState, event: LinkInput) -> Transition:
    """The transition for ``event`` in ``state``.

    Raises ``LocalProtocolError`` for a pair whose only action is ``REJECT``: a local
    request that the state does not allow (e.g. unlinking a link that does not exist),
    or an internal input the core should never produce there.
    """
    transition = TABLE[(state, event)]
    if transition.actions and transition.actions[0] is Action.REJECT:
        raise LocalProtocolError(
            f"{event.value} is not allowed in link state {state.value}",
            state=state.value,
            input=event.value,
        )
    return transition


def transitions() -> Iterator[tuple[LinkState, LinkInput, Transition]]:
    """Every entry of the table, in declaration order."""
    for (state, event), transition in TABLE.items():
        yield state, event, transition


def mermaid() -> str:
    """A Mermaid ``stateDiagram-v2`` of the table, for ``docs/links.md``.

    Self-loops whose only action is ``IGNORE``/``REJECT`` (or nothing) are left out;
    parallel edges between two states are merged into one label.
    """
    edges: dict[tuple[LinkState, LinkState], list[str]] = {}
    for state, event, transition in transitions():
        quiet = set(transition.actions) <= {Action.IGNORE, Action.REJECT}
        if transition.next is state and quiet:
            continue
        if Action.REJECT in transition.actions:
            continue
        edges.setdefault((state, transition.next), []).append(event.value)
    lines = ["stateDiagram-v2", "    [*] --> idle"]
    for (src, dst), labels in edges.items():
        lines.append(f"    {src.value} --> {dst.value}: {', '.join(labels)}")
    return "\n".join(lines)
