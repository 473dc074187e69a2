"""The reports' charts as inline SVG (kubetrain.kfp_runtime.svg_chart): well-formed, every point drawn,
round ticks, escaped text, bars from 0, and something sensible for one point or none."""

from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ET

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kubetrain.kfp_runtime import report
from kubetrain.kfp_runtime.svg_chart import (
    BLUE,
    GREEN,
    Series,
    bar_chart,
    line_chart,
    nice_ticks,
    tick_label,
    ticks_and_step,
)

SVG = "{http://www.w3.org/2000/svg}"


def parse(svg: str) -> ET.Element:
    """The chart as XML: a chart that is not well-formed fails here."""
    return ET.fromstring(svg)


def texts(root: ET.Element) -> list[str]:
    return [t.text or "" for t in root.iter(f"{SVG}text")]


def polyline_points(root: ET.Element) -> list[list[tuple[float, float]]]:
    lines = []
    for line in root.iter(f"{SVG}polyline"):
        pairs = line.attrib["points"].split()
        lines.append([(float(x), float(y)) for x, y in (p.split(",") for p in pairs)])
    return lines


def tick_texts(root: ET.Element, *, axis: str) -> list[str]:
    """The tick labels of the "x" axis (just below the plot area) or the "y" axis (just left of it)."""
    frame = next(r for r in root.iter(f"{SVG}rect") if r.attrib.get("stroke") == "#444")
    left, bottom = float(frame.attrib["x"]), float(frame.attrib["y"]) + float(frame.attrib["height"])
    if axis == "x":
        return [t.text or "" for t in root.iter(f"{SVG}text") if float(t.attrib.get("y", 0)) == bottom + 16]
    return [t.text or "" for t in root.iter(f"{SVG}text") if float(t.attrib.get("x", 0)) == left - 6]


def test_a_line_chart_is_xml_with_every_point_and_round_whole_ticks() -> None:
    points = [(float(s), 2.0 / s) for s in range(1, 46)]
    root = parse(line_chart([Series("loss", points)], title="loss", x_label="step", y_label="training loss",
                            x_integer=True))  # fmt: skip
    (line,) = polyline_points(root)
    assert len(line) == 45
    assert tick_texts(root, axis="x") == ["0", "10", "20", "30", "40"]
    assert tick_texts(root, axis="y") == ["0.0", "0.5", "1.0", "1.5", "2.0"]
    assert {"loss", "step", "training loss"} <= set(texts(root))


def test_the_loss_line_keeps_the_colour_the_browser_test_looks_for() -> None:
    history = [{"step": s, "loss": 1.0 / s} for s in range(1, 10)] + [{"epoch": 0, "test_accuracy": 0.9}]
    figure = report.curves_svg(history)
    assert figure is not None
    root = parse(figure)
    assert root.attrib["aria-label"] == report.CURVES_LABEL
    (loss,) = root.iter(f"{SVG}polyline")
    assert loss.attrib["stroke"] == BLUE == "#1f77b4"  # tests/ui_browser.py LOSS_BLUE
    assert float(loss.attrib["stroke-width"]) >= 2
    assert {c.attrib["fill"] for c in root.iter(f"{SVG}circle")} == {GREEN}  # the accuracy point


def test_text_from_user_input_is_escaped() -> None:
    evil = "<script>alert('x')</script> & \"q\""
    chart = line_chart([Series(evil, [(0.0, 1.0), (1.0, 0.5)])], title=evil, x_label=evil, y_label="y")
    bars = bar_chart([evil], [1.0], title=evil, y_label=evil, value_format=".1f")
    for svg in (chart, bars):
        assert "<script>" not in svg
        root = parse(svg)
        assert evil in texts(root)  # the text is there, as text
        assert root.attrib["aria-label"] == evil


def test_bars_start_at_zero_and_carry_their_values() -> None:
    root = parse(bar_chart(["pytorch", "ps"], [0.972, 0.969], title="t", y_label="test accuracy", value_format=".4f"))
    ticks = tick_texts(root, axis="y")
    assert ticks[0] == "0.00" and ticks[-1] == "1.00"
    bars = [r for r in root.iter(f"{SVG}rect") if r.attrib.get("fill") == BLUE]
    assert len(bars) == 2
    bottoms = {round(float(r.attrib["y"]) + float(r.attrib["height"]), 1) for r in bars}
    frame = next(r for r in root.iter(f"{SVG}rect") if r.attrib.get("stroke") == "#444")
    assert bottoms == {round(float(frame.attrib["y"]) + float(frame.attrib["height"]), 1)}  # the axis' 0
    heights = [float(r.attrib["height"]) for r in bars]
    assert heights[0] / heights[1] == pytest.approx(0.972 / 0.969, rel=0.01)  # not a gap from a raised axis
    assert {"0.9720", "0.9690", "pytorch", "ps"} <= set(texts(root))
    with pytest.raises(ValueError, match="one label per value"):
        bar_chart(["a"], [1.0, 2.0], title="t", y_label="y", value_format=".1f")


def test_one_point_is_marked_on_a_widened_axis() -> None:
    root = parse(line_chart([Series("loss", [(450.0, 0.2)])], title="t", x_label="step", y_label="loss",
                            x_integer=True))  # fmt: skip
    assert polyline_points(root) == []
    (dot,) = root.iter(f"{SVG}circle")
    assert all(math.isfinite(float(dot.attrib[k])) for k in ("cx", "cy"))
    assert tick_texts(root, axis="x") == ["449", "450", "451"]
    assert len(tick_texts(root, axis="y")) >= 3


def test_no_points_draw_empty_axes_and_no_history_no_figure() -> None:
    root = parse(line_chart([Series("loss", [])], title="t", x_label="x", y_label="y"))
    assert "no data" in texts(root)
    assert polyline_points(root) == [] and list(root.iter(f"{SVG}circle")) == []
    assert "no data" in texts(parse(bar_chart([], [], title="t", y_label="y", value_format=".1f")))
    assert report.curves_svg([]) is None
    page = report.training_report(title="t", metrics={"history": []}, details=[])
    assert "no curves" in page and "<svg" not in page


@given(
    st.floats(min_value=-1e6, max_value=1e6, allow_nan=False),
    st.floats(min_value=1e-3, max_value=1e6, allow_nan=False),
    st.booleans(),
)
def test_ticks_are_round_multiples_inside_the_range(low: float, span: float, integer: bool) -> None:
    high = low + span
    ticks, step = ticks_and_step(low, high, integer=integer)
    mantissa = step / 10 ** math.floor(math.log10(step) + 1e-9)
    assert round(mantissa, 6) in (1.0, 2.0, 2.5, 5.0)
    # Inside the range up to float error on the scale of a step (a tick 1e-9 of a step outside is on the edge).
    slack = 1e-9 * step + 1e-12
    assert all(low - slack <= t <= high + slack for t in ticks)
    assert all(abs(t / step - round(t / step)) < 1e-6 for t in ticks)
    assert len(ticks) <= 7
    if integer:
        assert step >= 1 and all(float(t).is_integer() for t in ticks)
    else:
        assert len(ticks) >= 2


def test_tick_labels_show_the_decimals_their_step_needs() -> None:
    assert nice_ticks(0.0, 1.0866) == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert [tick_label(t, 0.25) for t in (0.0, 0.5)] == ["0.00", "0.50"]
    assert tick_label(12000.0, 2000.0) == "12,000"
    assert tick_label(-0.0, 0.1) == "0.0"
    assert nice_ticks(0.3, 0.31) == [0.3, 0.302, 0.304, 0.306, 0.308, 0.31]
    with pytest.raises(ValueError, match="must be finite and not empty"):
        nice_ticks(1.0, 1.0)


def test_non_finite_values_are_left_out_and_said_not_a_traceback() -> None:
    """Issue 49 item 3: a history of NaN losses ended the step in `nice_ticks: the range [nan, nan] must be finite`."""
    nan, inf = float("nan"), float("inf")
    history = [
        {"step": 1, "epoch": 0, "loss": 2.3},
        {"step": 2, "epoch": 0, "loss": nan},
        {"step": 3, "epoch": 0, "loss": inf, "test_accuracy": nan},
        {"step": 4, "epoch": 0, "loss": None},  # how some writers put NaN into JSON
    ]
    page = report.training_report(title="t", metrics={"test_loss": nan, "history": history}, details=[])
    figure = page[page.index("<figure") : page.index("</figure>")]
    loss_chart, accuracy_chart = (parse("<svg" + svg[: svg.index("</svg>") + 6]) for svg in figure.split("<svg")[1:])
    assert "3 non-finite points not drawn" in texts(loss_chart)
    (dot,) = loss_chart.iter(f"{SVG}circle")  # the one finite loss, marked
    assert all(math.isfinite(float(dot.attrib[k])) for k in ("cx", "cy"))
    assert "no data" in texts(accuracy_chart) and "1 non-finite point not drawn" in texts(accuracy_chart)
    # Every point not finite: empty axes, and why.
    assert "1 non-finite point not drawn" in texts(parse(line_chart([Series("l", [(1.0, nan)])], title="t",
                                                                     x_label="x", y_label="y")))  # fmt: skip
    bars = parse(bar_chart(["ddp", "ps"], [nan, 0.5], title="t", y_label="loss", value_format=".4f"))
    assert {"nan", "0.5000"} <= set(texts(bars))


def test_a_loss_on_its_way_to_diverging_still_draws() -> None:
    root = parse(line_chart([Series("loss", [(1.0, 0.5), (2.0, 1.75e308)])], title="t", x_label="x", y_label="y"))
    assert len(polyline_points(root)[0]) == 2


def test_an_elastic_ps_jobs_report_draws_its_workers_over_its_steps_and_marks_each_preemption() -> None:
    history = [
        {"kind": "workers", "step": 0, "workers": 1, "event": "joined"},
        {"kind": "workers", "step": 0, "workers": 2, "event": "joined"},
        {"kind": "step", "step": 40, "epoch": 0, "loss": 0.9},
        {"kind": "workers", "step": 55, "workers": 1, "event": "preempted"},
        {"kind": "step", "step": 80, "epoch": 1, "loss": 0.4},
        {"kind": "workers", "step": 90, "workers": 2, "event": "joined"},
        {"kind": "eval", "step": 120, "epoch": 1, "test_accuracy": 0.96},
    ]
    assert report.workers_over_steps(history) == ([(0, 1), (0, 2), (55, 1), (90, 2)], [(55, 1)])
    # The loss curve is the steps' alone: the size entries add no points to it.
    assert report.curves(history)[0] == [(40.0, 0.9), (80.0, 0.4)]
    page = report.training_report(title="t", metrics={"history": history}, details=[])
    charts = [ET.fromstring(svg) for svg in re.findall(r"<svg.*?</svg>", page, flags=re.S)]
    [workers] = [c for c in charts if "workers there" in texts(c)]
    assert "1 preemption" in texts(workers)
    red = [c for c in workers.iter(f"{SVG}circle") if c.attrib["fill"] == "#d62728"]
    assert len(red) == 1, "one marker per preemption"
    # A job without size entries (DDP, ChainerMN, a fixed PS job's history of old) gets no such chart.
    assert "workers there" not in report.training_report(title="t", metrics={"history": history[2:3]}, details=[])
