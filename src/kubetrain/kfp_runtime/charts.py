"""The comparison page's charts: the runs' loss and accuracy curves on shared axes, and bars.

Each run's history comes from the metrics.json its training step copied into its Model artifact.
Runs take different numbers of steps (world sizes and batch sizes differ), so the loss curves are
drawn against the fraction of training done; accuracy is drawn against epochs.
"""

from __future__ import annotations

import io
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from kubetrain.kfp_runtime.artifacts import METRICS_JSON, ArtifactLike
from kubetrain.kfp_runtime.report import FAST_PNG, curves, integer_ticks

History = Sequence[Mapping[str, Any]]


def history_of(model: ArtifactLike) -> list[Mapping[str, Any]]:
    """The history in the Model artifact's metrics.json; empty when there is none or it is unreadable."""
    path = Path(model.path) / METRICS_JSON
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    history = data.get("history") if isinstance(data, dict) else None
    if not isinstance(history, list):
        return []
    return [h for h in history if isinstance(h, dict)]


def comparison_png(runs: Sequence[tuple[str, History, Mapping[str, Any]]]) -> bytes:
    """One PNG: loss and accuracy curves of every run (shared axes), bars of accuracy and samples/s.

    `runs` holds (framework, history, logged metrics) per run.
    """
    buf = io.BytesIO()
    comparison_figure(runs).savefig(buf, format="png", pil_kwargs=FAST_PNG)
    return buf.getvalue()


def comparison_figure(runs: Sequence[tuple[str, History, Mapping[str, Any]]]) -> Any:
    """The matplotlib Figure behind :func:`comparison_png` (loss, accuracy, accuracy bars, speed bars)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 7), dpi=100)
    FigureCanvasAgg(fig)
    (loss_ax, acc_ax), (acc_bar, speed_bar) = fig.subplots(2, 2)
    for framework, history, _ in runs:
        loss, accuracy = curves(history)
        if loss:
            last = max(p[0] for p in loss) or 1.0
            loss_ax.plot([p[0] / last for p in loss], [p[1] for p in loss], label=framework)
        if accuracy:
            acc_ax.plot([p[0] for p in accuracy], [p[1] for p in accuracy], marker="o", label=framework)
    loss_ax.set(xlabel="fraction of training", ylabel="training loss", title="loss")
    acc_ax.set(xlabel="epoch", ylabel="test accuracy", title="accuracy")
    integer_ticks(acc_ax)
    for ax in (loss_ax, acc_ax):
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend()
    names = [framework for framework, _, _ in runs]
    accuracies = [float(m.get("test_accuracy", 0.0)) for _, _, m in runs]
    speeds = [float(m.get("samples_per_second", 0.0)) for _, _, m in runs]
    # From 0: an axis starting near the values made a 0.003 difference look like a gap; the
    # values themselves are written on the bars.
    bars = acc_bar.bar(names, accuracies, color="tab:green")
    acc_bar.bar_label(bars, fmt="%.4f")
    acc_bar.set(ylabel="test accuracy", title="final test accuracy", ylim=(0.0, 1.1))
    speed_bars = speed_bar.bar(names, speeds, color="tab:blue")
    speed_bar.bar_label(speed_bars, fmt="%.0f")
    speed_bar.set(ylabel="samples/s", title="training throughput")
    fig.subplots_adjust(left=0.07, right=0.98, bottom=0.07, top=0.95, wspace=0.22, hspace=0.3)  # see report.py
    return fig
