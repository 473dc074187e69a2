"""The `compare_summary` step: one table comparing the frameworks' runs, as Markdown and HTML."""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kubetrain.errors import InvalidInputError
from kubetrain.kfp_runtime.artifacts import ArtifactLike, write_text
from kubetrain.kfp_runtime.charts import comparison_svg, history_of
from kubetrain.kfp_runtime.exits import step
from kubetrain.kfp_runtime.report import format_value, page

# (key, header, format spec); text columns have no spec.
COLUMNS = (
    ("framework", "framework", ""),
    ("job_name", "job", ""),
    ("status", "status", ""),
    ("test_accuracy", "test accuracy", ".4f"),
    ("test_loss", "test loss", ".4f"),
    ("samples_per_second", "samples/s", ",.0f"),
    ("duration_seconds", "training s", ".1f"),
    ("job_seconds", "job s", ".1f"),
    ("world_size", "world size", "d"),
)
_TEXT = ("framework", "job_name", "status")


@dataclass(frozen=True)
class Row:
    """One framework's line of the comparison."""

    values: Mapping[str, Any]

    def cell(self, key: str, spec: str = "") -> str:
        """The formatted cell for a column ('–' when unknown)."""
        value = self.values.get(key)
        return "–" if value is None else format_value(value, spec)


def comparison_rows(runs: Sequence[tuple[str, ArtifactLike, ArtifactLike]]) -> list[Row]:
    """Rows from (framework, Model artifact, Metrics artifact) triples, in the given order."""
    rows = []
    for framework, model, metrics in runs:
        logged = dict(metrics.metadata or {})
        meta = dict(model.metadata or {})
        if "test_accuracy" not in logged:
            raise InvalidInputError(
                f"{framework}: the Metrics artifact has no test_accuracy; pass a training step's metrics"
            )
        rows.append(
            Row(
                {
                    **logged,
                    "framework": meta.get("framework", framework),
                    "job_name": meta.get("job_name"),
                    "status": meta.get("status"),
                }
            )
        )
    return rows


def best(rows: Sequence[Row]) -> str:
    """The framework with the highest test accuracy (the first one on a tie)."""
    top = max(rows, key=lambda r: float(r.values["test_accuracy"]))
    return str(top.values["framework"])


def markdown_table(rows: Sequence[Row]) -> str:
    """The comparison as a GitHub-flavoured Markdown table."""
    header = "| " + " | ".join(label for _, label, _ in COLUMNS) + " |"
    rule = "|" + "|".join("---" if key in _TEXT else "---:" for key, _, _ in COLUMNS) + "|"
    lines = [header, rule]
    lines += ["| " + " | ".join(row.cell(key, spec) for key, _, spec in COLUMNS) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def html_table(rows: Sequence[Row]) -> str:
    """The comparison as an HTML table."""
    parts = ["<table>", "<tr>" + "".join(f"<th>{html.escape(label)}</th>" for _, label, _ in COLUMNS) + "</tr>"]
    for row in rows:
        cells = "".join(
            f"<td{'' if key in _TEXT else ' class=num'}>{html.escape(row.cell(key, spec))}</td>"
            for key, _, spec in COLUMNS
        )
        parts.append(f"<tr>{cells}</tr>")
    parts.append("</table>")
    return "\n".join(parts)


@step
def compare_step(
    *,
    runs: Sequence[tuple[str, ArtifactLike, ArtifactLike]],
    summary_markdown: ArtifactLike,
    summary_html: ArtifactLike,
) -> str:
    """Write the comparison (Markdown and HTML) and return the most accurate framework."""
    rows = comparison_rows(runs)
    winner = best(rows)
    title = "kubetrain: frameworks compared"
    markdown = f"# {title}\n\n{markdown_table(rows)}\nMost accurate: **{winner}**.\n"
    write_text(summary_markdown, markdown)
    charted = [(fw, history_of(model), row.values) for (fw, model, _), row in zip(runs, rows, strict=True)]
    chart = comparison_svg(charted)
    body = f"{html_table(rows)}\n<p>Most accurate: <b>{html.escape(winner)}</b>.</p>\n<h2>Curves and bars</h2>\n{chart}"
    write_text(summary_html, page(title, body))
    print(markdown, flush=True)
    return winner
