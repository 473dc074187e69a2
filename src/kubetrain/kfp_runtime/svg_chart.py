"""Line and bar charts as inline SVG text, in pure Python, for the HTML reports.

The launcher image draws two small pages of charts per run; a plotting library for that cost
about 95 MB of the image (matplotlib with fontTools and Pillow) and half a second of import.
An SVG written here needs neither, stays one self-contained HTML file (the KFP UI shows it in a
sandboxed iframe, with no external resources) and scales with the page.

Every text that reaches the SVG is escaped (framework names and titles may come from user input).
Axes get round ticks (1, 2, 2.5 or 5 times a power of ten) inside a domain padded around the
data, whole-number ticks on counted axes (steps, epochs), and bars always start at 0.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from dataclasses import dataclass

# matplotlib's default cycle ("tab10"), so the charts keep the colours they had.
TAB10 = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")
BLUE, GREEN, RED = TAB10[0], TAB10[2], TAB10[3]

WIDTH, HEIGHT = 480, 300
# Room for tick labels and axis labels around the plot area: left, right, top, bottom.
MARGIN = (70, 16, 30, 46)
FONT = 'font-family="system-ui, sans-serif" font-size="12" fill="#222"'
_CHAR_PX = 7.0  # a 12 px sans-serif character's width, about: for the legend's box only

Point = tuple[float, float]


@dataclass(frozen=True)
class Series:
    """One line of a line chart: its legend label, points (x, y), colour, and whether each point is marked."""

    label: str
    points: Sequence[Point]
    color: str = BLUE
    markers: bool = False


@dataclass(frozen=True)
class _Frame:
    """The plot area in pixels and the data domain it shows."""

    left: float
    top: float
    width: float
    height: float
    x: tuple[float, float]
    y: tuple[float, float]

    def px(self, point: Point) -> tuple[float, float]:
        """Where a data point lies in the SVG's pixels."""
        (x0, x1), (y0, y1) = self.x, self.y
        return (
            self.left + (point[0] - x0) / (x1 - x0) * self.width,
            self.top + (y1 - point[1]) / (y1 - y0) * self.height,
        )


def esc(text: object) -> str:
    """`text` safe inside an SVG/HTML element or a quoted attribute."""
    return html.escape(str(text), quote=True)


def _step(span: float, target: int, integer: bool) -> float:
    """The smallest round step (1, 2, 2.5 or 5 times a power of ten) that splits `span` into at most `target` parts."""
    raw = span / target
    magnitude = 10.0 ** math.floor(math.log10(raw))
    for factor in (1.0, 2.0, 2.5, 5.0, 10.0):
        step = factor * magnitude
        if step >= raw * (1 - 1e-9) and (not integer or step.is_integer()):
            return step
    return 10.0 * magnitude  # unreachable: 10 times the magnitude is always >= raw


def ticks_and_step(low: float, high: float, *, target: int = 5, integer: bool = False) -> tuple[list[float], float]:
    """Round tick values inside [low, high] and their step (1, 2, 2.5 or 5 times a power of ten).

    With `integer`, the step is a whole number of at least 1 (counted quantities: steps, epochs).
    """
    if not (math.isfinite(low) and math.isfinite(high)) or high <= low:
        raise ValueError(f"nice_ticks: the range [{low}, {high}] must be finite and not empty")
    step = _step(high - low, target, integer)
    if integer:
        step = max(step, 1.0)
    first, last = math.ceil(low / step - 1e-9), math.floor(high / step + 1e-9)
    # Multiples of the step from integers, rounded, so that 0.1 * 3 shows as 0.3, not 0.30000000000000004.
    return [round(k * step, 12) for k in range(first, last + 1)], step


def nice_ticks(low: float, high: float, *, target: int = 5, integer: bool = False) -> list[float]:
    """Round tick values inside [low, high]: multiples of one step of 1, 2, 2.5 or 5 times a power of ten."""
    return ticks_and_step(low, high, target=target, integer=integer)[0]


def tick_label(value: float, step: float) -> str:
    """A tick's text with as many decimals as its step needs; thousands separated."""
    decimals = max(0, -math.floor(math.log10(step) + 1e-9))
    if not round(step / 10.0 ** math.floor(math.log10(step) + 1e-9), 6).is_integer():
        decimals += 1  # a step of 2.5, 0.25, ...
    text = f"{value:,.{decimals}f}"
    return text[1:] if text.startswith("-") and float(text.replace(",", "")) == 0 else text


def domain(values: Sequence[float], *, integer: bool = False, pad: float = 0.05) -> tuple[float, float]:
    """The axis range around `values`: padded on both sides; a range of one value widened around it."""
    if not values:
        return (0.0, 1.0)
    low, high = min(values), max(values)
    if high == low:
        half = 1.0 if integer or low == 0 else abs(low) * 0.1
        return (low - half, high + half)
    margin = (high - low) * pad
    padded = (low - margin, high + margin)
    # A loss on its way to diverging (1e308) leaves no room for padding: the bare range then.
    return padded if math.isfinite(padded[0]) and math.isfinite(padded[1]) else (low, high)


def _finite(pair: tuple[float, float]) -> bool:
    return math.isfinite(pair[0]) and math.isfinite(pair[1])


def _frame(x: tuple[float, float], y: tuple[float, float]) -> _Frame:
    left, right, top, bottom = MARGIN
    return _Frame(left, top, WIDTH - left - right, HEIGHT - top - bottom, x, y)


def _open(title: str, label: str) -> list[str]:
    return [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" '
        f'role="img" aria-label="{esc(label)}" {FONT}>',
        f"<title>{esc(label)}</title>",
        f'<rect width="{WIDTH}" height="{HEIGHT}" fill="#fff"/>',
        f'<text x="{WIDTH / 2:.1f}" y="18" text-anchor="middle" font-size="14">{esc(title)}</text>',
    ]


def _axes(frame: _Frame, *, x_label: str, y_label: str, x_integer: bool, x_ticks: bool = True) -> list[str]:
    """The grid, the frame, the ticks with their labels and the axis labels."""
    out: list[str] = []
    right, bottom = frame.left + frame.width, frame.top + frame.height
    y_values, y_step = ticks_and_step(*frame.y)
    for value in y_values:
        _, py = frame.px((frame.x[0], value))
        out.append(f'<line x1="{frame.left:.1f}" y1="{py:.1f}" x2="{right:.1f}" y2="{py:.1f}" stroke="#e3e3e3"/>')
        out.append(
            f'<text x="{frame.left - 6:.1f}" y="{py + 4:.1f}" text-anchor="end">{tick_label(value, y_step)}</text>'
        )
    if x_ticks:
        x_values, x_step = ticks_and_step(*frame.x, integer=x_integer)
        for value in x_values:
            px, _ = frame.px((value, frame.y[0]))
            out.append(f'<line x1="{px:.1f}" y1="{frame.top:.1f}" x2="{px:.1f}" y2="{bottom:.1f}" stroke="#e3e3e3"/>')
            out.append(
                f'<text x="{px:.1f}" y="{bottom + 16:.1f}" text-anchor="middle">{tick_label(value, x_step)}</text>'
            )
    out.append(f'<rect x="{frame.left:.1f}" y="{frame.top:.1f}" width="{frame.width:.1f}" height="{frame.height:.1f}" '
               'fill="none" stroke="#444"/>')  # fmt: skip
    out.append(
        f'<text x="{frame.left + frame.width / 2:.1f}" y="{HEIGHT - 8}" text-anchor="middle">{esc(x_label)}</text>'
    )
    middle = frame.top + frame.height / 2
    out.append(f'<text transform="translate(16 {middle:.1f}) rotate(-90)" text-anchor="middle">{esc(y_label)}</text>')
    return out


def _legend(frame: _Frame, series: Sequence[Series]) -> list[str]:
    """Each series' colour and label in a box at the plot area's right, top or bottom: where fewer points lie."""
    width, height = 34 + _CHAR_PX * max(len(s.label) for s in series), 8 + 18 * len(series)
    x = frame.left + frame.width - width - 6
    pixels = [frame.px(p) for s in series for p in s.points]

    def covered(y: float) -> int:
        return sum(1 for px, py in pixels if x <= px <= x + width and y <= py <= y + height)

    top, bottom = frame.top + 6, frame.top + frame.height - height - 6
    y = bottom if covered(bottom) < covered(top) else top  # a rising curve: its legend goes below
    out = [f'<rect x="{x:.1f}" y="{y:.1f}" width="{width:.1f}" height="{height}" fill="#fff" '
           'fill-opacity="0.85" stroke="#ccc"/>']  # fmt: skip
    for i, s in enumerate(series):
        row = y + 13 + 18 * i
        out.append(f'<line x1="{x + 6:.1f}" y1="{row:.1f}" x2="{x + 26:.1f}" y2="{row:.1f}" stroke="{s.color}" '
                   'stroke-width="2.5"/>')  # fmt: skip
        out.append(f'<text x="{x + 30:.1f}" y="{row + 4:.1f}">{esc(s.label)}</text>')
    return out


def line_chart(
    series: Sequence[Series],
    *,
    title: str,
    x_label: str,
    y_label: str,
    x_integer: bool = False,
    x_range: tuple[float, float] | None = None,
    y_range: tuple[float, float] | None = None,
    legend: bool = True,
    note: str = "",
) -> str:
    """An SVG line chart of `series`: every point drawn, round ticks, axis labels, a legend when `legend`.

    `x_range`/`y_range` fix an axis (else it is fitted to the points); `x_integer` keeps the x
    ticks whole; `note` is written beside the last point of the first series. Without points it
    draws the empty axes with "no data".
    """
    # A diverged run's losses (NaN, inf) cannot be placed on an axis: they are left out, and said so.
    given = len([p for s in series for p in s.points])
    series = [Series(s.label, [p for p in s.points if _finite(p)], s.color, s.markers) for s in series]
    points = [p for s in series for p in s.points]
    if given > len(points):
        left_out = f"{given - len(points)} non-finite point{'s' if given - len(points) != 1 else ''} not drawn"
        note = f"{note}; {left_out}" if note else left_out
    x = x_range if x_range is not None and _finite(x_range) else domain([p[0] for p in points], integer=x_integer)
    y = y_range if y_range is not None and _finite(y_range) else domain([p[1] for p in points])
    frame = _frame(x, y)
    out = _open(title, title)
    out += _axes(frame, x_label=x_label, y_label=y_label, x_integer=x_integer)
    for s in series:
        pixels = [frame.px(p) for p in s.points]
        if len(pixels) > 1:
            coords = " ".join(f"{px:.1f},{py:.1f}" for px, py in pixels)
            out.append(f'<polyline points="{coords}" fill="none" stroke="{s.color}" stroke-width="2.5" '
                       'stroke-linejoin="round" stroke-linecap="round"/>')  # fmt: skip
        if s.markers or len(pixels) == 1:  # a line of one point draws nothing: mark it
            out += [f'<circle cx="{px:.1f}" cy="{py:.1f}" r="4" fill="{s.color}"/>' for px, py in pixels]
    if not points:
        out.append(f'<text x="{frame.left + frame.width / 2:.1f}" y="{frame.top + frame.height / 2:.1f}" '
                   'text-anchor="middle" fill="#888">no data</text>')  # fmt: skip
    if note and series and series[0].points:
        px, py = frame.px(series[0].points[-1])
        out.append(f'<text x="{px - 8:.1f}" y="{py + 18:.1f}" text-anchor="end">{esc(note)}</text>')
    elif note:
        out.append(f'<text x="{frame.left + frame.width / 2:.1f}" y="{frame.top + 16:.1f}" '
                   f'text-anchor="middle">{esc(note)}</text>')  # fmt: skip
    labelled = [s for s in series if s.points and s.label]
    if legend and labelled:
        out += _legend(frame, labelled)
    out.append("</svg>")
    return "\n".join(out)


def bar_chart(
    labels: Sequence[str],
    values: Sequence[float],
    *,
    title: str,
    y_label: str,
    value_format: str,
    color: str = BLUE,
) -> str:
    """An SVG bar chart: one bar per label from 0, each bar's value written on it (`value_format`, e.g. ".4f")."""
    if len(labels) != len(values):
        raise ValueError(f"bar_chart: {len(labels)} labels for {len(values)} values; give one label per value")
    # A value that is not finite (a diverged run's loss) gets no bar, only its text.
    low = min([0.0, *(v for v in values if math.isfinite(v))])
    high = max([0.0, *(v for v in values if math.isfinite(v))])
    span = (high - low) or 1.0
    # From 0 (a 0.003 difference must not look like a gap), with room above for the written values.
    frame = _frame((0.0, float(max(len(values), 1))), (low - (0.1 * span if low < 0 else 0), high + 0.12 * span))
    out = _open(title, title)
    out += _axes(frame, x_label="", y_label=y_label, x_integer=False, x_ticks=False)
    slot = frame.width / max(len(values), 1)
    bottom = frame.top + frame.height
    for i, (label, value) in enumerate(zip(labels, values, strict=True)):
        _, zero = frame.px((0.0, 0.0))
        _, top = frame.px((0.0, value if math.isfinite(value) else 0.0))
        x, bar = frame.left + slot * (i + 0.2), slot * 0.6
        height = abs(zero - top)
        out.append(
            f'<rect x="{x:.1f}" y="{min(zero, top):.1f}" width="{bar:.1f}" height="{height:.1f}" fill="{color}"/>'
        )
        centre = frame.left + slot * (i + 0.5)
        text_y = top - 5 if value >= 0 else top + 15
        out.append(
            f'<text x="{centre:.1f}" y="{text_y:.1f}" text-anchor="middle">{esc(format(value, value_format))}</text>'
        )
        out.append(f'<text x="{centre:.1f}" y="{bottom + 16:.1f}" text-anchor="middle">{esc(label)}</text>')
    if not values:
        out.append(f'<text x="{frame.left + frame.width / 2:.1f}" y="{frame.top + frame.height / 2:.1f}" '
                   'text-anchor="middle" fill="#888">no data</text>')  # fmt: skip
    out.append("</svg>")
    return "\n".join(out)
