"""The gateway client's own trace events, with real websocket clients on a real gateway.

Each client traces into its own ``Tracer`` (as a lab node's clients do); the server traces
too. What the analysis joins on must be there: the nonce as ``msg`` of the sender's
``client_send`` and of every receiver's ``client_recv``, and as ``attrs.nonce`` of the
server's ``route`` and ``enqueue``.
"""

from __future__ import annotations

import random

from gossamer.aio.gateway_client import open_gateway_client
from gossamer.aio.gateway_server import open_gateway_server
from gossamer.proto.gateway.core import GatewayConfig
from gossamer.testing.aio import Runner, until
from gossamer.trace.schema import TraceEvent
from gossamer.trace.sink import MemorySink, NullSink, Tracer

HOST = "127.0.0.1"
APP = "app"


def _kinds(sink: MemorySink, node: str, kind: str) -> list[TraceEvent]:
    return [e for e in sink.events if e.node == node and e.kind == kind]


def test_sends_and_receipts_are_traced_with_ids_that_join(run: Runner) -> None:
    sink = MemorySink()

    async def main() -> None:
        server = await open_gateway_server(
            GatewayConfig(node_id="gw"), host=HOST, port=0, rng=random.Random(1),
            tracer=Tracer(sink, run="r", node="gw"),
        )
        dsn = f"singyeong://{APP}@{HOST}:{server.port}"
        to_b = {"application": APP, "ops": [{"name": "b"}]}
        try:
            async with open_gateway_client(
                dsn, client_id="a", metadata={"name": "a"}, tracer=Tracer(sink, run="r", node="na")
            ) as a, open_gateway_client(
                dsn, client_id="b", metadata={"name": "b"}, tracer=Tracer(sink, run="r", node="nb")
            ) as b, open_gateway_client(dsn, client_id="third") as third:
                await a.send({"k": 1}, to=to_b, nonce="s1")
                assert (await b.receive(5)).nonce == "s1"
                await a.send("all", to={"application": APP}, broadcast=True)  # no nonce
                got = [await c.receive(5) for c in (a, b, third)]
                # A traced send without a nonce got one, and every receiver sees it.
                assert {m.nonce for m in got} == {"a/1"}
                message_id = await a.queue("jobs", to_b, {"job": 1}, nonce="q1")
                await b.queue_request("jobs")
                job = await b.receive(5)
                assert job.id == message_id
                await third.send("hi", to=to_b, nonce="x1")  # an untraced sender
                assert (await b.receive(5)).nonce == "x1"
                await third.send("plain", to={"application": APP, "ops": [{"name": "a"}]})
                assert (await a.receive(5)).nonce is None  # untraced: the wire as written
        finally:
            await server.close()

    run(main())
    readies = [(e.node, e.attrs["client"]) for e in sink.events if e.kind == "client_ready"]
    assert readies == [("na", "app/a"), ("nb", "app/b")]  # the untraced client: none
    sends = _kinds(sink, "na", "client_send")
    assert [(e.msg, e.attrs["type"], e.attrs["client"]) for e in sends] == [
        ("s1", "SEND", "app/a"), ("a/1", "BROADCAST", "app/a"), ("q1", "QUEUE", "app/a")]
    assert not _kinds(sink, "nb", "client_send")  # b sent only control dispatches
    received_b = _kinds(sink, "nb", "client_recv")
    assert [(e.msg, e.attrs["type"]) for e in received_b] == [
        ("s1", "SEND"), ("a/1", "BROADCAST"), ("q1", "QUEUE"), ("x1", "SEND")]
    assert all(e.attrs["client"] == "app/b" and (e.size or 0) > 0 for e in received_b)
    queued = received_b[2]
    assert (queued.attrs["id"], queued.attrs["attempt"]) == (message_id_of(sink), "1")
    # The BROADCAST reached its sender too; the untraced third-party send has no nonce.
    assert [(e.msg, e.attrs["type"]) for e in _kinds(sink, "na", "client_recv")] == [
        ("a/1", "BROADCAST"), (None, "SEND")]
    # The server names the same messages by the same nonce, and the sender and
    # receivers by the same client labels.
    routes = {e.attrs.get("nonce"): e for e in _kinds(sink, "gw", "route")}
    assert routes["s1"].peer == "app/a" and routes["s1"].attrs["targets"] == "app/b"
    assert set(routes["a/1"].attrs["targets"].split(",")) == {"app/a", "app/b", "app/third"}
    assert routes["x1"].peer == "app/third"
    assert None in routes  # the nonce-less send: no attrs.nonce
    (enqueue,) = _kinds(sink, "gw", "enqueue")
    assert enqueue.attrs["nonce"] == "q1"
    # One clock (CLOCK_MONOTONIC): a send precedes its route, which precedes receipt.
    sent_at = {e.msg: e.t for e in sends}
    for e in received_b[:2]:
        assert sent_at[e.msg] <= routes[e.msg].t <= e.t


def message_id_of(sink: MemorySink) -> str:
    (enqueue,) = [e for e in sink.events if e.kind == "enqueue"]
    assert enqueue.msg is not None
    return enqueue.msg


def test_no_tracer_or_a_null_sink_builds_no_event(run: Runner) -> None:
    sink = MemorySink()

    async def main() -> None:
        async with open_gateway_server(GatewayConfig(), host=HOST, port=0) as server:
            dsn = f"singyeong://{APP}@{HOST}:{server.port}"
            async with open_gateway_client(dsn, client_id="a") as a, open_gateway_client(
                dsn, client_id="b", metadata={"name": "b"},
                tracer=Tracer(NullSink(), run="r", node="n"),
            ) as b:
                assert not a.core.tracing and not b.core.tracing
                await a.send("x", to={"application": APP, "ops": [{"name": "b"}]})
                assert (await b.receive(5)).nonce is None
                # A recording tracer, for contrast: the same client core builds events.
                c = await open_gateway_client(dsn, client_id="c",
                                              tracer=Tracer(sink, run="r", node="n"))
                try:
                    assert c.core.tracing
                    await a.send("y", to={"application": APP}, broadcast=True)
                    await until(lambda: len(sink.events) == 2)
                finally:
                    await c.close()

    run(main())
    assert [e.kind for e in sink.events] == ["client_ready", "client_recv"]
