"""gossamer.proto.gateway.core: the gateway as a sans-I/O state machine.

Connections are integers and time is a number: every rule (lifecycle, auth,
restricted mode, rate limits, heartbeat deadlines, metadata coalescing, routing,
queues, traces) is checked here without a socket. ``tests/aio/test_gateway_server.py``
repeats the wire-visible parts over real websockets.
"""

from __future__ import annotations

import random
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gossamer.errors import DecodeError, LocalProtocolError
from gossamer.proto.gateway.core import (
    Close,
    CloseCode,
    GatewayConfig,
    GatewayCore,
    Transmit,
    _decode_json,
)
from gossamer.proto.gateway.lifecycle import TRANSITIONS, ConnInput, ConnState, next_state
from gossamer.proto.gateway.queues import (
    Acked,
    DeadLettered,
    Delivered,
    Enqueued,
    QueueConfig,
    QueueRecord,
    Replayed,
)
from gossamer.trace import MemorySink, NullSink, Tracer
from gossamer.wire.gateway import (
    DEFAULT_MAX_DEPTH,
    Encoding,
    Op,
    Packet,
    decode_packet,
    encode_packet,
)

APP = "app"


class Harness:
    """Drives a GatewayCore like the server does, recording what it sends."""

    def __init__(self, **config: Any) -> None:
        self.sink = MemorySink()
        records = config.pop("records", ())
        self.core = GatewayCore(
            GatewayConfig(**config),
            rng=random.Random(0),
            tracer=Tracer(self.sink, run="t", node="gw"),
            records=records,
        )
        self.now = 0.0
        self.sent: dict[int, list[Packet]] = {}
        self.closed: dict[int, tuple[int, str]] = {}
        self.ops: list[Any] = []
        self.encodings: dict[int, Encoding] = {}
        self.order: list[str] = []

    def pump(self) -> None:
        ops = self.core.store_ops()
        if ops:
            self.order.append("store")
        self.ops += ops
        for action in self.core.actions():
            if isinstance(action, Transmit):
                self.order.append(f"send:{action.packet.t or action.packet.op.name}")
                for conn in action.conns:
                    self.sent.setdefault(conn, []).append(action.packet)
            else:
                assert isinstance(action, Close)
                self.closed[action.conn] = (action.code, action.reason)

    def connect(self, conn: int, host: str = "10.0.0.1", encoding: Encoding = "json") -> Packet:
        self.encodings[conn] = encoding
        self.core.connect(conn, host=host, encoding=encoding, now=self.now)
        self.pump()
        return self.take(conn)[0]

    def raw(self, conn: int, data: str | bytes) -> None:
        self.core.receive(conn, data, self.now)
        self.pump()

    def send(self, conn: int, op: Op, d: Any = None, t: str | None = None) -> None:
        self.raw(conn, encode_packet(Packet(op=op, d=d, t=t), self.encodings[conn]))

    def dispatch(self, conn: int, t: str, d: Any) -> None:
        self.send(conn, Op.DISPATCH, d, t)

    def identify(self, conn: int, cid: str, app: str = APP, **extra: Any) -> Packet:
        if conn not in self.encodings:
            self.connect(
                conn, host=extra.pop("host", "10.0.0.1"), encoding=extra.pop("encoding", "json")
            )
        self.send(conn, Op.IDENTIFY, {"client_id": cid, "application_id": app, **extra})
        return self.take(conn)[-1]

    def take(self, conn: int) -> list[Packet]:
        return self.sent.pop(conn, [])

    def advance(self, seconds: float) -> None:
        target = self.now + seconds
        while True:
            deadline = self.core.next_deadline()
            if deadline is None or deadline > target:
                break
            self.now = max(self.now, deadline)
            self.core.handle_timer(self.now)
            self.pump()
        self.now = target
        self.core.handle_timer(self.now)
        self.pump()

    def events(self, kind: str) -> list[Any]:
        return self.sink.select(layer="gateway", kind=kind)


def only(packets: list[Packet]) -> Packet:
    assert len(packets) == 1, packets
    return packets[0]


# ----------------------------------------------------------------- lifecycle


def test_every_state_input_pair_has_a_transition() -> None:
    assert len(TRANSITIONS) == len(ConnState) * len(ConnInput)
    for state in ConnState:
        for event in ConnInput:
            assert next_state(state, event) in ConnState
    assert next_state(ConnState.AWAITING_IDENTIFY, ConnInput.IDENTIFY_OK) is ConnState.READY
    assert next_state(ConnState.READY, ConnInput.DEADLINE) is ConnState.CLOSED
    del TRANSITIONS[(ConnState.READY, ConnInput.HEARTBEAT)]
    try:
        with pytest.raises(LocalProtocolError):
            next_state(ConnState.READY, ConnInput.HEARTBEAT)
    finally:
        TRANSITIONS[(ConnState.READY, ConnInput.HEARTBEAT)] = ConnState.READY


def test_hello_then_identify_then_ready() -> None:
    h = Harness(heartbeat_interval_ms=30_000)
    hello = h.connect(1)
    assert hello.op is Op.HELLO and hello.d == {"heartbeat_interval": 30_000}
    assert hello.ts is not None
    ready = h.identify(1, "c1")
    assert ready.op is Op.READY and ready.d == {"client_id": "c1", "restricted": False}
    assert h.events("peer_up")[0].peer == "app/c1"


@pytest.mark.parametrize(
    ("frame", "text", "code"),
    [
        (
            '{"op":5,"d":{}}',
            "sent payload with non-identify opcode without identifying first",
            CloseCode.NOT_IDENTIFIED,
        ),
        (
            '{"op":4,"t":"SEND","d":{}}',
            "sent payload with non-identify opcode without identifying first",
            CloseCode.NOT_IDENTIFIED,
        ),
        ('{"op":2,"d":{}}', "invalid client op :ready", CloseCode.INVALID_OP),
        ('{"op":6,"d":{}}', "invalid client op :heartbeat_ack", CloseCode.INVALID_OP),
        ('{"op":99,"d":{}}', "invalid client op nil", CloseCode.INVALID_OP),
        ("not json", 'unexpected byte at position 0: 0x6E ("n")', CloseCode.DECODE_ERROR),
        (
            b"\x81\x00",
            "decode: payload: invalid websocket opcode/encoding combo: {binary, json}",
            CloseCode.DECODE_ERROR,
        ),
    ],
)
def test_op8_errors_before_identify_close_the_socket(
    frame: str | bytes, text: str, code: CloseCode
) -> None:
    h = Harness()
    h.connect(1)
    h.raw(1, frame)
    error = only(h.take(1))
    assert error.op is Op.ERROR and error.d == {"error": text, "extra_info": None}
    assert h.closed[1][0] == code
    h.raw(1, '{"op":5}')  # anything after the decision to close is ignored
    assert h.take(1) == []


@pytest.mark.parametrize(
    ("d", "text"),
    [
        ({"client_id": "c"}, "decode: payload: unrecoverable"),
        ("x", "decode: payload: unrecoverable"),
        ({"client_id": 1, "application_id": "a"}, "payload has no data"),
        ({"client_id": "c", "application_id": "a", "auth": 123}, "payload has no data"),
        ({"client_id": "c", "application_id": "a", "ip": 5}, "payload has no data"),
        ({"client_id": "has space", "application_id": "a"}, "without spaces"),
        ({"client_id": "", "application_id": "a"}, "without spaces"),
    ],
)
def test_malformed_identify_is_op8(d: Any, text: str) -> None:
    h = Harness()
    h.connect(1)
    h.send(1, Op.IDENTIFY, d)
    error = only(h.take(1))
    assert error.op is Op.ERROR and text in error.d["error"]
    assert h.closed[1][0] == CloseCode.INVALID_IDENTIFY


def test_duplicate_identify_is_op8_but_another_app_is_fine() -> None:
    h = Harness()
    h.identify(1, "c1")
    error = h.identify(2, "c1")
    assert error.d["error"] == "c1: already registered for app app"
    assert h.closed[2][0] == CloseCode.ALREADY_REGISTERED
    assert h.identify(3, "c1", app="other").op is Op.READY
    # A second identify on a ready socket: op 3, the socket stays.
    h.send(1, Op.IDENTIFY, {"client_id": "c9", "application_id": APP})
    again = only(h.take(1))
    assert again.op is Op.INVALID and again.d["error"] == "already identified"
    assert 1 not in h.closed


def test_initial_metadata_is_validated_and_applied() -> None:
    h = Harness()
    error = h.identify(1, "c1", metadata={"k": {"type": "integer", "value": "x"}})
    assert error.d == {
        "error": "initial metadata: invalid",
        "extra_info": {"k": "k: value fails validation for 'integer'"},
    }
    h.identify(2, "c2", metadata={"k": {"type": "integer", "value": 3}}, namespace="ns")
    client = h.core.directory.by_identity[(APP, "c2")]
    values = h.core.directory.plain_metadata(client)
    assert values["k"] == 3 and values["namespace"] == "ns" and values["encoding"] == "json"
    assert values["ip"] == "10.0.0.1" and values["restricted"] is False


# --------------------------------------------------------------- auth, restricted


@pytest.mark.parametrize(
    ("password", "auth", "restricted"),
    [
        ("pw", "pw", False),
        ("pw", "nope", True),
        ("pw", None, True),
        (None, None, False),
        (None, "anything", False),  # deliberate: no password means an open gateway
    ],
)
def test_auth_decides_restricted_mode(
    password: str | None, auth: str | None, restricted: bool
) -> None:
    h = Harness(password=password)
    extra = {} if auth is None else {"auth": auth}
    ready = h.identify(1, "c1", **extra)
    assert ready.d == {"client_id": "c1", "restricted": restricted}


def test_restricted_clients_may_only_heartbeat_and_update_metadata() -> None:
    h = Harness(password="pw")
    h.identify(1, "r", receive_client_updates=True, ip="1.2.3.4")
    h.identify(2, "n", auth="pw")
    client = h.core.directory.by_identity[(APP, "r")]
    assert client.ip is None and not client.receive_client_updates
    for t, d in [
        ("SEND", {"target": {}, "payload": 1}),
        ("BROADCAST", {"target": {}, "payload": 1}),
        ("QUERY_NODES", {}),
        ("QUEUE", {"queue": "q", "target": {}, "payload": 1}),
        ("QUEUE_REQUEST", {"queue": "q"}),
        ("QUEUE_ACK", {"queue": "q", "id": "x"}),
    ]:
        h.dispatch(1, t, d)
        reply = only(h.take(1))
        assert reply.op is Op.INVALID
        assert reply.d == {"error": f"invalid dispatch type {t} (are you restricted?)"}
    h.dispatch(1, "UPDATE_METADATA", {"k": {"type": "integer", "value": 1}})
    assert h.take(1) == []
    h.send(1, Op.HEARTBEAT, {})
    assert only(h.take(1)).op is Op.HEARTBEAT_ACK
    assert 1 not in h.closed
    # Invisible to queries unless they say "restricted": true.
    h.dispatch(2, "BROADCAST", {"target": {"application": APP}, "payload": "x"})
    assert 1 not in h.sent
    h.dispatch(2, "BROADCAST", {"target": {"application": APP, "restricted": True}, "payload": "y"})
    assert only(h.take(1)).d["payload"] == "y"


def test_restricted_clients_may_not_use_etf() -> None:
    h = Harness(password="pw")
    error = h.identify(1, "c1", encoding="etf")
    assert error.d["error"] == "restricted clients may not use ETF"
    assert h.closed[1][0] == CloseCode.RESTRICTED_ETF
    assert h.identify(2, "c2", encoding="etf", auth="pw").d["restricted"] is False


def test_password_guesses_are_limited_per_source() -> None:
    h = Harness(password="pw", password_guess_burst=3, password_guess_rate=0.5)
    for i in range(3):
        guess = h.identify(i, f"c{i}", auth=f"guess{i}", host="6.6.6.6")
        assert guess.d["restricted"] is True
    blocked = h.identify(10, "c10", auth="pw", host="6.6.6.6")
    assert blocked.op is Op.ERROR and blocked.d["error"] == "too many failed identify attempts"
    assert h.closed[10][0] == CloseCode.RATE_LIMITED
    # A refusal is decided before the password is read: a wrong one gets the same answer.
    wrong = h.identify(9, "c9", auth="guess9", host="6.6.6.6")
    assert (wrong.op, wrong.d) == (blocked.op, blocked.d) and h.closed[9] == h.closed[10]
    # Other addresses, and clients that send no password at all, are not affected.
    assert h.identify(11, "c11", auth="pw", host="7.7.7.7").d["restricted"] is False
    assert h.identify(12, "c12", host="6.6.6.6").d["restricted"] is True
    h.advance(2.5)  # one token back after 2 s
    assert h.identify(13, "c13", auth="pw", host="6.6.6.6").d["restricted"] is False


def test_malformed_identifies_do_not_spend_the_password_budget() -> None:
    h = Harness(password="pw", password_guess_burst=1, password_guess_rate=0.001)
    bad_metadata = {"k": {"type": "date", "value": 1}}
    for i, (cid, metadata) in enumerate([("bad id", None), ("c", bad_metadata)] * 3):
        h.connect(i, host="6.6.6.6")
        h.send(i, Op.IDENTIFY, {"client_id": cid, "application_id": APP, "auth": f"x{i}",
                                "metadata": metadata})
        assert h.closed[i][0] == CloseCode.INVALID_IDENTIFY
    assert h.identify(9, "c9", auth="pw", host="6.6.6.6").d["restricted"] is False


def test_a_stale_password_retried_at_one_address_does_not_lock_out_the_right_one() -> None:
    """A client with a wrong password reconnecting every second (a misconfigured or
    hostile neighbour behind the same NAT) must not keep out one with the right one."""
    h = Harness(password="pw")  # the default budget: burst 10, one guess back every 5 s
    admitted, stale = [], []
    for second in range(60):
        stale.append(h.identify(100 + second, f"m{second}", auth="stale", host="6.6.6.6").d)
        h.core.disconnect(100 + second, h.now)
        if second % 5 == 4:  # the right client tries just after the wrong one
            ready = h.identify(200 + second, f"l{second}", auth="pw", host="6.6.6.6")
            admitted.append(ready.op is Op.READY and ready.d["restricted"] is False)
            h.core.disconnect(200 + second, h.now)
        h.advance(1.0)
    assert admitted == [True] * 12
    # The stale client is told, every time, that its password is wrong (restricted).
    assert all(d.get("restricted") is True for d in stale)


# ---------------------------------------------------------------------- heartbeats


def test_heartbeat_ack_and_deadline_enforced_by_timer() -> None:
    h = Harness(heartbeat_interval_ms=1000)
    h.identify(1, "c1")
    h.identify(2, "c2")
    h.send(1, Op.HEARTBEAT, {"client_id": "someone else"})
    assert only(h.take(1)).d == {"client_id": "c1"}  # d ignored, the socket's id (§3)
    h.advance(1.0)
    h.send(1, Op.HEARTBEAT, None)
    h.take(1)
    h.advance(0.6)  # c2: 1.6 s since identify > 1.5 intervals
    error = only(h.take(2))
    assert error.d == {"error": "heartbeat took too long", "extra_info": None}
    assert h.closed[2][0] == CloseCode.HEARTBEAT_TIMEOUT
    assert (APP, "c2") not in h.core.directory.by_identity
    assert 1 not in h.closed
    h.advance(1.0)
    assert h.closed[1][0] == CloseCode.HEARTBEAT_TIMEOUT


def test_identify_deadline() -> None:
    h = Harness(heartbeat_interval_ms=1000)
    h.connect(1)
    h.advance(1.49)
    assert 1 not in h.closed
    h.advance(0.02)
    assert only(h.take(1)).d["error"] == "identify took too long"


def test_shutdown_says_goodbye() -> None:
    h = Harness()
    h.identify(1, "c1")
    h.core.shutdown(h.now)
    h.pump()
    goodbye = only(h.take(1))
    assert goodbye.op is Op.GOODBYE and goodbye.d == {"reason": "shutdown"}
    assert h.closed[1] == (CloseCode.GOING_AWAY, "shutdown")


# ------------------------------------------------------------------------ metadata


def test_metadata_errors_are_per_key_op3() -> None:
    h = Harness()
    h.identify(1, "c1")
    h.dispatch(
        1,
        "UPDATE_METADATA",
        {
            "ip": {"type": "string", "value": "x"},
            "k": {"type": "integer", "value": 1.5},
            "d": {"type": "date", "value": 1},
            "u": 5,
            "ok": {"type": "string", "value": "fine"},
        },
    )
    reply = only(h.take(1))
    assert reply.op is Op.INVALID and reply.d["error"] == "invalid metadata"
    assert reply.d["extra_info"] == {
        "ip": "ip: forbidden metadata key",
        "k": "k: value fails validation for 'integer'",
        "d": "d: type 'date' doesn't exists",
        "u": 'u: expected {"type": ..., "value": ...}',
    }
    client = h.core.directory.by_identity[(APP, "c1")]
    assert "ok" not in h.core.directory.values(client)  # refused whole
    assert 1 not in h.closed


def test_metadata_types_are_all_accepted() -> None:
    h = Harness()
    h.identify(1, "c1")
    update = {
        "s": {"type": "string", "value": "x"},
        "i": {"type": "integer", "value": 3},
        "f": {"type": "float", "value": 1},  # an integer is a fine float
        "v": {"type": "version", "value": "1.2.3-rc.1+b"},
        "l": {"type": "list", "value": [1, "a"]},
        "b": {"type": "boolean", "value": False},
        "m": {"type": "map", "value": {"a": 1}},
    }
    h.dispatch(1, "UPDATE_METADATA", update)
    assert h.take(1) == []
    client = h.core.directory.by_identity[(APP, "c1")]
    plain = h.core.directory.plain_metadata(client)
    assert {k: plain[k] for k in update} == {
        "s": "x",
        "i": 3,
        "f": 1.0,
        "v": "1.2.3-rc.1+b",
        "l": [1, "a"],
        "b": False,
        "m": {"a": 1},
    }
    assert client.types["v"] == "version"


def test_metadata_rate_limit_coalesces_and_never_drops() -> None:
    h = Harness(metadata_rate=10, metadata_burst=2)
    h.identify(1, "c1", receive_metadata_updates=True)
    client = h.core.directory.by_identity[(APP, "c1")]
    values = h.core.directory.values(client)
    for i in range(6):
        h.dispatch(
            1,
            "UPDATE_METADATA",
            {"n": {"type": "integer", "value": i}, f"k{i}": {"type": "integer", "value": i}},
        )
    assert values["n"] == 1 and "k2" not in values  # burst of 2 applied, the rest waits
    events = [p for p in h.take(1) if p.t == "CLIENT_METADATA_UPDATED"]
    assert len(events) == 2
    h.advance(0.1)  # one token: the coalesced update (four messages) lands at once
    assert values["n"] == 5 and all(f"k{i}" in values for i in range(6))
    merged = [p for p in h.take(1) if p.t == "CLIENT_METADATA_UPDATED"]
    assert len(merged) == 1 and merged[0].d["payload"]["metadata"]["n"] == 5


def test_a_send_after_an_update_sees_it_even_when_coalesced() -> None:
    h = Harness(metadata_rate=1, metadata_burst=1)
    h.identify(1, "c1")
    h.dispatch(1, "UPDATE_METADATA", {"role": {"type": "string", "value": "a"}})
    h.dispatch(1, "UPDATE_METADATA", {"role": {"type": "string", "value": "b"}})  # pending
    h.dispatch(
        1,
        "SEND",
        {"target": {"application": APP, "ops": [{"role": "b"}]}, "nonce": 1, "payload": "me"},
    )
    packets = h.take(1)
    assert [p.d["payload"] for p in packets if p.t == "SEND"] == ["me"]


# ----------------------------------------------------------------------- dispatch


def three(h: Harness) -> None:
    for i, (region, lat) in enumerate([("eu", 5), ("eu", 9), ("us", 1)], start=1):
        h.identify(
            i,
            f"c{i}",
            metadata={
                "region": {"type": "string", "value": region},
                "lat": {"type": "integer", "value": lat},
            },
            receive_client_updates=i == 3,
        )
    for i in (1, 2, 3):
        h.take(i)


def test_send_and_broadcast_deliver_as_the_reference() -> None:
    h = Harness()
    three(h)
    target = {"application": APP, "ops": [{"path": "/region", "op": "$eq", "to": {"value": "eu"}}]}
    h.dispatch(3, "SEND", {"target": target, "nonce": "n1", "payload": {"x": 1}})
    got = [c for c in (1, 2) if h.sent.get(c)]
    assert len(got) == 1
    packet = only(h.take(got[0]))
    assert packet.op is Op.DISPATCH and packet.t == "SEND"
    assert packet.d == {"nonce": "n1", "payload": {"x": 1}, "target": None}
    assert h.take(3) == []  # nothing back to the sender
    # BROADCAST reaches every match, the sender included; a missing nonce is null.
    h.dispatch(1, "BROADCAST", {"target": {"application": APP}, "payload": [1]})
    for c in (1, 2, 3):
        assert only(h.take(c)).d == {"nonce": None, "payload": [1], "target": None}
    route = h.events("route")[-1]
    assert route.attrs["type"] == "BROADCAST"
    assert sorted(route.attrs["targets"].split(",")) == ["app/c1", "app/c2", "app/c3"]
    delivered = [e.peer for e in h.events("deliver") if e.msg == route.msg]
    assert sorted(delivered) == ["app/c1", "app/c2", "app/c3"]


def test_bad_query_is_op3_with_reason_and_nonce_and_keeps_the_socket() -> None:
    h = Harness()
    three(h)
    h.dispatch(
        1,
        "SEND",
        {
            "target": {"ops": [{"path": "/a", "op": "$nope", "to": {"value": 1}}]},
            "nonce": "n7",
            "payload": 1,
        },
    )
    reply = only(h.take(1))
    assert reply.op is Op.INVALID
    assert reply.d == {
        "error": "invalid query",
        "extra_info": {"reason": "unknown operator '$nope'", "where": "ops[0]"},
        "nonce": "n7",
    }
    # v1-format ops and every former crasher work instead of killing the socket.
    for op in ("$ne", "$nin", "$ncontains"):
        value = ["zz"] if op == "$nin" else "zz"
        h.dispatch(
            1,
            "BROADCAST",
            {"target": {"application": APP, "ops": [{"region": {op: value}}]}, "payload": op},
        )
    h.dispatch(
        1, "SEND", {"target": {"application": APP, "selector": {"$avg": "lat"}}, "payload": "avg"}
    )
    assert 1 not in h.closed
    assert [p.d["payload"] for p in h.take(2)] == ["$ne", "$nin", "$ncontains"]
    # lat 5, 9, 1: the mean is 5, so $avg picks c1.
    assert [p.d["payload"] for p in h.take(1)] == ["$ne", "$nin", "$ncontains", "avg"]


def test_unroutable_sends_no_route_or_drop() -> None:
    h = Harness()
    three(h)
    target = {"application": APP, "ops": [{"lat": {"$gt": 100}}]}
    h.dispatch(1, "SEND", {"target": target, "nonce": "n2", "payload": 1})
    reply = only(h.take(1))
    assert reply.op is Op.INVALID and reply.d["error"] == "no_route"
    assert reply.d["nonce"] == "n2"
    assert reply.d["extra_info"] == {
        "op": 4,
        "d": {"target": target, "nonce": "n2", "payload": 1},
        "t": "SEND",
        "ts": None,
    }
    h.dispatch(1, "SEND", {"target": {**target, "droppable": True}, "payload": 1})
    assert h.take(1) == [] and h.events("drop")
    h.dispatch(1, "SEND", {"target": {**target, "optional": True}, "payload": "opt"})
    assert sum(len(h.take(c)) for c in (1, 2, 3)) == 1


def test_malformed_dispatches_are_op3() -> None:
    h = Harness()
    three(h)
    h.dispatch(1, "NOPE", {"x": 1})
    reply = only(h.take(1))
    assert reply.d["error"] == "invalid dispatch payload"
    assert reply.d["extra_info"]["op"] == "dispatch"
    h.send(1, Op.DISPATCH, {"x": 1})  # no t at all
    assert only(h.take(1)).d["error"] == "invalid dispatch payload"
    h.dispatch(1, "SEND", {"payload": 1, "nonce": "k"})  # no target
    reply = only(h.take(1))
    assert reply.d["error"] == "invalid dispatch payload" and reply.d["nonce"] == "k"
    h.dispatch(1, "SEND", [1, 2])
    assert only(h.take(1)).op is Op.INVALID
    assert 1 not in h.closed


def test_query_nodes_returns_matches_with_metadata() -> None:
    h = Harness()
    three(h)
    h.dispatch(1, "QUERY_NODES", {"application": APP, "ops": [{"lat": {"$lt": 6}}]})
    reply = only(h.take(1))
    assert reply.t == "QUERY_NODES" and reply.d["nonce"] is None
    nodes = sorted(reply.d["nodes"], key=lambda n: n["client_id"])
    assert [n["client_id"] for n in nodes] == ["c1", "c3"]
    assert nodes[0]["app_id"] == APP and nodes[0]["metadata"]["lat"] == 5
    h.dispatch(
        1,
        "QUERY_NODES",
        {"target": {"application": APP, "selector": {"$max": "lat"}}, "nonce": "q"},
    )
    reply = only(h.take(1))
    assert reply.d["nonce"] == "q" and [n["client_id"] for n in reply.d["nodes"]] == ["c2"]


def test_client_connected_and_disconnected_events() -> None:
    h = Harness()
    three(h)  # c3 asked for client updates
    h.identify(4, "c4", app="other")
    event = only(h.take(3))
    assert event.t == "CLIENT_CONNECTED"
    assert event.d == {
        "nonce": None,
        "payload": {"app": "other", "client_id": "c4"},
        "target": None,
    }
    h.core.disconnect(4, h.now)
    h.pump()
    assert only(h.take(3)).t == "CLIENT_DISCONNECTED"
    assert h.events("peer_down")[-1].peer == "other/c4"


# -------------------------------------------------------------------------- queues


def queue(
    h: Harness, conn: int, name: str, ops: list[Any], payload: Any, *, nonce: Any = "n"
) -> str:
    h.dispatch(
        conn,
        "QUEUE",
        {
            "queue": name,
            "target": {"application": APP, "ops": ops},
            "nonce": nonce,
            "payload": payload,
        },
    )
    confirm = [p for p in h.take(conn) if p.t == "QUEUE_CONFIRM"]
    assert len(confirm) == 1 and confirm[0].d["queue"] == name
    return str(confirm[0].d["id"])


def deliveries(h: Harness, conn: int) -> list[Packet]:
    return [p for p in h.take(conn) if p.t == "QUEUE"]


def test_queue_confirm_follows_the_store_commit() -> None:
    h = Harness()
    three(h)
    h.order.clear()
    message_id = queue(h, 1, "jobs", [], {"job": 1})
    assert h.order[:2] == ["store", "send:QUEUE_CONFIRM"]
    enqueued = [op for op in h.ops if isinstance(op, Enqueued)]
    assert enqueued[0].record.id == message_id and enqueued[0].record.payload == {"job": 1}
    assert h.events("enqueue")[0].attrs["queue"] == "jobs"


def test_queue_delivery_ack_and_errors() -> None:
    h = Harness()
    three(h)
    message_id = queue(h, 1, "jobs", [{"region": "eu"}], {"job": 1}, nonce="q1")
    h.dispatch(2, "QUEUE_REQUEST", {"queue": "jobs"})
    packet = only(deliveries(h, 2))
    assert packet.d == {
        "nonce": "q1",
        "payload": {"queue": "jobs", "id": message_id, "payload": {"job": 1}},
        "target": None,
        "attempt": 1,
    }
    h.dispatch(3, "QUEUE_ACK", {"queue": "jobs", "id": message_id})  # never held it
    assert only(h.take(3)).d["error"] == "message was not delivered to this client"
    h.dispatch(2, "QUEUE_ACK", {"queue": "jobs", "id": message_id})
    assert h.take(2) == []
    assert any(isinstance(op, Acked) and op.id == message_id for op in h.ops)
    h.dispatch(2, "QUEUE_ACK", {"queue": "jobs", "id": message_id})
    assert only(h.take(2)).d["error"] == "unknown message id"
    assert [e.msg for e in h.events("ack")] == [message_id]
    h.dispatch(1, "QUEUE", {"queue": "", "target": {}, "payload": 1})
    assert only(h.take(1)).d["error"] == "invalid dispatch payload"


def test_a_message_nobody_waiting_matches_keeps_its_place() -> None:
    h = Harness()
    three(h)
    first = queue(h, 3, "jobs", [{"lat": 5}], "for c1")  # c1 is not waiting yet
    second = queue(h, 3, "jobs", [{"lat": 9}], "for c2")
    h.dispatch(2, "QUEUE_REQUEST", {"queue": "jobs"})
    assert [p.d["payload"]["id"] for p in deliveries(h, 2)] == [second]
    h.dispatch(1, "QUEUE_REQUEST", {"queue": "jobs"})
    assert [p.d["payload"]["id"] for p in deliveries(h, 1)] == [first]


def test_one_message_per_credit_and_cancel() -> None:
    h = Harness()
    three(h)
    ids = [queue(h, 3, "jobs", [], i) for i in range(4)]
    h.dispatch(1, "QUEUE_REQUEST", {"queue": "jobs"})
    assert [p.d["payload"]["id"] for p in deliveries(h, 1)] == ids[:1]
    h.dispatch(1, "QUEUE_REQUEST", {"queue": "jobs", "count": 2})
    assert [p.d["payload"]["id"] for p in deliveries(h, 1)] == ids[1:3]
    h.dispatch(2, "QUEUE_REQUEST", {"queue": "jobs"})
    assert [p.d["payload"]["id"] for p in deliveries(h, 2)] == ids[3:]
    h.dispatch(1, "QUEUE_REQUEST", {"queue": "empty"})
    h.dispatch(1, "QUEUE_REQUEST_CANCEL", {"queue": "empty"})
    h.core.queues.stats()
    assert h.core.queues.stats()["empty"]["waiting"] == 0


def test_ack_timeout_redelivers_at_once_to_a_waiting_consumer() -> None:
    h = Harness(queues=QueueConfig(ack_timeout=2.0, max_attempts=5))
    three(h)
    message_id = queue(h, 3, "jobs", [{"region": "eu"}], "work")
    h.dispatch(1, "QUEUE_REQUEST", {"queue": "jobs"})
    assert len(deliveries(h, 1)) == 1
    h.dispatch(2, "QUEUE_REQUEST", {"queue": "jobs"})  # waits; nothing else queued
    assert deliveries(h, 2) == []
    h.advance(2.0)  # c1 never acked: the waiting c2 is woken with the same message
    again = only(deliveries(h, 2))
    assert again.d["payload"]["id"] == message_id and again.d["attempt"] == 2
    redeliver = h.events("redeliver")
    assert [(e.msg, e.peer) for e in redeliver] == [(message_id, "app/c2")]
    # The first holder's late ack is still accepted (it did process it).
    h.dispatch(1, "QUEUE_ACK", {"queue": "jobs", "id": message_id})
    assert h.take(1) == []


def test_disconnect_returns_held_messages_immediately() -> None:
    h = Harness()
    three(h)
    message_id = queue(h, 3, "jobs", [{"region": "eu"}], "work")
    h.dispatch(1, "QUEUE_REQUEST", {"queue": "jobs"})
    h.dispatch(2, "QUEUE_REQUEST", {"queue": "jobs"})
    holder = 1 if deliveries(h, 1) else 2
    other = 3 - holder
    h.take(other)
    h.core.disconnect(holder, h.now)
    h.pump()
    assert only(deliveries(h, other)).d["payload"]["id"] == message_id


def test_repeated_failures_dead_letter_then_replay() -> None:
    h = Harness(queues=QueueConfig(ack_timeout=1.0, max_attempts=2))
    three(h)
    message_id = queue(h, 3, "jobs", [], "poison")
    for _ in range(2):
        h.dispatch(1, "QUEUE_REQUEST", {"queue": "jobs"})
        assert len(deliveries(h, 1)) == 1
        h.advance(1.0)
    assert h.core.queues.stats()["jobs"] == {"ready": 0, "inflight": 0, "dead": 1, "waiting": 0}
    dead = h.core.queues.dead_letters("jobs")
    assert [m.id for m in dead] == [message_id] and "ack timeout after 2" in (dead[0].reason or "")
    assert any(isinstance(op, DeadLettered) for op in h.ops)
    assert [e.msg for e in h.events("dead_letter")] == [message_id]
    h.dispatch(2, "QUEUE_REQUEST", {"queue": "jobs"})
    assert deliveries(h, 2) == []
    replayed = h.core.replay_dead_letters("jobs", None, h.now)
    h.pump()
    assert [m.id for m in replayed] == [message_id]
    assert any(isinstance(op, Replayed) for op in h.ops)
    packet = only(deliveries(h, 2))
    assert packet.d["payload"]["id"] == message_id and packet.d["attempt"] == 1
    assert [op.attempts for op in h.ops if isinstance(op, Delivered)] == [1, 2, 1]


def test_queues_restore_from_records() -> None:
    records = [
        QueueRecord(id="m2", queue="q", seq=2, nonce=None, target={}, payload=2, attempts=1),
        QueueRecord(id="m1", queue="q", seq=1, nonce="x", target={}, payload=1),
        QueueRecord(
            id="d", queue="q", seq=3, nonce=None, target={}, payload=0, dead=True, reason="r"
        ),
        QueueRecord(id="bad", queue="q", seq=4, nonce=None, target={"ops": 5}, payload=0),
    ]
    h = Harness(records=records)
    assert h.core.restored == 4
    assert [type(op).__name__ for op in h.core.store_ops()] == ["DeadLettered"]
    h.identify(1, "c1")
    h.dispatch(1, "QUEUE_REQUEST", {"queue": "q", "count": 5})
    got = [(p.d["payload"]["id"], p.d["attempt"]) for p in deliveries(h, 1)]
    assert got == [("m1", 1), ("m2", 2)]
    assert {m.id for m in h.core.queues.dead_letters("q")} == {"d", "bad"}


# ------------------------------------------------------------- decoding fast path

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.text(max_size=4)
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=8,
)
ENVELOPE_FIELDS = st.sampled_from(["op", "d", "t", "ts", "x"])


def _agrees(text: str) -> None:
    """_decode_json accepts only what decode_packet accepts, with the same fields."""
    fast = _decode_json(text, 1 << 20)
    try:
        packet = decode_packet(text, "json")
    except DecodeError:
        assert fast is None
        return
    if fast is not None:
        assert fast == (packet.op, packet.t, packet.d, packet.ts)
        assert type(fast[0]) is Op


@given(st.dictionaries(ENVELOPE_FIELDS, JSON_VALUES | st.integers(-1, 9), max_size=5))
def test_json_fast_path_agrees_with_decode_packet(envelope: dict[str, Any]) -> None:
    _agrees(orjson.dumps(envelope).decode())


@pytest.mark.parametrize(
    "text",
    [
        '{"op": 4, "t": "SEND", "d": {"x": 1}, "ts": 5}',
        '{"op": true, "d": null}',  # a boolean is not opcode 1
        '{"op": 1.0}',
        '{"op": 9}',
        '{"op": 4, "t": 5}',
        '{"op": 4, "ts": 18446744073709551616}',
        '{"op": 4, "ts": -9223372036854775809}',
        '{"op": 4, "ts": 1.5}',
        '[1, 2]',
        'nul',
        '{"op": 5}',
        '{"op": 4, "d": ' + "[" * DEFAULT_MAX_DEPTH + "]" * DEFAULT_MAX_DEPTH + "}",
        '{"op": 4, "d": ' + "[" * (DEFAULT_MAX_DEPTH + 1) + "]" * (DEFAULT_MAX_DEPTH + 1) + "}",
    ],
)
def test_json_fast_path_edge_cases(text: str) -> None:
    _agrees(text)


def test_json_fast_path_leaves_big_and_binary_frames_to_decode_packet() -> None:
    frame = orjson.dumps({"op": 5, "d": "x" * 300}).decode()
    assert _decode_json(frame, 1 << 20) is not None
    assert _decode_json(frame, 1024) is None  # might exceed the frame size in bytes
    assert _decode_json(frame.encode(), 1 << 20) is None  # a binary frame


def test_a_tracer_into_a_null_sink_is_skipped_and_routing_still_works() -> None:
    core = GatewayCore(
        GatewayConfig(), rng=random.Random(0), tracer=Tracer(NullSink(), run="t", node="gw")
    )
    for conn in (1, 2):
        core.connect(conn, host="h", encoding="json", now=0.0)
        identify = {"op": 1, "d": {"client_id": f"c{conn}", "application_id": APP}}
        core.receive(conn, orjson.dumps(identify).decode(), 0.0)
    core.actions()
    target = {"application": APP, "optional": True,
              "ops": [{"path": "/x", "op": "$eq", "to": {"value": 1}}]}
    send = {"op": 4, "t": "SEND", "d": {"target": target, "payload": {"p": 1}, "nonce": "n"}}
    core.receive(1, orjson.dumps(send).decode(), 1.0)
    (action,) = core.actions()
    assert isinstance(action, Transmit) and action.conns in {(1,), (2,)}
    assert action.packet.d == {"nonce": "n", "payload": {"p": 1}, "target": None}
