"""``GatewayConnections`` without a network: the request line decides between the HTTP
API and the websocket, the proxy is handed to the driver and answered back, a request
that never completes is closed by the open timeout, and the error boundary's and the
slow consumer's closes."""

from __future__ import annotations

import random

import orjson
from websockets.client import ClientProtocol
from websockets.frames import Frame, Opcode
from websockets.http11 import Response
from websockets.uri import parse_uri

from gossamer.proto.gateway.core import GatewayConfig, GatewayCore
from gossamer.proto.gateway.http import HttpResponse
from gossamer.proto.gateway.websocket import GatewayConnections

PEER = ("192.0.2.7", 40000)


def gateway(**options: float) -> GatewayConnections:
    core = GatewayCore(GatewayConfig(node_id="gw"), rng=random.Random(1))
    return GatewayConnections(core, **options)


def sent(gw: GatewayConnections, conn: int) -> bytes:
    return b"".join(data for c, data in gw.data_to_send() if c == conn)


def test_an_http_request_split_anywhere_is_answered_and_closed() -> None:
    gw = gateway()
    gw.connection_made(1, PEER, 0.0)
    request = b"GET /api/version HTTP/1.1\r\nHost: gw\r\n\r\n"
    for i in range(len(request)):
        gw.receive_data(1, request[i : i + 1], 0.0)
    answer = sent(gw, 1)
    assert answer.startswith(b"HTTP/1.1 200 OK\r\n")
    assert orjson.loads(answer.split(b"\r\n\r\n", 1)[1]) == {"api": "v1", "singyeong": "0.0.1"}
    assert gw.connections_to_close() == [1]
    gw.receive_data(1, b"GET / HTTP/1.1\r\n\r\n", 0.0)  # after the answer: ignored
    assert gw.data_to_send() == [] and gw.connections_to_close() == []


def test_the_proxy_is_handed_to_the_driver_and_answered_back() -> None:
    gw = gateway()
    client = ClientProtocol(parse_uri("ws://gw/gateway/websocket?encoding=json"))
    client.send_request(client.connect())
    gw.connection_made(1, PEER, 0.0)
    gw.receive_data(1, b"".join(client.data_to_send()), 0.0)
    identify = {"op": 1, "d": {"client_id": "web", "application_id": "app",
                               "ip": "http://192.0.2.9:8080"}}
    client.receive_data(sent(gw, 1))
    client.send_text(orjson.dumps(identify))
    gw.receive_data(1, b"".join(client.data_to_send()), 0.0)
    body = orjson.dumps({"method": "GET", "route": "/x", "query": {"application": "app"}})
    gw.connection_made(2, PEER, 0.0)
    gw.receive_data(2, b"POST /api/v1/proxy HTTP/1.1\r\nHost: gw\r\nContent-Length: %d\r\n\r\n%s"
                    % (len(body), body), 0.0)
    (conn, proxy), = gw.proxies_to_perform()
    assert conn == 2 and (proxy.host, proxy.port, proxy.target) == ("192.0.2.9", 8080, "/x")
    assert sent(gw, 2) == b"" and gw.connections_to_close() == []
    gw.proxy_answered(2, HttpResponse(status=201, body=b"{}"), 0.1)
    assert sent(gw, 2).startswith(b"HTTP/1.1 201 ") and gw.connections_to_close() == [2]


def test_a_request_that_never_completes_is_closed_by_the_open_timeout() -> None:
    gw = gateway(open_timeout=5.0)
    gw.connection_made(1, PEER, 0.0)
    gw.connection_made(2, PEER, 0.0)
    gw.receive_data(1, b"GET /api/v", 1.0)
    gw.receive_data(2, b"GET /api/version HTTP/1.1\r\nHost: gw\r\n\r\n", 1.0)
    assert gw.connections_to_close() == [2]
    assert gw.next_deadline() == 5.0
    gw.handle_timer(5.0)
    assert gw.connections_to_close() == [1]
    assert gw.next_deadline() is None  # conn 2 answered: no deadline left for it


def _websocket(gw: GatewayConnections, conn: int) -> ClientProtocol:
    client = ClientProtocol(parse_uri("ws://gw/gateway/websocket?encoding=json"))
    client.send_request(client.connect())
    gw.connection_made(conn, PEER, 0.0)
    gw.receive_data(conn, b"".join(client.data_to_send()), 0.0)
    client.receive_data(sent(gw, conn))
    return client


def test_failures_and_slow_consumers_close_with_their_codes() -> None:
    gw = gateway()
    for conn, close in ((1, gw.slow_consumer), (2, lambda c, now: gw.connection_failed(
            c, RuntimeError("bug"), now))):
        client = _websocket(gw, conn)
        (response, hello) = client.events_received()
        assert isinstance(response, Response) and isinstance(hello, Frame)
        close(conn, 1.0)
        client.receive_data(sent(gw, conn))
        (frame,) = client.events_received()
        assert frame.opcode is Opcode.CLOSE
        assert gw.connections_to_close() == [conn]
    assert gw.slow_consumers == 1 and gw.rejected["core_failed"] == 1
    assert client.close_rcvd is not None and client.close_rcvd.code == 1011
