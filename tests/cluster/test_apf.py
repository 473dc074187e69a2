"""deploy/apf.yaml against the real API server's API Priority and Fairness.

The file is applied as shipped; a token of the real service account it names (`pipeline-runner`
in `kubeflow`) makes requests, and the API server's own answer says where each was classified
(the X-Kubernetes-PF-FlowSchema-UID and -PriorityLevel-UID headers, sent whatever the status:
APF classifies before RBAC decides). Its effect at N = 1,000 launchers is measured by
bench/scale.py --apf both (docs/benchmarks.md).
"""

from __future__ import annotations

import base64
import ssl
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tools.cluster.controlplane import NAMESPACE, REPO_ROOT, Cluster

pytestmark = [pytest.mark.timeout(300)]

APF = REPO_ROOT / "deploy" / "apf.yaml"


@pytest.fixture
def shipped_apf(cluster: Cluster) -> Iterator[dict[str, str]]:
    """deploy/apf.yaml applied as it is; the UIDs of its FlowSchema and PriorityLevelConfiguration."""
    cluster.kubectl("apply", "--server-side", "-f", str(APF))
    uids = {
        kind: cluster.kubectl("get", f"{kind}.flowcontrol.apiserver.k8s.io", "kubetrain-launchers", "-o",
                              "jsonpath={.metadata.uid}")
        for kind in ("flowschema", "prioritylevelconfiguration")
    }  # fmt: skip
    yield uids
    cluster.kubectl("delete", "-f", str(APF), "--ignore-not-found")


def _classified(cluster: Cluster, token: str, path: str) -> str:
    """The FlowSchema UID the API server put a GET of `path` in, as that token's bearer."""
    config = yaml.safe_load(cluster.kubeconfig.read_text())
    server = config["clusters"][0]["cluster"]
    context = ssl.create_default_context()
    if "certificate-authority-data" in server:
        with tempfile.NamedTemporaryFile("wb", suffix=".crt", delete=False) as ca:
            ca.write(base64.b64decode(server["certificate-authority-data"]))
        context.load_verify_locations(ca.name)
        Path(ca.name).unlink()
    else:
        context.load_verify_locations(server["certificate-authority"])
    request = urllib.request.Request(server["server"] + path, headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(request, context=context, timeout=30) as reply:
            return str(reply.headers["X-Kubernetes-PF-FlowSchema-UID"])
    except urllib.error.HTTPError as e:  # RBAC may refuse; the classification header is there anyway
        return str(e.headers["X-Kubernetes-PF-FlowSchema-UID"])


def test_the_shipped_flowschema_classifies_pipeline_runners_launcher_requests(
    cluster: Cluster, shipped_apf: dict[str, str]
) -> None:
    cluster.kubectl("apply", "--server-side", "-f", "-", stdin=yaml.safe_dump(
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "pipeline-runner", "namespace": "kubeflow"}}
    ))  # fmt: skip
    token = cluster.kubectl("create", "token", "pipeline-runner", "-n", "kubeflow", "--duration", "10m").strip()
    ours = shipped_apf["flowschema"]

    for path in (
        f"/apis/kubeflow.org/v1/namespaces/{NAMESPACE}/pytorchjobs",
        f"/apis/kubeflow.org/v2beta1/namespaces/{NAMESPACE}/mpijobs",
        f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{NAMESPACE}/jobsets",
        f"/apis/trainer.kubeflow.org/v1alpha1/namespaces/{NAMESPACE}/trainjobs",
        f"/api/v1/namespaces/{NAMESPACE}/pods",
        f"/api/v1/namespaces/{NAMESPACE}/events",
    ):
        assert _classified(cluster, token, path) == ours, path
    # What the launcher does not do keeps its default classification.
    assert _classified(cluster, token, f"/api/v1/namespaces/{NAMESPACE}/configmaps") != ours
    assert _classified(cluster, token, f"/api/v1/namespaces/{NAMESPACE}/secrets") != ours
