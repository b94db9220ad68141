"""The installed version, in a module of its own so that layers can read it without
importing the package root (which re-exports the public API from ``aio``)."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("gossamer")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.0.0+unknown"
