"""Reading a gossamer TOML configuration: typed tables, clear errors, environment overrides.

One mechanism for every configuration file the project reads (the node daemon's,
``gossamer.daemon.config``; the lab app's, ``gossamer.lab.config``):

- :class:`Table` gives typed, checked access to one TOML table and remembers which keys
  were read, so that :meth:`Table.finish` refuses an unknown key by name;
  :meth:`Table.protocol` reads the rest of a protocol section as the fields of the core's
  config dataclass (``gossamer.daemon.protocols``).
- Every problem is a ``ConfigError`` whose message starts with the key path
  (``gateway.port: must be <= 65535``) and whose ``key`` attribute holds it (:func:`fail`).
- :func:`apply_env`: ``GOSSAMER__<SECTION>__<KEY>=<value>`` replaces (or adds) one key of
  one section before validation; the value is parsed as a TOML value and, if that fails,
  taken as a plain string.
- :func:`read_key`: the group key from ``GOSSAMER_KEY`` or a key file, with the checks
  every key gets (``gossamer.wire.mode``); there is never a default key.
- :func:`read_document` reads a file; :func:`without_none` prepares a document for
  ``tomli_w`` (TOML has no null).
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from gossamer.daemon.protocols import PROTOCOLS, Protocol
from gossamer.errors import ConfigError
from gossamer.wire.mode import KEY_ENV, Wire, parse_key

__all__ = [
    "ENV_PREFIX",
    "REQUIRED",
    "Table",
    "apply_env",
    "fail",
    "kind",
    "read_document",
    "read_key",
    "without_none",
]

ENV_PREFIX: Final = "GOSSAMER__"


def fail(key: str, problem: str) -> ConfigError:
    """``ConfigError("KEY: PROBLEM")`` with ``key`` kept as its attribute."""
    # The key leads the message; it is also kept as ``key`` for callers (not as a
    # ``fields`` entry, which ``str()`` would repeat after the message).
    error = ConfigError(f"{key}: {problem}")
    error.key = key  # type: ignore[attr-defined]
    return error


def without_none(value: Any) -> Any:
    """``value`` with every ``None`` left out of its tables and arrays, and empty arrays of
    tables dropped (TOML has no null; ``load_config`` reads an absent key as the default)."""
    if isinstance(value, Mapping):
        kept = {k: without_none(v) for k, v in value.items() if v is not None}
        return {k: v for k, v in kept.items() if v != []}
    if isinstance(value, list | tuple):
        return [without_none(v) for v in value if v is not None]
    if isinstance(value, Path):
        return str(value)
    return value


REQUIRED: Any = object()


class Table:
    """Typed, checked access to one TOML table; remembers which keys were read."""

    def __init__(self, data: Any, path: str) -> None:
        if not isinstance(data, Mapping):
            raise fail(path, f"must be a table, not {kind(data)}")
        self.data = data
        self.path = path
        self.used: set[str] = set()

    def key(self, name: str) -> str:
        return f"{self.path}.{name}" if self.path else name

    def raw(self, name: str, default: Any) -> Any:
        self.used.add(name)
        if name in self.data:
            return self.data[name]
        if default is REQUIRED:
            raise fail(self.key(name), "is required")
        return default

    def string(self, name: str, default: Any = REQUIRED) -> Any:
        value = self.raw(name, default)
        if value is default:
            return value
        if not isinstance(value, str) or not value:
            raise fail(self.key(name), f"must be a non-empty string, not {kind(value)}")
        return value

    def boolean(self, name: str, default: Any = REQUIRED) -> Any:
        value = self.raw(name, default)
        if not isinstance(value, bool):
            raise fail(self.key(name), f"must be true or false, not {kind(value)}")
        return value

    def number(
        self, name: str, default: Any = REQUIRED, *, low: float | None = 0.0,
        high: float | None = None, above: float | None = None,
    ) -> Any:
        value = self.raw(name, default)
        if value is None and default is None:
            return None
        if not isinstance(value, int | float) or isinstance(value, bool):
            raise fail(self.key(name), f"must be a number, not {kind(value)}")
        value = float(value)
        if not math.isfinite(value):
            raise fail(self.key(name), "must be a finite number")
        bounds(self.key(name), value, low, high, above)
        return value

    def integer(
        self, name: str, default: Any = REQUIRED, *, low: int | None = 0, high: int | None = None
    ) -> Any:
        value = self.raw(name, default)
        if value is None and default is None:
            return None
        if not isinstance(value, int) or isinstance(value, bool):
            raise fail(self.key(name), f"must be an integer, not {kind(value)}")
        bounds(self.key(name), value, low, high, None)
        return value

    def strings(self, name: str, default: Any = REQUIRED) -> Any:
        value = self.raw(name, default)
        if value is default:
            return value
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise fail(self.key(name), "must be a list of non-empty strings")
        if len(set(value)) != len(value):
            raise fail(self.key(name), "lists an id twice")
        return tuple(value)

    def path_value(self, name: str, base: Path, default: Any = REQUIRED) -> Any:
        value = self.string(name, default)
        if value is default:
            return value
        path = Path(value).expanduser()
        return path if path.is_absolute() else base / path

    def protocol(self, spec: Protocol | None = None) -> dict[str, Any]:
        """The keys not read yet, as the settings of protocol ``spec`` (default: the one
        named like the table, ``gossamer.daemon.protocols.PROTOCOLS``): typed, checked by
        the core, keyed ``section.field``."""
        rest = {k: v for k, v in self.data.items() if k not in self.used}
        self.used.update(rest)
        spec = PROTOCOLS[self.path] if spec is None else spec
        try:
            return spec.settings(rest, self.path)
        except ConfigError as exc:
            if getattr(exc, "key", None):
                raise
            key = exc.reason.partition(":")[0]
            raise fail(key, exc.reason.partition(": ")[2]) from exc

    def finish(self) -> None:
        unknown = sorted(set(self.data) - self.used)
        if unknown:
            raise fail(self.key(unknown[0]), "unknown key")


def bounds(
    key: str, value: float, low: float | None, high: float | None, above: float | None
) -> None:
    if low is not None and value < low:
        raise fail(key, f"must be >= {num(low)}")
    if above is not None and value <= above:
        raise fail(key, f"must be > {num(above)}")
    if high is not None and value > high:
        raise fail(key, f"must be <= {num(high)}")


def num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def kind(value: Any) -> str:
    names = {bool: "a boolean", int: "an integer", float: "a number", str: "a string",
             list: "an array", dict: "a table"}
    return names.get(type(value), type(value).__name__)


def read_key(key_file: Path | None, env: Mapping[str, str], *, setting: str) -> bytes:
    """The group key: ``GOSSAMER_KEY`` or the key file (DESIGN.md: never a default key).
    ``setting`` names the key file's setting in errors (``node.key_file``)."""
    text = env.get(KEY_ENV)
    where = KEY_ENV
    try:
        if text:
            key = parse_key(text.encode())
        elif key_file is None:
            raise fail(
                setting,
                f"is required on the sealed wire (or {KEY_ENV}); there is no default key",
            )
        else:
            where = setting
            try:
                key = parse_key(key_file.read_bytes())
            except OSError as exc:
                raise fail(where, f"cannot be read ({exc.strerror})") from None
        Wire(key=key)  # the checks every key gets: length, known public keys
    except ConfigError as exc:
        if getattr(exc, "key", None):
            raise
        raise fail(where, str(exc)) from None
    return key


def apply_env(data: Mapping[str, Any], env: Mapping[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {k: (dict(v) if isinstance(v, Mapping) else v) for k, v in data.items()}
    for name in sorted(env):
        if not name.startswith(ENV_PREFIX):
            continue
        parts = name[len(ENV_PREFIX):].lower().split("__")
        if len(parts) != 2 or not all(parts):
            raise fail(name, "must be GOSSAMER__<SECTION>__<KEY>")
        section, key = parts
        if section == "peers":
            raise fail(name, "peers cannot be overridden from the environment")
        table = out.setdefault(section, {})
        if not isinstance(table, dict):
            raise fail(name, f"{section} is not a table")
        table[key] = env_value(env[name])
    return out


def env_value(text: str) -> Any:
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text



def read_document(path: str | Path) -> dict[str, Any]:
    """The TOML document in ``path``; ``ConfigError`` naming the file otherwise."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read the configuration {path}: {exc}", path=str(path)) from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}", path=str(path)) from None
