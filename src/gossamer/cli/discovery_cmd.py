"""``gossamer discovery``: run one Prototari node (the lab's discovery role).

The node runs until SIGTERM or SIGINT (a clean stop: ``agur!`` to every peer)
or until ``--duration`` passes; SIGKILL is a crash. It prints one JSON object
per line on stdout, flushed at once, so a supervising process (the lab, a test)
can follow it::

    {"event": "ready", "node": "10.77.1.10:21450", "t": 12.5}
    {"event": "peer_up", "peer": "10.77.1.11:21450", "reason": "handshake", "t": 12.9}
    {"event": "data", "peer": "10.77.1.11:21450", "size": 18, "t": 13.4}
    {"event": "peer_down", "peer": "10.77.1.11:21450", "reason": "heartbeat", "t": 20.1}
    {"event": "stopped", "peers": 0, "counters": {...}, "t": 30.0}

``t`` is ``time.monotonic()`` (seconds), the clock of the trace written with
``--trace``. Where the node lives is always given: ``--interface`` or ``--address``
with ``--broadcast-address``. The protocol's options are ``DiscoveryConfig``'s parameters
by the same names and units (``--broadcast-interval`` is ``broadcast_interval``, seconds).

The wire is sealed by default (``--key-file`` or ``GOSSAMER_KEY`` gives the group key);
``--wire original`` speaks the Go original's plaintext, with its identity rules: a peer
is its IP, whatever port it sends from (``docs/interop.md``).

Also runnable as ``python -m gossamer.cli.discovery_cmd ARGS``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import random
import signal
import sys
import time
from pathlib import Path
from typing import Any

import orjson

from gossamer.aio.addresses import resolve
from gossamer.aio.discovery import Discovery, PeerEvent, interface_addresses, open_discovery
from gossamer.aio.loop import run as run_loop
from gossamer.cli.command import Command
from gossamer.cli.config_options import Option, add_options, given
from gossamer.cli.wire_args import add_wire_arguments, wire_from_args
from gossamer.errors import ConfigError, NetworkError
from gossamer.proto.discovery import DiscoveryConfig, PeerDown
from gossamer.trace.sink import JsonlSink, NullSink, Tracer, TraceSink

__all__ = ["COMMAND", "configure", "main", "run"]


#: The ``DiscoveryConfig`` parameters the command sets, as ``--name-with-dashes``:
#: ``(name, type, help)``. Defaults are the configuration's.
_OPTIONS: tuple[Option, ...] = (
    ("interface", str, "network device: address and broadcast address from it"),
    ("address", str, "this node's IPv4 address or host name (its identity with --port)"),
    ("broadcast_address", str, "broadcast address (default: the interface's)"),
    ("port", int, "unicast port (default 21450)"),
    ("broadcast_port", int, "broadcast port (default 21451)"),
    ("max_peers", int, "peers at most (default 64)"),
    ("broadcast_interval", float, "seconds between broadcasts (5)"),
    ("inactive_time", float, "seconds of silence before a heartbeat (10)"),
    ("heartbeat_wait", float, "seconds to wait for a heartbeat answer (1)"),
    ("heartbeat_attempts", int, "heartbeats sent per wait (3)"),
    ("node_id", str, "node id in traces (default ADDRESS:PORT)"),
)


def configure(p: argparse.ArgumentParser) -> None:
    """Add the command's options to ``p``."""
    add_options(p, _OPTIONS)
    p.add_argument("--trace", type=Path, help="append trace events to this JSON-lines file")
    p.add_argument("--run", default="discovery", help="run id written into trace events")
    p.add_argument("--duration", type=float, help="stop cleanly after this many seconds")
    p.add_argument(
        "--send-every",
        type=float,
        metavar="SECONDS",
        help="send a datagram to every peer this often (exercises delivery)",
    )
    p.add_argument("--seed", type=int, help="seed for the first-broadcast jitter")
    add_wire_arguments(p)


def _emit(record: dict[str, Any]) -> None:
    sys.stdout.buffer.write(orjson.dumps(record) + b"\n")
    sys.stdout.buffer.flush()


def _peer_record(event: PeerEvent, now: float) -> dict[str, Any]:
    record: dict[str, Any] = {
        "event": "peer_down" if isinstance(event, PeerDown) else "peer_up",
        "peer": event.name,
        "reason": event.reason,
        "t": now,
    }
    if isinstance(event, PeerDown) and event.local:
        record["local"] = True
    return record


def _config(args: argparse.Namespace) -> DiscoveryConfig:
    return DiscoveryConfig(**given(args, _OPTIONS))


async def _serve(args: argparse.Namespace) -> int:
    config = _config(args)
    loop = asyncio.get_running_loop()
    jsonl = JsonlSink(args.trace) if args.trace is not None else None
    sink: TraceSink = NullSink() if jsonl is None else jsonl
    node_id = config.node_id
    if node_id is None:  # named as the driver names it: ip:port
        where = config.address
        if where is None:
            assert config.interface is not None
            where = (interface_addresses(config.interface)[0], config.port)
        host, port = await resolve(where, ipv6=False)
        node_id = f"{host}:{port}"
        config = dataclasses.replace(config, node_id=node_id)
    done = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, done.set)
    node: Discovery | None = None
    try:
        node = await open_discovery(
            config,
            wire=wire_from_args(args),
            tracer=Tracer(sink, run=args.run, node=node_id),
            rng=random.Random(args.seed),
        )
        ip, port = node.address
        _emit({"event": "ready", "node": f"{ip}:{port}", "t": time.monotonic()})
        follow = loop.create_task(_follow(node))
        tasks = [loop.create_task(_read_data(node))]
        if args.send_every:
            tasks.append(loop.create_task(_chat(node, args.send_every)))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(done.wait(), timeout=args.duration)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await node.close()
        await follow  # the peer events end with the node, its leave included
        counters = {
            key: value for key, value in dataclasses.asdict(node.core.counters).items() if value
        }
        _emit({"event": "stopped", "peers": len(node.peers()), "counters": counters,
               "t": time.monotonic()})  # fmt: skip
    finally:
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)
        if node is not None:
            node.abort()
        if jsonl is not None:
            jsonl.close()
    return 0


async def _follow(node: Discovery) -> None:
    async for event in node.events():
        _emit(_peer_record(event, time.monotonic()))


async def _read_data(node: Discovery) -> None:
    async for message in node:
        record = {"event": "data", "peer": message.name, "size": len(message.data)}
        _emit({**record, "t": time.monotonic()})


async def _chat(node: Discovery, period: float) -> None:
    ip, port = node.address
    count = 0
    while True:
        await asyncio.sleep(period)
        count += 1
        await node.send(f"{ip}:{port}/{count}".encode())


def run(args: argparse.Namespace) -> int:
    """The ``discovery`` subcommand's handler."""
    if args.interface is None and args.address is None:
        raise ConfigError("give --interface or --address (the node never guesses where it lives)")
    try:
        return run_loop(_serve(args))
    except NetworkError as exc:  # a port in use, an interface that is down
        print(f"gossamer discovery: error: {exc}", file=sys.stderr)
        return 1


COMMAND = Command("discovery", __doc__, configure, run)
main = COMMAND.main


if __name__ == "__main__":
    sys.exit(main())
