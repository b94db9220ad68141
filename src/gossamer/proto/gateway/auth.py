"""The gateway password: one check for identify and the HTTP API, with a guessing budget.

The reference compares ``auth`` with its password in constant time and has no limit on
attempts (its README, "Security"; singyeong-as-coded §4). gossamer bounds *guessing*:
what a guesser needs is verdicts on passwords it has not tried yet, so the budget is
spent by **distinct wrong passwords** per source, not by failed attempts:

- a password that is wrong and new for the source spends one token of the source's
  bucket (``rate`` per second, ``burst``);
- a wrong password the source already tried recently is answered ``WRONG`` again and
  spends nothing: its verdict is already known to whoever sent it, so answering it
  teaches nothing. A client retrying a stale password (a misconfigured neighbour behind
  the same NAT, at any rate) therefore never uses up the budget of the clients that
  share its address;
- the right password spends nothing;
- when the source's bucket is empty, every password from it is ``REFUSED`` *unread*
  (the right one too): a refusal says nothing about the password it carried.

So a source learns the verdict on at most ``burst + rate * t`` new passwords in ``t``
seconds. A source is an IPv4 address, or an IPv6 /64 (one host usually owns a whole
/64, so counting its addresses separately would multiply the budget by 2^64).

Comparisons are between HMAC-SHA256 digests keyed with the password (fixed length, so
``hmac.compare_digest`` leaks neither content nor the password's length); the memory of
wrong passwords holds 16 bytes of such digests, useless without the password. Both
tables are bounded (least recently used forgotten first), so a flood of sources or of
passwords cannot grow memory: a forgotten source starts again with a full bucket, a
forgotten wrong password costs a token again. Time is an argument (``now``, seconds).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
from collections import OrderedDict
from enum import Enum

from gossamer.errors import ConfigError
from gossamer.proto.ratelimit import BucketTable

__all__ = ["PasswordGuard", "Verdict", "source_of"]

#: Bytes of a wrong password's digest remembered per (source, password).
_MARK_BYTES = 16


class Verdict(Enum):
    RIGHT = "right"
    #: Wrong or missing: the client is restricted (the reference's answer).
    WRONG = "wrong"
    #: The source has no guessing budget left; the password was not read.
    REFUSED = "refused"


def source_of(addr: str) -> str:
    """The key a peer address is limited under: the address, or its IPv6 /64."""
    try:
        ip = ipaddress.ip_address(addr)
    except ValueError:
        return addr  # not an IP address (a test's name, a unix socket): itself
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return f"{ipaddress.IPv6Network((ip, 64), strict=False).network_address}/64"
    return addr


class PasswordGuard:
    """``check(addr, given, now)``: the verdict on one presented password (module docstring).

    With no password configured every check is ``RIGHT`` (the gateway is open); a
    missing password (``given`` None) is ``WRONG`` and not a guess. ``max_sources``
    bounds both the sources tracked and the wrong passwords remembered.
    """

    __slots__ = ("_expected", "_key", "_max", "_sources", "_wrong")

    def __init__(
        self, password: str | None, *, rate: float, burst: float, max_sources: int = 65_536
    ) -> None:
        # rate 0 would refuse a source for good after ``burst`` guesses: refuse it.
        if rate <= 0:
            raise ConfigError("the password guess rate must be positive", rate=rate)
        self._sources: BucketTable[str] = BucketTable(rate=rate, burst=burst, size=max_sources)
        self._key = None if password is None else _utf8(password)
        self._expected = b"" if password is None else self._digest(password)
        self._wrong: OrderedDict[tuple[str, bytes], None] = OrderedDict()
        self._max = max_sources

    def _digest(self, given: str) -> bytes:
        assert self._key is not None
        return hmac.new(self._key, _utf8(given), hashlib.sha256).digest()

    @property
    def tracked_sources(self) -> int:
        return len(self._sources)

    @property
    def remembered_wrong(self) -> int:
        return len(self._wrong)

    def check(self, addr: str, given: str | None, now: float) -> Verdict:
        """The verdict on ``given`` from peer address ``addr`` at ``now``; spends a token
        of the source's budget only on a wrong password it has not tried recently."""
        if self._key is None:
            return Verdict.RIGHT  # no password configured: the gateway is open (§18.8)
        if given is None:
            return Verdict.WRONG
        source = source_of(addr)
        bucket = self._sources.get(source)
        if bucket is not None and not bucket.available(now):
            return Verdict.REFUSED  # before the password is read: nothing to learn
        digest = self._digest(given)
        if hmac.compare_digest(digest, self._expected):
            return Verdict.RIGHT
        mark = (source, digest[:_MARK_BYTES])
        if mark in self._wrong:
            self._wrong.move_to_end(mark)
            return Verdict.WRONG  # tried before from here: not a new guess
        self._sources.bucket(source, now).take(now)
        self._wrong[mark] = None
        if len(self._wrong) > self._max:
            self._wrong.popitem(last=False)
        return Verdict.WRONG

    def prune(self, now: float) -> None:
        """Forget sources whose buckets are full again (nothing to remember about them).

        Their remembered wrong passwords stay (bounded): a stale client's retries stay
        free after a quiet spell.
        """
        self._sources.prune(now)


def _utf8(text: str) -> bytes:
    # surrogatepass: a decoded frame may hold lone surrogates; they must not raise.
    return text.encode("utf-8", "surrogatepass")
