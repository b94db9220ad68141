"""ISIS checkers on tiny inline traces: each property holds, and each mutation is caught."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark", reason="pyspark is an optional extra (install gossamer[spark])")

from pyspark.sql import SparkSession

from gossamer.analysis.checks import isis
from gossamer.analysis.frames import event, events_frame
from gossamer.trace import TraceEvent

pytestmark = pytest.mark.spark

NODES = ("n0", "n1", "n2")
# (msg, final seq, proposer) in the agreed total order.
ORDER = (("n0/0", 1, "n1"), ("n1/0", 2, "n0"), ("n2/0", 2, "n2"), ("n0/1", 3, "n0"))


def run(
    order_at: dict[str, list[int]] | None = None, *, extra: tuple[TraceEvent, ...] = ()
) -> list[TraceEvent]:
    """A 3-node run: every message multicast, then delivered in ``ORDER`` (or as given)."""
    out = [
        event(m.split("/")[0], 0.1 * i, "isis", "multicast", msg=m)
        for i, (m, _, _) in enumerate(ORDER)
    ]
    for node in NODES:
        picks = (order_at or {}).get(node, list(range(len(ORDER))))
        for k, i in enumerate(picks):
            msg, seq, proposer = ORDER[i]
            # Two deliveries share each instant: file order must break the tie.
            out.append(
                event(node, 1.0 + k // 2, "isis", "deliver", msg=msg, seq=seq, proposer=proposer)
            )
    return [*out, *extra]


def rows(spark: SparkSession, events: list[TraceEvent], checker: object) -> list[dict[str, object]]:
    assert callable(checker)
    return [r.asDict() for r in checker(events_frame(spark, events)).collect()]


def test_a_correct_run_holds_every_property(spark: SparkSession) -> None:
    df = events_frame(spark, run())
    assert isis.order_suspects(df).count() == 0
    assert isis.short_messages(df).count() == 0
    assert isis.never_delivered_own(df).count() == 0
    assert isis.total_order(df).count() == 0
    assert isis.agreement(df).count() == 0
    assert isis.validity(df).count() == 0
    assert isis.integrity(df).count() == 0
    assert isis.final_sequence(df).count() == 0


def test_two_swapped_deliveries_on_one_node_break_total_order(spark: SparkSession) -> None:
    # n2 delivers n1/0 before n0/0; the others agree with each other.
    found = rows(spark, run({"n2": [1, 0, 2, 3]}), isis.total_order)
    pairs = sorted((r["node_a"], r["node_b"]) for r in found)
    assert pairs == [("n2", "n0"), ("n2", "n1")]
    assert {(r["msg_1"], r["msg_2"]) for r in found} == {("n1/0", "n0/0")}
    assert "n2 delivered n1/0 before n0/0" in str(found[0]["detail"])


@pytest.mark.parametrize("chunk_seconds", [0.5, 1.0, 100.0])
def test_the_pre_check_finds_a_swap_within_or_across_stretches(
    spark: SparkSession, chunk_seconds: float
) -> None:
    events = [event(m.split("/")[0], 0.0, "isis", "multicast", msg=m) for m, _, _ in ORDER]
    for node in NODES:
        picks = [0, 2, 1, 3] if node == "n1" else [0, 1, 2, 3]
        for k, i in enumerate(picks):  # one delivery per second
            msg, seq, proposer = ORDER[i]
            events.append(
                event(node, 1.0 + k, "isis", "deliver", msg=msg, seq=seq, proposer=proposer)
            )
    df = events_frame(spark, events)
    suspects = isis.order_suspects(df, chunk_seconds=chunk_seconds).collect()
    assert [r["node"] for r in suspects] == ["n1"]
    clean = events_frame(spark, run())
    assert isis.order_suspects(clean, chunk_seconds=chunk_seconds).count() == 0


def test_swaps_that_keep_keys_increasing_are_still_caught(spark: SparkSession) -> None:
    # Same final (seq, proposer) on both messages at every node, yet opposite orders:
    # the linear pre-check must not be fooled by equal keys.
    events = [
        event("n0", 0.0, "isis", "multicast", msg="n0/0"),
        event("n1", 0.0, "isis", "multicast", msg="n1/0"),
        event("n0", 1.0, "isis", "deliver", msg="n0/0", seq=5, proposer="n0"),
        event("n0", 1.0, "isis", "deliver", msg="n1/0", seq=5, proposer="n0"),
        event("n1", 1.0, "isis", "deliver", msg="n1/0", seq=5, proposer="n0"),
        event("n1", 1.0, "isis", "deliver", msg="n0/0", seq=5, proposer="n0"),
    ]
    found = rows(spark, events, isis.total_order)
    assert [{r["node_a"], r["node_b"]} for r in found] == [{"n0", "n1"}]


def test_a_duplicate_delivery_breaks_integrity_not_order(spark: SparkSession) -> None:
    dup = event("n1", 9.0, "isis", "deliver", msg="n0/0", seq=1, proposer="n1")
    events = run(extra=(dup,))
    found = rows(spark, events, isis.integrity)
    assert [(r["problem"], r["node"], r["msg"], r["count"]) for r in found] == [
        ("duplicate", "n1", "n0/0", 2)
    ]
    assert found[0]["at"] == "n1.jsonl:6"  # n1's multicast, four deliveries, the duplicate
    assert rows(spark, events, isis.total_order) == []


def test_a_missing_delivery_breaks_agreement(spark: SparkSession) -> None:
    found = rows(spark, run({"n1": [0, 1, 3]}), isis.agreement)
    assert [(r["msg"], r["delivered_by"], r["expected"], r["missing"]) for r in found] == [
        ("n2/0", 2, 3, ["n1"])
    ]


def test_a_sender_that_never_delivers_its_own_message_breaks_validity(spark: SparkSession) -> None:
    found = rows(spark, run({"n0": [1, 2]}), isis.validity)
    assert sorted(r["msg"] for r in found) == ["n0/0", "n0/1"]
    assert {r["node"] for r in found} == {"n0"}


def test_the_pre_checks_of_agreement_and_validity_find_what_they_report(
    spark: SparkSession,
) -> None:
    # Empty only if the property holds: the job then skips the full check.
    short = events_frame(spark, run({"n1": [0, 1, 3]}))
    assert [r["msg"] for r in isis.short_messages(short).collect()] == ["n2/0"]
    assert isis.never_delivered_own(short).count() == 0
    own = events_frame(spark, run({"n0": [1, 2]}))
    assert sorted(r["msg"] for r in isis.never_delivered_own(own).collect()) == ["n0/0", "n0/1"]


def test_a_delivery_that_nobody_multicast_breaks_integrity(spark: SparkSession) -> None:
    ghost = event("n2", 9.0, "isis", "deliver", msg="n7/3", seq=9, proposer="n2")
    found = rows(spark, run(extra=(ghost,)), isis.integrity)
    assert [(r["problem"], r["node"], r["msg"]) for r in found] == [
        ("never multicast", "n2", "n7/3")
    ]


def test_different_final_sequences_are_reported(spark: SparkSession) -> None:
    events = run()
    i = next(
        k
        for k, e in enumerate(events)
        if e.node == "n2" and e.kind == "deliver" and e.msg == "n0/1"
    )
    e = events[i]
    events[i] = event("n2", e.t, "isis", "deliver", msg="n0/1", seq=4, proposer="n0")
    found = rows(spark, events, isis.final_sequence)
    assert [(r["msg"], r["final_lo"], r["final_hi"], r["node_hi"]) for r in found] == [
        ("n0/1", "3/n0", "4/n0", "n2")
    ]


def test_crashed_nodes_are_not_held_to_agreement_or_order(spark: SparkSession) -> None:
    crash = event("n2", 1.5, "net", "fault", fault="crash")
    # n2 crashed after two deliveries, in a different order: it is not a correct node.
    events = run({"n2": [1, 0]}, extra=(crash,))
    assert rows(spark, events, isis.agreement) == []
    assert rows(spark, events, isis.total_order) == []
    # Integrity still applies to it.
    dup = event("n2", 1.2, "isis", "deliver", msg="n1/0", seq=2, proposer="n0")
    assert len(rows(spark, [*events, dup], isis.integrity)) == 1


def test_a_node_without_any_event_still_counts_for_agreement(spark: SparkSession) -> None:
    df = events_frame(spark, run())
    silent = spark.createDataFrame([("n9",)], "node string")
    found = isis.agreement(df, nodes=silent).collect()
    assert len(found) == len(ORDER)
    assert all(r["missing"] == ["n9"] for r in found)


# -- unfinished at a clean stop --------------------------------------------------------


def stopped(
    node: str, t: float = 5.0, *, held: str = "", outstanding: str = ""
) -> tuple[TraceEvent, ...]:
    """A lab node's clean stop: ``net/stop`` when it begins, ``isis/stop`` with what ISIS
    left unfinished."""
    return (
        event(node, t, "net", "stop"),
        event(node, t + 0.01, "isis", "stop", held=held, outstanding=outstanding),
    )


def verdicts(spark: SparkSession, events: list[TraceEvent], checker: object) -> list[object]:
    return [(r["msg"], r["unfinished"]) for r in rows(spark, events, checker)]


def test_a_message_held_back_at_a_clean_stop_is_unfinished_not_lost(spark: SparkSession) -> None:
    # n1 never delivered n0/1, the last message, and stopped cleanly still holding it.
    events = run({"n1": [0, 1, 2]}, extra=stopped("n1", held="n0/1"))
    found = rows(spark, events, isis.agreement)
    assert [(r["msg"], r["missing"], r["unfinished"]) for r in found] == [("n0/1", ["n1"], True)]
    assert "unfinished at the clean stop of n1: held back at its stop" in found[0]["detail"]


def test_a_message_its_sender_still_worked_on_at_its_stop_is_unfinished(
    spark: SparkSession,
) -> None:
    # n1 never received n0/1: the sender stopped cleanly still waiting for n1's Ack.
    events = run({"n1": [0, 1, 2]}, extra=(*stopped("n1"), *stopped("n0", outstanding="n0/1")))
    assert verdicts(spark, events, isis.agreement) == [("n0/1", True)]


def test_a_message_ordered_after_a_member_stopped_is_unfinished(spark: SparkSession) -> None:
    # The sender fixed n0/1's final sequence only after n1 had begun to stop (without it).
    late = event("n0", 5.5, "isis", "sequence", msg="n0/1", seq=3, proposer="n0")
    events = run({"n1": [0, 1, 2]}, extra=(*stopped("n1"), late))
    assert verdicts(spark, events, isis.agreement) == [("n0/1", True)]


def test_a_message_complete_before_the_stop_and_never_delivered_is_lost(
    spark: SparkSession,
) -> None:
    # Clean stops everywhere, nothing held or outstanding, ordered long before: a loss.
    early = event("n0", 0.5, "isis", "sequence", msg="n0/1", seq=3, proposer="n0")
    events = run({"n1": [0, 1, 2]}, extra=(*stopped("n0"), *stopped("n1"), early))
    found = rows(spark, events, isis.agreement)
    assert [(r["msg"], r["unfinished"]) for r in found] == [("n0/1", False)]
    assert found[0]["detail"].endswith("not by n1")


def test_without_a_clean_stop_a_missing_delivery_stays_a_violation(spark: SparkSession) -> None:
    # Held back, but the node never stopped cleanly (no net/stop): nothing excuses it.
    held = event("n1", 5.0, "isis", "stop", held="n0/1", outstanding="")
    assert verdicts(spark, run({"n1": [0, 1, 2]}, extra=(held,)), isis.agreement) == [
        ("n0/1", False)
    ]


def test_a_message_is_unfinished_only_if_every_missing_node_is_excused(
    spark: SparkSession,
) -> None:
    events = run({"n1": [0, 1, 2], "n2": [0, 1, 2]}, extra=(*stopped("n1", held="n0/1"),))
    found = rows(spark, events, isis.agreement)
    assert [(r["msg"], r["missing"], r["unfinished"]) for r in found] == [
        ("n0/1", ["n1", "n2"], False)
    ]


def test_validity_tells_an_own_message_unfinished_at_stop_from_a_lost_one(
    spark: SparkSession,
) -> None:
    # n0 never delivered n0/0 nor n0/1; at its clean stop it still held only n0/1.
    events = run({"n0": [1, 2]}, extra=stopped("n0", held="n0/1"))
    assert sorted(verdicts(spark, events, isis.validity)) == [
        ("n0/0", False),
        ("n0/1", True),
    ]
