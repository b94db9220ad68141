"""gossamer members in a group with the original ISIS program, on four namespace hosts.

Two hosts run the emulation of the original (``originals/isis.py``: its sockets, its
identity rules, its strictness, its log lines; CI cannot build the original itself), two
run ``gossamer isis --wire original`` with the original's own command line. The hostfile
lists host names, resolved through each host's ``/etc/hosts`` as the original resolves
them. Checked: every host delivers every message exactly once, all four in one order;
no emulated original aborted (it aborts on anything it cannot parse); at ``--dropRate
0.2`` drops happened on both kinds of member. Against the real original the same group
was run during development (``docs/interop.md``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gossamer.lab.netns import Host, Topology
from gossamer.testing.pytest_plugin import require_netns

NAMES = ["alpha", "beta", "gamma", "delta"]
ORIGINAL = Path(__file__).with_name("originals") / "isis.py"
TIMEOUT = 90.0
QUIET = 2.0


@pytest.fixture(scope="module")
def hosts() -> Iterator[list[Host]]:
    """Four hosts on one subnet, each resolving the others' names through /etc/hosts."""
    require_netns()
    with Topology(subnets=[4]) as topology:
        lines = "".join(f"{h.ip} {n}\n" for n, h in zip(NAMES, topology.hosts, strict=True))
        made = []
        try:
            for host in topology.hosts:
                # `ip netns exec` bind-mounts /etc/netns/<ns>/hosts over /etc/hosts.
                folder = Path("/etc/netns") / host.netns
                folder.mkdir(parents=True)
                made.append(folder)
                (folder / "hosts").write_text("127.0.0.1 localhost\n" + lines)
            yield topology.hosts
        finally:
            for folder in made:
                shutil.rmtree(folder, ignore_errors=True)


class Proc:
    """A started member and the lines it printed."""

    def __init__(self, name: str, kind: str, proc: subprocess.Popen[str]) -> None:
        self.name, self.kind, self.proc = name, kind, proc
        self.lines: list[str] = []
        self.readers = [
            threading.Thread(target=self._pump, args=(stream,), daemon=True)
            for stream in (proc.stdout, proc.stderr)
        ]
        for reader in self.readers:
            reader.start()

    def _pump(self, stream: object) -> None:
        for line in stream:  # type: ignore[attr-defined]
            self.lines.append(line.rstrip("\n"))

    def deliveries(self) -> list[str]:
        """Delivery lines from the text 'delivering' on, from standard error: where the
        original logs them (glog), and where gossamer repeats them on the original wire."""
        found = [line for line in list(self.lines) if "] delivering dataMsg: " in line]
        return [line[line.index("delivering") :] for line in found]

    def count(self, prefix: str) -> int:
        return sum(prefix in line for line in list(self.lines))


def run_group(
    hosts: list[Host],
    tmp_path: Path,
    *,
    originals: set[str],
    msg_count: int,
    drop: float,
    initiator: str | None = None,
    snapshot_after: int = 2,
) -> list[Proc]:
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("".join(f"{n}\n" for n in NAMES))
    common = ["--hostfile", str(hostfile), "--senders", ",".join(NAMES),
              "--msgCount", str(msg_count), "--dropRate", str(drop)]  # fmt: skip
    procs = []
    for name, host in zip(NAMES, hosts, strict=True):
        flags = [*common]
        if name == initiator:
            flags += ["--initiateSnapshotCount", str(snapshot_after)]
        if name in originals:
            argv, kind = [sys.executable, str(ORIGINAL), *flags], "original"
        else:
            argv = [sys.executable, "-m", "gossamer.cli.isis_cmd", "--wire", "original", *flags]
            kind = "gossamer"
        env = {k: v for k, v in os.environ.items() if k != "GOSSAMER_KEY"}
        proc = host.popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        procs.append(Proc(name, kind, proc))
    expected = len(NAMES) * msg_count

    def finished(p: Proc) -> bool:
        done = "snapshot algorithm completed" if p.kind == "original" else "snapshot done: "
        return len(p.deliveries()) >= expected and (initiator is None or p.count(done) > 0)

    deadline = time.monotonic() + TIMEOUT
    try:
        while not all(finished(p) for p in procs):
            dead = [p for p in procs if p.proc.poll() is not None]
            if time.monotonic() > deadline or dead:
                report = {p.name: (p.kind, len(p.deliveries()), p.proc.returncode, p.lines[-3:])
                          for p in procs}  # fmt: skip
                pytest.fail(f"not every host delivered {expected} messages: {report}")
            time.sleep(0.05)
        time.sleep(QUIET)  # a duplicate or an invented delivery would show up now
        assert all(p.proc.poll() is None for p in procs), "a member exited (an abort?)"
    finally:
        for p in procs:
            p.proc.kill()  # the original ignores SIGTERM
            p.proc.wait()
            for reader in p.readers:
                reader.join(timeout=5)
    return procs


def check_one_order(procs: list[Proc], msg_count: int) -> None:
    expected = {(str(i), str(m), str(m + 10)) for i in range(1, 5) for m in range(1, msg_count + 1)}
    first = procs[0].deliveries()
    for p in procs:
        lines = p.deliveries()
        keys = [tuple(line.split(f"{f}: ")[1].split(",")[0] for f in ("sender", "msg_id", "data"))
                for line in lines]  # fmt: skip
        assert len(keys) == len(set(keys)), f"{p.name} ({p.kind}) delivered a message twice"
        assert set(keys) == expected, f"{p.name} ({p.kind}) lost or invented messages"
        assert lines == first, f"{p.name} ({p.kind}) delivered in another order than alpha"
    assert not [line for p in procs for line in p.lines if line.startswith("F")], "an abort"


@pytest.mark.netns
@pytest.mark.slow
@pytest.mark.parametrize(
    ("originals", "drop"),
    [({"alpha", "beta"}, 0.0), ({"alpha", "beta"}, 0.2), ({"gamma", "delta"}, 0.2)],
    ids=["originals-first", "originals-first-drop0.2", "gossamer-first-drop0.2"],
)
def test_two_originals_and_two_gossamer_members_agree(
    hosts: list[Host], tmp_path: Path, originals: set[str], drop: float
) -> None:
    procs = run_group(hosts, tmp_path, originals=originals, msg_count=4, drop=drop)
    check_one_order(procs, 4)
    if drop:
        # The fault injection happened, on both kinds of member.
        assert all(p.count("dropping ") > 0 for p in procs if p.kind == "original")
        assert sum(p.count("dropping ") for p in procs if p.kind == "gossamer") > 0


@pytest.mark.netns
@pytest.mark.slow
@pytest.mark.parametrize(
    "initiator", ["alpha", "gamma"], ids=["original-starts", "gossamer-starts"]
)
def test_a_snapshot_over_tcp_10002_in_a_mixed_group(
    hosts: list[Host], tmp_path: Path, initiator: str
) -> None:
    """The original's snapshot: markers on TCP 10002, one per peer; every member, of
    either kind, takes part, and the multicasts all complete around it."""
    procs = run_group(hosts, tmp_path, originals={"alpha", "beta"}, msg_count=6, drop=0.0,
                      initiator=initiator)  # fmt: skip
    check_one_order(procs, 6)
    for p in procs:
        if p.kind == "original":
            assert p.count("snapshot algorithm completed") == 1
            assert p.count("marker from ") == 3
        else:
            # Only the initiator knows it is one: the original's markers do not say.
            (line,) = [x for x in p.lines if x.startswith("snapshot done: ")]
            who = initiator if p.name == initiator else "-"
            assert f"initiator={who}," in line and "channels=3" in line


@pytest.mark.netns
def test_one_snapshot_per_lifetime_on_the_original_wire(hosts: list[Host], tmp_path: Path) -> None:
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("".join(f"{n}\n" for n in NAMES))
    done = hosts[0].run(
        [sys.executable, "-m", "gossamer.cli.main", "isis", "--wire", "original",
         "--hostfile", str(hostfile), "--senders", "alpha", "--msgCount", "8",
         "--initiateSnapshotCount", "2", "--snapshot-repeat", "2"],
        check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert "one snapshot per lifetime" in done.stderr
