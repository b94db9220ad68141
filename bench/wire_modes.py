"""What security by default costs: sealed against original wire, same session, same machine.

Every protocol seals by default (``docs/interop.md``). This benchmark runs the same
workload twice in one session, on the original (plaintext) wire and on the sealed wire,
and reports the sealed figures as ratios of the original ones:

- ISIS: five ``gossamer.aio.isis`` members on loopback (each on its own 127.0.0.x, as the
  original wire names a member by its IP), every member multicasting with a window of 16,
  the original's schedule, one message per datagram, no loss (``bench.isis``);
- links: PUSH to PULL over TCP between two processes, 100-byte messages (``bench.links``).

Re-run: ``.venv/bin/python -m bench.wire_modes`` (``--quick`` for a short run).
"""

from __future__ import annotations

import argparse
import os
import secrets
import sys

from bench import isis as isis_bench
from bench import links as links_bench
from bench._report import machine, table, update_section

WIRES = ("original", "sealed")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a short run")
    parser.add_argument("--no-write", action="store_true", help="do not update the docs")
    args = parser.parse_args(argv)
    seconds, warmup = (1.0, 0.5) if args.quick else (5.0, 2.0)
    count = 20_000 if args.quick else 200_000
    rounds = 1 if args.quick else 3
    os.environ["GOSSAMER_KEY"] = secrets.token_hex(32)  # this run's key, for the workers
    mode = isis_bench.Mode(
        label="spec", retransmit_initial=0.2, batch_delay=0.0, window=16, drain=2.0
    )

    isis: dict[str, list[dict[str, float]]] = {w: [] for w in WIRES}
    links: dict[str, list[tuple[float, float]]] = {w: [] for w in WIRES}
    contender = ("gossamer", links_bench._gossamer_pull, links_bench._gossamer_push, True)
    for _ in range(rounds):
        for wire in WIRES:  # interleaved, so that load on the machine hits both alike
            r = isis_bench.measure_isis(seconds, warmup, 0.0, mode, wire=wire)
            isis[wire].append(r)
            print(f"isis {wire}: {r['ordered']:,.0f} ordered/s, p50 {r['p50']:.1f} ms", flush=True)
            os.environ["GOSSAMER_BENCH_WIRE"] = wire
            rate, cpu = links_bench._throughput(contender, count)
            links[wire].append((rate, cpu))
            print(f"links {wire}: {rate:,.0f} msgs/s, {cpu:.1f} CPU us/msg", flush=True)

    best_isis = {w: max(isis[w], key=lambda r: r["ordered"]) for w in WIRES}
    best_links = {w: max(links[w]) for w in WIRES}
    io, i_s = best_isis["original"], best_isis["sealed"]
    lo, ls = best_links["original"], best_links["sealed"]
    rows: list[list[object]] = [
        ["ISIS, ordered msgs/s", f"{io['ordered']:,.0f}", f"{i_s['ordered']:,.0f}",
         f"**{i_s['ordered'] / io['ordered']:.2f}x**"],
        ["ISIS, latency p50 ms", f"{io['p50']:.1f}", f"{i_s['p50']:.1f}",
         f"{i_s['p50'] / io['p50']:.2f}x"],
        ["links TCP, msgs/s", f"{lo[0]:,.0f}", f"{ls[0]:,.0f}", f"**{ls[0] / lo[0]:.2f}x**"],
        ["links TCP, CPU us/msg (both ends)", f"{lo[1]:.1f}", f"{ls[1]:.1f}",
         f"{ls[1] / lo[1]:.2f}x"],
    ]  # fmt: skip
    markdown = "\n\n".join([
        "## Sealed against original wire (`bench/wire_modes.py`)",
        f"What security by default costs, measured in one session ({machine()}, "
        f"{os.cpu_count()} CPUs shared by all processes), best of {rounds} interleaved "
        "rounds. ISIS: five members on loopback, every one multicasting, window 16, the "
        f"original's schedule, one message per datagram, no loss, {seconds:g} s after "
        f"{warmup:g} s of warm-up. Links: PUSH to PULL over TCP, {count:,} messages of "
        "100 bytes. Sealed = every datagram (ISIS) or every TCP record (links) in the "
        "envelope, AES-256-GCM with replay windows.",
        table(["workload", "original wire", "sealed wire (default)", "sealed / original"], rows),
        "Re-run: `.venv/bin/python -m bench.wire_modes` (`--quick` for a short run).",
    ])
    print(markdown)
    if not args.no_write:
        update_section("wire_modes", markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
