"""The Kubeflow UI as the browser scenarios drive it: one method per thing a user does on a page.

Selectors are the ones the KFP 2.17 frontend's own markup gives (ids, roles, React Flow's
`data-testid`s), as found in ../shared/reference/kfp-ui/FINDINGS.md. Two traps are handled here
once: the upload page defaults to "Import by url" (the file input is dead until "Upload a file"
is chosen), and React Flow's minimap swallows real clicks on the nodes under it (nodes get a
dispatched click). Run states are read through the UI server's own proxy to the API, as the page
reads them; what a step shows is read from the page.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

from playwright.sync_api import expect

from tests.cluster import verified

FINAL = {"SUCCEEDED", "FAILED", "SKIPPED", "CANCELED"}
# kubetrain.kfp_runtime.report.curves_svg: the two inline SVG charts in one figure.
CHART = 'figure[aria-label="loss and test accuracy curves"]'


class KfpUI:
    """One browser page on the UI at `base` (http://127.0.0.1:PORT)."""

    def __init__(self, page: Any, base: str) -> None:
        self.page = page
        self.base = base.rstrip("/")
        self.uploaded: Path | None = None  # the last package uploaded: what start_run runs

    def api(self, path: str) -> dict[str, Any]:
        """GET through the UI server's proxy (what the page's own fetches do)."""
        reply = self.page.request.get(f"{self.base}{path}")
        assert reply.ok, f"{path}: {reply.status} {reply.text()[:500]}"
        data: dict[str, Any] = reply.json()
        return data

    def upload(self, package: Path, name: str) -> tuple[str, str]:
        """Upload a compiled pipeline through Pipelines → Upload pipeline; (pipeline id, version id)."""
        p = self.page
        p.goto(f"{self.base}/#/pipelines")
        p.get_by_role("button", name="Upload pipeline").click()
        p.locator("#localPackageBtn").click()  # "Import by url" is the default
        p.locator("input[type=file]").set_input_files(str(package))
        p.locator("#newPipelineName").fill(name)
        p.locator("#createNewPipelineOrVersionBtn").click()
        pattern = re.compile(r"#/pipelines/details/([^/?]+)/version/([^/?]+)")
        expect(p).to_have_url(pattern, timeout=60_000)
        found = pattern.search(p.url)
        assert found is not None, p.url
        self.uploaded = package
        return found.group(1), found.group(2)

    def task_nodes(self, count: int) -> list[str]:
        """The graph's task names, once `count` task nodes are drawn."""
        nodes = self.page.locator('[data-testid^="rf__node-task."]')
        expect(nodes).to_have_count(count, timeout=60_000)
        ids = [nodes.nth(i).get_attribute("data-testid") or "" for i in range(count)]
        return sorted(i.removeprefix("rf__node-task.") for i in ids)

    def start_run(self, parameters: dict[str, str], *, experiment_id: str | None = None) -> str:
        """From a pipeline's page: Create run, change `parameters` in the form, Start; the new run's id.

        `experiment_id` preselects the run's experiment (the form's `experimentId` parameter, which
        the experiment page's own Create run sets): multi-user KFP refuses a run without one.
        """
        p = self.page
        p.get_by_role("button", name="Create run").click()
        expect(p).to_have_url(re.compile(r"#/runs/new"), timeout=30_000)
        if experiment_id is not None:
            p.goto(f"{p.url}&experimentId={experiment_id}")
        start = p.locator("#startNewRunBtn")
        expect(start).to_be_enabled(timeout=60_000)  # once the pipeline's template has loaded
        for key, value in parameters.items():
            field = p.locator(f'[id="{key}"]')
            field.fill(value)
        expect(start).to_be_enabled()
        start.click()
        if self.uploaded is not None:
            verified.note_run(self.uploaded)
        pattern = re.compile(r"#/runs/details/([0-9a-f-]{36})")
        expect(p).to_have_url(pattern, timeout=60_000)
        found = pattern.search(p.url)
        assert found is not None, p.url
        return found.group(1)

    def run(self, run_id: str) -> dict[str, Any]:
        """The run as the API returns it to the page."""
        return self.api(f"/apis/v2beta1/runs/{run_id}")

    def leave(self) -> None:
        """Blank the page while a scenario waits (on the run, a pod, a job).

        An open run page refetches the run and its ML Metadata every 10 s (the frontend's
        RunDetailsV2, QUERY_REFETCH_INTERVAL) and redraws its graph: with eight scenarios' pages
        open for minutes, that is CPU the runs themselves need on two cores. What the scenarios
        check on the page is checked on a freshly opened one (open_run).
        """
        self.page.goto("about:blank")

    def wait_state(self, run_id: str, timeout: float = 1500) -> str:
        """Poll the run through the UI server's proxy until it is final, the page left blank; its state."""
        self.leave()
        end = time.monotonic() + timeout
        state = ""
        while time.monotonic() < end:
            state = str(self.run(run_id).get("state", ""))
            if state in FINAL:
                return state
            time.sleep(3)
        raise AssertionError(f"run {run_id} not final after {timeout:.0f}s: {state}")

    def open_run(self, run_id: str) -> None:
        """The run's page, freshly loaded (nothing cached from an earlier look), its graph drawn."""
        self.page.goto("about:blank")  # the same URL again would only be a hash change: no reload
        self.page.goto(f"{self.base}/#/runs/details/{run_id}")
        expect(self.page.locator(".react-flow__node").first).to_be_visible(timeout=60_000)

    def expect_status(self, shown: str) -> None:
        """The run page's Detail tab shows `shown` (e.g. "Succeeded") as the run's status."""
        p = self.page
        p.get_by_role("button", name="Detail", exact=True).click()
        expect(p.get_by_text("Status", exact=True).first).to_be_visible(timeout=30_000)
        expect(p.get_by_text(shown, exact=True).first).to_be_visible(timeout=30_000)

    def expect_version(self, version: str) -> None:
        """The sidebar's "Version:" link reads `version` (the API server's healthz `tag_name`)."""
        link = self.page.get_by_text("Version:", exact=True).locator("xpath=following-sibling::a[1]")
        expect(link).to_have_text(version, timeout=30_000)

    def task_failed_on_graph(self, task: str) -> bool:
        """Whether the task's node carries the red failure icon (once MLMD says so: the page refetches)."""
        icon = self.page.locator(f'[data-testid="rf__node-task.{task}"] .text-mui-red-600')
        try:
            expect(icon).to_be_visible(timeout=60_000)
        except AssertionError:
            return False
        return True

    def select(self, node: str) -> None:
        """Open a node's side panel: `task.<task>` or `artifact.<task>.<output>` (a dispatched click).

        The panel keeps the node's ML Metadata as it was at the click: selected before the page's
        MLMD fetch has answered, it stays empty (no logs, no visualization). So the click waits for
        the node's icon to say MLMD knows it (an execution for a task, a live artifact).
        """
        element = self.page.locator(f'[data-testid="rf__node-{node}"]')
        known = "execution-icon-active" if node.startswith("task.") else "artifact-icon-live"
        expect(element.locator(f'[data-testid="{known}"]')).to_be_visible(timeout=90_000)
        element.dispatch_event("click")

    def tab(self, name: str) -> None:
        """A tab of the open side panel (or page)."""
        self.page.get_by_role("button", name=name, exact=True).click()

    def logs(self, task: str, *, pod_may_be_unknown: bool = False) -> str:
        """The Logs tab of a task: the text the UI server returned for it; the log window must show.

        The panel fetches the logs as soon as the node is selected (not when the tab opens), so the
        response is awaited around the selection. Selected just as its step starts, the panel may
        not know the step's pod yet and asks for the logs of no pod (the UI server answers 400
        "podname argument is required", and the page shows that error until the task is selected
        again): with `pod_may_be_unknown`, that answer reads as no log yet ("").
        """
        with self.page.expect_response(lambda r: "/k8s/pod/logs" in r.url, timeout=60_000) as answer:
            self.select(f"task.{task}")
        self.tab("Logs")
        reply = answer.value
        if pod_may_be_unknown and reply.status == 400 and "podname argument is required" in reply.text():
            return ""
        assert reply.ok, f"the Logs tab of {task}: {reply.status} {reply.text()[:1000]}"
        expect(self.page.locator('[data-testid="logs-view-window"]')).to_be_visible()
        return str(reply.text())

    def html_visualization(self, task: str, output: str = "report") -> Any:
        """The report artifact's Visualization: the sandboxed iframe's frame locator, its chart loaded."""
        self.select(f"artifact.{task}.{output}")
        self.tab("Visualization")
        frame = self.page.frame_locator("iframe[sandbox]").first
        chart = frame.locator(CHART)
        expect(chart).to_be_visible(timeout=60_000)
        drawn = chart.evaluate("f => f.querySelectorAll('svg polyline, svg circle').length > 0 && f.clientWidth > 0")
        assert drawn, "the report's charts were not drawn inside the UI's iframe"
        return frame

    def metrics_visualization(self, task: str, output: str = "metrics") -> str:
        """The metrics artifact's Visualization: the scalar table's text."""
        self.select(f"artifact.{task}.{output}")
        self.tab("Visualization")
        heading = self.page.get_by_text(re.compile(r"^Scalar Metrics"))
        expect(heading.first).to_be_visible(timeout=60_000)
        expect(self.page.get_by_text("test_accuracy", exact=True).first).to_be_visible()
        return str(self.page.locator("body").inner_text())

    def compare(self, run_ids: list[str]) -> str:
        """The Compare page of the runs; its text once the scalar metrics are drawn."""
        self.page.goto(f"{self.base}/#/compare?runlist={','.join(run_ids)}")
        expect(self.page.get_by_text("test_accuracy", exact=True).first).to_be_visible(timeout=90_000)
        return str(self.page.locator("body").inner_text())

    def run_action(self, action: str) -> None:
        """Terminate or Retry on the run's page, confirmed in its dialog."""
        self.page.get_by_role("button", name=action, exact=True).first.click()
        dialog = self.page.get_by_role("dialog")
        dialog.get_by_role("button", name=action, exact=True).click()
        expect(dialog).to_be_hidden(timeout=30_000)
