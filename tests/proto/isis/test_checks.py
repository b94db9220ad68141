"""The total-order property checkers catch each kind of violation."""

from __future__ import annotations

from gossamer.proto.isis import payload_digest
from gossamer.proto.isis.checks import (
    Delivery,
    IsisRecord,
    check_all,
    record_from_trace,
)
from gossamer.trace import TraceEvent


def d(msg: str, seq: int, proposer: int = 1, data: str = "") -> Delivery:
    return Delivery(msg=msg, seq=seq, proposer=proposer, data=data)


def good() -> IsisRecord:
    order = [d("a/1", 1), d("b/1", 2)]
    return IsisRecord(
        multicasts={"a": {"a/1": ""}, "b": {"b/1": ""}},
        deliveries={"a": list(order), "b": list(order), "c": list(order)},
    )


def test_a_correct_run_has_no_violation() -> None:
    assert check_all(good(), ["a", "b", "c"]) == []


def test_each_property_is_checked() -> None:
    r = good()
    r.deliveries["c"] = [d("b/1", 2), d("a/1", 1)]
    assert any(p.startswith("total order: a and c differ") for p in check_all(r, "abc"))
    r = good()
    r.deliveries["c"] = [d("a/1", 1), d("b/1", 3)]
    assert any("has final (3, 1) at c" in p for p in check_all(r, "abc"))
    r = good()
    r.deliveries["c"] = [d("a/1", 1)]
    problems = check_all(r, "abc")
    assert any(p.startswith("validity: b/1") for p in problems)
    assert any(p.startswith("agreement: b/1") for p in problems)
    assert check_all(r, "ab") == []  # c is not correct: nothing is owed to it
    r = good()
    r.deliveries["a"].append(d("a/1", 1))
    assert check_all(r, "abc")[0] == "integrity: a delivered a/1 twice"
    r = good()
    r.deliveries["a"][0] = d("a/1", 1, data="5a5a")
    assert "with data 5a5a" in check_all(r, "abc")[0]
    r = good()
    r.deliveries["b"].append(d("z/9", 9))
    assert any("which nobody multicast" in p for p in check_all(r, "abc"))


def test_record_from_trace_reads_multicast_and_deliver_events() -> None:
    events = [
        TraceEvent(
            run="r",
            node="a",
            t=0.0,
            layer="isis",
            kind="multicast",
            msg="a/1",
            size=2,
            attrs={"digest": payload_digest(b"11")},
        ),
        TraceEvent(
            run="r",
            node="b",
            t=1.0,
            layer="isis",
            kind="deliver",
            msg="a/1",
            seq=4,
            size=2,
            attrs={"proposer": "2", "digest": payload_digest(b"11")},
        ),
        TraceEvent(run="r", node="b", t=1.0, layer="net", kind="fault", attrs={}),
    ]
    record = record_from_trace(events)
    digest = payload_digest(b"11")
    assert record.multicasts == {"a": {"a/1": digest}}
    assert record.deliveries == {"b": [Delivery(msg="a/1", seq=4, proposer=2, data=digest)]}
