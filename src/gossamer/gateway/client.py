"""The asyncio client of the gateway (public name of ``gossamer.aio.gateway_client``)."""

from gossamer.aio.gateway_client import (
    GatewayClient,
    GatewayInvalidError,
    Message,
    VersionString,
    open_gateway_client,
    parse_dsn,
    typed,
)

__all__ = [
    "GatewayClient",
    "GatewayInvalidError",
    "Message",
    "VersionString",
    "open_gateway_client",
    "parse_dsn",
    "typed",
]
