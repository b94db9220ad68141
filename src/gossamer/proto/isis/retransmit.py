"""Reliable delivery over UDP: the ``ContinuousMsgSender`` of the spec, one schedule per message.

Spec, "ContinuousMsgSender": a message is sent to every recipient in its set ``R``
at an interval until ``R`` is empty; ``removeRecipient`` takes a recipient out when
its answer arrives. The interval starts at 200 ms and doubles (400, 800, 1600,
3200 ms) until the next value would exceed ``maxSendingInterval = 4000 ms``; then
it starts again at 200 ms. So a message is retransmitted forever, at most 3.2 s
apart, until every recipient has answered.

Differences from the original (reference (a), "ContinuousMsgSender"; bug 4):

- the back-off belongs to **each message**, not to the sender instance, so a new
  message is sent *at once* and does not inherit a long interval from older ones
  (the original first sent a message queued during a 3.2 s sleep only after it);
- the schedule is configurable (:class:`RetransmitSchedule`);
- there is no thread: the transmitter reports its next deadline and is driven by
  ``handle_timer``, like every sans-I/O core.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass, field

from gossamer.errors import ConfigError

__all__ = ["RetransmitSchedule", "Transmission", "Transmitter"]


@dataclass(frozen=True, slots=True, kw_only=True)
class RetransmitSchedule:
    """Intervals between transmissions of one message, in seconds.

    ``initial``, then multiplied by ``factor`` while the result stays at most
    ``maximum``; the first value that would exceed it restarts at ``initial``.
    The defaults are the spec's: 0.2, 0.4, 0.8, 1.6, 3.2, 0.2, 0.4, ...
    (4.0 itself is never reached because 6.4 > 4.0 triggers the reset).
    """

    initial: float = 0.2
    maximum: float = 4.0
    factor: float = 2.0

    def __post_init__(self) -> None:
        if not self.initial > 0:
            raise ConfigError(
                "the initial retransmission interval must be positive", initial=self.initial
            )
        if not self.maximum >= self.initial:
            raise ConfigError(
                "the maximum interval must be at least the initial one",
                initial=self.initial,
                maximum=self.maximum,
            )
        if not self.factor > 1:
            raise ConfigError("the back-off factor must be greater than 1", factor=self.factor)

    def interval(self, attempt: int) -> float:
        """The wait after transmission number ``attempt`` (0 is the first send)."""
        return self._cycle[attempt % len(self._cycle)]

    @property
    def _cycle(self) -> tuple[float, ...]:
        values = [self.initial]
        while values[-1] * self.factor <= self.maximum + 1e-12:
            values.append(values[-1] * self.factor)
        return tuple(values)

    def intervals(self) -> Iterator[float]:
        """The endless sequence of intervals (for documentation and tests)."""
        attempt = 0
        while True:
            yield self.interval(attempt)
            attempt += 1


@dataclass(slots=True, kw_only=True)
class Transmission:
    """One message being sent continuously to the recipients that have not answered."""

    key: Hashable
    payload: bytes
    recipients: set[int]
    label: str
    msg: str
    attempt: int = 0
    due: float = 0.0
    first_sent: float = 0.0
    extra: dict[str, str] = field(default_factory=dict)


#: Sends ``payload`` to member ``recipient`` (the core routes and counts it).
SendFn = Callable[[bytes, int], None]


class Transmitter:
    """All messages of one core that are being retransmitted, each on its own schedule.

    ``start`` sends a message at once to every recipient and schedules the next
    transmission; ``answered`` removes a recipient (True only the first time, which
    is how duplicate answers are recognised); ``due`` retransmits every message
    whose time has come to its remaining recipients. A message with no recipient
    left is forgotten.
    """

    def __init__(self, schedule: RetransmitSchedule, send: SendFn) -> None:
        self.schedule = schedule
        self._send = send
        self._cycle = schedule._cycle
        self._items: dict[Hashable, Transmission] = {}
        self._heap: list[tuple[float, int, Hashable]] = []
        self._counter = 0

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._items

    def get(self, key: Hashable) -> Transmission | None:
        return self._items.get(key)

    def items(self) -> list[Transmission]:
        """The live transmissions, in start order."""
        return list(self._items.values())

    def start(
        self,
        key: Hashable,
        payload: bytes,
        recipients: set[int],
        now: float,
        *,
        label: str,
        msg: str,
    ) -> Transmission | None:
        """Send ``payload`` now to each recipient and keep sending until each answers.

        Replaces any transmission with the same key. Returns ``None`` (and sends
        nothing) when ``recipients`` is empty.
        """
        self._items.pop(key, None)
        if not recipients:
            return None
        item = Transmission(
            key=key,
            payload=payload,
            recipients=set(recipients),
            label=label,
            msg=msg,
            first_sent=now,
        )
        self._items[key] = item
        for recipient in sorted(item.recipients):
            self._send(payload, recipient)
        self._schedule(item, now)
        return item

    def answered(self, key: Hashable, recipient: int) -> bool:
        """Stop sending ``key`` to ``recipient``; True only if it was still a recipient."""
        item = self._items.get(key)
        if item is None or recipient not in item.recipients:
            return False
        item.recipients.discard(recipient)
        if not item.recipients:
            del self._items[key]
        return True

    def retarget(self, key: Hashable, recipients: set[int], now: float) -> None:
        """Replace the recipients of ``key``; newly added ones are sent to at once."""
        item = self._items.get(key)
        if item is None:
            return
        added = recipients - item.recipients
        item.recipients = set(recipients)
        if not item.recipients:
            del self._items[key]
            return
        for recipient in sorted(added):
            self._send(item.payload, recipient)

    def cancel(self, key: Hashable) -> None:
        self._items.pop(key, None)

    def drop_member(self, member: int) -> None:
        """``member`` left the group: stop addressing it everywhere."""
        for key in [k for k, item in self._items.items() if member in item.recipients]:
            self.answered(key, member)

    def next_deadline(self) -> float | None:
        heap = self._heap
        while heap:
            due, _, key = heap[0]
            item = self._items.get(key)
            if item is not None and item.due == due:
                return due
            heapq.heappop(heap)  # stale: answered, cancelled or rescheduled
        return None

    def due(self, now: float) -> list[Transmission]:
        """Retransmit every message whose time has come; return them (for tracing)."""
        sent: list[Transmission] = []
        heap = self._heap
        while heap and heap[0][0] <= now:
            due, _, key = heapq.heappop(heap)
            item = self._items.get(key)
            if item is None or item.due != due:
                continue
            item.attempt += 1
            for recipient in sorted(item.recipients):
                self._send(item.payload, recipient)
            sent.append(item)
            self._schedule(item, now)
        return sent

    def _schedule(self, item: Transmission, now: float) -> None:
        cycle = self._cycle
        item.due = now + cycle[item.attempt % len(cycle)]
        self._counter += 1
        heapq.heappush(self._heap, (item.due, self._counter, item.key))
