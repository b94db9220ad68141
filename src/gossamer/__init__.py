"""gossamer: group communication for processes on LANs and clusters.

Layers (see docs/architecture.md): pure codecs in ``wire``, the trace schema in
``trace``, sans-I/O protocol cores in ``proto``, a deterministic simulator in
``sim``, asyncio drivers in ``aio``, durable storage in ``store``, the Spark
pipeline in ``analysis``, real multi-process runs in ``lab`` and the CLI in ``cli``.
"""

from gossamer._version import __version__

__all__ = ["__version__", "open_socket"]


def __getattr__(name: str) -> object:
    # ``gossamer.open_socket(...)`` is the public entry to links; imported lazily so that
    # ``import gossamer`` does not pull in asyncio and the drivers.
    if name == "open_socket":
        from gossamer.aio.link import open_socket  # noqa: PLC0415 - lazy on purpose

        return open_socket
    raise AttributeError(f"module 'gossamer' has no attribute {name!r}")
