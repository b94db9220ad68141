"""A cluster of ``gossamer node`` daemons against one daemon, and how fast it sees a crash.

    .venv/bin/python -m bench.cluster [--quick] [--rounds N] [--kills K]

Real processes on 127.0.0.1: three daemons forming one cluster (their gateways joined
over sealed links, ``docs/node.md``) and one daemon alone, all four running through the
measuring rounds, with the daemon's default discovery, views and gateway settings (no
lab-speed timers). The clients are gossamer's own, in this process. Each round measures,
alternately on the lone daemon and on the cluster (the ratios are the result: the
machine is shared):

- **routed SEND** (a 2-op query) from a client to another: both on the lone daemon,
  against the sender on node a and the receiver on node b. Latency one at a time
  (p50 / p99, pooled over the rounds) and throughput pipelined in windows of 1,000
  (best round);
- **BROADCAST fan-out** to 30 receivers: all on the lone daemon, against 10 on each of
  the three nodes (the sender on a). Latency until the last receiver has it, one at a
  time, and broadcasts per second pipelined in windows of 100 (best round).

Then ``kills`` times a member (a, b, c in turn: the founder, which is the coordinator,
too) is SIGKILLed: the time until **every survivor** has installed a view without it
(from the survivors' ``view`` status lines; ``time.monotonic`` is one clock for every
process of the machine), split into the crash's detection (the first survivor's
discovery ``peer_down``, from its trace) and the views round after it. The member is
restarted with the same file and the time until every member installed a view with its
new incarnation is noted too (it includes the process's start). The kills alternate with
the same kills in a second cluster of three whose files set the discovery timers the
daemon had before ``NODE_DISCOVERY`` (``BASELINE_DISCOVERY``): the baseline, measured
beside them.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import tomli_w

from bench._report import command, machine, publish, quick_parser, table
from bench._timing import latency_row, one_at_a_time, rate_row, ratio, routed_sends
from gossamer.daemon.protocols import NODE_DISCOVERY
from gossamer.testing.daemons import Daemon, gateway_port

HOST = "127.0.0.1"
APP = "bench"
NAMES = ("a", "b", "c")
WINDOW = 1_000
FANOUT = 30
BCAST_WINDOW = 100
PATIENCE = 120.0
#: The daemon's discovery timers before it had its own (``NODE_DISCOVERY``): the lab's.
BASELINE_DISCOVERY = {"inactive_time": 3.0, "heartbeat_wait": 0.5}
TARGET = {"application": APP, "ops": [
    {"path": "/role", "op": "$eq", "to": {"value": "sink"}},
    {"path": "/load", "op": "$lt", "to": {"value": 100}},
]}
BCAST = {"application": APP, "ops": [{"path": "/role", "op": "$eq", "to": {"value": "fan"}}]}


def node_files(tmp: Path, discovery: dict[str, Any] | None = None,
               solo: bool = True) -> dict[str, Path]:
    """Files for the cluster (a may found and names b and c; they name a) and for the
    lone daemon ``solo`` (its own cluster): the daemon's defaults but for the ports and
    the ``[discovery]`` keys given."""
    from gossamer.daemon.config import DEFAULT_PORTS
    from gossamer.testing import free_ports

    tmp.mkdir(exist_ok=True)
    (tmp / "cluster.key").write_bytes(bytes(range(32)))
    names = [*NAMES, "solo"] if solo else list(NAMES)
    numbers = iter(free_ports(len(names) * len(DEFAULT_PORTS)))
    ports = {name: {service: next(numbers) for service in DEFAULT_PORTS} for name in names}
    files = {}
    for name in names:
        if name == "solo":
            cluster: dict[str, Any] = {"name": "solo", "bootstrap": True, "bootstrap_wait": 0.5}
        else:
            seeds = [f"{HOST}:{ports[other]['discovery']}" for other in NAMES
                     if other != name and "a" in (name, other)]
            cluster = {"name": "bench", "seeds": seeds, "bootstrap": name == "a"}
        document = {
            "cluster": {**cluster, "key_file": "cluster.key"},
            "node": {"name": name, "address": HOST, "trace": f"{name}.jsonl"},
            "ports": ports[name],
            "discovery": dict(discovery or {}),
        }
        files[name] = tmp / f"{name}.toml"
        files[name].write_text(tomli_w.dumps(document))
    return files


def start_cluster(files: dict[str, Path]) -> dict[str, Daemon]:
    """The daemons of ``files``, once the three have formed one cluster whose gateways
    are joined (and the lone one has its view)."""
    daemons = {name: Daemon(path, patience=PATIENCE) for name, path in files.items()}
    if "solo" in daemons:
        daemons["solo"].view_with({"solo"})
    for name in NAMES:
        daemons[name].view_with(set(NAMES))
        daemons[name].gateway_peers(set(NAMES) - {name})
    return daemons


def dsn(config: Path) -> str:
    return f"singyeong://{APP}@{HOST}:{gateway_port(config)}"


@contextlib.asynccontextmanager
async def connected(*specs: tuple[str, str, dict[str, Any]]) -> AsyncIterator[list[Any]]:
    """Gateway clients ``(dsn, client_id, metadata)``, closed on the way out."""
    from gossamer.aio.gateway_client import open_gateway_client

    async with contextlib.AsyncExitStack() as stack:
        yield [await stack.enter_async_context(open_gateway_client(
            url, client_id=client_id, metadata=metadata, open_timeout=30))
            for url, client_id, metadata in specs]


async def listed(client: Any, target: dict[str, Any], count: int) -> None:
    """Until QUERY_NODES through ``client``'s node lists ``count`` clients (the others'
    replicas have arrived)."""
    while len(await client.query_nodes(target)) != count:
        await asyncio.sleep(0.05)


async def send_round(sender_at: str, receiver_at: str, count: int) -> tuple[list[float], float]:
    """(one-at-a-time SEND latencies in µs, pipelined SENDs per second)."""
    async with connected((sender_at, "sender", {"role": "source", "load": 1}),
                         (receiver_at, "receiver", {"role": "sink", "load": 5})) as (tx, rx):
        await listed(tx, TARGET, 1)
        return await routed_sends(tx, rx, count, target=TARGET, window=WINDOW)


async def broadcast_round(
    sender_at: str, receivers_at: list[str], count: int
) -> tuple[list[float], float]:
    """(one-at-a-time BROADCAST latencies until the last receiver has it, in µs;
    pipelined BROADCASTs per second, each reaching every receiver)."""
    specs = [(sender_at, "caster", {"role": "source"})]
    specs += [(url, f"fan{i}", {"role": "fan"}) for i, url in enumerate(receivers_at)]
    async with connected(*specs) as (tx, *rxs):
        await listed(tx, BCAST, len(rxs))

        async def everyone(n: int) -> None:
            async def one(rx: Any) -> None:
                for _ in range(n):
                    await rx.receive(timeout=30.0)
            await asyncio.gather(*(one(rx) for rx in rxs))

        async def cast(i: int) -> None:
            await tx.send(i, to=BCAST, broadcast=True)
            await everyone(1)

        latencies = await one_at_a_time(cast, count // 10)
        start = time.perf_counter()
        for base in range(0, count, BCAST_WINDOW):
            n = min(count, base + BCAST_WINDOW) - base
            for i in range(n):
                await tx.send(i, to=BCAST, broadcast=True)
            await everyone(n)
        return latencies, count / (time.perf_counter() - start)


async def measure_routing(files: dict[str, Path], rounds: int, count: int,
                          casts: int) -> dict[str, Any]:
    solo, a, b = dsn(files["solo"]), dsn(files["a"]), dsn(files["b"])
    spread = [dsn(files[NAMES[i % 3]]) for i in range(FANOUT)]
    out: dict[str, Any] = {k: [] for k in ("one_lat", "clu_lat", "one_bl", "clu_bl")}
    out |= {k: 0.0 for k in ("one_thr", "clu_thr", "one_bt", "clu_bt")}
    for _ in range(rounds):
        for key, (tx, rx) in (("one", (solo, solo)), ("clu", (a, b))):
            latencies, rate = await send_round(tx, rx, count)
            out[f"{key}_lat"] += latencies
            out[f"{key}_thr"] = max(out[f"{key}_thr"], rate)
        for key, (tx, rxs) in (("one", (solo, [solo] * FANOUT)), ("clu", (a, spread))):
            latencies, rate = await broadcast_round(tx, rxs, casts)
            out[f"{key}_bl"] += latencies
            out[f"{key}_bt"] = max(out[f"{key}_bt"], rate)
    return out


def first_peer_down(trace: Path, victim: str, after: float) -> float | None:
    """When a survivor's discovery first reported node ``victim`` down after ``after``
    (the daemon's trace names a peer by its node name, from the peer's card)."""
    from gossamer.trace import TraceReader

    times = [e.t for e in TraceReader().read(trace)
             if e.layer == "discovery" and e.kind == "peer_down" and e.t > after
             and e.peer == victim]
    return min(times) if times else None


def stop_all(daemons: dict[str, Daemon]) -> None:
    """Stop each daemon (the ones running now: a killed one's restart replaced it), even
    when stopping another fails."""
    with contextlib.ExitStack() as stopping:
        for daemon in daemons.values():
            stopping.callback(daemon.stop)


def measure_kill(files: dict[str, Path], daemons: dict[str, Daemon],
                 victim: str) -> dict[str, float]:
    """SIGKILL ``victim``, time the view without it, restart it, time its rejoin."""
    everyone = set(NAMES)
    survivors = everyone - {victim}
    time.sleep(2.0)  # settled: every link and card exchanged since the last change
    killed = time.monotonic()
    daemons[victim].kill()
    views = [float(daemons[name].view_with(survivors, since=killed)["t"])
             for name in survivors]
    downs = [first_peer_down(files[name].with_suffix(".jsonl"), victim, killed)
             for name in survivors]
    detected = min(t for t in downs if t is not None)
    restarted = time.monotonic()
    daemons[victim] = Daemon(files[victim], patience=PATIENCE)
    ready = daemons[victim].wait(lambda line: line.get("status") == "ready", "ready")
    back = max(float(daemons[name].view_with(
        everyone, since=restarted, including=f"{victim}#{ready['incarnation']}")["t"])
        for name in NAMES)
    return {"view": max(views) - killed, "first": min(views) - killed,
            "detect": detected - killed, "rejoin": back - restarted}


def run(rounds: int, count: int, casts: int,
        kills: int) -> tuple[dict[str, Any], list[tuple[dict[str, float], dict[str, float]]]]:
    """The routing figures, and per kill the row of the node's defaults and the
    baseline's."""
    from gossamer.aio.loop import run as run_loop

    with tempfile.TemporaryDirectory(prefix="bench-cluster-") as tmp, \
            contextlib.ExitStack() as stopping:
        files = node_files(Path(tmp) / "node")
        daemons = start_cluster(files)
        stopping.callback(stop_all, daemons)
        routing = run_loop(measure_routing(files, rounds, count, casts))
        daemons.pop("solo").stop()
        base_files = node_files(Path(tmp) / "baseline", BASELINE_DISCOVERY, solo=False)
        base = start_cluster(base_files)
        stopping.callback(stop_all, base)
        kill_rows = [
            (measure_kill(files, daemons, NAMES[k % 3]),
             measure_kill(base_files, base, NAMES[k % 3]))
            for k in range(kills)
        ]
    return routing, kill_rows


def main(argv: list[str] | None = None) -> int:
    parser = quick_parser("bench.cluster", "small sizes (a smoke run)")
    parser.add_argument("--rounds", type=int, default=3, help="alternated measuring rounds")
    parser.add_argument("--kills", type=int, default=6, help="SIGKILLs timed")
    args = parser.parse_args(argv)
    count, casts = (1_000, 200) if args.quick else (10_000, 1_000)
    rounds = 1 if args.quick else args.rounds
    kills = min(args.kills, 3) if args.quick else args.kills
    load_before = os.getloadavg()[0]
    r, kill_rows = run(rounds, count, casts, kills)
    load_after = os.getloadavg()[0]

    rows = [
        latency_row("routed SEND latency p50 / p99 (µs)", r["one_lat"], r["clu_lat"]),
        rate_row("routed SEND throughput (msg/s)", r["one_thr"], r["clu_thr"]),
        latency_row(f"BROADCAST to {FANOUT}: latency to the last receiver p50 / p99 (µs)",
                    r["one_bl"], r["clu_bl"]),
        [f"BROADCAST to {FANOUT}: broadcasts/s (deliveries/s)",
         f"{r['one_bt']:,.0f} ({r['one_bt'] * FANOUT:,.0f})",
         f"{r['clu_bt']:,.0f} ({r['clu_bt'] * FANOUT:,.0f})", ratio(r["clu_bt"], r["one_bt"])],
    ]
    kills_table = table(
        ["kill", "victim", "peer_down (first survivor)", "view on the first survivor",
         "view on every survivor", "views round after detection", "rejoin after restart",
         "baseline: view on every survivor (peer_down)", "view / baseline"],
        [[i + 1, NAMES[i % 3], f"{k['detect']:.2f} s", f"{k['first']:.2f} s",
          f"{k['view']:.2f} s", f"{(k['view'] - k['detect']) * 1e3:.0f} ms",
          f"{k['rejoin']:.2f} s", f"{b['view']:.2f} s ({b['detect']:.2f} s)",
          ratio(k["view"], b["view"])]
         for i, (k, b) in enumerate(kill_rows)],
    )
    views = [k["view"] for k, _ in kill_rows]
    base_views = [b["view"] for _, b in kill_rows]
    how = command("bench.cluster", args.quick)
    timers = ", ".join(f"`{k}` = {v:g} s" for k, v in NODE_DISCOVERY.defaults.items())
    before = ", ".join(f"`{k}` = {v:g} s" for k, v in BASELINE_DISCOVERY.items())
    node = NODE_DISCOVERY.defaults
    bound = node["inactive_time"] + 3 * node["heartbeat_wait"]
    publish(
        "cluster-daemons",
        "A cluster of `gossamer node` daemons against one daemon",
        f"`{how}` on {machine()}, uvloop, 127.0.0.1: three daemons forming one "
        "cluster and one daemon alone, real processes with the daemon's default settings; "
        f"gossamer clients in the measuring process. {rounds} alternated round(s): "
        f"{count // 10:,} one-at-a-time and {count:,} pipelined routed SENDs (2-op query; "
        f"windows of {WINDOW:,}), {casts // 10:,} one-at-a-time and {casts:,} pipelined "
        f"BROADCASTs (windows of {BCAST_WINDOW}) to {FANOUT} receivers. One daemon: every "
        "client on it. Cluster: SEND from a client on node a to one on node b; BROADCAST "
        f"from node a to {FANOUT // 3} receivers on each node. Latencies pooled over the "
        f"rounds, rates of the best round. The machine's load average was {load_before:.1f} "
        f"before and {load_after:.1f} after (2 cores): each hop between daemons waits for "
        "another process to be scheduled, so the latencies' ratios move between runs.",
        table(["figure", "one daemon", "3 daemons", "3 daemons / one"], rows),
        f"SIGKILL of a member to the new view ({len(kill_rows)} kills, the victims a, b, c "
        "in turn; a founded the cluster and is the coordinator until it is killed; times "
        "from the kill). Each kill alternates with the same kill in a baseline cluster of "
        f"three whose files set the discovery timers the daemon had before ({before}); "
        f"the daemon's defaults are {timers}:",
        kills_table,
        f"Kill to the view on every survivor: median {statistics.median(views):.2f} s "
        f"({min(views):.2f}-{max(views):.2f} s), against {statistics.median(base_views):.2f} s "
        f"({min(base_views):.2f}-{max(base_views):.2f} s) with the baseline's timers: "
        f"{ratio(statistics.median(views), statistics.median(base_views))}. What bounds it: "
        "discovery notices the crash (a peer silent for `inactive_time` is probed, and "
        "removed after `max_missed` = 3 waits of `heartbeat_wait`: at most "
        f"{bound:.1f} s "
        "after the victim was last heard, and a live peer is heard at least every "
        "`inactive_time`, as it answers the probe); then one views round: the suspicion "
        "goes to the coordinator, which proposes the view, gathers a majority and installs "
        "it (a few round trips, each retransmitted every `views.retry` = 0.1 s; a killed "
        "coordinator's successor takes over first). The clients of the killed node leave "
        "every survivor's routing when it installs that view.",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
