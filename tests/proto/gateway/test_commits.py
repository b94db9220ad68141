"""gossamer.proto.gateway.commits and its codec: a majority's committed position."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gossamer.errors import DecodeError
from gossamer.proto.gateway.commits import CommitReports, CommittedThrough
from gossamer.wire.commit_reports import CommitReport, decode_report, encode_report
from gossamer.wire.isis import MAX_DATA_SIZE
from gossamer.wire.order_chunks import parse, split

A, B, C = ("a#1", ("127.0.0.1", 1)), ("b#1", ("127.0.0.1", 2)), ("c#1", ("127.0.0.1", 3))


def three() -> tuple[CommitReports, CommitReports, CommitReports]:
    cores = tuple(CommitReports(name, repeat=1.0, coalesce=0.0) for name, _a in (A, B, C))
    for core in cores:
        core.set_view(2, [A[0], B[0], C[0]], 0.0)
        for name, address in (A, B, C):
            core.set_address(name, address, 0.0)
        core.datagrams_to_send()
    return cores  # type: ignore[return-value]


def deliver(sender: CommitReports, *receivers: CommitReports) -> None:
    out = sender.datagrams_to_send()
    for data, _address in out:
        for receiver in receivers:
            receiver.receive_datagram(data, ("127.0.0.1", 9), 1.0)


def test_a_position_counts_once_a_majority_committed_it() -> None:
    a, b, c = three()
    a.committed(5, 1.0)
    deliver(a, b, c)
    assert a.through == 0 and a.events_received() == []  # only a itself
    b.committed(3, 1.0)
    deliver(b, a)
    assert a.through == 3 and a.events_received() == [CommittedThrough(3)]
    c.committed(7, 1.0)
    deliver(c, a)
    assert a.through == 5 and a.events_received() == [CommittedThrough(5)]
    # a report never goes back
    a.receive_datagram(encode_report(CommitReport("b#1", 2, 1)), ("127.0.0.1", 2), 2.0)
    assert a.reported["b#1"] == 3


def test_a_smaller_view_counts_among_its_members_and_strangers_are_refused() -> None:
    a, b, _c = three()
    a.committed(4, 1.0)
    a.set_view(3, ["a#1", "b#1"], 1.0)
    assert a.through == 0  # b has not reported: 1 of 2 is no majority
    b.set_view(3, ["a#1", "b#1"], 1.0)
    b.committed(4, 1.0)
    deliver(b, a)
    assert a.through == 4
    a.receive_datagram(encode_report(CommitReport("c#1", 3, 9)), ("127.0.0.1", 3), 1.0)
    a.receive_datagram(b"junk", ("127.0.0.1", 3), 1.0)
    assert a.rejected == {"not a member": 1, "not a commit report": 1}
    assert a.through == 4


def test_reports_are_repeated_and_coalesced() -> None:
    a = CommitReports("a#1", repeat=0.5, coalesce=0.1)
    a.set_view(1, ["a#1", "b#1"], 0.0)
    a.set_address("b#1", ("127.0.0.1", 2), 0.0)
    a.datagrams_to_send()
    a.committed(1, 0.01)
    a.committed(2, 0.02)
    assert a.datagrams_to_send() == []  # within the coalescing interval
    assert a.next_deadline() == pytest.approx(0.1)
    a.handle_timer(0.1)
    (sent,) = a.datagrams_to_send()
    assert decode_report(sent[0]).position == 2
    a.handle_timer(0.6)
    assert len(a.datagrams_to_send()) == 1  # the repeat


@pytest.mark.parametrize("data", [b"GCR1", b"GCR1\x93\xa1a\x01", b"GCR1" + b"\x91\x01",
                                  encode_report(CommitReport("a", 1, 2))[:-1] + b"\xff"])
def test_bad_reports_raise_decode_errors(data: bytes) -> None:
    with pytest.raises(DecodeError):
        decode_report(data)


@given(st.binary(max_size=5000), st.text(min_size=1, max_size=60))
def test_chunks_fit_a_multicast_and_put_the_command_back(command: bytes, key: str) -> None:
    chunks = split(key, command)
    assert all(len(chunk) <= MAX_DATA_SIZE for chunk in chunks)
    parsed = [parse(chunk) for chunk in chunks]
    assert {(c.key, c.total) for c in parsed} == {(key, len(chunks))}
    assert [c.number for c in parsed] == list(range(len(chunks)))
    assert b"".join(c.data for c in parsed) == command


@pytest.mark.parametrize("data", [b"", b"GOC1", b"GOC1\x00\x01\x00\x01\x01a",
                                  b"GOC1\x00\x00\x00\x01\x05ab", b"XXXX\x00\x00\x00\x01\x01a"])
def test_bad_chunks_raise_decode_errors(data: bytes) -> None:
    with pytest.raises(DecodeError):
        parse(data)
