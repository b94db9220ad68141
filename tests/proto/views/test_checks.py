"""The checkers find what they are for: each guarantee broken on purpose is reported."""

from __future__ import annotations

from gossamer.proto.views.checks import Installed, check_all, cut_state

A, B, C, D = ("a", 1), ("b", 1), ("c", 1), ("d", 1)


def view(id_: int, *members: tuple[str, int], agreed: str = "abc", state: bytes | None = None):  # type: ignore[no-untyped-def]
    return Installed(id=id_, members=members, agreed_by=tuple(agreed), state=state)


def test_a_correct_history_passes_with_a_joiner_and_a_removal() -> None:
    v1, v2 = view(1, A, B, C, agreed=""), view(2, A, B, D)
    installs = {
        A: [v1, v2],
        B: [v1, v2],
        C: [v1],
        D: [view(2, A, B, D, state=cut_state(1, (A, B, C)))],
    }
    assert check_all(installs, live=[A, B, D]) == []


def test_each_broken_guarantee_is_reported() -> None:
    v1 = view(1, A, B, C, agreed="")
    found = check_all({A: [v1, view(2, A, B)], B: [v1, view(2, A, C)]})
    assert any("view 2: " in v for v in found)  # two views with one id
    found = check_all({A: [v1, view(3, A, B, agreed="ab")], B: [v1, view(2, A, B, agreed="ab")]})
    assert any("not one after the other" in v for v in found)  # a skipped view
    found = check_all({A: [v1, view(2, A, agreed="a")]})
    assert any("agreed by" in v for v in found) and any("keeps" in v for v in found)
    found = check_all({A: [v1], D: [view(2, A, B, C, D, state=b"wrong")]})
    assert any("with state" in v for v in found)  # a joiner's state not at the cut
    found = check_all({A: [v1, view(2, B, C)]})
    assert any("without itself" in v for v in found)
    found = check_all({A: [v1], B: [v1]}, live=[A, B])
    assert any("ends in view 1" in v for v in found)  # not converged on the live members
