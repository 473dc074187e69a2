"""`compare_summary`'s own tests (the hub's tests/ beside the component): what its body hands to the library."""

import pytest

from kubetrain.components import compare_summary
from tests.component_body import run_body, sentinels


def test_the_body_pairs_each_frameworks_model_with_its_metrics(monkeypatch: pytest.MonkeyPatch) -> None:
    """A model under another framework's name, or with another run's metrics, would mislabel the table."""
    inputs = sentinels(compare_summary)
    called, returned = run_body(compare_summary, "kubetrain.kfp_runtime.summary.compare_step", monkeypatch, inputs)
    runs = [(name, inputs[f"{name}_model"], inputs[f"{name}_metrics"]) for name in ("pytorch", "chainermn", "ps")]
    assert called == {"runs": runs, "summary_markdown": inputs["summary"], "summary_html": inputs["summary_html"]}
    assert returned
