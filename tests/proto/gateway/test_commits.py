"""gossamer.proto.gateway.commits (applied_through reports between members, as datagrams)
and gossamer.wire.order_chunks (a command cut to what one multicast carries)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gossamer.errors import DecodeError
from gossamer.proto.gateway.commits import CommitReports, Confirmable
from gossamer.proto.gateway.replicated_queues import Confirm, Effects
from gossamer.wire.isis import MAX_DATA_SIZE
from gossamer.wire.order_chunks import decode, split
from gossamer.wire.queue_commands import Report, decode_report, encode_report

A, B, C = ("a#1", ("127.0.0.1", 1)), ("b#1", ("127.0.0.1", 2)), ("c#1", ("127.0.0.1", 3))


def three() -> tuple[CommitReports, CommitReports, CommitReports]:
    cores = tuple(CommitReports(name, repeat=1.0, coalesce=0.0) for name, _a in (A, B, C))
    for core in cores:
        core.set_view(2, [A[0], B[0], C[0]], 0.0)
        for name, address in (A, B, C):
            core.set_address(name, address, 0.0)
        core.datagrams_to_send()
    return cores  # type: ignore[return-value]


def commit(core: CommitReports, upto: int, *, history: str = "h", push: int = 0) -> None:
    """``core`` applies every position up to ``upto`` (chains ``<history><n>``); the
    command at ``push`` is a Push of its own client."""
    for position in range(core.position + 1, upto + 1):
        confirms = (Confirm(node=core.me, app="app", client="c", queue="q",
                            message_id=f"m{position}", nonce=None, position=position),
                    ) if position == push else ()
        core.applied(Effects(position=position, chain=f"{history}{position}",
                             confirms=confirms), 1.0)


def deliver(sender: CommitReports, *receivers: CommitReports) -> None:
    for data, _address in sender.datagrams_to_send():
        for receiver in receivers:
            receiver.receive_datagram(data, ("127.0.0.1", 9), 1.0)


def confirmed(core: CommitReports) -> list[str]:
    return [c.message_id for e in core.events_received() if isinstance(e, Confirmable)
            for c in e.confirms]


def test_a_push_is_confirmable_once_a_majority_committed_it() -> None:
    a, b, c = three()
    commit(a, 5, push=4)
    deliver(a, b, c)
    assert confirmed(a) == []  # only a itself
    commit(b, 3)
    deliver(b, a)
    assert confirmed(a) == []  # b is not at 4 yet
    commit(c, 7)
    c.datagrams_to_send()  # only c's latest report arrives
    commit(c, 8)
    deliver(c, a)
    assert confirmed(a) == []  # c is ahead of a: its history there is not known yet
    commit(a, 8)
    assert confirmed(a) == ["m4"]
    commit(b, 8)
    deliver(b, a)
    assert confirmed(a) == []  # once


def test_a_report_of_another_history_does_not_count_nor_a_strangers() -> None:
    a, b, c = three()
    commit(a, 4, push=2)
    commit(b, 4, history="other")  # b applied what a never did: positions diverge
    deliver(b, a)
    a.receive_datagram(encode_report(Report(member="d#1", position=4, chain="h4")),
                       ("127.0.0.1", 4), 1.0)
    a.receive_datagram(b"junk", ("127.0.0.1", 4), 1.0)
    assert confirmed(a) == []
    assert sum(a.rejected.values()) == 2 and a.rejected["not a member"] == 1
    commit(c, 4)
    deliver(c, a)
    assert confirmed(a) == ["m2"]


def test_a_smaller_view_counts_among_its_members_and_refusal_clears() -> None:
    a, b, _c = three()
    commit(a, 4, push=4)
    a.set_view(3, ["a#1", "b#1"], 1.0)
    assert confirmed(a) == []  # b has not reported: 1 of 2 is no majority
    assert [c.message_id for c in a.refuse_all()] == ["m4"]
    b.set_view(3, ["a#1", "b#1"], 1.0)
    commit(b, 4)
    deliver(b, a)
    assert confirmed(a) == []  # refused: never confirmed


def test_reports_are_repeated_and_coalesced() -> None:
    a = CommitReports("a#1", repeat=0.5, coalesce=0.1)
    a.set_view(1, ["a#1", "b#1"], 0.0)
    a.set_address("b#1", ("127.0.0.1", 2), 0.0)
    a.datagrams_to_send()
    a.applied(Effects(position=1, chain="h1"), 0.01)
    a.applied(Effects(position=2, chain="h2"), 0.02)
    assert a.datagrams_to_send() == []  # within the coalescing interval
    assert a.next_deadline() == pytest.approx(0.1)
    a.handle_timer(0.1)
    (sent,) = a.datagrams_to_send()
    assert decode_report(sent[0]) == Report(member="a#1", position=2, chain="h2")
    a.handle_timer(0.6)
    assert len(a.datagrams_to_send()) == 1  # the repeat


@pytest.mark.parametrize("data", [b"", b"\x93\x01\x02\x03", b"\xc1"])
def test_bad_reports_are_refused_not_raised(data: bytes) -> None:
    a, _b, _c = three()
    a.receive_datagram(data, ("127.0.0.1", 9), 1.0)
    assert sum(a.rejected.values()) == 1
    with pytest.raises(DecodeError):
        decode_report(data)


@given(st.binary(max_size=5000), st.text(min_size=1, max_size=60))
def test_chunks_fit_a_multicast_and_put_the_command_back(command: bytes, key: str) -> None:
    chunks = split(key, command)
    assert all(len(chunk) <= MAX_DATA_SIZE for chunk in chunks)
    parsed = [decode(chunk) for chunk in chunks]
    assert {(c.key, c.total) for c in parsed} == {(key, len(chunks))}
    assert [c.number for c in parsed] == list(range(len(chunks)))
    assert b"".join(c.data for c in parsed) == command


@pytest.mark.parametrize("data", [b"", b"GOC1", b"GOC1\x00\x01\x00\x01\x01a",
                                  b"GOC1\x00\x00\x00\x01\x05ab", b"XXXX\x00\x00\x00\x01\x01a"])
def test_bad_chunks_raise_decode_errors(data: bytes) -> None:
    with pytest.raises(DecodeError):
        decode(data)


def test_a_batch_committed_together_is_one_report_that_vouches_for_each_push() -> None:
    a, b, _c = three()
    batch = [Effects(position=p, chain=f"h{p}", confirms=(
        Confirm(node=a.me, app="app", client="c", queue="q", message_id=f"m{p}", nonce=None,
                position=p),)) for p in (1, 2, 3)]
    a.applied(batch, 1.0)
    assert len(a.datagrams_to_send()) == 2  # one report to each other member
    for p in (1, 2, 3):
        commit(b, p)
    b.datagrams_to_send()
    b.applied([], 1.0)  # an empty batch reports nothing
    assert b.datagrams_to_send() == []
    b.handle_timer(2.0)  # the periodic report carries position 3
    deliver(b, a)
    assert confirmed(a) == ["m1", "m2", "m3"]
