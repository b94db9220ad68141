"""ISIS on the original wire over real sockets: the original's snapshot over TCP markers.

Three members on 127.0.0.1-3 (a member is its IP on this wire), markers on a free TCP
port instead of 10002. A snapshot started by one member completes at all three while the
multicasts go on; hostile marker connections are dropped without harming the group.
"""

from __future__ import annotations

import asyncio
import socket

from gossamer.aio import loop as aio_loop
from gossamer.aio.isis import IsisService, open_isis
from gossamer.aio.sockets import udp_socket
from gossamer.proto.isis import Delivered, IsisConfig, members_from
from gossamer.proto.snapshot import SnapshotDone
from gossamer.trace import MemorySink, Tracer
from gossamer.wire.mode import Wire, WireMode

IPS = ["127.0.0.1", "127.0.0.2", "127.0.0.3"]


def free_tcp_port() -> int:
    with socket.create_server(("127.0.0.1", 0)) as probe:
        return int(probe.getsockname()[1])


async def group(port: int, sink: MemorySink) -> tuple[list[IsisService], dict[int, list[object]]]:
    socks = [udp_socket(ip, 0) for ip in IPS]
    members = members_from([(f"m{i}", s.getsockname()) for i, s in enumerate(socks, 1)])
    events: dict[int, list[object]] = {m.id: [] for m in members}
    services = [
        await open_isis(
            IsisConfig(me=m.id, members=members, wire=WireMode.ORIGINAL), sock=sock,
            wire=Wire(mode=WireMode.ORIGINAL), snapshot_port=port, event_queue=False,
            on_event=events[m.id].append, tracer=Tracer(sink, run="t", node=m.name),
        )
        for m, sock in zip(members, socks, strict=True)
    ]  # fmt: skip
    return services, events


def test_a_snapshot_over_tcp_markers_completes_while_multicasts_go_on() -> None:
    async def main() -> None:
        sink = MemorySink()
        services, events = await group(free_tcp_port(), sink)
        try:
            for value in range(3):
                for service in services:
                    service.multicast(value)
            assert services[0].initiate_snapshot() == 1
            for service in services:
                service.multicast(99)
            async with asyncio.timeout(20):
                while not all(
                    sum(isinstance(e, Delivered) for e in ev) == 12
                    and any(isinstance(e, SnapshotDone) for e in ev)
                    for ev in events.values()
                ):
                    await asyncio.sleep(0.01)
            orders = [[(e.sender, e.msg_id) for e in ev if isinstance(e, Delivered)]
                      for ev in events.values()]  # fmt: skip
            assert orders[0] == orders[1] == orders[2]
            dones = [next(e for e in ev if isinstance(e, SnapshotDone)) for ev in events.values()]
            assert [d.initiator for d in dones] == ["m1", "", ""]
            assert all(set(d.channels) == {"m1", "m2", "m3"} - {d.node} for d in dones)
            markers = [e for e in sink.events if e.layer == "snapshot" and e.kind == "marker"]
            assert len(markers) == 12  # each member: 2 out, 2 in
        finally:
            for service in services:
                await service.aclose()

    aio_loop.run(main())


def test_hostile_marker_connections_are_dropped_and_harm_nothing() -> None:
    async def main() -> None:
        sink = MemorySink()
        port = free_tcp_port()
        services, events = await group(port, sink)
        try:
            # A stranger (not a member's IP), then a member's IP sending garbage.
            for source, payload in (("127.0.0.9", b"\x00\x00\x00\x05\x00\x00\x00\x01"),
                                    ("127.0.0.3", b"junk")):  # fmt: skip
                _, writer = await asyncio.open_connection(
                    IPS[1], port, local_addr=(source, 0)
                )
                writer.write(payload)
                await writer.drain()
                writer.close()
                await writer.wait_closed()
            await asyncio.sleep(0.2)
            services[2].multicast(7)  # m3's datagrams were held, then released
            async with asyncio.timeout(20):
                while not all(any(isinstance(e, Delivered) for e in ev) for ev in events.values()):
                    await asyncio.sleep(0.01)
            drops = [e.attrs["reason"] for e in sink.events
                     if e.layer == "snapshot" and e.kind == "drop"]  # fmt: skip
            assert drops == ["marker: not a member", "marker: not a marker (4 bytes)"]
        finally:
            for service in services:
                await service.aclose()

    aio_loop.run(main())
