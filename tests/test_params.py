"""One parameter mechanism (``gossamer.params``) and one grammar of scheduled faults
(``gossamer.faults``), shared by ``gossamer sim``, ``gossamer lab`` and the node files."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Annotated, Any

import pytest

from gossamer.errors import ConfigError
from gossamer.faults import (
    Crash,
    Partition,
    node_at_list,
    parse_crash,
    parse_partition,
    partition_spec,
)
from gossamer.params import (
    Bounds,
    Checked,
    Count,
    Param,
    PositiveSeconds,
    Probability,
    Sources,
    boolean,
    fill,
    number,
    overrides,
    parse_assignments,
    positive_int,
    resolve,
)

RATE = Param(name="rate", parse=number, default=2.0, help="sends", unit="/s", low=0, high=100)
ON = Param(name="on", parse=boolean, default=True, help="switch")
COUNT = Param(name="count", parse=positive_int, default=3, help="how many")


def test_param_values_are_typed_and_bounded() -> None:
    assert resolve((RATE, ON, COUNT), {"rate": " 2.5", "on": "off"}, owner="scenario x") == {
        "rate": 2.5,
        "on": False,
        "count": 3,
    }
    with pytest.raises(
        ConfigError,
        match=r"^--param rate=101: must be at most 100 \(allowed: "
        r"0 to 100 /s\)$",
    ):
        RATE.value("101")
    with pytest.raises(ConfigError, match=r"^--param rate=fast: expected a number$"):
        RATE.value("fast")
    with pytest.raises(ConfigError, match=r"^--param rate=inf: expected a finite number$"):
        RATE.value("inf")
    with pytest.raises(ConfigError, match=r"^--param on=maybe: expected on/off"):
        ON.value("maybe")
    with pytest.raises(ConfigError, match=r"^--param count=0: 0 is not a positive integer$"):
        COUNT.value("0")
    with pytest.raises(ConfigError, match=r"^scenario x has no parameter 'rat' \(known: rate, on"):
        resolve((RATE, ON), {"rat": "1"}, owner="scenario x")


def test_listing_shows_unit_range_and_default() -> None:
    assert RATE.describe() == "--param rate=...  sends [0 to 100, /s] (default 2)"
    assert ON.describe() == "--param on=...  switch (default on)"


def test_assignments() -> None:
    assert parse_assignments(["a=1", " b =x=y", "c="]) == {"a": "1", "b": "x=y", "c": ""}
    with pytest.raises(ConfigError, match="'a' is not KEY=VALUE"):
        parse_assignments(["a"])
    with pytest.raises(ConfigError, match="'a' is given twice"):
        parse_assignments(["a=1", "a=2"])


def test_one_fault_grammar() -> None:
    assert parse_crash(" h3 @ 12.5 ") == Crash(host="h3", at=12.5)
    assert parse_partition("h1, h2@5-10") == Partition(hosts=("h1", "h2"), start=5.0, end=10.0)
    assert node_at_list("n3@5,n4@.5") == [("n3", 5.0), ("n4", 0.5)]
    assert partition_spec("n1,n2@5-10") == (["n1", "n2"], 5.0, 10.0)
    with pytest.raises(ConfigError, match=r"--crash 'h3@-1': expected HOST@SECONDS"):
        parse_crash("h3@-1")
    with pytest.raises(ValueError, match="'n1' is not NODE@SECONDS"):
        node_at_list("n0@1,n1")
    with pytest.raises(ValueError, match="FROM must be before TO"):
        partition_spec("n1@5-2")
    # The simulator's parameters and the lab's flags are one grammar: same errors.
    sim = Param(name="crash", parse=node_at_list, default=[], help="crashes")
    with pytest.raises(ConfigError, match=r"^--param crash=h3: 'h3' is not NODE@SECONDS$"):
        sim.value("h3")


class Colour(Enum):
    RED = "red"
    BLUE = "blue"


@dataclass(frozen=True, slots=True, kw_only=True)
class Inner:
    initial: float = 0.2
    factor: float = 2.0

    def __post_init__(self) -> None:
        if self.factor < 1:
            raise ConfigError("factor must be at least 1", factor=self.factor)


@dataclass(frozen=True, slots=True, kw_only=True)
class Example:
    address: str
    rate: float = 1.0
    count: int = 3
    on: bool = False
    colour: Colour = Colour.RED
    limit: int | None = None
    names: tuple[str, ...] = ()
    inner: Inner = field(default_factory=Inner)


def test_fill_from_table_environment_and_assignments() -> None:
    sources = Sources(
        table={"rate": 2, "count": 4, "inner": {"initial": 0.5}},
        env={"EX_COUNT": "5", "EX_ON": "yes", "OTHER_RATE": "9"},
        prefix="EX_",
        assignments={"colour": "blue", "inner.factor": "3", "names": "a, b"},
    )
    config = fill(Example, sources, fixed={"address": "here"})
    assert config == Example(
        address="here",
        rate=2.0,
        count=5,
        on=True,
        colour=Colour.BLUE,
        names=("a", "b"),
        inner=Inner(initial=0.5, factor=3.0),
    )
    assert overrides(Example, Sources(assignments={"limit": "none"})) == {"limit": None}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"table": {"rate": "fast"}}, "ex.rate: expected a finite number, not a string"),
        ({"table": {"count": 1.5}}, "ex.count: expected an integer, not a number"),
        ({"table": {"bogus": 1}}, "ex.bogus: unknown key of Example (known: colour, count"),
        ({"table": {"address": "x"}, "fixed": {"address": "y"}}, "ex.address: is set by the"),
        ({"assignments": {"colour": "green"}}, "colour=green: expected one of red, blue"),
        ({"env": {"EX_ON": "maybe"}, "prefix": "EX_"}, "EX_ON: expected on/off"),
        ({"assignments": {"rate.x": "1"}}, "rate.x=1: unknown key"),
        ({"table": {"inner": {"factor": 0.5}}}, "ex.inner: factor must be at least 1"),
    ],
)
def test_fill_errors_name_the_parameter(kwargs: dict[str, object], message: str) -> None:
    fixed = kwargs.pop("fixed", {"address": "here"})
    with pytest.raises(ConfigError) as info:
        fill(Example, Sources(**kwargs), fixed=fixed, where="ex")  # type: ignore[arg-type]
    assert message in str(info.value)


@dataclass(frozen=True, slots=True, kw_only=True)
class _Bounded(Checked):
    chance: Probability = 0.5
    wait: PositiveSeconds = 1.0
    tries: Count = 3
    window: Annotated[int, Bounds(low=1, high=64)] | None = None


def test_bounds_in_annotations_allow_their_limits() -> None:
    assert _Bounded(chance=1.0, tries=0, window=64) == _Bounded(chance=1, tries=0, window=64)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"chance": 1.5}, "chance must be a probability from 0 to 1"),
        ({"chance": float("nan")}, "chance must be a probability from 0 to 1"),
        ({"tries": "3"}, "tries must be at least 0"),
        ({"wait": 0.0}, "wait must be a positive number of seconds"),
        ({"tries": -1}, "tries must be at least 0"),
        ({"window": 65}, "window must be from 1 to 64"),
    ],
)
def test_bounds_in_annotations_are_checked_on_construction(
    kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=message) as caught:
        _Bounded(**kwargs)
    assert list(caught.value.fields) == list(kwargs)  # the field is named
