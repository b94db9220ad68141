"""Named, typed parameters: the one mechanism behind ``--param NAME=VALUE``, TOML and env.

Two things share it:

- **Scenario parameters** (``gossamer sim`` and ``gossamer lab``): a scenario declares
  :class:`Param` s (name, parser, default, unit, inclusive bounds, help); the command line
  gives ``--param NAME=VALUE`` texts, split by :func:`parse_assignments` and turned into
  typed values by :func:`resolve`.
- **Protocol configurations** (the lab's node file, environment, command line): any
  frozen config dataclass (``DiscoveryConfig``, ``GossipConfig``, ``IsisConfig``, ...) is
  filled by :func:`fill` from a TOML table, ``PREFIX<FIELD>`` environment variables and
  ``NAME=VALUE`` assignments, in that order of precedence (later wins). The names are the
  dataclass's field names and the types its annotations: nothing here knows any protocol,
  so renaming a field renames its parameter everywhere.

Every problem is a :class:`~gossamer.errors.ConfigError` whose message starts with where
the value came from and the parameter's name (``--param isis_rate=-1: must be at least 0
(allowed: 0 to 1000)``, ``isis.batch_delay: expected a number, not a string``). The module
is pure (no I/O): ``gossamer.sim``, ``gossamer.aio`` and ``gossamer.lab`` may all use it.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import types
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Final, TypeAlias

from gossamer.errors import ConfigError

__all__ = [
    "Bounds",
    "Checked",
    "Count",
    "Param",
    "PositiveCount",
    "PositiveSeconds",
    "Probability",
    "Seconds",
    "Sources",
    "boolean",
    "check",
    "choice",
    "describe",
    "fill",
    "integer",
    "non_negative_float",
    "number",
    "overrides",
    "parse_assignments",
    "parser_of",
    "positive_int",
    "resolve",
]

_TRUE: Final = frozenset({"1", "true", "yes", "on"})
_FALSE: Final = frozenset({"0", "false", "no", "off"})


# -- parsers: text -> value, ValueError (the reason) on bad text ------------------------


def boolean(text: str) -> bool:
    """``on/off``, ``true/false``, ``yes/no``, ``1/0`` (any case)."""
    word = text.strip().lower()
    if word in _TRUE:
        return True
    if word in _FALSE:
        return False
    raise ValueError("expected on/off (true/false, yes/no, 1/0)")


def number(text: str) -> float:
    """A finite decimal number."""
    try:
        value = float(text)
    except ValueError:
        raise ValueError("expected a number") from None
    if not math.isfinite(value):
        raise ValueError("expected a finite number")
    return value


def integer(text: str) -> int:
    """A decimal integer."""
    try:
        return int(text)
    except ValueError:
        raise ValueError("expected an integer") from None


def positive_int(text: str) -> int:
    """An integer >= 1."""
    value = integer(text)
    if value <= 0:
        raise ValueError(f"{value} is not a positive integer")
    return value


def non_negative_float(text: str) -> float:
    """A number >= 0 (NaN is refused)."""
    value = float(text)
    if not value >= 0:
        raise ValueError(f"{text} is not a non-negative number")
    return value


def choice(options: Sequence[str]) -> Callable[[str], str]:
    """A parser accepting exactly one of ``options``."""

    def parse(text: str) -> str:
        if text not in options:
            raise ValueError(f"expected one of {', '.join(options)}")
        return text

    return parse


def parser_of(default: object) -> Callable[[str], Any]:
    """The parser for a value of ``default``'s type: :func:`boolean` for a ``bool`` (whose
    constructor calls every non-empty text true), the type itself for ``int``, ``float``
    and ``str``."""
    return boolean if isinstance(default, bool) else type(default)


# -- scenario parameters ----------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Param:
    """One ``--param NAME=VALUE``: its parser, default, unit, inclusive bounds and meaning.

    ``parse`` turns the text into the typed value and raises ``ValueError`` (or
    ``ConfigError``) with the reason when it cannot; ``low``/``high`` are then checked on
    numbers. ``unit`` (``s``, ``ms``, ``bytes``, ``/s``; empty for counts, fractions and
    switches) is the one unit of the value. ``shown`` replaces the default's text in
    listings (``none``, ``nodes-1``).
    """

    name: str
    parse: Callable[[str], Any]
    default: Any
    help: str
    unit: str = ""
    low: float | None = None
    high: float | None = None
    shown: str = ""

    def value(self, text: str) -> Any:
        """The typed value of ``text``; ``ConfigError`` naming the parameter otherwise."""
        where = f"--param {self.name}={text}"
        try:
            value = self.parse(text.strip())
        except ConfigError as exc:
            raise ConfigError(f"{where}: {exc.reason}") from exc
        except ValueError as exc:
            raise ConfigError(f"{where}: {exc}") from exc
        if isinstance(value, int | float) and not isinstance(value, bool):
            if self.low is not None and value < self.low:
                raise ConfigError(f"{where}: must be at least {self.low:g}{self._allowed}")
            if self.high is not None and value > self.high:
                raise ConfigError(f"{where}: must be at most {self.high:g}{self._allowed}")
        return value

    @property
    def _allowed(self) -> str:
        unit = f" {self.unit}" if self.unit else ""
        if self.low is not None and self.high is not None:
            return f" (allowed: {self.low:g} to {self.high:g}{unit})"
        return ""

    @property
    def shown_default(self) -> str:
        """The default as ``--list`` shows it."""
        if self.shown:
            return self.shown
        value = self.default
        if value is None:
            return "none"
        if isinstance(value, bool):
            return "on" if value else "off"
        if isinstance(value, float):
            return f"{value:g}"
        return str(value) if isinstance(value, int | str) else repr(value)

    def describe(self) -> str:
        """One listing line: ``--param NAME=...  help [unit, low to high] (default D)``."""
        return f"--param {self.name}=...  {describe(self)} (default {self.shown_default})"


def describe(param: Param) -> str:
    """The help text of ``param`` with its unit and range, for listings."""
    extra: list[str] = []
    if param.low is not None and param.high is not None:
        extra.append(f"{param.low:g} to {param.high:g}")
    elif param.low is not None:
        extra.append(f">= {param.low:g}")
    if param.unit:
        extra.append(param.unit)
    return param.help + (f" [{', '.join(extra)}]" if extra else "")


def parse_assignments(items: Iterable[str], *, flag: str = "--param") -> dict[str, str]:
    """``["a=1", "b=x"]`` -> ``{"a": "1", "b": "x"}``; ``ConfigError`` on a bad or repeated
    item. The name is stripped; the value is kept as given."""
    values: dict[str, str] = {}
    for item in items:
        name, sep, text = item.partition("=")
        name = name.strip()
        if not sep or not name:
            raise ConfigError(f"{flag} {item!r} is not KEY=VALUE")
        if name in values:
            raise ConfigError(f"{flag} {name!r} is given twice")
        values[name] = text
    return values


def resolve(params: Sequence[Param], raw: Mapping[str, str], *, owner: str) -> dict[str, Any]:
    """Every parameter's value: its default, or its ``raw`` text parsed and checked.

    ``owner`` names who declares the parameters in the error for an unknown name
    (``scenario isis has no parameter 'x' (known: ...)``).
    """
    known = {p.name: p for p in params}
    for name in raw:
        if name not in known:
            names = ", ".join(known) or "none"
            raise ConfigError(f"{owner} has no parameter {name!r} (known: {names})")
    return {p.name: p.value(raw[p.name]) if p.name in raw else p.default for p in params}


# -- bounds of configuration fields --------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Bounds:
    """The allowed range and the unit of a numeric configuration field, written in its
    annotation: ``delay: Annotated[float, Bounds(low=0.0, unit="s")]`` (or an alias below).

    ``low`` and ``high`` are inclusive, except ``low`` when ``above`` is set (the value
    must be greater: a positive time). ``unit`` is the field's one unit (``s``, ``bytes``;
    empty for counts and probabilities); ``kind`` names what the value is, in errors (``a
    probability``). NaN is never within bounds.
    """

    low: float | None = None
    high: float | None = None
    above: bool = False
    unit: str = ""
    kind: str = ""

    def holds(self, value: float) -> bool:
        """Whether ``value`` is within the bounds."""
        if self.low is not None and not (value > self.low if self.above else value >= self.low):
            return False
        return self.high is None or value <= self.high

    def __str__(self) -> str:
        """``a probability from 0 to 1``, ``a positive number of seconds``, ``at least 1``."""
        unit = f" {self.unit}" if self.unit else ""
        if self.low is not None and self.high is not None:
            low = f"above {self.low:g} and at most" if self.above else f"from {self.low:g} to"
            text = f"{low} {self.high:g}{unit}"
        elif self.low == 0 and self.above:
            text = "a positive number of seconds" if self.unit == "s" else f"positive{unit}"
        elif self.low is not None:
            text = f"{'above' if self.above else 'at least'} {self.low:g}{unit}"
        else:
            text = f"at most {self.high:g}{unit}" if self.high is not None else "a number"
        return f"{self.kind} {text}" if self.kind else text


#: A probability, 0 to 1.
Probability: TypeAlias = Annotated[float, Bounds(low=0.0, high=1.0, kind="a probability")]
#: A duration that may be zero, in seconds.
Seconds: TypeAlias = Annotated[float, Bounds(low=0.0, unit="s")]
#: A duration greater than zero, in seconds.
PositiveSeconds: TypeAlias = Annotated[float, Bounds(low=0.0, above=True, unit="s")]
#: A count that may be zero.
Count: TypeAlias = Annotated[int, Bounds(low=0)]
#: A count of at least one.
PositiveCount: TypeAlias = Annotated[int, Bounds(low=1)]


class Checked:
    """The base of a configuration dataclass whose numeric fields carry :class:`Bounds`:
    constructing one refuses a field outside its bounds with a ``ConfigError`` naming the
    field, its value and the bounds. A subclass with checks across fields overrides
    ``__post_init__`` and calls :func:`check` first (not ``super()``, which a dataclass
    with ``slots=True`` breaks before Python 3.14)."""

    __slots__ = ()

    def __post_init__(self) -> None:
        check(self)


def check(config: Any) -> None:
    """Refuse the first field of the dataclass instance ``config`` outside its
    :class:`Bounds`, or holding something else than a number (``None`` is left to the
    field's type to allow)."""
    for name, bounds in _bounds(type(config)):
        value = getattr(config, name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) or not bounds.holds(value):
            raise ConfigError(f"{name} must be {bounds}", **{name: value})


#: ``(field, bounds)`` per configuration class: a class's annotations never change.
_BOUNDS: dict[type[Any], tuple[tuple[str, Bounds], ...]] = {}


def _bounds(cls: type[Any]) -> tuple[tuple[str, Bounds], ...]:
    found = _BOUNDS.get(cls)
    if found is None:
        hints = typing.get_type_hints(cls, include_extras=True)
        found = _BOUNDS[cls] = tuple(
            (f.name, meta)
            for f in dataclasses.fields(cls)
            for meta in _metadata(hints[f.name])
            if isinstance(meta, Bounds)
        )
    return found


def _metadata(hint: Any) -> tuple[Any, ...]:
    """The ``Annotated`` metadata of ``hint``, also inside an optional (``X | None``)."""
    if typing.get_origin(hint) is Annotated:
        return tuple(hint.__metadata__)
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return tuple(meta for arg in typing.get_args(hint) for meta in _metadata(arg))
    return ()


# -- protocol configurations from TOML, environment and command line ---------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Sources:
    """Where a configuration's values come from, lowest precedence first.

    ``table``: TOML values, checked against each field's type. ``env``: environment
    variables ``<prefix><FIELD>`` (the field's name in upper case; ignored without a
    ``prefix``). ``assignments``: ``NAME=VALUE`` texts (``--param``). Environment and
    assignment texts are parsed by the field's type (``on``/``off`` for booleans, a
    comma-separated list for tuples, ``none`` for an optional field).
    """

    table: Mapping[str, Any] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=dict)
    prefix: str = ""
    assignments: Mapping[str, str] = field(default_factory=dict)


def fill(
    cls: type[Any],
    sources: Sources,
    *,
    fixed: Mapping[str, Any] | None = None,
    where: str = "",
) -> Any:
    """An instance of the dataclass ``cls`` from its ``sources``, validated.

    Precedence, lowest first: the dataclass defaults, then ``sources`` in their order.
    ``fixed`` holds what the caller decides itself (addresses, member lists, keys): those
    fields cannot be set from the sources. A nested dataclass field is filled from a
    sub-table, or from dotted names (``retransmit.initial``).

    ``where`` prefixes error keys (``isis`` gives ``isis.batch_delay: ...``). The
    dataclass's own ``__post_init__`` checks run last; their ``ConfigError`` is re-raised
    with ``where`` in front.
    """
    values = overrides(cls, sources, fixed=fixed, where=where)
    try:
        return cls(**{**values, **(fixed or {})})
    except ConfigError as exc:
        raise ConfigError(f"{where or cls.__name__}: {exc.reason}", **exc.fields) from exc
    except TypeError as exc:  # a required field nobody gave
        raise ConfigError(f"{where or cls.__name__}: {exc}") from exc


def overrides(
    cls: type[Any],
    sources: Sources,
    *,
    fixed: Mapping[str, Any] | None = None,
    where: str = "",
) -> dict[str, Any]:
    """The typed field values the sources set (what :func:`fill` passes to ``cls``).

    Only fields given by a source appear, so the result can be kept (in a lab node's
    configuration) and applied later with the fields only the caller knows.
    """
    hints = _hints(cls)
    settable = {f.name for f in dataclasses.fields(cls) if f.init} - set(fixed or {})
    out: dict[str, Any] = {}

    def key(name: str) -> str:
        return f"{where}.{name}" if where else name

    def unknown(name: str, source: str) -> ConfigError:
        if fixed and name in fixed:
            return ConfigError(f"{source}: is set by the caller and cannot be configured")
        known = ", ".join(sorted(settable))
        return ConfigError(f"{source}: unknown key of {cls.__name__} (known: {known})")

    for name, raw in sources.table.items():
        if name not in settable:
            raise unknown(name, key(name))
        out[name] = _from_toml(hints[name], raw, key(name))
    texts: dict[str, tuple[str, str]] = {}
    prefix = sources.prefix
    for var, text in sources.env.items():
        if prefix and var.startswith(prefix):
            texts[var[len(prefix) :].lower()] = (text, var)
    for name, text in sources.assignments.items():
        texts[name] = (text, f"{name}={text}")
    nested: dict[str, dict[str, str]] = {}
    for name, (text, source) in texts.items():
        head, dot, rest = name.partition(".")
        if dot:
            if head not in settable or not dataclasses.is_dataclass(hints[head]):
                raise unknown(name, source)
            nested.setdefault(head, {})[rest] = text
            continue
        if name not in settable:
            raise unknown(name, source)
        out[name] = _from_text(hints[name], text, source)
    for head, sub in nested.items():
        inner = hints[head]
        base = out.get(head)
        table_part = (
            {f.name: getattr(base, f.name) for f in dataclasses.fields(base)}
            if base is not None
            else {}
        )
        out[head] = fill(inner, Sources(table=table_part, assignments=sub), where=key(head))
    return out


def _hints(cls: type[Any]) -> dict[str, Any]:
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"{cls!r} is not a dataclass")
    return typing.get_type_hints(cls)


def _options(hint: Any) -> tuple[Any, bool]:
    """(the type without ``None``, whether ``None`` is allowed)."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        optional = len(args) < len(typing.get_args(hint))
        return (args[0] if len(args) == 1 else hint), optional
    return hint, False


def _kind(value: Any) -> str:
    names = {
        bool: "a boolean",
        int: "an integer",
        float: "a number",
        str: "a string",
        list: "an array",
        dict: "a table",
    }
    return names.get(type(value), type(value).__name__)


def _from_toml(hint: Any, raw: Any, key: str) -> Any:
    """A TOML value checked (and converted) against a field's type."""
    kind, optional = _options(hint)
    if raw is None and optional:
        return None
    structured = isinstance(kind, type) and (
        issubclass(kind, enum.Enum) or dataclasses.is_dataclass(kind)
    )
    if structured and isinstance(raw, kind):  # already a value of the field's type (a default)
        return raw
    origin = typing.get_origin(kind)
    if kind is bool:
        if isinstance(raw, bool):
            return raw
        raise ConfigError(f"{key}: expected true or false, not {_kind(raw)}")
    if kind is int:
        if isinstance(raw, int) and not isinstance(raw, bool):
            return raw
        raise ConfigError(f"{key}: expected an integer, not {_kind(raw)}")
    if kind is float:
        if isinstance(raw, int | float) and not isinstance(raw, bool) and math.isfinite(raw):
            return float(raw)
        raise ConfigError(f"{key}: expected a finite number, not {_kind(raw)}")
    if kind is str:
        if isinstance(raw, str):
            return raw
        raise ConfigError(f"{key}: expected a string, not {_kind(raw)}")
    if kind is bytes:
        if isinstance(raw, str):
            return raw.encode()
        raise ConfigError(f"{key}: expected a string, not {_kind(raw)}")
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        return _from_text(kind, raw if isinstance(raw, str) else repr(raw), key)
    if dataclasses.is_dataclass(kind) and isinstance(kind, type):
        if not isinstance(raw, Mapping):
            raise ConfigError(f"{key}: expected a table, not {_kind(raw)}")
        return fill(kind, Sources(table=raw), where=key)
    if origin is tuple:
        args = typing.get_args(kind)
        if not isinstance(raw, list | tuple):
            raise ConfigError(f"{key}: expected an array, not {_kind(raw)}")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_from_toml(args[0], v, f"{key}[{i}]") for i, v in enumerate(raw))
        if len(args) != len(raw):
            raise ConfigError(f"{key}: expected {len(args)} values, not {len(raw)}")
        return tuple(
            _from_toml(a, v, f"{key}[{i}]") for i, (a, v) in enumerate(zip(args, raw, strict=True))
        )
    raise ConfigError(f"{key}: cannot be configured (its type is {kind!r})")


def _from_text(hint: Any, text: str, source: str) -> Any:
    """A field's value from its text form (environment, ``--param``)."""
    kind, optional = _options(hint)
    if optional and text.strip().lower() in ("", "none"):
        return None
    try:
        if kind is bool:
            return boolean(text)
        if kind is int:
            return integer(text.strip())
        if kind is float:
            return number(text.strip())
        if kind is str:
            return text
        if kind is bytes:
            return text.encode()
        if isinstance(kind, type) and issubclass(kind, enum.Enum):
            for member in kind:
                if text.strip().lower() in (str(member.value).lower(), member.name.lower()):
                    return member
            raise ValueError(f"expected one of {', '.join(str(m.value) for m in kind)}")
        if typing.get_origin(kind) is tuple:
            items = [t.strip() for t in text.split(",") if t.strip()]
            return _from_toml(kind, [_scalar(t) for t in items], source)
    except ValueError as exc:
        raise ConfigError(f"{source}: {exc}") from exc
    raise ConfigError(f"{source}: cannot be set from text (its type is {kind!r})")


def _scalar(text: str) -> Any:
    for parse in (int, float):
        try:
            return parse(text)
        except ValueError:
            continue
    return text
