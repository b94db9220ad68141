"""How the cluster benchmarks time one operation after another, and how they print it.

``bench.cluster``, ``bench.gateway_cluster`` and ``bench.queues_cluster`` measure a
latency the same way (one operation at a time, each timed from its call to its
completion, in µs) and routed SENDs the same way (that latency, then a rate with the
sends pipelined in windows); their tables compare a figure with its baseline as
``p50 / p99`` latencies or whole rates, and a ratio. This module is that one way.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any


def percentile(values: list[float], q: float) -> float:
    """The value below which a fraction ``q`` of ``values`` lies (nearest rank, no
    interpolation)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def p50_p99(values: list[float]) -> str:
    """``median / p99``, whole numbers with thousands separators."""
    return f"{statistics.median(values):,.0f} / {percentile(values, 0.99):,.0f}"


def ratio(measured: float, baseline: float) -> str:
    """``measured / baseline`` as ``1.23x``."""
    return f"{measured / baseline:.2f}x"


def latency_row(
    figure: str, baseline: list[float], measured: list[float], *beside: str
) -> list[object]:
    """A table row comparing latencies: ``figure``, the baseline's and the measured
    ``p50 / p99``, the ``beside`` columns, and the ratio of the medians."""
    return [figure, p50_p99(baseline), p50_p99(measured), *beside,
            ratio(statistics.median(measured), statistics.median(baseline))]


def rate_row(figure: str, baseline: float, measured: float, *beside: str) -> list[object]:
    """A table row comparing rates: ``figure``, both rates (whole numbers), the ``beside``
    columns, and their ratio."""
    return [figure, f"{baseline:,.0f}", f"{measured:,.0f}", *beside, ratio(measured, baseline)]


async def one_at_a_time(operation: Callable[[int], Awaitable[Any]], count: int) -> list[float]:
    """The latencies in µs of ``operation(0)`` ... ``operation(count - 1)``, awaited one
    after the other."""
    latencies = []
    for i in range(count):
        start = time.perf_counter()
        await operation(i)
        latencies.append((time.perf_counter() - start) * 1e6)
    return latencies


async def routed_sends(
    sender: Any, receiver: Any, count: int, *, target: dict[str, Any], window: int,
    timeout: float = 30.0,
) -> tuple[list[float], float]:
    """Between two gateway clients, SENDs to ``target`` (which only ``receiver`` matches):
    the latencies in µs of ``count // 10`` one at a time, each until ``receiver`` has it;
    then SENDs per second of ``count`` pipelined in windows of ``window`` (the sender's
    node holds a bounded number of deliveries for another node and refuses more, so the
    whole run is not sent at once), until the receiver has them all."""

    async def send(i: int) -> None:
        await sender.send(i, to=target)
        await receiver.receive(timeout=timeout)

    latencies = await one_at_a_time(send, count // 10)
    start = time.perf_counter()
    for base in range(0, count, window):
        for i in range(base, min(count, base + window)):
            await sender.send(i, to=target)
        for _ in range(base, min(count, base + window)):
            await receiver.receive(timeout=timeout)
    return latencies, count / (time.perf_counter() - start)
