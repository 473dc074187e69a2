"""What a step sees on the real KFP backend against what it sees under `kfp.local` (`kubetrain run`).

One probe component, in kubetrain's launcher image on the backend and as a local process under
`kubetrain run`, records its placeholders, its output artifact's path and URI, its user, working
directory and environment. The differences are asserted one by one, each as the README's table
("kfp.local and the real backend") states it, so a change on either side fails here first.
"""

from __future__ import annotations

import json
import runpy
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path
from typing import Any

import pytest
from kfp import compiler

from tests.cluster import kfp_runs
from tests.cluster.kfp_runs import KfpBackend
from tools.cluster.controlplane import Cluster

pytestmark = pytest.mark.timeout(1200)

PROBE = textwrap.dedent("""
    from kfp import dsl
    from kfp.dsl import Artifact, Output

    @dsl.component(base_image="ghcr.io/kubetrain/launcher:0.1.0", install_kfp_package=False)
    def probe(run_id: str, run_name: str, task_id: str, task_name: str, seen: Output[Artifact]) -> str:
        import json
        import os
        import sys

        info = {
            "run_id": run_id, "run_name": run_name, "task_id": task_id, "task_name": task_name,
            "artifact_path": seen.path, "artifact_uri": seen.uri, "artifact_name": seen.name,
            "uid": os.getuid(), "gid": os.getgid(), "cwd": os.getcwd(), "python": sys.executable,
            "home": os.environ.get("HOME", ""), "env": sorted(os.environ),
            "parent_writable": os.access(os.path.dirname(seen.path), os.W_OK),
        }
        with open(seen.path, "w") as f:
            json.dump(info, f)
        return json.dumps(info)

    @dsl.pipeline(name="probe")
    def probe_pipeline() -> None:
        probe(run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER, run_name=dsl.PIPELINE_JOB_NAME_PLACEHOLDER,
              task_id=dsl.PIPELINE_TASK_ID_PLACEHOLDER, task_name=dsl.PIPELINE_TASK_NAME_PLACEHOLDER)
""")


@pytest.fixture(scope="module")
def kfp_backend(cluster: Cluster) -> KfpBackend:
    """The backend, with the launcher image built and pushed."""
    return kfp_runs.prepare(cluster, ["launcher"])


def _local(source: Path, workdir: Path) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-m", "kubetrain", "run", str(source), "--json"], cwd=workdir,
                          capture_output=True, text=True, check=False, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    outcome = json.loads(done.stdout.strip().splitlines()[-1])
    seen: dict[str, Any] = json.loads(outcome["tasks"]["probe"]["parameters"]["Output"])
    return seen


def _backend(kfp_backend: KfpBackend, source: Path, tmp_path: Path) -> tuple[str, dict[str, Any], str]:
    package = tmp_path / "probe.yaml"
    compiler.Compiler().compile(runpy.run_path(str(source))["probe_pipeline"], str(package))
    run_id = kfp_backend.start(package, {}, f"probe-{uuid.uuid4().hex[:6]}")
    run = kfp_backend.wait(run_id, timeout=600)
    assert run.state == "SUCCEEDED", f"{run.state} {run.error}\n{kfp_backend.workflow_tail(run_id)}"
    (artifact,) = [a for a in kfp_backend.artifacts(run_id) if a.name == "seen"]
    seen: dict[str, Any] = json.loads(artifact.objects["."]["text"])
    return run_id, seen, artifact.uri


def test_what_a_step_sees_on_the_backend_and_under_kfp_local(kfp_backend: KfpBackend, tmp_path: Path) -> None:
    source = tmp_path / "probe_pipeline.py"
    source.write_text(PROBE)
    local = _local(source, tmp_path)
    run_id, remote, uri = _backend(kfp_backend, source, tmp_path)
    (tmp_path / "seen.json").write_text(json.dumps({"local": local, "backend": remote}, indent=1))

    # The same on both: the task's name, and an artifact path whose directory the step can write.
    assert local["task_name"] == remote["task_name"] == "probe"
    assert local["parent_writable"] and remote["parent_writable"]
    assert local["artifact_name"] == remote["artifact_name"] == "seen"
    # The run id is the KFP run's id on the backend (what kfp.Client returned).
    assert remote["run_id"] == run_id
    # The artifact: a store URI and its local mirror under /minio on the backend, files locally.
    assert remote["artifact_uri"] == uri and uri.startswith("minio://mlpipeline/v2/artifacts/probe/")
    assert remote["artifact_path"] == "/minio/" + uri.removeprefix("minio://")
    assert Path(local["artifact_path"]).is_absolute() and not local["artifact_uri"].startswith("minio://")
    # The step's user: the image's (uid 1000, the launcher image's USER) on the backend; locally
    # the caller's own.
    assert remote["uid"] == 1000
    # Environment: the pod's on the backend names KFP's pod and the Kubernetes service;
    # kfp.local's process has neither.
    for name in ("KFP_POD_NAME", "KFP_POD_UID", "KUBERNETES_SERVICE_HOST"):
        assert name in remote["env"] and name not in local["env"], name
