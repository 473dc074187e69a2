"""The Kubeflow Pipelines 2.17 web UI on the e2e cluster, in a real browser, as a user works in it.

The UI server runs beside the real backend (tools/cluster/kfp/ui.py) as KFP's `ml-pipeline-ui`
service account; headless Chromium (Debian's) is driven by Playwright for Python
(tests/ui_browser.py, tests/cluster/kfp_ui.py). Every shipped pipeline and a user's own pipeline
are uploaded through the page, run from the page with one parameter changed, and read back on the
page: the run's state, the launcher's lines in the training task's Logs tab, the HTML report with
its curves (pixels of the chart, not only its text), the metrics and the Compare page. Failure,
Terminate and Retry go through the page too; what they do to the training job is checked through
the API. With KUBETRAIN_UPDATE_GOLDEN=1 the screenshots land in docs/images/ui/ (the README's).

The scenarios run side by side, each in its own browser (tests/cluster/concurrent.py; Playwright's
sync API wants one instance per thread); each test waits for its own. They are also what proves
the shipped pipelines and a user's own on the real backend: `check_shipped_run` reads each run
through ML Metadata and the store as test_kfp_backend.py's runs once did through `kfp.Client` alone.
"""

from __future__ import annotations

import functools
import json
import re
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("playwright", reason="playwright is not installed (pip install -e '.[dev]')")

from kubetrain.names import LABEL_RUN_ID
from tests import ui_browser
from tests.cluster import kfp_runs, kfp_ui
from tests.cluster.concurrent import Scenarios, scenarios
from tests.cluster.kfp_pipelines import (
    GONE_WITHIN_SECONDS,
    TARGET,
    check_shipped_run,
    gate,
    launcher_pods,
    run_jobs,
    users_pipeline,
    wait_for,
    wait_retried,
)
from tests.cluster.kfp_runs import KfpBackend
from tests.cluster.kfp_ui import KfpUI
from tools.cluster.controlplane import STATE, Cluster
from tools.cluster.kfp import api_server, ui

pytestmark = pytest.mark.timeout(2400)
JOB_LINE = re.compile(r"(PyTorchJob|MPIJob|JobSet|TrainJob) kubeflow/(\S+): .*→ (\w+)")
POD_LINE = re.compile(r"pod \S+ \[")


@dataclass(frozen=True)
class Case:
    """One pipeline as the UI scenarios run it."""

    name: str
    tasks: tuple[str, ...]
    training: tuple[str, ...]  # tasks whose Logs tab shows a launcher following its job
    parameter: tuple[str, str]  # (name, the value typed into the form)
    reports: tuple[str, ...] = ()  # tasks whose report must show curves and metrics (default: training)

    def reported(self) -> tuple[str, ...]:
        """The tasks whose report and metrics are checked."""
        return self.reports or self.training


CASES = [
    Case("mnist_pytorch", ("download-cache-key", "download-dataset", "pytorch-train"), ("pytorch-train",), ("epochs", "6")),
    Case("mnist_chainermn", ("chainermn-train", "download-cache-key", "download-dataset"), ("chainermn-train",),
         ("epochs", "6")),
    Case("mnist_ps", ("download-cache-key", "download-dataset", "ps-train"), ("ps-train",), ("epochs", "12")),
    Case("compare_frameworks", ("chainermn-train", "compare-summary", "download-cache-key", "download-dataset", "ps-train",
                                "pytorch-train"),
         ("pytorch-train", "chainermn-train", "ps-train"), ("pytorch_epochs", "6")),
]  # fmt: skip
USERS = Case("users_two_trainings", ("download-dataset", "pytorch-train", "pytorch-train-2"),
             ("pytorch-train", "pytorch-train-2"), ("epochs", "6"), reports=("pytorch-train",))  # fmt: skip


@pytest.fixture(scope="module")
def kfp_backend(cluster: Cluster) -> KfpBackend:
    """The backend, with every kubetrain image built and pushed."""
    return kfp_runs.prepare(cluster, ["launcher", "pytorch", "chainermn", "ps"])


@pytest.fixture(scope="module")
def ui_url(kfp_backend: KfpBackend) -> str:
    found = ui.read_url(STATE)
    assert found is not None, f"no {STATE / ui.URL_FILE}: the KFP tier started without its UI (KUBETRAIN_KFP_UI=0?)"
    return found


def _browser_needed() -> None:
    reason = ui_browser.skip_reason()
    if reason:
        pytest.fail(f"the browser scenarios need a browser: {reason}")


@pytest.fixture
def page(ui_url: str) -> Iterator[KfpUI]:
    """A page of its own for a test run in the main thread."""
    _browser_needed()
    with ui_browser.page() as opened:
        yield KfpUI(opened, ui_url)


def _in_browser(ui_url: str, scenario: Callable[..., str | None], *args: object) -> str | None:
    # In the scenario's own thread: a Playwright instance and a browser of its own.
    with ui_browser.page() as opened:
        return scenario(KfpUI(opened, ui_url), *args)


@pytest.fixture(scope="module")
def started(kfp_backend: KfpBackend, ui_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scenarios]:
    """Every browser scenario side by side from the module's start, the longest first."""
    _browser_needed()
    with scenarios() as running:
        for case in [CASES[-1], *CASES[:-1], USERS]:
            running.start(case.name, functools.partial(_in_browser, ui_url, _pipeline_in_the_ui, kfp_backend, case,
                                                        tmp_path_factory.mktemp(case.name)))  # fmt: skip
        for name, scenario in (("bad-input", _bad_input), ("terminate", _terminate), ("retry", _retry)):
            running.start(name, functools.partial(_in_browser, ui_url, scenario, kfp_backend,
                                                  tmp_path_factory.mktemp(name)))  # fmt: skip
        yield running


def _users_package(tmp_path: Path) -> Path:
    # A user's own pipeline: kubetrain's components loaded from the compiled YAML, one training with
    # kubetrain's program and one with the user's DDP script from docs/examples (on the workspace).
    programs = STATE / "node" / "workspace-kubeflow" / "programs"
    programs.mkdir(parents=True, exist_ok=True)
    (programs / "ddp_train.py").write_text((kfp_runs.REPO_ROOT / "docs" / "examples" / "ddp_train.py").read_text())
    return users_pipeline(tmp_path, "users_two_trainings", """
        @dsl.pipeline(name="users-two-trainings")
        def pipeline(epochs: int = 5) -> None:
            data = claim(download(source="builtin:digits"))
            claim(train(dataset=data.outputs["dataset"], **IDS, workers=1, epochs=epochs))
            claim(train(dataset=data.outputs["dataset"], **IDS, workers=1,
                        command=["python", "/workspace/programs/ddp_train.py"], args=["--epochs", "20"]))
    """)  # fmt: skip


def _check_logs(text: str, task: str, *, outcome: str) -> str:
    """The launcher's lines in a Logs tab: its job, the job's pods, the outcome; the job's name."""
    jobs = JOB_LINE.findall(text)
    assert jobs, f"{task}: no line of the launcher about its job in the Logs tab:\n{text[-3000:]}"
    assert POD_LINE.search(text), f"{task}: no line about the job's pods in the Logs tab:\n{text[-3000:]}"
    assert outcome in {state for _, _, state in jobs}, f"{task}: the job never reached {outcome}:\n{text[-3000:]}"
    return str(jobs[0][1])


@pytest.mark.parametrize("case", [*CASES, USERS], ids=lambda c: c.name)
def test_a_pipeline_uploaded_and_run_in_the_ui_shows_its_results(started: Scenarios, case: Case) -> None:
    started.result(case.name)


def _pipeline_in_the_ui(page: KfpUI, kfp_backend: KfpBackend, case: Case, tmp_path: Path) -> str:
    package = _users_package(tmp_path) if case is USERS else kfp_runs.REPO_ROOT / "pipelines" / f"{case.name}.yaml"
    shots = f"{case.name}"
    started = time.monotonic()
    page.upload(package, f"{case.name}-{uuid.uuid4().hex[:6]}")
    assert page.task_nodes(len(case.tasks)) == sorted(case.tasks)
    ui_browser.screenshot(page.page, f"{shots}-pipeline-graph", tmp_path)
    key, value = case.parameter
    run_id = page.start_run({key: value})
    clicked = time.monotonic()
    parameters = page.run(run_id).get("runtime_config", {}).get("parameters", {})
    assert str(parameters.get(key)) in (value, f"{value}.0"), parameters  # the form's value reached the run
    page.leave()

    # While the first training job runs, its task's Logs tab already shows the launcher's lines.
    first = case.training[0]
    wait_for("a training pod of the run Running", lambda: _training_pod_running(kfp_backend, run_id), 900)
    pods_running = time.monotonic()  # set beside the same run through kfp.Client (bench/kfp_backend.py)
    wait_for(f"{first}'s Logs tab saying its job runs", lambda: _job_states(page, run_id, first) & {"Running"}, 600)

    state = page.wait_state(run_id)
    assert state == "SUCCEEDED", f"{case.name}: {state}\n{kfp_backend.workflow_tail(run_id)}"
    if case is not USERS:  # what the run holds, read through ML Metadata and the store, as the UI reads it
        check_shipped_run(kfp_backend, case.name, run_id)
    else:  # two trainings, two jobs, each model from its own job's metrics.json at the target
        trained = [a for a in kfp_backend.artifacts(run_id) if a.type == "system.Model"]
        assert len({m.properties["job_name"] for m in trained}) == len(trained) == 2, [m.properties for m in trained]
        for model in trained:
            assert json.loads(model.objects["metrics.json"]["text"])["test_accuracy"] >= TARGET, model.properties
    page.open_run(run_id)
    page.expect_status("Succeeded")
    page.expect_version(api_server.kfp_version())  # which KFP it is, as the screenshots show it
    ui_browser.screenshot(page.page, f"{shots}-run", tmp_path)
    models = {m.properties["job_name"] for m in kfp_backend.artifacts(run_id) if m.type == "system.Model"}
    page.open_run(run_id)
    for task in case.training:
        job = _check_logs(page.logs(task), task, outcome="Succeeded")  # the training pods are gone by now
        assert job in models, (task, job, models)
    for task in case.reported():
        frame = page.html_visualization(task)
        _check_curves(frame, task)
        if task == first:
            ui_browser.screenshot(page.page, f"{shots}-html-report", tmp_path)
        assert "test_accuracy" in page.metrics_visualization(task)
        if task == first:
            ui_browser.screenshot(page.page, f"{shots}-metrics", tmp_path)
    print(f"\nui {case.name}: Start → first training pod Running {pods_running - clicked:.0f}s, "
          f"whole scenario {time.monotonic() - started:.0f}s")  # fmt: skip
    return run_id


def _check_curves(frame: Any, task: str) -> None:
    """Both curves are painted in the report's chart, read from the chart's pixels.

    The UI shows the report in a narrow frame (about 400 px of chart): a curve is some hundred
    pixels of its colour, a missing one none (anti-aliased text and axes have neither colour).
    Under load (four runs and four browsers on two cores) a first screenshot once came before the
    frame was painted (none of either colour), so the chart is shot again, for up to 60 s.
    """
    shown = {"loss": 0.0, "accuracy": 0.0}
    end = time.monotonic() + 60
    while True:
        chart = frame.locator(kfp_ui.CHART).screenshot()
        shown = {"loss": ui_browser.colored_fraction(chart, ui_browser.LOSS_BLUE),
                 "accuracy": ui_browser.colored_fraction(chart, ui_browser.ACCURACY_GREEN)}  # fmt: skip
        if min(shown.values()) > 0.0005 or time.monotonic() > end:
            break
        time.sleep(2)
    assert shown["loss"] > 0.0005, f"{task}: no loss curve drawn ({shown})"
    assert shown["accuracy"] > 0.0005, f"{task}: no accuracy curve ({shown})"


def _training_pod_running(kfp_backend: KfpBackend, run_id: str) -> bool:
    # Every job kind's pods carry the run's label (the launcher labels its job's pod templates).
    phases = kfp_backend.kubectl("get", "pods", "-l", f"{LABEL_RUN_ID}={run_id}", "-o",
                                 "jsonpath={.items[*].status.phase}").split()  # fmt: skip
    return "Running" in phases


def _job_states(page: KfpUI, run_id: str, task: str) -> set[str]:
    """The job states the launcher has logged so far, read afresh from the task's Logs tab."""
    page.open_run(run_id)
    return {state for _, _, state in JOB_LINE.findall(page.logs(task, pod_may_be_unknown=True))}


def test_the_compare_page_shows_two_runs_metrics_side_by_side(started: Scenarios, page: KfpUI, tmp_path: Path) -> None:
    succeeded = [str(started.result(case.name)) for case in CASES[:2]]
    names = [page.run(r)["display_name"] for r in succeeded]
    text = page.compare(succeeded)
    for name in names:
        assert name in text, (name, text[:2000])
    assert text.count("test_accuracy") >= 1
    ui_browser.screenshot(page.page, "compare", tmp_path)


def test_a_bad_input_fails_its_step_and_the_reason_reads_in_the_ui(started: Scenarios) -> None:
    started.result("bad-input")


def test_terminate_on_the_run_page_deletes_the_training_job(started: Scenarios) -> None:
    started.result("terminate")


def test_retry_on_a_failed_runs_page_trains_one_new_job_under_the_same_name(started: Scenarios) -> None:
    started.result("retry")


def _bad_input(page: KfpUI, kfp_backend: KfpBackend, tmp_path: Path) -> None:
    package = kfp_runs.REPO_ROOT / "pipelines" / "mnist_pytorch.yaml"
    page.upload(package, f"bad-input-{uuid.uuid4().hex[:6]}")
    run_id = page.start_run({"dataset": "builtin:no-such-dataset"})
    assert page.wait_state(run_id) == "FAILED"
    page.open_run(run_id)
    assert page.task_failed_on_graph("download-dataset")
    text = page.logs("download-dataset")
    reasons = [line for line in text.splitlines() if "no-such-dataset" in line]
    assert reasons, f"the failed step's log in the UI does not name the bad input:\n{text[-3000:]}"
    ui_browser.screenshot(page.page, "failed-step", tmp_path)


def _terminate(page: KfpUI, kfp_backend: KfpBackend, tmp_path: Path) -> None:
    package = kfp_runs.REPO_ROOT / "pipelines" / "mnist_pytorch.yaml"
    page.upload(package, f"terminate-{uuid.uuid4().hex[:6]}")
    run_id = page.start_run({"epochs": "400"})
    wait_for("the PyTorchJob of the run", lambda: run_jobs(kfp_backend, run_id), 600)
    page.open_run(run_id)
    page.run_action("Terminate")
    wait_for("the job deleted", lambda: not run_jobs(kfp_backend, run_id), 180)
    assert page.wait_state(run_id, timeout=300) in ("CANCELED", "FAILED")


def _retry(page: KfpUI, kfp_backend: KfpBackend, tmp_path: Path) -> None:
    # As docs/cluster.md says: the launcher dies mid-job (SIGKILL, as a node loss or an OOM kill
    # ends it: it cannot delete the job), its step has *failed*, which KFP 2.17's Argo does not
    # retry even under set_retry (templateDefaults retryPolicy OnError); kubetrain's reaper deletes
    # the job by its uid and the run fails. Retry on the page starts a new launcher, which trains
    # one new job of the same name: never two at once. (test_kfp_retry.py ran the same through
    # RetryRun; merged here, where Retry is the user's click.)
    # The first job waits on its gate until it is reaped (kfp_pipelines.GATED_TRAINING says why);
    # the retried one finds it open. The gated program is the training (kubetrain passes a program of
    # the user's no training flags), so the pipeline takes no parameters: an `epochs` here did nothing.
    opened, gated = gate("ui-retried")
    package = users_pipeline(tmp_path, "ui_retried", f"""
        @dsl.pipeline(name="ui-retried-training")
        def pipeline() -> None:
            data = claim(download(source="builtin:digits"))
            task = claim(train(dataset=data.outputs["dataset"], **IDS, delete_after="never", command={gated!r}))
            task.set_retry(num_retries=2)
    """)  # fmt: skip
    page.upload(package, f"retried-{uuid.uuid4().hex[:6]}")
    run_id = page.start_run({})
    wait_for("the PyTorchJob of the run", lambda: run_jobs(kfp_backend, run_id), 600)
    job = run_jobs(kfp_backend, run_id)[0].split("/")[-1]
    uid = kfp_backend.kubectl("get", "pytorchjob", job, "-o", "jsonpath={.metadata.uid}")
    kfp_backend.kill_main_container(launcher_pods(kfp_backend, run_id, "pytorch_train")[0])
    assert page.wait_state(run_id) == "FAILED"  # set_retry did not retry the failed step
    wait_for("the killed step's job reaped", lambda: not run_jobs(kfp_backend, run_id), GONE_WITHIN_SECONDS)
    assert f"deleted PyTorchJob kubeflow/{job} (uid {uid})" in (STATE / "kfp" / "reaper.log").read_text()
    assert len(launcher_pods(kfp_backend, run_id, "pytorch_train")) == 1
    opened.touch()
    page.open_run(run_id)
    page.run_action("Retry")
    state = wait_retried(kfp_backend, run_id, lambda: str(page.run(run_id).get("state", "")))
    assert state == "SUCCEEDED", kfp_backend.workflow_tail(run_id)
    assert run_jobs(kfp_backend, run_id) == [f"pytorchjob.kubeflow.org/{job}"]  # one job, never a second
    assert kfp_backend.kubectl("get", "pytorchjob", job, "-o", "jsonpath={.metadata.uid}") != uid
    page.open_run(run_id)
    assert _check_logs(page.logs("pytorch-train"), "pytorch-train", outcome="Succeeded") == job
    kfp_backend.kubectl("delete", "pytorchjob", job, "--wait=true")


def test_the_ui_server_was_never_forbidden(cluster: Cluster, started: Scenarios) -> None:
    started.wait_ended([case.name for case in (*CASES, USERS)] + ["bad-input", "terminate", "retry"])
    # It runs as ml-pipeline-ui with upstream's Role: a permission the pages above needed and the
    # Role lacks shows up here, as on a cluster (the audit policy records that user's requests).
    user = f"system:serviceaccount:kubeflow:{ui.ACCOUNT}"
    events = [json.loads(line) for line in cluster.audit_log.read_text().splitlines()]
    mine = [e for e in events if e.get("user", {}).get("username") == user and e.get("stage") == "ResponseComplete"]
    assert mine, f"no request of {user} in {cluster.audit_log}: did the UI server read pod logs or Secrets?"
    refused = [(e["verb"], e.get("objectRef", {}).get("resource"), e.get("objectRef", {}).get("subresource"))
               for e in mine if e.get("responseStatus", {}).get("code") in (401, 403)]  # fmt: skip
    assert not refused, refused
