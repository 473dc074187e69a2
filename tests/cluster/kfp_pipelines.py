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
import time
from pathlib import Path

from kfp import compiler

from kubetrain.names import LABEL_RUN_ID
from tests.cluster import kfp_runs
from tests.cluster.kfp_runs import KfpBackend

COMPONENTS = kfp_runs.REPO_ROOT / "components"
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


def users_pipeline(tmp_path: Path, name: str, body: str) -> Path:
    """Write a user's pipeline file (the prelude, then `body` defining `pipeline`), compile it; the YAML."""
    source = tmp_path / f"{name}.py"
    prelude = USER_PRELUDE.format(download=str(COMPONENTS / "download_dataset.yaml"),
                                   train=str(COMPONENTS / "pytorch_train.yaml"))  # fmt: skip
    source.write_text(prelude + textwrap.dedent(body))
    package = tmp_path / f"{name}.yaml"
    compiler.Compiler().compile(runpy.run_path(str(source))["pipeline"], str(package))
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
    compiler.Compiler().compile(runpy.run_path(str(source))["pipeline"], str(package))
    assert "PIPELINE_JOB_ID" not in source.read_text() and "pipeline_job_uuid" not in package.read_text()
    return package


def wait_for(what: str, check: object, timeout: float) -> None:
    """Poll `check()` every 2 s until it is truthy; fail naming `what` after `timeout` seconds."""
    assert callable(check)
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if check():
            return
        time.sleep(2)
    raise AssertionError(f"{what}: not within {timeout:.0f}s")


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
