"""gossamer.proto.gateway.http: request heads, endpoints and upstream responses, no sockets."""

from __future__ import annotations

import random

import orjson
import pytest

from gossamer.errors import DecodeError
from gossamer.proto.gateway import http
from gossamer.proto.gateway.core import GatewayConfig, GatewayCore
from gossamer.wire.gateway import Op, Packet, encode_packet


def core_with_client(password: str | None = None, ip: str | None = "10.1.2.3:8080") -> (
    GatewayCore
):
    core = GatewayCore(GatewayConfig(password=password), rng=random.Random(0))
    core.connect(1, host="10.9.9.9", encoding="json", now=0.0)
    identify = {"client_id": "c1", "application_id": "app", "ip": ip}
    if password:
        identify["auth"] = password
    frame = encode_packet(Packet(op=Op.IDENTIFY, d=identify), "json")
    core.receive(1, frame, 0.0)
    core.actions()
    return core


def request(method: str, path: str, body: object = None, **headers: str) -> http.HttpRequest:
    raw = b"" if body is None else orjson.dumps(body)
    return http.HttpRequest(method=method, path=path, headers=headers, body=raw)


def test_parse_request_head() -> None:
    method, target, headers = http.parse_request_head(
        b"post /api/v1/query?x=1 HTTP/1.1\r\nHost: a\r\nX-A: 1\r\nx-a: 2"
    )
    assert (method, target) == ("POST", "/api/v1/query?x=1")
    assert headers == {"host": "a", "x-a": "1, 2"}
    for bad in (b"GET /", b"GET / SPDY/3", b"GET / HTTP/1.1\r\nno colon", b"G3T / HTTP/1.1",
                b"GET / HTTP/1.1",  # HTTP/1.1 requires Host (RFC 9112 §3.2)
                b"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 2",
                b"GET / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip",
                b"GET / HTTP/1.1\r\nHost: a\r\nBad Name: 1"):
        with pytest.raises(DecodeError) as info:
            http.parse_request_head(bad)
        assert info.value.reason in ("malformed request head", "malformed request line")
    assert http.parse_request_head(b"GET / HTTP/1.0") == ("GET", "/", {})


def test_version_auth_and_not_found() -> None:
    core = core_with_client(password="pw")
    answer = http.handle(core, request("GET", "/api/version"), peer="p", now=0.0)
    assert isinstance(answer, http.HttpResponse) and answer.status == 200
    assert orjson.loads(answer.body) == {"api": "v1", "singyeong": "0.0.1"}
    denied = http.handle(core, request("POST", "/api/v1/query", {}), peer="p", now=0.0)
    assert isinstance(denied, http.HttpResponse) and denied.status == 401
    ok = http.handle(core, request("POST", "/api/v1/query", {"application": "app"},
                                   authorization="pw"), peer="p", now=0.0)
    assert isinstance(ok, http.HttpResponse) and ok.status == 200
    assert [c["client_id"] for c in orjson.loads(ok.body)] == ["c1"]
    for method, path, status in [("GET", "/elsewhere", 404), ("GET", "/api/v1/query", 405),
                                 ("POST", "/api/version", 405), ("GET", "/api/v1/nope", 404)]:
        answer = http.handle(core, request(method, path, authorization="pw"), peer="p", now=0.0)
        assert isinstance(answer, http.HttpResponse) and answer.status == status


def test_proxy_plans_the_upstream_request() -> None:
    core = core_with_client()
    body = {"method": "put", "route": "items/7", "body": "raw text",
            "headers": {"X-Id": "9", "Connection": "keep-alive"},
            "query": {"application": "app"}}
    plan = http.handle(core, request("POST", "/api/v1/proxy", body), peer="1.1.1.1", now=0.0)
    assert isinstance(plan, http.ProxyRequest)
    assert (plan.method, plan.scheme, plan.host, plan.port, plan.target) == (
        "PUT", "http", "10.1.2.3", 8080, "/items/7")
    assert plan.client == "app/c1"
    wire = http.proxy_request_bytes(plan)
    assert wire.startswith(b"PUT /items/7 HTTP/1.1\r\nHost: 10.1.2.3:8080\r\nX-Id: 9\r\n")
    assert b"Connection: keep-alive" not in wire and b"X-Forwarded-For: 1.1.1.1" in wire
    assert wire.endswith(b"Content-Length: 8\r\nConnection: close\r\n\r\nraw text")
    for bad, key in [({**body, "method": "TRACE"}, "method"), ({**body, "route": 5}, "route"),
                     ({**body, "headers": {"a": 1}}, "headers"),
                     ({**body, "headers": {"X-A": "1\r\nX-Injected: 2"}}, "errors"),
                     ({**body, "headers": {"Bad Name": "1"}}, "errors"),
                     ({**body, "route": "a b\r\nHost: evil"}, "errors"),
                     ({**body, "method": "POST", "body": None}, "body")]:
        answer = http.handle(core, request("POST", "/api/v1/proxy", bad), peer="p", now=0.0)
        assert isinstance(answer, http.HttpResponse) and answer.status == 400
        assert key in orjson.loads(answer.body)
    restricted = core_with_client(ip=None)
    plan = http.handle(restricted, request("POST", "/api/v1/proxy", {**body, "method": "GET",
                                                                     "body": None}),
                       peer="p", now=0.0)
    assert isinstance(plan, http.ProxyRequest) and plan.host == "10.9.9.9"  # the peer address


def test_parse_upstream_responses() -> None:
    plain = http.parse_response(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-A: b\r\n\r\nhi!!")
    assert (plain.status, plain.body, plain.headers) == (200, b"hi", (("X-A", "b"),))
    chunked = http.parse_response(
        b"HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"3\r\nabc\r\n2;x\r\nde\r\n0\r\n\r\n"
    )
    assert (chunked.status, chunked.body) == (201, b"abcde")
    to_eof = http.parse_response(b"HTTP/1.0 404 Not Found\r\n\r\nbody")
    assert (to_eof.status, to_eof.body) == (404, b"body")
    for bad in (b"HTTP/1.1 200 OK", b"SPDY 200\r\n\r\n",
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n9\r\nabc",
                b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nabc",  # ends early
                b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab"):
        with pytest.raises(DecodeError):
            http.parse_response(bad)
    response = http.response_bytes(http.HttpResponse(status=200, body=b"{}"))
    assert response == (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                        b"Content-Length: 2\r\nConnection: close\r\n\r\n{}")


def test_http_guesses_share_the_sources_budget_with_identify() -> None:
    core = GatewayCore(GatewayConfig(password="pw", password_guess_burst=2,
                                     password_guess_rate=0.001), rng=random.Random(0))
    core.connect(1, host="6.6.6.6", encoding="json", now=0.0)
    guess = {"client_id": "c1", "application_id": "app", "auth": "guess1"}
    core.receive(1, encode_packet(Packet(op=Op.IDENTIFY, d=guess), "json"), 0.0)
    core.actions()

    def status(peer: str, **headers: str) -> int:
        answer = http.handle(core, request("GET", "/api/v1/queues", **headers), peer=peer,
                             now=0.0)
        assert isinstance(answer, http.HttpResponse)
        return answer.status

    assert status("6.6.6.6") == 401  # no header: not a guess
    assert status("6.6.6.6", authorization="pw") == 200
    assert status("6.6.6.6", authorization="guess2") == 401  # the second guess
    assert status("6.6.6.6", authorization="pw") == 429  # refused unread
    assert status("6.6.6.6", authorization="guess3") == 429
    assert status("7.7.7.7", authorization="pw") == 200
