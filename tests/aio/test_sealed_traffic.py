"""With default settings nothing on the wire can be read or forged without the key.

Real nodes of every protocol run sealed (the default) on 127.0.0.1: an ISIS group of
three, two discovery nodes, two gossip nodes over TCP, links over TCP and over UDP. A
packet socket on ``lo`` records every datagram and TCP segment between them while they
exchange messages that carry known secrets. Then the test plays the attacker who has the
capture and no key:

- **read**: no secret appears in any captured payload, nor the original wire's plaintext
  of the ISIS messages, nor Prototari's ASCII;
- **replay**: every captured datagram is sent again to where it went; every captured TCP
  stream toward a link node is replayed on a new connection;
- **forge**: every captured datagram with one bit flipped, and the original programs'
  plaintext messages, are sent to every node.

Nothing of it is delivered or accepted: every node's deliveries are unchanged, and every
attack is counted as refused by the envelope. Needs ``CAP_NET_RAW`` to capture (root:
CI); elsewhere it skips with the reason, and fails under ``CI=true``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import socket
import struct
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from gossamer.aio import link
from gossamer.aio import loop as aio_loop
from gossamer.aio.discovery import Discovery, DiscoveryConfig, open_discovery
from gossamer.aio.gossip import Gossip, open_gossip
from gossamer.aio.isis import IsisService, open_isis
from gossamer.aio.sockets import udp_socket
from gossamer.proto.gossip import GossipConfig, text_handler
from gossamer.proto.isis import Delivered, IsisConfig, members_from
from gossamer.testing import sealed_wire
from gossamer.trace import MemorySink, Tracer
from gossamer.wire import isis as isis_wire

LOCALHOST = "127.0.0.1"
ETH_P_ALL = 0x0003
PACKET_OUTGOING = 4
ISIS_SECRET = b"isis-secret-job"  # ISIS carries bytes (the original wire: a uint32)
ORIGINAL_SECRET = 0x5EC73E71  # the original wire carries one uint32 per message
SECRETS = [ISIS_SECRET, b"gossip-secret-text", b"link-secret-payload"]


@dataclass
class Packet:
    proto: str  # "udp" or "tcp"
    src: tuple[str, int]
    dst: tuple[str, int]
    payload: bytes


@dataclass
class Capture:
    """Everything seen on ``lo`` while it runs (each packet once: incoming copies)."""

    sock: socket.socket
    packets: list[Packet] = field(default_factory=list)
    running: bool = True

    def run(self) -> None:
        self.sock.settimeout(0.1)
        while self.running:
            try:
                frame, addr = self.sock.recvfrom(65_600)
            except TimeoutError:
                continue
            if addr[2] == PACKET_OUTGOING:
                continue
            packet = _parse(frame[14:])  # loopback frames carry a zeroed Ethernet header
            if packet is not None:
                self.packets.append(packet)


def _parse(ip: bytes) -> Packet | None:
    if len(ip) < 20 or ip[0] >> 4 != 4:
        return None
    header = (ip[0] & 0x0F) * 4
    proto = ip[9]
    src, dst = socket.inet_ntoa(ip[12:16]), socket.inet_ntoa(ip[16:20])
    body = ip[header:]
    if proto == 17 and len(body) >= 8:
        sport, dport = struct.unpack(">HH", body[:4])
        return Packet("udp", (src, sport), (dst, dport), body[8:])
    if proto == 6 and len(body) >= 20:
        sport, dport = struct.unpack(">HH", body[:4])
        offset = (body[12] >> 4) * 4
        return Packet("tcp", (src, sport), (dst, dport), body[offset:])
    return None


@pytest.fixture
def capture() -> Iterator[Capture]:
    try:
        sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    except PermissionError as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true, but packets cannot be captured: {exc}", pytrace=False)
        pytest.skip(f"capturing packets needs CAP_NET_RAW: {exc}")
    sock.bind(("lo", 0))
    cap = Capture(sock)
    thread = threading.Thread(target=cap.run, daemon=True)
    thread.start()
    yield cap
    cap.running = False
    thread.join(timeout=5)
    sock.close()


@dataclass
class Nodes:
    isis: list[IsisService]
    discovery: list[Discovery]
    gossip: list[Gossip]
    links: list[link.Node]
    isis_delivered: list[int]
    gossip_delivered: list[int]
    link_received: list[int]
    sink: MemorySink

    @property
    def udp_ports(self) -> set[int]:
        ports = {s.address[1] for s in self.isis}
        for node in self.discovery:
            ports |= {node.address[1], node.config.listen_port or 0}
        return ports | {n.address[1] for n in self.links if n.transport.value == "udp"}

    @property
    def tcp_ports(self) -> set[int]:
        ports = {g.netid.port for g in self.gossip}
        return ports | {n.address[1] for n in self.links if n.transport.value == "tcp"}

    def delivered(self) -> tuple[int, int, int, int]:
        data = sum(n.core.counters.data_received for n in self.discovery)
        return (sum(self.isis_delivered), sum(self.gossip_delivered),
                sum(self.link_received), data)  # fmt: skip


async def start_nodes() -> Nodes:
    wire = sealed_wire()
    sink = MemorySink()
    # ISIS: three members.
    socks = [udp_socket(LOCALHOST, 0) for _ in range(3)]
    members = members_from([(f"m{i}", s.getsockname()) for i, s in enumerate(socks, 1)])
    isis_delivered = [0]

    def on_isis(event: object) -> None:
        if isinstance(event, Delivered):
            isis_delivered[0] += 1

    isis = [
        await open_isis(
            IsisConfig(me=m.id, members=members), sock=sock, wire=wire, on_event=on_isis,
            snapshots=False, tracer=Tracer(sink, run="t", node=m.name),
        )
        for m, sock in zip(members, socks, strict=True)
    ]
    # Discovery: two nodes whose "broadcasts" reach each other by unicast.
    ports = [udp_socket(LOCALHOST, 0) for _ in range(4)]
    numbers = [s.getsockname()[1] for s in ports]
    for s in ports:
        s.close()
    timers = {"broadcast_interval": 0.2, "inactive_time": 5.0, "heartbeat_wait": 0.5}
    discovery = [
        await open_discovery(DiscoveryConfig(address=LOCALHOST, port=numbers[i],
                                             broadcast_address=LOCALHOST,
                                             broadcast_port=numbers[3 - i],
                                             listen_port=numbers[2 + i], **timers), wire=wire)
        for i in (0, 1)
    ]  # fmt: skip
    # Gossip: two nodes over TCP; a handler's dispatch counts the deliveries.
    gossip_delivered = [0]
    counting = dataclasses.replace(
        text_handler(), dispatch=lambda _p: gossip_delivered.__setitem__(0, gossip_delivered[0] + 1)
    )
    gossip = [
        await open_gossip(GossipConfig(my_addr=LOCALHOST, my_port=0, multicast=False), wire=wire,
                          handlers=[counting], tracer=Tracer(sink, run="t", node=f"g{i}"))
        for i in (0, 1)
    ]  # fmt: skip
    # Links: PUSH/PULL over TCP and over UDP.
    links = [await link.open_node(wire=wire, transport=t) for t in ("tcp", "tcp", "udp", "udp")]
    return Nodes(isis, discovery, gossip, links, isis_delivered, gossip_delivered, [0], sink)


async def exchange(nodes: Nodes) -> None:
    """Real traffic carrying the secrets, until every part of it was delivered."""
    async with asyncio.timeout(20):
        while not all(n.peers() for n in nodes.discovery):
            await asyncio.sleep(0.05)
    peer = nodes.discovery[1].address
    await nodes.discovery[0].send(SECRETS[1] + b"/discovery", to=peer)
    for service in nodes.isis:
        await service.send(ISIS_SECRET)
    await nodes.gossip[0].send(("text", SECRETS[1].decode()), to=nodes.gossip[1].netid)
    for pull_node, push_node in (nodes.links[0:2], nodes.links[2:4]):
        pull = pull_node.socket("pull", tag="jobs", capacity=10)
        push = push_node.socket("push", tag="feeder")
        await push.link(pull_node.address, "jobs", timeout=10)
        for _ in range(3):
            await push.send(SECRETS[2])
        for _ in range(3):
            message = await pull.receive()
            assert isinstance(message, link.Message) and message.data == SECRETS[2]
            nodes.link_received[0] += 1
    async with asyncio.timeout(20):
        while nodes.isis_delivered[0] < 9 or nodes.gossip_delivered[0] < 1 or not sum(
            n.core.counters.data_received for n in nodes.discovery
        ):
            await asyncio.sleep(0.05)
    await asyncio.sleep(0.5)  # let acknowledgements finish


def refused(nodes: Nodes) -> int:
    total = sum(s.rejected.total() for s in nodes.isis)
    total += sum(n.rejected.total() for n in nodes.discovery)
    total += sum(n.rejected.total() for n in nodes.links)
    # Gossip opens each TCP message on its own: a replay is counted, a forgery traced.
    total += sum(g.core.counters.duplicate_datagrams for g in nodes.gossip)
    total += sum(
        e.kind == "drop" and e.layer == "gossip" and e.attrs["reason"].startswith("envelope")
        for e in nodes.sink.events
    )
    return total


def attack_datagrams(packets: list[Packet], ports: set[int]) -> list[tuple[bytes, tuple[str, int]]]:
    udp = [p for p in packets if p.proto == "udp" and p.dst[1] in ports]
    attacks = [(p.payload, p.dst) for p in udp]  # replays
    for p in udp:
        flipped = bytearray(p.payload)
        flipped[len(flipped) // 2] ^= 0x01
        attacks.append((bytes(flipped), p.dst))  # forgeries
    plain = [isis_wire.encode(isis_wire.DataMessage(sender=1, msg_id=99, data=bytes(4))),
             b"pelotari?", b"aupa!", b"dale!", b"hor?"]  # fmt: skip
    for port in sorted(ports):
        attacks += [(data, (LOCALHOST, port)) for data in plain]
    return attacks


def test_nothing_can_be_read_or_forged_without_the_key(capture: Capture) -> None:
    async def main() -> None:
        nodes = await start_nodes()
        try:
            await exchange(nodes)
            ports = nodes.udp_ports | nodes.tcp_ports
            seen = [p for p in capture.packets if p.dst[1] in ports or p.src[1] in ports]
            assert {p.proto for p in seen} == {"udp", "tcp"}
            assert len(seen) > 50
            # Read: nothing of the secrets or of the original wires' plaintext is visible.
            visible = [SECRETS[0], SECRETS[1], SECRETS[2], b"pelotari?", b"hemen nago!",
                       isis_wire.encode(isis_wire.DataMessage(sender=1, msg_id=1,
                                                              data=ISIS_SECRET))[4:16]]  # fmt: skip
            for packet in seen:
                for text in visible:
                    assert text not in packet.payload, (packet.proto, packet.dst, text)

            before, refused_before = nodes.delivered(), refused(nodes)
            # Replay and forge every captured datagram, and send the original plaintext.
            attacks = attack_datagrams(seen, nodes.udp_ports)
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as attacker:
                for data, dst in attacks:
                    attacker.sendto(data, dst)
                    await asyncio.sleep(0)
            # Replay every captured TCP stream toward a node on a new connection.
            streams: dict[tuple[tuple[str, int], tuple[str, int]], bytes] = {}
            for p in seen:
                if p.proto == "tcp" and p.dst[1] in nodes.tcp_ports and p.payload:
                    streams[(p.src, p.dst)] = streams.get((p.src, p.dst), b"") + p.payload
            link_ports = {n.address[1] for n in nodes.links}
            assert {dst[1] for _, dst in streams} & link_ports
            for (_src, dst), data in streams.items():
                reader, writer = await asyncio.open_connection(*dst)
                writer.write(data)
                await writer.drain()
                if dst[1] in link_ports:  # a refused record ends a link connection
                    assert await asyncio.wait_for(reader.read(), 5) == b""
                else:
                    await asyncio.sleep(0.2)
                writer.close()
                await writer.wait_closed()
            await asyncio.sleep(1.0)
            assert nodes.delivered() == before, "an attack was delivered"
            # Every datagram and every replayed stream was refused and counted.
            assert refused(nodes) - refused_before >= len(attacks) + len(streams)
            kinds = sum((s.rejected for s in nodes.isis), start=nodes.links[0].rejected)
            assert kinds["duplicate"] > 0 and (kinds["forged"] + kinds["malformed"]) > 0
        finally:
            for service in nodes.isis:
                await service.close()
            for node in nodes.discovery:
                node.abort()
            for gossip in nodes.gossip:
                await gossip.close()
            for n in nodes.links:
                await n.close(timeout=0.2)

    aio_loop.run(main())


def test_the_capture_sees_plaintext_on_the_original_wire(capture: Capture) -> None:
    """The control: the same capture reads the original wire (so the test above can fail).
    A member is its IP there: three loopback addresses."""
    socks = [udp_socket(f"127.0.0.{i}", 0) for i in (1, 2, 3)]
    members = members_from([(f"m{i}", s.getsockname()) for i, s in enumerate(socks, 1)])

    async def main() -> None:
        from gossamer.wire.mode import Wire, WireMode

        original = Wire(mode=WireMode.ORIGINAL)
        services = [
            await open_isis(
                IsisConfig(me=m.id, members=members, wire=WireMode.ORIGINAL),
                sock=sock, wire=original, snapshots=False,
            )
            for m, sock in zip(members, socks, strict=True)
        ]
        await services[0].send(ORIGINAL_SECRET)
        await asyncio.sleep(1.0)
        for service in services:
            await service.close()

    aio_loop.run(main())
    ports = {s[1] for s in (m.addr for m in members)}
    payloads = [p.payload for p in capture.packets if p.proto == "udp" and p.dst[1] in ports]
    assert any(ORIGINAL_SECRET.to_bytes(4, "big") in data for data in payloads)
