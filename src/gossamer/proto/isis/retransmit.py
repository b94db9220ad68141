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

That is :class:`Transmitter`, which the original wire keeps byte for byte and
behaviour for behaviour. gossamer's own (sealed) wire uses :class:`RttTransmitter`
instead: the same calls, but each copy of a message to each member waits for a timeout
measured from that member's round trips (:class:`RttEstimator`, RFC 6298's SRTT and
RTTVAR; Karn's rule: no sample from a retransmitted copy), doubled per member while
the member stays silent and reset when it answers a copy sent once, and a copy that a later answer
shows lost is sent again at once (RFC 9002's time threshold) instead of waiting for
its timer.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass

from gossamer.errors import ConfigError

__all__ = [
    "RetransmitSchedule",
    "Retransmitted",
    "RttEstimator",
    "RttTransmitter",
    "Transmission",
    "Transmitter",
]


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


#: Sends ``payload`` to member ``recipient`` (the core routes and counts it).
SendFn = Callable[[bytes, int], None]
#: Told of every retransmission: the message, the members it went to again, and why
#: (``"timeout"``; ``"gap"`` when a later answer showed the copy lost; ``"probe"`` when it
#: went again as a tail-loss probe to a member gone silent).
Retransmitted = Callable[[Transmission, list[int], str], None]


def _ignore(item: Transmission, recipients: list[int], cause: str) -> None:
    """The default :data:`Retransmitted`: nobody is told."""


class _Transmissions:
    """What both transmitters share: the live messages by key, and where copies go."""

    def __init__(self, send: SendFn, retransmitted: Retransmitted) -> None:
        self._send = send
        self._retransmitted = retransmitted
        self._items: dict[Hashable, Transmission] = {}

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
        self.cancel(key)
        if not recipients:
            return None
        item = Transmission(
            key=key, payload=payload, recipients=set(recipients), label=label, msg=msg,
            first_sent=now,
        )  # fmt: skip
        self._items[key] = item
        self._launch(item, now)
        return item

    def cancel(self, key: Hashable) -> None:
        self._items.pop(key, None)

    def retarget(self, key: Hashable, recipients: set[int], now: float) -> None:
        """Replace the recipients of ``key``; newly added ones are sent to at once."""
        item = self._items.get(key)
        if item is None:
            return
        for gone in item.recipients - recipients:
            self._forget(key, gone)
        added = recipients - item.recipients
        item.recipients = set(recipients)
        if not item.recipients:
            del self._items[key]
            return
        for recipient in sorted(added):
            self._add(item, recipient, now)

    def _launch(self, item: Transmission, now: float) -> None:
        """Send a new transmission to each of its recipients and set its timers."""
        for recipient in sorted(item.recipients):
            self._add(item, recipient, now)

    def _add(self, item: Transmission, to: int, now: float) -> None:
        """Send ``item`` to ``to``, a new recipient."""
        raise NotImplementedError

    def _forget(self, key: Hashable, to: int) -> None:
        """``to`` is no recipient of ``key`` any more (and need not answer)."""


class Transmitter(_Transmissions):
    """All messages of one core that are being retransmitted, each on its own schedule.

    ``start`` sends a message at once to every recipient and schedules the next
    transmission; ``answered`` removes a recipient (True only the first time, which
    is how duplicate answers are recognised); ``due`` retransmits every message
    whose time has come to its remaining recipients. A message with no recipient
    left is forgotten.
    """

    def __init__(
        self,
        schedule: RetransmitSchedule,
        send: SendFn,
        retransmitted: Retransmitted = _ignore,
    ) -> None:
        super().__init__(send, retransmitted)
        self.schedule = schedule
        self._cycle = schedule._cycle
        self._heap: list[tuple[float, int, Hashable]] = []
        self._counter = 0

    def _launch(self, item: Transmission, now: float) -> None:
        super()._launch(item, now)
        self._schedule(item, now)

    def _add(self, item: Transmission, to: int, now: float) -> None:
        self._send(item.payload, to)

    def answered(self, key: Hashable, recipient: int, now: float = 0.0) -> bool:
        """Stop sending ``key`` to ``recipient``; True only if it was still a recipient.
        (``now`` matters only to :class:`RttTransmitter`.)"""
        item = self._items.get(key)
        if item is None or recipient not in item.recipients:
            return False
        item.recipients.discard(recipient)
        if not item.recipients:
            del self._items[key]
        return True

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
            recipients = sorted(item.recipients)
            for recipient in recipients:
                self._send(item.payload, recipient)
            sent.append(item)
            self._schedule(item, now)
            self._retransmitted(item, recipients, "timeout")
        return sent

    def _schedule(self, item: Transmission, now: float) -> None:
        cycle = self._cycle
        item.due = now + cycle[item.attempt % len(cycle)]
        self._counter += 1
        heapq.heappush(self._heap, (item.due, self._counter, item.key))


# -- gossamer's own wire: timeouts from measured round trips ------------------------------

#: RFC 6298's gains: SRTT moves 1/8 of the way to a sample, RTTVAR 1/4.
_ALPHA = 0.125
_BETA = 0.25
#: RFC 9002's time threshold: a copy sent this many smoothed round trips before one that
#: was answered, and still unanswered, is lost.
_LOSS_THRESHOLD = 9 / 8


class RttEstimator:
    """One member's round-trip time, as RFC 6298 estimates it.

    Before the first sample the timeout is ``initial``. The first sample ``r`` sets
    SRTT = r and RTTVAR = r/2; each later one RTTVAR = 3/4 RTTVAR + 1/4 |SRTT - r| and
    SRTT = 7/8 SRTT + 1/8 r. The timeout is SRTT + max(``granularity``, 4 RTTVAR) (the
    RFC's clock granularity G), at most ``maximum``. Only copies sent once give samples
    (Karn's rule): the answer to a retransmitted copy may answer either transmission.
    """

    __slots__ = ("granularity", "initial", "latest", "maximum", "rto", "rttvar", "srtt")

    def __init__(self, *, initial: float, granularity: float, maximum: float) -> None:
        if not 0 < granularity <= maximum or not initial > 0:
            raise ConfigError(
                "need 0 < granularity <= maximum and a positive initial timeout",
                initial=initial, granularity=granularity, maximum=maximum,
            )  # fmt: skip
        self.initial = initial
        self.granularity = granularity
        self.maximum = maximum
        self.srtt: float | None = None
        self.rttvar = 0.0
        self.latest = 0.0
        self.rto = min(initial, maximum)

    def fresh(self) -> RttEstimator:
        """An estimator with the same settings and no sample yet."""
        return RttEstimator(
            initial=self.initial, granularity=self.granularity, maximum=self.maximum
        )

    def sample(self, rtt: float) -> None:
        """Take one round trip, in seconds, into the estimate."""
        self.latest = rtt
        if self.srtt is None:
            self.srtt = rtt
            self.rttvar = rtt / 2
        else:
            self.rttvar += _BETA * (abs(self.srtt - rtt) - self.rttvar)
            self.srtt += _ALPHA * (rtt - self.srtt)
        self.rto = min(self.srtt + max(self.granularity, 4 * self.rttvar), self.maximum)

    def loss_delay(self) -> float:
        """How long after a later copy's answer an earlier copy counts as lost: 9/8 of the
        larger of SRTT and the latest sample, at least ``granularity`` (RFC 9002, 6.1.2)."""
        srtt = self.srtt if self.srtt is not None else self.rto
        return max(_LOSS_THRESHOLD * max(srtt, self.latest), self.granularity)


class _Copy:
    """One message's copy to one member, until that member answers it."""

    __slots__ = ("due", "first", "item", "last", "to", "tries")

    def __init__(self, item: Transmission, to: int, now: float) -> None:
        self.item = item
        self.to = to
        self.first = now  # when it was first sent
        self.last = now  # when it was last sent
        self.tries = 0  # retransmissions so far
        self.due = 0.0


class _Member:
    """What the transmitter knows of one member: its round trip, its back-off, its
    unanswered copies (the least recently sent first) and its tail-loss probe."""

    __slots__ = (
        "backoff", "backoff_at", "copies", "heard", "next_sample", "probe", "probe_at", "probed",
        "rtt",
    )  # fmt: skip

    def __init__(self, rtt: RttEstimator) -> None:
        self.rtt = rtt
        self.next_sample = -math.inf  # the next answer from then on is a sample
        self.backoff = 0  # doublings of the timeout since the member last answered
        self.backoff_at = -math.inf  # when ``backoff`` last grew
        self.copies: dict[Hashable, _Copy] = {}
        self.heard = -math.inf  # when the member last answered
        self.probe_at: float | None = None  # when the probe timer is armed for, if it is
        self.probed = False  # a probe went out since the member last answered
        self.probe: _Copy | None = None  # the copy last sent as a probe


class _ProbeKey:
    """The key of the probe timers' heap entries (no transmission has it)."""


_PROBE = _ProbeKey()


class RttTransmitter(_Transmissions):
    """The transmitter of gossamer's own wire: :class:`Transmitter`'s calls, timeouts per
    member from measured round trips, and repair of a gap as soon as it shows.

    - A copy of a message to member m is sent again when m has not answered it within
      m's timeout: ``RttEstimator.rto`` doubled ``backoff`` times, at most ``maximum``.
      A timeout doubles m's back-off once per round (a copy sent before the last doubling
      does not double it again); m's first answer to a copy sent once resets it (m's
      copies then wait one plain timeout from their last send). An answer to a copy sent
      once is a round-trip sample, at most one per round trip; an answer to a
      retransmitted copy is none (Karn's algorithm: it may answer either send), and ends
      the back-off only when it came within one plain timeout of the copy's last send
      after a round trip was measured.
    - An answer from m to a copy sent at time t shows that m heard, or lost, everything
      sent to it before t (a member answers datagrams in the order they arrive): each
      unanswered copy sent before t is sent again at once if it went out more than
      ``RttEstimator.loss_delay`` ago, or else its timer is brought forward to that
      moment (RFC 9002's time threshold; a reordered answer costs a spurious copy, never
      correctness, since every member answers duplicates). ``slack`` is how long a
      copy may wait in this member's batch before it leaves: copies queued that close
      together may have left in one datagram, so neither shows the other lost.
    """

    def __init__(
        self,
        estimate: RttEstimator,
        send: SendFn,
        retransmitted: Retransmitted = _ignore,
        *,
        slack: float = 0.0,
    ) -> None:
        """``estimate`` is what each member's estimator starts as (no sample yet)."""
        super().__init__(send, retransmitted)
        self._estimate = estimate
        self._maximum = estimate.maximum
        self._slack = slack
        self._copies: dict[tuple[Hashable, int], _Copy] = {}
        self._members: dict[int, _Member] = {}
        self._heap: list[tuple[float, int, Hashable, int]] = []
        self._counter = 0

    def estimator(self, member: int) -> RttEstimator:
        """``member``'s round-trip estimate (created on first use)."""
        return self._member(member).rtt

    def answered(self, key: Hashable, recipient: int, now: float = 0.0) -> bool:
        """As :meth:`Transmitter.answered`; also a round-trip sample, the end of the
        member's back-off, and the repair of the copies the answer shows lost."""
        copy = self._copies.pop((key, recipient), None)
        if copy is None:
            return False
        item = copy.item
        item.recipients.discard(recipient)
        if not item.recipients:
            del self._items[key]
        member = self._members[recipient]
        del member.copies[key]
        if not copy.tries:
            # Karn: only an answer to a copy sent once is a sample (an answer to a copy
            # sent again may answer either send), and it ends the back-off. An answer to
            # a retransmitted copy ends it only when it came within one plain timeout of
            # the last send, and a round trip was measured: were the timeout shorter than
            # the member's real round trip, every copy would time out, every answer would
            # reset the timeout and none would be a sample (a retransmission storm that
            # feeds itself when queueing stretches round trips).
            if now >= member.next_sample:
                # One sample per round trip, as RFC 6298's gains assume: an answer per
                # message would give dozens of near-equal samples per round trip, which
                # drive RTTVAR (and the margin it buys) to nothing between two bursts.
                member.rtt.sample(now - copy.first)
                member.next_sample = now + (member.rtt.srtt or 0.0)
            if member.backoff:
                self._end_backoff(member)
        elif member.backoff and member.rtt.srtt is not None and now - copy.last <= member.rtt.rto:
            # An answer to a retransmitted copy within one plain timeout of its last send:
            # the member is there and its measured round trip still fits, so the back-off
            # ends too (under heavy loss every copy still unanswered may be a
            # retransmitted one; waiting for a fresh copy would keep the timeouts doubled).
            self._end_backoff(member)
        member.heard = now
        member.probed = False
        if member.probe_at is None and member.copies:
            self._arm_probe(recipient, member, now)
        if copy is member.probe:
            # The answer to a probe: the member answers in order, so what was sent before
            # the probe was answered first or lost (or its answer was), whichever send of
            # the probed copy this answers (a reordered answer costs a spurious copy).
            member.probe = None
            self._repair(member, copy.last - self._slack, now)
        else:
            self._repair(member, copy.first - self._slack, now)
        return True

    def _end_backoff(self, member: _Member) -> None:
        """The member answered: its copies wait one plain timeout from their last send."""
        member.backoff = 0
        member.backoff_at = -math.inf
        timeout = member.rtt.rto
        for other in member.copies.values():
            if other.last + timeout < other.due:
                self._schedule(other, other.last + timeout)

    def _repair(self, member: _Member, before: float, now: float) -> None:
        """Copies to ``member`` sent before ``before`` and unanswered: lost, or soon."""
        lost: list[_Copy] = []
        delay = member.rtt.loss_delay()
        for copy in member.copies.values():  # the least recently sent first
            if copy.last >= before:
                break
            if now - copy.last >= delay:
                lost.append(copy)
            elif copy.last + delay < copy.due:
                self._schedule(copy, copy.last + delay)
        for copy in lost:
            self._resend(member, copy, now)
            self._retransmitted(copy.item, [copy.to], "gap")

    def cancel(self, key: Hashable) -> None:
        item = self._items.pop(key, None)
        if item is not None:
            for recipient in item.recipients:
                self._forget(key, recipient)

    def drop_member(self, member: int) -> None:
        """``member`` left the group: stop addressing it everywhere."""
        state = self._members.pop(member, None)
        if state is None:
            return
        for key in list(state.copies):
            del self._copies[(key, member)]
            item = self._items[key]
            item.recipients.discard(member)
            if not item.recipients:
                del self._items[key]

    def next_deadline(self) -> float | None:
        heap = self._heap
        while heap:
            due, _, key, to = heap[0]
            if key is _PROBE:
                member = self._members.get(to)
                if member is not None and member.probe_at == due:
                    if member.copies:
                        return due
                    member.probe_at = None  # nothing left to probe: armed by the next copy
            else:
                copy = self._copies.get((key, to))
                if copy is not None and copy.due == due:
                    return due
            heapq.heappop(heap)  # stale: answered, cancelled or rescheduled
        return None

    def due(self, now: float) -> list[Transmission]:
        """Send again every copy whose timeout has passed, and a member's tail-loss probe
        when it is due; return the messages whose timeout passed."""
        fired: dict[Hashable, list[int]] = {}
        heap = self._heap
        while heap and heap[0][0] <= now:
            due, _, key, to = heapq.heappop(heap)
            if key is _PROBE:
                self._probe(to, due, now)
                continue
            copy = self._copies.get((key, to))
            if copy is None or copy.due != due:
                continue
            member = self._members[to]
            if copy.last >= member.backoff_at:
                # One doubling per round of silence, however many copies time out in it.
                member.backoff += 1
                member.backoff_at = now
            self._resend(member, copy, now)
            fired.setdefault(key, []).append(to)
        sent = []
        for key, recipients in fired.items():
            item = self._items[key]
            item.attempt += 1
            sent.append(item)
            self._retransmitted(item, sorted(recipients), "timeout")
        return sent

    # -- copies ------------------------------------------------------------------------

    def _member(self, member: int) -> _Member:
        state = self._members.get(member)
        if state is None:
            state = self._members[member] = _Member(self._estimate.fresh())
        return state

    def _timeout(self, member: _Member) -> float:
        return min(member.rtt.rto * 2.0 ** min(member.backoff, 64), self._maximum)

    def _add(self, item: Transmission, to: int, now: float) -> None:
        member = self._members.get(to) or self._member(to)
        copy = _Copy(item, to, now)
        key = item.key
        self._copies[(key, to)] = copy
        member.copies[key] = copy
        self._send(item.payload, to)
        timeout = member.rtt.rto if not member.backoff else self._timeout(member)
        self._schedule(copy, now + timeout)
        if member.probe_at is None:
            self._arm_probe(to, member, now)

    # -- the tail-loss probe -------------------------------------------------------------

    def _probe_timeout(self, member: _Member) -> float | None:
        """How long a member may stay silent, with copies unanswered, before the probe:
        two smoothed round trips and the batching slack (RFC 8985's PTO). ``None`` when
        the timeout comes first anyway (a steady round trip: SRTT + G), when the member
        is backed off (silent through a timeout already: the doubling timeouts decide),
        and before the first sample."""
        srtt = member.rtt.srtt
        if srtt is None or member.backoff:
            return None
        pto = max(2.0 * srtt + self._slack, self._estimate.granularity)
        return pto if pto < member.rtt.rto else None

    def _arm_probe(self, to: int, member: _Member, now: float) -> None:
        pto = self._probe_timeout(member)
        if pto is None or member.probed:
            return
        member.probe_at = now + pto
        self._counter += 1
        heapq.heappush(self._heap, (member.probe_at, self._counter, _PROBE, to))

    def _probe(self, to: int, due: float, now: float) -> None:
        """The probe timer of ``to``: when the member has been silent for the probe timeout
        since its last answer and our last copy to it, send its newest unanswered copy
        again. Its answer shows every older copy lost or answered (``_repair``), so one
        copy repairs a lost tail, instead of every copy waiting for its own timeout."""
        member = self._members.get(to)
        if member is None or member.probe_at != due:
            return  # stale
        member.probe_at = None
        copies = member.copies
        pto = self._probe_timeout(member)
        if not copies or member.probed or pto is None:
            return  # armed again by the next copy or answer
        newest = next(reversed(copies.values()))
        quiet_until = max(member.heard, newest.last) + pto
        if quiet_until > now:
            member.probe_at = quiet_until
            self._counter += 1
            heapq.heappush(self._heap, (quiet_until, self._counter, _PROBE, to))
            return
        member.probed = True
        member.probe = newest
        self._resend(member, newest, now)
        self._retransmitted(newest.item, [to], "probe")

    def _resend(self, member: _Member, copy: _Copy, now: float) -> None:
        copy.tries += 1
        copy.last = now
        copies = member.copies
        del copies[copy.item.key]
        copies[copy.item.key] = copy  # now the most recently sent
        self._send(copy.item.payload, copy.to)
        self._schedule(copy, now + self._timeout(member))

    def _forget(self, key: Hashable, to: int) -> None:
        if self._copies.pop((key, to), None) is not None:
            self._members[to].copies.pop(key, None)

    def _schedule(self, copy: _Copy, due: float) -> None:
        copy.due = due
        self._counter += 1
        heapq.heappush(self._heap, (due, self._counter, copy.item.key, copy.to))
