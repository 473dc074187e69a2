"""The HTML report of a training step: final metrics, job details, loss and accuracy curves.

The curves are inline SVG (kfp_runtime/svg_chart.py), so the report is one self-contained file
that the KFP UI shows as it is, in its sandboxed iframe, and that opens from disk just the same.
"""

from __future__ import annotations

import html
import json
import math
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from kubetrain.kfp_runtime.svg_chart import BLUE, GREEN, RED, Series, line_chart

# Final metrics shown in the table, in this order, with their labels.
METRIC_LABELS = (
    ("test_accuracy", "test accuracy"),
    ("test_loss", "test loss"),
    ("train_loss", "train loss"),
    ("samples_per_second", "samples/s"),
    ("wall_seconds", "training wall time (s)"),
    ("world_size", "world size"),
    ("epochs", "epochs"),
    ("global_step", "steps"),
)

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5em; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.8em; text-align: left; }
th { background: #f3f3f3; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
figure.charts { display: flex; flex-wrap: wrap; gap: 0.8em; margin: 0; }
figure.charts svg { max-width: 100%; height: auto; }
"""

# The accessible name of the training report's charts (the browser tests find them by it).
CURVES_LABEL = "loss and test accuracy curves"


def format_value(value: object, spec: str = "") -> str:
    """A value for display: with `spec` (a format spec) when given; floats by magnitude otherwise."""
    if isinstance(value, bool):
        return str(value).lower()
    if spec and isinstance(value, (int, float)):
        return format(round(value) if spec == "d" else value, spec)
    if isinstance(value, float):
        if abs(value) >= 1000:
            return f"{value:,.0f}"
        return f"{value:.1f}" if abs(value) >= 10 else f"{value:.4f}"
    return str(value)


# Counted quantities: a float that holds one (a metrics.json written by JSON) shows as an integer.
_COUNTS = frozenset({"world_size", "world size", "epochs", "global_step", "steps", "workers"})


def display_value(key: str, value: object) -> object:
    """`value` as the table shows it under `key`: counts as integers, seconds to a tenth."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return value
    if key in _COUNTS and float(value).is_integer():
        return int(value)
    if isinstance(value, float) and (key.endswith(("seconds", "(s)")) or key.endswith(" s")):
        return f"{value:,.1f}"
    return value


def curves(history: Sequence[Mapping[str, Any]]) -> tuple[list[tuple[float, float]], list[tuple[float, float]]]:
    """(step, loss) points and (epoch, test accuracy) points from a metrics.json history, every one of them."""
    # Programs that tag entries record per-step losses ("step") and epoch means ("epoch"); mixing
    # the two would draw spikes that are not in the training, so the loss curve uses steps only.
    steps = [h for h in history if h.get("kind", "step") == "step"] or list(history)
    loss = [(_number(h["step"]), _number(h["loss"])) for h in steps if "step" in h and "loss" in h]
    accuracy: list[tuple[float, float]] = []
    for h in history:
        if "test_accuracy" in h:
            # The epoch as the history and the training log number it ("epoch 0: ... test accuracy"):
            # the accuracy measured at the end of epoch 0 is drawn at 0.
            x = _number(h["epoch"]) if "epoch" in h else _number(h.get("step", len(accuracy)))
            accuracy.append((x, _number(h["test_accuracy"])))
    return loss, accuracy


def workers_over_steps(
    history: Sequence[Mapping[str, Any]],
) -> tuple[list[tuple[float, float]], list[tuple[float, float]]]:
    """(step, workers there) after each change of an elastic PS job's size, and (step, workers) at
    each preemption, from its history's `workers` entries; both empty for any other job."""
    changes = [h for h in history if h.get("kind") == "workers" and "step" in h and "workers" in h]
    size = [(_number(h["step"]), _number(h["workers"])) for h in changes]
    preempted = [(_number(h["step"]), _number(h["workers"])) for h in changes if h.get("event") == "preempted"]
    return size, preempted


def _number(value: object) -> float:
    """A history value as a float; NaN for what is not a number (`null`, text), which the charts leave out and count."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return math.nan
    try:
        return float(value)
    except ValueError:
        return math.nan


def input_rows(inputs: Mapping[str, object]) -> list[tuple[str, object]]:
    """The inputs that made the run, for the report: those given, in order; lists as a command line, dicts as JSON."""
    rows: list[tuple[str, object]] = []
    for key, value in inputs.items():
        if value is None or (isinstance(value, (str, list, tuple, dict)) and not value):
            continue
        shown: object = value
        if isinstance(value, (list, tuple)):
            shown = shlex.join(str(v) for v in value)
        elif isinstance(value, dict):
            shown = json.dumps(value, sort_keys=True)
        rows.append((key, shown))
    return rows


def curves_svg(history: Sequence[Mapping[str, Any]]) -> str | None:
    """The loss curve (per step) and the test-accuracy curve (per epoch) as inline SVG; None without data."""
    loss, accuracy = curves(history)
    if not loss and not accuracy:
        return None
    left = line_chart(
        [Series("loss", loss, BLUE)], title="loss", x_label="step", y_label="training loss", x_integer=True,
        legend=False,
    )  # fmt: skip
    x_range: tuple[float, float] | None = None
    note = ""
    measured = [p for p in accuracy if math.isfinite(p[0]) and math.isfinite(p[1])]  # the chart leaves out the rest
    if len(accuracy) == 1 and measured:
        # One evaluation (a PS job evaluates at its end unless told otherwise): on an axis from
        # epoch 0, not one centred on that single epoch, and said in words.
        x_range, note = (-0.5, max(accuracy[0][0], 1.0) + 0.5), f"{accuracy[0][1]:.4f} (one evaluation)"
    low = min([0.5, *(p[1] for p in measured)])
    right = line_chart(
        [Series("test accuracy", accuracy, GREEN, markers=True)],
        title="accuracy",
        x_label="epoch",
        y_label="test accuracy",
        x_integer=True,
        y_range=(low, 1.0),
        x_range=x_range,
        legend=False,
        note=note,
    )
    size, preempted = workers_over_steps(history)
    workers = ""
    if size:
        n = len(preempted)
        workers = "\n" + line_chart(
            [Series("workers", size, BLUE, markers=True), Series("preemption", preempted, RED, markers=True)],
            title="workers",
            x_label="step (model version)",
            y_label="workers there",
            x_integer=True,
            y_range=(0.0, max(p[1] for p in size) + 1.0),
            note=f"{n} preemption{'s' if n != 1 else ''}",
        )
    return f'<figure class="charts" aria-label="{CURVES_LABEL}">\n{left}\n{right}{workers}\n</figure>'


def table_html(rows: Sequence[tuple[str, object]], *, header: tuple[str, str] | None = None) -> str:
    """A two-column HTML table; numbers are right-aligned."""
    parts = ["<table>"]
    if header:
        parts.append(f"<tr><th>{html.escape(header[0])}</th><th>{html.escape(header[1])}</th></tr>")
    for key, value in rows:
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        cls = ' class="num"' if number else ""
        parts.append(
            f"<tr><th>{html.escape(key)}</th><td{cls}>{html.escape(format_value(display_value(key, value)))}</td></tr>"
        )
    parts.append("</table>")
    return "\n".join(parts)


def page(title: str, body: str) -> str:
    """A complete, self-contained HTML page."""
    return (
        "<!DOCTYPE html>\n<html><head><meta charset='utf-8'>"
        f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head>\n"
        f"<body>\n<h1>{html.escape(title)}</h1>\n{body}\n</body></html>\n"
    )


def training_report(
    *,
    title: str,
    metrics: Mapping[str, Any],
    details: Sequence[tuple[str, object]],
    rows: Sequence[tuple[str, object]] | None = None,
    inputs: Sequence[tuple[str, object]] = (),
) -> str:
    """The report page of one training job: metrics (`rows`, else kubetrain's), the step's `inputs`, curves, details."""
    if rows is None:
        rows = [(label, metrics[key]) for key, label in METRIC_LABELS if key in metrics]
    body = ["<h2>Final metrics</h2>", table_html(rows) if rows else "<p>The program wrote no metrics.</p>"]
    if inputs:
        body += ["<h2>Inputs</h2>", table_html(inputs)]
    charts = curves_svg(metrics.get("history") or ())
    if charts is not None:
        body += ["<h2>Curves</h2>", charts]
    else:
        body.append("<p>The training program recorded no history, so there are no curves.</p>")
    body += ["<h2>Job</h2>", table_html(details)]
    return page(title, "\n".join(body))
