"""The comparison page's charts (inline SVG): the runs' loss and accuracy curves on shared axes, and bars.

Each run's history comes from the metrics.json its training step copied into its Model artifact.
Runs take different numbers of steps (world sizes and batch sizes differ), so the loss curves are
drawn against the fraction of training done; accuracy is drawn against epochs.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from kubetrain.kfp_runtime.artifacts import METRICS_JSON, ArtifactLike
from kubetrain.kfp_runtime.report import curves
from kubetrain.kfp_runtime.svg_chart import BLUE, GREEN, TAB10, Series, bar_chart, line_chart

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


# The accessible name of the comparison's charts.
COMPARISON_LABEL = "loss and accuracy curves, accuracy and samples/s"


def comparison_svg(runs: Sequence[tuple[str, History, Mapping[str, Any]]]) -> str:
    """Inline SVG: loss and accuracy curves of every run (shared axes), bars of accuracy and samples/s.

    `runs` holds (framework, history, logged metrics) per run.
    """
    losses: list[Series] = []
    accuracies: list[Series] = []
    for i, (framework, history, _) in enumerate(runs):
        color = TAB10[i % len(TAB10)]
        loss, accuracy = curves(history)
        if loss:
            last = max(p[0] for p in loss) or 1.0
            losses.append(Series(framework, [(x / last, y) for x, y in loss], color))
        if accuracy:
            accuracies.append(Series(framework, accuracy, color, markers=True))
    names = [framework for framework, _, _ in runs]
    charts = [
        line_chart(losses, title="loss", x_label="fraction of training", y_label="training loss"),
        line_chart(accuracies, title="accuracy", x_label="epoch", y_label="test accuracy", x_integer=True),
        # From 0 (bar_chart's bars always are): an axis starting near the values made a 0.003
        # difference look like a gap; the values themselves are written on the bars.
        bar_chart(
            names,
            [float(m.get("test_accuracy", 0.0)) for _, _, m in runs],
            title="final test accuracy",
            y_label="test accuracy",
            value_format=".4f",
            color=GREEN,
        ),
        bar_chart(
            names,
            [float(m.get("samples_per_second", 0.0)) for _, _, m in runs],
            title="training throughput",
            y_label="samples/s",
            value_format=",.0f",
            color=BLUE,
        ),
    ]
    return f'<figure class="charts" aria-label="{COMPARISON_LABEL}">\n' + "\n".join(charts) + "\n</figure>"
