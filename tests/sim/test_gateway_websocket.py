"""The gateway's websocket layer (``gossamer.proto.gateway.websocket``) over simulated TCP:
the upgrade (403, 404), messages both ways, closes, and a client that reconnects."""

from __future__ import annotations

import random

from websockets.client import ClientProtocol
from websockets.frames import Frame, Opcode
from websockets.http11 import Response
from websockets.uri import parse_uri

from gossamer._types import Address
from gossamer.proto.gateway.client import ClientConfig, ClientCore, Dispatch, Ready
from gossamer.proto.gateway.core import ClientJoined, ClientLeft, GatewayConfig, GatewayCore
from gossamer.proto.gateway.websocket import ClientConnections, GatewayConnections
from gossamer.sim import LinkModel, Network, NodeContext, Simulator
from gossamer.sim.streams import StreamNetwork
from gossamer.testing.connections import ScriptedConnections
from gossamer.trace import MemorySink


def gateway_at(sim: Simulator, streams: StreamNetwork) -> dict[str, GatewayConnections]:
    made: dict[str, GatewayConnections] = {}

    def factory(ctx: NodeContext) -> GatewayConnections:
        made["gw"] = GatewayConnections(
            GatewayCore(GatewayConfig(node_id="gw", heartbeat_interval_ms=1000), rng=ctx.rng)
        )
        return made["gw"]

    streams.add_node("gw", sim.network.add_host("g"), 4567, factory)
    return made


def make_sim() -> tuple[Simulator, StreamNetwork, MemorySink]:
    sink = MemorySink()
    sim = Simulator(seed=3, run="t", network=Network(links=LinkModel(lan=0.001, jitter=0.0)),
                    sink_for=lambda _n: sink)
    return sim, StreamNetwork(sim), sink


class RawClient(ScriptedConnections):
    """A websocket client written directly on websockets' ``ClientProtocol``, to send
    what ``ClientCore`` never would: once upgraded, it sends ``to_send`` (``PING`` is a
    ping, ``a|b`` a message in two fragments) and keeps every websocket event."""

    def __init__(self, path: str) -> None:
        super().__init__()
        self.path = path
        self.ws: ClientProtocol | None = None
        self.events: list[object] = []
        self.to_send: list[str] = []

    def connection_made(self, conn: int, peer: Address, now: float) -> None:
        super().connection_made(conn, peer, now)
        self.ws = ClientProtocol(parse_uri(f"ws://{peer[0]}:{peer[1]}{self.path}"))
        self.ws.send_request(self.ws.connect())
        self._pump(conn)

    def receive_data(self, conn: int, data: bytes, now: float) -> None:
        super().receive_data(conn, data, now)
        assert self.ws is not None
        self.ws.receive_data(data)
        for event in self.ws.events_received():
            self.events.append(event)
            if isinstance(event, Response) and event.status_code == 101:
                for text in self.to_send:
                    if text == "PING":
                        self.ws.send_ping(b"p")
                    elif "|" in text:  # a message in two fragments
                        head, tail = text.split("|")
                        self.ws.send_text(head.encode(), fin=False)
                        self.ws.send_continuation(tail.encode(), fin=True)
                    else:
                        self.ws.send_text(text.encode())
        self._pump(conn)

    def _pump(self, conn: int) -> None:
        assert self.ws is not None
        for data in self.ws.data_to_send():
            if data:
                self.send(conn, data)


def raw(sim: Simulator, streams: StreamNetwork, path: str, *texts: str) -> RawClient:
    client = RawClient(path)
    client.to_send = list(texts)
    streams.add_node("raw", sim.network.add_host("r"), 1, lambda _ctx: client, listen=False)
    sim.local("raw", lambda port, now: port.inner.dial(sim.node("gw").address), when=0.1)
    return client


def test_unknown_encoding_is_refused_with_403_and_closed() -> None:
    sim, streams, _ = make_sim()
    gateway_at(sim, streams)
    client = raw(sim, streams, "/gateway/websocket?encoding=xml")
    sim.run(2.0)
    (response,) = client.events
    assert isinstance(response, Response) and response.status_code == 403
    assert client.lost


def test_another_path_is_404() -> None:
    sim, streams, _ = make_sim()
    gateway_at(sim, streams)
    client = raw(sim, streams, "/elsewhere")
    sim.run(2.0)
    (response,) = client.events
    assert isinstance(response, Response) and response.status_code == 404
    assert "Date" not in response.headers  # no clock in the core
    assert client.lost


def test_a_bad_frame_gets_op_8_and_a_close() -> None:
    sim, streams, _ = make_sim()
    gateway_at(sim, streams)
    client = raw(sim, streams, "/gateway/websocket?encoding=json", '{"op": 99}')
    sim.run(3.0)
    frames = [e for e in client.events if isinstance(e, Frame)]
    assert frames[0].opcode is Opcode.TEXT and b'"op":0' in frames[0].data  # hello
    assert b'"op":8' in frames[1].data  # error
    assert frames[2].opcode is Opcode.CLOSE
    assert client.lost


def test_fragments_are_joined_and_pings_answered() -> None:
    sim, streams, _ = make_sim()
    gateway_at(sim, streams)
    identify = '{"op": 1, "d": {"client_id": "x", |"application_id": "app"}}'
    client = raw(sim, streams, "/gateway/websocket?encoding=json", "PING", identify)
    sim.run(0.5)
    frames = [e for e in client.events if isinstance(e, Frame)]
    assert [f.opcode for f in frames] == [Opcode.TEXT, Opcode.PONG, Opcode.TEXT]
    assert b'"op":0' in frames[0].data and frames[1].data == b"p"
    assert b'"op":2' in frames[2].data and b'"client_id":"x"' in frames[2].data  # ready
    assert not client.lost


def test_clients_identify_exchange_and_reconnect_after_a_reset() -> None:
    sim, streams, _ = make_sim()
    made = gateway_at(sim, streams)
    clients: dict[str, ClientConnections] = {}
    events: list[tuple[str, object]] = []
    sim.on_event = lambda node, event: events.append((node.node_id, event))
    for name in ("a", "b"):

        def factory(ctx: NodeContext, name: str = name) -> ClientConnections:
            core = ClientCore(ClientConfig(application_id="app", client_id=name,
                                           encoding="msgpack" if name == "b" else "json"),
                              rng=random.Random(1), metadata={"name": name})
            clients[name] = ClientConnections(core, sim.node("gw").address)
            return clients[name]

        streams.add_node(name, sim.network.add_host(name), 1, factory, listen=False)
    target = {"application": "app", "ops": [{"path": "/name", "op": "$eq", "to": {"value": "b"}}]}
    streams.local("a", lambda c, now: c.core.dispatch(
        "SEND", {"target": target, "nonce": 1, "payload": "hi"}, now), when=1.0)
    streams.reset("b", "gw", 2.0)
    streams.local("a", lambda c, now: c.core.dispatch(
        "SEND", {"target": target, "nonce": 2, "payload": "again"}, now), when=5.0)
    sim.run(6.0)
    readies = [(n, e.reconnect) for n, e in events if isinstance(e, Ready)]
    assert sorted(readies) == [("a", False), ("b", False), ("b", True)]
    got = [e.payload for n, e in events if n == "b" and isinstance(e, Dispatch)]
    assert got == ["hi", "again"]
    joined = [e.client_id for n, e in events if isinstance(e, ClientJoined)]
    left = [e.client_id for n, e in events if isinstance(e, ClientLeft)]
    assert sorted(joined) == ["a", "b", "b"] and left == ["b"]
    assert made["gw"].core.connections == 2


def test_a_peer_that_never_answers_the_close_is_cut_off_after_the_close_timeout() -> None:
    sim, streams, sink = make_sim()
    made = gateway_at(sim, streams)
    client = raw(sim, streams, "/gateway/websocket?encoding=json")  # never identifies
    sim.partition(["raw"], start=0.5, end=100.0)
    sim.run(30.0)
    closes = [e for e in sink.select(layer="net", kind="close") if e.node == "gw"]
    (close,) = closes
    # Identify is due 1.5 s after hello; the close frame then waits CLOSE_TIMEOUT (10 s).
    assert close.attrs["reason"] == "closed" and 11.5 < close.t < 11.7
    assert made["gw"].core.connections == 0
    assert not client.lost  # half-open until the partition heals
