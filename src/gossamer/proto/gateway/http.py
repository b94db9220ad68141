"""The gateway's HTTP API, sans-I/O: request heads, the endpoints, responses.

The HTTP/1.1 syntax (request and response heads, bodies framed by length, chunks or
the end of the connection) is h11's; this module owns the endpoints.

Endpoints (singyeong-as-coded §13, plus the dead-letter queue):

- ``GET /api/version`` (no auth): ``{"api": "v1", "singyeong": VERSION}``;
- ``POST /api/v1/query`` (body: a query): the selected clients, each with ``app_id``,
  ``client_id``, ``metadata``, ``metadata_types``, ``queues``, ``socket_ip``;
- ``POST /api/v1/proxy`` (body: ``method``, ``route``, ``query``, ``body``?,
  ``headers``?): the response of ``METHOD http://<client ip>/<route>`` for one client
  chosen as for a SEND;
- ``GET /api/v1/queues``: per queue, ``ready``, ``inflight``, ``dead``, ``waiting``;
- ``GET /api/v1/queues/<name>/dead``: the dead letters of a queue;
- ``POST /api/v1/queues/<name>/dead/replay`` (body ``{"ids": [...]}``, or empty for
  all): ``{"replayed": [ids]}``.

Auth is the reference's: the header ``Authorization: <password>`` (no scheme),
checked by the gateway's one ``PasswordGuard`` (``auth.py``: constant time, and the
same guessing budget per source as identify); wrong or missing gives 401
``{"status": "error", "error": "not authorized"}``; open when no password is set. A
source whose budget is spent gets 429 ``{"status": "error", "error": "too many failed
attempts"}`` whatever header it sent (the header is not read).
Other paths give 404 ``{"code": 404, "error": "not found"}``.

``handle`` returns either an ``HttpResponse`` or, for the proxy, a ``ProxyRequest``
that the driver performs (and answers 502/504 when the client's server fails).

``RequestReader`` collects one request from a connection's bytes, bounded: a head
over ``MAX_HEAD`` is 431, a body over ``MAX_BODY`` 413, a ``Transfer-Encoding`` 411 (one
request per connection, framed by ``Content-Length``), a malformed head 400; ``REFUSED``
names these refusals for the counters.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import unquote, urlsplit

import h11
import orjson

from gossamer.errors import DecodeError
from gossamer.proto.gateway.auth import Verdict
from gossamer.proto.gateway.query import QueryError

if TYPE_CHECKING:
    from gossamer.proto.gateway.core import GatewayCore

__all__ = [
    "REFUSED",
    "HttpRequest",
    "HttpResponse",
    "ProxyRequest",
    "RequestReader",
    "handle",
    "parse_request_head",
    "parse_response",
    "proxy_request_bytes",
    "response_bytes",
]

MAX_HEAD: Final = 16 * 1024
MAX_BODY: Final = 1 << 20
#: HTTP answers that refuse a request, and the reason a server counts them under.
REFUSED: Final = {
    400: "http_bad_request",
    411: "http_length_required",
    413: "http_body_too_large",
    431: "http_head_too_large",
}
_REASONS: Final = {
    200: "OK",
    302: "Found",
    400: "Bad Request",
    401: "Unauthorized",
    404: "Not Found",
    405: "Method Not Allowed",
    411: "Length Required",
    413: "Content Too Large",
    429: "Too Many Requests",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    501: "Not Implemented",
    502: "Bad Gateway",
    504: "Gateway Timeout",
}
_PROXY_METHODS: Final = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"})
_BODY_METHODS: Final = frozenset({"POST", "PUT", "PATCH", "DELETE"})
#: Hop-by-hop headers (RFC 9110 §7.6.1) are not forwarded in either direction.
_HOP: Final = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "content-length",
        "host",
    }
)


@dataclass(frozen=True, slots=True, kw_only=True)
class HttpRequest:
    method: str
    #: The path, percent-decoded, without the query string.
    path: str
    #: Header names in lower case.
    headers: Mapping[str, str]
    body: bytes = b""


@dataclass(frozen=True, slots=True, kw_only=True)
class HttpResponse:
    status: int
    body: bytes = b""
    headers: tuple[tuple[str, str], ...] = (("Content-Type", "application/json"),)


@dataclass(frozen=True, slots=True, kw_only=True)
class ProxyRequest:
    """An HTTP request to send to a client's server (``POST /api/v1/proxy``)."""

    method: str
    scheme: str
    host: str
    port: int
    #: Path and query string, starting with ``/``.
    target: str
    headers: tuple[tuple[str, str], ...] = ()
    body: bytes | None = None
    client: str = ""
    extra: dict[str, str] = field(default_factory=dict)


def _json(status: int, value: Any) -> HttpResponse:
    return HttpResponse(status=status, body=orjson.dumps(value))


def _server(head: bytes) -> h11.Request:
    """The request in ``head`` (without the blank line), parsed by h11 as a server would."""
    conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD + 4)
    try:
        conn.receive_data(head + b"\r\n\r\n")
        event = conn.next_event()
    except h11.ProtocolError as exc:
        # A fixed reason (the driver puts it in a JSON body); h11's words in a field.
        raise DecodeError("malformed request head", detail=str(exc)) from exc
    if not isinstance(event, h11.Request):
        raise DecodeError("incomplete request head")
    return event


def parse_request_head(head: bytes) -> tuple[str, str, dict[str, str]]:
    """``(method, target, headers)`` of a request head (without the blank line).

    h11 parses it (RFC 9112: request line, header syntax, ``Host`` required in
    HTTP/1.1, one framing). Header names come back in lower case; repeated headers
    are joined with ``", "``. Raises ``DecodeError`` (the h11 error as its cause) on
    anything that is not a well-formed HTTP/1.x head.
    """
    request = _server(head)
    method = request.method.decode("ascii")
    if not method.isalpha():
        raise DecodeError("malformed request line", method=method)
    headers: dict[str, str] = {}
    for raw_name, raw_value in request.headers:
        key, value = raw_name.decode("ascii"), raw_value.decode("latin-1")
        headers[key] = f"{headers[key]}, {value}" if key in headers else value
    return method.upper(), request.target.decode("ascii"), headers


def _refusal(status: int, error: str) -> HttpResponse:
    return HttpResponse(status=status, body=orjson.dumps({"error": error}))


class RequestReader:
    """One request out of a connection's bytes (see the module docstring).

    ``feed(data)`` returns ``None`` while the request is incomplete, then once either
    the ``HttpRequest`` or the ``HttpResponse`` that refuses it; bytes after that are
    ignored (``done``)."""

    __slots__ = ("_body_start", "_buffer", "_head", "_length", "done")

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._head: tuple[str, str, dict[str, str]] | None = None
        self._body_start = 0
        self._length = 0
        self.done = False

    def feed(self, data: bytes) -> HttpRequest | HttpResponse | None:
        if self.done:
            return None
        self._buffer += data
        answer = self._read()
        if answer is not None:
            self.done = True
            self._buffer = bytearray()
        return answer

    def _read(self) -> HttpRequest | HttpResponse | None:
        buffer = self._buffer
        if self._head is None:
            end = buffer.find(b"\r\n\r\n")
            if end < 0:
                return _refusal(431, "head too large") if len(buffer) > MAX_HEAD else None
            if end > MAX_HEAD:
                return _refusal(431, "head too large")
            try:
                self._head = parse_request_head(bytes(buffer[:end]))
            except DecodeError as exc:
                return _refusal(400, exc.reason)
            headers = self._head[2]
            if "transfer-encoding" in headers:
                return _refusal(411, "length required")
            length = headers.get("content-length", "0").strip()
            if not length.isdigit():
                return _refusal(400, "bad content-length")
            self._length = int(length)
            if self._length > MAX_BODY:
                return _refusal(413, "body too large")
            self._body_start = end + 4
        if len(buffer) - self._body_start < self._length:
            return None
        method, target, headers = self._head
        return HttpRequest(
            method=method,
            path=unquote(urlsplit(target).path),
            headers=headers,
            body=bytes(buffer[self._body_start : self._body_start + self._length]),
        )


def _send(conn: h11.Connection, *events: h11.Event) -> bytes:
    out = bytearray()
    for event in events:
        data = conn.send(event)
        if data:
            out += data
    return bytes(out)


def response_bytes(response: HttpResponse) -> bytes:
    """The response as HTTP/1.1 bytes (``Connection: close``: one request per socket)."""
    conn = h11.Connection(h11.SERVER)
    # h11 answers only a request it has seen: give it the one this response is for.
    conn.receive_data(b"GET / HTTP/1.1\r\nHost: gateway\r\n\r\n")
    conn.next_event()
    headers = [
        *response.headers,
        ("Content-Length", str(len(response.body))),
        ("Connection", "close"),
    ]
    return _send(
        conn,
        h11.Response(
            status_code=response.status,
            headers=headers,
            reason=_REASONS.get(response.status, "Status"),
        ),
        h11.Data(data=response.body),
        h11.EndOfMessage(),
    )


def handle(core: GatewayCore, request: HttpRequest, *, peer: str, now: float) -> (
    HttpResponse | ProxyRequest
):
    """Answer one API request (see the module docstring)."""
    method, path = request.method, request.path.rstrip("/") or "/"
    if path == "/api/version":
        if method not in ("GET", "HEAD"):
            return _json(405, {"code": 405, "error": "method not allowed"})
        return _json(200, {"api": "v1", "singyeong": core.config.version})
    if not path.startswith("/api/v1/"):
        return _json(404, {"code": 404, "error": "not found"})
    verdict = core.passwords.check(peer, request.headers.get("authorization"), now)
    if verdict is Verdict.REFUSED:
        return _json(429, {"status": "error", "error": "too many failed attempts"})
    if verdict is Verdict.WRONG:
        return _json(401, {"status": "error", "error": "not authorized"})
    segments = path.split("/")[3:]  # after "", "api", "v1"
    if segments in (["query"], ["proxy"]):
        if method != "POST":
            return _json(405, {"code": 405, "error": "method not allowed"})
        try:
            body = orjson.loads(request.body) if request.body else None
        except orjson.JSONDecodeError:
            return _json(400, {"errors": ["body is not JSON"]})
        if segments == ["query"]:
            return _query(core, body)
        return _proxy(core, body, peer)
    if segments and segments[0] == "queues":
        return _queues(core, method, segments[1:], request.body, now)
    return _json(404, {"code": 404, "error": "not found"})


def _query(core: GatewayCore, body: Any) -> HttpResponse:
    try:
        clients = core.query_clients(body)
    except QueryError as exc:
        return _json(400, {"errors": [f"invalid query: {exc.reason}"], "where": exc.where})
    return _json(200, [core.describe(c) for c in clients])


def _proxy(core: GatewayCore, body: Any, peer: str) -> HttpResponse | ProxyRequest:
    if not isinstance(body, dict):
        return _json(400, {"errors": ["body must be an object"]})
    missing = {
        name: [f"no {name} provided"] for name in ("method", "route", "query") if name not in body
    }
    if missing:
        return _json(400, missing)
    method, route = body["method"], body["route"]
    if not isinstance(method, str) or method.upper() not in _PROXY_METHODS:
        return _json(400, {"method": ["invalid or unsupported method"]})
    method = method.upper()
    if not isinstance(route, str):
        return _json(400, {"route": ["route must be a string"]})
    has_body = body.get("body") is not None
    if method in _BODY_METHODS and not has_body:
        return _json(400, {"body": [f"{method} requires a body"]})
    if method not in _BODY_METHODS and has_body:
        return _json(400, {"body": [f"{method} must not have a body"]})
    headers = body.get("headers") or {}
    if not isinstance(headers, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in headers.items()
    ):
        return _json(400, {"headers": ["headers must map strings to strings"]})
    try:
        client = core.pick_client(body["query"])
    except QueryError as exc:
        return _json(400, {"errors": [f"invalid query: {exc.reason}"]})
    if client is None or not client.ip:
        return _json(400, {"errors": ["no matches"]})
    base = client.ip if "://" in client.ip else f"http://{client.ip}"
    url = urlsplit(base)
    if url.scheme not in ("http", "https") or not url.hostname:
        return _json(502, {"errors": [f"client address {client.ip!r} is not an http URL"]})
    try:
        port = url.port or (443 if url.scheme == "https" else 80)
    except ValueError:
        return _json(502, {"errors": [f"client address {client.ip!r} has a bad port"]})
    payload: bytes | None = None
    forwarded = [(k, v) for k, v in headers.items() if k.lower() not in _HOP]
    if has_body:
        raw = body["body"]
        if isinstance(raw, str):
            payload = raw.encode()
        else:
            payload = orjson.dumps(raw)
            if not any(k.lower() == "content-type" for k, _v in forwarded):
                forwarded.append(("Content-Type", "application/json"))
    prefix = url.path.rstrip("/")
    plan = ProxyRequest(
        method=method,
        scheme=url.scheme,
        host=url.hostname,
        port=port,
        target=f"{prefix}/{route.lstrip('/')}",
        headers=(*forwarded, ("X-Forwarded-For", peer)),
        body=payload,
        client=f"{client.app_id}/{client.client_id}",
    )
    try:  # a header or route that would split the request is the caller's error
        proxy_request_bytes(plan)
    except DecodeError:
        return _json(400, {"errors": ["headers and route must be valid in an HTTP request"]})
    return plan


def proxy_request_bytes(request: ProxyRequest) -> bytes:
    """The upstream request as HTTP/1.1 bytes; ``DecodeError`` if a header cannot be sent
    (h11 refuses names and values that would split the request)."""
    host = request.host if ":" not in request.host else f"[{request.host}]"
    default = 443 if request.scheme == "https" else 80
    authority = host if request.port == default else f"{host}:{request.port}"
    headers = [("Host", authority), *request.headers]
    if request.body is not None:
        headers.append(("Content-Length", str(len(request.body))))
    headers.append(("Connection", "close"))
    conn = h11.Connection(h11.CLIENT)
    try:
        return _send(
            conn,
            h11.Request(method=request.method, target=request.target, headers=headers),
            h11.Data(data=request.body or b""),
            h11.EndOfMessage(),
        )
    except (h11.LocalProtocolError, UnicodeEncodeError) as exc:
        raise DecodeError("the proxied request cannot be written", detail=str(exc)) from exc


def parse_response(data: bytes) -> HttpResponse:
    """An upstream response read to EOF, parsed by h11 (status line, headers, a body
    framed by ``Content-Length``, chunks or the end of the connection); hop-by-hop
    headers are dropped. Raises ``DecodeError`` (the h11 error as its cause) when it is
    malformed or ends early."""
    conn = h11.Connection(h11.CLIENT, max_incomplete_event_size=len(data) + MAX_HEAD)
    # h11 reads a response only to a request it has sent.
    conn.send(h11.Request(method="GET", target="/", headers=[("Host", "upstream")]))
    conn.send(h11.EndOfMessage())
    conn.receive_data(data)
    conn.receive_data(b"")
    status: int | None = None
    headers: tuple[tuple[str, str], ...] = ()
    body = bytearray()
    try:
        while True:
            event = conn.next_event()
            if isinstance(event, h11.Response):
                status = event.status_code
                headers = tuple(
                    (name.decode("ascii"), value.decode("latin-1"))
                    for name, value in event.headers.raw_items()
                    if name.lower().decode("ascii") not in _HOP
                )
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage):
                break
            elif event is h11.NEED_DATA or isinstance(event, h11.ConnectionClosed):
                raise DecodeError("the response ended early")
    except h11.ProtocolError as exc:
        raise DecodeError("malformed response", detail=str(exc)) from exc
    assert status is not None  # EndOfMessage follows a Response
    return HttpResponse(status=status, body=bytes(body), headers=headers)


def _queues(
    core: GatewayCore, method: str, segments: list[str], body: bytes, now: float
) -> HttpResponse:
    if not segments:
        if method != "GET":
            return _json(405, {"code": 405, "error": "method not allowed"})
        return _json(200, core.queues.stats())
    name = unquote(segments[0])
    rest = segments[1:]
    if rest == ["dead"]:
        if method != "GET":
            return _json(405, {"code": 405, "error": "method not allowed"})
        return _json(
            200,
            [
                {
                    "id": m.id,
                    "seq": m.seq,
                    "nonce": m.nonce,
                    "target": m.target,
                    "payload": m.payload,
                    "attempts": m.attempts,
                    "reason": m.reason,
                }
                for m in core.queues.dead_letters(name)
            ],
        )
    if rest == ["dead", "replay"]:
        if method != "POST":
            return _json(405, {"code": 405, "error": "method not allowed"})
        ids: list[str] | None = None
        if body.strip():
            try:
                parsed = orjson.loads(body)
            except orjson.JSONDecodeError:
                return _json(400, {"errors": ["body is not JSON"]})
            raw_ids = parsed.get("ids") if isinstance(parsed, dict) else None
            if raw_ids is not None:
                if not isinstance(raw_ids, list) or not all(isinstance(i, str) for i in raw_ids):
                    return _json(400, {"errors": ["ids must be a list of strings"]})
                ids = raw_ids
        replayed = core.replay_dead_letters(name, ids, now)
        return _json(200, {"replayed": [m.id for m in replayed]})
    return _json(404, {"code": 404, "error": "not found"})
