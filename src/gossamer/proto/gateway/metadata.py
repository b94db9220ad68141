"""Client metadata: typed values, validation, reserved keys (singyeong-as-coded §8).

A metadata update is a map ``{key: {"type": T, "value": V}}``. The types are
``string``, ``integer`` (an integer, never a boolean), ``float``, ``version`` (full
SemVer, compared by precedence: ``semver.py``), ``list``, ``boolean`` and ``map``; values
inside lists and maps are untyped JSON. Validation is per key, and every bad key gets
its own message, in the reference server's words where it has one::

    ip: forbidden metadata key
    k: value fails validation for 'integer'
    k: type 'date' doesn't exists

Deliberate differences from the reference (docs/gateway.md):

- ``float`` also accepts an integer (stored as a float): JavaScript's
  ``JSON.stringify(1.0)`` is ``1``, which the reference refuses;
- an entry that is not ``{"type", "value"}`` is a per-key error (op 3), not an
  ``internal server error`` that closes the socket;
- keys are bounded in length and in number per client (``MetadataLimits``).

Reserved keys are set by the gateway at identify (and ``last_heartbeat_time`` on every
heartbeat), are queryable like any other key, and cannot be set by clients.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gossamer.errors import ConfigError
from gossamer.proto.gateway.semver import Version, parse_version

__all__ = [
    "METADATA_TYPES",
    "RESERVED_KEYS",
    "MetadataLimits",
    "TypedValue",
    "plain_value",
    "validate_metadata",
]

METADATA_TYPES: frozenset[str] = frozenset(
    {"string", "integer", "float", "version", "list", "boolean", "map"}
)

#: Set by the gateway, readable by queries, refused in updates (§8).
RESERVED_KEYS: frozenset[str] = frozenset(
    {"last_heartbeat_time", "restricted", "encoding", "ip", "namespace", "receive_client_updates"}
)

#: A validated value: its declared type and its value (a ``Version`` for ``version``).
TypedValue = tuple[str, Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class MetadataLimits:
    """Bounds on one client's metadata; the reference has none (§12)."""

    max_keys: int = 256
    max_key_length: int = 256

    def __post_init__(self) -> None:
        if self.max_keys < 1 or self.max_key_length < 1:
            raise ConfigError("metadata limits must be positive")


def plain_value(value: Any) -> Any:
    """The JSON form of a stored value (a version becomes its text)."""
    return value.text if isinstance(value, Version) else value


def _check_value(type_name: str, value: Any) -> Any:
    """The stored form of ``value`` for ``type_name``, or raise ValueError."""
    if type_name == "string":
        if isinstance(value, str):
            return value
    elif type_name == "integer":
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif type_name == "float":
        if isinstance(value, float):
            return value
        if isinstance(value, int) and not isinstance(value, bool):
            return float(value)
    elif type_name == "version":
        if isinstance(value, str):
            version = parse_version(value)
            if version is not None:
                return version
    elif type_name == "list":
        if isinstance(value, list):
            return value
    elif type_name == "boolean":
        if isinstance(value, bool):
            return value
    elif type_name == "map" and isinstance(value, dict):
        return value
    raise ValueError(type_name)


def _shown(key: str, limits: MetadataLimits) -> str:
    return key if len(key) <= limits.max_key_length else key[:64] + "..."


def validate_metadata(
    raw: object,
    *,
    limits: MetadataLimits,
    allow_reserved: bool = False,
) -> tuple[dict[str, TypedValue], dict[str, str]]:
    """Validate an update; return ``(accepted, errors)``.

    ``accepted`` maps each valid key to ``(type, stored value)``; ``errors`` maps each
    bad key to its message (the key ``"metadata"`` when ``raw`` is not a map or has too
    many keys). An update with any error must be refused whole by the caller.
    """
    if not isinstance(raw, Mapping):
        return {}, {"metadata": "metadata: expected an object of {type, value} entries"}
    accepted: dict[str, TypedValue] = {}
    errors: dict[str, str] = {}
    if len(raw) > limits.max_keys:
        errors["metadata"] = f"metadata: more than {limits.max_keys} keys"
        return {}, errors
    for key, entry in raw.items():
        shown = _shown(key, limits)
        if len(key) > limits.max_key_length:
            errors[shown] = f"{shown}: key longer than {limits.max_key_length} characters"
            continue
        if key in RESERVED_KEYS and not allow_reserved:
            errors[key] = f"{key}: forbidden metadata key"
            continue
        if not isinstance(entry, Mapping) or "type" not in entry or "value" not in entry:
            errors[key] = f'{key}: expected {{"type": ..., "value": ...}}'
            continue
        type_name = entry["type"]
        if not isinstance(type_name, str) or type_name not in METADATA_TYPES:
            errors[key] = f"{key}: type '{type_name}' doesn't exists"
            continue
        try:
            accepted[key] = (type_name, _check_value(type_name, entry["value"]))
        except ValueError:
            errors[key] = f"{key}: value fails validation for '{type_name}'"
    return accepted, errors
