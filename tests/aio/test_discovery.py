"""gossamer.aio.discovery on real sockets on 127.0.0.1, with no broadcast at all.

Nothing may be broadcast in the machine's own namespace, so here each node's
``broadcast_address`` is 127.0.0.1 and its ``broadcast_targets`` name the other node's
unicast address: the ``pelotari?`` reaches exactly that peer by unicast, and everything
else is the real protocol on real sockets. Real broadcast (several nodes per host, five
hosts on a bridge) is tested inside network namespaces in
``tests/netns/test_discovery_hosts.py``.

Every test runs on uvloop and on the default loop (the ``run`` fixture); timing
assertions are bounds on protocol timers (tens of milliseconds here), never on speed.
"""

from __future__ import annotations

import asyncio
import socket
from contextlib import AsyncExitStack
from typing import Any

import pytest

from gossamer.aio.discovery import (
    Discovery,
    DiscoveryConfig,
    PeerDown,
    PeerUp,
    Received,
    interface_addresses,
    open_discovery,
)
from gossamer.errors import (
    ClosedError,
    ConfigError,
    LocalProtocolError,
    NetworkError,
    NoRouteError,
    TimedOutError,
)
from gossamer.testing import sealed_wire
from gossamer.testing.aio import Runner, until
from gossamer.trace import MemorySink, Tracer
from gossamer.wire.mode import Wire

LOCALHOST = "127.0.0.1"
TIMERS: dict[str, Any] = {
    "broadcast_interval": 0.1,
    "inactive_time": 0.3,
    "heartbeat_wait": 0.15,
    "handshake_timeout": 0.2,
}


def config(*targets: tuple[str, int], host: str = LOCALHOST, **settings: Any) -> DiscoveryConfig:
    """A node on any free port whose broadcasts go, as unicast, to ``targets``."""
    return DiscoveryConfig(address=(host, 0), broadcast_address=LOCALHOST, listen_port=0,
                           broadcast_targets=targets, **{**TIMERS, **settings})  # fmt: skip


async def pair(stack: AsyncExitStack, wire: Wire, **settings: Any) -> tuple[Discovery, Discovery]:
    """Two open nodes: ``b`` "broadcasts" to ``a``, which is enough for both to register."""
    a = await stack.enter_async_context(open_discovery(config(**settings), wire=wire))
    b = await stack.enter_async_context(open_discovery(config(a.address, **settings), wire=wire))
    return a, b


async def next_event(node: Discovery, kind: type, timeout: float = 5.0) -> Any:
    async with asyncio.timeout(timeout):
        async for event in node.events():
            if isinstance(event, kind):
                return event
    raise AssertionError("the node closed first")


def test_two_nodes_discover_each_other_and_exchange_data(run: Runner) -> None:
    async def main() -> None:
        wire, sink = sealed_wire(), MemorySink()
        async with open_discovery(config(), wire=wire,
                                  tracer=Tracer(sink, run="t", node="a")) as a, \
                open_discovery(config(a.address), wire=wire) as b:  # fmt: skip
            up = await next_event(a, PeerUp)
            assert up == PeerUp(peer=b.address, name=f"{LOCALHOST}:{b.address[1]}")
            await next_event(b, PeerUp)
            await until(lambda: bool(a.peers() and b.peers()))
            assert a.peers() == [b.address] and b.peers() == [a.address]
            assert await a.send(b"to b", to=b.address) == 1
            message = await b.receive(timeout=5)
            assert message == Received(
                peer=a.address, name=f"{LOCALHOST}:{a.address[1]}", payload=b"to b"
            )
            assert (message.data, message.sender) == (b"to b", a.address)
            assert await b.send(b"to all") == 1  # to=None: every registered peer
            async for got in a:
                assert (got.data, got.sender) == (b"to all", b.address)
                break
            assert not a.rejected and not a.closed
        assert a.closed and b.closed
        kinds = {(e.kind, e.attrs.get("type")) for e in sink.events}
        assert {("peer_up", None), ("send", "data"), ("recv", "data")} <= kinds
        # Whoever broadcast first, a saw or sent a pelotari? (it may finish inside its jitter).
        assert kinds & {("send", "pelotari?"), ("recv", "pelotari?")}
        assert {e.layer for e in sink.events} <= {"discovery", "net"}

    run(main())


def test_close_says_agur_ends_the_streams_and_refuses_more(run: Runner) -> None:
    async def main() -> None:
        async with AsyncExitStack() as stack:
            a, b = await pair(stack, sealed_wire(), inactive_time=30.0)  # no heartbeat could
            await next_event(a, PeerUp)
            await until(lambda: bool(b.peers()))  # b registers a when a's dale! arrives
            await a.send(b"before the close", to=b.address)
            await until(lambda: b.core.counters.data_received == 1)
            loop = asyncio.get_running_loop()
            closed_at = loop.time()
            await b.close()
            down = await next_event(a, PeerDown, timeout=2.0)
            assert down.reason == "leave" and not down.local and down.peer == b.address
            assert loop.time() - closed_at < 2.0
            # b's own view: its peer left locally, and its event stream ended.
            events = [e async for e in b.events()]
            assert [type(e) for e in events] == [PeerUp, PeerDown]
            assert isinstance(events[1], PeerDown) and events[1].local
            # What had arrived is still received; then ClosedError, and iteration ends.
            assert (await b.receive()).data == b"before the close"
            with pytest.raises(ClosedError):
                await b.receive()
            assert [m async for m in b] == []
            with pytest.raises(ClosedError):
                await b.send(b"late")
            await b.close()  # idempotent
            assert b.closed

    run(main())


def test_a_crashed_node_is_removed_by_heartbeat(run: Runner) -> None:
    async def main() -> None:
        async with AsyncExitStack() as stack:
            a, b = await pair(stack, sealed_wire())
            await next_event(a, PeerUp)
            loop = asyncio.get_running_loop()
            crashed_at = loop.time()
            b.abort()  # sockets closed, no agur!: a crash as seen from a
            down = await next_event(a, PeerDown, timeout=5.0)
            elapsed = loop.time() - crashed_at
            assert down.reason == "heartbeat"
            bound = TIMERS["inactive_time"] + 3 * TIMERS["heartbeat_wait"]
            assert elapsed <= bound + 0.5  # scheduling slack on a loaded machine
            assert a.core.counters.heartbeats_sent >= 3

    run(main())


def test_receive_times_out_and_unknown_peers_have_no_route(run: Runner) -> None:
    async def main() -> None:
        async with open_discovery(config(), wire=sealed_wire()) as node:
            with pytest.raises(TimedOutError) as timed_out:
                await node.receive(timeout=0.05)
            assert isinstance(timed_out.value, TimeoutError)
            assert isinstance(timed_out.value.__cause__, TimeoutError)
            with pytest.raises(NoRouteError):
                await node.send(b"not a peer", to=(LOCALHOST, 9))
            assert await node.send(b"to nobody") == 0

    run(main())


def test_localhost_resolves_for_the_node_and_its_peers(run: Runner) -> None:
    async def main() -> None:
        wire = sealed_wire()
        async with open_discovery(config(host="localhost"), wire=wire) as a:
            host, port = a.address
            assert host == LOCALHOST
            async with open_discovery(config(f"localhost:{port}"), wire=wire) as b:
                await next_event(b, PeerUp)
                await until(lambda: bool(a.peers()))
                assert await b.send(b"by name", to=f"localhost:{port}") == 1
                assert (await a.receive(timeout=5)).sender == b.address

    run(main())


def test_a_port_in_use_is_a_network_error_and_leaks_nothing(run: Runner) -> None:
    async def main() -> None:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as squatter:
            squatter.bind((LOCALHOST, 0))
            taken = squatter.getsockname()[1]
            settings = {**TIMERS, "broadcast_address": LOCALHOST, "listen_port": 0}
            busy = DiscoveryConfig(address=(LOCALHOST, taken), **settings)
            with pytest.raises(NetworkError) as error:
                await open_discovery(busy, wire=sealed_wire())
            assert isinstance(error.value.__cause__, OSError)
            assert isinstance(error.value, OSError)
            # The listening socket is the one taken: the unicast one is not left bound.
            port = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            port.bind((LOCALHOST, 0))
            free = port.getsockname()[1]
            port.close()
            squatted = DiscoveryConfig(address=(LOCALHOST, free), broadcast_address=LOCALHOST,
                                       listen_port=taken)  # fmt: skip
            with pytest.raises(NetworkError):
                await open_discovery(squatted, wire=sealed_wire())
        async with open_discovery(squatted, wire=sealed_wire()) as node:
            assert node.address == (LOCALHOST, free)

    run(main())


def test_the_configuration_says_where_the_node_lives(run: Runner) -> None:
    with pytest.raises(ConfigError, match="address"):
        DiscoveryConfig()
    with pytest.raises(ConfigError, match="port"):
        DiscoveryConfig(address="127.0.0.1:70000")
    assert DiscoveryConfig(address="10.0.0.1").address == ("10.0.0.1", 21450)
    assert DiscoveryConfig(address="10.0.0.1:7").address == ("10.0.0.1", 7)
    assert interface_addresses("lo")[0] == LOCALHOST

    async def main() -> None:
        with pytest.raises(ConfigError, match="broadcast"):
            await open_discovery(DiscoveryConfig(address=LOCALHOST), wire=sealed_wire())
        with pytest.raises(ConfigError, match="no-such-if0"):
            await open_discovery(DiscoveryConfig(interface="no-such-if0"), wire=sealed_wire())
        with pytest.raises(ConfigError, match="wire"):
            open_discovery(config(), wire=None)  # type: ignore[arg-type]

    run(main())


def test_an_opening_opens_once_and_a_node_not_open_refuses(run: Runner) -> None:
    async def main() -> None:
        opening = open_discovery(config(), wire=sealed_wire())
        node = await opening
        try:
            with pytest.raises(LocalProtocolError):
                await opening
        finally:
            await node.close()
        unopened = Discovery(config(), wire=sealed_wire(), tracer=None, rng=None, faults=None)
        with pytest.raises(LocalProtocolError):
            unopened.peers()
        with pytest.raises(LocalProtocolError):
            await unopened.send(b"x", to=(LOCALHOST, 1))

    run(main())
