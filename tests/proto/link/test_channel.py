"""The reliable UDP channel: header codec, exactly-once in-order delivery, give-up."""

from __future__ import annotations

import heapq
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gossamer.errors import ConfigError, DecodeError
from gossamer.proto.link.channel import (
    HEADER_SIZE,
    SEQ_HEADER_SIZE,
    Channel,
    ChannelConfig,
    Header,
    pull_header,
    push_header,
)

U32 = st.integers(0, 2**32 - 1)


@given(
    src=st.integers(1, 2**64 - 1),
    dst=st.integers(0, 2**64 - 1),
    ack=U32,
    sack=U32,
    seq=st.none() | st.integers(1, 2**32 - 1),
    payload=st.binary(max_size=40),
)
def test_headers_round_trip(
    *,
    src: int, dst: int, ack: int, sack: int, seq: int | None, payload: bytes
) -> None:
    header = Header(src_session=src, dst_session=dst, ack=ack, sack=sack, seq=seq)
    buf = bytearray()
    push_header(buf, header)
    assert len(buf) == (HEADER_SIZE if seq is None else SEQ_HEADER_SIZE)
    if seq is not None:
        buf += payload
    decoded, offset = pull_header(bytes(buf))
    assert decoded == header
    assert bytes(buf[offset:]) == (payload if seq is not None else b"")


@given(st.binary(max_size=64))
def test_random_bytes_raise_only_decode_error(data: bytes) -> None:
    try:
        header, offset = pull_header(data)
    except DecodeError:
        return
    rebuilt = bytearray()
    push_header(rebuilt, header)
    assert bytes(rebuilt) == data[:offset]


def test_malformed_headers_are_rejected() -> None:
    good = bytearray()
    push_header(good, Header(src_session=5, dst_session=0, ack=1, sack=0, seq=None))
    for index, value in ((0, 0), (2, 9), (3, 0x80)):
        bad = bytearray(good)
        bad[index] = value
        with pytest.raises(DecodeError):
            pull_header(bytes(bad))
    with pytest.raises(DecodeError, match="no payload"):
        pull_header(bytes(good) + b"x")
    zero_src = bytearray(good)
    zero_src[4:12] = bytes(8)
    with pytest.raises(DecodeError, match="reserved"):
        pull_header(bytes(zero_src))
    with pytest.raises(ValueError):
        push_header(bytearray(), Header(src_session=2**64, dst_session=0, ack=0, sack=0, seq=1))
    with pytest.raises(ConfigError):
        ChannelConfig(window=0)
    with pytest.raises(ConfigError):
        ChannelConfig(dead_after=0)


class LossyPair:
    """Two channels joined by a seeded network that drops, duplicates and reorders."""

    def __init__(self, seed: int, *, drop: float, dup: float) -> None:
        self.rng = random.Random(seed)
        self.drop, self.dup = drop, dup
        config = ChannelConfig(window=8, max_datagram=200)
        self.ends = [
            Channel(local_session=11, peer_session=22, config=config),
            Channel(local_session=22, peer_session=11, config=config),
        ]
        self.received: list[list[bytes]] = [[], []]
        self.now = 0.0
        self.wire: list[tuple[float, int, int, bytes]] = []
        self.count = 0

    def pump(self) -> None:
        for side, channel in enumerate(self.ends):
            for datagram in channel.poll(self.now):
                if self.rng.random() < self.drop:
                    continue
                copies = 2 if self.rng.random() < self.dup else 1
                for _ in range(copies):
                    self.count += 1
                    when = self.now + self.rng.uniform(0.001, 0.02)  # reorders too
                    heapq.heappush(self.wire, (when, self.count, 1 - side, datagram))

    def run(self, until: float) -> None:
        while self.now < until:
            self.pump()
            times = [d for c in self.ends if (d := c.deadline()) is not None]
            if self.wire:
                times.append(self.wire[0][0])
            if not times:
                return
            self.now = max(self.now, min(times))
            while self.wire and self.wire[0][0] <= self.now:
                _, _, to, datagram = heapq.heappop(self.wire)
                header, offset = pull_header(datagram)
                self.received[to].extend(self.ends[to].receive(header, datagram[offset:], self.now))


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32), drop=st.floats(0, 0.4), dup=st.floats(0, 0.3))
def test_every_frame_arrives_once_and_in_order_under_loss(
    seed: int, drop: float, dup: float
) -> None:
    pair = LossyPair(seed, drop=drop, dup=dup)
    frames = [f"frame-{i:03d}".encode() * (1 + i % 9) for i in range(120)]
    for frame in frames:
        pair.ends[0].queue_frame(frame)
    pair.ends[1].queue_frame(b"reverse")
    pair.run(until=120.0)
    assert b"".join(pair.received[1]) == b"".join(frames), f"seed={seed}"
    assert pair.received[0] == [b"reverse"]
    # The channel never splits a frame: each payload is whole frames.
    assert all(any(p.startswith(f) for f in frames) for p in pair.received[1])
    if drop > 0.1:
        assert pair.ends[0].counters.retransmissions > 0


def test_a_silent_peer_is_declared_unreachable_after_dead_after() -> None:
    config = ChannelConfig(dead_after=3.0, initial_rto=0.1, min_rto=0.1, max_rto=0.4)
    channel = Channel(local_session=1, peer_session=2, config=config)
    channel.queue_frame(b"hello")
    sent = channel.poll(0.0)
    assert len(sent) == 1 and channel.in_flight == 1
    now, times = 0.0, []
    while not channel.failed:
        deadline = channel.deadline()
        assert deadline is not None
        now = deadline
        if channel.poll(now):
            times.append(round(now, 6))
    assert times[:4] == [0.1, 0.3, 0.7, 1.1]  # doubling, capped at max_rto
    assert now == pytest.approx(3.0) and channel.counters.retransmissions == len(times)
    assert channel.deadline() is None and channel.poll(now + 10) == []


def test_keepalive_probes_an_idle_peer_and_an_answer_keeps_it_alive() -> None:
    config = ChannelConfig(keepalive_interval=1.0, dead_after=5.0)
    a = Channel(local_session=1, peer_session=2, config=config)
    b = Channel(local_session=2, peer_session=1, config=config)
    assert a.deadline() is None  # no links, no probes
    a.keepalive = True
    assert a.deadline() == 1.0
    (probe,) = a.poll(1.0)
    header, offset = pull_header(probe)
    assert header.seq == 1 and probe[offset:] == b""
    assert b.receive(header, probe[offset:], 1.001) == [b""]
    (ack,) = b.poll(1.01)
    header, offset = pull_header(ack)
    a.receive(header, b"", 1.02)
    assert a.in_flight == 0 and a.deadline() == pytest.approx(2.02)
    (probe,) = a.poll(2.02)  # nobody answers this one
    while not a.failed:
        a.poll(a.deadline() or 0.0)
    assert a.failed


def test_selective_acks_spare_what_arrived() -> None:
    config = ChannelConfig(window=8)
    a = Channel(local_session=1, peer_session=2, config=config)
    b = Channel(local_session=2, peer_session=1, config=config)
    big = b"x" * (config.max_payload - 10)
    for _ in range(4):
        a.queue_frame(big)
    datagrams = a.poll(0.0)
    assert len(datagrams) == 4
    for datagram in datagrams[1:]:  # the first is lost
        header, offset = pull_header(datagram)
        assert b.receive(header, datagram[offset:], 0.001) == []
    (ack,) = b.poll(0.001)
    header, _ = pull_header(ack)
    assert (header.ack, header.sack) == (1, 0b111)
    a.receive(header, b"", 0.002)
    assert a.in_flight == 1  # only the lost one waits for retransmission
    retransmitted = a.poll(1.0)
    assert len(retransmitted) == 1
    header, offset = pull_header(retransmitted[0])
    assert header.seq == 1
    assert b.receive(header, retransmitted[0][offset:], 1.0) == [big] * 4
