"""gossamer.aio.stream: the stream driver over real TCP on 127.0.0.1.

Every test runs on uvloop and on the default loop. Timing assertions are about
order (what happened before what), never about wall-clock speed.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket

import pytest

from gossamer.aio.stream import StreamDriver, connect, serve
from gossamer.proto.core import Untimed
from gossamer.proto.ping import PongReceived
from gossamer.proto.ping.stream import StreamEnded, StreamPingConfig, StreamPingCore
from gossamer.testing.aio import Runner, until
from gossamer.trace import MemorySink, Tracer
from gossamer.wire import ping as wire
from gossamer.wire.framing import FrameDecoder, encode_frames

LOCALHOST = "127.0.0.1"


def _server_core(sink: MemorySink) -> StreamPingCore:
    return StreamPingCore(
        StreamPingConfig(node_id="s"), tracer=Tracer(sink, run="t", node="s"), rng=random.Random(0)
    )


def _ping(seq: int, kind: wire.PingType = wire.PingType.PING, sender: str = "c") -> bytes:
    return wire.encode(wire.PingMessage(type=kind, seq=seq, sender=sender))


async def _read_frames(reader: asyncio.StreamReader, count: int) -> list[bytes]:
    decoder = FrameDecoder(max_size=wire.MAX_SIZE)
    frames: list[bytes] = []
    while len(frames) < count:
        chunk = await reader.read(4096)
        assert chunk, "the server closed before answering"
        frames += decoder.feed(chunk)
    return frames


class EchoCore(Untimed):
    """A stream core without ``closing``: echoes bytes; records the end of stream."""

    def __init__(self) -> None:
        self.out = bytearray()
        self.ended = 0

    def receive_data(self, data: bytes, now: float) -> None:
        if not data:
            self.ended += 1
        if data == b"boom":
            raise RuntimeError("a core bug")
        self.out += data

    def data_to_send(self) -> bytes:
        out = bytes(self.out)
        self.out.clear()
        return out


class FloodCore(EchoCore):
    """Answers every input byte with ``factor`` bytes: a peer that does not read
    makes its write buffer fill."""

    def __init__(self, factor: int) -> None:
        super().__init__()
        self.factor = factor
        self.inputs: list[bytes] = []

    def receive_data(self, data: bytes, now: float) -> None:
        if data:
            self.inputs.append(data)
            self.out += bytes(len(data) * self.factor)


def test_tcp_ping_completes_and_both_sides_close(run: Runner) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        sink = MemorySink()
        accepted: list[StreamDriver[StreamPingCore]] = []
        async with await serve(
            lambda: _server_core(sink), LOCALHOST, 0, on_connection=accepted.append
        ) as server:
            core = StreamPingCore(
                StreamPingConfig(
                    node_id="c", peer="s", count=20, interval=0.002, start=loop.time()
                ),
                tracer=Tracer(sink, run="t", node="c"),
                rng=random.Random(1),
            )
            driver = await connect(core, *server.address)
            events = [event async for event in driver.events()]
            await driver.wait_closed()
            [server_driver] = accepted
            await server_driver.wait_closed()
            assert server.accepted == 1 and server.connections == set()
            assert driver.peer_address == server.address
        assert [e.seq for e in events if isinstance(e, PongReceived)] == list(range(20))
        assert events[-1] == StreamEnded(clean=True, reason="eof")
        assert core.counters.delivered == 20 and core.counters.lost == 0
        assert server_driver.core.counters.sent == 20
        # One write per flush: never more writes than inputs (timers and reads) that caused them.
        assert driver.counters.sent <= driver.counters.timers + driver.counters.received
        assert driver.counters.sent_bytes == server_driver.counters.received_bytes

    run(main())


def test_frames_split_byte_by_byte_reach_the_core_whole(run: Runner) -> None:
    async def main() -> None:
        sink = MemorySink()
        accepted: list[StreamDriver[StreamPingCore]] = []
        async with await serve(
            lambda: _server_core(sink), LOCALHOST, 0, on_connection=accepted.append
        ) as server:
            reader, writer = await asyncio.open_connection(*server.address)
            stream = encode_frames(_ping(i) for i in range(3))
            for i in range(len(stream)):
                writer.write(stream[i : i + 1])
                await writer.drain()
                await asyncio.sleep(0.001)  # let each byte arrive on its own
            frames = await _read_frames(reader, 3)
            [server_driver] = accepted
            reads = server_driver.counters.received
            writer.close()
            await writer.wait_closed()
        assert frames == [_ping(i, wire.PingType.PONG, "s") for i in range(3)]
        assert server_driver.core.counters.received == 3
        assert server_driver.core.counters.malformed == 0
        assert reads > 3  # the frames really arrived in pieces

    run(main())


def test_coalesced_frames_are_answered_in_one_write(run: Runner) -> None:
    async def main() -> None:
        sink = MemorySink()
        accepted: list[StreamDriver[StreamPingCore]] = []
        async with await serve(
            lambda: _server_core(sink), LOCALHOST, 0, on_connection=accepted.append
        ) as server:
            reader, writer = await asyncio.open_connection(*server.address)
            writer.write(encode_frames(_ping(i) for i in range(50)))
            frames = await _read_frames(reader, 50)
            [server_driver] = accepted
            writer.close()
            await writer.wait_closed()
            await server_driver.wait_closed()
        assert frames == [_ping(i, wire.PingType.PONG, "s") for i in range(50)]
        counters = server_driver.counters
        assert counters.received < 50  # several frames arrived in one read
        assert counters.sent <= counters.received  # and each read was answered by one write

    run(main())


def test_oversized_frame_closes_the_connection_after_the_good_frames(run: Runner) -> None:
    async def main() -> None:
        sink = MemorySink()
        accepted: list[StreamDriver[StreamPingCore]] = []
        async with await serve(
            lambda: _server_core(sink), LOCALHOST, 0, on_connection=accepted.append
        ) as server:
            reader, writer = await asyncio.open_connection(*server.address)
            writer.write(encode_frames([_ping(1)]) + (1 << 30).to_bytes(4, "big") + bytes(100))
            data = await reader.read()  # to EOF: the server has ended its half
            [server_driver] = accepted
            writer.close()  # ... and closes once ours ends too
            await writer.wait_closed()
            await server_driver.wait_closed()
        assert FrameDecoder().feed(data) == [_ping(1, wire.PingType.PONG, "s")]
        assert server_driver.core.counters.malformed == 1
        assert server_driver.failure is None
        drops = sink.select(layer="demo", kind="drop")
        assert len(drops) == 1 and "exceeds" in drops[0].attrs["reason"]

    run(main())


def test_core_without_closing_is_closed_at_the_peers_eof(run: Runner) -> None:
    async def main() -> None:
        accepted: list[StreamDriver[EchoCore]] = []
        async with await serve(EchoCore, LOCALHOST, 0, on_connection=accepted.append) as server:
            reader, writer = await asyncio.open_connection(*server.address)
            writer.write(b"hello")
            writer.write_eof()
            echoed = await reader.read()
            [server_driver] = accepted
            await server_driver.wait_closed()
            writer.close()
        assert echoed == b"hello"
        assert server_driver.core.ended == 1  # told exactly once

    run(main())


def test_writing_pauses_and_reading_stops_until_the_peer_reads(run: Runner) -> None:
    factor = 8 << 20  # 8 MiB per input byte: far more than socket buffers hold

    async def main() -> None:
        accepted: list[StreamDriver[FloodCore]] = []
        async with await serve(
            lambda: FloodCore(factor), LOCALHOST, 0, on_connection=accepted.append
        ) as server:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.setblocking(False)
            await asyncio.get_running_loop().sock_connect(sock, server.address)
            reader, writer = await asyncio.open_connection(sock=sock, limit=4096)
            writer.write(b"a")
            await until(lambda: bool(accepted) and accepted[0].writing_paused)
            [server_driver] = accepted
            # While the server cannot write, it does not read either: input waits in
            # the kernel instead of producing more output to buffer.
            writer.write(b"b")
            await writer.drain()
            await asyncio.sleep(0.1)
            assert server_driver.core.inputs == [b"a"]
            total = 0
            while total < 2 * factor:
                chunk = await reader.read(1 << 20)
                assert chunk
                total += len(chunk)
            assert b"".join(server_driver.core.inputs) == b"ab"
            assert not server_driver.writing_paused
            writer.close()
            await writer.wait_closed()
        assert total == 2 * factor

    run(main())


def test_drain_blocks_a_local_producer_until_the_peer_reads(run: Runner) -> None:
    chunk = 1 << 20

    async def main() -> None:
        release = asyncio.Event()
        finished = asyncio.Event()
        received = 0

        async def slow_reader(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            nonlocal received
            await release.wait()
            while data := await reader.read(1 << 20):
                received += len(data)
            writer.close()
            # Closed before the loop ends: a transport left to the garbage collector
            # warns in whichever later test collects it.
            await writer.wait_closed()
            finished.set()

        listener = await asyncio.start_server(slow_reader, LOCALHOST, 0)
        port = listener.sockets[0].getsockname()[1]
        core = EchoCore()
        driver = await connect(core, LOCALHOST, port)
        produced = 0

        async def producer() -> None:
            nonlocal produced
            for _ in range(32):
                driver.call(lambda now: core.out.extend(bytes(chunk)))
                produced += 1
                await driver.drain()

        task = asyncio.get_running_loop().create_task(producer())
        await until(lambda: driver.writing_paused)
        await asyncio.sleep(0.05)
        assert not task.done() and produced < 32
        release.set()
        await task
        driver.close()
        await driver.wait_closed()
        await until(lambda: received == 32 * chunk)
        await asyncio.wait_for(finished.wait(), 10)
        listener.close()
        await listener.wait_closed()

    run(main())


def test_server_close_closes_every_connection(run: Runner) -> None:
    async def main() -> None:
        server = await serve(EchoCore, LOCALHOST, 0)
        clients = [await asyncio.open_connection(*server.address) for _ in range(3)]
        await until(lambda: len(server.connections) == 3)
        server.close()
        await server.wait_closed()
        for reader, writer in clients:
            assert await reader.read() == b""
            writer.close()
        assert server.connections == set() and server.accepted == 3

    run(main())


def test_a_core_that_raises_aborts_only_its_connection(run: Runner) -> None:
    async def main() -> None:
        accepted: list[StreamDriver[EchoCore]] = []
        async with await serve(EchoCore, LOCALHOST, 0, on_connection=accepted.append) as server:
            bad_reader, bad_writer = await asyncio.open_connection(*server.address)
            bad_writer.write(b"boom")
            with pytest.raises(RuntimeError, match="a core bug"):
                await until(lambda: bool(accepted))
                await accepted[0].wait_closed()
            assert isinstance(accepted[0].failure, RuntimeError)
            with contextlib.suppress(ConnectionResetError):  # an abort may arrive as a reset
                assert await bad_reader.read() == b""
            bad_writer.close()
            # The server keeps serving.
            reader, writer = await asyncio.open_connection(*server.address)
            writer.write(b"still here")
            writer.write_eof()
            assert await reader.read() == b"still here"
            writer.close()

    run(main())


def test_connect_refused_raises_os_error(run: Runner) -> None:
    async def main() -> None:
        with socket.socket() as gone:
            gone.bind((LOCALHOST, 0))
            port = gone.getsockname()[1]
        with pytest.raises(OSError):
            await connect(EchoCore(), LOCALHOST, port, timeout=5)

    run(main())


def test_local_close_tells_the_core_once_and_flushes_its_data(run: Runner) -> None:
    async def main() -> None:
        async with await serve(EchoCore, LOCALHOST, 0) as server:
            core = EchoCore()
            driver = await connect(core, *server.address, event_queue=False)
            core.out += b"queued before close"
            driver.close()
            driver.close()
            await driver.wait_closed()
        assert core.ended == 1
        assert driver.counters.sent_bytes == len(b"queued before close")

    run(main())
