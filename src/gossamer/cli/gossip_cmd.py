"""``gossamer gossip``: run one Chatter broadcast node (``gossamer.open_gossip``).

    CHATTER_KEY=... gossamer gossip --my-addr 10.77.1.10 --peers 10.77.1.11,10.77.2.10 \\
        --announce 4 --broadcast "hello" --at 2.5 --duration 5 --out traces/

Configuration comes from Chatter's environment variables, read by ``GossipConfig.from_env``
(``CHATTER_ADDRESS``, ``CHATTER_PORT``, ``CHATTER_MULTICAST_ADDRESS``,
``CHATTER_MULTICAST_PORT``, ``CHATTER_MULTICAST_TTL``, ``CHATTER_KEY``, ``CHATTER_WIRE``,
``CHATTER_CLUSTER``); flags, named after ``GossipConfig``'s parameters (``--my-addr`` is
``my_addr``), override them. There is no default key.

Payloads are text (type ``text``). Every delivery is printed on standard output as one line::

    deliver MSG via=multicast hop=2 from=10.77.1.10:29999 text=hello

Timeline (seconds after ``--start-at``, a wall-clock time shared by every node of a test, or
after start-up): ``--announce N`` broadcasts to nobody (multicast only, so that the LAN
learns who hears whom) ``--announce-interval`` apart; ``--broadcast TEXT`` at ``--at`` to
every peer of ``--peers``; exit at ``--duration`` (or on SIGTERM/SIGINT). Traces go to
``--out``/<node>.jsonl.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import os
import signal
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from gossamer.addresses import format_address, parse_address
from gossamer.aio.addresses import resolve
from gossamer.aio.gossip import Gossip, open_gossip
from gossamer.aio.loop import run as run_loop
from gossamer.cli.command import Command
from gossamer.cli.config_options import Option, add_options, given
from gossamer.cli.wire_args import read_key_file
from gossamer.proto.gossip import Delivered, GossipConfig, text_handler
from gossamer.trace.sink import JsonlSink, NullSink, Tracer, TraceSink
from gossamer.wire.mode import WIRE_CHOICES, parse_wire

__all__ = ["COMMAND", "configure", "main", "run"]


#: The ``GossipConfig`` parameters the command sets, as ``--name-with-dashes``:
#: ``(name, type, help)``. Unset, they come from the environment (``from_env``).
_OPTIONS: tuple[Option, ...] = (
    ("my_addr", str, "this node's IPv4 address or host name (default: CHATTER_ADDRESS)"),
    ("my_port", int, "TCP port (default: CHATTER_PORT or 29999)"),
    ("multicast_addr", str, "multicast group (default 224.1.1.1)"),
    ("multicast_port", int, "multicast port (default 29999)"),
    ("multicast_ttl", int, "multicast TTL (default 4)"),
    ("connect_timeout", float, "seconds to wait for a TCP connection (2)"),
    ("ack_timeout", float, "seconds a next hop has to acknowledge (1)"),
)


def configure(p: argparse.ArgumentParser) -> None:
    """Add the command's options to ``p``."""
    add_options(p, _OPTIONS)
    p.add_argument(
        "--wire",
        choices=WIRE_CHOICES,
        help="sealed (default: the envelope) or original (Chatter's own bytes); CHATTER_WIRE",
    )
    p.add_argument(
        "--key-file",
        type=Path,
        metavar="PATH",
        help="the group key (default: CHATTER_KEY); as for every command's --key-file",
    )
    p.add_argument("--no-multicast", action="store_true", help="TCP tree only")
    p.add_argument(
        "--peers", default="", help="comma-separated HOST or HOST:PORT of the other nodes"
    )
    p.add_argument("--announce", type=int, default=0, help="multicast-only announcements")
    p.add_argument("--announce-interval", type=float, default=0.5, metavar="SECONDS")
    p.add_argument("--broadcast", help="text to broadcast to every peer")
    p.add_argument("--at", type=float, default=1.0, metavar="SECONDS", help="when to broadcast")
    p.add_argument("--count", type=int, default=1, help="how many broadcasts (1 s apart)")
    p.add_argument("--start-at", type=float, metavar="EPOCH", help="wall-clock time of t=0")
    p.add_argument("--duration", type=float, metavar="SECONDS", help="exit after this long")
    p.add_argument("--out", type=Path, help="write traces to OUT/<node>.jsonl")
    p.add_argument("--run", default="gossip", help="run id in the traces")


def _config(args: argparse.Namespace, environ: Mapping[str, str]) -> GossipConfig:
    overrides = given(args, _OPTIONS)
    if args.wire is not None:
        overrides["wire"] = parse_wire(args.wire, setting="--wire")
    if args.key_file is not None:
        overrides["key"] = read_key_file(args.key_file)
    if args.no_multicast:
        overrides["multicast"] = False
    return GossipConfig.from_env(environ, **overrides)


def _peers(text: str, port: int) -> list[str]:
    """``--peers`` items as ``host:port`` (``port``, this node's, when an item has none)."""
    peers = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        host, port_given = parse_address(item, default_port=port)
        peers.append(format_address((host, port_given)))
    return peers


def _show(event: Delivered) -> None:
    hop = "?" if event.hop is None else str(event.hop)
    text = str(event.data[1]) if isinstance(event.data, tuple) else repr(event.data)
    print(
        f"deliver {event.msg} via={event.via} hop={hop} from={event.sender} text={text}",
        flush=True,
    )


async def _print_deliveries(node: Gossip) -> None:
    async for event in node:
        _show(event)


async def _serve(args: argparse.Namespace, config: GossipConfig) -> int:
    peers = _peers(args.peers, config.my_port)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    sink: TraceSink = NullSink()
    # The trace is named for the NetID, as its peers name this node.
    host = (await resolve((config.my_addr, config.my_port), ipv6=False))[0]
    config = dataclasses.replace(config, my_addr=host)
    name = f"{host}:{config.my_port}"
    if args.out is not None:
        sink = JsonlSink(args.out / f"{name}.jsonl")
    tracer = Tracer(sink, run=args.run, node=name)
    node = await open_gossip(config, handlers=[text_handler()], tracer=tracer)
    printer = loop.create_task(_print_deliveries(node))
    print(f"listening {node.netid} multicast={config.multicast}", flush=True)
    origin = time.time() if args.start_at is None else args.start_at

    async def at(offset: float) -> None:
        delay = origin + offset - time.time()
        if delay > 0:
            await asyncio.sleep(delay)

    async def timeline() -> None:
        for k in range(args.announce):
            await at(k * args.announce_interval)
            await node.send(("text", f"announce {k}"), to=[])
        if args.broadcast is not None:
            for k in range(args.count):
                await at(args.at + k)
                msg = await node.send(("text", args.broadcast), to=peers)
                print(f"broadcast {msg}", flush=True)
        if args.duration is not None:
            await at(args.duration)
            stop.set()

    task = asyncio.create_task(timeline())
    try:
        await stop.wait()
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await node.close()
        await printer  # what arrived before the close is printed, then it ends
        if isinstance(sink, JsonlSink):
            sink.close()
    return 0


def run(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> int:
    """Run the node until ``--duration`` or a signal; returns the exit code."""
    config = _config(args, os.environ if environ is None else environ)
    config.require_key()  # before any socket or trace file exists
    code: int = run_loop(_serve(args, config))
    return code


COMMAND = Command("gossip", __doc__, configure, run)
main = COMMAND.main


if __name__ == "__main__":
    sys.exit(main())
