"""Sinks and the tracer; a durable sink loses at most the line being written."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from gossamer.trace import JsonlSink, MemorySink, Tracer, TraceReader


def test_tracer_stamps_run_and_node() -> None:
    sink = MemorySink()
    trace = Tracer(sink, run="r1", node="n7")
    trace(2.5, "isis", "deliver", msg="n1/1", seq=3, attrs={"proposer": "n2"})
    (event,) = sink.events
    assert (event.run, event.node, event.t, event.layer, event.kind) == (
        "r1",
        "n7",
        2.5,
        "isis",
        "deliver",
    )
    assert event.attrs == {"proposer": "n2"} and event.msg == "n1/1"
    assert sink.select(layer="isis", kind="deliver") == [event]
    assert sink.select(kind="send") == []


def test_jsonl_sink_appends_readable_lines(tmp_path: Path) -> None:
    path = tmp_path / "run" / "n0.jsonl"
    with JsonlSink(path) as sink:
        trace = Tracer(sink, run="r", node="n0")
        for i in range(3):
            trace(float(i), "demo", "send", seq=i)
    assert sink.count == 3
    reader = TraceReader()
    assert [e.seq for e in reader.read(path)] == [0, 1, 2]
    assert reader.bad_lines == []


def test_killed_writer_loses_at_most_the_line_being_written(tmp_path: Path) -> None:
    """A process that writes events and is SIGKILLed leaves only complete lines behind
    (nothing is held in a user-space buffer)."""
    path = tmp_path / "n0.jsonl"
    script = textwrap.dedent(
        f"""
        import os, signal
        from gossamer.trace import JsonlSink, Tracer
        trace = Tracer(JsonlSink({str(path)!r}), run="r", node="n0")
        for i in range(500):
            trace(float(i), "demo", "send", seq=i)
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], check=False, timeout=60)
    assert proc.returncode == -signal.SIGKILL
    reader = TraceReader()
    assert [e.seq for e in reader.read(path)] == list(range(500))
    assert reader.bad_lines == []
    assert os.path.getsize(path) > 0


def test_peer_names_rename_endpoints_as_the_names_grow() -> None:
    from gossamer.trace.peer_names import PeerNames

    memory = MemorySink()
    names: dict[str, str] = {}
    tracer = Tracer(PeerNames(memory, names), run="r", node="n1")
    tracer(1.0, "discovery", "peer_down", peer="10.0.0.2:7400")
    names["10.0.0.2:7400"] = "n2"  # a card arrived: later events name the node
    names["10.0.0.3:7404"] = "n3"
    tracer(2.0, "discovery", "peer_down", peer="10.0.0.2:7400")
    tracer(3.0, "gossip", "forward", attrs={"dests": "10.0.0.2:7400,10.0.0.9:1"})
    tracer(4.0, "link", "deliver", msg="10.0.0.3:7404/5", attrs={"link": "10.0.0.3:7404#2"})
    first, second, gossip, link = memory.events
    assert (first.peer, second.peer) == ("10.0.0.2:7400", "n2")
    assert gossip.attrs["dests"] == "n2,10.0.0.9:1"
    assert (link.msg, link.attrs["link"]) == ("n3/5", "n3#2")
