"""Reliable byte streams (TCP) in the simulator, for ``ConnectionsCore`` nodes.

``StreamNetwork`` sits beside a ``Simulator`` and uses only its public surface
(``add_node``, ``at``, ``local``, ``crash``, the ``Network``): a node added here is an
ordinary engine node whose core is a ``StreamPort`` around the protocol's
``ConnectionsCore`` (``gossamer.proto.core``). After every input the engine drains the
port, which hands the core's opens, bytes and closes to this module; what arrives comes
back as ``connection_made``, ``receive_data`` and ``connection_lost``. A core that also
speaks datagrams (multicast beside its connections) keeps doing so through the port.

The model, per connection:

- **Open**: a SYN to a node listening on the address; the listener's core gets
  ``connection_made`` (with the opener's address and an ephemeral port) one latency
  later, the opener one round trip later. Nobody listening there, or a node that is
  down: refused (``connection_lost`` for the opener after the round trip). An open
  that is not answered within ``connect_timeout`` (a partition) fails the same way.
  Bytes queued before the connection is made leave once it is.
- **Bytes** arrive in order, one segment per flush of a core's output (whatever it
  wrote to the connection in one step), after the link latency (``Network.latency``, drawn
  per segment but never letting a segment overtake the one before); with ``bandwidth``
  each direction of a connection also serialises its bytes at that rate. The fault plan
  (``--drop`` ...) is for datagrams: TCP hides loss, so streams ignore it.
- **Partitions stall, they do not reset** (as TCP does): a segment that finds the path
  cut waits and is retransmitted with exponential back-off (``StreamConfig.backoff``)
  until the partition heals, then arrives, late and in order. Data left
  unacknowledged for ``user_timeout`` seconds (Linux's ``TCP_USER_TIMEOUT``) aborts the
  sender's end: its core gets ``connection_lost``. An idle connection survives any
  partition; its other end learns of an abort only when it next sends (a reset
  answers) or from its own timeout: half-open connections, as in real TCP, which is
  what application heartbeats are for.
- **Close** (``connections_to_close``): a FIN after the bytes queued before it; the
  closing core gets ``connection_lost`` at once, the peer's once the FIN arrives. There
  is no half-close. Bytes that reach an end that is gone are answered with a reset.
- **Resets**: ``reset(a, b, when)`` cuts every connection between two nodes (a fault
  counted as ``reset``): both ends lose it at once and bytes in flight are lost.
  ``crash(node, when)`` crashes the node and resets its connections as its operating
  system would: each peer gets a reset after one latency (or when a partition heals).
  A node crashed through ``Simulator.crash`` directly answers resets only to what
  arrives.

Everything is scheduled on the simulator's queue with random draws from one generator
derived from the run's seed, so runs stay byte-identical. Trace events (``layer=net``,
on the node concerned, ``peer`` = the other node): ``connect`` (an open succeeded),
``accept``, ``close`` with ``attrs.reason`` (``closed``: by this core; ``peer_closed``,
``reset``, ``refused``, ``timeout``, ``crash``), and ``fault`` (``attrs.fault`` =
``reset``) for injected resets. ``Simulator.stats`` counts ``stream_segments`` and
``stream_bytes``.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any, Final

from gossamer._types import Address, Datagram
from gossamer.errors import ConfigError
from gossamer.proto.core import ConnectionsCore, Layer
from gossamer.sim.engine import NodeContext, SimNode, Simulator
from gossamer.sim.network import Host

__all__ = ["StreamConfig", "StreamNetwork", "StreamPort"]

#: The first ephemeral port a host opens connections from (IANA's dynamic range).
EPHEMERAL: Final = 49152

ConnectionsFactory = Callable[[NodeContext], ConnectionsCore]


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamConfig:
    """How simulated TCP behaves (see the module docstring), in seconds and bytes/s:
    ``bandwidth`` per direction of a connection (0: unlimited); ``backoff``, the first and
    the largest retransmission interval of a segment a partition holds (doubling);
    ``user_timeout``, the age of unacknowledged data that aborts the sender's end;
    ``connect_timeout``, how long an open may go unanswered."""

    bandwidth: float = 0.0
    backoff: tuple[float, float] = (0.2, 10.0)
    user_timeout: float = 30.0
    connect_timeout: float = 10.0

    def __post_init__(self) -> None:
        first, largest = self.backoff
        if self.bandwidth < 0 or not 0 < first <= largest:
            raise ConfigError("streams need bandwidth >= 0 and 0 < backoff[0] <= backoff[1]")
        if self.user_timeout <= 0 or self.connect_timeout <= 0:
            raise ConfigError("stream timeouts must be positive")


class _Kind(Enum):
    SYN = "syn"
    SYNACK = "synack"
    DATA = "data"
    FIN = "fin"
    RST = "rst"


@dataclass(slots=True, eq=False)
class _End:
    """One side of a connection: a core's connection id on one incarnation of a node."""

    port: StreamPort
    conn: int
    peer: Address
    alive: bool = True
    established: bool = False
    #: Bytes the core queued before the connection was made.
    early: list[bytes] | None = None
    connection: _Connection | None = None


@dataclass(slots=True, eq=False)
class _Pipe:
    """One direction of a connection: in order, with back-off while the path is cut."""

    src: SimNode
    dst: SimNode
    last_arrival: float = 0.0
    busy_until: float = 0.0
    backlog: list[tuple[_Kind, bytes]] | None = None
    stalled_since: float = 0.0
    rto: float = 0.0


@dataclass(slots=True, eq=False)
class _Connection:
    opener: _End
    listener: str  # node id of the listening node
    acceptor: _End | None = None
    forward: _Pipe | None = None  # opener -> acceptor
    backward: _Pipe | None = None  # acceptor -> opener


class StreamPort(Layer[ConnectionsCore]):
    """The engine's ``DatagramCore`` for a node whose core is a ``ConnectionsCore``."""

    def __init__(
        self, net: StreamNetwork, node: SimNode, inner: ConnectionsCore
    ) -> None:
        super().__init__(inner)
        self.net, self.node = net, node
        self.ends: dict[int, _End] = {}
        self._next_accept = 0
        self._datagrams = getattr(inner, "datagrams_to_send", None)
        self._receive = getattr(inner, "receive_datagram", None)

    def accepted_id(self) -> int:
        self._next_accept += 1
        return self._next_accept

    @property
    def current(self) -> bool:
        """True while this port is its node's core (the node is up and has not restarted
        since: a restart builds a new port)."""
        return self.node.core is self

    # -- DatagramCore ---------------------------------------------------------------

    def receive_datagram(self, data: bytes, addr: Address, now: float) -> None:
        if self._receive is not None:
            self._receive(data, addr, now)
        else:
            self.net.sim.stats["datagrams_ignored"] += 1

    def datagrams_to_send(self) -> list[Datagram]:
        self.net.collect(self)
        if self._datagrams is None:
            return []
        out: list[Datagram] = self._datagrams()
        return out


class StreamNetwork:
    """Simulated TCP between ``ConnectionsCore`` nodes of one ``Simulator``."""

    def __init__(self, sim: Simulator, config: StreamConfig | None = None) -> None:
        self.sim = sim
        self.config = config or StreamConfig()
        self.rng = random.Random(sim.rng.getrandbits(64))
        self._listeners: dict[Address, str] = {}
        self._ephemeral: dict[str, int] = {}
        self._names: dict[str, str] = {}  # host ip -> node id, for traces

    # -- nodes ------------------------------------------------------------------------

    def add_node(
        self,
        node_id: str,
        host: Host,
        port: int,
        factory: ConnectionsFactory,
        *,
        listen: bool = True,
        start: float = 0.0,
        groups: Sequence[str] = (),
    ) -> SimNode:
        """Add a node whose core ``factory`` builds; with ``listen`` it accepts
        connections on ``host:port``. Its engine core is a ``StreamPort``."""

        def build(context: NodeContext) -> StreamPort:
            node = self.sim.nodes[node_id]
            return StreamPort(self, node, factory(context))

        node = self.sim.add_node(node_id, host, port, build, groups=groups, start=start)
        if listen:
            self._listeners[(host.ip, port)] = node_id
        self._names.setdefault(host.ip, node_id)
        return node

    def local(
        self, node_id: str, request: Callable[[Any, float], None], when: float | None = None
    ) -> None:
        """``Simulator.local`` with the node's own core (not its port) as ``request``'s
        first argument."""
        self.sim.local(node_id, lambda port, now: request(port.inner, now), when)

    # -- faults -----------------------------------------------------------------------

    def crash(self, node_id: str, when: float) -> None:
        """Crash the node at ``when``; its peers get resets, as from its OS."""
        node = self.sim.node(node_id)
        ends: list[_End] = []

        def before() -> None:
            port = node.core
            if isinstance(port, StreamPort):
                ends.extend(port.ends.values())

        def after() -> None:
            for end in ends:
                if end.alive:
                    end.alive = False
                    self._send_from(end, _Kind.RST, b"")

        self.sim.at(when, before)
        self.sim.crash(node_id, when)
        self.sim.at(when, after)

    def reset(self, a: str, b: str, when: float) -> None:
        """Reset every connection between nodes ``a`` and ``b`` at ``when``."""
        node_a, node_b = self.sim.node(a), self.sim.node(b)

        def fire() -> None:
            port = node_a.core
            if not isinstance(port, StreamPort):
                return
            for end in list(port.ends.values()):
                connection = end.connection
                if connection is None:
                    continue
                other = connection.acceptor if end is connection.opener else connection.opener
                if other is None or other.port.node is not node_b:
                    continue
                for side in (end, other):
                    if side.alive and side.port.current:
                        self._fault(side, "reset", other if side is end else end)
                        self._lose(side, "reset")
                for pipe in (connection.forward, connection.backward):
                    if pipe is not None:
                        pipe.backlog = None

        self.sim.at(when, fire)

    # -- from the ports ---------------------------------------------------------------

    def collect(self, port: StreamPort) -> None:
        """Carry out what ``port``'s core asked for: opens, then bytes, then closes."""
        inner = port.inner
        for conn, peer in inner.connections_to_open():
            self._open(port, conn, peer)
        stats = self.sim.stats
        # What one flush writes to a connection leaves as one segment (one write), so
        # timing does not depend on how a protocol library chunks its output.
        writes: dict[int, list[bytes]] = {}
        for conn, data in inner.data_to_send():
            if data:
                writes.setdefault(conn, []).append(data)
        for conn, chunks in writes.items():
            end = port.ends.get(conn)
            if end is None or not end.alive:
                continue
            data = b"".join(chunks)
            if not end.established:
                if end.early is None:
                    end.early = []
                end.early.append(data)
                continue
            stats["stream_segments"] += 1
            stats["stream_bytes"] += len(data)
            self._send_from(end, _Kind.DATA, data)
        for conn in inner.connections_to_close():
            end = port.ends.get(conn)
            if end is None or not end.alive:
                continue
            if end.established:
                self._send_from(end, _Kind.FIN, b"")
            self._lose(end, "closed")

    # -- connections ------------------------------------------------------------------

    def _open(self, port: StreamPort, conn: int, peer: Address) -> None:
        if conn in port.ends:
            raise ConfigError(f"connection id {conn} is already in use", node=port.node.node_id)
        end = _End(port=port, conn=conn, peer=peer)
        port.ends[conn] = end
        sim = self.sim
        listener = self._listeners.get(peer)
        host = sim.network.host_by_ip(peer[0])
        if listener is None and host is not None and sim.network.connected(
            port.node.host, host
        ):
            # A host with nothing listening on that port answers with a reset.
            rtt = 2 * sim.network.latency(port.node.host, host, self.rng)
            sim.at(sim.now + rtt, lambda: self._give_up(end, "refused"))
            return
        sim.at(sim.now + self.config.connect_timeout, lambda: self._give_up(end, "timeout"))
        if listener is None:
            return  # no such host (or cut off): the SYN is lost and the open times out
        connection = end.connection = _Connection(opener=end, listener=listener)
        connection.forward = _Pipe(src=port.node, dst=sim.nodes[listener])
        self._send(connection.forward, _Kind.SYN, b"", connection, to_acceptor=True)

    def _give_up(self, end: _End, reason: str) -> None:
        if end.alive and not end.established:
            self._lose(end, reason)

    def _send_from(self, end: _End, kind: _Kind, data: bytes) -> None:
        connection = end.connection
        if connection is None:
            return
        if end is connection.opener:
            pipe = connection.forward
            to_acceptor = True
        else:
            pipe = connection.backward
            to_acceptor = False
        if pipe is not None:
            self._send(pipe, kind, data, connection, to_acceptor=to_acceptor)

    def _send(
        self, pipe: _Pipe, kind: _Kind, data: bytes, connection: _Connection, *, to_acceptor: bool
    ) -> None:
        sim = self.sim
        src_host = pipe.src.host
        dst_host = pipe.dst.host
        if pipe.backlog is not None or not sim.network.connected(src_host, dst_host):
            # The path is cut (or earlier segments wait): keep the order, retransmit later.
            if pipe.backlog is None:
                pipe.backlog = []
                pipe.stalled_since = sim.now
                pipe.rto = self.config.backoff[0]
                sim.at(sim.now + pipe.rto,
                       lambda: self._retransmit(pipe, connection, to_acceptor))
            pipe.backlog.append((kind, data))
            return
        now = sim.now
        depart = now
        bandwidth = self.config.bandwidth
        if bandwidth and data:
            depart = max(now, pipe.busy_until) + len(data) / bandwidth
            pipe.busy_until = depart
        arrival = max(depart + sim.network.latency(src_host, dst_host, self.rng),
                      pipe.last_arrival)
        pipe.last_arrival = arrival
        sim.at(arrival, lambda: self._arrive(connection, kind, data, to_acceptor))

    def _retransmit(self, pipe: _Pipe, connection: _Connection, to_acceptor: bool) -> None:
        backlog = pipe.backlog
        if backlog is None:
            return  # reset meanwhile
        sim = self.sim
        sender = connection.opener if to_acceptor else connection.acceptor
        if sim.network.connected(pipe.src.host, pipe.dst.host):
            pipe.backlog = None
            for kind, data in backlog:
                self._send(pipe, kind, data, connection, to_acceptor=to_acceptor)
            return
        if sim.now - pipe.stalled_since >= self.config.user_timeout:
            pipe.backlog = None
            if sender is not None and sender.alive and sender.port.current:
                self._lose(sender, "timeout")
            return
        pipe.rto = min(pipe.rto * 2, self.config.backoff[1])
        sim.at(sim.now + pipe.rto, lambda: self._retransmit(pipe, connection, to_acceptor))

    def _arrive(
        self, connection: _Connection, kind: _Kind, data: bytes, to_acceptor: bool
    ) -> None:
        if kind is _Kind.SYN:
            self._accept(connection)
            return
        end = connection.acceptor if to_acceptor else connection.opener
        sender = connection.opener if to_acceptor else connection.acceptor
        if end is None:
            return
        if not (end.alive and end.port.current):
            end.alive = False
            if kind is not _Kind.RST and sender is not None and sender.alive:
                self._send_from(end, _Kind.RST, b"")  # whoever is there answers a reset
            return
        if kind is _Kind.SYNACK:
            self._deliver(end, lambda core, now: self._made(end, core, now))
        elif kind is _Kind.DATA:
            self._deliver(end, lambda core, now: core.receive_data(end.conn, data, now))
        elif kind is _Kind.FIN:
            self._lose(end, "peer_closed")
        else:
            self._lose(end, "refused" if not end.established else "reset")

    def _accept(self, connection: _Connection) -> None:
        opener = connection.opener
        node = self.sim.nodes[connection.listener]
        port = node.core
        if not isinstance(port, StreamPort):
            # The listening node is down: its host refuses.
            connection.backward = _Pipe(src=node, dst=opener.port.node)
            self._send(connection.backward, _Kind.RST, b"", connection, to_acceptor=False)
            return
        host = opener.port.node.host
        ephemeral = self._ephemeral.get(host.ip, EPHEMERAL)
        self._ephemeral[host.ip] = ephemeral + 1
        conn = port.accepted_id()
        acceptor = _End(port=port, conn=conn, peer=(host.ip, ephemeral), established=True)
        acceptor.connection = connection
        port.ends[conn] = acceptor
        connection.acceptor = acceptor
        connection.backward = _Pipe(src=node, dst=opener.port.node)
        self._trace(acceptor, "accept", opener)
        self._deliver(acceptor, lambda core, now: core.connection_made(conn, acceptor.peer, now))
        self._send(connection.backward, _Kind.SYNACK, b"", connection, to_acceptor=False)

    def _made(self, end: _End, core: ConnectionsCore, now: float) -> None:
        end.established = True
        connection = end.connection
        assert connection is not None and connection.acceptor is not None
        self._trace(end, "connect", connection.acceptor)
        core.connection_made(end.conn, end.peer, now)
        early, end.early = end.early, None
        for data in early or ():
            self.sim.stats["stream_segments"] += 1
            self.sim.stats["stream_bytes"] += len(data)
            self._send_from(end, _Kind.DATA, data)

    def _lose(self, end: _End, reason: str) -> None:
        """``end`` is over: its core hears ``connection_lost`` (now, after this event)."""
        end.alive = False
        connection = end.connection
        other = None
        if connection is not None:
            other = connection.acceptor if end is connection.opener else connection.opener
        self._trace(end, "close", other, reason=reason)

        def lost(core: ConnectionsCore, now: float) -> None:
            if end.port.ends.get(end.conn) is end:
                del end.port.ends[end.conn]
                core.connection_lost(end.conn, now)

        self._deliver(end, lost)

    def _deliver(self, end: _End, request: Callable[[ConnectionsCore, float], None]) -> None:
        """Run ``request`` on ``end``'s core now, if that core is still the node's."""
        port = end.port

        def fire(current: Any, now: float) -> None:
            if current is port:
                request(port.inner, now)

        self.sim.local(port.node.node_id, fire)

    # -- traces -----------------------------------------------------------------------

    def _name_of(self, address: Address) -> str:
        return self._names.get(address[0], f"{address[0]}:{address[1]}")

    def _trace(self, end: _End, kind: str, other: _End | None, *, reason: str = "") -> None:
        node = end.port.node
        attrs = {"conn": str(end.conn)}
        if reason:
            attrs["reason"] = reason
        peer = other.port.node.node_id if other is not None else self._name_of(end.peer)
        node.tracer(self.sim.now, "net", kind, peer=peer, attrs=attrs)

    def _fault(self, end: _End, fault: str, other: _End) -> None:
        self.sim.fault_counts[fault] += 1
        end.port.node.tracer(self.sim.now, "net", "fault", peer=other.port.node.node_id,
                             attrs={"fault": fault, "conn": str(end.conn)})
