"""The training report's charts as the Kubeflow UI shows them: the HTML in a sandboxed iframe's srcdoc,
about 450 px wide, in headless Chromium. The cluster's UI scenario (tests/cluster/test_kfp_ui.py)
makes the same checks on a real run; this one catches a chart the browser does not draw (malformed
SVG, a resource the sandbox blocks, a colour changed) without a cluster.
"""

from __future__ import annotations

import html
from pathlib import Path

import pytest

from kubetrain.kfp_runtime import report
from tests import ui_browser

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]
if ui_browser.skip_reason():
    pytest.skip(str(ui_browser.skip_reason()), allow_module_level=True)

HISTORY = [{"step": s, "epoch": (s - 1) // 60, "loss": 2.3 / s**0.5, "kind": "step"} for s in range(1, 301)]
HISTORY += [{"kind": "epoch", "epoch": e, "test_accuracy": 0.85 + e / 50} for e in range(5)]


def test_the_reports_curves_show_in_the_uis_sandboxed_iframe(tmp_path: Path) -> None:
    from tests.cluster import kfp_ui

    page_html = report.training_report(
        title="mnist <pytorch>", metrics={"test_accuracy": 0.93, "history": HISTORY}, details=[("job", "j")]
    )
    # No script, no same origin: what KFP 2.17's HTML viewer allows its iframe.
    frame_html = f'<iframe sandbox="" style="width:450px;height:1200px" srcdoc="{html.escape(page_html)}"></iframe>'
    with ui_browser.page() as page:
        page.set_content(frame_html)
        chart = page.frame_locator("iframe[sandbox]").first.locator(kfp_ui.CHART)
        chart.wait_for(state="visible")
        assert chart.evaluate("f => f.querySelectorAll('svg polyline').length") == 2  # loss, accuracy
        assert chart.evaluate("f => f.clientWidth") <= 450  # the charts shrink to the frame
        shot = chart.screenshot(path=str(tmp_path / "chart.png"))
    assert ui_browser.colored_fraction(shot, ui_browser.LOSS_BLUE) > 0.0005, "no loss curve drawn"
    assert ui_browser.colored_fraction(shot, ui_browser.ACCURACY_GREEN) > 0.0005, "no accuracy curve drawn"
