"""What a training step leaves behind (kubetrain.kfp_runtime: artifacts, report, summary), without KFP
running: the metrics it reads, the Metrics artifact, and the HTML report and comparison pages.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from kubetrain.errors import InvalidInputError, TrainingError
from kubetrain.kfp_runtime import artifacts, report, summary
from tests.unit.fake_kfp_artifact import FakeArtifact

METRICS: dict[str, Any] = {
    "test_accuracy": 0.97,
    "test_loss": 0.1,
    "train_loss": 0.08,
    "samples_per_second": 12345.6,
    "world_size": 2,
    "wall_seconds": 3.5,
    "epochs": 2,
    "global_step": 90,
    "history": [
        {"step": 10, "epoch": 0, "loss": 1.5, "kind": "step"},
        {"step": 45, "epoch": 0, "loss": 0.9, "kind": "epoch", "test_accuracy": 0.9},
        {"step": 50, "epoch": 1, "loss": 0.2, "kind": "step"},
        {"step": 90, "epoch": 1, "loss": 0.3, "kind": "epoch", "test_accuracy": 0.97},
    ],
}


def test_read_metrics_reports_what_is_missing_and_keeps_what_it_read(tmp_path: Path) -> None:
    required = artifacts.REQUIRED_METRICS
    read = artifacts.read_metrics(tmp_path, required=required)
    assert read.metrics == {} and len(read.problems) == 1 and "wrote no metrics.json" in read.problems[0]
    assert artifacts.read_metrics(tmp_path, missing_ok=True) == artifacts.MetricsRead({})
    (tmp_path / "metrics.json").write_text(json.dumps({"test_accuracy": 0.9}))
    read = artifacts.read_metrics(tmp_path, required=required)
    assert read.metrics == {"test_accuracy": 0.9}
    assert len(read.problems) == 1 and "missing keys ['test_loss'" in read.problems[0]
    (tmp_path / "metrics.json").write_text('{"test_accuracy": 0.9,')
    read = artifacts.read_metrics(tmp_path)
    assert read.metrics == {} and "not readable JSON" in read.problems[0]
    (tmp_path / "metrics.json").write_text(json.dumps(METRICS))
    read = artifacts.read_metrics(tmp_path, required=required)
    assert read.problems == () and read.metrics["global_step"] == 90


def test_model_metrics_and_report_artifacts(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "metrics.json").write_text(json.dumps(METRICS))
    (out / "model.pt").write_bytes(b"weights")
    (out / "ps-state").mkdir()
    model = FakeArtifact(tmp_path / "model")
    names = artifacts.copy_model(out, model, metadata={"framework": "pytorch"})
    assert names == ["model.pt", "metrics.json"]
    assert (Path(model.path) / "model.pt").read_bytes() == b"weights"
    assert model.metadata["framework"] == "pytorch"

    metrics = FakeArtifact(tmp_path / "metrics")
    logged = artifacts.log_metrics(metrics, METRICS, job_seconds=12.5)
    assert logged == metrics.metadata
    assert logged["test_accuracy"] == 0.97
    assert logged["duration_seconds"] == 3.5
    assert logged["job_seconds"] == 12.5

    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(TrainingError, match="wrote no model"):
        artifacts.copy_model(empty, FakeArtifact(tmp_path / "m2"), metadata={})


SVG = "{http://www.w3.org/2000/svg}"


def _x_tick_labels(chart: ET.Element) -> list[str]:
    """An SVG chart's x tick labels: the texts just below its plot area (svg_chart draws them 16 px below)."""
    frame = next(r for r in chart.iter(f"{SVG}rect") if r.attrib.get("stroke") == "#444")
    bottom = float(frame.attrib["y"]) + float(frame.attrib["height"])
    return [t.text or "" for t in chart.iter(f"{SVG}text") if float(t.attrib.get("y", 0)) == bottom + 16]


def test_report_has_curves_and_tables() -> None:
    loss, accuracy = report.curves(METRICS["history"])
    assert loss == [(10.0, 1.5), (50.0, 0.2)]  # per-step losses only, not the epoch means
    assert accuracy == [(0.0, 0.9), (1.0, 0.97)]  # epochs as the history and the log count them
    page = report.training_report(title="t <1>", metrics=METRICS, details=[("job", "PyTorchJob a/b")])
    assert "t &lt;1&gt;" in page
    figure = page.split("<h2>Curves</h2>\n", 1)[1].split("</figure>", 1)[0] + "</figure>"
    assert len(list(ET.fromstring(figure).iter(f"{SVG}svg"))) == 2  # inline: nothing for the UI's iframe to fetch
    assert "0.9700" in page
    no_history = report.training_report(title="t", metrics={**METRICS, "history": []}, details=[])
    assert "no curves" in no_history
    assert "<svg" not in no_history


def test_report_curves_draw_every_logged_point_at_whole_epochs_and_steps() -> None:
    history = [{"step": s, "epoch": (s - 1) // 15, "loss": 2.0 / s, "kind": "step"} for s in range(1, 46)]
    history += [
        {"step": 15 * (e + 1), "epoch": e, "loss": 0.5, "kind": "epoch", "test_accuracy": 0.8 + e / 20}
        for e in range(3)
    ]
    figure = report.curves_svg(history)
    assert figure is not None
    left, right = ET.fromstring(figure).iter(f"{SVG}svg")
    (loss,) = left.iter(f"{SVG}polyline")
    assert len(loss.attrib["points"].split()) == 45  # one point per logged step
    (accuracy,) = right.iter(f"{SVG}polyline")
    assert accuracy.attrib["stroke"] == "#2ca02c"  # tab:green, as tests/ui_browser.py looks for it
    marks = [float(c.attrib["cx"]) for c in right.iter(f"{SVG}circle")]
    assert len(marks) == 3 and marks == sorted(marks)
    for chart, last in ((left, "40"), (right, "2")):
        ticks = _x_tick_labels(chart)
        assert ticks and all(t.isdigit() for t in ticks) and ticks[-1] == last, ticks
    # Epoch 0 is the log's "epoch 0": the first mark stands on the "0" tick.
    zero = next(t for t in right.iter(f"{SVG}text") if t.text == "0" and t.attrib.get("text-anchor") == "middle")
    assert float(zero.attrib["x"]) == marks[0]


def test_report_shows_the_inputs_that_made_the_run() -> None:
    rows = report.input_rows(
        {"epochs": 3, "learning_rate": 0.05, "command": ["python", "my train.py"], "args": [], "labels": {"a": "b"}}
    )
    assert rows == [
        ("epochs", 3),
        ("learning_rate", 0.05),
        ("command", "python 'my train.py'"),
        ("labels", '{"a": "b"}'),
    ]
    page = report.training_report(title="t", metrics=METRICS, details=[], inputs=rows)
    assert "<h2>Inputs</h2>" in page and "python &#x27;my train.py&#x27;" in page and "0.0500" in page


def test_comparison_table(tmp_path: Path) -> None:
    runs = []
    for name, accuracy in (("pytorch", 0.97), ("chainermn", 0.98), ("ps", 0.96)):
        model = FakeArtifact(
            tmp_path / f"{name}-model", {"framework": name, "job_name": f"{name}-1", "status": "Succeeded"}
        )
        metrics = FakeArtifact(
            tmp_path / f"{name}-metrics", {"test_accuracy": accuracy, "world_size": 2.0, "samples_per_second": 1234.5}
        )
        runs.append((name, model, metrics))
    md = FakeArtifact(tmp_path / "summary.md")
    page = FakeArtifact(tmp_path / "summary.html")
    assert summary.compare_step(runs=runs, summary_markdown=md, summary_html=page) == "chainermn"
    table = Path(md.path).read_text()
    assert "| chainermn | chainermn-1 | Succeeded | 0.9800 |" in table
    assert "| 2 |" in table  # world size as an integer
    assert "1,234" in table
    assert "<table>" in Path(page.path).read_text()
    with pytest.raises(InvalidInputError, match="no test_accuracy"):
        summary.comparison_rows([("x", runs[0][1], FakeArtifact(tmp_path / "empty"))])


def test_comparison_page_draws_curves_on_shared_axes_and_bars(tmp_path: Path) -> None:
    """The page used to be a table only: now the runs' curves and bars of accuracy and samples/s."""
    from kubetrain.kfp_runtime import charts

    runs = []
    for name, steps in (("pytorch", 40), ("chainermn", 20)):
        model = FakeArtifact(tmp_path / f"{name}-model", {"framework": name})
        Path(model.path).mkdir(parents=True)
        history = [{"kind": "step", "step": s, "loss": 2.0 / (s + 1)} for s in range(steps)]
        history += [{"kind": "epoch", "epoch": e, "test_accuracy": 0.8 + 0.05 * e} for e in range(3)]
        (Path(model.path) / "metrics.json").write_text(json.dumps({"history": history}))
        metrics = FakeArtifact(tmp_path / f"{name}-metrics", {"test_accuracy": 0.9, "samples_per_second": 100.0})
        runs.append((name, model, metrics))
    assert len(charts.history_of(runs[0][1])) == 43
    assert charts.history_of(FakeArtifact(tmp_path / "nowhere")) == []
    page = FakeArtifact(tmp_path / "summary.html")
    summary.compare_step(runs=runs, summary_markdown=FakeArtifact(tmp_path / "s.md"), summary_html=page)
    text = Path(page.path).read_text()
    assert "<table>" in text and f'<figure class="charts" aria-label="{charts.COMPARISON_LABEL}">' in text
    figure = charts.comparison_svg([(n, charts.history_of(m), dict(x.metadata)) for n, m, x in runs])
    loss, accuracy, accuracy_bars, speed_bars = ET.fromstring(figure).iter(f"{SVG}svg")
    assert [len(p.attrib["points"].split()) for p in loss.iter(f"{SVG}polyline")] == [40, 20]  # shared axes
    assert [t.text for t in loss.iter(f"{SVG}text") if t.text in ("pytorch", "chainermn")] == ["pytorch", "chainermn"]
    assert len(list(accuracy.iter(f"{SVG}circle"))) == 6
    assert {"0.9000", "100"} <= {t.text for t in (*accuracy_bars.iter(f"{SVG}text"), *speed_bars.iter(f"{SVG}text"))}


def test_charts_are_honest_about_what_they_show() -> None:
    """Issue 34: a 0.003 accuracy gap drawn on an axis from 0.5, one PS evaluation centred on 8.6..9.4,
    world size 64.0 and 9.2000 seconds."""
    from kubetrain.kfp_runtime import charts

    figure = charts.comparison_svg(
        [("pytorch", [], {"test_accuracy": 0.972, "samples_per_second": 100.0}),
         ("ps", [], {"test_accuracy": 0.969, "samples_per_second": 50.0})]
    )  # fmt: skip
    accuracy_bars = list(ET.fromstring(figure).iter(f"{SVG}svg"))[2]
    labels = [t.text for t in accuracy_bars.iter(f"{SVG}text")]
    assert "0.00" in labels  # the axis starts at 0
    assert [t for t in labels if t in ("0.9720", "0.9690")] == ["0.9720", "0.9690"]
    one = report.curves_svg([{"step": 450, "epoch": 9, "test_accuracy": 0.93, "loss": 0.2}])
    assert one is not None
    right = list(ET.fromstring(one).iter(f"{SVG}svg"))[1]
    assert _x_tick_labels(right)[0] == "0"  # from epoch 0, the one evaluation at 9 inside the axis
    assert "0.9300 (one evaluation)" in [t.text for t in right.iter(f"{SVG}text")]
    page = report.training_report(title="t", metrics={**METRICS, "world_size": 64.0, "wall_seconds": 9.2}, details=[])
    table = page.split("<h2>Curves</h2>", 1)[0]  # the table's cells; the charts' SVG coordinates are not values
    assert ">64<" in table and ">9.2<" in table and "64.0" not in table and "9.2000" not in table
