"""Multi-host test networks built from Linux network namespaces.

A :class:`Topology` is one or more IPv4 subnets. Each subnet is a bridge (``br0``) that
lives inside its own *switch* namespace; every host is its own namespace with ``lo`` up
and one interface ``eth0``, a veth whose other end is a port of the subnet's bridge.
With more than one subnet a *router* namespace joins them: it has one interface
``eth<s>`` per subnet, forwards unicast (``ip_forward=1``) and has no multicast
routing, so broadcast and multicast stay inside their subnet, as on a real LAN
(DESIGN.md, "Real networks in tests")::

    subnet s = 10.77.<s+1>.0/24      router .1 (eth<s>), hosts .10, .11, ... (eth0)
    every host: 224.0.0.0/4 dev eth0; default via 10.77.<s+1>.1 when there is a router

Isolation contract:

- The machine's own (root) network namespace is never modified: veth pairs are created
  directly inside the switch namespace with their peer placed in the host namespace
  (``ip -n SWITCH link add P type veth peer name eth0 netns HOST``), and the bridge lives
  in the switch namespace. Every address above exists only inside namespaces.
- Every name starts with a prefix unique to the process and the topology
  (``gs<pid>x<counter>``, see :attr:`Topology.prefix`), so parallel runs cannot collide.
  Namespaces are ``<prefix>-sw<s>``, ``<prefix>-r`` and ``<prefix>-h<i>``; interface
  names (``br0``, ``h<i>``, ``r``, ``eth<s>``) live inside namespaces and are at most
  15 characters.
- ``__exit__`` always tears down, also after an exception or a partially failed build:
  it SIGKILLs and reaps tracked processes, SIGKILLs whatever else runs in the
  namespaces, deletes the namespaces (which deletes their veths) and then verifies that
  nothing with the prefix is left (``ip netns list``, ``ip link``). An :mod:`atexit`
  hook tears down topologies that are still up when the interpreter exits.

Building needs root and iproute2; :func:`netns_unavailable_reason` says why it cannot
be done here (tests skip with that reason). Failures raise :class:`NetnsError` naming
the failing command and its stderr; bad arguments raise :class:`ConfigError`.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Final, Literal

from gossamer.errors import ConfigError, GossamerError

__all__ = [
    "Host",
    "NetnsError",
    "Topology",
    "leftovers",
    "netns_pids",
    "netns_unavailable_reason",
    "open_topologies",
    "process_prefix",
]

#: Where ``ip netns`` keeps its namespace bind mounts (iproute2's NETNS_RUN_DIR).
NETNS_DIR: Final = "/var/run/netns"
#: Subnet ``s`` is ``10.77.<s+1>.0/24``, so at most 254 subnets.
MAX_SUBNETS: Final = 254
#: Hosts take ``.10`` to ``.254`` of their subnet.
MAX_HOSTS_PER_SUBNET: Final = 245
_FIRST_HOST_OCTET: Final = 10
# Bridge-port ifindexes (see Topology._connect); namespace-side ones stay below 300.
_ROUTER_PORT_INDEX: Final = 999
_HOST_PORT_INDEX: Final = 1000
_COMMAND_TIMEOUT: Final = 30.0
_KILL_TIMEOUT: Final = 10.0
_STDERR_LIMIT: Final = 2000

_counter = itertools.count()
_unavailable_cache: dict[int, str | None] = {}  # keyed by pid: a forked child probes anew


class NetnsError(GossamerError):
    """A command that builds, uses or tears down the namespaces failed.

    ``fields`` carries ``cmd`` (the shell-quoted command), ``returncode`` and ``stderr``
    when a command failed, or ``problems`` when teardown left something behind.
    """


def process_prefix() -> str:
    """The prefix of every namespace this process creates: ``gs<pid>x``.

    Topology prefixes extend it with a counter (``gs<pid>x<n>``); a namespace name is
    the topology prefix, ``-`` and a role, so no prefix is a prefix of another's names.
    """
    return f"gs{os.getpid()}x"


def _tail(text: str) -> str:
    text = text.strip()
    return text if len(text) <= _STDERR_LIMIT else "..." + text[-_STDERR_LIMIT:]


def _run(
    argv: Sequence[str],
    *,
    timeout: float = _COMMAND_TIMEOUT,
    check: bool = True,
    input: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` to completion; raise NetnsError (with command and stderr) on failure."""
    cmd = shlex.join(argv)
    try:
        result = subprocess.run(
            list(argv),
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        # subprocess.run has already killed and reaped the child.
        raise NetnsError(f"`{cmd}` timed out", cmd=cmd, timeout=timeout) from exc
    except OSError as exc:
        raise NetnsError(f"`{cmd}` could not start: {exc}", cmd=cmd) from exc
    if check and result.returncode != 0:
        stderr = _tail(result.stderr)
        raise NetnsError(
            f"`{cmd}` failed: {stderr or '(no stderr)'}",
            cmd=cmd,
            returncode=result.returncode,
            stderr=stderr,
        )
    return result


def _ip(*args: str) -> None:
    _run(["ip", *args])


def _list_netns() -> list[str]:
    """Names from ``ip netns list`` (lines look like ``name (id: 3)`` or ``name``)."""
    out = _run(["ip", "netns", "list"]).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def netns_pids(netns: str) -> list[int]:
    """PIDs of the processes in namespace ``netns``, as ``ip netns pids`` reports them.

    Like iproute2, compares each ``/proc/<pid>/ns/net`` with the namespace's bind mount
    (zombies have no namespace and are not listed). Empty when the namespace is gone.
    """
    try:
        target = os.stat(os.path.join(NETNS_DIR, netns))
    except FileNotFoundError:
        return []
    me = os.getpid()
    pids: list[int] = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            st = os.stat(f"/proc/{entry}/ns/net")
        except OSError:  # exited meanwhile, or a zombie
            continue
        if (st.st_dev, st.st_ino) == (target.st_dev, target.st_ino):
            pids.append(int(entry))
    return sorted(pids)


def _kill_netns_processes(netns: str, *, timeout: float = _KILL_TIMEOUT) -> None:
    """SIGKILL everything in ``netns`` until it is empty (a process may fork meanwhile)."""
    deadline = time.monotonic() + timeout
    while True:
        pids = netns_pids(netns)
        if not pids:
            return
        if time.monotonic() > deadline:
            raise NetnsError(
                f"processes in namespace {netns} survived SIGKILL", netns=netns, pids=pids
            )
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):  # exited meanwhile
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.005)


def _wait_links_up(namespaces: Sequence[str], *, timeout: float = _KILL_TIMEOUT) -> None:
    """Wait until every interface but ``lo`` in ``namespaces`` is operationally UP.

    The kernel turns a veth's carrier on asynchronously (linkwatch); until then the
    device has no working qdisc and drops what is sent, so a topology is not usable
    before this returns.
    """
    deadline = time.monotonic() + timeout
    for netns in namespaces:
        while True:
            out = _run(["ip", "-n", netns, "-o", "link", "show"]).stdout
            # br0's own operstate does not matter: it forwards between its ports anyway.
            names = [(line.split(":")[1].strip(), line) for line in out.splitlines() if line]
            down = [
                name
                for name, line in names
                if name not in ("lo", "br0") and " state UP " not in line
            ]
            if not down:
                break
            if time.monotonic() > deadline:
                raise NetnsError(
                    f"interfaces in {netns} did not come up", netns=netns, interfaces=down
                )
            time.sleep(0.01)


def leftovers(prefix: str) -> list[str]:
    """What still exists with ``prefix``: namespaces, and root-namespace links.

    A namespace counts when its name starts with ``prefix``; a link of the root
    namespace counts when its ``ip -o link`` line mentions ``prefix`` anywhere (its
    name, or ``link-netns <name>`` for a veth whose peer sits in one of our namespaces).
    Returns human-readable items; empty means clean.
    """
    items = [f"namespace {name}" for name in _list_netns() if name.startswith(prefix)]
    links = _run(["ip", "-o", "link", "show"]).stdout
    items += [f"link {line.strip()}" for line in links.splitlines() if prefix in line]
    return items


def netns_unavailable_reason() -> str | None:
    """Why network namespaces cannot be built here, or ``None`` when they can.

    Checks Linux, root, iproute2's ``ip`` and then really builds a probe namespace with a
    bridge and a veth pair inside it (and deletes it). Cached per process.
    """
    pid = os.getpid()
    if pid not in _unavailable_cache:
        _unavailable_cache[pid] = _probe()
    return _unavailable_cache[pid]


def _probe() -> str | None:
    if not sys.platform.startswith("linux"):
        return f"network namespaces need Linux (this is {sys.platform})"
    if os.geteuid() != 0:
        return f"building network namespaces needs root (euid is {os.geteuid()})"
    if shutil.which("ip") is None:
        return "iproute2's `ip` command is not on PATH"
    name = f"{process_prefix()}probe{next(_counter)}"
    try:
        _ip("netns", "add", name)
    except NetnsError as exc:
        return f"`ip netns add` does not work here: {exc.reason}"
    reason: str | None = None
    try:
        _ip("-n", name, "link", "add", "name", "br0", "type", "bridge")
        _ip("-n", name, "link", "add", "name", "vpa", "type", "veth", "peer", "name", "vpb")
    except NetnsError as exc:
        reason = f"cannot create a bridge and a veth pair in a namespace: {exc.reason}"
    try:
        _ip("netns", "del", name)
    except NetnsError as exc:
        reason = reason or f"`ip netns del` does not work here: {exc.reason}"
    return reason


@dataclass(frozen=True, slots=True, kw_only=True)
class Host:
    """One host (or the router) of a :class:`Topology`: a network namespace.

    ``ip`` and ``broadcast`` are those of ``iface`` on subnet ``subnet``; the router's
    are its address on subnet 0 (it also has ``eth<s>`` = ``10.77.<s+1>.1`` on each
    subnet ``s``). Commands run inside the namespace via ``ip netns exec``.
    """

    name: str
    netns: str
    ip: str
    subnet: int
    broadcast: str
    iface: str = "eth0"
    _topology: Topology = field(repr=False, compare=False)

    def run(
        self,
        argv: Sequence[str],
        timeout: float = 30.0,
        check: bool = True,
        input: str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` in this host to completion, capturing text stdout and stderr.

        Raises :class:`NetnsError` (with command, exit status and stderr) when ``check``
        and the exit status is not 0, and always when ``timeout`` expires (the process
        is killed first).
        """
        self._topology._require_built()
        return _run(
            ["ip", "netns", "exec", self.netns, *argv],
            timeout=timeout,
            check=check,
            input=input,
        )

    def popen(self, argv: Sequence[str], **popen_kwargs: Any) -> subprocess.Popen[Any]:
        """Start ``argv`` in this host; ``popen_kwargs`` go to :class:`subprocess.Popen`.

        The process is tracked: teardown SIGKILLs and reaps it and closes its pipes.
        ``ip netns exec`` execs the program, so ``Popen.pid`` is the program itself.
        """
        self._topology._require_built()
        proc: subprocess.Popen[Any] = subprocess.Popen(
            ["ip", "netns", "exec", self.netns, *argv], **popen_kwargs
        )
        self._topology._track(self, proc)
        return proc

    def crash(self) -> None:
        """SIGKILL every process in this host's namespace and wait until none is left.

        Tracked processes are reaped (their ``returncode`` becomes ``-SIGKILL``). The
        namespace and its network stay up: new processes can be started ("restart").
        """
        self._topology._crash(self)


_State = Literal["new", "building", "built", "closed"]
_LIVE: set[Topology] = set()
_atexit_registered = False


def open_topologies() -> list[Topology]:
    """Topologies of this process that are built (or building) and not yet torn down."""
    return [topo for topo in _LIVE if topo._owner_pid == os.getpid()]


def _teardown_at_exit() -> None:
    for topo in list(_LIVE):
        if topo._owner_pid != os.getpid():  # a forked child must not tear down our networks
            continue
        problems = topo._teardown()
        if problems:
            print(
                f"gossamer.lab.netns: teardown of {topo.prefix} at exit: {problems}",
                file=sys.stderr,
            )


def _validate_subnets(subnets: Sequence[int]) -> tuple[int, ...]:
    if isinstance(subnets, str | bytes) or not isinstance(subnets, Sequence):
        raise ConfigError("subnets must be a sequence of host counts", subnets=subnets)
    counts = tuple(subnets)
    if not 1 <= len(counts) <= MAX_SUBNETS:
        raise ConfigError(
            f"need between 1 and {MAX_SUBNETS} subnets", subnets=counts, count=len(counts)
        )
    for index, count in enumerate(counts):
        if isinstance(count, bool) or not isinstance(count, int):
            raise ConfigError("a subnet's host count must be an int", subnet=index, count=count)
        if not 1 <= count <= MAX_HOSTS_PER_SUBNET:
            raise ConfigError(
                f"a subnet holds between 1 and {MAX_HOSTS_PER_SUBNET} hosts",
                subnet=index,
                count=count,
            )
    return counts


class Topology:
    """Subnets of hosts in network namespaces; a context manager that builds and removes them.

    ``Topology(subnets=[3])`` is one subnet with hosts ``h0``-``h2``;
    ``Topology(subnets=[4, 4])`` is two subnets (``h0``-``h3`` and ``h4``-``h7``) joined by
    a router. Hosts are numbered across subnets in order. A topology is built once
    (``__enter__``) and torn down once (``__exit__`` or :meth:`close`); the host list
    and names are known from construction on.
    """

    def __init__(self, subnets: Sequence[int]) -> None:
        self.subnets: tuple[int, ...] = _validate_subnets(subnets)
        self.prefix: str = f"{process_prefix()}{next(_counter)}"
        self._owner_pid = os.getpid()
        self._state: _State = "new"
        self._created: list[str] = []  # namespaces that `ip netns add` created, in order
        self._processes: list[tuple[str, subprocess.Popen[Any]]] = []
        # host name -> (switch namespace, bridge port) for each of its links
        self._ports: dict[str, list[tuple[str, str]]] = {}
        self._hosts: list[Host] = []
        index = 0
        for subnet, count in enumerate(self.subnets):
            for offset in range(count):
                self._hosts.append(
                    Host(
                        name=f"h{index}",
                        netns=f"{self.prefix}-h{index}",
                        ip=self._address(subnet, _FIRST_HOST_OCTET + offset),
                        subnet=subnet,
                        broadcast=self._address(subnet, 255),
                        _topology=self,
                    )
                )
                index += 1
        self._router: Host | None = None
        if len(self.subnets) > 1:
            self._router = Host(
                name="r",
                netns=f"{self.prefix}-r",
                ip=self._address(0, 1),
                subnet=0,
                broadcast=self._address(0, 255),
                _topology=self,
            )

    @staticmethod
    def _address(subnet: int, octet: int) -> str:
        return f"10.77.{subnet + 1}.{octet}"

    def __repr__(self) -> str:
        return f"Topology(subnets={list(self.subnets)!r}, prefix={self.prefix!r}, {self._state})"

    @property
    def hosts(self) -> list[Host]:
        """All hosts (not the router), ``h0`` first."""
        return list(self._hosts)

    @property
    def router(self) -> Host | None:
        """The router joining the subnets, or ``None`` for a single subnet."""
        return self._router

    @property
    def processes(self) -> tuple[subprocess.Popen[Any], ...]:
        """Every process started with :meth:`Host.popen`, in start order."""
        return tuple(proc for _, proc in self._processes)

    @property
    def closed(self) -> bool:
        """True once teardown has run."""
        return self._state == "closed"

    def switch_netns(self, subnet: int) -> str:
        """The namespace holding subnet ``subnet``'s bridge ``br0``."""
        self._check_subnet(subnet)
        return f"{self.prefix}-sw{subnet}"

    def subnet_hosts(self, subnet: int) -> list[Host]:
        """The hosts on subnet ``subnet`` (not the router)."""
        self._check_subnet(subnet)
        return [host for host in self._hosts if host.subnet == subnet]

    def _check_subnet(self, subnet: int) -> None:
        if not 0 <= subnet < len(self.subnets):
            raise ConfigError("no such subnet", subnet=subnet, subnets=len(self.subnets))

    # -- lifecycle ---------------------------------------------------------------------

    def __enter__(self) -> Topology:
        global _atexit_registered  # noqa: PLW0603 -- register the fallback once per process
        if self._state != "new":
            raise ConfigError("a Topology is built only once; create a new one", prefix=self.prefix)
        reason = netns_unavailable_reason()
        if reason is not None:
            raise NetnsError(f"cannot build network namespaces: {reason}", prefix=self.prefix)
        self._state = "building"
        _LIVE.add(self)
        if not _atexit_registered:
            atexit.register(_teardown_at_exit)
            _atexit_registered = True
        try:
            self._build()
        except BaseException as exc:
            problems = self._teardown()
            if problems:
                exc.add_note(f"teardown after the failed build also failed: {problems}")
            raise
        self._state = "built"
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        problems = self._teardown()
        if not problems:
            return
        error = NetnsError("teardown left problems", prefix=self.prefix, problems=problems)
        if exc is not None:
            # Do not mask the exception that ended the block; attach the teardown report.
            exc.add_note(str(error))
            return
        raise error

    def close(self) -> None:
        """Tear down now (idempotent); raise :class:`NetnsError` if anything is left."""
        problems = self._teardown()
        if problems:
            raise NetnsError("teardown left problems", prefix=self.prefix, problems=problems)

    def _require_built(self) -> None:
        if self._state != "built":
            raise ConfigError(
                f"the topology is {self._state}, not built; use it inside `with`",
                prefix=self.prefix,
            )

    def _add_netns(self, name: str) -> None:
        _ip("netns", "add", name)
        self._created.append(name)
        _ip("-n", name, "link", "set", "dev", "lo", "up")

    def _connect(
        self, host: Host, *, subnet: int, port: str, index: int, iface: str, address: str
    ) -> None:
        """Join ``host`` to ``subnet``: veth ``iface`` in the host, ``port`` on the bridge.

        The pair is created inside the switch namespace with its peer placed straight
        into the host namespace, so it never exists in the root namespace. The bridge
        port gets ifindex ``index`` (>= 999) so it never equals its peer's (small,
        automatic) ifindex: the kernel's linkwatch treats a carrier change of a device
        whose ifindex equals its iflink as non-urgent and batches it for up to a second.
        """
        switch = self.switch_netns(subnet)
        _ip("-n", switch, "link", "add", "name", port, "index", str(index), "type", "veth",
            "peer", "name", iface, "netns", host.netns)  # fmt: skip
        self._ports.setdefault(host.name, []).append((switch, port))
        _ip("-n", switch, "link", "set", "dev", port, "master", "br0", "up")
        # `brd +` sets the subnet broadcast address (10.77.<s+1>.255) on the interface.
        _ip("-n", host.netns, "addr", "add", f"{address}/24", "brd", "+", "dev", iface)
        _ip("-n", host.netns, "link", "set", "dev", iface, "up")

    def _build(self) -> None:
        for subnet in range(len(self.subnets)):
            switch = self.switch_netns(subnet)
            _ip("netns", "add", switch)
            self._created.append(switch)
            # Snooping off: the bridge floods multicast like a plain switch, whether or not
            # an IGMP querier exists, so group delivery depends only on host membership.
            _ip("-n", switch, "link", "add", "name", "br0", "type", "bridge", "mcast_snooping", "0")
            _ip("-n", switch, "link", "set", "dev", "br0", "up")
        router = self._router
        if router is not None:
            self._add_netns(router.netns)
            for subnet in range(len(self.subnets)):
                address = self._address(subnet, 1)
                self._connect(
                    router, subnet=subnet, port="r", index=_ROUTER_PORT_INDEX,
                    iface=f"eth{subnet}", address=address,
                )  # fmt: skip
            # Unicast forwarding only: with no multicast routing daemon the kernel forwards
            # no multicast, and it never forwards link-local broadcast.
            self._sysctl(router, "net/ipv4/ip_forward", "1")
        for number, host in enumerate(self._hosts):
            self._add_netns(host.netns)
            self._connect(
                host, subnet=host.subnet, port=host.name, index=_HOST_PORT_INDEX + number,
                iface=host.iface, address=host.ip,
            )  # fmt: skip
            # Multicast goes out eth0 even without a default route (single subnet).
            _ip("-n", host.netns, "route", "add", "224.0.0.0/4", "dev", host.iface)
            if router is not None:
                gateway = self._address(host.subnet, 1)
                _ip("-n", host.netns, "route", "add", "default", "via", gateway)
        _wait_links_up(self._created)

    @staticmethod
    def _sysctl(host: Host, key: str, value: str) -> None:
        # /proc/sys/net/* resolves against the writer's network namespace.
        _run(["ip", "netns", "exec", host.netns, "sh", "-c", f"echo {value} > /proc/sys/{key}"])

    def _teardown(self) -> list[str]:
        """Remove everything; return the problems found (empty when clean). Idempotent."""
        if self._state in ("new", "closed"):
            self._state = "closed"
            return []
        self._state = "closed"
        _LIVE.discard(self)
        problems: list[str] = []
        for _, proc in self._processes:
            problems += _reap(proc)
        try:
            names = set(self._created)
            # Also anything else carrying our prefix, e.g. from an interrupted `ip netns add`.
            names.update(n for n in _list_netns() if n.startswith(self.prefix + "-"))
        except NetnsError as exc:
            problems.append(str(exc))
        # Hosts and router first, switches last: a host's veth dies with the host.
        for name in sorted(names, key=lambda n: ("-sw" in n, n)):
            try:
                _kill_netns_processes(name)
                _ip("netns", "del", name)
            except NetnsError as exc:
                problems.append(str(exc))
        try:
            left = leftovers(self.prefix + "-")
        except NetnsError as exc:
            problems.append(str(exc))
        else:
            problems += [f"left behind: {item}" for item in left]
        return problems

    # -- operations --------------------------------------------------------------------

    def _track(self, host: Host, proc: subprocess.Popen[Any]) -> None:
        self._processes.append((host.name, proc))

    def _own(self, host: Host) -> None:
        if host._topology is not self:
            raise ConfigError("the host belongs to another topology", host=host.name)

    def _crash(self, host: Host) -> None:
        self._own(host)
        self._require_built()
        _kill_netns_processes(host.netns)
        problems: list[str] = []
        for name, proc in self._processes:
            if name == host.name:
                try:
                    proc.wait(timeout=_KILL_TIMEOUT)
                except subprocess.TimeoutExpired:
                    problems.append(f"pid {proc.pid} not reaped after SIGKILL")
        if problems:
            raise NetnsError("crash left processes behind", host=host.name, problems=problems)

    def cut(self, host: Host) -> None:
        """Take ``host``'s links down at the switch side: no traffic in or out of it.

        The host sees NO-CARRIER on its interface; its addresses and routes stay.
        """
        self._set_links(host, "down")

    def heal(self, host: Host) -> None:
        """Bring ``host``'s links back up after :meth:`cut`; returns once traffic can flow."""
        self._set_links(host, "up")

    def _set_links(self, host: Host, state: Literal["up", "down"]) -> None:
        self._own(host)
        self._require_built()
        for switch, port in self._ports[host.name]:
            _ip("-n", switch, "link", "set", "dev", port, state)
        if state == "up":
            _wait_links_up([host.netns, *(switch for switch, _ in self._ports[host.name])])


def _reap(proc: subprocess.Popen[Any]) -> list[str]:
    """SIGKILL (if still running) and wait for a tracked process; close its pipes."""
    problems: list[str] = []
    if proc.poll() is None:
        proc.kill()  # Popen.kill does nothing once the process is reaped: no PID reuse race
        try:
            proc.wait(timeout=_KILL_TIMEOUT)
        except subprocess.TimeoutExpired:
            problems.append(f"pid {proc.pid} still running after SIGKILL")
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        if stream is not None:
            with contextlib.suppress(OSError):  # e.g. unflushed stdin data, reader gone
                stream.close()
    return problems
