"""``gossamer gateway``: run a 신경-compatible websocket gateway.

    gossamer gateway [--host 127.0.0.1] [--port 4567] [--password SECRET] [--data DIR]
                     [--heartbeat-interval MS] [--tls-cert F --tls-key F] [--trace DIR]

Serves ``/gateway/websocket?encoding=json|msgpack|etf`` and the HTTP API on one port
(``docs/gateway.md``). The password may also come from the environment
(``GOSSAMER_GATEWAY_PASSWORD``, or ``AUTH`` as the reference server reads it); without
one every client is normal. Queues are durable in ``DIR/queues.sqlite3`` (SQLite, WAL)
unless ``--memory`` is given. ``--port 0`` picks a free port. The process prints one
line ``gossamer gateway listening on HOST:PORT`` on standard output once it accepts
connections, and on SIGTERM or SIGINT says goodbye (op 7) to every client and exits 0.

``--list-dead-letters [QUEUE]`` prints the dead letters stored in ``--data`` as JSON
lines and exits (replay them through ``POST /api/v1/queues/<queue>/dead/replay`` on the
running gateway).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import ssl
import sys
from pathlib import Path

import orjson

from gossamer.addresses import format_address
from gossamer.aio.gateway_server import open_gateway_server
from gossamer.aio.loop import run as run_loop
from gossamer.cli.command import Command
from gossamer.errors import ConfigError
from gossamer.proto.gateway.core import GatewayConfig
from gossamer.proto.gateway.queues import QueueConfig
from gossamer.store.queues import SqliteQueueStore
from gossamer.trace.sink import JsonlSink, Tracer

__all__ = ["COMMAND", "main", "run"]

PASSWORD_ENV = ("GOSSAMER_GATEWAY_PASSWORD", "AUTH")


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=4567, help="port (default 4567; 0 = any free)")
    p.add_argument(
        "--password",
        default=None,
        help="clients without it are restricted (default: $GOSSAMER_GATEWAY_PASSWORD or $AUTH)",
    )
    p.add_argument(
        "--data",
        type=Path,
        default=Path("gateway-data"),
        help="directory of the durable queue store (default ./gateway-data)",
    )
    p.add_argument("--memory", action="store_true", help="keep queues in memory only")
    p.add_argument(
        "--fsync",
        action="store_true",
        help="fsync every queue commit (survives power loss, not only a process crash)",
    )
    p.add_argument(
        "--heartbeat-interval",
        type=int,
        default=45_000,
        metavar="MS",
        help="heartbeat interval sent in hello (default 45000)",
    )
    p.add_argument("--ack-timeout", type=float, default=15.0, metavar="SECONDS",
                   help="queue ack timeout before redelivery (default 15)")
    p.add_argument("--max-attempts", type=int, default=5,
                   help="deliveries before a queued message is dead-lettered (default 5)")
    p.add_argument("--tls-cert", type=Path, help="PEM certificate (chain) for TLS")
    p.add_argument("--tls-key", type=Path, help="PEM private key for TLS")
    p.add_argument("--trace", type=Path, help="write layer=gateway trace events to DIR")
    p.add_argument("--run", default="gateway", help="run id of the trace events")
    p.add_argument("--node", default="gateway", help="node id of the trace events")
    p.add_argument(
        "--list-dead-letters",
        nargs="?",
        const="",
        default=None,
        metavar="QUEUE",
        help="print the dead letters stored in --data (of QUEUE, or all) and exit",
    )


def _password(args: argparse.Namespace) -> str | None:
    if args.password is not None:
        return str(args.password)
    for name in PASSWORD_ENV:
        value = os.environ.get(name)
        if value:
            return value
    return None


def _tls(args: argparse.Namespace) -> ssl.SSLContext | None:
    if args.tls_cert is None and args.tls_key is None:
        return None
    if args.tls_cert is None or args.tls_key is None:
        raise ConfigError("--tls-cert and --tls-key go together")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(str(args.tls_cert), str(args.tls_key))
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"cannot load the TLS certificate or key: {exc}") from None
    return context


def run(args: argparse.Namespace) -> int:
    if args.list_dead_letters is not None:
        with SqliteQueueStore(args.data) as offline:
            for record in offline.dead_letters(args.list_dead_letters or None):
                line = {
                    "id": record.id,
                    "queue": record.queue,
                    "attempts": record.attempts,
                    "reason": record.reason,
                    "nonce": record.nonce,
                    "payload": record.payload,
                }
                sys.stdout.write(orjson.dumps(line).decode() + "\n")
        return 0
    if not 0 <= args.port < 65536:
        raise ConfigError("--port must be 0..65535")
    config = GatewayConfig(
        node_id=args.node,
        heartbeat_interval_ms=args.heartbeat_interval,
        password=_password(args),
        queues=QueueConfig(ack_timeout=args.ack_timeout, max_attempts=args.max_attempts),
    )
    context = _tls(args)
    store: SqliteQueueStore | None = None
    if not args.memory:
        store = SqliteQueueStore(args.data, synchronous="FULL" if args.fsync else "NORMAL")
    sink = None if args.trace is None else JsonlSink(args.trace / f"{args.node}.jsonl")
    tracer = None if sink is None else Tracer(sink, run=args.run, node=args.node)
    try:
        return run_loop(_serve(args, config, context, store, tracer))
    finally:
        if store is not None:
            store.close()
        if sink is not None:
            sink.close()


async def _serve(
    args: argparse.Namespace,
    config: GatewayConfig,
    context: ssl.SSLContext | None,
    store: SqliteQueueStore | None,
    tracer: Tracer | None,
) -> int:
    server = await open_gateway_server(
        config, host=args.host, port=args.port, ssl=context, store=store, tracer=tracer
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    restored = server.core.restored if server.core is not None else 0
    scheme = "ssingyeong" if context else "singyeong"
    print(
        f"gossamer gateway listening on {format_address(server.address)} "
        f"({scheme}, {restored} queued messages restored)",
        flush=True,
    )
    try:
        await stop.wait()
    finally:
        await server.close()
    return 0


COMMAND = Command("gateway", __doc__, configure, run)
main = COMMAND.main


if __name__ == "__main__":
    sys.exit(main())
