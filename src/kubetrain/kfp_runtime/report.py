"""The HTML report of a training step: final metrics, job details, loss and accuracy curves.

The curves are drawn with matplotlib's Agg canvas (no display, no pyplot global state) and
embedded as an inline base64 PNG, so the report is one self-contained file that the KFP UI
shows as it is and that opens from disk just the same.
"""

from __future__ import annotations

import base64
import html
import io
import json
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

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
img { max-width: 100%; }
"""


# The report is written once and read by the UI: zlib's fastest level saves a third of the
# encoding time for a PNG about 15% larger (tens of kB).
FAST_PNG = {"compress_level": 1}


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
    loss = [(float(h["step"]), float(h["loss"])) for h in steps if "step" in h and "loss" in h]
    accuracy: list[tuple[float, float]] = []
    for h in history:
        if "test_accuracy" in h:
            # The epoch as the history and the training log number it ("epoch 0: ... test accuracy"):
            # the accuracy measured at the end of epoch 0 is drawn at 0.
            x = float(h["epoch"]) if "epoch" in h else float(h.get("step", len(accuracy)))
            accuracy.append((x, float(h["test_accuracy"])))
    return loss, accuracy


def integer_ticks(axes: Any) -> None:
    """Whole-number ticks on the x axis (epochs and steps are counted, never fractional)."""
    from matplotlib.ticker import MaxNLocator

    axes.xaxis.set_major_locator(MaxNLocator(integer=True))


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


def load_plotting() -> None:
    """Import the plotting library now (about half a second), so that a report later does not wait for it."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: F401
    from matplotlib.figure import Figure  # noqa: F401


def curves_png(history: Sequence[Mapping[str, Any]], *, title: str) -> bytes | None:
    """A PNG with the loss curve (left) and the test-accuracy curve (right); None without data."""
    fig = curves_figure(history, title=title)
    if fig is None:
        return None
    buf = io.BytesIO()
    fig.savefig(buf, format="png", pil_kwargs=FAST_PNG)
    return buf.getvalue()


def curves_figure(history: Sequence[Mapping[str, Any]], *, title: str) -> Any:
    """The matplotlib Figure behind :func:`curves_png` (a loss and an accuracy axes); None without data."""
    loss, accuracy = curves(history)
    if not loss and not accuracy:
        return None
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 3.6), dpi=100)
    FigureCanvasAgg(fig)
    left, right = fig.subplots(1, 2)
    if loss:
        left.plot([p[0] for p in loss], [p[1] for p in loss], color="tab:blue", linewidth=2.5)
    left.set_xlabel("step")
    integer_ticks(left)
    left.set_ylabel("training loss")
    left.set_title("loss")
    left.grid(alpha=0.3)
    if accuracy:
        right.plot([p[0] for p in accuracy], [p[1] for p in accuracy], marker="o", color="tab:green", linewidth=2.5)
        right.set_ylim(min([0.5, *(p[1] for p in accuracy)]), 1.0)
        if len(accuracy) == 1:
            # One evaluation (a PS job evaluates at its end unless told otherwise): on an axis from 0,
            # not one matplotlib centres on that single epoch.
            right.set_xlim(-0.5, max(accuracy[0][0], 1.0) + 0.5)
            right.annotate(f"{accuracy[0][1]:.4f} (one evaluation)", accuracy[0], textcoords="offset points",
                           xytext=(-8, -14), ha="right")  # fmt: skip
    right.set_xlabel("epoch")
    integer_ticks(right)
    right.set_ylabel("test accuracy")
    right.set_title("accuracy")
    right.grid(alpha=0.3)
    fig.suptitle(title)
    # Fixed margins, not tight_layout(): that draws the whole figure once more just to measure its
    # labels, most of a second of the step's time after the job has ended.
    fig.subplots_adjust(left=0.07, right=0.98, bottom=0.14, top=0.86, wspace=0.25)
    return fig


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
    png = curves_png(metrics.get("history") or (), title=title)
    if png is not None:
        data = base64.b64encode(png).decode("ascii")
        body += ["<h2>Curves</h2>", f'<img alt="loss and test accuracy curves" src="data:image/png;base64,{data}">']
    else:
        body.append("<p>The training program recorded no history, so there are no curves.</p>")
    body += ["<h2>Job</h2>", table_html(details)]
    return page(title, "\n".join(body))
