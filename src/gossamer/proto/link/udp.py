"""The UDP transport of a link node: a reliable channel (:mod:`~.channel`) per peer
carries whole Exon frames in datagrams, so a link delivers each message exactly once
per incarnation under loss, duplication and reordering."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gossamer._types import Address, Datagram
from gossamer.errors import DecodeError
from gossamer.proto.link.channel import Channel, pull_header
from gossamer.proto.link.host import TransportHost
from gossamer.proto.link.records import Peer
from gossamer.proto.link.transport import LinkTransport

if TYPE_CHECKING:
    from random import Random

__all__ = ["UdpTransport"]


class UdpTransport(LinkTransport):
    """A reliable channel per peer, carried in datagrams: each channel payload holds
    whole frames."""

    def __init__(self, node: TransportHost, rng: Random) -> None:
        self.node = node
        self._rng = rng
        self._outbox: list[Datagram] = []

    # -- the node's interface --------------------------------------------------------

    def send_frame(self, peer: Peer, frame: bytes) -> None:
        channel = peer.channel or self._new_channel(peer)
        channel.queue_frame(frame)

    def send_data(self, peer: Peer, header: bytes, payload: bytes) -> None:
        channel = peer.channel
        if channel is None:
            channel = self._new_channel(peer)
        channel.queue_frame(header + payload)

    def flush(self, now: float) -> None:
        self._pump(now)

    def handle_timer(self, now: float) -> None:
        dirty = self.node.dirty
        for peer in self.node.records.values():
            if peer.channel is not None:
                dirty[peer.address] = peer
        self._pump(now)

    def next_deadline(self, retry: float | None, now: float) -> float | None:
        if self.node.dirty:
            return now
        best = retry
        for peer in self.node.records.values():
            if peer.channel is not None:
                due = peer.channel.deadline()
                if due is not None and (best is None or due < best):
                    best = due
        return best

    def links_changed(self, peer: Peer) -> None:
        # Links depend on the channel: it probes the peer while they exist.
        if peer.channel is not None:
            peer.channel.keepalive = bool(peer.links)

    def datagrams_to_send(self) -> list[Datagram]:
        out, self._outbox = self._outbox, []
        return out

    # -- datagrams in ----------------------------------------------------------------

    def receive_datagram(self, data: bytes, addr: Address, now: float) -> None:
        node = self.node
        try:
            header, offset = pull_header(data)
        except DecodeError as exc:
            node.counters["malformed"] += 1
            node.trace(now, "drop", peer=node.config.peer_name(addr), size=len(data),
                       attrs={"reason": f"malformed datagram: {exc.reason}"})
            return
        peer = node.peer(addr)
        channel = peer.channel
        if header.src_session in peer.retired:
            # A channel we gave up on (the peer did not answer for a while): answer
            # from our current session, so that the peer resets its side and its links
            # go down too instead of waiting for us forever.
            node.counters["stale"] += 1
            current = channel or self._new_channel(peer)
            self._outbox.append((current.pure_ack(header.src_session), addr))
            return
        if header.dst_session and (channel is None or header.dst_session != channel.local_session):
            # Meant for a channel of ours that is gone (we restarted or reset it): tell
            # the peer our current session so it resets its side too.
            channel = channel or self._new_channel(peer)
            node.counters["stale"] += 1
            self._outbox.append((channel.pure_ack(header.src_session), addr))
            return
        if channel is None:
            channel = self._new_channel(peer)
        if channel.peer_session is None:
            channel.peer_session = header.src_session
        elif channel.peer_session != header.src_session:
            # The peer's channel is new: it restarted, or gave up on us. Whatever was
            # in flight on the old channel pair is unknowable: the links go down.
            self._reset_channel(peer, "peer_restarted", now)
            channel = self._new_channel(peer)
            channel.peer_session = header.src_session
        for payload in channel.receive(header, data[offset:], now):
            # Payloads hold whole frames: after one that did not parse (counted and
            # traced), the next starts clean.
            node.receive_frames(peer, payload, now)
        node.dirty[peer.address] = peer
        self._pump(now)

    # -- channels ------------------------------------------------------------------------

    def _new_channel(self, peer: Peer) -> Channel:
        session = 0
        while session == 0 or session in peer.retired:
            session = self._rng.getrandbits(64)
        peer.channel = Channel(
            local_session=session, peer_session=None, config=self.node.config.channel
        )
        peer.channel.keepalive = bool(peer.links)
        peer.frames.reset()
        return peer.channel

    def _reset_channel(self, peer: Peer, reason: str, now: float) -> None:
        channel = peer.channel
        if channel is not None and channel.peer_session is not None:
            peer.retired.add(channel.peer_session)
        peer.channel = None
        peer.frames.reset()
        self.node.counters["channel_resets"] += 1
        self.node.transport_lost(peer, reason, now)

    def _pump(self, now: float) -> None:
        node = self.node
        dirty, node.dirty = node.dirty, {}
        for peer in dirty.values():
            channel = peer.channel
            if channel is None:
                continue
            datagrams = channel.poll(now)
            if channel.failed:
                self._reset_channel(peer, "peer_unreachable", now)
                continue
            addr = peer.address
            for datagram in datagrams:
                self._outbox.append((datagram, addr))
