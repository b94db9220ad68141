"""``gossamer lab app``: the lab's real processes on 127.0.0.1 (distinct ports), traces checked."""

from __future__ import annotations

import asyncio
import itertools
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest
import tomli_w

from gossamer.lab.app import LabFaults
from gossamer.lab.config import PORT_NAMES, load_config, parse_config
from gossamer.proto.isis.checks import check_total_order, record_from_trace
from gossamer.testing import free_ports
from gossamer.trace import MemorySink, TraceEvent, Tracer, TraceReader

HOST = "127.0.0.1"
#: Seconds between writing the configurations and the workload's start: enough for the
#: processes to import and bind on a loaded machine (a node that comes up later than
#: start_at only runs what is left of the workload).
START_IN = 8.0
RUNNER = "import sys; from gossamer.cli.lab_app_cmd import main; sys.exit(main(sys.argv[1:]))"


def write_mesh(
    tmp: Path,
    n: int,
    *,
    start_in: float = START_IN,
    duration: float = 3.0,
    linger: float = 2.0,
    exit_when_done: bool = True,
    sections: dict[str, dict[str, Any]] | None = None,
    per_node: dict[str, dict[str, dict[str, Any]]] | None = None,
) -> tuple[list[Path], Path]:
    """One TOML file per node of an ``n``-node loopback mesh; returns (files, trace dir)."""
    ids = [f"h{i}" for i in range(1, n + 1)]
    ports = free_ports(len(PORT_NAMES) * n)
    table = {
        node: dict(zip(PORT_NAMES, ports[i * len(PORT_NAMES):(i + 1) * len(PORT_NAMES)],
                       strict=True))
        for i, node in enumerate(ids)
    }
    tmp.mkdir(parents=True, exist_ok=True)
    key = tmp / "cluster.key"
    key.write_bytes(os.urandom(32))
    traces = tmp / "traces"
    start_at = time.monotonic() + start_in
    files = []
    for i, node in enumerate(ids):
        config: dict[str, Any] = {
            "node": {
                "id": node, "run": "test-run", "trace": str(traces / f"{node}.jsonl"),
                "address": HOST, "seed": i + 1, "start_at": start_at, "duration": duration,
                "linger": linger, "exit_when_done": exit_when_done, "key_file": str(key),
            },
            "ports": table[node],
            "peers": [{"id": peer, "address": HOST, "ports": table[peer]}
                      for peer in ids if peer != node],
            "discovery": {"enabled": True},
            "gossip": {"enabled": True, "rate": 4.0},
            "isis": {"enabled": True, "rate": 10.0, "snapshots": True, "snapshot_every": 1.0},
            "link": {"enabled": True, "push_to": [ids[(i + 1) % n]], "rate": 20.0},
            "gateway": {"enabled": True, "db": str(tmp / f"{node}-queues.db"), "clients": 2,
                        "rate": 6.0},
        }
        for name, values in (sections or {}).items():
            config.setdefault(name, {}).update(values)
        for name, values in (per_node or {}).get(node, {}).items():
            config.setdefault(name, {}).update(values)
        path = tmp / f"{node}.toml"
        path.write_text(tomli_w.dumps(config))
        files.append(path)
    return files, traces


def start(files: list[Path]) -> list[subprocess.Popen[bytes]]:
    return [
        subprocess.Popen(
            [sys.executable, "-c", RUNNER, "--config", str(f)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )
        for f in files
    ]


Result = tuple[int, list[dict[str, Any]], str]


def finish(procs: list[subprocess.Popen[bytes]], timeout: float) -> list[Result]:
    """Each node's exit code, status lines and standard error, in order. A node still
    running at ``timeout`` fails the test; every node is then killed and reaped, and its
    pipes closed, so that no later test inherits its ``ResourceWarning``s."""
    results = []
    deadline = time.monotonic() + timeout
    try:
        for proc in procs:
            try:
                out, err = proc.communicate(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                out, err = proc.communicate()
                raise AssertionError(f"node did not exit: {err.decode()[-2000:]}") from None
            lines = [orjson.loads(line) for line in out.splitlines() if line.strip()]
            results.append((proc.returncode, lines, err.decode()))
    finally:
        for proc in procs:
            if proc.returncode is None:
                proc.kill()
                proc.communicate()
    return results


def read_trace(path: Path) -> list[TraceEvent]:
    reader = TraceReader(strict=True)  # a torn or malformed line fails the test
    events = list(reader.read(path))
    assert path.read_bytes().endswith(b"\n")
    return events


def kinds(events: list[TraceEvent]) -> Counter[tuple[str, str]]:
    return Counter((e.layer, e.kind) for e in events)


def test_three_nodes_compose_every_layer_and_exit_cleanly(tmp_path: Path) -> None:
    files, traces = write_mesh(tmp_path, 3)
    results = finish(start(files), timeout=28.0)
    for code, lines, err in results:
        assert code == 0, err
        statuses = [line["status"] for line in lines]
        assert statuses[0] == "ready" and statuses[-1] == "done", statuses
        assert "progress" in statuses
        last = [line for line in lines if line["status"] == "progress"][-1]
        assert last["sent"] > 0 and last["delivered"] > 0 and last["peers"] == 2
    all_events: list[TraceEvent] = []
    for node in ("h1", "h2", "h3"):
        events = read_trace(traces / f"{node}.jsonl")
        assert {e.node for e in events} == {node}
        seen = kinds(events)
        for layer, kind in [("discovery", "peer_up"), ("isis", "deliver"),
                            ("isis", "multicast"), ("snapshot", "local_state"),
                            ("gossip", "deliver"), ("link", "deliver"), ("link", "send"),
                            ("gateway", "deliver"), ("gateway", "ack"),
                            # the node's gateway clients trace their side too
                            ("gateway", "client_ready"), ("gateway", "client_send"),
                            ("gateway", "client_recv")]:
            assert seen[(layer, kind)] > 0, (node, layer, kind)
        # Peers are named by node id, never by address (the analysis joins on ids).
        peers = {e.peer for e in events if e.layer in ("discovery", "link") and e.peer}
        assert peers <= {"h1", "h2", "h3", "*"}, peers  # "*": a broadcast
        all_events += events
    record = record_from_trace(all_events)
    assert check_total_order(record, ["h1", "h2", "h3"]) == []
    delivered = {node: len(d) for node, d in record.deliveries.items()}
    assert len(set(delivered.values())) == 1, delivered  # every node delivered everything


def test_sigterm_leaves_flushes_and_exits_quickly(tmp_path: Path) -> None:
    files, traces = write_mesh(
        tmp_path, 3, start_in=0.0, duration=60.0, exit_when_done=False,
        sections={"gossip": {"enabled": False}, "gateway": {"enabled": False},
                  "link": {"enabled": False}, "isis": {"snapshots": False}},
    )
    procs = start(files)
    try:
        for proc in procs:  # like the lab: signal a node only once it said ready
            assert proc.stdout is not None
            assert orjson.loads(proc.stdout.readline())["status"] == "ready"
        time.sleep(3.0)  # discovery converges (1 s broadcasts), the workload runs
        victim = procs[0]
        sent = time.monotonic()
        victim.send_signal(signal.SIGTERM)
        code, lines, err = finish([victim], timeout=5.0)[0]
        assert time.monotonic() - sent < 5.0
        assert code == 0, err
        assert lines[-1]["status"] == "done"
        time.sleep(0.5)
    finally:
        for proc in procs[1:]:
            proc.send_signal(signal.SIGTERM)
        others = finish(procs[1:], timeout=8.0)
    assert all(code == 0 for code, _, _ in others)
    h1 = read_trace(traces / "h1.jsonl")
    leave_sent = [e for e in h1 if e.layer == "discovery" and e.kind == "send"
                  and e.attrs.get("type") == "agur!"]
    assert leave_sent, "h1 sent no agur!"
    for node in ("h2", "h3"):
        events = read_trace(traces / f"{node}.jsonl")
        downs = [e for e in events if e.layer == "discovery" and e.kind == "peer_down"
                 and e.peer == "h1"]
        assert downs and downs[0].attrs.get("reason") == "leave", downs
        removed = [e for e in events
                   if e.layer == "isis" and e.kind == "view_change" and e.peer == "h1"]
        assert removed, f"{node} did not remove h1 from the ISIS group"


def inversions(events: list[TraceEvent]) -> int:
    """Consecutive ISIS deliveries of one node whose final (seq, proposer) goes down."""
    keys = [(e.seq, int(e.attrs["proposer"])) for e in events
            if e.layer == "isis" and e.kind == "deliver"]
    return sum(1 for a, b in itertools.pairwise(keys) if b < a)


def test_broken_order_node_inverts_its_deliveries(tmp_path: Path) -> None:
    files, traces = write_mesh(
        tmp_path, 3, duration=2.5, linger=1.5,
        sections={"gossip": {"enabled": False}, "gateway": {"enabled": False},
                  "link": {"enabled": False}, "discovery": {"enabled": False},
                  "isis": {"snapshots": False, "rate": 15.0}},
        per_node={"h2": {"isis": {"broken_order": True}}},
    )
    results = finish(start(files), timeout=20.0)
    assert all(code == 0 for code, _, _ in results), [err for _, _, err in results]
    per_node = {n: read_trace(traces / f"{n}.jsonl") for n in ("h1", "h2", "h3")}
    assert inversions(per_node["h1"]) == 0 and inversions(per_node["h3"]) == 0
    assert inversions(per_node["h2"]) > 0
    record = record_from_trace([e for events in per_node.values() for e in events])
    assert check_total_order(record, ["h1", "h2", "h3"]) != []
    # Only the order is broken: h2 still delivers every message exactly once.
    delivered = {n: sorted(d.msg for d in ds) for n, ds in record.deliveries.items()}
    assert delivered["h2"] == delivered["h1"] == delivered["h3"]


def test_config_check_prints_the_resolved_configuration(tmp_path: Path) -> None:
    files, _ = write_mesh(tmp_path, 2)
    proc = subprocess.run(
        [sys.executable, "-c", RUNNER, "--config", str(files[0]), "--check"],
        capture_output=True, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    again = tmp_path / "again.toml"
    again.write_bytes(proc.stdout)
    assert load_config(again, env={}) == load_config(files[0], env={})


def test_bad_config_exits_2_naming_the_key(tmp_path: Path) -> None:
    files, _ = write_mesh(tmp_path, 2, sections={"isis": {"rate": -1.0}})
    proc = subprocess.run(
        [sys.executable, "-c", RUNNER, "--config", str(files[0])],
        capture_output=True, check=False,
    )
    assert proc.returncode == 2
    assert b"isis.rate: must be >= 0" in proc.stderr


def test_port_in_use_is_a_runtime_failure(tmp_path: Path) -> None:
    files, _ = write_mesh(tmp_path, 2, sections={"gossip": {"enabled": False}})
    config = load_config(files[0], env={})
    blocker = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    blocker.bind((HOST, config.ports.isis))
    try:
        proc = subprocess.run(
            [sys.executable, "-c", RUNNER, "--config", str(files[0])],
            capture_output=True, check=False, timeout=20,
        )
    finally:
        blocker.close()
    assert proc.returncode == 1, proc.stderr
    assert b"gossamer lab app: error:" in proc.stderr


@pytest.mark.spark
@pytest.mark.slow  # a `gossamer analyze` run: a minute on a loaded 2-core machine
def test_the_analysis_passes_a_healthy_run_of_app_nodes(tmp_path: Path) -> None:
    # The command line end to end on what the app nodes wrote. That it fails a run with a
    # node that breaks the order is tests/lab/test_lab.py's (a broken node fails the lab).
    healthy, traces = write_mesh(tmp_path / "ok", 3, start_in=1.5 * START_IN)
    results = finish(start(healthy), timeout=40.0)
    assert all(code == 0 for code, _, _ in results), [err for _, _, err in results]
    cmd = [sys.executable, "-m", "gossamer.cli.main", "analyze"]
    ok = subprocess.run([*cmd, str(traces)], capture_output=True, check=False, timeout=120)
    assert ok.returncode == 0, ok.stdout.decode()[-4000:] + ok.stderr.decode()[-2000:]
    assert b"total_order" in ok.stdout


def test_partition_drops_udp_both_ways_in_its_window_and_traces_it(tmp_path: Path) -> None:
    now = time.monotonic()
    config = parse_config({
        "node": {"id": "h1", "run": "r", "trace": "t.jsonl", "address": HOST,
                 "start_at": now - 1.0},
        "peers": [{"id": "h2", "address": HOST, "ports": {"isis": 7203}},
                  {"id": "h3", "address": HOST, "ports": {"isis": 7303}}],
        "faults": {"partition": [{"peers": ["h2"], "from": 0.0, "to": 60.0}]},
    }, base=tmp_path, env={})
    sink = MemorySink()
    injector = LabFaults(config, {(HOST, 7203): "h2", (HOST, 7303): "h3"},
                         rng=random.Random(1), tracer=Tracer(sink, run="r", node="h1"))
    got: list[tuple[bytes, tuple[str, int]]] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        for direction in ("out", "in"):
            injector.apply(direction, b"x", (HOST, 7203), lambda d, a: got.append((d, a)), loop)
            injector.apply(direction, b"y", (HOST, 7303), lambda d, a: got.append((d, a)), loop)

    asyncio.run(main())
    assert got == [(b"y", (HOST, 7303)), (b"y", (HOST, 7303))]  # h3 untouched, h2 cut
    faults = sink.select(layer="net", kind="fault")
    assert [(f.attrs["fault"], f.attrs["reason"], f.attrs["direction"]) for f in faults] == [
        ("drop", "partition", "out"), ("drop", "partition", "in")]
    assert injector.injected == 2
