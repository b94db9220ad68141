"""Wires for tests: a sealed wire with a fresh random key."""

from __future__ import annotations

import secrets

from gossamer.wire.mode import Wire

__all__ = ["sealed_wire"]


def sealed_wire(cluster: str = "test") -> Wire:
    """A sealed wire with a fresh random key: build it once and give it to every member of
    one group (a group shares its key)."""
    return Wire(key=secrets.token_bytes(32), cluster=cluster)
