"""``gossamer isis``'s options: IsisConfig's tunables, and the original's spellings."""

from __future__ import annotations

import argparse

import pytest

from gossamer.cli import isis_cmd
from gossamer.proto.isis import TUNABLES, tunable_defaults


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="gossamer")
    isis_cmd.COMMAND.add_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(["isis", "--hostfile", "hosts", *argv])


def test_every_tunable_is_an_option_with_the_configurations_default() -> None:
    args = parse()
    assert {name: getattr(args, name) for name in TUNABLES} == tunable_defaults()


def test_options_are_in_the_configurations_units() -> None:
    args = parse("--retransmit-initial", "0.01", "--retransmit-max", "0.16",
                 "--ack-delay", "0.5", "--batch-delay", "0.001", "--batch-bytes", "9000",
                 "--drop-rate", "0.25")  # fmt: skip
    assert (args.retransmit_initial, args.retransmit_max) == (0.01, 0.16)
    assert (args.ack_delay, args.batch_delay, args.batch_bytes) == (0.5, 0.001, 9000)
    assert args.drop_rate == 0.25


@pytest.mark.parametrize(("text", "value"), [("on", True), ("off", False), ("false", False)])
def test_turn_batching_is_an_on_off_option(text: str, value: bool) -> None:
    assert parse("--batch-turn", text).batch_turn is value


def test_a_flag_that_is_neither_on_nor_off_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse("--batch-turn", "maybe")
    assert "--batch-turn" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("original", "name", "value"),
    [
        (["--delay", "2000"], "ack_delay", 2.0),  # milliseconds in the original
        (["--dropRate", "0.2"], "drop_rate", 0.2),
        (["--msgCount", "4"], "msg_count", 4),
        (["--initiateSnapshotCount", "3"], "initiate_snapshot_count", 3),
    ],
)
def test_the_originals_spellings_are_accepted(original: list[str], name: str, value: float) -> None:
    assert getattr(parse(*original), name) == pytest.approx(value)
