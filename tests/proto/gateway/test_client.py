"""gossamer.proto.gateway.client: DSNs, the client state table, heartbeats, reconnects."""

from __future__ import annotations

import random
from typing import Any

import pytest

from gossamer.errors import ConfigError, LocalProtocolError
from gossamer.proto.gateway.client import (
    TRANSITIONS,
    ClientConfig,
    ClientCore,
    ClientInput,
    ClientState,
    Disconnected,
    Dispatch,
    Goodbye,
    Invalid,
    Ready,
    ServerError,
    VersionString,
    parse_dsn,
    typed,
)
from gossamer.trace.sink import MemorySink, NullSink, Tracer
from gossamer.wire.gateway import Op, Packet, decode_packet, encode_packet


@pytest.mark.parametrize(
    ("dsn", "secure", "app", "password", "host", "port", "encoding"),
    [
        # the spec's examples
        ("singyeong://test@localhost", False, "test", None, "localhost", 80, "json"),
        (
            "ssingyeong://test:pass-word@localhost",
            True,
            "test",
            "pass-word",
            "localhost",
            443,
            "json",
        ),
        ("singyeong://test@localhost:4567", False, "test", None, "localhost", 4567, "json"),
        (
            "ssingyeong://test:pass~-word@localhost:4921/",
            True,
            "test",
            "pass~-word",
            "localhost",
            4921,
            "json",
        ),
        (
            "singyeong://test:pass@localhost:21312?encoding=json",
            False,
            "test",
            "pass",
            "localhost",
            21312,
            "json",
        ),
        (
            "ssingyeong://test:pass@host:12321/?encoding=etf",
            True,
            "test",
            "pass",
            "host",
            12321,
            "etf",
        ),
        # dotted hosts, which singyeong-py refuses
        ("singyeong://app:pw@127.0.0.1:4567", False, "app", "pw", "127.0.0.1", 4567, "json"),
        (
            "singyeong://app@gw.example.internal/?encoding=msgpack",
            False,
            "app",
            None,
            "gw.example.internal",
            80,
            "msgpack",
        ),
        ("singyeong://app:p@ss@[::1]:9", False, "app", "p@ss", "[::1]", 9, "json"),
    ],
)
def test_parse_dsn(  # noqa: PLR0917
    dsn: str, secure: bool, app: str, password: str | None, host: str, port: int, encoding: str
) -> None:
    parsed = parse_dsn(dsn)
    assert (
        parsed.secure,
        parsed.application_id,
        parsed.password,
        parsed.host,
        parsed.port,
        parsed.encoding,
    ) == (secure, app, password, host, port, encoding)
    scheme = "wss" if secure else "ws"
    assert parsed.url == f"{scheme}://{host}:{port}/gateway/websocket?encoding={encoding}"


@pytest.mark.parametrize(
    "dsn",
    [
        "http://a@b",
        "singyeong://@host",
        "singyeong://app@",
        "singyeong://app@host:99999",
        "singyeong://app@host?encoding=xml",
        "singyeong://app@ho st",
    ],
)
def test_bad_dsns(dsn: str) -> None:
    with pytest.raises(ConfigError):
        parse_dsn(dsn)


def test_typed_values() -> None:
    assert typed(True) == {"type": "boolean", "value": True}
    assert typed(3) == {"type": "integer", "value": 3}
    assert typed(1.5) == {"type": "float", "value": 1.5}
    assert typed("x") == {"type": "string", "value": "x"}
    assert typed(VersionString("1.2.3")) == {"type": "version", "value": "1.2.3"}
    assert typed([1]) == {"type": "list", "value": [1]}
    assert typed({"a": 1}) == {"type": "map", "value": {"a": 1}}
    assert typed({"type": "float", "value": 1}) == {"type": "float", "value": 1}
    with pytest.raises(ConfigError):
        typed(object())


def test_every_state_input_pair_has_a_transition() -> None:
    assert len(TRANSITIONS) == len(ClientState) * len(ClientInput)
    assert TRANSITIONS[(ClientState.AWAITING_READY, ClientInput.READY)] is ClientState.READY
    assert all(TRANSITIONS[(ClientState.CLOSED, i)] is ClientState.CLOSED for i in ClientInput)


def frame(op: Op, d: Any = None, t: str | None = None) -> str:
    result = encode_packet(Packet(op=op, d=d, t=t, ts=1), "json")
    assert isinstance(result, str)
    return result


def sent(core: ClientCore) -> list[Packet]:
    return [decode_packet(f, "json") for f in core.frames_to_send()]


def ready_core(**config: Any) -> ClientCore:
    core = ClientCore(
        ClientConfig(application_id="app", client_id="me", auth="pw", **config),
        rng=random.Random(0),
        metadata={"lat": 5},
    )
    assert core.connect_due(0.0)
    core.connection_made(0.0)
    core.receive(frame(Op.HELLO, {"heartbeat_interval": 1000}), 0.0)
    (identify,) = sent(core)
    assert identify.op is Op.IDENTIFY
    assert identify.d == {
        "client_id": "me",
        "application_id": "app",
        "auth": "pw",
        "metadata": {"lat": {"type": "integer", "value": 5}},
    }
    core.receive(frame(Op.READY, {"client_id": "me", "restricted": False}), 0.0)
    return core


def test_identify_ready_heartbeats_and_zombie_detection() -> None:
    core = ready_core()
    assert isinstance(core.events_received()[0], Ready)
    (heartbeat,) = sent(core)  # one right away
    assert heartbeat.op is Op.HEARTBEAT and heartbeat.d == {"client_id": "me"}
    assert core.next_deadline() == 1.0
    core.receive(frame(Op.HEARTBEAT_ACK, {"client_id": "me"}), 0.1)
    core.handle_timer(1.0)
    assert [p.op for p in sent(core)] == [Op.HEARTBEAT]
    core.handle_timer(2.0)  # the previous heartbeat was never acked
    assert core.close_requested and core.counters.zombies == 1
    assert sent(core) == []


def test_dispatches_buffer_until_ready_and_metadata_is_restored_on_reconnect() -> None:
    core = ClientCore(ClientConfig(application_id="app", client_id="me"), rng=random.Random(1))
    core.dispatch("SEND", {"target": {}, "payload": 1}, 0.0)
    core.update_metadata({"lat": 7})
    assert sent(core) == []
    core.connection_made(0.0)
    core.receive(frame(Op.HELLO, {"heartbeat_interval": 1000}), 0.0)
    (identify,) = sent(core)
    assert identify.d["metadata"] == {"lat": {"type": "integer", "value": 7}}
    core.receive(frame(Op.READY, {"client_id": "me", "restricted": True}), 0.0)
    assert [(p.op, p.t) for p in sent(core)] == [(Op.HEARTBEAT, None), (Op.DISPATCH, "SEND")]
    assert core.restricted
    core.update_metadata({"lat": 8})
    (update,) = sent(core)
    assert update.t == "UPDATE_METADATA" and update.d == {"lat": {"type": "integer", "value": 8}}
    # Reconnect: same client id, metadata (the latest) in identify.
    core.connection_lost(5.0)
    (event,) = [e for e in core.events_received() if isinstance(e, Disconnected)]
    assert event.retry_at is not None and 5.0 <= event.retry_at <= 5.25
    assert not core.connect_due(5.0) or event.retry_at == 5.0
    core.connection_made(event.retry_at)
    core.receive(frame(Op.HELLO, {"heartbeat_interval": 1000}), event.retry_at)
    (identify,) = sent(core)
    assert identify.d["client_id"] == "me"
    assert identify.d["metadata"] == {"lat": {"type": "integer", "value": 8}}


def test_backoff_grows_and_goodbye_reconnects_at_once() -> None:
    core = ClientCore(
        ClientConfig(application_id="a", client_id="c", reconnect_base=1.0, reconnect_max=8.0),
        rng=random.Random(2),
    )
    ceilings = []
    now = 0.0
    for _ in range(6):
        core.connection_made(now)
        core.connection_lost(now)
        retry = core.next_deadline()
        assert retry is not None
        ceilings.append(retry - now)
        now = retry
    assert all(0 <= c <= 8.0 for c in ceilings) and max(ceilings) > 1.0
    ready = ready_core()
    ready.events_received()
    ready.receive(frame(Op.GOODBYE, {"reason": "shutdown"}), 3.0)
    assert isinstance(ready.events_received()[0], Goodbye) and ready.close_requested
    ready.connection_lost(3.0)
    assert ready.connect_due(3.0)


def test_invalid_error_and_dispatch_events() -> None:
    core = ready_core()
    core.events_received()
    core.receive(frame(Op.DISPATCH, {"nonce": "n", "payload": 1, "target": None}, "SEND"), 1.0)
    core.receive(frame(Op.INVALID, {"error": "no_route", "extra_info": {}, "nonce": "n"}), 1.0)
    core.receive(
        frame(
            Op.INVALID, {"error": "invalid dispatch payload", "extra_info": {"d": {"nonce": "k"}}}
        ),
        1.0,
    )
    core.receive(frame(Op.ERROR, {"error": "heartbeat took too long", "extra_info": None}), 1.0)
    events = core.events_received()
    assert isinstance(events[0], Dispatch) and events[0].nonce == "n" and events[0].payload == 1
    assert isinstance(events[1], Invalid) and events[1].nonce == "n"
    assert isinstance(events[2], Invalid) and events[2].nonce == "k"
    assert isinstance(events[3], ServerError) and events[3].error == "heartbeat took too long"
    core.receive("garbage", 1.0)
    assert core.close_requested and core.counters.bad_frames == 1


def test_closed_client_refuses_dispatches() -> None:
    core = ready_core(reconnect=False)
    core.connection_lost(1.0)
    assert core.state is ClientState.CLOSED
    with pytest.raises(LocalProtocolError):
        core.dispatch("SEND", {}, 2.0)


def test_a_traced_core_names_sends_and_receipts_by_nonce() -> None:
    sink = MemorySink()
    core = ClientCore(ClientConfig(application_id="app", client_id="me,1"),
                      rng=random.Random(1), tracer=Tracer(sink, run="r", node="n"))
    # Handed over while disconnected: traced then (the wait counts), marked buffered.
    core.dispatch("SEND", {"target": {}, "nonce": "s1", "payload": 1}, 1.0)
    core.dispatch("QUEUE_REQUEST", {"queue": "jobs"}, 1.0)  # control: not traced
    core.connection_made(2.0)
    core.receive(frame(Op.HELLO, {"heartbeat_interval": 1000}), 2.0)
    core.receive(frame(Op.READY, {"client_id": "me,1"}), 2.5)
    core.dispatch("BROADCAST", {"target": {}, "nonce": 7, "payload": 2}, 3.0)
    job = {"nonce": "q1", "attempt": 2, "payload": {"queue": "jobs", "id": "m1", "payload": 3}}
    core.receive(frame(Op.DISPATCH, job, t="QUEUE"), 4.0)
    core.receive(frame(Op.DISPATCH, {"nonce": None, "payload": 4}, t="SEND"), 5.0)
    core.receive(frame(Op.DISPATCH, {"nodes": []}, t="QUERY_NODES"), 6.0)  # not traced
    got = [(e.t, e.kind, e.msg, dict(e.attrs)) for e in sink.events]
    client = "app/me%2C1"  # commas escaped, as the server's attrs.targets name it
    assert got == [
        (1.0, "client_send", "s1", {"type": "SEND", "client": client, "buffered": "true"}),
        (2.5, "client_ready", None, {"client": client, "reconnect": "false"}),
        (3.0, "client_send", "7", {"type": "BROADCAST", "client": client}),
        (4.0, "client_recv", "q1", {"type": "QUEUE", "client": client, "id": "m1",
                                    "attempt": "2"}),
        (5.0, "client_recv", None, {"type": "SEND", "client": client}),
    ]
    assert all(e.size for e in sink.events if e.kind == "client_recv")
    assert core.tracing
    assert not ClientCore(ClientConfig(application_id="a", client_id="b"), rng=random.Random(1),
                          tracer=Tracer(NullSink(), run="r", node="n")).tracing
