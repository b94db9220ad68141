"""Credit flow control per link (notes "Controlo de fluxo à base de créditos por nodo").

The receiver grants credits; the sender spends one per DATA message. Credits come back
when the receiving *application takes* a message, not when it arrives (the notes'
meeting conclusion: "baseado em entregas (em vez de ser baseado em recepções)"), in
batches so that one FLOW answers many messages. Control messages never need credits.

The arithmetic is the Java ``InFlowControlState``/``OutFlowControlState`` (reference (c),
"Credit computation"):

- batch size = ``floor(capacity * fraction)``, at least 1 when capacity > 0, and 0 when
  capacity <= 0 (every take then returns its credit at once);
- a take adds one to the pending batch; a full batch is returned in one FLOW;
- ``set_capacity(new)`` returns ``new - old + pending`` (negative when shrinking) and
  clears the batch; ``adjust_capacity(d)`` returns ``d + pending``;
- ``set_fraction(p)``: a pending batch at least as large as the new size is returned in
  whole batches, keeping the remainder;
- the sender adds every variation, so its credits may go negative, and it may send
  only while they are positive.

With a fixed capacity, sender credits + messages in flight + messages queued at the
receiver + the pending batch = capacity. Hence a receiver with ``L`` links holds at
most ``L * capacity`` messages, ``L * capacity * max_message_size`` bytes (notes:
"Max. memoria em incoming queues = L * M * max_msg_size").

The receiver also keeps an upper bound on what a correct sender may send: the initial
credits plus every *positive* variation it granted (a sender that has not yet seen a
negative FLOW may rightly spend credits the receiver already withdrew, so negative
variations cannot lower the bound). A DATA beyond it is a violation.
"""

from __future__ import annotations

import math

from gossamer.errors import ConfigError

__all__ = ["InFlow", "batch_size"]


def batch_size(capacity: int, fraction: float) -> int:
    """Credits returned per FLOW for a capacity and batch fraction."""
    if capacity <= 0:
        return 0
    return max(1, math.floor(capacity * fraction))


def _check_fraction(fraction: float) -> None:
    if not 0.0 < fraction <= 1.0:
        raise ConfigError("the batch fraction must be in (0, 1]", fraction=fraction)


class InFlow:
    """The receiving side of one link: capacity, pending batch, and the sender's bound.

    Every method returns the credit variation to send in a FLOW now, or 0 for none.
    """

    __slots__ = ("batch", "capacity", "fraction", "granted_max", "pending", "received")

    def __init__(self, capacity: int, fraction: float) -> None:
        _check_fraction(fraction)
        self.capacity = capacity
        self.fraction = fraction
        self.batch = batch_size(capacity, fraction)
        self.pending = 0
        #: Initial credits plus every positive variation sent: what a sender may use.
        self.granted_max = max(capacity, 0)
        #: DATA messages that arrived on the link.
        self.received = 0

    def arrived(self) -> bool:
        """Count an arriving DATA; False when it exceeds every credit ever granted."""
        self.received += 1
        return self.received <= self.granted_max

    def taken(self) -> int:
        """The application took one message of this link."""
        self.pending += 1
        if self.pending >= self.batch:
            return self.batch_done()
        return 0

    def batch_done(self) -> int:
        """Return the pending batch (the caller found it full): its FLOW variation."""
        variation, self.pending = self.pending, 0
        return self._grant(variation)

    def set_capacity(self, capacity: int) -> int:
        variation = capacity - self.capacity + self.pending
        self.capacity = capacity
        self.pending = 0
        self.batch = batch_size(capacity, self.fraction)
        return self._grant(variation)

    def adjust_capacity(self, delta: int) -> int:
        return self.set_capacity(self.capacity + delta)

    def set_fraction(self, fraction: float) -> int:
        _check_fraction(fraction)
        self.fraction = fraction
        self.batch = batch_size(self.capacity, fraction)
        if self.batch and self.pending >= self.batch:
            variation = self.pending - self.pending % self.batch
            self.pending -= variation
            return self._grant(variation)
        return 0

    def _grant(self, variation: int) -> int:
        if variation > 0:
            self.granted_max += variation
        return variation
