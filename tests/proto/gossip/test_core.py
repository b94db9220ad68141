"""The gossip core, step by step: broadcast, receive, forward, fixes.

Cores are wired together by ``Net``, a few lines that move datagrams and stream bytes
between cores at a given time (no simulator, no sockets), so that each test can look at
exactly what one node sent and why. Seeded simulations at scale are in
``tests/sim/test_gossip_scenario.py``.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Mapping

import pytest

from gossamer.errors import ConfigError, LocalProtocolError
from gossamer.proto.gossip import (
    Delivered,
    GossipConfig,
    GossipCore,
    MessageHandler,
    StreamSend,
    WireMode,
)
from gossamer.proto.gossip.messages import GossipPayload, decode_payload
from gossamer.trace.schema import TraceEvent
from gossamer.trace.sink import MemorySink, Tracer
from gossamer.wire import chatter as cw
from gossamer.wire import envelope
from gossamer.wire.chatter import BroadcastID, Gossip, NetID
from gossamer.wire.framing import FrameDecoder

KEY = b"a-32-byte-key-for-the-gossip-tst"
GROUP = ("224.1.1.1", 29999)


def text_handler() -> MessageHandler:
    return MessageHandler(
        name="hello",
        encode_with=lambda p, ids: str(p[1]).encode(),  # type: ignore[index]
        decode_with=lambda b, ids: ("hello", b.decode()),
    )


def nid(host: str) -> NetID:
    return NetID(host, 29999)


class Net:
    """Cores on LANs (by the third octet of their address); moves their output."""

    def __init__(
        self,
        hosts: Iterable[str],
        *,
        wire: WireMode = WireMode.SEALED,
        sink: MemorySink | None = None,
        shared: bool = False,
        **settings: object,
    ) -> None:
        self.sink = sink or MemorySink()
        self.cores: dict[NetID, GossipCore] = {}
        # ``shared``: one codec and one keyring for every core, as the simulator does.
        codec = cw.ChatterCodec() if shared else None
        keyring = None
        for i, host in enumerate(hosts):
            config = GossipConfig(
                my_addr=host,
                key=KEY if wire is WireMode.SEALED else b"k",
                wire=wire,
                **settings,  # type: ignore[arg-type]
            )
            if shared and keyring is None and wire is WireMode.SEALED:
                keyring = config.keyring()
            self.cores[config.netid] = GossipCore(
                config,
                tracer=Tracer(self.sink, run="t", node=str(config.netid)),
                rng=random.Random(i),
                handlers=[text_handler()],
                epoch=1,
                codec=codec,
                keyring=keyring,
            )
        self.dead: set[NetID] = set()
        self.conns: dict[tuple[NetID, NetID], int] = {}
        self.events: dict[NetID, list[Delivered]] = {n: [] for n in self.cores}
        self.held: list[tuple[NetID, StreamSend]] = []
        self.hold_streams = False

    @staticmethod
    def lan(netid: NetID) -> str:
        return netid.host.rsplit(".", 1)[0]

    def run(self, now: float) -> None:
        moved = True
        while moved:
            moved = False
            for src, core in self.cores.items():
                if src in self.dead:
                    core.datagrams_to_send()
                    core.streams_to_send()
                    continue
                for data, addr in core.datagrams_to_send():
                    moved = True
                    assert addr == GROUP
                    for dst, other in self.cores.items():
                        if dst != src and dst not in self.dead and self.lan(dst) == self.lan(src):
                            other.receive_datagram(data, (src.host, 29999), now, multicast=True)
                for item in core.streams_to_send():
                    moved = True
                    if self.hold_streams:
                        self.held.append((src, item))
                    else:
                        self.deliver(src, item, now)
                self.events[src] += core.events_received()

    def deliver(self, src: NetID, item: StreamSend, now: float) -> None:
        if item.peer is not None:
            if item.peer in self.dead:
                return
            conn = self.conns.setdefault((src, item.peer), len(self.conns) + 1)
            self.cores[item.peer].receive_stream(conn, item.data, now)
        else:
            ((connector, acceptor),) = [k for k, v in self.conns.items() if v == item.conn]
            assert acceptor == src
            if connector not in self.dead and item.data:
                self.cores[connector].receive_reply(src, item.data, now)

    def timers(self, now: float) -> None:
        for netid, core in self.cores.items():
            deadline = core.next_deadline()
            if netid not in self.dead and deadline is not None and deadline <= now:
                core.handle_timer(now)
        self.run(now)

    def delivered(self, payload: object) -> dict[NetID, list[Delivered]]:
        return {n: [e for e in evs if e.payload == payload] for n, evs in self.events.items()}

    def trace(self, kind: str, node: NetID | None = None) -> list[TraceEvent]:
        return [
            e
            for e in self.sink.select(layer="gossip", kind=kind)
            if node is None or e.node == str(node)
        ]

    def warm(self, rounds: int = 2, now: float = 0.0) -> None:
        """Every node announces (multicast only) ``rounds`` times: LAN peers see each other."""
        for r in range(rounds):
            for core in self.cores.values():
                core.broadcast([], ("hello", f"warm{r}"), now)
                self.run(now)


def open_tcp(data: bytes, key: bytes = KEY) -> tuple[str, GossipPayload]:
    """The sender and contents of one framed envelope that a core sent over TCP."""
    (frame,) = FrameDecoder().feed(data)
    keyring = GossipConfig(my_addr="10.0.0.1", key=key).keyring()
    opened = envelope.unseal(keyring, frame, replay=envelope.ReplayWindows())
    payload = decode_payload(opened.payload)
    assert isinstance(payload, GossipPayload)
    return opened.sender, payload


# -- broadcast: the coded steps --------------------------------------------------------------


def test_broadcast_bumps_the_seqno_and_names_the_broadcast_origin_seqno() -> None:
    net = Net(["10.0.0.1"], first_seqno=41)
    core = net.cores[nid("10.0.0.1")]
    assert core.broadcast([], ("hello", "a"), 0.0) == "10.0.0.1:29999/41"
    assert core.broadcast([nid("10.0.0.1")], ("hello", "b"), 0.0) == "10.0.0.1:29999/42"
    events = net.trace("broadcast")
    assert [(e.msg, e.seq) for e in events] == [
        ("10.0.0.1:29999/41", 41),
        ("10.0.0.1:29999/42", 42),
    ]
    assert events[1].attrs["dests"] == ""  # ourselves is never a destination
    with pytest.raises(LocalProtocolError):
        core.broadcast([], ("unregistered", 1), 0.0)
    with pytest.raises(ConfigError):
        core.broadcast(["nonsense"], ("hello", "c"), 0.0)


def test_multicast_goes_first_then_tcp_and_everyone_gets_it_once() -> None:
    net = Net(["10.0.0.1", "10.0.0.2", "10.0.1.1", "10.0.1.2", "10.0.2.1"])
    origin = nid("10.0.0.1")
    net.warm()
    msg = net.cores[origin].broadcast(list(net.cores), ("hello", "x"), 1.0)
    sends = [e for e in net.trace("send", origin) if e.msg == msg]
    assert sends[0].attrs["via"] == "multicast"
    assert sends[0].peer == "224.1.1.1:29999"
    assert {e.attrs["via"] for e in sends[1:]} == {"tcp"}
    net.run(1.0)
    got = net.delivered(("hello", "x"))
    assert not got[origin]  # the origin does not deliver its own broadcast
    assert all(len(events) == 1 for n, events in got.items() if n != origin)
    assert got[nid("10.0.0.2")][0].via == "multicast"  # its LAN peer: by multicast
    assert got[nid("10.0.0.2")][0].hop == 1


@pytest.mark.parametrize("wire", [WireMode.SEALED, WireMode.ORIGINAL])
def test_cores_sharing_one_codec_and_keyring_do_what_cores_with_their_own_do(
    wire: WireMode,
) -> None:
    hosts = [f"10.0.{lan}.{i}" for lan in range(3) for i in range(1, 5)]
    runs = []
    for shared in (False, True):
        net = Net(hosts, wire=wire, shared=shared)
        net.warm()
        for k, origin in enumerate(hosts[::5]):
            net.cores[nid(origin)].broadcast(list(net.cores), ("hello", f"m{k}"), 1.0 + k)
            net.run(1.0 + k)
        delivered = [
            (node, e.msg, e.payload, e.sender, e.hop, e.via)
            for node, events in net.events.items()
            for e in events
        ]
        runs.append((net.sink.events, delivered))
    assert runs[0] == runs[1]
    assert len([d for d in runs[1][1] if d[2] == ("hello", "m0")]) == len(hosts) - 1


def test_peers_that_saw_us_on_multicast_leave_the_tcp_list() -> None:
    net = Net(["10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.1.1"])
    origin = nid("10.0.0.1")
    net.warm()  # 10.0.0.2 and .3 have now reported seeing the origin
    assert net.cores[origin].peers_db.seen_us(1.0) == {
        nid("10.0.0.2").packed,
        nid("10.0.0.3").packed,
    }
    net.cores[origin].broadcast(list(net.cores), ("hello", "y"), 1.0)
    tcp = [s for s in net.cores[origin].streams_to_send() if s.peer is not None]
    heads = {s.peer for s in tcp}
    listed = {n for s in tcp for n in open_tcp(s.data)[1].gossip.distribution}
    assert heads | listed == {nid("10.0.1.1")}


def test_without_a_multicast_nobody_is_removed_from_the_tcp_list() -> None:
    net = Net(["10.0.0.1", "10.0.0.2", "10.0.0.3"], max_multicast_size=64)
    origin = nid("10.0.0.1")
    core = net.cores[origin]
    core.peers_db.reported_seen(nid("10.0.0.2"), [BroadcastID(origin, 1)], 0.0)
    core.broadcast(list(net.cores), ("hello", "too big for 64 bytes " * 3), 1.0)
    assert core.datagrams_to_send() == []  # does not fit: not sent
    tcp = [s for s in core.streams_to_send() if s.peer is not None]
    reached = {s.peer for s in tcp} | {
        n for s in tcp for n in open_tcp(s.data)[1].gossip.distribution
    }
    assert reached == {nid("10.0.0.2"), nid("10.0.0.3")}
    assert core.counters.multicast_skipped == 1


def test_messages_carry_the_seen_list_and_at_most_four_others_from_distinct_groups() -> None:
    hosts = ["10.0.0.1", "10.0.0.2", "10.0.0.3"] + [f"10.0.{s}.1" for s in range(1, 8)]
    net = Net(hosts)
    origin = nid("10.0.0.1")
    core = net.cores[origin]
    net.warm()
    core.peers_db.add([nid(h) for h in hosts], 1.0)
    core.broadcast([nid("10.0.5.1")], ("hello", "z"), 1.0)
    ((data, _),) = core.datagrams_to_send()
    keyring = core.config.keyring()
    opened = envelope.unseal(keyring, data, replay=envelope.ReplayWindows())
    payload = decode_payload(opened.payload)
    assert isinstance(payload, GossipPayload)
    gossip = payload.gossip
    assert gossip.current == BroadcastID(origin, 3)  # two announcements, then this one
    assert {b.origin for b in gossip.seen} == {nid("10.0.0.2"), nid("10.0.0.3")}
    assert 1 <= len(gossip.others) <= 4
    domains = {core.peers_db.domain(n) for n in gossip.others}
    assert len(domains) == len(gossip.others)  # one per multicast group
    assert gossip.distribution == (nid("10.0.5.1"),)  # to learn from, never to forward


def test_groups_are_split_into_floor_log2_plus_one_chunks() -> None:
    # The origin knows 11 groups: its LAN (whose peers saw it, so they are removed) and ten
    # remote subnets of three, each known from a hint that grouped it.
    origin = nid("10.0.0.1")
    net = Net(["10.0.0.1"])
    core = net.cores[origin]
    remote = [[nid(f"10.0.{s}.{i}") for i in range(1, 4)] for s in range(1, 11)]
    core.peers_db.link(remote, 0.0)
    core.broadcast([n for g in remote for n in g], ("hello", "g"), 1.0)
    tcp = [s for s in core.streams_to_send() if s.peer is not None]
    assert len(tcp) == math.floor(math.log2(10)) + 1
    sizes = []
    for item in tcp:
        sender, payload = open_tcp(item.data)
        assert sender == str(origin) and payload.hop == 1
        chunk = {item.peer, *payload.gossip.distribution}
        subnets = {n.host.rsplit(".", 1)[0] for n in chunk}
        assert all(n in chunk for g in remote for n in g if n.host.rsplit(".", 1)[0] in subnets)
        sizes.append(len(subnets))
        if payload.groups:  # the receiver is told how the sender grouped its list
            assert sum(payload.groups) == len(payload.gossip.distribution)
    assert sorted(sizes, reverse=True) == [5, 3, 1, 1]


# -- receive ------------------------------------------------------------------------------


def test_tcp_receivers_ack_deliver_and_forward_with_the_next_hop_count() -> None:
    hosts = [f"10.0.{i}.1" for i in range(8)]
    net = Net(hosts, multicast=False)
    origin = nid(hosts[0])
    net.cores[origin].broadcast([nid(h) for h in hosts], ("hello", "t"), 0.0)
    net.run(0.0)
    got = net.delivered(("hello", "t"))
    assert all(len(got[nid(h)]) == 1 for h in hosts[1:])
    hops = sorted(got[nid(h)][0].hop or 0 for h in hosts[1:])
    assert max(hops) == math.ceil(math.log2(8))  # log depth
    assert sum(core.counters.acks_sent for core in net.cores.values()) == 7
    assert all(core.pending_hops == 0 for core in net.cores.values())  # every hop acked
    assert all(e.attrs["via"] == "tcp" for e in net.trace("recv"))
    assert len(net.trace("send")) == 7  # N - 1 TCP messages, no loop
    # The originator's BroadcastID travels end to end: every hop names it the same.
    assert {e.msg for e in net.trace("recv")} == {"10.0.0.1:29999/1"}
    assert {e.peer for e in net.trace("recv")} != {str(origin)}  # though hops relayed it


def test_multicast_receivers_deliver_and_never_forward() -> None:
    net = Net(["10.0.0.1", "10.0.0.2", "10.0.0.3"])
    net.warm()
    receiver = net.cores[nid("10.0.0.2")]
    sent_before = receiver.counters.tcp_sent + receiver.counters.multicast_sent
    net.cores[nid("10.0.0.1")].broadcast(list(net.cores), ("hello", "m"), 1.0)
    net.run(1.0)
    assert len(net.delivered(("hello", "m"))[nid("10.0.0.2")]) == 1
    assert receiver.counters.tcp_sent + receiver.counters.multicast_sent == sent_before


def test_multicast_copies_follow_after_a_spacing_and_are_dropped_as_replays() -> None:
    net = Net(["10.0.0.1", "10.0.0.2"], multicast_copies=3, multicast_spacing=0.01)
    a, b = net.cores[nid("10.0.0.1")], net.cores[nid("10.0.0.2")]
    a.broadcast([], ("hello", "twice"), 1.0)
    (first,) = a.datagrams_to_send()
    assert a.next_deadline() == pytest.approx(1.01)
    a.handle_timer(1.01)
    (second,) = a.datagrams_to_send()
    a.handle_timer(1.02)
    (third,) = a.datagrams_to_send()
    assert first == second == third
    assert a.next_deadline() is None
    for data, _ in (first, second, third):
        b.receive_datagram(data, ("10.0.0.1", 29999), 1.03, multicast=True)
    assert len(b.events_received()) == 1
    (send,) = [e for e in net.trace("send") if e.msg == "10.0.0.1:29999/1"]
    assert send.attrs["copies"] == "3"
    defaults = Net(["10.0.0.3"]), Net(["10.0.0.3"], wire=WireMode.ORIGINAL)
    assert [next(iter(n.cores.values())).copies for n in defaults] == [2, 1]


def test_a_broadcast_reaching_a_node_twice_is_delivered_once() -> None:
    net = Net(["10.0.0.1", "10.0.0.2"])
    origin, other = nid("10.0.0.1"), nid("10.0.0.2")
    # Before any announcement the origin does not know it is heard: multicast and TCP.
    net.cores[origin].broadcast([other], ("hello", "d"), 0.0)
    net.run(0.0)
    assert [e.via for e in net.delivered(("hello", "d"))[other]] == ["multicast"]
    assert net.cores[other].counters.duplicates == 1
    assert len(net.trace("recv", other)) == 2
    assert len(net.trace("deliver", other)) == 1


def test_tcp_messages_coalesced_or_split_across_reads_all_arrive() -> None:
    hosts = ["10.0.0.1", "10.0.1.1"]
    net = Net(hosts, multicast=False)
    src, dst = nid(hosts[0]), nid(hosts[1])
    net.hold_streams = True
    for i in range(3):
        net.cores[src].broadcast([dst], ("hello", f"c{i}"), 0.0)
    net.run(0.0)
    stream = b"".join(item.data for _, item in net.held)
    net.held.clear()
    receiver = net.cores[dst]
    receiver.receive_stream(7, stream[:5], 0.0)  # split inside the first frame's header
    receiver.receive_stream(7, stream[5:-3], 0.0)  # the rest coalesced, minus 3 bytes
    receiver.receive_stream(7, stream[-3:], 0.0)
    net.events[dst] += receiver.events_received()
    assert [e.payload for e in net.events[dst]] == [("hello", f"c{i}") for i in range(3)]
    assert len([s for s in receiver.streams_to_send() if s.conn == 7]) == 3  # three ACKs


def test_garbage_on_a_stream_closes_that_connection() -> None:
    net = Net(["10.0.0.1"])
    core = net.cores[nid("10.0.0.1")]
    core.receive_stream(3, b"\xff\xff\xff\xff" + b"x" * 10, 0.0)
    (item,) = core.streams_to_send()
    assert item.conn == 3 and item.close
    assert "framing" in net.trace("drop")[0].attrs["reason"]


# -- fixes -------------------------------------------------------------------------------


def test_a_dead_next_hop_has_its_chunk_replanned_through_another_member() -> None:
    hosts = [f"10.0.{i}.1" for i in range(6)]
    net = Net(hosts, multicast=False, ack_timeout=0.5)
    origin = nid(hosts[0])
    net.cores[origin].broadcast([nid(h) for h in hosts[1:]], ("hello", "r"), 0.0)
    tcp = [s for s in net.cores[origin].streams_to_send() if s.peer is not None]
    big = max(tcp, key=lambda s: len(open_tcp(s.data)[1].gossip.distribution))
    assert big.peer is not None
    net.dead.add(big.peer)  # the head of the largest chunk is dead
    for item in tcp:
        net.deliver(origin, item, 0.0)
    net.run(0.0)
    assert net.cores[origin].next_deadline() == pytest.approx(0.5)
    net.timers(0.6)
    got = net.delivered(("hello", "r"))
    alive = [nid(h) for h in hosts[1:] if nid(h) != big.peer]
    assert all(len(got[n]) == 1 for n in alive)  # the dead node cut nobody off
    (replan,) = net.trace("replan")
    assert replan.peer == str(big.peer) and replan.attrs["reason"] == "timeout"
    assert net.cores[origin].peers_db.is_suspect(big.peer, 1.0)
    # Next time the suspect is not chosen as a next hop while others remain.
    net.cores[origin].broadcast([nid(h) for h in hosts[1:]], ("hello", "r2"), 2.0)
    heads = {s.peer for s in net.cores[origin].streams_to_send() if s.peer is not None}
    assert big.peer not in heads


def test_a_stream_failure_replans_at_once_and_a_late_ack_is_counted() -> None:
    hosts = ["10.0.0.1", "10.0.1.1", "10.0.2.1", "10.0.3.1"]
    net = Net(hosts, multicast=False)
    origin = nid(hosts[0])
    core = net.cores[origin]
    core.broadcast([nid(h) for h in hosts[1:]], ("hello", "f"), 0.0)
    sent = [s for s in core.streams_to_send() if s.peer is not None]
    (first,) = [s for s in sent if open_tcp(s.data)[1].gossip.distribution]
    assert first.peer is not None
    (rest,) = open_tcp(first.data)[1].gossip.distribution
    core.stream_failed(first.peer, 0.1)
    (second,) = [s for s in core.streams_to_send() if s.peer is not None]
    assert second.peer == rest  # the chunk went to its other member, at once
    assert open_tcp(second.data)[1].gossip.distribution == ()
    assert core.counters.replanned == 1
    (replan,) = net.trace("replan")
    assert replan.attrs == {"reason": "stream_failed", "next": str(rest)}
    # The first hop was alive after all and answers late: counted, nothing re-sent.
    net.deliver(origin, first, 0.2)
    net.run(0.2)
    assert core.counters.late_acks == 1
    assert core.counters.replanned == 1


def test_unicast_datagrams_are_delivered_but_are_not_multicast_sightings() -> None:
    net = Net(["10.0.0.1", "10.0.0.2"])
    a, b = net.cores[nid("10.0.0.1")], net.cores[nid("10.0.0.2")]
    a.broadcast([], ("hello", "u"), 0.0)
    ((data, _),) = a.datagrams_to_send()
    b.receive_datagram(data, ("10.0.0.1", 29999), 0.0, multicast=False)
    assert [e.via for e in b.events_received()] == ["unicast"]
    assert b.peers_db.seen_list(0.0) == []  # not a sighting
    a.broadcast([], ("hello", "u2"), 0.0)
    ((data, _),) = a.datagrams_to_send()
    b.receive_datagram(data, ("10.0.0.1", 29999), 0.0, multicast=True)
    assert [s.origin for s in b.peers_db.seen_list(0.0)] == [nid("10.0.0.1")]


def test_a_multicast_whose_source_is_not_its_sender_is_dropped() -> None:
    net = Net(["10.0.0.1", "10.0.0.2"])
    a, b = net.cores[nid("10.0.0.1")], net.cores[nid("10.0.0.2")]
    a.broadcast([], ("hello", "s"), 0.0)
    ((data, _),) = a.datagrams_to_send()
    b.receive_datagram(data, ("10.0.0.66", 29999), 0.0, multicast=True)
    assert b.events_received() == []
    assert "source" in net.trace("drop", nid("10.0.0.2"))[0].attrs["reason"]


def test_compat_multicast_stays_within_8192_bytes_and_larger_payloads_go_by_tcp() -> None:
    net = Net(["10.0.0.1", "10.0.0.2"], wire=WireMode.ORIGINAL)
    origin, peer = nid("10.0.0.1"), nid("10.0.0.2")
    net.warm()
    core = net.cores[origin]
    small = ("hello", "s" * 1000)
    core.broadcast([peer], small, 1.0)
    datagrams = core.datagrams_to_send()
    assert len(datagrams) == 1 and len(datagrams[0][0]) <= 8192
    assert [s for s in core.streams_to_send() if s.peer is not None] == []  # peer saw us
    large = ("hello", bytes(random.Random(1).randbytes(6000)).hex())  # 12 kB, incompressible
    core.broadcast([peer], large, 2.0)
    assert core.datagrams_to_send() == []
    (tcp,) = [s for s in core.streams_to_send() if s.peer is not None]
    assert tcp.peer == peer and len(tcp.data) > 8192
    net.deliver(origin, tcp, 2.0)
    net.run(2.0)
    assert [e.payload for e in net.delivered(large)[peer]] == [large]


def test_an_unknown_payload_type_is_dropped_unacknowledged() -> None:
    net = Net(["10.0.0.1", "10.0.1.1"], multicast=False)
    a, b = net.cores[nid("10.0.0.1")], net.cores[nid("10.0.1.1")]
    b.handlers.remove("hello")
    a.broadcast([nid("10.0.1.1")], ("hello", "?"), 0.0)
    net.run(0.0)
    assert b.events_received() == []
    assert "no handler registered for payload type tag" in net.trace("drop")[0].attrs["reason"]
    assert a.pending_hops == 1  # no ACK: the sender will re-plan


def test_wrong_keys_forgeries_and_replays_are_dropped() -> None:
    net = Net(["10.0.0.1", "10.0.0.2"])
    a, b = net.cores[nid("10.0.0.1")], net.cores[nid("10.0.0.2")]
    source = ("10.0.0.1", 29999)
    a.broadcast([], ("hello", "k"), 0.0)
    ((data, _),) = a.datagrams_to_send()
    b.receive_datagram(data, source, 0.0, multicast=True)
    b.receive_datagram(data, source, 0.0, multicast=True)  # replayed
    a.broadcast([], ("hello", "k1"), 0.0)
    ((fresh, _),) = a.datagrams_to_send()
    forged = fresh[:-1] + bytes([fresh[-1] ^ 1])  # one bit flipped in a new message
    b.receive_datagram(forged, source, 0.0, multicast=True)
    # The same sender id under another key (a newer session, so it is authenticated).
    other_key = GossipCore(
        GossipConfig(my_addr="10.0.0.1", key=b"another-32-byte-key-for-gossip!!"),
        tracer=Tracer(MemorySink(), run="t", node="x"),
        rng=random.Random(0),
        handlers=[text_handler()],
        epoch=5,
    )
    other_key.broadcast([], ("hello", "k2"), 0.0)
    ((alien, _),) = other_key.datagrams_to_send()
    b.receive_datagram(alien, source, 0.0, multicast=True)
    assert [e.payload for e in b.events_received()] == [("hello", "k")]
    assert b.counters.duplicate_datagrams == 1  # the replay: counted, not traced
    reasons = [e.attrs["reason"] for e in net.trace("drop", nid("10.0.0.2"))]
    assert reasons == ["envelope rejected: forged", "envelope rejected: forged"]


def test_compat_mode_speaks_chatter_bytes_and_forwarders_reoriginate() -> None:
    hosts = ["10.0.0.1", "10.0.1.1", "10.0.2.1", "10.0.3.1"]
    net = Net(hosts, wire=WireMode.ORIGINAL, multicast=False)
    origin = nid(hosts[0])
    net.hold_streams = True
    net.cores[origin].broadcast([nid(h) for h in hosts[1:]], ("hello", "c"), 0.0)
    net.run(0.0)
    key = net.cores[origin].config.chatter_key()
    first = [item for src, item in net.held if src == origin]
    assert first
    for item in first:
        gossip = cw.decode_message(item.data, key)  # exactly Chatter's format
        assert gossip.current == BroadcastID(origin, 1)
        assert gossip.type_tag == cw.type_tag("hello") and gossip.content == b"c"
    held, net.held = net.held, []
    for src, item in held:
        net.deliver(src, item, 0.0)
    net.run(0.0)
    forwarded = [(src, item) for src, item in net.held if item.peer is not None]
    assert forwarded  # the chunk of 2 was forwarded by its head
    for src, item in forwarded:
        gossip = cw.decode_message(item.data, key)
        assert gossip.current.origin == src != origin  # Chatter semantics: the last hop
    for src, item in net.held:
        net.deliver(src, item, 0.0)
    net.hold_streams = False
    net.run(0.0)
    got = net.delivered(("hello", "c"))
    assert all(len(got[nid(h)]) == 1 for h in hosts[1:])
    msgs = {e.msg for h in hosts[1:] for e in got[nid(h)]}
    assert len(msgs) == 1 and next(iter(msgs)).startswith("chatter:")
    assert {e.msg for e in net.trace("broadcast")} == msgs  # one name at every node
    assert all(e.hop is None for h in hosts[1:] for e in got[nid(h)])
    assert sum(c.counters.acks_sent for c in net.cores.values()) == 0  # Chatter sends none


def test_the_peer_database_is_populated_as_the_faq_says() -> None:
    hosts = ["10.0.0.1", "10.0.1.1", "10.0.2.1", "10.0.3.1"]
    net = Net(hosts, multicast=False)
    origin = nid(hosts[0])
    core = net.cores[origin]
    core.peers_db.heard_on_multicast(nid("10.0.0.9"), 4, 0.0)  # goes out in its seen list
    core.peers_db.add([nid(f"10.0.{s}.7") for s in range(4, 9)], 0.0)  # "other id" candidates
    core.broadcast([nid(h) for h in hosts[1:]], ("hello", "p"), 0.0)
    sent = [s for s in core.streams_to_send() if s.peer is not None]
    assert {p.netid for p in core.peers(0.0)} >= {nid(h) for h in hosts[1:]}  # destinations
    (item,) = [s for s in sent if open_tcp(s.data)[1].gossip.distribution]
    gossip = open_tcp(item.data)[1].gossip
    assert gossip.others and gossip.seen
    assert item.peer is not None
    receiver = net.cores[item.peer]
    net.deliver(origin, item, 0.0)
    known = {p.netid for p in receiver.peers(0.0)}
    assert origin in known  # the sender
    assert {b.origin for b in gossip.seen} <= known  # its seen list
    assert set(gossip.others) <= known  # the other ids
    assert set(gossip.distribution) <= known  # the distribution list


def test_state_stays_bounded_over_many_broadcasts() -> None:
    hosts = [f"10.0.{i}.1" for i in range(5)]
    net = Net(hosts, multicast=False, dedupe_window=16, max_origins=2)
    for k in range(60):
        origin = nid(hosts[k % 5])
        net.cores[origin].broadcast([nid(h) for h in hosts], ("hello", f"b{k}"), float(k))
        net.run(float(k))
    for core in net.cores.values():
        assert core.pending_hops == 0
        assert len(core._window) <= 2
        assert len(core.peers_db) == 4
    per_node = {n: len(evs) for n, evs in net.events.items()}
    assert set(per_node.values()) == {48}  # 60 broadcasts, 12 of them each node's own


def test_delivered_events_say_what_arrived_and_how() -> None:
    net = Net(["10.0.0.1", "10.0.1.1"], multicast=False)
    net.cores[nid("10.0.0.1")].broadcast([nid("10.0.1.1")], ("hello", "e"), 0.0)
    net.run(0.0)
    (event,) = net.events[nid("10.0.1.1")]
    assert event.msg == "10.0.0.1:29999/1"
    assert (event.origin, event.seqno, event.sender) == (nid("10.0.0.1"), 1, nid("10.0.0.1"))
    assert (event.via, event.hop, event.handler.name) == ("tcp", 1, "hello")
    (deliver,) = net.trace("deliver")
    assert deliver.msg == event.msg and deliver.attrs == {"via": "tcp", "hop": "1", "type": "hello"}


def test_handlers_with_netids_are_encoded_against_each_messages_table() -> None:
    def encode(p: object, ids: Mapping[NetID, int]) -> bytes:
        assert isinstance(p, tuple)
        return bytes([ids[p[1]]])

    handler = MessageHandler(
        name="pointer",
        encode_with=encode,
        decode_with=lambda b, table: ("pointer", table[b[0]]),
        extract_netids=lambda p: [p[1]] if isinstance(p, tuple) else [],
    )
    net = Net(["10.0.0.1", "10.0.1.1", "10.0.2.1", "10.0.3.1"], multicast=False)
    for core in net.cores.values():
        core.register(handler)
    payload = ("pointer", NetID("1.2.3.4", 1))
    net.cores[nid("10.0.0.1")].broadcast(list(net.cores), payload, 0.0)
    net.run(0.0)
    got = net.delivered(payload)
    assert all(len(got[n]) == 1 for n in net.cores if n != nid("10.0.0.1"))


def test_gossip_structure_is_inside_the_envelope_payload() -> None:
    net = Net(["10.0.0.1"])
    core = net.cores[nid("10.0.0.1")]
    core.broadcast([], ("hello", "inside"), 0.0)
    ((data, _),) = core.datagrams_to_send()
    assert data[0] == envelope.VERSION  # not Chatter's 0xFF
    opened = envelope.unseal(core.config.keyring(), data, replay=envelope.ReplayWindows())
    assert opened.sender == "10.0.0.1:29999"
    payload = decode_payload(opened.payload)
    assert isinstance(payload, GossipPayload)
    assert isinstance(payload.gossip, Gossip) and payload.gossip.content == b"inside"
