"""gossamer.aio.datagram: the datagram driver on real UDP sockets on 127.0.0.1.

Every test runs on uvloop and on the default loop. Timing assertions are about
order (what happened before what), never about wall-clock speed.
"""

from __future__ import annotations

import asyncio
import random
import socket
from typing import Any

import pytest

from gossamer._types import Address, Datagram
from gossamer.aio.datagram import DatagramDriver, open_datagram
from gossamer.aio.sockets import udp_socket
from gossamer.errors import ConfigError, LocalProtocolError
from gossamer.proto.ping import PingConfig, PingCore, PingLost, PongReceived
from gossamer.testing.aio import Runner, until
from gossamer.trace import MemorySink, Tracer

LOCALHOST = "127.0.0.1"


class ScriptCore:
    """A small real core for driver tests: it records every input, echoes on
    request and keeps a deadline the test sets, so the driver's pumping can be
    observed from the outside. ``log`` is shared with the test to record order."""

    def __init__(self, log: list[str] | None = None) -> None:
        self.log = log if log is not None else []
        self.received: list[tuple[bytes, Address, float]] = []
        self.timers: list[float] = []
        self.deadline: float | None = None
        self.outbox: list[Datagram] = []
        self.events: list[object] = []

    def receive_datagram(self, data: bytes, addr: Address, now: float) -> None:
        self.received.append((data, addr, now))
        self.log.append(f"recv:{data.decode(errors='replace')}")
        if data == b"boom":
            raise RuntimeError("a core bug")
        if data.startswith(b"echo:"):
            self.outbox.append((data[5:], addr))
        self.events.append(("recv", data))

    def handle_timer(self, now: float) -> None:
        self.timers.append(now)
        self.log.append("timer")
        self.deadline = None

    def send(self, data: bytes, addr: Address, now: float) -> None:
        self.outbox.append((data, addr))

    def set_deadline(self, deadline: float | None) -> float | None:
        self.deadline = deadline
        return deadline

    def emit(self, *events: object) -> None:
        self.events.extend(events)

    def datagrams_to_send(self) -> list[Datagram]:
        out, self.outbox = self.outbox, []
        return out

    def events_received(self) -> list[object]:
        out, self.events = self.events, []
        return out

    def next_deadline(self) -> float | None:
        return self.deadline


def _ping_pair(
    now: float, sink: MemorySink, *, count: int = 10, **config: Any
) -> tuple[socket.socket, socket.socket, PingCore, PingCore]:
    sock_a, sock_b = udp_socket(LOCALHOST), udp_socket(LOCALHOST)
    addr_a, addr_b = sock_a.getsockname(), sock_b.getsockname()
    settings: dict[str, Any] = {"interval": 0.005, "timeout": 0.02, "max_retries": 6, **config}
    core_a = PingCore(
        PingConfig(node_id="a", targets=[("b", addr_b)], count=count, start=now, **settings),
        tracer=Tracer(sink, run="t", node="a"),
        rng=random.Random(1),
    )
    core_b = PingCore(
        PingConfig(node_id="b", targets=[("a", addr_a)], count=count, start=now, **settings),
        tracer=Tracer(sink, run="t", node="b"),
        rng=random.Random(2),
    )
    return sock_a, sock_b, core_a, core_b


def test_two_ping_nodes_complete_every_ping(run: Runner) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        sink = MemorySink()
        sock_a, sock_b, core_a, core_b = _ping_pair(loop.time(), sink, count=20)
        events_a: list[object] = []
        async with (
            await open_datagram(core_a, sock_a, on_event=events_a.append) as driver_a,
            await open_datagram(core_b, sock_b) as driver_b,
        ):
            await until(lambda: core_a.done and core_b.done)
            assert driver_a.local_address == sock_a.getsockname()
            counters_a, counters_b = driver_a.counters, driver_b.counters
        for core in (core_a, core_b):
            assert core.counters.delivered == 20
            assert core.counters.lost == 0
        assert [type(e) for e in events_a] == [PongReceived] * 20
        assert sorted(e.seq for e in events_a if isinstance(e, PongReceived)) == list(range(20))
        # The driver put every datagram the core made on the wire, and fed it every one
        # that arrived (loopback loses nothing without injected faults).
        assert counters_a.sent == core_a.counters.sent
        assert counters_a.received == core_a.counters.received == counters_b.sent
        assert counters_a.events == 20
        assert counters_a.timers > 0
        assert driver_a.closed and driver_b.closed

    run(main())


def test_events_async_iterator_yields_in_order_and_ends_on_close(run: Runner) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        sock_a, sock_b, core_a, core_b = _ping_pair(loop.time(), MemorySink(), count=5)
        driver_a = await open_datagram(core_a, sock_a)
        driver_b = await open_datagram(core_b, sock_b, event_queue=False)
        seen: list[object] = []
        async for event in driver_a.events():
            seen.append(event)
            if len(seen) == 5:
                driver_a.close()
        await driver_a.wait_closed()
        driver_b.close()
        await driver_b.wait_closed()
        assert [e.seq for e in seen if isinstance(e, PongReceived)] == sorted(
            e.seq for e in seen if isinstance(e, PongReceived)
        )
        assert len(seen) == 5
        with pytest.raises(ConfigError):
            async for _ in driver_b.events():
                pass

    run(main())


def test_malformed_datagrams_are_counted_by_the_core_and_the_driver_goes_on(run: Runner) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        sink = MemorySink()
        sock_a, sock_b, core_a, core_b = _ping_pair(loop.time() + 0.05, sink, count=5)
        garbage = [b"", b"\x00", b"GP\x09", b"GP\x01\x07" + bytes(20), bytes(range(256)) * 4]
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as attacker:
            async with (
                await open_datagram(core_a, sock_a) as driver_a,
                await open_datagram(core_b, sock_b),
            ):
                for data in garbage:
                    attacker.sendto(data, driver_a.local_address)
                await until(lambda: core_a.counters.malformed == len(garbage))
                await until(lambda: core_a.done and core_b.done)
                assert driver_a.failure is None
        assert core_a.counters.delivered == core_b.counters.delivered == 5
        drops = [e for e in sink.select(layer="demo", kind="drop") if e.node == "a"]
        assert len(drops) == len(garbage)

    run(main())


def test_icmp_port_unreachable_is_counted_not_fatal(run: Runner) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as gone:
            gone.bind((LOCALHOST, 0))
            dead: Address = gone.getsockname()
        # Linux reports ICMP errors only on connected UDP sockets.
        sock = udp_socket(LOCALHOST)
        sock.connect(dead)
        sink = MemorySink()
        core = PingCore(
            PingConfig(
                node_id="a",
                targets=[("nobody", dead)],
                count=2,
                interval=0.005,
                timeout=0.005,
                max_retries=2,
                start=loop.time(),
            ),
            tracer=Tracer(sink, run="t", node="a"),
            rng=random.Random(3),
        )
        events: list[object] = []
        net = MemorySink()
        async with await open_datagram(
            core, sock, on_event=events.append, tracer=Tracer(net, run="t", node="a")
        ) as driver:
            await until(lambda: core.done)
            assert driver.counters.errors >= 1
            assert isinstance(driver.last_error, ConnectionRefusedError)
            assert driver.failure is None
            # A destination other than the connected peer is a socket error too.
            driver.call(
                lambda now: core.receive_datagram(
                    b"GP\x01\x01\x00\x00\x00\x09\x01z", ("127.0.0.1", 9), now
                )
            )
            assert driver.counters.errors >= 2
            assert not driver.closed
        assert [type(e) for e in events] == [PingLost, PingLost]
        assert len(net.select(layer="net", kind="error")) == driver.counters.errors

    run(main())


def test_immediate_send_errors_are_counted(run: Runner) -> None:
    async def main() -> None:
        core = ScriptCore()
        async with await open_datagram(core, udp_socket(LOCALHOST)) as driver:
            driver.call(lambda now: core.send(b"x", (LOCALHOST, 0), now))  # EINVAL
            driver.call(lambda now: core.send(b"x" * 70_000, driver.local_address, now))
            await until(lambda: driver.counters.errors == 2)
            driver.call(lambda now: core.send(b"fine", driver.local_address, now))
            await until(lambda: len(core.received) == 1)
        assert core.received[0][0] == b"fine"
        assert driver.failure is None

    run(main())


def test_timer_moved_earlier_is_served_on_time(run: Runner) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        log: list[str] = []
        core = ScriptCore(log)
        core.deadline = loop.time() + 30.0
        async with await open_datagram(core, udp_socket(LOCALHOST)) as driver:
            moved = driver.call(lambda now: core.set_deadline(now + 0.02))
            loop.call_later(0.5, log.append, "sentinel")
            await until(lambda: "sentinel" in log)
        assert log == ["timer", "sentinel"]
        assert moved is not None and core.timers[0] >= moved

    run(main())


def test_timer_moved_later_is_not_served_early(run: Runner) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        log: list[str] = []
        core = ScriptCore(log)
        core.deadline = loop.time() + 0.02
        async with await open_datagram(core, udp_socket(LOCALHOST)) as driver:
            moved = driver.call(lambda now: core.set_deadline(now + 0.2))
            loop.call_later(0.08, log.append, "sentinel")
            await until(lambda: "timer" in log)
        assert log == ["sentinel", "timer"]
        assert moved is not None and len(core.timers) == 1 and core.timers[0] >= moved

    run(main())


def test_cleared_deadline_cancels_the_timer_and_a_past_deadline_fires_at_once(
    run: Runner,
) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        log: list[str] = []
        core = ScriptCore(log)
        core.deadline = 0.0  # "act as soon as you are driven"
        async with await open_datagram(core, udp_socket(LOCALHOST)) as driver:
            await until(lambda: "timer" in log)
            driver.call(lambda now: core.set_deadline(now + 0.02))
            driver.call(lambda now: core.set_deadline(None))
            loop.call_later(0.1, log.append, "sentinel")
            await until(lambda: "sentinel" in log)
        assert log == ["timer", "sentinel"]
        assert driver.counters.timers == 1

    run(main())


def test_every_input_is_stamped_with_loop_time_and_flushed(run: Runner) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        core, peer = ScriptCore(), ScriptCore()
        async with (
            await open_datagram(core, udp_socket(LOCALHOST)) as driver,
            await open_datagram(peer, udp_socket(LOCALHOST)) as peer_driver,
        ):
            before = loop.time()
            peer_driver.call(lambda now: peer.send(b"echo:pong", driver.local_address, now))
            await until(lambda: len(peer.received) == 1)
            after = loop.time()
        [(received, source, now)] = core.received
        assert (received, source) == (b"echo:pong", peer_driver.local_address)
        assert before <= now <= after
        assert peer.received[0][:2] == (b"pong", driver.local_address)

    run(main())


def test_extra_listening_socket_feeds_the_same_core(run: Runner) -> None:
    async def main() -> None:
        core, peer = ScriptCore(), ScriptCore()
        main_sock, extra = udp_socket(LOCALHOST), udp_socket(LOCALHOST)
        extra_addr = extra.getsockname()
        async with (
            await open_datagram(core, main_sock, listen=[extra]) as driver,
            await open_datagram(peer, udp_socket(LOCALHOST)) as peer_driver,
        ):
            peer_driver.call(lambda now: peer.send(b"echo:via-extra", extra_addr, now))
            await until(lambda: len(peer.received) == 1)
        # Replies leave through the first socket, whichever socket the request came in on.
        assert core.received[0][:2] == (b"echo:via-extra", peer_driver.local_address)
        assert peer.received[0][:2] == (b"via-extra", driver.local_address)
        assert extra.fileno() == -1 and main_sock.fileno() == -1  # closed with the driver

    run(main())


def test_callback_reentry_keeps_event_order(run: Runner) -> None:
    async def main() -> None:
        core = ScriptCore()
        seen: list[object] = []
        driver: DatagramDriver[ScriptCore]

        def on_event(event: object) -> None:
            seen.append(event)
            if event == "first":
                driver.call(lambda now: core.emit("from-callback"))

        driver = await open_datagram(core, udp_socket(LOCALHOST), on_event=on_event)
        async with driver:
            driver.call(lambda now: core.emit("first", "second"))
        assert seen == ["first", "second", "from-callback"]

    run(main())


def test_a_core_that_raises_stops_the_driver_and_surfaces_the_error(run: Runner) -> None:
    async def main() -> None:
        core = ScriptCore()
        driver = await open_datagram(core, udp_socket(LOCALHOST))
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as peer:
            peer.sendto(b"boom", driver.local_address)
            with pytest.raises(RuntimeError, match="a core bug"):
                async for _ in driver.events():
                    pass
        with pytest.raises(RuntimeError, match="a core bug"):
            await driver.wait_closed()
        assert isinstance(driver.failure, RuntimeError)
        assert driver.closed
        with pytest.raises(LocalProtocolError):
            driver.call(lambda now: None)

    run(main())


def test_local_request_errors_reach_the_caller_and_outputs_still_flush(run: Runner) -> None:
    async def main() -> None:
        core = ScriptCore()
        async with await open_datagram(core, udp_socket(LOCALHOST)) as driver:

            def bad_request(now: float) -> None:
                core.send(b"before the error", driver.local_address, now)
                raise LocalProtocolError("not allowed in this state")

            with pytest.raises(LocalProtocolError):
                driver.call(bad_request)
            await until(lambda: len(core.received) == 1)
            assert driver.failure is None
        assert core.received[0][0] == b"before the error"

    run(main())


def test_close_is_idempotent_and_attach_only_once(run: Runner) -> None:
    async def main() -> None:
        driver = await open_datagram(ScriptCore(), udp_socket(LOCALHOST))
        with udp_socket(LOCALHOST) as spare, pytest.raises(LocalProtocolError):
            await driver.attach(spare)
        driver.close()
        driver.close()
        await driver.wait_closed()
        await driver.wait_closed()
        assert driver.closed and driver.failure is None

    run(main())
