"""Users' pipelines as the KFP-backend scenarios write them, and what a run made: its jobs, its step pods.

A user's pipeline is a small Python file (a prelude, then a body defining `pipeline`) compiled with
kfp's own compiler, as a user would: either kubetrain's components loaded from the committed
YAML (with the run and task placeholders, as older user guides wrote them) or imported by name
from `kubetrain.components` with no placeholders (as the README writes them).
"""

from __future__ import annotations

import json
import runpy
import textwrap
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from kfp import compiler

from kubetrain.components import compiled_yaml
from kubetrain.names import LABEL_RUN_ID
from tests.cluster.kfp_runs import KfpBackend
from tools.cluster.controlplane import STATE

COMPONENTS = compiled_yaml()
# The reaper sweeps every 2 s and waits out its 30 s grace (tools/cluster/kfp/backend.py); KFP and
# Argo take some seconds to end the step. Far longer than either, far shorter than the job's own training (epochs=400).
GONE_WITHIN_SECONDS = 120


# What every user pipeline below starts with, as a user writes it: kubetrain's components loaded
# from the compiled YAML, the workspace claim mounted on a task, the run and task placeholders.
USER_PRELUDE = """
from kfp import dsl, kubernetes
from kubetrain.components import load_component

download = load_component({download!r})
train = load_component({train!r})
IDS = dict(run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER, task_id=dsl.PIPELINE_TASK_ID_PLACEHOLDER,
           task_name=dsl.PIPELINE_TASK_NAME_PLACEHOLDER)

def claim(task):
    kubernetes.mount_pvc(task, pvc_name="kubetrain-workspace", mount_path="/workspace")
    return task
"""


# kfp keeps the pipeline being defined in a class attribute (`dsl.Pipeline._default_pipeline`):
# two scenarios defining theirs at once in two threads fail with "Nested pipelines are not
# allowed" (seen in CI once scenarios ran side by side). One definition and compilation at a time.
_COMPILING = threading.Lock()


def _compile(source: Path, package: Path) -> None:
    """Define `pipeline` by running `source`, and compile it to `package`."""
    with _COMPILING:
        compiler.Compiler().compile(runpy.run_path(str(source))["pipeline"], str(package))


def users_pipeline(tmp_path: Path, name: str, body: str) -> Path:
    """Write a user's pipeline file (the prelude, then `body` defining `pipeline`), compile it; the YAML."""
    source = tmp_path / f"{name}.py"
    prelude = USER_PRELUDE.format(download=str(COMPONENTS["download_dataset"]),
                                   train=str(COMPONENTS["pytorch_train"]))  # fmt: skip
    source.write_text(prelude + textwrap.dedent(body))
    package = tmp_path / f"{name}.yaml"
    _compile(source, package)
    return package


# A user's pipeline as the README writes it: the components imported by name, no run or task
# placeholders; compiled here from kubetrain's sources (the same images as the committed YAML).
BY_NAME_PRELUDE = """
from kfp import dsl, kubernetes
from kubetrain.components import download_dataset, pytorch_train

def claim(task):
    kubernetes.mount_pvc(task, pvc_name="kubetrain-workspace", mount_path="/workspace")
    task.set_caching_options(False)
    return task
"""


def by_name_pipeline(tmp_path: Path, name: str, body: str) -> Path:
    """As users_pipeline, with the components imported by name and no placeholders; the YAML."""
    source = tmp_path / f"{name}.py"
    source.write_text(BY_NAME_PRELUDE + textwrap.dedent(body))
    package = tmp_path / f"{name}.yaml"
    _compile(source, package)
    assert "PIPELINE_JOB_ID" not in source.read_text() and "pipeline_job_uuid" not in package.read_text()
    return package


# A training that waits for its gate file on the workspace claim: the job runs exactly as long as
# the scenario needs, whatever the machine's load. A killed step's job must outlast the reaper's
# grace (30 s) to be reaped; a real training of 30 epochs ended in 25 s on a quiet machine, its job
# Succeeded and was never reaped (the browser module's Retry, run alone). The retried step's job
# finds the gate there and ends at once.
GATED_TRAINING = """
import os, pathlib, sys, time
gate = pathlib.Path(sys.argv[1])
end = time.monotonic() + 900
while not gate.exists():
    if time.monotonic() > end:
        sys.exit(f"no gate {gate} within 900 s")
    time.sleep(0.2)
pathlib.Path(os.environ["KUBETRAIN_OUTPUT_DIR"]).mkdir(parents=True, exist_ok=True)
"""


def gate(name: str) -> tuple[Path, list[str]]:
    """A new gate: (its path on this machine, to touch; the gated training's command in a pod)."""
    relative = f"gates/{name}-{uuid.uuid4().hex[:8]}"
    path = STATE / "node" / "workspace-kubeflow" / relative
    path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
    return path, ["python", "-c", GATED_TRAINING, f"/workspace/{relative}"]


def wait_for(what: str, check: object, timeout: float) -> None:
    """Poll `check()` every 2 s until it is truthy; fail naming `what` after `timeout` seconds."""
    assert callable(check)
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if check():
            return
        time.sleep(2)
    raise AssertionError(f"{what}: not within {timeout:.0f}s")


# The Argo Workflow phases a retried run can end in, and the run state each one becomes.
_ENDED = {"Succeeded": "SUCCEEDED", "Failed": "FAILED", "Error": "FAILED"}


def wait_retried(kfp_backend: KfpBackend, run_id: str, state: Callable[[], str], timeout: float = 1500) -> str:
    """After a retry of a failed run: its state, read by `state()`, once its workflow has ended again.

    Just after RetryRun the API can still answer FAILED (the persistence agent reports the
    workflow's last status for a moment while Argo restarts it: seen through the UI, the workflow
    Running and the run FAILED), so a plain wait for a final state may read the old one. The
    workflow is what RetryRun resets, so its phase is waited on; then the run's state, until it
    says the same (the agent's next report).
    """
    wait_for("the retried run's workflow running again", lambda: workflow_phase(kfp_backend, run_id) not in _ENDED, 120)
    wait_for("the retried run's workflow ended", lambda: workflow_phase(kfp_backend, run_id) in _ENDED, timeout)
    expected = _ENDED[workflow_phase(kfp_backend, run_id)]
    end = time.monotonic() + 120
    while (found := state()) != expected and time.monotonic() < end:
        time.sleep(2)
    return found


def workflow_phase(kfp_backend: KfpBackend, run_id: str) -> str:
    """The phase of the run's Argo Workflow ('' before it has one)."""
    return kfp_backend.kubectl("get", "workflows", "-l", f"pipeline/runid={run_id}", "-o",
                               "jsonpath={.items[*].status.phase}").strip()  # fmt: skip


def run_jobs(kfp_backend: KfpBackend, run_id: str) -> list[str]:
    """The run's PyTorchJobs, as `pytorchjob.kubeflow.org/<name>`."""
    # The launcher labels every job with the run it belongs to.
    out = kfp_backend.kubectl("get", "pytorchjobs", "-l", f"{LABEL_RUN_ID}={run_id}", "-o", "name")
    return out.split()


def launcher_pods(kfp_backend: KfpBackend, run_id: str, function: str) -> list[str]:
    """The run's step pods whose main container runs the component function `function`, oldest first."""
    pods = json.loads(kfp_backend.kubectl("get", "pods", "-l", f"pipeline/runid={run_id}", "-o", "json"))["items"]
    return sorted(
        (p["metadata"]["name"] for p in pods
         if function in next(c for c in p["spec"]["containers"] if c["name"] == "main").get("args", [])),
        key=lambda name: next(p for p in pods if p["metadata"]["name"] == name)["metadata"]["creationTimestamp"],
    )  # fmt: skip


TARGET = 0.95  # every shipped pipeline's test accuracy with its defaults
FRAMEWORKS = {"mnist_pytorch": 1, "mnist_chainermn": 1, "mnist_ps": 1, "compare_frameworks": 3}


def check_shipped_run(kfp_backend: KfpBackend, pipeline: str, run_id: str) -> None:
    """What a succeeded run of a shipped pipeline holds, read as the UI reads it (ML Metadata, the store).

    A Model and Metrics per training (the job's own metrics.json, test accuracy at TARGET), an HTML
    report per training (and compare_summary's), and each test accuracy in its step's log.
    """
    artifacts = kfp_backend.artifacts(run_id)
    models, metrics, reports = (
        [a for a in artifacts if a.type == t] for t in ("system.Model", "system.Metrics", "system.HTML")
    )
    trained = FRAMEWORKS[pipeline]
    summaries = 1 if pipeline == "compare_frameworks" else 0  # compare_summary's table of the three
    assert len(models) == len(metrics) == trained, [(a.type, a.name) for a in artifacts]
    assert len(reports) == trained + summaries, [(a.type, a.name) for a in artifacts]
    for model, metric in zip(sorted(models, key=lambda a: a.uri), sorted(metrics, key=lambda a: a.uri), strict=True):
        assert model.properties["status"] == "Succeeded", model.properties
        written = json.loads(model.objects["metrics.json"]["text"])  # the training job's own metrics.json
        assert metric.properties["test_accuracy"] == pytest.approx(written["test_accuracy"], abs=1e-6)
        assert metric.properties["test_accuracy"] >= TARGET, (model.properties["framework"], metric.properties)
        assert set(model.properties["files"]) <= set(model.objects), (model.properties["files"], model.objects)
    for report in reports:
        assert "<html" in report.objects["."]["text"].lower()
    # What the step printed is what the UI shows.
    printed = "\n".join(kfp_backend.step_logs(run_id, "pytorch_train") + kfp_backend.step_logs(run_id, "ps_train")
                        + kfp_backend.step_logs(run_id, "chainermn_train"))  # fmt: skip
    for metric in metrics:
        assert f"test_accuracy {metric.properties['test_accuracy']:.4f}" in printed, printed[-3000:]
