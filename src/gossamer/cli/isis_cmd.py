"""``gossamer isis``: run one member of an ISIS group, like the original program.

    gossamer isis --hostfile F --senders A,B --msg-count N --drop-rate P --ack-delay S \\
                  --initiate-snapshot-count K [--wire sealed|original] [--key-file KEY]

Every tunable of ``IsisConfig`` is an option of the same name and unit (seconds, bytes,
probabilities): ``--retransmit-initial``, ``--retransmit-max``, ``--drop-rate``,
``--ack-delay``, ``--batch-delay``, ``--batch-bytes``. The original's own spellings
(``--msgCount``, ``--dropRate``, ``--delay`` in milliseconds, ``--initiateSnapshotCount``,
``--v``) are accepted too, so its command lines run unchanged with ``--wire original``
(``docs/interop.md``). The default wire is sealed and needs the group key (``--key-file``
or ``GOSSAMER_KEY``).

Every host of the hostfile runs this command. A host named in ``--senders`` multicasts
the values 11, 12, ... (``i + 10`` for i = 1..N, as the original driver). Each delivery is
printed on standard output exactly as the original logs it::

    delivering dataMsg: type: 1, sender: S, msg_id: M, data: D, finalSeqId: F, finalSeqProposer: P

``--drop-rate`` drops received datagrams of every type, ``--ack-delay`` holds back a random
half of the Acks and SeqAcks (without stalling anything else); each such fault is
reported on standard error as the original does (``dropping AckMsg from: beta``,
``delaying messageType: SeqAckMsg by 2000ms``). ``--dup-rate`` and ``--reorder-rate``
add duplication and reordering of outgoing datagrams. With ``--initiate-snapshot-count K``
a sender starts a Chandy–Lamport snapshot right after queueing message K+1 (the
original's rule; a host that sends nothing starts it after K deliveries instead), and
``--snapshot-repeat R`` starts R of them, K messages apart. Each finished snapshot part
is written as JSON to ``--out``/snapshots/ and announced on standard output.

Like the original, the process runs until it is stopped (SIGTERM or SIGINT), unless
``--exit-after-idle SECONDS`` is given.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import signal
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import orjson

from gossamer.aio.faults import FaultInjector
from gossamer.aio.isis import IsisService, find_me, open_isis, resolve_members
from gossamer.aio.loop import run as run_loop
from gossamer.cli.command import Command
from gossamer.cli.wire_args import add_wire_arguments, wire_from_args
from gossamer.errors import ConfigError
from gossamer.faults import FaultPlan
from gossamer.params import parser_of
from gossamer.proto.isis import (
    TUNABLES,
    Delivered,
    IsisConfig,
    MemberRemoved,
    parse_hostfile,
    tunable_defaults,
)
from gossamer.proto.snapshot import SnapshotDone
from gossamer.trace.schema import TraceEvent
from gossamer.trace.sink import JsonlSink, NullSink, Tracer, TraceSink

__all__ = ["COMMAND", "configure", "main", "run"]

_REFUSALS_SHOWN = 5
_REFUSALS_EVERY = 1000
#: The original's spellings of tunables, and the factor from its unit to gossamer's.
_ORIGINAL_SPELLINGS: dict[str, tuple[str, float]] = {
    "drop_rate": ("--dropRate", 1.0),
    "ack_delay": ("--delay", 0.001),  # milliseconds in the original
}


def _scaled(factor: float) -> Any:
    def parse(text: str) -> float:
        return float(text) * factor

    return parse


def _shown(default: object) -> str:
    """A default as the option takes it: ``on``/``off`` for a flag."""
    if isinstance(default, bool):
        return "on" if default else "off"
    return str(default)


def _add_tunables(p: argparse.ArgumentParser) -> None:
    """One option per ``IsisConfig`` tunable: its name, unit and default."""
    for name, default in tunable_defaults().items():
        flag = "--" + name.replace("_", "-")
        # The unit, as TUNABLES states it first: "seconds ...", "bytes: ...", "on|off: ...".
        unit = TUNABLES[name].split()[0].rstrip(":").upper()
        p.add_argument(flag, type=parser_of(default), default=default, dest=name, metavar=unit,
                       help=f"{TUNABLES[name]} (default {_shown(default)})")  # fmt: skip
        original = _ORIGINAL_SPELLINGS.get(name)
        if original is not None:
            spelling, factor = original
            in_ms = factor != 1.0
            p.add_argument(spelling, type=_scaled(factor), dest=name,
                           metavar="MS" if in_ms else unit,
                           help=f"the original's spelling of {flag}"
                           + (", in milliseconds" if in_ms else ""))  # fmt: skip


def configure(p: argparse.ArgumentParser) -> None:
    """Add the command's options to ``p``."""
    p.add_argument(
        "--hostfile",
        type=Path,
        required=True,
        help="one member per line: HOST, HOST:PORT or NAME HOST:PORT",
    )
    p.add_argument("--me", help="this member's name or 1-based id (default: from the host)")
    p.add_argument("--senders", default="", help="comma-separated names of the sending members")
    p.add_argument(
        "--msg-count", "--msgCount", type=int, default=0, help="messages each sender multicasts"
    )
    _add_tunables(p)
    p.add_argument(
        "--initiate-snapshot-count",
        "--initiateSnapshotCount",
        type=int,
        default=0,
        metavar="K",
        help="start a snapshot after queueing message K+1 (0: never)",
    )
    p.add_argument(
        "--snapshot-repeat",
        type=int,
        default=1,
        metavar="R",
        help="with -K: start R snapshots, K messages apart (default 1)",
    )
    p.add_argument(
        "--dup-rate",
        type=float,
        default=0.0,
        help="probability that an outgoing datagram is duplicated",
    )
    p.add_argument(
        "--reorder-rate",
        type=float,
        default=0.0,
        help="probability that an outgoing datagram is held back 50 ms",
    )
    p.add_argument(
        "--interval",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="pause between a sender's multicasts (default 0, as the original)",
    )
    p.add_argument(
        "--v",
        type=int,
        default=0,
        metavar="LEVEL",
        help="the original's glog verbosity; accepted for its command lines, no effect",
    )
    add_wire_arguments(p)
    p.add_argument("--out", type=Path, help="directory for <name>.jsonl traces and snapshots/")
    p.add_argument("--run", default="isis", help="run id written into every trace event")
    p.add_argument(
        "--seed",
        type=int,
        default=11,
        help="seed of the fault draws, plus the member id (the original used 11)",
    )
    p.add_argument(
        "--exit-after-idle",
        type=float,
        default=None,
        metavar="SECONDS",
        help="exit once every expected message is delivered, nothing is left to "
        "retransmit and nothing happened (no datagram came either) for SECONDS",
    )


class _EchoSink:
    """Forwards events and prints the original's fault log lines on standard error.

    Datagrams refused for another reason than an injected fault (a stranger, a
    malformed datagram, an envelope that does not open) are reported there too, so
    that a member that hears nothing from part of its group says why: the first
    ``_REFUSALS_SHOWN`` of each reason, then every ``_REFUSALS_EVERY``-th with its count.
    """

    def __init__(self, inner: TraceSink) -> None:
        self.inner = inner
        self.refusals: Counter[str] = Counter()

    def emit(self, event: TraceEvent) -> None:
        self.inner.emit(event)
        reason = event.attrs.get("reason")
        if event.kind == "drop" and reason == "injected":
            print(f"dropping {event.attrs.get('type')} from: {event.peer}", file=sys.stderr)
        elif event.kind == "drop" and reason is not None:
            seen = self.refusals[reason] = self.refusals[reason] + 1
            if seen <= _REFUSALS_SHOWN or seen % _REFUSALS_EVERY == 0:
                print(f"refused a datagram from {event.peer}: {reason} (#{seen})",
                      file=sys.stderr)  # fmt: skip
        elif event.kind == "delay" and event.layer == "isis":
            print(
                f"delaying messageType: {event.attrs.get('type')} by {event.attrs.get('ms')}ms",
                file=sys.stderr,
            )


def _validate(args: argparse.Namespace) -> None:
    # The tunables are IsisConfig's to check; these are the command's own.
    for name in ("dup_rate", "reorder_rate"):
        if not 0.0 <= getattr(args, name) <= 1.0:
            raise ConfigError(f"--{name.replace('_', '-')} must be a probability in [0, 1]")
    for name in ("msg_count", "initiate_snapshot_count", "interval"):
        if getattr(args, name) < 0:
            raise ConfigError(f"--{name.replace('_', '-')} must not be negative")
    if args.snapshot_repeat < 1:
        raise ConfigError("--snapshot-repeat must be at least 1")
    if args.wire == "original":
        if args.snapshot_repeat > 1:
            raise ConfigError(
                "--snapshot-repeat is refused with --wire original: the original takes one "
                "snapshot per lifetime (its markers carry no snapshot id)"
            )
        if args.batch_delay:
            raise ConfigError(
                "--batch-delay is refused with --wire original (one message "
                "per datagram is all the original reads)"
            )


def run(args: argparse.Namespace) -> int:
    _validate(args)
    return run_loop(_main(args))


async def _main(args: argparse.Namespace) -> int:
    try:
        text = args.hostfile.read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read the hostfile: {exc}") from None
    wire = wire_from_args(args)
    members = await resolve_members(parse_hostfile(text))
    me = find_me(members, args.me)
    names = {m.name for m in members}
    senders = [s for s in args.senders.split(",") if s]
    for sender in senders:
        if sender not in names:
            raise ConfigError(f"--senders names {sender!r}, which is not in the hostfile")
    expected = len(set(senders)) * args.msg_count
    config = IsisConfig(
        wire=wire.mode,
        me=me.id,
        members=members,
        **{name: getattr(args, name) for name in TUNABLES},
    )
    inner_sink: JsonlSink | NullSink = NullSink()
    if args.out is not None:
        inner_sink = JsonlSink(args.out / f"{me.name}.jsonl")
    tracer = Tracer(_EchoSink(inner_sink), run=args.run, node=me.name)
    faults = None
    if args.dup_rate or args.reorder_rate:
        faults = FaultInjector(
            FaultPlan(duplicate=args.dup_rate, reorder=args.reorder_rate),
            rng=random.Random(args.seed * 7919 + me.id),
            tracer=tracer,
        )
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    state = {"delivered": 0, "last": loop.time(), "snapshots": 0}
    service: IsisService | None = None
    is_sender = me.name in senders
    every = args.initiate_snapshot_count

    def start_snapshot() -> None:
        if service is not None and state["snapshots"] < args.snapshot_repeat:
            state["snapshots"] += 1
            service.initiate_snapshot()

    def on_event(event: object) -> None:
        state["last"] = loop.time()
        if isinstance(event, Delivered):
            state["delivered"] += 1
            print(event.log_line(), flush=True)
            if not wire.sealed:
                # Where and how the original logs it: glog on standard error, so tools
                # written for the original (its test harness reads stderr and keeps the text
                # after the first "]") read gossamer members the same way.
                print(_glog_line(event.log_line()), file=sys.stderr, flush=True)
            if every and not is_sender and state["delivered"] % every == 0:
                loop.call_soon(start_snapshot)
        elif isinstance(event, SnapshotDone):
            _write_snapshot(args.out, event)
        elif isinstance(event, MemberRemoved):
            print(f"member {event.member} removed; view {list(event.view)}", file=sys.stderr)

    service = await open_isis(
        config,
        tracer=tracer,
        rng=random.Random(args.seed + me.id),
        faults=faults,
        on_event=on_event,
        wire=wire,
    )
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    print(
        f"member {me.id} ({me.name}) of {len(members)} listening on "
        f"{me.addr[0]}:{me.addr[1]}; expecting {expected} deliveries",
        file=sys.stderr,
        flush=True,
    )
    try:
        if is_sender:
            for i in range(1, args.msg_count + 1):
                await service.send(i + 10)  # the original's uint32 values
                # The original starts its snapshot when i > K, right after queueing K+1.
                if every and i > every and (i - 1) % every == 0:
                    start_snapshot()
                if args.interval:
                    await asyncio.sleep(args.interval)
        heard = service.driver.counters.received
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=0.05)
            if service.driver.failure is not None:
                raise service.driver.failure
            if service.driver.counters.received != heard:
                # A member still sending to us may wait for an answer of ours that was
                # lost (a SeqAck): whoever is still talking to us keeps us from idling.
                heard = service.driver.counters.received
                state["last"] = loop.time()
            if (
                args.exit_after_idle is not None
                and state["delivered"] >= expected
                and service.idle
                and loop.time() - state["last"] >= args.exit_after_idle
            ):
                break
    finally:
        await service.close()
        if isinstance(inner_sink, JsonlSink):
            inner_sink.close()
    return 0


def _glog_line(text: str) -> str:
    """``text`` with glog's INFO prefix, as the original's log lines have it."""
    now = time.time()
    stamp = time.strftime("%m%d %H:%M:%S", time.localtime(now))
    return f"I{stamp}.{int(now % 1 * 1e6):06d} {threading.get_native_id()} isis.py:0] {text}"


def _write_snapshot(out: Path | None, done: SnapshotDone) -> None:
    in_flight = sum(len(ch["messages"]) for ch in done.channels.values())
    where = "-"
    if out is not None:
        path = out / "snapshots" / f"{done.node}-{done.snapshot_id}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(orjson.dumps(done.to_json(), option=orjson.OPT_INDENT_2) + b"\n")
        where = str(path)
    print(
        f"snapshot done: id={done.snapshot_id}, initiator={done.initiator or '-'}, "
        f"node={done.node}, "
        f"channels={len(done.channels)}, in_flight={in_flight}, file={where}",
        flush=True,
    )


COMMAND = Command("isis", __doc__, configure, run)
main = COMMAND.main


if __name__ == "__main__":
    sys.exit(main())
