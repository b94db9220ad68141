"""The lab's scenarios: which services run, their workloads, parameters, faults and checks.

A :class:`Scenario` is data: the services it enables, its defaults (hosts, duration,
faults), the ``--param KEY=VALUE`` it accepts (each typed, bounded and documented) and
the analysis checks it expects to exercise. :func:`node_configs` turns a scenario, its
resolved parameters, a :class:`~gossamer.lab.hosts.Placement` and a
:class:`FaultSchedule` into one node-config document per node, in the layout of the
lab app contract (``docs/lab-app.md``; the TOML is written by :mod:`gossamer.lab.rundir`).

Parameter names are flat and unique across services (``gossip_rate``, ``isis_rate``) so
that the ``demo``, which runs every service, takes the same names as the single-service
scenarios. Every scenario also takes ``duration``, ``linger``, ``settle`` and ``delay_rate``.

Parameters are :class:`gossamer.params.Param`, the simulator's too (one name, one unit,
inclusive bounds, one error format). Crashes and partitions are
:class:`gossamer.faults.Crash` and :class:`gossamer.faults.Partition`, parsed by
:mod:`gossamer.faults` (the one grammar of ``HOST@SECONDS`` and ``A,B@FROM-TO``); what is
lab-specific is :class:`FaultSchedule`'s validation against the run's hosts.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

from gossamer.errors import ConfigError
from gossamer.faults import Crash, Partition
from gossamer.lab.hosts import Placement
from gossamer.params import Param, boolean, integer, number, resolve

__all__ = [
    "CHECKS_BY_SERVICE",
    "SCENARIOS",
    "SERVICES",
    "FaultSchedule",
    "Scenario",
    "get",
    "host",
    "node_configs",
    "scenarios",
]

#: Every service a node can run, in the order of the config's sections.
SERVICES: Final = ("discovery", "gossip", "isis", "link", "gateway")

#: The analysis checks (``gossamer.analysis.catalog``) each service's traces feed.
#: ``snapshot`` stands for ISIS under the Chandy–Lamport node with its bank workload.
CHECKS_BY_SERVICE: Final[Mapping[str, tuple[str, ...]]] = {
    "discovery": (
        "discovery.full_view",
        "discovery.crash_detection",
        "discovery.false_removals",
    ),
    "gossip": ("gossip.coverage", "gossip.depth", "gossip.integrity"),
    "isis": (
        "isis.total_order",
        "isis.agreement",
        "isis.validity",
        "isis.integrity",
        "isis.final_sequence",
    ),
    # ISIS on agreed views (the demo): virtual synchrony instead of agreement and validity
    # over every node, and the views themselves.
    "isis_views": (
        "isis.total_order",
        "isis.view_agreement",
        "isis.view_validity",
        "isis.integrity",
        "isis.final_sequence",
        "views.agreement",
        "views.rejoin",
    ),
    "snapshot": ("snapshot.consistency", "snapshot.invariant"),
    "link": ("link.delivery", "link.credit"),
    "gateway": ("gateway.routing", "gateway.queues", "gateway.client_delivery"),
    # The cluster scenario: gossamer node daemons and their clients (gossamer.lab.cluster).
    "cluster": ("views.agreement", "views.rejoin", "gateway.cluster_routing"),
    # The queues scenario: the daemons' replicated queues, judged from their clients, and
    # the ISIS group under them on the views (the cluster scenario multicasts nothing).
    "queues": (
        "isis.view_agreement",
        "isis.view_validity",
        "views.agreement",
        "views.rejoin",
        "queue.confirmed_delivered",
        "queue.no_redelivery_after_ack",
        "queue.no_double_holding",
        "queue.minority_refused",
    ),
}

Value = float | int | bool | str | None


def host(text: str) -> str | None:
    """A host parameter's parser: a node id (checked against the run's hosts by
    :meth:`Scenario.resolve`) or ``none``."""
    return None if text.lower() in ("", "none") else text


_KINDS: Final[Mapping[str, Callable[[str], Value]]] = {
    "float": number,
    "int": integer,
    "bool": boolean,
    "host": host,
}


def _p(name: str, kind: str, default: Value, help: str, *bounds: float, unit: str = "") -> Param:
    """One parameter of the tables below; ``bounds`` is ``low, high`` when given."""
    low, high = bounds if bounds else (None, None)
    return Param(
        name=name, parse=_KINDS[kind], default=default, help=help, low=low, high=high, unit=unit
    )


#: Default bound of the settling after ``linger`` (``gossamer.lab.settle``): generous,
#: since a run that settles stops as soon as it has. 20 s covers the spec's ISIS
#: retransmission schedule (3.2 s apart at most) several times over under heavy loss.
SETTLE: Final = 20.0


def _common(
    duration: float, linger: float, delay_rate: float = 1.0, settle: float = SETTLE
) -> tuple[Param, ...]:
    return (
        _p(
            "duration",
            "float",
            duration,
            "workload seconds after the common start",
            1,
            600,
            unit="s",
        ),
        _p(
            "linger",
            "float",
            linger,
            "seconds nodes keep serving after the workload",
            0,
            60,
            unit="s",
        ),
        _p(
            "settle",
            "float",
            settle,
            "seconds more, after linger, the nodes may serve until none has anything in flight",
            0,
            300,
            unit="s",
        ),
        _p("delay_rate", "float", delay_rate, "fraction of datagrams --delay applies to", 0, 1),
    )


def _discovery(
    *, auxiliary: bool, inactive: float = 3.0, wait: float = 0.5
) -> tuple[Param, ...]:
    params = (
        _p(
            "broadcast_interval",
            "float",
            1.0,
            "seconds between discovery broadcasts",
            0.05,
            60,
            unit="s",
        ),
        _p(
            "inactive_time",
            "float",
            inactive,
            "silence before a peer is probed by heartbeats",
            0.1,
            600,
            unit="s",
        ),
        _p(
            "heartbeat_wait",
            "float",
            wait,
            "seconds of each heartbeat wait (3 missed waits remove a peer)",
            0.01,
            60,
            unit="s",
        ),
        _p("heartbeat_attempts", "int", 3, "hor? datagrams sent per heartbeat wait", 1, 100),
        _p("max_peers", "int", 64, "largest view a node keeps", 1, 10_000),
    )
    if auxiliary:
        switch = _p("discovery", "bool", True, "run discovery (removes crashed ISIS members)")
        return (switch, *params)
    return params


def _gossip(rate: float, size: int) -> tuple[Param, ...]:
    return (
        _p(
            "gossip_rate",
            "float",
            rate,
            "gossip broadcasts per second per node",
            0,
            1000,
            unit="/s",
        ),
        _p("gossip_size", "int", size, "gossip payload bytes", 1, 60_000, unit="bytes"),
        _p("multicast", "bool", True, "Chatter's UDP multicast shortcut (netns only)"),
    )


def _isis(rate: float) -> tuple[Param, ...]:
    return (
        _p("isis_rate", "float", rate, "ISIS multicasts per second per node", 0, 1000, unit="/s"),
        _p("batch_delay", "float", 0.0, "ISIS batching delay in seconds", 0, 5, unit="s"),
        _p(
            "broken", "host", None, "TEST ONLY: this node delivers out of order (isis.broken_order)"
        ),
    )


def _snapshot(every: float) -> tuple[Param, ...]:
    return (
        _p(
            "snapshot_every",
            "float",
            every,
            "seconds between snapshots (0: none)",
            0,
            600,
            unit="s",
        ),
        _p("initiator", "host", "h1", "the node that initiates the snapshots"),
    )


def _link(rate: float, size: int, credit: int) -> tuple[Param, ...]:
    return (
        _p("link_rate", "float", rate, "link messages per second per node", 0, 10_000, unit="/s"),
        _p("link_size", "int", size, "link message bytes", 1, 60_000, unit="bytes"),
        _p("credit", "int", credit, "receive window (credits) of each link", 1, 65_535),
    )


def _clients(
    clients: int, rate: float, *, cluster: bool, queues: bool = False
) -> tuple[Param, ...]:
    """The gateway's clients and their rate: the gateway scenario's, the cluster's
    (신경 clients of each host's daemon, and their SENDs, BROADCASTs and QUERY_NODES), or
    the queues scenario's (clients of each host's daemon pushing into a queue)."""
    if queues:
        name, who, what = "queue_rate", "신경 queue clients per host, on its daemon's gateway", (
            "queue pushes per second per host")
    elif cluster:
        name, who, what = "cluster_rate", "신경 clients per host, on its daemon's gateway", (
            "SENDs, BROADCASTs and QUERY_NODES per second per host")
    else:
        name, who, what = "gateway_rate", "gateway clients per node", (
            "routed sends + queue pushes per second per node")
    return (
        _p("clients", "int", clients, who, 1, 100),
        _p(name, "float", rate, what, 0, 1000, unit="/s"),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class FaultSchedule:
    """The faults of one run: per-datagram faults for every node, crashes, partitions,
    and restarts of crashed hosts (``HOST@SECONDS``, as crashes)."""

    drop: float = 0.0
    delay_ms: float = 0.0
    crashes: tuple[Crash, ...] = ()
    partitions: tuple[Partition, ...] = ()
    restarts: tuple[Crash, ...] = ()

    def validate(self, hosts: Sequence[str], duration: float, *, restartable: bool = False) -> None:
        """``ConfigError`` for unknown hosts, times outside the workload, impossible cuts.

        A partition must leave somebody on the other side; a host crashes at most once;
        at least one host must survive every crash. A restart starts a host that crashed
        earlier again, at most once, and only where processes can come back
        (``restartable``: the cluster scenario's daemons rejoin as a new incarnation).
        """
        if not 0.0 <= self.drop <= 1.0 or math.isnan(self.drop):
            raise ConfigError(f"--drop {self.drop:g}: must be a probability in [0, 1]")
        if not 0.0 <= self.delay_ms <= 10_000 or math.isnan(self.delay_ms):
            raise ConfigError(f"--delay {self.delay_ms:g}: must be between 0 and 10000 ms")
        known = ", ".join(hosts)
        crashed: set[str] = set()
        for crash in self.crashes:
            if crash.host not in hosts:
                raise ConfigError(f"--crash {crash}: no such host (hosts are {known})")
            if crash.host in crashed:
                raise ConfigError(f"--crash {crash}: {crash.host} already crashes earlier")
            if not 0 <= crash.at < duration:
                raise ConfigError(
                    f"--crash {crash}: must be within the workload (0-{duration:g} s)"
                )
            crashed.add(crash.host)
        if crashed and len(crashed) >= len(hosts):
            raise ConfigError("--crash: at least one host must survive")
        restarted: set[str] = set()
        for restart in self.restarts:
            if not restartable:
                raise ConfigError(f"--restart {restart}: only the cluster scenario restarts hosts")
            before = [c for c in self.crashes if c.host == restart.host and c.at < restart.at]
            if not before:
                raise ConfigError(f"--restart {restart}: {restart.host} must crash before it")
            if restart.host in restarted:
                raise ConfigError(f"--restart {restart}: {restart.host} already restarts")
            if restart.at >= duration:
                raise ConfigError(
                    f"--restart {restart}: must be within the workload (0-{duration:g} s)"
                )
            restarted.add(restart.host)
        for part in self.partitions:
            for host in part.hosts:
                if host not in hosts:
                    raise ConfigError(
                        f"--partition {part}: no such host {host!r} (hosts are {known})"
                    )
            if len(part.hosts) >= len(hosts):
                raise ConfigError(f"--partition {part}: the other side would be empty")
            if part.start >= duration:
                raise ConfigError(f"--partition {part}: starts after the workload ({duration:g} s)")
        for i, a in enumerate(self.partitions):
            for b in self.partitions[i + 1 :]:
                if a.start < b.end and b.start < a.end:
                    raise ConfigError(f"--partition {a} and {b} overlap in time")


@dataclass(frozen=True, slots=True, kw_only=True)
class Scenario:
    """A named workload: services, defaults, parameters and the checks it exercises.

    ``isis_mode`` is ``snapshot`` when ISIS runs under the Chandy–Lamport node with the
    bank workload (its snapshot checks then apply). ``default_faults`` are applied when
    the command line gives no fault flag at all (the demo's crash and partition hosts
    are chosen by ``demo_crash_at`` and ``demo_partition``). ``daemons``: every host
    runs a ``gossamer node`` daemon and a client app beside it (``gossamer.lab.cluster``)
    instead of one lab app.
    """

    name: str
    description: str
    services: tuple[str, ...]
    params: tuple[Param, ...]
    default_hosts: int
    min_hosts: int = 1
    isis_mode: Literal["plain", "snapshot"] = "plain"
    isis_views: bool = False  # ISIS on agreed views (``gossamer.lab.group_member``)
    default_faults: FaultSchedule = field(default_factory=FaultSchedule)
    demo_crash_at: float | None = None  # demo: h1 crashes at this second
    demo_partition: tuple[float, float] | None = None  # demo: h2 is cut off in [from, to)
    daemons: bool = False
    workload: str = "routing"

    def resolve(self, raw: Mapping[str, str], hosts: Sequence[str]) -> dict[str, Value]:
        """Defaults overridden by ``raw`` (``--param``), every value validated, host
        parameters against ``hosts``."""
        values: dict[str, Value] = resolve(self.params, raw, owner=f"scenario {self.name}")
        for p in self.params:
            value = values[p.name]
            if p.parse is not host or value is None or value in hosts:
                continue
            if p.name in raw:
                raise ConfigError(
                    f"--param {p.name}={raw[p.name]}: no such host (hosts are {', '.join(hosts)})"
                )
            raise ConfigError(f"--param {p.name}: default host {value} is not among the hosts")
        return values

    def enabled(self, values: Mapping[str, Value]) -> tuple[str, ...]:
        """The services that run with these parameter values (``discovery=off`` drops it)."""
        return tuple(
            s for s in self.services if not (s == "discovery" and values.get("discovery") is False)
        )

    def expected_checks(self, values: Mapping[str, Value]) -> tuple[str, ...]:
        """The analysis checks this run's traces should exercise (in catalog order)."""
        names: list[str] = []
        for service in self.enabled(values):
            if service == "isis" and self.isis_views:
                names += CHECKS_BY_SERVICE["isis_views"]
            else:
                names += CHECKS_BY_SERVICE[service]
            if service == "isis" and self.isis_mode == "snapshot":
                names += CHECKS_BY_SERVICE["snapshot"]
        return tuple(names)

    def faults_for(self, hosts: Sequence[str]) -> FaultSchedule:
        """The demo's default faults for these hosts (none for other scenarios)."""
        crashes: tuple[Crash, ...] = ()
        partitions: tuple[Partition, ...] = ()
        if self.demo_crash_at is not None and len(hosts) >= 3:
            # h1 is also the snapshot initiator: no snapshot starts after the crash. A cut
            # without the crashed member cannot hold the whole bank's total (the node
            # declares N x the initial balance), see docs/lab.md, "Known limits".
            crashes = (Crash(host=hosts[0], at=self.demo_crash_at),)
        if self.demo_partition is not None and len(hosts) >= 3:
            start, end = self.demo_partition
            partitions = (Partition(hosts=(hosts[1],), start=start, end=end),)
        defaults = self.default_faults
        if len(hosts) >= self.min_hosts and (defaults.crashes or defaults.partitions):
            return defaults
        return FaultSchedule(
            drop=defaults.drop, delay_ms=defaults.delay_ms, crashes=crashes, partitions=partitions
        )


SCENARIOS: tuple[Scenario, ...] = (
    Scenario(
        name="discovery",
        description="Prototari discovery and heartbeats: every node finds every other, "
        "crashes are detected",
        services=("discovery",),
        params=(*_common(15.0, 2.0), *_discovery(auxiliary=False)),
        default_hosts=4,
        min_hosts=2,
    ),
    Scenario(
        name="gossip",
        description="Chatter broadcasts from every node to every peer discovery reports up",
        services=("discovery", "gossip"),
        params=(*_common(15.0, 3.0), *_gossip(2.0, 200), *_discovery(auxiliary=True)),
        default_hosts=4,
        min_hosts=2,
    ),
    Scenario(
        name="isis",
        description="ISIS total-order multicast from every node",
        services=("discovery", "isis"),
        params=(*_common(15.0, 4.0), *_isis(10.0), *_discovery(auxiliary=True)),
        default_hosts=4,
        min_hosts=2,
    ),
    Scenario(
        name="snapshot",
        description="ISIS under Chandy–Lamport with the bank workload; one node takes snapshots",
        services=("discovery", "isis"),
        params=(
            *_common(15.0, 4.0),
            *_isis(5.0),
            *_snapshot(3.0),
            *_discovery(auxiliary=True),
        ),
        default_hosts=4,
        min_hosts=2,
        isis_mode="snapshot",
    ),
    Scenario(
        name="link",
        description="Exon links in a ring: each node pushes to the next with credit flow control",
        services=("link",),
        params=(*_common(15.0, 3.0), *_link(50.0, 100, 16)),
        default_hosts=4,
        min_hosts=2,
    ),
    Scenario(
        name="gateway",
        description="singyeong gateways: clients route sends by metadata queries and use queues",
        services=("gateway",),
        params=(*_common(15.0, 3.0), *_clients(3, 5.0, cluster=False)),
        default_hosts=3,
        min_hosts=1,
    ),
    Scenario(
        name="demo",
        description="every service at once on 6 hosts, with loss, delay, a crash and a partition",
        services=SERVICES,
        params=(
            *_common(24.0, 4.0, delay_rate=0.1),
            *_isis(4.0),
            *_snapshot(5.0),
            *_gossip(1.0, 200),
            *_link(10.0, 100, 16),
            *_clients(2, 2.0, cluster=False),
            # The node daemon's timers: a silent peer is probed after 0.5 s and removed
            # after three missed 0.3 s waits. The group is on agreed views: the others
            # exclude the host cut off in the partition and go on, and it rejoins after
            # the heal as its next incarnation (docs/lab.md).
            *_discovery(auxiliary=False, inactive=0.5, wait=0.3),
        ),
        default_hosts=6,
        min_hosts=3,
        isis_mode="snapshot",
        isis_views=True,
        default_faults=FaultSchedule(drop=0.02, delay_ms=20.0),
        demo_crash_at=13.0,
        demo_partition=(6.0, 8.0),
    ),
    Scenario(
        name="cluster",
        description="gossamer node daemons forming one cluster; 신경 clients on every host "
        "route across it; a partition, a SIGKILL and a restart that rejoins",
        services=("cluster",),
        params=(
            *_common(24.0, 3.0),
            *_clients(2, 4.0, cluster=True),
            *_discovery(auxiliary=False),
        ),
        default_hosts=3,
        min_hosts=3,
        # h3 is cut off long enough to be excluded (then rejoins as its next
        # incarnation); h2 is killed once h3 is back, and restarted (a new incarnation).
        default_faults=FaultSchedule(
            crashes=(Crash(host="h2", at=14.0),),
            partitions=(Partition(hosts=("h3",), start=3.0, end=9.0),),
            restarts=(Crash(host="h2", at=18.0),),
        ),
        daemons=True,
    ),
    Scenario(
        name="queues",
        description="gossamer node daemons replicating a queue; 신경 clients on every host "
        "push and consume; a partition, SIGKILLs and a restart",
        services=("queues",),
        params=(
            # The backlog left at the end (up to about 200 messages) drains at the speed
            # of the four consumers left after h1's kill, about 8 a second: 20-25 s
            # after the workload. A settled run stops at once, so the bound is generous.
            *_common(24.0, 5.0, settle=40.0),
            *_clients(2, 5.0, cluster=True, queues=True),
            # Six consumers of 0.5 s take about 12 messages a second, the three hosts push
            # 15: a backlog builds up, so that kills and cuts find messages waiting.
            _p("queue_work", "float", 0.5, "seconds a consumer works on a message before "
               "its ack (on average)", 0, 60, unit="s"),
            *_discovery(auxiliary=False),
        ),
        default_hosts=3,
        min_hosts=3,
        # h3 is cut off (a minority that must refuse, then rejoins with the queues' state);
        # h2, holding and producing messages, is killed and restarted; h1, the founder,
        # is killed for good: the two left are still a majority of three.
        default_faults=FaultSchedule(
            crashes=(Crash(host="h2", at=12.0), Crash(host="h1", at=20.0)),
            partitions=(Partition(hosts=("h3",), start=3.0, end=9.0),),
            restarts=(Crash(host="h2", at=16.0),),
        ),
        daemons=True,
        workload="queues",
    ),
)


def scenarios() -> tuple[Scenario, ...]:
    """Every scenario, in the order ``gossamer lab list`` shows them."""
    return SCENARIOS


def get(name: str) -> Scenario:
    """The scenario called ``name``; ``ConfigError`` listing the known ones otherwise."""
    for scenario in SCENARIOS:
        if scenario.name == name:
            return scenario
    known = ", ".join(s.name for s in SCENARIOS)
    raise ConfigError(f"unknown scenario {name!r} (known: {known})")


# -- node configs ---------------------------------------------------------------------------

#: Fixed multicast group and port of Chatter's shortcut inside namespaces.
MULTICAST_ADDR: Final = "239.7.7.7"
MULTICAST_PORT: Final = 7199


def _num(values: Mapping[str, Value], name: str) -> float:
    value = values[name]
    assert isinstance(value, int | float) and not isinstance(value, bool), name
    return float(value)


def _int(values: Mapping[str, Value], name: str) -> int:
    value = values[name]
    assert isinstance(value, int) and not isinstance(value, bool), name
    return value


def node_configs(
    scenario: Scenario,
    values: Mapping[str, Value],
    placement: Placement,
    faults: FaultSchedule,
    *,
    run: str,
    out: Path,
    key_file: Path,
    start_at: float,
    seed: int,
    protocol: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, dict[str, Any]]:
    """One node-config document (nested dicts, the TOML tables) per node id.

    Paths are absolute: traces ``<out>/<node>.jsonl`` (the run directory that
    ``gossamer analyze`` reads), gateway queues ``<out>/state/<node>-queues.db``. Nodes
    do not exit on their own (``exit_when_done = false``): the runner SIGTERMs them all
    at the end, so that no node leaves while others still work. Loopback partitions go
    into each node's ``[[faults.partition]]`` (the peers on the other side); in
    namespaces the runner cuts the real links instead. ``protocol`` holds, per section,
    protocol keys (``--param SECTION.FIELD``) added to every node's enabled section.
    """
    out = out.resolve()
    enabled = scenario.enabled(values)
    ids = placement.ids
    duration = _num(values, "duration")
    docs: dict[str, dict[str, Any]] = {}
    for index, host in enumerate(placement.hosts):
        peers = [
            {
                "id": other.id,
                "address": other.address,
                "ports": dict(other.ports),
                "subnet": other.subnet,
            }
            for other in placement.hosts
            if other.id != host.id
        ]
        fault_table: dict[str, Any] = {
            "drop": faults.drop,
            "delay_ms": faults.delay_ms,
            "delay_rate": _num(values, "delay_rate") if faults.delay_ms > 0 else 0.0,
            "duplicate": 0.0,
        }
        if placement.mode == "loopback":
            cuts = []
            for part in faults.partitions:
                inside = host.id in part.hosts
                other_side = [n for n in ids if (n in part.hosts) != inside]
                cuts.append({"peers": other_side, "from": part.start, "to": part.end})
            if cuts:
                fault_table["partition"] = cuts
        doc: dict[str, Any] = {
            "node": {
                "id": host.id,
                "run": run,
                "trace": str(out / f"{host.id}.jsonl"),
                "address": host.address,
                "seed": seed * 1000 + index + 1,
                "start_at": start_at,
                "duration": duration,
                "linger": _num(values, "linger"),
                "exit_when_done": False,
                # Every protocol sealed with the run's own fresh key (DESIGN.md).
                "wire": "sealed",
                "key_file": str(key_file.resolve()),
            },
            "ports": dict(host.ports),
            "peers": peers,
            "faults": fault_table,
        }
        doc["discovery"] = _discovery_section(values, host.broadcast, "discovery" in enabled)
        if host.broadcast is not None and doc["discovery"]["enabled"]:
            # Broadcasts stop at the router: the other subnet's hosts are seeds.
            doc["discovery"]["seeds"] = [h.id for h in placement.hosts if h.subnet != host.subnet]
        doc["gossip"] = _gossip_section(values, placement, "gossip" in enabled)
        doc["isis"] = _isis_section(scenario, values, host.id, ids, "isis" in enabled)
        doc["link"] = _link_section(values, ids, index, "link" in enabled)
        doc["gateway"] = _gateway_section(values, out, host.id, "gateway" in enabled)
        for section, settings in (protocol or {}).items():
            if doc[section]["enabled"]:
                doc[section].update(settings)
        docs[host.id] = doc
    return docs


def _discovery_section(
    values: Mapping[str, Value], broadcast: str | None, on: bool
) -> dict[str, Any]:
    if not on:
        return {"enabled": False}
    section: dict[str, Any] = {"enabled": True}
    if broadcast is not None:
        # Namespaces: the subnet's broadcast address. On loopback the key is left out and
        # the node unicasts each broadcast to its peers (DESIGN.md: never broadcast on lo).
        section["broadcast_address"] = broadcast
    section.update(
        broadcast_interval=_num(values, "broadcast_interval"),
        inactive_time=_num(values, "inactive_time"),
        heartbeat_wait=_num(values, "heartbeat_wait"),
        heartbeat_attempts=_int(values, "heartbeat_attempts"),
        max_peers=_int(values, "max_peers"),
    )
    return section


def _gossip_section(values: Mapping[str, Value], placement: Placement, on: bool) -> dict[str, Any]:
    if not on:
        return {"enabled": False}
    return {
        "enabled": True,
        # Multicast only between namespace hosts: loopback has it switched off, and the
        # machine's own interfaces must never see it.
        "multicast": placement.mode == "netns" and values["multicast"] is True,
        "multicast_addr": MULTICAST_ADDR,
        "multicast_port": MULTICAST_PORT,
        "rate": _num(values, "gossip_rate"),
        "size": _int(values, "gossip_size"),
    }


def _isis_section(
    scenario: Scenario, values: Mapping[str, Value], node: str, ids: Sequence[str], on: bool
) -> dict[str, Any]:
    if not on:
        return {"enabled": False}
    snapshots = scenario.isis_mode == "snapshot"
    every = _num(values, "snapshot_every") if snapshots and values["initiator"] == node else 0.0
    return {
        "enabled": True,
        "members": list(ids),  # h1..hN: ISIS member ids 1..N in this order
        "rate": _num(values, "isis_rate"),
        "views": scenario.isis_views,
        "snapshots": snapshots,
        "snapshot_every": every,
        "batch_delay": _num(values, "batch_delay"),
        "broken_order": values["broken"] == node,
    }


def _link_section(
    values: Mapping[str, Value], ids: Sequence[str], index: int, on: bool
) -> dict[str, Any]:
    if not on or len(ids) < 2:
        return {"enabled": False}
    return {
        "enabled": True,
        "push_to": [ids[(index + 1) % len(ids)]],  # a ring: every node pushes to the next
        "rate": _num(values, "link_rate"),
        "size": _int(values, "link_size"),
        "credit": _int(values, "credit"),
    }


def _gateway_section(values: Mapping[str, Value], out: Path, node: str, on: bool) -> dict[str, Any]:
    if not on:
        return {"enabled": False}
    return {
        "enabled": True,
        "db": str(out / "state" / f"{node}-queues.db"),
        "clients": _int(values, "clients"),
        "rate": _num(values, "gateway_rate"),
    }
