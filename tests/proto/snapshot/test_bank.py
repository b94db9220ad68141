"""The bank workload: transfers encoded in a uint32's 4 bytes, debits and credits."""

from __future__ import annotations

import random

import pytest

from gossamer.errors import ConfigError, LocalProtocolError
from gossamer.proto.snapshot import Bank, decode_transfer, encode_transfer


def test_transfer_encoding_round_trips_and_is_bounded() -> None:
    assert decode_transfer(encode_transfer(3, 250)) == (3, 250)
    assert encode_transfer(255, (1 << 24) - 1) == b"\xff" * 4
    assert decode_transfer(b"not a transfer") == (0, 0)
    for bad in ((0, 1), (256, 1), (1, 0), (1, 1 << 24)):
        with pytest.raises(LocalProtocolError):
            encode_transfer(*bad)


def test_money_moves_from_debit_at_send_to_credit_at_delivery() -> None:
    a = Bank(me=1, members=[1, 2, 3], initial=100, rng=random.Random(1), max_amount=30)
    b = Bank(me=2, members=[1, 2, 3], initial=100, rng=random.Random(2))
    c = Bank(me=3, members=[1, 2, 3], initial=100, rng=random.Random(3))
    sent = [a.next_transfer() for _ in range(5)]
    assert all(s is not None for s in sent)
    in_flight = sum(decode_transfer(s)[1] for s in sent if s is not None)
    assert a.balance == 100 - in_flight and a.state() == {"balance": a.balance}
    assert all(decode_transfer(s)[0] in (2, 3) for s in sent if s is not None)
    for bank in (a, b, c):  # every member delivers every transfer; only the payee credits
        for s in sent:
            assert s is not None
            bank.delivered(s)
    assert a.balance + b.balance + c.balance == 300


def test_an_empty_or_lonely_account_sends_nothing() -> None:
    assert Bank(me=1, members=[1, 2], initial=0, rng=random.Random(0)).next_transfer() is None
    assert Bank(me=1, members=[1], initial=9, rng=random.Random(0)).next_transfer() is None
    with pytest.raises(ConfigError):
        Bank(me=1, members=[1, 2], initial=-1, rng=random.Random(0))
