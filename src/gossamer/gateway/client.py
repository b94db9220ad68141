"""The asyncio client of the gateway (public name of ``gossamer.aio.gateway_client``):
``open_gateway_client``, ``GatewayClient``, ``Message``, ``GatewayInvalidError``,
``VersionString``, ``parse_dsn`` and ``typed``."""

from gossamer.aio.gateway_client import *  # noqa: F403 - this module is its public name
from gossamer.aio.gateway_client import __all__  # noqa: F401 - what the star exports
