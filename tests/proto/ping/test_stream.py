"""gossamer.proto.ping.stream: the sans-I/O ping core for one byte stream.

(Lives with the stream driver's tests; it mirrors src/gossamer/proto/ping/stream.py.)
These tests drive two cores by hand on a virtual clock, as the simulator would.
"""

from __future__ import annotations

import random

import pytest

from gossamer.errors import ConfigError
from gossamer.proto.ping import PingLost, PongReceived
from gossamer.proto.ping.stream import StreamEnded, StreamPingConfig, StreamPingCore
from gossamer.trace import MemorySink, Tracer
from gossamer.wire import ping as wire
from gossamer.wire.framing import HEADER_SIZE, encode_frame, encode_frames


def _core(node: str, sink: MemorySink, **config: object) -> StreamPingCore:
    return StreamPingCore(StreamPingConfig(node_id=node, **config),  # type: ignore[arg-type]
                          tracer=Tracer(sink, run="t", node=node), rng=random.Random(node))


def _ping(seq: int, sender: str = "c", kind: wire.PingType = wire.PingType.PING) -> bytes:
    return wire.encode(wire.PingMessage(type=kind, seq=seq, sender=sender))


def _exchange(client: StreamPingCore, server: StreamPingCore, now: float) -> None:
    """Move bytes both ways until neither side has anything to say."""
    while True:
        up, down = client.data_to_send(), server.data_to_send()
        if not up and not down:
            return
        if up:
            server.receive_data(up, now)
        if down:
            client.receive_data(down, now)


def _run(client: StreamPingCore, server: StreamPingCore, until: float = 10.0) -> float:
    now = 0.0
    while now < until:
        deadline = client.next_deadline()
        if deadline is None:
            break
        now = max(now, deadline)
        client.handle_timer(now)
        _exchange(client, server, now)
    return now


def test_client_pings_server_answers_then_both_close() -> None:
    sink = MemorySink()
    client = _core("c", sink, count=5, interval=0.1, peer="s")
    server = _core("s", sink)
    _run(client, server)
    events = client.events_received()
    assert [e.seq for e in events if isinstance(e, PongReceived)] == [0, 1, 2, 3, 4]
    assert client.counters.delivered == 5 and server.counters.sent == 5
    assert client.done and client.closing  # close_when_done
    # The client's EOF reaches the server, which closes its half too.
    server.receive_data(b"", 1.0)
    assert server.closing
    assert server.events_received() == [StreamEnded(clean=True, reason="eof")]
    assert [e.attrs["by"] for e in sink.select(kind="close") if e.node == "s"] == ["peer", "local"]
    delivers = sink.select(layer="demo", kind="deliver")
    assert [e.msg for e in delivers] == [f"c/{i}" for i in range(5)]
    sends = [e for e in sink.select(kind="send") if e.node == "c"]
    assert all(e.size == HEADER_SIZE + len(_ping(0)) and e.peer == "s" for e in sends)


def test_frames_split_byte_by_byte_and_coalesced() -> None:
    sink = MemorySink()
    server = _core("s", sink)
    stream = encode_frames(_ping(i) for i in range(6))
    for i in range(len(stream) // 2):
        server.receive_data(stream[i : i + 1], 0.0)
    server.receive_data(stream[len(stream) // 2 :], 0.0)
    answers = server.data_to_send()
    assert answers == encode_frames(_ping(i, "s", wire.PingType.PONG) for i in range(6))
    assert server.counters.received == 6 and server.counters.malformed == 0


def test_unanswered_ping_is_lost_after_timeout_without_retransmission() -> None:
    sink = MemorySink()
    client = _core("c", sink, count=1, interval=0.1, timeout=0.5)
    client.handle_timer(1.0)
    assert client.data_to_send()
    deadline = client.next_deadline()
    assert deadline is not None
    client.handle_timer(deadline)
    assert client.data_to_send() == b""  # nothing sent again: the stream is reliable
    assert client.events_received() == [PingLost(peer="", seq=0)]
    assert sink.select(kind="retransmit") == []
    assert client.done and client.closing


def test_peer_eof_loses_pending_pings_and_stops_pinging() -> None:
    sink = MemorySink()
    client = _core("c", sink, count=3, interval=0.1, peer="s")
    client.handle_timer(0.2)
    client.receive_data(b"", 0.25)
    assert client.events_received() == [
        StreamEnded(clean=True, reason="eof"),
        PingLost(peer="s", seq=0),
    ]
    assert client.next_deadline() is None and client.closing
    client.receive_data(encode_frame(_ping(0, "s", wire.PingType.PONG)), 0.3)  # ignored
    assert client.counters.received == 0


def test_malformed_message_in_a_good_frame_is_counted_and_skipped() -> None:
    sink = MemorySink()
    server = _core("s", sink)
    server.receive_data(encode_frames([b"junk", _ping(1)]), 0.0)
    assert server.counters.malformed == 1 and server.counters.received == 1
    assert server.data_to_send() == encode_frame(_ping(1, "s", wire.PingType.PONG))
    assert not server.closing
    [drop] = sink.select(kind="drop")
    assert drop.attrs["reason"].startswith("bad magic")


def test_oversized_frame_abandons_the_stream_after_the_good_frames() -> None:
    sink = MemorySink()
    server = _core("s", sink)
    bad_header = (wire.MAX_SIZE + 1).to_bytes(4, "big")
    server.receive_data(encode_frame(_ping(1)) + bad_header + bytes(50), 0.0)
    assert server.counters.received == 1 and server.counters.malformed == 1
    [ended] = server.events_received()
    assert isinstance(ended, StreamEnded) and not ended.clean and "exceeds" in ended.reason
    # The PONG for the good frame still goes out; then this side closes.
    assert server.data_to_send() == encode_frame(_ping(1, "s", wire.PingType.PONG))
    assert server.closing
    server.receive_data(encode_frame(_ping(2)), 0.1)
    assert server.counters.received == 1 and server.data_to_send() == b""


def test_stream_ending_inside_a_frame_is_unclean() -> None:
    server = _core("s", MemorySink())
    server.receive_data(encode_frame(_ping(1))[:5], 0.0)
    server.receive_data(b"", 0.1)
    [ended] = server.events_received()
    assert isinstance(ended, StreamEnded) and not ended.clean
    assert server.counters.malformed == 1


def test_send_close_stops_everything_and_pings_after_it_go_unanswered() -> None:
    sink = MemorySink()
    core = _core("c", sink, count=10)
    core.send_close(0.0)
    assert core.closing and core.next_deadline() is None
    core.receive_data(encode_frame(_ping(3, "x")), 0.1)
    assert core.data_to_send() == b""
    assert core.counters.unanswered == 1


def test_duplicate_and_unknown_pongs_are_counted() -> None:
    client = _core("c", MemorySink(), count=1, close_when_done=False)
    client.handle_timer(1.0)
    client.data_to_send()
    pong = encode_frame(_ping(0, "s", wire.PingType.PONG))
    client.receive_data(pong + pong + encode_frame(_ping(7, "s", wire.PingType.PONG)), 1.1)
    assert client.counters.delivered == 1
    assert client.counters.duplicates == 1 and client.counters.unknown == 1
    assert not client.closing


@pytest.mark.parametrize(
    "bad",
    [{"count": -1}, {"interval": 0.0}, {"timeout": -1.0}, {"max_frame": 0}],
)
def test_config_rejects_unusable_values(bad: dict[str, float]) -> None:
    with pytest.raises(ConfigError):
        StreamPingConfig(node_id="n", **bad)  # type: ignore[arg-type]
