"""gossamer.aio.discovery on real sockets on 127.0.0.1, with no broadcast at all.

Nothing may be broadcast in the machine's own namespace, so here each node's
``broadcast_address`` is 127.0.0.1 and its ``broadcast_port`` is the *other*
node's listening port (``listen_port``): the ``pelotari?`` reaches exactly one
peer by unicast, and everything else is the real protocol on real sockets.
Real broadcast (several nodes per host, five hosts on a bridge) is tested
inside network namespaces in ``tests/netns/test_discovery_hosts.py``.

Every test runs on uvloop and on the default loop; timing assertions are bounds
on protocol timers (tens of milliseconds here), never on speed.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import pytest

from gossamer.aio.discovery import DiscoveryNode, DiscoveryOptions, interface_addresses
from gossamer.errors import ConfigError, LocalProtocolError
from gossamer.proto.discovery import DataReceived, PeerDown, PeerUp
from gossamer.testing import free_ports, sealed_wire
from gossamer.testing.aio import Runner
from gossamer.trace import MemorySink

LOCALHOST = "127.0.0.1"
TIMERS: dict[str, Any] = {
    "broadcast_interval": 0.1,
    "inactive_time": 0.3,
    "heartbeat_wait": 0.15,
    "handshake_timeout": 0.2,
}


def linked_pair(**timers: Any) -> tuple[DiscoveryOptions, DiscoveryOptions]:
    """Options for two nodes whose "broadcasts" reach each other by unicast."""
    port_a, port_b, listen_a, listen_b = free_ports(4)
    settings = {**TIMERS, "wire": sealed_wire(), **timers}
    a = DiscoveryOptions(address=LOCALHOST, port=port_a, broadcast_address=LOCALHOST,
                         broadcast_port=listen_b, listen_port=listen_a, **settings)  # fmt: skip
    b = DiscoveryOptions(address=LOCALHOST, port=port_b, broadcast_address=LOCALHOST,
                         broadcast_port=listen_a, listen_port=listen_b, **settings)  # fmt: skip
    return a, b


async def next_event(node: DiscoveryNode, kind: type, timeout: float = 5.0) -> Any:
    async with asyncio.timeout(timeout):
        async for event in node.peer_events():
            if isinstance(event, kind):
                return event
    raise AssertionError("the node stopped first")


def test_two_nodes_discover_each_other_and_exchange_data(run: Runner) -> None:
    async def main() -> None:
        options_a, options_b = linked_pair()
        seen: list[object] = []
        sink = MemorySink()
        async with DiscoveryNode(options_a, on_peer=seen.append, sink=sink) as a, \
                DiscoveryNode(options_b) as b:  # fmt: skip
            up = await next_event(a, PeerUp)
            assert up == PeerUp(peer=b.address, name=f"{LOCALHOST}:{options_b.port}")
            await next_event(b, PeerUp)
            assert a.peers() == [b.address] and b.peers() == [a.address]
            assert seen == [up]  # the callback saw it too
            a.send(b.address, b"to b")
            assert await asyncio.wait_for(b.receive(), 5) == DataReceived(
                peer=a.address, name=f"{LOCALHOST}:{options_a.port}", payload=b"to b"
            )
            assert b.send_to_peers(b"to all") == 1
            assert (await asyncio.wait_for(a.receive(), 5)).payload == b"to all"
            with pytest.raises(LocalProtocolError):
                a.send((LOCALHOST, 9), b"not a peer")
        kinds = {(e.kind, e.attrs.get("type")) for e in sink.events}
        assert {("peer_up", None), ("send", "data"), ("recv", "data")} <= kinds
        # Whoever broadcast first, a saw or sent a pelotari? (it may finish inside its jitter).
        assert kinds & {("send", "pelotari?"), ("recv", "pelotari?")}
        assert {e.layer for e in sink.events} <= {"discovery", "net"}

    run(main())


def test_clean_stop_removes_at_once_and_ends_the_streams(run: Runner) -> None:
    async def main() -> None:
        options_a, options_b = linked_pair(inactive_time=30.0)  # no heartbeat could do it
        async with DiscoveryNode(options_a) as a:
            b = DiscoveryNode(options_b)
            await b.start()
            await next_event(a, PeerUp)
            async with asyncio.timeout(5):
                while not b.peers():  # b registers a when a's dale! arrives
                    await asyncio.sleep(0.005)
            loop = asyncio.get_running_loop()
            stopped_at = loop.time()
            await b.stop()
            down = await next_event(a, PeerDown, timeout=2.0)
            assert down.reason == "leave" and not down.local and down.peer == b.address
            assert loop.time() - stopped_at < 2.0
            # b's own view: its peer left locally, and its streams ended.
            events = [e async for e in b.peer_events()]
            assert [type(e) for e in events] == [PeerUp, PeerDown]
            assert isinstance(events[1], PeerDown) and events[1].local
            with pytest.raises(LocalProtocolError):
                await b.receive()
            await b.stop()  # idempotent

    run(main())


def test_a_crashed_node_is_removed_by_heartbeat(run: Runner) -> None:
    async def main() -> None:
        options_a, options_b = linked_pair()
        async with DiscoveryNode(options_a) as a:
            b = DiscoveryNode(options_b)
            await b.start()
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


def test_options_must_say_where_the_node_lives() -> None:
    with pytest.raises(ConfigError, match="address"):
        DiscoveryOptions().resolve()
    with pytest.raises(ConfigError, match="broadcast"):
        DiscoveryOptions(address=LOCALHOST).resolve()
    with pytest.raises(ConfigError, match="no-such-if0"):
        DiscoveryOptions(interface="no-such-if0").resolve()
    assert interface_addresses("lo")[0] == LOCALHOST


def test_not_started_and_started_twice(run: Runner) -> None:
    async def main() -> None:
        options, _ = linked_pair()
        node = DiscoveryNode(options)
        with pytest.raises(LocalProtocolError):
            node.peers()
        with pytest.raises(LocalProtocolError):
            node.send((LOCALHOST, 1), b"x")
        await node.start()
        try:
            with pytest.raises(LocalProtocolError):
                await node.start()
        finally:
            await node.stop()

    run(main())


def test_port_in_use_is_an_os_error_and_leaks_nothing(run: Runner) -> None:
    async def main() -> None:
        options, _ = linked_pair()
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as squatter:
            squatter.bind((LOCALHOST, options.port))
            with pytest.raises(OSError):
                await DiscoveryNode(options).start()
        # The listening port was not left bound by the failed start.
        async with DiscoveryNode(options) as node:
            assert node.address == (LOCALHOST, options.port)

    run(main())
