"""The replicated queues' commands on the wire: round trips and strict decoding."""

from __future__ import annotations

import msgpack
import pytest

from gossamer.errors import DecodeError
from gossamer.wire import queue_commands as qc

COMMANDS: list[qc.Command] = [
    qc.Push(queue="jobs", message_id="n1#1/1", nonce=7, target={"application": "a"},
            payload={"x": [1, "y"]}, node="n1#1", app="a", client="p"),
    qc.Request(queue="jobs", node="n2#1", app="a", client="c", restricted=True,
               metadata={"k": ["integer", 3]}, count=5, session="conn-7"),
    qc.Cancel(queue="jobs", node="n2#1", app="a", client="c"),
    qc.Ack(queue="jobs", message_id="n1#1/1", node="n2#1", app="a", client="c"),
    qc.Expire(message_id="n1#1/1", attempt=2),
    qc.ClientGone(node="n2#1", app="a", client="c", session="conn-7"),
    qc.Replay(queue="jobs", ids=("n1#1/1",)),
    qc.Replay(queue="jobs", ids=None),
]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: type(c).__name__)
def test_every_command_round_trips(command: qc.Command) -> None:
    assert qc.decode(qc.encode(command)) == command


def test_node_gone_has_no_wire_form() -> None:
    with pytest.raises(TypeError):
        qc.encode(qc.NodeGone(node="n1#1"))


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ([2, "X", "m", 1], "unknown version"),
        ([1, "N", "n1#1"], "unknown kind"),
        ([1, "X", "m"], "wrong number of fields"),
        ([1, "X", "m", 0], "attempt is not a positive integer"),
        ([1, "X", "m", True], "attempt is not a positive integer"),
        ([1, "G", "n", 5, "c", ""], "app is not a string"),
        ([1, "G", "n", "a", "c", None], "session is not a string"),
        ([1, "R", "q", "n", "a", "c", 1, {}, 1, ""], "restricted is not a boolean"),
        ([1, "R", "q", "n", "a", "c", False, {1: 2}, 1, ""], "metadata is not a map of strings"),
        ([1, "L", "q", ["a", 2]], "ids is not a list of strings"),
        ({"v": 1}, "not a command array"),
    ],
)
def test_malformed_commands_are_refused_with_a_reason(value: object, reason: str) -> None:
    with pytest.raises(DecodeError) as caught:
        qc.decode(msgpack.packb(value))
    assert caught.value.reason == f"queue command: {reason}"


def test_bytes_that_are_not_msgpack_and_oversized_commands_are_refused() -> None:
    with pytest.raises(DecodeError, match="msgpack"):
        qc.decode(b"\xc1")
    with pytest.raises(DecodeError, match="too large"):
        qc.decode(qc.encode(COMMANDS[0]), max_size=8)


def test_a_report_round_trips_and_a_malformed_one_is_refused() -> None:
    report = qc.Report(member="n1#2", position=41, chain="0123456789abcdef")
    assert qc.decode_report(qc.encode_report(report)) == report
    for value in ([1, "T", "n", -1, "c"], [1, "X", "n", 1, "c"], [1, "T", "n", 1, 2]):
        with pytest.raises(DecodeError, match="queue report"):
            qc.decode_report(msgpack.packb(value))
