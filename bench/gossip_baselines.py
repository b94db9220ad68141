"""Baselines for ``bench/gossip.py``: the original Chatter as coded, and push gossip.

Both are sans-I/O cores with the surface ``gossamer.proto.gossip.connections.TransportCore``
(what ``GossipConnections`` drives), so they run on the same simulated topology as
gossamer's ``GossipCore``.

``ChatterAsCoded``: ``Chatter.broadcast`` exactly as chatter-as-coded.md §9-§10 describes it,
on Chatter's wire format (real bytes, so sizes are real):

- every call bumps the seqno; forwarders re-originate (their own id and seqno);
- multicast first, on every call, carrying the whole distribution list; multicast receivers
  dispatch every copy (no duplicate suppression) and never forward;
- the peers that reported seeing us leave the list, then one random peer of the original
  list is added back; ``group_mcast_peers`` as coded (one-directional, order dependent),
  ``build_tree``, one random head per chunk;
- the peer database never expires; seen lists grow with every multicast sender heard;
- **the TCP receive bug** (§7): with ``tcp_bug=True`` (the released 0.0.13-0.0.15) every TCP
  message is dropped by its receiver; with ``tcp_bug=False`` it is processed as the code
  intends ("as coded minus the bug that drops every TCP message").
- A dead next hop is not detected: Chatter's connect has no timeout and the OS gives up
  after about two minutes (§8), outside the measurement window; its chunk is lost.

Modelling shortcuts, none of which changes a message's size or who receives it: the "other
ids" are four random known peers (Chatter takes one from each of four groups of the whole
database, a cost this model cannot pay at every one of a thousand hops); decoded messages
are shared between receivers of one datagram (decoding is pure); and the payload carries
its broadcast's label and hop count so that coverage and depth can be measured, since
nothing on Chatter's wire names a broadcast end to end.

``PushGossip``: push gossip as memberlist (and Serf over it) does it: every node knows the
members; a node that learns a broadcast queues it and, every ``interval`` (200 ms), sends
its queue to ``fanout`` (3) random members in one UDP datagram each, until the broadcast
was sent ``retransmit_mult * ceil(log10(n + 1))`` times (memberlist's
``TransmitLimitedQueue``: 4 and 3 are its LAN defaults). Messages are sealed in gossamer's
envelope (memberlist encrypts with AES-GCM too); each node delivers a broadcast once.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from random import Random

from gossamer._types import Address, Datagram
from gossamer.errors import CryptoError, DecodeError
from gossamer.proto.gossip import StreamSend
from gossamer.proto.gossip.planner import build_tree, group_as_coded
from gossamer.sim.scenarios.gossip import sim_content
from gossamer.trace.sink import Tracer
from gossamer.wire import chatter as cw
from gossamer.wire import envelope
from gossamer.wire.chatter import BroadcastID, Gossip, NetID
from gossamer.wire.keyring import Key, Keyring
from gossamer.wire.varint import decode_uint, encode_uint

__all__ = ["ChatterAsCoded", "PushGossip"]

LAYER = "gossip"
GROUP = ("224.1.1.1", 29999)
#: What a default-configured OTP receives of a datagram (§8): larger ones are dropped.
OTP_DATAGRAM = 8192
_TAG = cw.type_tag("sim")


def _content(label: str, hop: int, size: int) -> bytes:
    return sim_content(label, size, extra=f"{hop}|".encode())


def _parse(content: bytes) -> tuple[str, int]:
    label, hop, _ = content.split(b"|", 2)
    return label.decode(), int(hop)


# Decoded Chatter messages by their bytes, shared by every receiver of one datagram, with
# the set of seen-list origins (the model's "reports"). Bounded.
_DECODED: OrderedDict[bytes, tuple[Gossip, frozenset[NetID]]] = OrderedDict()


def _decode(data: bytes, key: bytes) -> tuple[Gossip, frozenset[NetID]] | None:
    hit = _DECODED.get(data)
    if hit is not None:
        return hit
    try:
        gossip = cw.decode_message(
            data, key, limits=cw.Limits(max_message_size=1 << 24, max_gossip_size=1 << 24)
        )
    except DecodeError:
        return None
    hit = (gossip, frozenset(b.origin for b in gossip.seen))
    _DECODED[data] = hit
    if len(_DECODED) > 4096:
        _DECODED.popitem(last=False)
    return hit


class ChatterAsCoded:
    """The original ``Chatter.broadcast`` (see the module docstring)."""

    def __init__(
        self,
        own: NetID,
        *,
        tracer: Tracer,
        rng: Random,
        key: bytes,
        tcp_bug: bool,
        multicast: bool = True,
    ) -> None:
        self.own = own
        self.tcp_bug = tcp_bug
        self.multicast = multicast
        self._trace = tracer
        self._rng = rng
        self._key = cw.derive_key(key)
        self._limits = cw.Limits(max_message_size=1 << 24, max_gossip_size=1 << 24)
        self._seqno = 0
        self._peers: dict[NetID, None] = {}
        self._senders: dict[NetID, int] = {}
        #: reporter -> origins it reported hearing (Chatter's reverse map, kept per reporter).
        self._reports: dict[NetID, frozenset[NetID]] = {}
        self._datagrams: list[Datagram] = []
        self._streams: list[StreamSend] = []
        self.tcp_dropped = 0

    # -- Chatter.broadcast ----------------------------------------------------------------

    def broadcast(self, destinations: Sequence[NetID], payload: object, now: float) -> str:
        assert isinstance(payload, tuple)
        label, size = str(payload[1]), int(payload[2])
        self._trace(now, LAYER, "broadcast", msg=label, attrs={"dests": str(len(destinations))})
        self._broadcast(list(destinations), label, size, 1, now)
        return label

    def _seen_by(self, netid: NetID) -> list[NetID] | None:
        if netid not in self._peers and netid != self.own:
            return None
        return [r for r, origins in self._reports.items() if netid in origins]

    def _broadcast(self, dist: list[NetID], label: str, size: int, hop: int, now: float) -> None:
        dist = [n for n in dist if n != self.own] if self.own in dist else dist
        self._seqno += 1
        seen = tuple(BroadcastID(n, s) for n, s in self._senders.items())
        peers_seen_us = set(self._seen_by(self.own) or ())
        peers = list(self._peers)
        others = tuple(self._rng.sample(peers, min(4, len(peers))))
        content = _content(label, hop, size)
        current = BroadcastID(self.own, self._seqno)

        def message(distribution: Sequence[NetID]) -> bytes:
            g = Gossip(
                current=current,
                type_tag=_TAG,
                content=content,
                seen=seen,
                others=others,
                distribution=tuple(distribution),
            )
            return cw.encode_message(g, self._key, limits=self._limits)

        if self.multicast:  # multicast first, on every call, with the whole list (step 7)
            data = message(dist)
            self._datagrams.append((data, GROUP))
            self._trace(
                now,
                LAYER,
                "send",
                msg=label,
                peer="224.1.1.1:29999",
                size=len(data),
                attrs={"via": "multicast", "hop": str(hop)},
            )
        remaining = [n for n in dist if n not in peers_seen_us]
        if dist:  # step 8: one random peer of the original list back (a set union)
            extra = self._rng.choice(dist)
            if extra not in remaining:
                remaining.append(extra)
        groups = group_as_coded(remaining, self._seen_by)
        for chunk in build_tree(groups, self._rng):
            flat = [n for g in chunk for n in g]
            self._rng.shuffle(flat)
            head, rest = flat[0], flat[1:]
            data = message(rest)
            self._streams.append(StreamSend(peer=head, data=data))
            self._trace(
                now,
                LAYER,
                "send",
                msg=label,
                peer=str(head),
                size=len(data),
                attrs={"via": "tcp", "hop": str(hop), "list": str(len(rest))},
            )
        for netid in dist:
            self._peers[netid] = None

    # -- receiving --------------------------------------------------------------------------

    def _learn(self, gossip: Gossip, origins: frozenset[NetID]) -> None:
        sender = gossip.current.origin
        self._peers[sender] = None
        for bid in gossip.seen:
            if bid.origin != self.own:
                self._peers[bid.origin] = None
        known = self._reports.get(sender)
        if known is None:
            self._reports[sender] = origins
        elif not origins <= known:
            self._reports[sender] = known | origins
        for netid in gossip.others:
            if netid != self.own:
                self._peers[netid] = None

    def receive_datagram(
        self, data: bytes, addr: Address, now: float, *, multicast: bool = False
    ) -> None:
        if len(data) > OTP_DATAGRAM:
            return  # truncated by the receiving socket, then dropped by the size check (§8)
        decoded = _decode(data, self._key)
        if decoded is None:
            return
        gossip, origins = decoded
        sender = gossip.current.origin
        if sender == self.own:
            return
        # Chatter's socket is bound to 0.0.0.0: every datagram is taken for a multicast.
        self._senders[sender] = max(self._senders.get(sender, 0), gossip.current.seqno)
        self._learn(gossip, origins)
        self._dispatch(gossip, sender, "multicast", len(data), now)

    def receive_stream(self, conn: int, data: bytes, now: float) -> None:
        if not data:
            return
        if self.tcp_bug:
            # PeerDB.add(BroadcastID) raises; the rescue drops the message and closes (§7).
            self.tcp_dropped += 1
            self._trace(
                now,
                LAYER,
                "drop",
                size=len(data),
                attrs={"reason": "cannot decode packet (TCP receive bug)", "via": "tcp"},
            )
            return
        decoded = _decode(data, self._key)
        if decoded is None:
            return
        gossip, origins = decoded
        self._learn(gossip, origins)
        label, hop = self._dispatch(gossip, gossip.current.origin, "tcp", len(data), now)
        self._broadcast(list(gossip.distribution), label, len(gossip.content), hop + 1, now)

    def _dispatch(
        self, gossip: Gossip, sender: NetID, via: str, size: int, now: float
    ) -> tuple[str, int]:
        label, hop = _parse(gossip.content)
        attrs = {"via": via, "hop": str(hop)}
        self._trace(now, LAYER, "recv", msg=label, peer=str(sender), size=size, attrs=attrs)
        # No duplicate suppression (§9): every copy is dispatched.
        self._trace(now, LAYER, "deliver", msg=label, peer=str(sender), attrs=attrs)
        return label, hop

    def receive_reply(self, peer: NetID, data: bytes, now: float) -> None:
        pass

    def datagrams_to_send(self) -> list[Datagram]:
        out, self._datagrams = self._datagrams, []
        return out

    def streams_to_send(self) -> list[StreamSend]:
        out, self._streams = self._streams, []
        return out

    def events_received(self) -> list[object]:
        return []

    def handle_timer(self, now: float) -> None:
        pass

    def next_deadline(self) -> float | None:
        return None


@dataclass(slots=True)
class _Rumour:
    msg: str
    hop: int
    body: bytes
    sent: int = 0


class PushGossip:
    """memberlist-style push gossip (see the module docstring)."""

    def __init__(
        self,
        own: NetID,
        members: Sequence[NetID],
        *,
        tracer: Tracer,
        rng: Random,
        key: bytes,
        epoch: int,
        fanout: int = 3,
        interval: float = 0.2,
        retransmit_mult: int = 4,
    ) -> None:
        self.own = own
        self.members = [m for m in members if m != own]
        self.fanout = fanout
        self.interval = interval
        self.limit = retransmit_mult * math.ceil(math.log10(len(members) + 1))
        self._trace = tracer
        self._rng = rng
        self._keyring = Keyring(cluster="push", keys=Key.from_bytes(key, key_id=1))
        self._session = envelope.SenderSession(
            sender=str(own), epoch=epoch, randbytes=rng.randbytes
        )
        self._replay = envelope.ReplayWindows()
        self._seq = 0
        self._seqno = 0
        self._seen: set[str] = set()
        self._queue: list[_Rumour] = []
        self._next: float | None = None
        self._out: list[Datagram] = []

    def broadcast(self, destinations: Sequence[NetID], payload: object, now: float) -> str:
        assert isinstance(payload, tuple)
        self._seqno += 1
        msg = f"{self.own}/{self._seqno}"
        self._trace(now, LAYER, "broadcast", msg=msg, attrs={"label": str(payload[1])})
        self._seen.add(msg)
        self._enqueue(msg, 1, sim_content(str(payload[1]), int(payload[2])), now)
        return msg

    def _enqueue(self, msg: str, hop: int, body: bytes, now: float) -> None:
        self._queue.append(_Rumour(msg=msg, hop=hop, body=body))
        if self._next is None:
            self._next = now  # gossip at once, then every interval

    def handle_timer(self, now: float) -> None:
        if self._next is None or now < self._next:
            return
        live = [r for r in self._queue if r.sent < self.limit]
        self._queue = live
        if not live:
            self._next = None
            return
        for target in self._rng.sample(self.members, min(self.fanout, len(self.members))):
            rumours = [r for r in live if r.sent < self.limit]
            body = b"".join(
                encode_uint(len(r.msg))
                + r.msg.encode()
                + encode_uint(r.hop)
                + encode_uint(len(r.body))
                + r.body
                for r in rumours
            )
            self._seq += 1
            data = envelope.seal(
                self._keyring, self._session, seq=self._seq, payload=body, max_payload=1 << 20
            )
            self._out.append((data, (target.host, target.port)))
            for r in rumours:
                r.sent += 1
                self._trace(
                    now,
                    LAYER,
                    "send",
                    msg=r.msg,
                    peer=str(target),
                    size=len(data),
                    attrs={"via": "udp", "hop": str(r.hop)},
                )
        self._next = now + self.interval

    def receive_datagram(
        self, data: bytes, addr: Address, now: float, *, multicast: bool = False
    ) -> None:
        try:
            opened = envelope.unseal(self._keyring, data, replay=self._replay, max_payload=1 << 20)
        except (DecodeError, CryptoError):
            return
        body, pos = opened.payload, 0
        while pos < len(body):
            n, pos = decode_uint(body, pos)
            msg = body[pos : pos + n].decode()
            pos += n
            hop, pos = decode_uint(body, pos)
            size, pos = decode_uint(body, pos)
            content = body[pos : pos + size]
            pos += size
            attrs = {"via": "udp", "hop": str(hop)}
            self._trace(
                now, LAYER, "recv", msg=msg, peer=opened.sender, size=len(data), attrs=attrs
            )
            if msg in self._seen:
                continue
            self._seen.add(msg)
            self._trace(now, LAYER, "deliver", msg=msg, peer=opened.sender, attrs=attrs)
            self._enqueue(msg, hop + 1, content, now)

    def receive_stream(self, conn: int, data: bytes, now: float) -> None:
        pass

    def receive_reply(self, peer: NetID, data: bytes, now: float) -> None:
        pass

    def datagrams_to_send(self) -> list[Datagram]:
        out, self._out = self._out, []
        return out

    def streams_to_send(self) -> list[StreamSend]:
        return []

    def events_received(self) -> list[object]:
        return []

    def next_deadline(self) -> float | None:
        return self._next
