"""gossamer.aio.connections: any ConnectionsCore over real TCP on 127.0.0.1.

``gossamer.testing.ScriptedConnections`` exercises the contract (ids, opens, bytes, closes, losses
exactly once, flow control); the gossip adapter (``GossipConnections``) runs a real
broadcast between two drivers. Every test runs on uvloop and on the default loop.
"""

from __future__ import annotations

import asyncio
import random
import socket
from collections.abc import Callable

import pytest

from gossamer.aio.connections import ConnectionsDriver, tcp_listener
from gossamer.errors import NetworkError
from gossamer.proto.gossip import Delivered, GossipConfig, GossipCore, bytes_handler
from gossamer.proto.gossip.connections import GossipConnections
from gossamer.testing.aio import Runner, until
from gossamer.testing.connections import ScriptedConnections
from gossamer.testing.ports import free_ports
from gossamer.trace.sink import NullSink, Tracer
from gossamer.wire.chatter import NetID

LOCALHOST = "127.0.0.1"


class PausedReads(ScriptedConnections):
    """Echoes like ``ScriptedConnections`` and counts the reads of a connection made
    while ``paused(conn)`` says its writing is paused."""

    def __init__(self, echo: int, paused: Callable[[int], bool]) -> None:
        super().__init__(echo=echo)
        self.paused = paused
        self.reads_while_paused = 0

    def receive_data(self, conn: int, data: bytes, now: float) -> None:
        if self.paused(conn):
            self.reads_while_paused += 1
        super().receive_data(conn, data, now)


def test_accepted_and_opened_connections_echo_and_are_lost_once(run: Runner) -> None:
    async def main() -> None:
        server_core, client_core = ScriptedConnections(echo=1), ScriptedConnections(echo=1)
        server = ConnectionsDriver(server_core)
        client = ConnectionsDriver(client_core)
        await server.start(LOCALHOST, 0)
        await client.start()
        port = server.address[1]
        # Bytes queued before the connection is made leave once it is; a name resolves.
        conn = client.call(lambda now: client_core.dial(("localhost", port), b"hello"))
        assert conn == -1
        await until(lambda: client_core.data(-1) == b"hello")
        assert client_core.made[0][:2] == (-1, (LOCALHOST, port))
        assert server_core.log[:2] == [("made", 1), ("data", 1)]
        # The opener closes after its last bytes: the server still gets them, then
        # both sides lose the connection exactly once.
        client.call(lambda now: client_core.send(-1, b" bye", close=True))
        await until(lambda: "lost" in server_core.kinds(1) and "lost" in client_core.kinds(-1))
        await asyncio.sleep(0.05)  # a second report would come now
        assert server_core.data(1) == b"hello bye"
        assert server_core.kinds(1)[0] == "made" and server_core.kinds(1)[-1] == "lost"
        assert server_core.kinds(1).count("lost") == 1 and client_core.kinds(-1).count("lost") == 1
        # A second accepted connection gets the next id.
        client.call(lambda now: client_core.dial((LOCALHOST, port), b"again"))
        await until(lambda: client_core.data(-2) == b"again")
        assert ("made", 2) in server_core.log
        client.close()
        server.close()
        await client.wait_closed()
        await server.wait_closed()
        assert client_core.kinds(-2).count("lost") == 0  # the driver closed: not told

    run(main())


def test_a_refused_or_unresolvable_open_is_lost_without_being_made(run: Runner) -> None:
    async def main() -> None:
        core = ScriptedConnections(echo=1)
        (absent,) = free_ports(1, kind="tcp")
        async with ConnectionsDriver(core, connect_timeout=2.0) as driver:
            await driver.start()
            driver.call(lambda now: core.dial((LOCALHOST, absent), b"x"))
            driver.call(lambda now: core.dial(("no-such-host.invalid", 1), b"y"))
            await until(lambda: core.kinds(-1) == ["lost"] and core.kinds(-2) == ["lost"])
            assert driver.counters.sent == 0

    run(main())


def test_the_peer_ending_its_stream_ends_the_connection(run: Runner) -> None:
    async def main() -> None:
        core = ScriptedConnections(echo=1)
        async with ConnectionsDriver(core) as driver:
            await driver.start(LOCALHOST, 0)
            reader, writer = await asyncio.open_connection(*driver.address)
            writer.write(b"ping")
            assert await reader.readexactly(4) == b"ping"
            writer.write_eof()
            assert await reader.read() == b""  # our side closed too
            await until(lambda: core.kinds(1) == ["made", "data", "lost"])
            writer.close()
            await writer.wait_closed()

    run(main())


def test_the_core_closes_after_its_queued_bytes(run: Runner) -> None:
    async def main() -> None:
        core = ScriptedConnections(echo=1)
        async with ConnectionsDriver(core) as driver:
            await driver.start(LOCALHOST, 0)
            reader, writer = await asyncio.open_connection(*driver.address)
            await until(lambda: core.kinds(1) == ["made"])
            driver.call(lambda now: core.send(1, b"last words", close=True))
            driver.call(lambda now: core.send(1, b" never sent"))  # after the close: dropped
            assert await reader.read() == b"last words"
            await until(lambda: core.kinds(1) == ["made", "lost"])
            writer.close()
            await writer.wait_closed()

    run(main())


def test_a_reader_that_stops_reading_pauses_writing_and_reading(run: Runner) -> None:
    """Each byte in is answered by 1 MiB out: a client that does not read fills the
    server's write buffer; the driver holds the rest, and reads nothing, until it drains."""

    async def main() -> None:
        factor = 1 << 20
        driver: ConnectionsDriver[PausedReads]

        def paused(conn: int) -> bool:
            link = driver.connections.get(conn)
            return link is not None and link.writing_paused

        core = PausedReads(factor, paused)
        async with ConnectionsDriver(core) as driver:
            await driver.start(LOCALHOST, 0)
            reader, writer = await asyncio.open_connection(*driver.address)
            sent = 0
            while not paused(1):
                assert sent < 64, "64 MiB went out without the write buffer filling"
                writer.write(b"a")
                sent += 1
                await until(lambda n=sent: len(core.data(1)) == n or paused(1))  # type: ignore[misc]
            for _ in range(10):  # more requests while paused: read only once it drains
                writer.write(b"b")
                sent += 1
                await asyncio.sleep(0.001)
            total = 0
            while total < sent * factor:
                chunk = await reader.read(1 << 20)
                assert chunk
                total += len(chunk)
            assert total == sent * factor and len(core.data(1)) == sent
            assert core.reads_while_paused == 0
            writer.close()
            await writer.wait_closed()

    run(main())


def test_a_write_backlog_past_the_limit_is_reported_once_as_a_core_input(run: Runner) -> None:
    """Each byte in is answered by 1 MiB out to a client that does not read: past
    ``write_buffer_limit`` the driver feeds ``on_backlog`` (once), which closes it."""

    async def main() -> None:
        core = ScriptedConnections(echo=1 << 20)
        backlogs: list[int] = []

        def on_backlog(conn: int, now: float) -> None:
            backlogs.append(conn)
            core.send(conn, b"", close=True)

        async with ConnectionsDriver(core, write_buffer_limit=256 << 10, on_backlog=on_backlog,
                                     linger=0.2) as driver:
            await driver.start(LOCALHOST, 0)
            _reader, writer = await asyncio.open_connection(*driver.address)
            for _ in range(64):
                writer.write(b"a")
                await asyncio.sleep(0.001)
                if backlogs:
                    break
            assert backlogs == [1]
            # The reader never reads: the close cannot flush, and lingers 0.2 s at most.
            await until(lambda: core.kinds(1)[-1:] == ["lost"])
            assert backlogs == [1]
            writer.close()

    run(main())


def test_without_on_backlog_a_backlog_aborts_the_connection(run: Runner) -> None:
    async def main() -> None:
        core = ScriptedConnections(echo=1 << 20)
        async with ConnectionsDriver(core, write_buffer_limit=256 << 10) as driver:
            await driver.start(LOCALHOST, 0)
            _reader, writer = await asyncio.open_connection(*driver.address)
            for _ in range(64):
                writer.write(b"a")
                await asyncio.sleep(0.001)
                if "lost" in core.kinds(1):
                    break
            await until(lambda: core.kinds(1)[-1:] == ["lost"])
            writer.close()

    run(main())


class FragileCore(ScriptedConnections):
    """An echo core with a bug: input ``boom`` raises."""

    def receive_data(self, conn: int, data: bytes, now: float) -> None:
        if data == b"boom":
            raise RuntimeError("a bug in the core")
        super().receive_data(conn, data, now)


def test_the_error_boundary_costs_one_connection_not_the_driver(run: Runner) -> None:
    async def main() -> None:
        core = FragileCore(echo=1)
        failed: list[tuple[int, str]] = []

        def on_error(conn: int, exc: Exception, now: float) -> None:
            failed.append((conn, str(exc)))
            core.send(conn, b"sorry", close=True)

        async with ConnectionsDriver(core, on_error=on_error) as driver:
            await driver.start(LOCALHOST, 0)
            r1, w1 = await asyncio.open_connection(*driver.address)
            r2, w2 = await asyncio.open_connection(*driver.address)
            w1.write(b"boom")
            assert await r1.read() == b"sorry"  # closed by the core, after its last bytes
            assert failed == [(1, "a bug in the core")] and driver.connection_errors == 1
            w2.write(b"still here")
            assert await r2.readexactly(10) == b"still here"
            assert not driver.closed and driver.pump.failure is None
            for writer in (w1, w2):
                writer.close()
        # Without the boundary the same input is a bug that stops the driver.
        core = FragileCore(echo=1)
        driver = ConnectionsDriver(core)
        await driver.start(LOCALHOST, 0)
        _r, w = await asyncio.open_connection(*driver.address)
        w.write(b"boom")
        await until(lambda: driver.closed)
        with pytest.raises(RuntimeError):
            await driver.wait_closed()
        w.close()

    run(main())


def test_half_close_waits_for_the_peer_and_stop_listening_keeps_connections(
    run: Runner,
) -> None:
    async def main() -> None:
        core = ScriptedConnections(echo=1)
        async with ConnectionsDriver(core, half_close=True) as driver:
            await driver.start(LOCALHOST, 0)
            reader, writer = await asyncio.open_connection(*driver.address)
            await until(lambda: core.kinds(1) == ["made"])
            address = driver.address
            driver.stop_listening()
            with pytest.raises(OSError):
                await asyncio.open_connection(*address)
            driver.call(lambda now: core.send(1, b"bye", close=True))
            assert await reader.read() == b"bye"  # our half ended...
            await asyncio.sleep(0.05)
            assert "lost" not in core.kinds(1)  # ...the connection waits for the peer's
            writer.write(b"late")  # the peer may still write (the echo is dropped)
            writer.close()
            await driver.wait_connections_closed()
            assert core.kinds(1)[-1] == "lost" and core.data(1) == b"late"

    run(main())


def test_without_coalescing_each_pair_is_its_own_write(run: Runner) -> None:
    async def main() -> None:
        core = ScriptedConnections(echo=1)
        async with ConnectionsDriver(core, coalesce=False) as driver:
            await driver.start(LOCALHOST, 0)
            reader, writer = await asyncio.open_connection(*driver.address)
            await until(lambda: core.kinds(1) == ["made"])
            for i in range(5):
                core.send(1, bytes([i]))
            driver.call(lambda now: None)
            assert await reader.readexactly(5) == bytes(range(5))
            assert driver.counters.sent == 5
            writer.close()
            await writer.wait_closed()

    run(main())


def test_a_port_in_use_is_a_network_error(run: Runner) -> None:
    async def main() -> None:
        with socket.create_server((LOCALHOST, 0)) as squatter:
            with pytest.raises(NetworkError) as error:
                tcp_listener(LOCALHOST, squatter.getsockname()[1])
            assert isinstance(error.value.__cause__, OSError)
            with pytest.raises(NetworkError):
                driver = ConnectionsDriver(ScriptedConnections())
                await driver.start(LOCALHOST, squatter.getsockname()[1])

    run(main())


def test_the_gossip_adapter_broadcasts_over_the_driver(run: Runner) -> None:
    async def main() -> None:
        key = b"aio-test-key-of-exactly-32-bytes"
        drivers: list[ConnectionsDriver[GossipConnections]] = []
        delivered: list[list[object]] = [[], []]
        for i in range(2):
            sock = tcp_listener(LOCALHOST, 0)
            port = sock.getsockname()[1]
            config = GossipConfig(my_addr=LOCALHOST, my_port=port, multicast=False, key=key)
            core = GossipCore(
                config,
                tracer=Tracer(NullSink(), run="t", node=str(i)),
                rng=random.Random(i),
                handlers=[bytes_handler()],
                epoch=1,
            )
            adapter = GossipConnections(core, own=(LOCALHOST, port))
            driver = ConnectionsDriver(
                adapter, on_event=delivered[i].append, event_queue=False, ipv6=False
            )
            await driver.start(sock=sock)
            drivers.append(driver)
        a, b = (d.core.core for d in drivers)
        assert isinstance(a, GossipCore) and isinstance(b, GossipCore)
        target = NetID(LOCALHOST, drivers[1].address[1])
        drivers[0].call(lambda now: a.broadcast([target], b"over the driver", now))
        await until(lambda: len(delivered[1]) == 1)
        first = delivered[1][0]
        assert isinstance(first, Delivered) and first.data == b"over the driver"
        await until(lambda: a.pending_hops == 0)  # the ACK came back on the opened connection
        assert drivers[0].counters.received >= 1
        for driver in drivers:
            driver.close()
            await driver.wait_closed()

    run(main())
