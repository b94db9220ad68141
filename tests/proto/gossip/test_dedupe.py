"""Deliver-once windows: per-origin seqno bitmaps and payload digests, both bounded."""

from __future__ import annotations

import pytest

from gossamer.errors import ConfigError
from gossamer.proto.gossip.dedupe import DigestWindow, DuplicateWindow, Freshness, payload_digest

A = b"\x0a\x00\x00\x01\x75\x2f"
B = b"\x0a\x00\x00\x02\x75\x2f"
NEW, DUP, OLD = Freshness.NEW, Freshness.DUPLICATE, Freshness.TOO_OLD


def test_each_seqno_of_an_origin_is_new_once_in_any_order() -> None:
    w = DuplicateWindow(width=8)
    assert [w.check(A, s, 0.0) for s in (5, 3, 5, 4, 3, 9, 6)] == [
        NEW,
        NEW,
        DUP,
        NEW,
        DUP,
        NEW,
        NEW,
    ]
    assert w.check(B, 5, 0.0) is NEW  # origins are independent


def test_seqnos_below_the_window_are_too_old_and_a_jump_slides_it() -> None:
    w = DuplicateWindow(width=8)
    w.check(A, 100, 0.0)
    assert w.check(A, 93, 0.0) is NEW  # 7 behind: inside
    assert w.check(A, 92, 0.0) is OLD  # 8 behind: outside
    assert w.check(A, 10_000, 0.0) is NEW  # a restart's larger seqnos slide the window
    assert w.check(A, 100, 0.0) is OLD
    assert w.check(A, 10_000, 0.0) is DUP


def test_origins_are_bounded_and_idle_ones_swept() -> None:
    w = DuplicateWindow(width=4, max_origins=3, ttl=10.0)
    for i in range(10):
        w.check(bytes([10, 0, 0, i, 0, 1]), 1, float(i))
    assert len(w) == 3
    assert w.sweep(100.0) == 3
    assert len(w) == 0


def test_digest_window_names_payloads_for_ttl_seconds() -> None:
    w = DigestWindow(max_entries=2, ttl=10.0)
    hello, world = payload_digest(1, b"hello"), payload_digest(1, b"world")
    assert payload_digest(2, b"hello") != hello  # the type tag is part of the name
    assert w.check(hello, 0.0) is NEW
    assert w.check(hello, 5.0) is DUP
    assert w.check(hello, 11.0) is NEW  # remembered for ttl only
    w.check(world, 12.0)
    w.check(payload_digest(1, b"x"), 12.0)
    assert len(w) == 2  # bounded
    assert w.sweep(30.0) == 2


def test_bad_bounds_are_config_errors() -> None:
    with pytest.raises(ConfigError):
        DuplicateWindow(width=0)
    with pytest.raises(ConfigError):
        DuplicateWindow(max_origins=0)
    with pytest.raises(ConfigError):
        DigestWindow(ttl=0.0)
