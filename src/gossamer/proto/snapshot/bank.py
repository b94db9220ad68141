"""The demonstration workload: money transfers whose total every snapshot must preserve.

Each member holds an account with ``initial`` units. A transfer of ``amount`` from p
to q is one multicast whose payload is the 4 big-endian bytes of ``to << 24 | amount``
(the original's uint32, so the bank runs on both wires): p debits its account
when it asks for the multicast; q credits its account when its application *takes*
the delivery (every member delivers every transfer, in the total order; only the
recipient acts on it). Money is therefore never created or destroyed, and at any instant

    sum of balances + money held back by p (multicasts queued behind a snapshot)
    + money received by q but not yet delivered (q's hold-back queue)
    + money delivered to q that q's application has not read yet (``unread``)
    + money on the wire to q  ==  members x initial.

A snapshot is consistent exactly when that equation holds in the recorded states
(:func:`gossamer.proto.snapshot.checks.check_bank`). Recorded states hold payloads as
hex text (JSON); :func:`from_json` reads them back.

On agreed views (``gossamer.proto.snapshot_group``) the payee may have left the group
by the time a transfer is delivered: a transfer withdrawn at a view change goes out
again in the next view, where a crashed payee is no member. Such a transfer is
*refunded*: its sender credits it back when it delivers it. Until then the money is the
sender's, in its hold-back queue, so the equation holds within every view (each view's
total being what its members hold when it starts). A member that leaves takes its money
with it; a joiner opens an account of its own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from gossamer.errors import ConfigError, LocalProtocolError
from gossamer.proto.snapshot.node import Workload

if TYPE_CHECKING:
    from random import Random

__all__ = [
    "AMOUNT_BITS",
    "Bank",
    "decode_transfer",
    "encode_transfer",
    "from_json",
    "transfer_amount",
]

AMOUNT_BITS = 24
_AMOUNT_MASK = (1 << AMOUNT_BITS) - 1


def encode_transfer(to: int, amount: int) -> bytes:
    """The payload of a transfer of ``amount`` to member ``to`` (ids up to 255)."""
    if not 1 <= to <= 255 or not 0 < amount <= _AMOUNT_MASK:
        raise LocalProtocolError(
            "a transfer needs 1 <= to <= 255 and 0 < amount < 2**24", to=to, amount=amount
        )
    return (to << AMOUNT_BITS | amount).to_bytes(4, "big")


def decode_transfer(data: bytes) -> tuple[int, int]:
    """``(to, amount)`` of a transfer's payload (``(0, 0)`` for anything else)."""
    if len(data) != 4:
        return 0, 0
    value = int.from_bytes(data, "big")
    return value >> AMOUNT_BITS, value & _AMOUNT_MASK


def from_json(text: str) -> bytes:
    """A payload as a recorded state holds it (hex text)."""
    return bytes.fromhex(text)


def transfer_amount(data: bytes, receiver: int) -> int:
    """The money a transfer multicast carries to ``receiver`` (0 unless it is the payee)."""
    to, amount = decode_transfer(data)
    return amount if to == receiver else 0


def local_value(state: Mapping[str, Any]) -> int:
    """A member's money in a recorded local state (``SnapshotNode`` format): its balance,
    its transfers held back by a snapshot, the transfers to it received but not yet
    delivered (on agreed views, also its own to a payee gone from the view: refunds to
    come), and those delivered but not yet read by the application."""
    me = int(state["isis"]["id"])
    agreed = state["isis"].get("agreed")
    members = set(agreed["members"]) if agreed else None

    def owed(entry: Mapping[str, Any]) -> int:
        """The money a transfer not yet taken here (``sender``, ``data``) brings me."""
        to, amount = decode_transfer(from_json(entry["data"]))
        refund = members is not None and int(entry["sender"]) == me and to not in members
        return amount if to == me or refund else 0

    value = int(state["app"]["balance"])
    value += sum(decode_transfer(from_json(data))[1] for data in state["queued"])
    value += sum(owed(entry) for entry in state["isis"]["holdback"])
    value += sum(owed(entry) for entry in state["unread"])
    return value


class Bank:
    """One member's account and its stream of random transfers to the others."""

    def __init__(
        self, *, me: int, members: Sequence[int], initial: int, rng: Random, max_amount: int = 50
    ) -> None:
        if initial < 0 or max_amount < 1:
            raise ConfigError("need initial >= 0 and max_amount >= 1")
        self.me = me
        self.others: list[int] = []
        self.members: set[int] = set()
        self.view_changed(members)
        self.balance = initial
        self.refunds = 0  # transfers credited back: their payee had left (module docstring)
        self.max_amount = max_amount
        self._rng = rng

    def next_transfer(self) -> bytes | None:
        """Debit a random amount for a random other member and return the payload to
        multicast, or ``None`` when the account is empty or alone."""
        if self.balance <= 0 or not self.others:
            return None
        to = self.others[self._rng.randrange(len(self.others))]
        amount = self._rng.randint(1, min(self.balance, self.max_amount))
        self.balance -= amount
        return encode_transfer(to, amount)

    def view_changed(self, members: Sequence[int]) -> None:
        """The group's members (ids) from now on: the payees of the next transfers, and
        of the deliveries to come (see :meth:`delivered`)."""
        self.members = set(members)
        self.others = sorted(m for m in self.members if m != self.me)

    def delivered(self, data: bytes, sender: int | None = None) -> None:
        """The application took the delivery of a transfer from member ``sender``: credit
        it if it is ours, or refund it if we sent it to a payee no longer a member."""
        to, amount = decode_transfer(data)
        if to == self.me:
            self.balance += amount
        elif sender == self.me and to not in self.members:
            self.balance += amount
            self.refunds += 1

    def state(self) -> dict[str, int]:
        return {"balance": self.balance}

    def workload(self, *, total: float | None = None) -> Workload:
        """This account as a ``SnapshotNode`` workload (its money is traced as values)."""
        return Workload(state=self.state, value=local_value, amount=transfer_amount, total=total)
