"""ISIS on the original wire over real sockets: the original's snapshot over TCP markers.

Three members on 127.0.0.1-3 (a member is its IP on this wire), markers on a free TCP
port instead of 10002. A snapshot started by one member completes at all three while the
multicasts go on; hostile marker connections are dropped without harming the group.
"""

from __future__ import annotations

import asyncio
import socket

import pytest

from gossamer.aio import loop as aio_loop
from gossamer.aio.isis import Delivered, IsisService, open_isis
from gossamer.aio.sockets import udp_socket
from gossamer.errors import LocalProtocolError
from gossamer.proto.isis import IsisConfig, members_from
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
            wire=Wire(mode=WireMode.ORIGINAL), snapshot_port=port,
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
                    await service.send(value)
            assert services[0].initiate_snapshot() == 1
            for service in services:
                await service.send(99)  # m1's waits until its markers arrived
            async with asyncio.timeout(20):
                while not all(
                    sum(isinstance(e, Delivered) for e in ev) == 12
                    and any(isinstance(e, SnapshotDone) for e in ev)
                    for ev in events.values()
                ):
                    await asyncio.sleep(0.01)
            orders = [[(e.sender, e.msg_id, e.data) for e in ev if isinstance(e, Delivered)]
                      for ev in events.values()]  # fmt: skip
            assert orders[0] == orders[1] == orders[2]
            assert {data for _, _, data in orders[0]} == {bytes(4), b"\0\0\0\1", b"\0\0\0\2",
                                                          b"\0\0\0c"}  # fmt: skip
            dones = [next(e for e in ev if isinstance(e, SnapshotDone)) for ev in events.values()]
            assert [d.initiator for d in dones] == ["m1", "", ""]
            assert all(set(d.channels) == {"m1", "m2", "m3"} - {d.node} for d in dones)
            markers = [e for e in sink.events if e.layer == "snapshot" and e.kind == "marker"]
            assert len(markers) == 12  # each member: 2 out, 2 in
        finally:
            for service in services:
                await service.close()

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
                _, writer = await asyncio.open_connection(IPS[1], port, local_addr=(source, 0))
                writer.write(payload)
                await writer.drain()
                writer.close()
                await writer.wait_closed()
            await asyncio.sleep(0.2)
            await services[2].send(7)  # m3's datagrams were held, then released
            async with asyncio.timeout(20):
                while not all(any(isinstance(e, Delivered) for e in ev) for ev in events.values()):
                    await asyncio.sleep(0.01)
            drops = [e.attrs["reason"] for e in sink.events
                     if e.layer == "snapshot" and e.kind == "drop"]  # fmt: skip
            assert drops == ["marker: not a member", "marker: not a marker (4 bytes)"]
        finally:
            for service in services:
                await service.close()

    aio_loop.run(main())


def test_the_original_wire_takes_only_the_originals_uint32() -> None:
    """A payload that is not 4 bytes (or an int of 32 bits) is refused before the wire."""

    async def main() -> None:
        sink = MemorySink()
        services, events = await group(free_tcp_port(), sink)
        try:
            for bad in (b"job-1", b"", 1 << 32, -1, "text"):
                with pytest.raises(LocalProtocolError):
                    await services[0].send(bad)  # type: ignore[arg-type]
            assert services[0].isis.counters.multicasts == 0
            assert await services[0].send(b"\x00\x00\x01\x00") == 1
            assert await services[0].send(256) == 2  # the same 4 bytes
            async with asyncio.timeout(20):
                while sum(isinstance(e, Delivered) for e in events[3]) < 2:
                    await asyncio.sleep(0.01)
            datas = [e.data for e in events[3] if isinstance(e, Delivered)]
            assert datas == [b"\x00\x00\x01\x00"] * 2
        finally:
            for service in services:
                await service.close()

    aio_loop.run(main())
