"""Transition tables: the one lookup behind every protocol's state machine.

Each protocol writes its machine as a table ``{(state, input): row}`` (the row is the next
state, with the actions where the protocol has any), so that the whole behaviour can be
read, printed and tested for completeness at one place. ``lookup`` reads a row; a pair
the table does not define is an input the core should never have produced in that state:
a bug on this side, raised as ``LocalProtocolError`` naming both.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum
from typing import TypeVar

from gossamer.errors import LocalProtocolError

__all__ = ["lookup"]

_State = TypeVar("_State", bound=Enum)
_Input = TypeVar("_Input", bound=Enum)
_Row = TypeVar("_Row")


def lookup(table: Mapping[tuple[_State, _Input], _Row], state: _State, event: _Input) -> _Row:
    """The row of ``table`` for ``event`` in ``state``; ``LocalProtocolError`` (with the
    ``state`` and ``input`` values) for a pair the table does not define."""
    try:
        return table[(state, event)]
    except KeyError:
        raise LocalProtocolError(
            "no transition for this input in this state", state=state.value, input=event.value
        ) from None
