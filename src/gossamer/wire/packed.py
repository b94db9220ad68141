"""msgpack values from untrusted bytes: one size bound, one error type.

The msgpack formats (``gateway_cluster``, ``queue_commands``, the replicated queues'
snapshot) read their bytes through ``unpack_value``, so that every one of them refuses an
oversized input before parsing and turns every msgpack failure into ``DecodeError``.
"""

from __future__ import annotations

from typing import Any

import msgpack

from gossamer.errors import DecodeError

__all__ = ["unpack_value"]


def unpack_value(data: bytes, *, max_size: int, what: str) -> Any:
    """The msgpack value of ``data`` (lists as lists, map keys of any type, strings as
    UTF-8); ``DecodeError`` starting with ``what`` when ``data`` exceeds ``max_size``
    bytes or is not exactly one msgpack value."""
    if len(data) > max_size:
        raise DecodeError(f"{what}: too large", size=len(data), max_size=max_size)
    try:
        return msgpack.unpackb(data, raw=False, strict_map_key=False, use_list=True)
    except (ValueError, TypeError, msgpack.ExtraData, msgpack.FormatError) as exc:
        raise DecodeError(f"{what}: msgpack: {type(exc).__name__}") from exc
