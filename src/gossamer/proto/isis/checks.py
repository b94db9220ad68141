"""The properties of total-order multicast, checked on what the nodes recorded (pure).

The same checks serve the simulator scenario, the real-socket and namespace tests and
the benchmark; the Spark pipeline has its own DataFrame versions of them. Every
function returns a list of human-readable violations (empty when the property holds).

- **integrity**: a node delivers a message at most once, and only a message that was
  multicast, with the data it was multicast with (compared by the payload's digest,
  ``attrs.digest`` of the ``multicast`` and ``deliver`` trace events);
- **validity**: a message multicast by a correct node is delivered by every correct node;
- **agreement**: a message delivered by a correct node is delivered by every correct node;
- **total order**: any two correct nodes deliver the messages they both delivered in the
  same relative order; and every node gives a message the same final sequence.

A *correct* node is one that neither crashed nor was removed from the view.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from gossamer.trace.schema import TraceEvent

__all__ = ["Delivery", "IsisRecord", "check_all", "record_from_trace"]

LAYER = "isis"


@dataclass(frozen=True, slots=True, kw_only=True)
class Delivery:
    """One ``deliver`` as a node recorded it; ``msg`` is ``<sender>/<msg_id>``."""

    msg: str
    seq: int
    proposer: int
    #: The payload's digest (``gossamer.proto.isis.payload_digest``).
    data: str


@dataclass(slots=True, kw_only=True)
class IsisRecord:
    """What each node multicast (``msg`` -> payload digest) and delivered (in order)."""

    multicasts: dict[str, dict[str, str]]
    deliveries: dict[str, list[Delivery]]


def record_from_trace(events: Iterable[TraceEvent]) -> IsisRecord:
    """The multicasts and deliveries of a run, from its ``layer=isis`` trace events."""
    multicasts: dict[str, dict[str, str]] = {}
    deliveries: dict[str, list[Delivery]] = {}
    for event in events:
        if event.layer != LAYER or event.msg is None:
            continue
        if event.kind == "multicast":
            multicasts.setdefault(event.node, {})[event.msg] = event.attrs.get("digest", "")
        elif event.kind == "deliver":
            deliveries.setdefault(event.node, []).append(
                Delivery(
                    msg=event.msg,
                    seq=event.seq if event.seq is not None else -1,
                    proposer=int(event.attrs.get("proposer", "0")),
                    data=event.attrs.get("digest", ""),
                )
            )
    return IsisRecord(multicasts=multicasts, deliveries=deliveries)


def check_integrity(record: IsisRecord) -> list[str]:
    sent = {msg: data for node in record.multicasts.values() for msg, data in node.items()}
    problems: list[str] = []
    for node, delivered in sorted(record.deliveries.items()):
        seen: set[str] = set()
        for d in delivered:
            if d.msg in seen:
                problems.append(f"integrity: {node} delivered {d.msg} twice")
            seen.add(d.msg)
            if d.msg not in sent:
                problems.append(f"integrity: {node} delivered {d.msg}, which nobody multicast")
            elif sent[d.msg] != d.data:
                problems.append(
                    f"integrity: {node} delivered {d.msg} with data {d.data}, "
                    f"multicast with {sent[d.msg]}"
                )
    return problems


def check_validity(record: IsisRecord, correct: Collection[str]) -> list[str]:
    problems: list[str] = []
    delivered = {node: {d.msg for d in record.deliveries.get(node, [])} for node in correct}
    for origin in sorted(correct):
        for msg in sorted(record.multicasts.get(origin, {})):
            missing = sorted(n for n in correct if msg not in delivered[n])
            if missing:
                problems.append(f"validity: {msg} from {origin} not delivered at {missing}")
    return problems


def check_agreement(record: IsisRecord, correct: Collection[str]) -> list[str]:
    problems: list[str] = []
    delivered = {node: {d.msg for d in record.deliveries.get(node, [])} for node in correct}
    union = set().union(*delivered.values()) if delivered else set()
    for msg in sorted(union):
        missing = sorted(n for n in correct if msg not in delivered[n])
        if missing:
            problems.append(f"agreement: {msg} delivered by some correct nodes, not at {missing}")
    return problems


def check_total_order(record: IsisRecord, nodes: Collection[str]) -> list[str]:
    """Same relative order of common messages for every pair of ``nodes``, and one final
    ``(seq, proposer)`` per message across all nodes that delivered it."""
    problems: list[str] = []
    finals: dict[str, tuple[int, int, str]] = {}
    for node, delivered in sorted(record.deliveries.items()):
        for d in delivered:
            first = finals.setdefault(d.msg, (d.seq, d.proposer, node))
            if first[:2] != (d.seq, d.proposer):
                problems.append(
                    f"total order: {d.msg} has final ({d.seq}, {d.proposer}) at {node} "
                    f"but ({first[0]}, {first[1]}) at {first[2]}"
                )
    ordered = sorted(nodes)
    sequences = {n: [d.msg for d in record.deliveries.get(n, [])] for n in ordered}
    for i, a in enumerate(ordered):
        for b in ordered[i + 1 :]:
            common = set(sequences[a]) & set(sequences[b])
            seq_a = [m for m in sequences[a] if m in common]
            seq_b = [m for m in sequences[b] if m in common]
            if seq_a != seq_b:
                # Lengths differ only when a node delivered a message twice (integrity).
                pairs = zip(seq_a, seq_b, strict=False)
                where = next((k for k, (x, y) in enumerate(pairs) if x != y), None)
                if where is None:
                    where = min(len(seq_a), len(seq_b))
                    detail = f"{len(seq_a)} vs {len(seq_b)} common deliveries"
                else:
                    detail = f"{seq_a[where]} vs {seq_b[where]}"
                problems.append(
                    f"total order: {a} and {b} differ at common position {where}: {detail}"
                )
    return problems


def check_all(
    record: IsisRecord, correct: Collection[str], *, all_nodes: Sequence[str] | None = None
) -> list[str]:
    """Every property. Total order is checked among ``all_nodes`` (default: the correct
    ones), agreement and validity among the correct nodes only."""
    nodes = list(all_nodes) if all_nodes is not None else list(correct)
    return (
        check_integrity(record)
        + check_validity(record, correct)
        + check_agreement(record, correct)
        + check_total_order(record, nodes)
    )


def deliveries_by_node(record: IsisRecord) -> Mapping[str, list[str]]:
    """Each node's delivered message ids, in order."""
    return {node: [d.msg for d in ds] for node, ds in record.deliveries.items()}
