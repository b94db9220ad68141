"""The cut and bank checks on hand-built snapshots."""

from __future__ import annotations

from typing import Any

from gossamer.proto.snapshot import check_bank, check_cut, encode_transfer


def part(
    me: int,
    sent: int,
    received: dict[str, int],
    channels: dict[str, list[bytes]],
    *,
    balance: int,
    holdback: tuple[bytes, ...] = (),
    queued: tuple[bytes, ...] = (),
    unread: tuple[bytes, ...] = (),
) -> dict[str, Any]:
    return {
        "local_state": {
            "isis": {
                "id": me,
                "msg_id": sent,
                "received_from": received,
                "holdback": [{"data": d.hex()} for d in holdback],
            },
            "app": {"balance": balance},
            "queued": [d.hex() for d in queued],
            "unread": [{"sender": 1, "data": d.hex()} for d in unread],
        },
        "channels": {
            peer: {
                "messages": [{"msg_id": i + 1, "data": d.hex()} for i, d in enumerate(datas)],
                "closed_by": "marker",
            }
            for peer, datas in channels.items()
        },
    }


def test_a_consistent_snapshot_passes_both_checks() -> None:
    to_b = encode_transfer(2, 10)
    to_a = encode_transfer(1, 5)
    parts = {
        # a sent 1 transfer (10 to b), still on the wire to b; b sent 1 (5 to a), which
        # a received but has not delivered yet.
        "a": part(1, 1, {"b": 1}, {"b": []}, balance=90, holdback=(to_a,)),
        "b": part(2, 1, {}, {"a": [to_b]}, balance=95),
    }
    assert check_cut(parts) == []
    assert check_bank(parts, total=200) == (200, [])


def test_money_delivered_but_not_yet_read_by_the_application_is_counted() -> None:
    to_b = encode_transfer(2, 10)
    # b delivered a's transfer (it left the hold-back queue) but its application has not
    # read it: the balance is still 100, the 10 are in "unread".
    parts = {
        "a": part(1, 1, {}, {"b": []}, balance=90),
        "b": part(2, 0, {"a": 1}, {"a": []}, balance=100, unread=(to_b,)),
    }
    assert check_cut(parts) == []
    assert check_bank(parts, total=200) == (200, [])
    parts["b"]["local_state"]["unread"] = []
    assert check_bank(parts, total=200) == (190, ["bank: the snapshot holds 190, not 200"])


def test_lost_or_double_counted_messages_are_reported() -> None:
    parts = {
        "a": part(1, 2, {}, {"b": []}, balance=100),
        "b": part(2, 0, {"a": 0}, {"a": [bytes(4)]}, balance=100),  # a sent 2, b saw 1 in all
    }
    problems = check_cut(parts)
    assert problems == [
        "cut: a had sent 2 messages when it recorded, b had received 0 and "
        "recorded 1 on the channel"
    ]
    parts["b"]["channels"]["a"]["messages"] = [{"msg_id": 3, "data": "00000000"}, {"msg_id": 1}]
    assert any("sent after a recorded" in p for p in check_cut(parts))
    del parts["a"]["channels"]["b"]
    assert "cut: no state for channel a<-b" in check_cut(parts)


def test_money_missing_from_a_snapshot_is_reported() -> None:
    parts = {
        "a": part(1, 0, {}, {"b": []}, balance=90, queued=(encode_transfer(2, 4),)),
        "b": part(2, 0, {}, {"a": []}, balance=100),
    }
    assert check_bank(parts, total=200) == (194, ["bank: the snapshot holds 194, not 200"])
