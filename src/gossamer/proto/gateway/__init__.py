"""The singyeong-compatible gateway: identify, metadata, routing queries, queues (sans-I/O).

``GatewayCore`` (``core``) is the server side; ``ClientCore`` (``client``) the client
side; ``docs/gateway.md`` describes the protocol as built and every difference from
the reference server.
"""

from gossamer.proto.gateway.client import ClientConfig, ClientCore, Dsn, parse_dsn
from gossamer.proto.gateway.core import (
    Close,
    CloseCode,
    GatewayConfig,
    GatewayCore,
    Transmit,
)
from gossamer.proto.gateway.query import Query, QueryError, parse_query
from gossamer.proto.gateway.queues import QueueConfig, QueueRecord
from gossamer.proto.gateway.routing import Client, Directory

__all__ = [
    "Client",
    "ClientConfig",
    "ClientCore",
    "Close",
    "CloseCode",
    "Directory",
    "Dsn",
    "GatewayConfig",
    "GatewayCore",
    "Query",
    "QueryError",
    "QueueConfig",
    "QueueRecord",
    "Transmit",
    "parse_dsn",
    "parse_query",
]
