"""gossamer: group communication for processes on LANs and clusters.

The library API (``docs/api.md``): every service is opened the same way, awaited or used
as an async context manager, and then sends, receives and closes with the same verbs::

    import gossamer

    async with gossamer.open_socket("pull", tag="jobs", wire=wire) as jobs:
        async for message in jobs:
            ...

The names below are imported lazily, on first use (as ``websockets`` does), so that
``import gossamer`` stays cheap and pulls in neither asyncio nor the drivers.

Layers (``docs/architecture.md``): pure codecs in ``wire``, the trace schema in
``trace``, sans-I/O protocol cores in ``proto``, a deterministic simulator in ``sim``,
asyncio drivers in ``aio``, durable storage in ``store``, the Spark pipeline in
``analysis``, real multi-process runs in ``lab`` and the CLI in ``cli``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from gossamer._version import __version__

# Public name -> the module that defines it.
_LAZY = {
    # Opening a service.
    "open_discovery": "gossamer.aio.discovery",
    "open_gossip": "gossamer.aio.gossip",
    "open_isis": "gossamer.aio.isis",
    "open_socket": "gossamer.aio.link",
    "open_node": "gossamer.aio.link",
    "open_gateway_client": "gossamer.aio.gateway_client",
    "open_gateway_server": "gossamer.aio.gateway_server",
    "open_views": "gossamer.aio.views",
    "open_group": "gossamer.aio.group",
    # The service a group member is (for annotations).
    "GroupService": "gossamer.aio.group",
    # One configuration per protocol.
    "DiscoveryConfig": "gossamer.proto.discovery.core",
    "GossipConfig": "gossamer.proto.gossip.config",
    "IsisConfig": "gossamer.proto.isis.core",
    "GatewayConfig": "gossamer.proto.gateway.core",
    "LinkConfig": "gossamer.proto.link",
    "ViewsConfig": "gossamer.proto.views.model",
    # The wire and its key.
    "Wire": "gossamer.wire.mode",
    "WireMode": "gossamer.wire.mode",
    # Running a program on the best event loop (uvloop when installed).
    "run": "gossamer.aio.loop",
}

__all__ = [
    "DiscoveryConfig",
    "GatewayConfig",
    "GossipConfig",
    "GroupService",
    "IsisConfig",
    "LinkConfig",
    "ViewsConfig",
    "Wire",
    "WireMode",
    "__version__",
    "open_discovery",
    "open_gateway_client",
    "open_gateway_server",
    "open_gossip",
    "open_group",
    "open_isis",
    "open_node",
    "open_socket",
    "open_views",
    "run",
]

if TYPE_CHECKING:
    from gossamer.aio.discovery import open_discovery
    from gossamer.aio.gateway_client import open_gateway_client
    from gossamer.aio.gateway_server import open_gateway_server
    from gossamer.aio.gossip import open_gossip
    from gossamer.aio.group import GroupService, open_group
    from gossamer.aio.isis import open_isis
    from gossamer.aio.link import open_node, open_socket
    from gossamer.aio.loop import run
    from gossamer.aio.views import open_views
    from gossamer.proto.discovery.core import DiscoveryConfig
    from gossamer.proto.gateway.core import GatewayConfig
    from gossamer.proto.gossip.config import GossipConfig
    from gossamer.proto.isis.core import IsisConfig
    from gossamer.proto.link import LinkConfig
    from gossamer.proto.views.model import ViewsConfig
    from gossamer.wire.mode import Wire, WireMode


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'gossamer' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # the next access does not come here
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])
