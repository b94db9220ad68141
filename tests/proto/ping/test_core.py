"""The ping core on its own: no network, no clock, every step driven by hand."""

from __future__ import annotations

import itertools
import random

import pytest

from gossamer.errors import ConfigError
from gossamer.proto.ping import PingConfig, PingCore, PingLost, PongReceived
from gossamer.trace import MemorySink, Tracer
from gossamer.wire import ping as wire

B = ("10.0.0.2", 7000)


def make(count: int = 1, **kw: float) -> tuple[PingCore, MemorySink]:
    sink = MemorySink()
    config = PingConfig(
        node_id="a", targets=[("b", B)], count=count, interval=1.0, timeout=0.5, **kw
    )  # type: ignore[arg-type]
    return PingCore(config, tracer=Tracer(sink, run="r", node="a"), rng=random.Random(0)), sink


def pong(seq: int, sender: str = "b") -> bytes:
    return wire.encode(wire.PingMessage(type=wire.PingType.PONG, seq=seq, sender=sender))


def first_ping(core: PingCore) -> float:
    start = core.next_deadline()
    assert start is not None and 0.0 <= start <= 1.0  # jittered within one interval
    core.handle_timer(start)
    ((data, addr),) = core.datagrams_to_send()
    assert addr == B and wire.decode(data) == wire.PingMessage(
        type=wire.PingType.PING, seq=0, sender="a"
    )
    return start


def test_ping_answered_completes_once() -> None:
    core, sink = make()
    t0 = first_ping(core)
    core.receive_datagram(pong(0), B, t0 + 0.1)
    (event,) = core.events_received()
    assert event == PongReceived(peer="b", seq=0, rtt=pytest.approx(0.1))
    assert core.done and core.next_deadline() is None
    core.receive_datagram(pong(0), B, t0 + 0.2)  # a duplicate PONG
    assert core.events_received() == [] and core.counters.duplicates == 1
    assert [e.kind for e in sink.events] == ["send", "recv", "deliver", "recv"]


def test_retransmission_doubles_then_gives_up() -> None:
    core, sink = make(max_retries=3)  # type: ignore[arg-type]
    t = first_ping(core)
    sends = [t]
    while (deadline := core.next_deadline()) is not None:
        core.handle_timer(deadline)
        if core.datagrams_to_send():
            sends.append(deadline)
    gaps = [round(b - a, 6) for a, b in itertools.pairwise(sends)]
    assert gaps == [0.5, 1.0, 2.0]
    assert core.events_received() == [PingLost(peer="b", seq=0)]
    assert [e.kind for e in sink.events].count("retransmit") == 3
    assert sink.events[-1].kind == "lost"


def test_answers_a_ping_with_a_pong_to_its_source() -> None:
    core, sink = make(count=0)
    assert core.next_deadline() is None
    ping = wire.encode(wire.PingMessage(type=wire.PingType.PING, seq=42, sender="c"))
    core.receive_datagram(ping, ("10.0.0.3", 9), 1.0)
    ((data, addr),) = core.datagrams_to_send()
    assert addr == ("10.0.0.3", 9)
    assert wire.decode(data) == wire.PingMessage(type=wire.PingType.PONG, seq=42, sender="a")
    assert {e.msg for e in sink.events} == {"c/42"}


def test_malformed_and_unknown_datagrams_are_counted_not_raised() -> None:
    core, sink = make()
    core.receive_datagram(b"\xff" * 5, B, 0.0)
    core.receive_datagram(pong(99), B, 0.0)
    assert core.counters.malformed == 1 and core.counters.unknown == 1
    assert core.datagrams_to_send() == [] and core.events_received() == []
    (drop,) = sink.select(kind="drop")
    assert drop.attrs["reason"].startswith("bad magic")


def test_pings_round_robin_over_targets_at_the_interval() -> None:
    sink = MemorySink()
    targets = [("b", B), ("c", ("10.0.0.3", 7000))]
    core = PingCore(
        PingConfig(node_id="a", targets=targets, count=3, interval=1.0, timeout=10.0),
        tracer=Tracer(sink, run="r", node="a"),
        rng=random.Random(1),
    )
    sent = []
    for _ in range(3):
        deadline = core.next_deadline()
        assert deadline is not None
        core.handle_timer(deadline)
        sent += [(deadline, addr) for _, addr in core.datagrams_to_send()]
    assert [addr for _, addr in sent] == [B, ("10.0.0.3", 7000), B]
    assert [round(b[0] - a[0], 6) for a, b in itertools.pairwise(sent)] == [1.0, 1.0]


def test_config_is_validated() -> None:
    with pytest.raises(ConfigError):
        PingConfig(node_id="a", interval=0)
    with pytest.raises(ConfigError):
        PingConfig(node_id="a", count=-1)
