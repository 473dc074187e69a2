"""Helpers of the KFP-backend scenarios: `kfp.Client` against the real backend, and a run's artifacts.

Everything goes through what a user has: `kfp.Client` on the API server's HTTP port for uploads
and runs, and, for the artifacts, the same path the Kubeflow UI takes (the run's context in ML
Metadata, then the object store), read by tools/cluster/kfp/run_artifacts.py in the services venv.
"""

from __future__ import annotations

import base64
import json
import subprocess
import time
from dataclasses import dataclass
from http import HTTPStatus
from pathlib import Path
from typing import Any

import kfp
import yaml
from kfp_server_api.exceptions import ApiException  # type: ignore[import-untyped]

from tests.cluster import verified
from tools.cluster import images, node_config
from tools.cluster.controlplane import STATE, Cluster, ControlPlaneError
from tools.cluster.kfp import backend, manifests, services_venv
from tools.cluster.kfp.manifests import NAMESPACE
from tools.cluster.node import paths as node_paths

REPO_ROOT = Path(__file__).resolve().parents[2]
HOST = f"http://127.0.0.1:{backend.API_HTTP_PORT}"
EXPERIMENT = "kubetrain-e2e"
FINAL = {"SUCCEEDED", "FAILED", "SKIPPED", "CANCELED"}


@dataclass(frozen=True)
class Artifact:
    """One output artifact of a run, as MLMD and the object store have it."""

    type: str
    name: str
    uri: str
    properties: dict[str, Any]
    objects: dict[str, dict[str, Any]]  # path under the URI ("." for the URI itself) -> size, text


@dataclass(frozen=True)
class KfpBackend:
    """The backend as the scenarios use it."""

    cluster: Cluster
    client: kfp.Client
    build_seconds: float
    profile: str | None = None  # multi-user: the profile namespace of the runs; None: standalone, `kubeflow`

    @property
    def namespace(self) -> str:
        """Where the runs' workflows, pods and jobs are."""
        return self.profile or NAMESPACE

    def kubectl(self, *args: str, stdin: str | None = None) -> str:
        """kubectl as the admin, in the runs' namespace."""
        return self.cluster.kubectl("-n", self.namespace, *args, stdin=stdin)

    def start(self, package: Path, arguments: dict[str, Any], name: str) -> str:
        """Create a run of a compiled pipeline (as `create_run_from_pipeline_package` does); its run id."""
        run = self.client.create_run_from_pipeline_package(
            str(package), arguments=arguments, run_name=name, experiment_name=EXPERIMENT, namespace=self.profile
        )
        verified.note_run(package)
        return str(run.run_id)

    def wait(self, run_id: str, timeout: float = 1500) -> Any:
        """Wait for a final state; the run (kfp_server_api's V2beta1Run)."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            run = self.client.get_run(run_id)
            if str(run.state) in FINAL:
                return run
            time.sleep(3)
        raise AssertionError(
            f"run {run_id} not finished after {timeout:.0f}s: {run.state}\n{self.workflow_tail(run_id)}"
        )

    def workflow_tail(self, run_id: str) -> str:
        """The Argo Workflow of a run, its phase and message, and each failed node with its message,
        for an assertion's message (a failed run's own message is often empty)."""
        found = self.kubectl("get", "workflows", "-l", f"pipeline/runid={run_id}", "-o", "json")
        lines = []
        for workflow in json.loads(found).get("items", []):
            status = workflow.get("status", {})
            lines.append(f"{workflow['metadata']['name']} {status.get('phase')} {status.get('message', '')}")
            lines += [f"  node {node.get('displayName')} {node.get('phase')}: {node.get('message', '')}"
                      for node in status.get("nodes", {}).values() if node.get("phase") in ("Failed", "Error")]  # fmt: skip
            lines += self._failed_pod_logs(workflow["metadata"]["name"])
        return "\n".join(lines) or "(no workflow)"

    def _failed_pod_logs(self, workflow: str) -> list[str]:
        """The last lines of each failed step pod's `main` container: why a step exited non-zero is
        there, and the pod is gone once the cluster is (a red run in CI kept only 'exit code 1')."""
        pods = json.loads(self.kubectl("get", "pods", "-l", f"workflows.argoproj.io/workflow={workflow}",
                                       "--field-selector=status.phase=Failed", "-o", "json"))  # fmt: skip
        lines = []
        for pod in pods.get("items", []):
            name = pod["metadata"]["name"]
            try:
                tail = self.kubectl("logs", name, "-c", "main", "--tail=25")
            except ControlPlaneError as e:
                tail = f"(no log: {e})"
            lines += [f"  pod {name}, main's last lines:", *(f"    {line}" for line in tail.splitlines())]
        return lines

    def store_keys(self) -> tuple[str, str]:
        """The object store keys the runs' steps use: KFP's own in standalone, the profile's (minted by
        KFP's namespace hook, its prefixes only) in multi-user, where upstream's bucket policy denies
        even the admin a deep listing under another namespace's prefix."""
        if self.profile is None:
            return manifests.S3_ACCESS_KEY, manifests.S3_SECRET_KEY
        data = json.loads(self.kubectl("get", "secret", "mlpipeline-minio-artifact", "-o", "json"))["data"]
        return base64.b64decode(data["accesskey"]).decode(), base64.b64decode(data["secretkey"]).decode()

    def artifacts(self, run_id: str) -> list[Artifact]:
        """The run's output artifacts (tools/cluster/kfp/run_artifacts.py)."""
        venv = services_venv.ensure()
        gateway = node_config.GATEWAY
        access_key, secret_key = self.store_keys()
        done = subprocess.run(
            [str(services_venv.python(venv)), str(REPO_ROOT / "tools" / "cluster" / "kfp" / "run_artifacts.py"),
             "--run-id", run_id, "--mlmd", f"{gateway}:{backend.MLMD_PORT}", "--s3", f"http://{gateway}:{backend.S3_PORT}",
             "--access-key", access_key, "--secret-key", secret_key],
            capture_output=True, text=True, check=False, timeout=120, env=services_venv.environment(),
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
        return [Artifact(**a) for a in json.loads(done.stdout)["artifacts"]]

    def step_logs(self, run_id: str, function: str) -> list[str]:
        """The logs of the run's step pods (KFP's "launcher" role) that execute the component `function`."""
        pods = json.loads(self.kubectl("get", "pods", "-l", f"pipeline/runid={run_id}", "-o", "json"))["items"]
        logs = []
        for pod in pods:
            if pod["metadata"].get("annotations", {}).get("pipelines.kubeflow.org/runtime-role") != "launcher":
                continue
            main = next(c for c in pod["spec"]["containers"] if c["name"] == "main")
            if function in main.get("args", []):
                logs.append(self.kubectl("logs", pod["metadata"]["name"], "-c", "main"))
        return logs

    def kill_main_container(self, pod: str) -> None:
        """SIGKILL a pod's main container through the node's containerd (no SIGTERM first)."""
        status = json.loads(self.kubectl("get", "pod", pod, "-o", "json"))["status"]
        main = next(c for c in status["containerStatuses"] if c["name"] == "main")
        socket = node_paths(STATE, self.cluster.bin_dir).containerd_socket
        subprocess.run(
            [str(self.cluster.bin_dir / "ctr"), "--address", str(socket), "--namespace", "k8s.io", "tasks", "kill",
             "--signal", "SIGKILL", main["containerID"].removeprefix("containerd://")],
            check=True, capture_output=True, timeout=30,
        )  # fmt: skip


def prepare(cluster: Cluster, names: list[str]) -> KfpBackend:
    """Build and push the kubetrain images `names` and connect a kfp.Client to the backend."""
    assert backend.running(STATE), "the KFP backend is not running (KUBETRAIN_KFP=0?)"
    built = images.ensure(names, STATE / "images.log", node=node_paths(STATE, cluster.bin_dir))
    client = kfp.Client(host=HOST)
    # Once, before scenarios start runs side by side: kfp.Client's get-or-create of an experiment
    # by name is not atomic. The backend keeps names unique, so when another pytest session's
    # create came first (today only the KFP half calls this), this one gets 409 (AlreadyExists).
    try:
        client.create_experiment(EXPERIMENT)
    except ApiException as e:
        if e.status != HTTPStatus.CONFLICT:
            raise
    return KfpBackend(cluster, client, built.seconds)


def compiled_pipelines() -> list[Path]:
    """Every committed pipeline YAML (kfp ≥ 2.15 forms; pipelines/kfp-pre-2.15 are for older servers)."""
    return sorted((REPO_ROOT / "pipelines").glob("*.yaml"))


def compiled_components() -> list[Path]:
    """Every committed component YAML (kfp ≥ 2.15 forms)."""
    from kubetrain.components import compiled_yaml

    return sorted(compiled_yaml().values())


def package_name(package: Path) -> str:
    """What a committed YAML is named by: its component's folder (components/<name>/component.yaml), or its file."""
    return package.parent.name if package.name == "component.yaml" else package.stem


def pipeline_name(package: Path) -> str:
    """The pipeline's name in its compiled YAML."""
    spec: dict[str, Any] = next(yaml.safe_load_all(package.read_text()))
    return str(spec["pipelineInfo"]["name"])
