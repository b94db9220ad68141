"""``gossamer ping``: the demonstration core over real UDP, with optional faults.

``serve`` answers pings; ``send`` pings one or more servers and reports round
trips. Both can write a trace (``--trace DIR``) that ``gossamer trace summary``
reads, and ``send`` can inject faults on its socket (``--drop``, ``--dup``,
``--delay``) to show retransmission at work on a real network.

Addresses are ``HOST:PORT``; host names (``localhost``) resolve to IPv4. ``send`` never
waits silently: it says whom it pings, and a server that has answered nothing when its
first ping is given up (``--timeout`` doubled over ``--retries`` retransmissions), or that
refuses at once (ICMP port unreachable, reported for a single server), ends it with a
one-line error and exit code 1.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import socket
import statistics
import sys
from pathlib import Path
from typing import Any

from gossamer._types import Address
from gossamer.addresses import format_address, parse_address
from gossamer.aio.addresses import resolve
from gossamer.aio.datagram import open_datagram
from gossamer.aio.faults import FaultInjector
from gossamer.aio.loop import loop_name, run
from gossamer.aio.sockets import udp_socket
from gossamer.errors import ConfigError, NetworkError
from gossamer.faults import FaultPlan
from gossamer.proto.ping import PingConfig, PingCore, PingLost, PongReceived
from gossamer.trace import JsonlSink, NullSink, Tracer, TraceSink


def host_port(text: str) -> Address:
    """``HOST:PORT`` -> ``(host, port)`` (``gossamer.addresses.parse_address``, the port
    required); ``argparse.ArgumentTypeError`` with the reason otherwise."""
    try:
        return parse_address(text)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(f"{text!r} is not HOST:PORT: {exc.reason}") from None


def add_parser(commands: Any) -> None:
    p = commands.add_parser("ping", help="ping/pong over real UDP (the demonstration core)")
    sub = p.add_subparsers(
        dest="ping_command", metavar="SUBCOMMAND", required=True, parser_class=type(p)
    )
    serve = sub.add_parser("serve", help="answer pings")
    serve.add_argument("--bind", type=host_port, required=True, metavar="HOST:PORT")
    serve.add_argument(
        "--duration",
        type=float,
        default=None,
        metavar="SECONDS",
        help="stop after this long (default: until interrupted)",
    )
    _common(serve, node="server")
    serve.set_defaults(handler=lambda args: run(_serve(args)))

    send = sub.add_parser("send", help="ping servers and report round trips")
    send.add_argument(
        "--to",
        type=host_port,
        action="append",
        required=True,
        metavar="HOST:PORT",
        help="a server (repeatable)",
    )
    send.add_argument("--bind", type=host_port, default=("127.0.0.1", 0), metavar="HOST:PORT")
    send.add_argument("--count", type=int, default=10)
    send.add_argument("--interval", type=float, default=0.05)
    send.add_argument("--timeout", type=float, default=0.1, help="first retransmission timeout")
    send.add_argument("--retries", type=int, default=6)
    send.add_argument("--drop", type=float, default=0.0, help="drop this share of our datagrams")
    send.add_argument("--dup", type=float, default=0.0, help="duplicate this share")
    send.add_argument("--delay", type=float, default=0.0, metavar="MS", help="extra delay, uniform")
    send.add_argument("--seed", type=int, default=0, help="seed of the fault injector")
    _common(send, node="client")
    send.set_defaults(handler=lambda args: run(_send(args)))


def _common(p: argparse.ArgumentParser, *, node: str) -> None:
    p.add_argument("--node", default=node, help=f"node id in traces (default {node})")
    p.add_argument(
        "--trace",
        type=Path,
        default=None,
        metavar="DIR",
        help="write this node's trace to DIR/<node>.jsonl",
    )
    p.add_argument("--run", default="ping", help="run id in traces")


def _sink(args: argparse.Namespace) -> TraceSink:
    if args.trace is None:
        return NullSink()
    return JsonlSink(args.trace / f"{args.node}.jsonl")


def _bound(address: Address) -> socket.socket:
    try:
        return udp_socket(*address)
    except OSError as exc:
        where = format_address(address)
        raise NetworkError(f"cannot bind {where}: {exc.strerror}", address=where) from exc


async def _serve(args: argparse.Namespace) -> int:
    tracer = Tracer(_sink(args), run=args.run, node=args.node)
    core = PingCore(PingConfig(node_id=args.node, count=0), tracer=tracer, rng=random.Random(0))
    bind = await resolve(args.bind, ipv6=False)
    driver = await open_datagram(core, _bound(bind), tracer=tracer)
    host, port = driver.local_address
    print(f"answering pings on {host}:{port} ({loop_name()} loop)", file=sys.stderr, flush=True)
    try:
        await asyncio.sleep(args.duration if args.duration is not None else float("inf"))
    finally:
        driver.close()
        await driver.wait_closed()
        print(f"answered {core.counters.received} pings", file=sys.stderr)
    return 0


async def _send(args: argparse.Namespace) -> int:
    tracer = Tracer(_sink(args), run=args.run, node=args.node)
    targets = [(format_address(a), await resolve(a, ipv6=False)) for a in args.to]
    config = PingConfig(
        node_id=args.node,
        targets=targets,
        count=args.count,
        interval=args.interval,
        timeout=args.timeout,
        max_retries=args.retries,
    )
    loop = asyncio.get_running_loop()
    core = PingCore(config, tracer=tracer, rng=random.Random(args.seed))
    plan = FaultPlan(drop=args.drop, duplicate=args.dup, delay=args.delay / 1000.0)
    faults = (
        None if plan.is_clean else FaultInjector(plan, rng=random.Random(args.seed), tracer=tracer)
    )
    done = loop.create_future()
    rtts: list[float] = []
    answered: set[str] = set()
    lost = 0
    failure: str | None = None

    def on_event(event: object) -> None:
        nonlocal lost, failure
        if isinstance(event, PongReceived):
            rtts.append(event.rtt)
            answered.add(event.peer)
            print(f"pong from {event.peer} seq={event.seq} rtt={event.rtt * 1000:.3f} ms")
        elif isinstance(event, PingLost):
            lost += 1
            print(f"ping to {event.peer} seq={event.seq} lost after {args.retries} retries")
            if event.peer not in answered and failure is None:
                # A server that never answered will not answer the rest either.
                waited = args.timeout * (2 ** (args.retries + 1) - 1)
                failure = f"no answer from {_named(event.peer, targets)} within {waited:g} s"
        if (core.done or failure is not None) and not done.done():
            done.set_result(None)

    bind = await resolve(args.bind, ipv6=False)
    sock = _bound(bind)
    if len(targets) == 1:
        # Connected, the socket hears ICMP port unreachable: a refusal ends it at once.
        try:
            sock.connect(targets[0][1])
        except OSError as exc:
            sock.close()
            raise NetworkError(f"cannot reach {targets[0][0]}: {exc.strerror}") from exc
    for name, _ in targets:
        print(f"pinging {_named(name, targets)}", file=sys.stderr, flush=True)
    driver = await open_datagram(core, sock, on_event=on_event, faults=faults, tracer=tracer)
    try:
        while not done.done():
            await asyncio.wait([done], timeout=0.05)
            if failure is None and isinstance(driver.last_error, ConnectionRefusedError):
                failure = f"{_named(targets[0][0], targets)} refused (nothing listens there)"
                break
    finally:
        driver.close()
        await driver.wait_closed()
    if failure is not None:
        lost = args.count - len(rtts)
    p50 = statistics.median(rtts) * 1000 if rtts else float("nan")
    injected = ", ".join(f"{k} {v}" for k, v in sorted((faults.counts if faults else {}).items()))
    print(
        f"{len(rtts)} answered, {lost} lost, {core.counters.retransmitted} retransmissions, "
        f"rtt p50 {p50:.3f} ms; faults injected: {injected or 'none'}"
    )
    if failure is not None:
        print(f"gossamer ping: error: {failure}", file=sys.stderr)
    return 0 if lost == 0 else 1


def _named(peer: str, targets: list[tuple[str, Address]]) -> str:
    """``peer`` as written, with the address it resolved to when that differs."""
    for name, address in targets:
        if name == peer and format_address(address) != name:
            return f"{name} ({format_address(address)})"
    return peer
