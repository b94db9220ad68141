"""SVG charts: well-formed, deterministic, and drawing what they are given."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from gossamer.analysis import svg

NS = "{http://www.w3.org/2000/svg}"


def parse(text: str) -> ET.Element:
    return ET.fromstring(text)


def test_nice_ticks_are_round_and_cover_the_range() -> None:
    assert svg.nice_ticks(0, 1) == [0, 0.2, 0.4, 0.6, 0.8, 1.0]
    assert svg.nice_ticks(3, 97) == [0, 20, 40, 60, 80, 100]
    assert svg.nice_ticks(5, 5)[0] <= 5 <= svg.nice_ticks(5, 5)[-1]
    assert svg.nice_ticks(float("nan"), 1) == [0.0]


def test_line_chart_draws_one_polyline_per_series_and_marks() -> None:
    text = svg.line_chart(
        [
            svg.Series(name="a", xs=[0, 1, 2], ys=[0, 1, 4]),
            svg.Series(name="b", xs=[0, 2], ys=[1, 1]),
        ],
        title="t <1>",
        x_label="x",
        y_label="y",
        step=True,
        markers=[(1.0, "crash n1")],
    )
    root = parse(text)
    lines = [p for p in root.iter(f"{NS}polyline") if p.get("stroke") != "#333"]
    assert len(lines) == 2
    # A step chart holds each value: 3 points become 5.
    assert len(lines[0].get("points", "").split()) == 5
    assert "crash n1" in text and "t &lt;1&gt;" in text
    assert text == svg.line_chart(
        [
            svg.Series(name="a", xs=[0, 1, 2], ys=[0, 1, 4]),
            svg.Series(name="b", xs=[0, 2], ys=[1, 1]),
        ],
        title="t <1>",
        x_label="x",
        y_label="y",
        step=True,
        markers=[(1.0, "crash n1")],
    )
    assert "no data" in svg.line_chart([], title="e", x_label="x", y_label="y")


def test_bar_chart_and_heatmap() -> None:
    root = parse(svg.bar_chart(["1", "2", "3"], [5, 0, 2], title="h", x_label="x", y_label="y"))
    bars = [r for r in root.iter(f"{NS}rect") if r.get("fill") == svg.PALETTE[0]]
    assert len(bars) == 3
    heights = [float(r.get("height", "0")) for r in bars]
    assert heights[0] > heights[2] > heights[1] == 0
    grid = parse(svg.heatmap(["a", "b"], [[0, 3], [3, 0]], title="m"))
    fills = [r.get("fill") for r in grid.iter(f"{NS}rect")][1:]
    assert fills[0] == "#ddd" and fills[1].startswith("rgb(213,")


def test_a_heatmap_of_few_nodes_is_wide_enough_for_its_title() -> None:
    title = "ISIS delivery order: disagreements between nodes (green = same order)"
    small = parse(svg.heatmap(["a", "b"], [[0, 0], [0, 0]], title=title))
    assert float(small.get("width", "0")) >= 7 * len(title)
