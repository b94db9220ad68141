"""The original test suite's ten cases, on four network-namespace hosts instead of docker.

Reference (a), "Test suite ``lab1/test_multicast.py``": four hosts (alpha, beta, gamma,
delta), each running the program with the case's flags; the suite compared the first
``expected`` delivery lines of every host. Here each host runs ``gossamer isis`` and the
checks the original lacked are added:

- a **timeout** (a liveness failure fails the test instead of hanging it);
- **no loss**: every host delivers exactly the multicast set (sender, msg_id, data);
- **no duplicate**, also after a quiet period once everything was delivered;
- the **same order** (same lines, finals included) on every host;
- **proof that faults were injected** (the hosts' ``dropping``/``delaying`` log lines);
- for the snapshot cases, every host's snapshot part is written and the cut is
  consistent channel by channel (``gossamer.proto.snapshot.check_cut``).

Retransmission runs ten times faster than the original's 200 ms schedule
(``--retransmit-initial 0.02 --retransmit-max 0.4``) so that the 75 % drop case takes
seconds rather than a minute; the 2000 ms delays are the original's.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pytest

from gossamer.lab.netns import Host, Topology
from gossamer.proto.isis.checks import check_all, record_from_trace
from gossamer.proto.snapshot import check_cut
from gossamer.testing.pytest_plugin import require_netns
from gossamer.trace import read_run

NAMES = ["alpha", "beta", "gamma", "delta"]
TIMEOUT = 90.0
QUIET = 1.5

#: The group key every node of this module's runs seals with (fresh per run).
GROUP_KEY = secrets.token_hex(32)


@pytest.fixture(scope="module")
def hosts() -> Iterator[list[Host]]:
    """One subnet of four hosts for the whole module (built once, torn down at the end)."""
    require_netns()
    with Topology(subnets=[4]) as topology:
        yield topology.hosts


@dataclass
class Member:
    name: str
    proc: subprocess.Popen[str]
    out: list[str] = field(default_factory=list)
    err: list[str] = field(default_factory=list)
    readers: list[threading.Thread] = field(default_factory=list)

    def deliveries(self) -> list[str]:
        return [line for line in list(self.out) if line.startswith("delivering dataMsg: ")]

    def snapshots(self) -> list[str]:
        return [line for line in list(self.out) if line.startswith("snapshot done: ")]


def _pump(stream: Any, sink: list[str]) -> None:
    for line in stream:
        sink.append(line.rstrip("\n"))


def run_case(
    hosts: list[Host],
    tmp_path: Path,
    *,
    senders: list[str],
    msg_count: int,
    drop_rate: float = 0.0,
    delay: int = 0,
    snapshot_initiator: str | None = None,
    initiate_snapshot_count: int = 0,
) -> tuple[list[Member], Path]:
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("".join(f"{n} {h.ip}\n" for n, h in zip(NAMES, hosts, strict=True)))
    out = tmp_path / "out"
    members = []
    for name, host in zip(NAMES, hosts, strict=True):
        # No --me: each host finds itself as the only member whose address is local.
        argv = [
            sys.executable,
            "-m",
            "gossamer.cli.isis_cmd",
            "--hostfile",
            str(hostfile),
            "--senders",
            ",".join(senders),
            "--msg-count",
            str(msg_count),
            "--drop-rate",
            str(drop_rate),
            "--delay",
            str(delay),
            "--retransmit-initial",
            "0.02",
            "--retransmit-max",
            "0.4",
            "--out",
            str(out),
            "--run",
            tmp_path.name,
        ]
        if name == snapshot_initiator:
            argv += ["--initiate-snapshot-count", str(initiate_snapshot_count)]
        env = {**os.environ, "GOSSAMER_KEY": GROUP_KEY}  # sealed, the default
        proc = host.popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        )
        member = Member(name=name, proc=proc)
        for stream, sink in ((proc.stdout, member.out), (proc.stderr, member.err)):
            reader = threading.Thread(target=_pump, args=(stream, sink), daemon=True)
            reader.start()
            member.readers.append(reader)
        members.append(member)
    expected = len(senders) * msg_count
    deadline = time.monotonic() + TIMEOUT
    snapshots = 1 if snapshot_initiator else 0
    while not all(
        len(m.deliveries()) >= expected and len(m.snapshots()) >= snapshots for m in members
    ):
        if time.monotonic() > deadline or any(m.proc.poll() is not None for m in members):
            stop(members)
            report = {m.name: (len(m.deliveries()), m.proc.returncode, m.err[-3:]) for m in members}
            pytest.fail(f"not every host delivered {expected} messages in {TIMEOUT} s: {report}")
        time.sleep(0.05)
    time.sleep(QUIET)  # anything delivered now would be a duplicate or an invention
    stop(members)
    return members, out


def stop(members: list[Member]) -> None:
    for m in members:
        if m.proc.poll() is None:
            m.proc.terminate()  # the command exits cleanly on SIGTERM
    for m in members:
        try:
            m.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            m.proc.kill()
            m.proc.wait()
        for reader in m.readers:
            reader.join(timeout=5)


def check_delivery(members: list[Member], out: Path, senders: list[str], msg_count: int) -> None:
    lists = {m.name: m.deliveries() for m in members}
    expected = {
        (str(NAMES.index(s) + 1), str(i), str(i + 10))
        for s in senders
        for i in range(1, msg_count + 1)
    }
    for name, lines in lists.items():
        keys = [
            tuple(
                line.split(f"{field}: ")[1].split(",")[0] for field in ("sender", "msg_id", "data")
            )
            for line in lines
        ]
        assert len(keys) == len(set(keys)), f"{name} delivered a message twice"
        assert set(keys) == expected, f"{name} lost or invented messages"
    first = lists[NAMES[0]]
    for name, lines in lists.items():
        assert lines == first, f"{name} delivered in another order than {NAMES[0]}"
    assert all(m.proc.returncode == 0 for m in members), [m.err[-3:] for m in members]
    # The traces tell the same story, and the property checkers agree.
    events, bad = read_run(out)
    assert bad == []
    assert check_all(record_from_trace(events), NAMES) == []


def faults_in(members: list[Member], what: str) -> int:
    return sum(line.startswith(what) for m in members for line in m.err)


CASES = [
    # name, senders, messages, drop rate, delay ms
    ("one_sender", NAMES[:1], 4, 0.0, 0),
    ("two_senders", NAMES[:2], 4, 0.0, 0),
    ("all_senders", NAMES, 4, 0.0, 0),
    ("drop_half_messages", NAMES[:1], 2, 0.5, 0),
    ("drop_majority_messages", NAMES[:1], 2, 0.75, 0),
    ("delay_messages", NAMES[:1], 2, 0.0, 2000),
    ("drop_delay_messages", NAMES[:1], 2, 0.25, 2000),
]


@pytest.mark.netns
@pytest.mark.slow
@pytest.mark.parametrize(
    ("case", "senders", "count", "drop", "delay"), CASES, ids=[c[0] for c in CASES]
)
def test_multicast(
    *,
    hosts: list[Host],
    tmp_path: Path,
    case: str,
    senders: list[str],
    count: int,
    drop: float,
    delay: int,
) -> None:
    members, out = run_case(
        hosts, tmp_path, senders=senders, msg_count=count, drop_rate=drop, delay=delay
    )
    check_delivery(members, out, senders, count)
    drops, delays = faults_in(members, "dropping "), faults_in(members, "delaying messageType: ")
    assert (drops > 0) == (drop > 0), f"{drops} drops logged"
    assert (delays > 0) == (delay > 0), f"{delays} delays logged"
    if delay:
        assert all("by 2000ms" in ln for m in members for ln in m.err if "delaying" in ln)


SNAPSHOT_CASES = [
    # name, senders, initiator
    ("snapshot_with_one_sender", NAMES[:1], NAMES[0]),
    ("snapshot_with_two_senders", NAMES[:2], NAMES[1]),
    ("snapshot_with_all_senders", NAMES, NAMES[-1]),
]


@pytest.mark.netns
@pytest.mark.slow
@pytest.mark.parametrize(
    ("case", "senders", "initiator"), SNAPSHOT_CASES, ids=[c[0] for c in SNAPSHOT_CASES]
)
def test_snapshot(
    *, hosts: list[Host], tmp_path: Path, case: str, senders: list[str], initiator: str
) -> None:
    members, out = run_case(
        hosts,
        tmp_path,
        senders=senders,
        msg_count=8,
        snapshot_initiator=initiator,
        initiate_snapshot_count=3,
    )
    check_delivery(members, out, senders, 8)
    files = sorted((out / "snapshots").glob("*.json"))
    parts = {p["node"]: p for p in (orjson.loads(f.read_bytes()) for f in files)}
    assert sorted(parts) == sorted(NAMES)
    assert {p["initiator"] for p in parts.values()} == {initiator}
    assert len({p["snapshot_id"] for p in parts.values()}) == 1
    assert check_cut(parts) == []
    # The initiator's cut came after its 4th message was queued (the original's rule).
    assert parts[initiator]["local_state"]["isis"]["msg_id"] >= 4 or initiator not in senders
    for m in members:
        assert len(m.snapshots()) == 1 and "channels=3" in m.snapshots()[0]
