"""Semantic versions, the value domain of the ``version`` metadata type.

The reference server validates ``version`` values with Elixir's ``Version.parse``
(full SemVer 2.0.0: ``1.2`` is refused) but then compares them as plain strings, so
``"10.0.0" $gt "9.0.0"`` is false there (singyeong-as-coded §9.1, §15.8). gossamer
compares them by SemVer precedence (semver.org §11): major, minor and patch
numerically; a pre-release sorts before its release; pre-release identifiers compare
numerically when both are numeric, numeric before alphanumeric, and a shorter list of
identifiers first when all shared ones are equal. Build metadata is ignored by
precedence, so ``1.0.0+a`` equals ``1.0.0+b``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["Version", "parse_version"]

_NUM = r"0|[1-9]\d*"
_PRE_ID = r"(?:0|[1-9]\d*|\d*[A-Za-z-][0-9A-Za-z-]*)"
_SEMVER = re.compile(
    rf"^({_NUM})\.({_NUM})\.({_NUM})"
    rf"(?:-({_PRE_ID}(?:\.{_PRE_ID})*))?"
    r"(?:\+([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?$"
)
#: Longer strings are not versions; bounds the regex work per value.
_MAX_LEN = 256

#: A pre-release identifier as a sort key: numeric ones sort before alphanumeric ones.
_PreKey = tuple[int, int | str]


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class Version:
    """A parsed SemVer value. ``key`` orders versions by precedence; ``text`` is as given.

    Equality and hashing use ``key`` only, so two versions that differ only in build
    metadata are equal, as SemVer precedence says.
    """

    text: str
    key: tuple[int, int, int, tuple[int, tuple[_PreKey, ...]]]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Version) and self.key == other.key

    def __hash__(self) -> int:
        return hash(self.key)

    def __lt__(self, other: Version) -> bool:
        return self.key < other.key

    def __str__(self) -> str:
        return self.text


def parse_version(text: str) -> Version | None:
    """The version ``text`` denotes, or None when it is not a full SemVer 2.0.0 string."""
    if len(text) > _MAX_LEN:
        return None
    match = _SEMVER.match(text)
    if match is None:
        return None
    major, minor, patch, pre, _build = match.groups()
    if pre is None:
        # A release sorts after every pre-release of the same numbers (semver.org §11.3).
        pre_key: tuple[int, tuple[_PreKey, ...]] = (1, ())
    else:
        pre_key = (
            0,
            tuple((0, int(part)) if part.isdigit() else (1, part) for part in pre.split(".")),
        )
    return Version(text=text, key=(int(major), int(minor), int(patch), pre_key))
