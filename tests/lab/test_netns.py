"""Tests of gossamer.lab.netns with real sockets between namespace hosts.

Every datagram here is sent inside namespaces the test built (10.77.x.y); nothing is
sent, broadcast or multicast in the machine's own namespace.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from typing import Any

import pytest

from gossamer.errors import ConfigError, GossamerError
from gossamer.lab.netns import (
    Host,
    NetnsError,
    Topology,
    leftovers,
    netns_pids,
)
from gossamer.testing.processes import wait_ready
from gossamer.testing.pytest_plugin import NetnsFactory

GROUP = "239.1.2.3"

# Receive UDP on a port (optionally joining a multicast group) until `want` distinct
# payloads arrived or `wait` seconds passed; print "ready" once listening, then the
# payloads received, one per line.
RECEIVER = textwrap.dedent(
    """
    import socket, sys, time
    port, group, wait, want = int(sys.argv[1]), sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("", port))
    if group:
        mreq = socket.inet_aton(group) + socket.inet_aton("0.0.0.0")
        sock.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, mreq)
    print("ready", flush=True)
    deadline = time.monotonic() + wait
    got = set()
    while len(got) < want and (left := deadline - time.monotonic()) > 0:
        sock.settimeout(left)
        try:
            got.add(sock.recv(2048).decode())
        except TimeoutError:
            break
    print("\\n".join(sorted(got)), flush=True)
    """
)

# Send one payload three times, 20 ms apart (unicast, broadcast or multicast with TTL 4).
SENDER = textwrap.dedent(
    """
    import socket, sys, time
    dst, port, payload, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3].encode(), sys.argv[4]
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    if mode == "broadcast":
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
    if mode == "multicast":
        sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, 4)
    for _ in range(3):
        sock.sendto(payload, (dst, port))
        time.sleep(0.02)
    """
)


def start_receiver(
    host: Host, port: int, *, wait: float, group: str = "", want: int = 1
) -> subprocess.Popen[Any]:
    """Start RECEIVER in ``host`` and return once it is listening."""
    argv = [sys.executable, "-c", RECEIVER, str(port), group, str(wait), str(want)]
    proc = host.popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_ready(proc, timeout=10.0, what=f"receiver in {host.name}")
    return proc


def received(proc: subprocess.Popen[Any]) -> set[str]:
    """Wait for a receiver to finish; the payloads it got."""
    out, err = proc.communicate(timeout=15)
    assert proc.returncode == 0, err
    return {line for line in out.splitlines() if line}


def send(host: Host, dst: str, port: int, payload: str, mode: str = "unicast") -> None:
    host.run([sys.executable, "-c", SENDER, dst, str(port), payload, mode], timeout=10)


def root_links() -> set[str]:
    out = subprocess.run(
        ["ip", "-o", "link", "show"], capture_output=True, text=True, check=True
    ).stdout
    return {line.split(":")[1].strip() for line in out.splitlines() if line}


def ip_netns_pids(netns: str) -> list[str]:
    out = subprocess.run(
        ["ip", "netns", "pids", netns], capture_output=True, text=True, check=True
    ).stdout
    return out.split()


def alive(pid: int) -> bool:
    """True if ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            state = stat.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


@pytest.mark.netns
@pytest.mark.timeout(30)
def test_one_subnet_unicast_broadcast_multicast(netns: NetnsFactory) -> None:
    before = root_links()
    topo = netns(subnets=[3])
    assert root_links() == before  # the root namespace gained no interface
    h0, h1, h2 = topo.hosts
    assert [h.ip for h in topo.hosts] == ["10.77.1.10", "10.77.1.11", "10.77.1.12"]
    assert {h.broadcast for h in topo.hosts} == {"10.77.1.255"}
    assert topo.router is None
    assert topo.subnet_hosts(0) == [h0, h1, h2]

    unicast = start_receiver(h1, 5001, wait=5)
    send(h0, h1.ip, 5001, "uni")
    assert received(unicast) == {"uni"}

    bcast = [start_receiver(h, 5002, wait=5) for h in (h1, h2)]
    send(h0, h0.broadcast, 5002, "bcast", "broadcast")
    assert [received(p) for p in bcast] == [{"bcast"}, {"bcast"}]

    mcast = [start_receiver(h, 5003, wait=5, group=GROUP) for h in (h1, h2)]
    send(h0, GROUP, 5003, "mcast", "multicast")
    assert [received(p) for p in mcast] == [{"mcast"}, {"mcast"}]


@pytest.mark.netns
@pytest.mark.timeout(30)
def test_router_forwards_unicast_but_not_broadcast_or_multicast(netns: NetnsFactory) -> None:
    topo = netns(subnets=[2, 2])
    h0, h1, h2, h3 = topo.hosts
    assert topo.subnet_hosts(0) == [h0, h1]
    assert topo.subnet_hosts(1) == [h2, h3]
    assert (h2.ip, h2.broadcast) == ("10.77.2.10", "10.77.2.255")
    router = topo.router
    assert router is not None and router.ip == "10.77.1.1"
    forward = router.run(["cat", "/proc/sys/net/ipv4/ip_forward"]).stdout.strip()
    assert forward == "1"

    unicast = start_receiver(h2, 5001, wait=5)
    send(h0, h2.ip, 5001, "routed")
    assert received(unicast) == {"routed"}

    # Same-subnet receivers exit on arrival; the other subnet's wait 1.5 s for nothing.
    near = [start_receiver(h1, 5002, wait=5), start_receiver(h1, 5003, wait=5, group=GROUP)]
    far = [start_receiver(h, 5002, wait=1.5) for h in (h2, h3)]
    far += [start_receiver(h, 5003, wait=1.5, group=GROUP) for h in (h2, h3)]
    send(h0, h0.broadcast, 5002, "bcast", "broadcast")
    send(h0, GROUP, 5003, "mcast", "multicast")
    assert [received(p) for p in near] == [{"bcast"}, {"mcast"}]
    assert [received(p) for p in far] == [set(), set(), set(), set()]


@pytest.mark.netns
@pytest.mark.timeout(30)
def test_crash_kills_every_process_in_the_host(netns: NetnsFactory) -> None:
    topo = netns(subnets=[2])
    host, other = topo.hosts
    sleeper = host.popen([sys.executable, "-c", "import time; time.sleep(60)"])
    # A shell whose background child is not tracked by the topology.
    shell = host.popen(["sh", "-c", "sleep 60 & echo $!; wait"], stdout=subprocess.PIPE)
    assert shell.stdout is not None
    orphan = int(shell.stdout.readline())
    bystander = other.popen(["sleep", "60"])
    assert {str(sleeper.pid), str(shell.pid), str(orphan)} <= set(ip_netns_pids(host.netns))

    host.crash()

    assert sleeper.returncode == -9
    assert shell.returncode == -9
    assert not alive(orphan)
    assert ip_netns_pids(host.netns) == []
    assert netns_pids(host.netns) == []
    assert bystander.poll() is None  # the other host is untouched
    assert host.run(["echo", "restarted"]).stdout == "restarted\n"


@pytest.mark.netns
@pytest.mark.timeout(30)
def test_cut_stops_traffic_and_heal_restores_it(netns: NetnsFactory) -> None:
    topo = netns(subnets=[2])
    h0, h1 = topo.hosts
    first = start_receiver(h1, 5001, wait=5)
    send(h0, h1.ip, 5001, "before")
    assert received(first) == {"before"}

    topo.cut(h1)
    assert "NO-CARRIER" in h1.run(["ip", "link", "show", "eth0"]).stdout
    during = start_receiver(h1, 5001, wait=1.0)
    send(h0, h1.ip, 5001, "during")
    assert received(during) == set()

    topo.heal(h1)
    assert "NO-CARRIER" not in h1.run(["ip", "link", "show", "eth0"]).stdout
    after = start_receiver(h1, 5001, wait=5)
    send(h0, h1.ip, 5001, "after")
    assert received(after) == {"after"}


@pytest.mark.netns
@pytest.mark.timeout(30)
def test_teardown_on_exception_inside_with(netns: NetnsFactory) -> None:
    topo = Topology(subnets=[1, 1])
    with pytest.raises(RuntimeError, match="boom"), topo:
        assert len(leftovers(topo.prefix + "-")) == 5  # sw0, sw1, r, h0, h1
        tracked = topo.hosts[0].popen(["sleep", "60"])
        untracked = topo.hosts[1].popen(["sh", "-c", "sleep 60 & echo $!; wait"], stdout=-1)
        pipe = untracked.stdout
        assert pipe is not None
        orphan = int(pipe.readline())
        raise RuntimeError("boom")
    assert topo.closed
    assert leftovers(topo.prefix + "-") == []
    assert tracked.returncode == -9
    assert untracked.returncode == -9
    assert pipe is not None and pipe.closed  # teardown closed the pipe
    assert not alive(orphan)
    with pytest.raises(ConfigError, match="not built"):
        topo.hosts[0].run(["true"])
    with pytest.raises(ConfigError, match="only once"), topo:
        pass


@pytest.mark.netns
@pytest.mark.timeout(30)
def test_partially_failed_build_cleans_up(netns: NetnsFactory) -> None:
    topo = Topology(subnets=[3])
    # Squat the name of the third host's namespace: the build fails after sw0, h0 and h1.
    squatter = topo.hosts[2].netns
    subprocess.run(["ip", "netns", "add", squatter], check=True)
    with pytest.raises(NetnsError, match=f"ip netns add {squatter}") as info, topo:
        pytest.fail("the build should have failed")
    assert "File exists" in str(info.value)
    assert info.value.fields["returncode"] != 0
    assert topo.closed
    assert leftovers(topo.prefix + "-") == []


@pytest.mark.netns
@pytest.mark.timeout(30)
def test_failed_command_reports_command_and_stderr(netns: NetnsFactory) -> None:
    topo = netns(subnets=[1])
    (host,) = topo.hosts
    with pytest.raises(NetnsError) as info:
        host.run(["sh", "-c", "echo oops >&2; exit 3"])
    assert isinstance(info.value, GossamerError)
    assert info.value.fields["returncode"] == 3
    assert "oops" in str(info.value) and "sh -c" in str(info.value)
    assert host.run(["sh", "-c", "exit 3"], check=False).returncode == 3
    assert host.run(["cat"], input="fed").stdout == "fed"
    with pytest.raises(NetnsError, match="timed out"):
        host.run(["sleep", "5"], timeout=0.2)
    with pytest.raises(ConfigError, match="another topology"):
        Topology(subnets=[1]).cut(host)


@pytest.mark.netns
@pytest.mark.timeout(30)
def test_atexit_tears_down_a_topology_left_open(netns: NetnsFactory) -> None:
    script = textwrap.dedent(
        """
        from gossamer.lab.netns import Topology
        topo = Topology(subnets=[2]).__enter__()
        proc = topo.hosts[0].popen(["sleep", "60"])
        print(topo.prefix, proc.pid, flush=True)
        # exit without leaving the `with`: only the atexit hook can clean up
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=20, check=True
    )
    prefix, pid = result.stdout.split()
    assert prefix.startswith("gs")
    assert leftovers(prefix + "-") == []
    assert not alive(int(pid))


@pytest.mark.parametrize(
    "subnets",
    [[], [0], [-1], [246], [1.5], [True], "3", [1] * 255],
)
def test_bad_subnets_are_config_errors(subnets: Any) -> None:
    with pytest.raises(ConfigError):
        Topology(subnets=subnets)


def test_unknown_subnet_is_a_config_error() -> None:
    topo = Topology(subnets=[2])
    with pytest.raises(ConfigError, match="no such subnet"):
        topo.subnet_hosts(1)
    assert [h.name for h in topo.hosts] == ["h0", "h1"]
    assert all(h.netns.startswith(topo.prefix + "-") for h in topo.hosts)


PLUGIN_CHECKS = textwrap.dedent(
    """
    import pathlib
    import pytest
    from gossamer.lab.netns import Topology

    def test_unmarked(netns):
        netns(subnets=[1])

    @pytest.mark.netns
    def test_leaks_a_topology(netns):
        topo = Topology(subnets=[1]).__enter__()
        pathlib.Path("leaked_prefix").write_text(topo.prefix)

    @pytest.mark.netns
    def test_clean(netns):
        topo = netns(subnets=[1])
        topo.hosts[0].popen(["sleep", "60"])
    """
)


def run_child_pytest(tmp_path: Any, **env: str) -> str:
    (tmp_path / "test_child.py").write_text(PLUGIN_CHECKS)
    child_env = {k: v for k, v in os.environ.items() if k not in ("CI", "PYTEST_ADDOPTS")}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "gossamer.testing.pytest_plugin",
         "-p", "no:cacheprovider", "--strict-markers", "-rA", "test_child.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60, env={**child_env, **env},
        check=False,
    )  # fmt: skip
    return result.stdout


@pytest.mark.netns
@pytest.mark.timeout(60)
def test_plugin_checks_marker_and_leftovers(netns: NetnsFactory, tmp_path: Any) -> None:
    out = run_child_pytest(tmp_path)
    # Fixture failures count as errors: at setup (no marker), at teardown (the leak).
    assert "2 passed, 2 errors" in out, out
    assert "ERROR test_child.py::test_unmarked" in out
    assert "must carry @pytest.mark.netns" in out
    assert "ERROR test_child.py::test_leaks_a_topology" in out
    assert "was built during the test and is still open" in out
    # The child's atexit hook removed what the test leaked.
    assert leftovers((tmp_path / "leaked_prefix").read_text() + "-") == []


@pytest.mark.netns
@pytest.mark.timeout(60)
def test_plugin_skips_without_ip_but_fails_under_ci(netns: NetnsFactory, tmp_path: Any) -> None:
    # With no `ip` on PATH namespaces are really unavailable to the child.
    out = run_child_pytest(tmp_path, PATH="/nonexistent")
    assert "2 skipped, 1 error" in out, out
    assert "iproute2's `ip` command is not on PATH" in out
    out = run_child_pytest(tmp_path, PATH="/nonexistent", CI="true")
    assert "3 errors" in out, out
    assert "CI=true, but network namespaces are unavailable" in out
