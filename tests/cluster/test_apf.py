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
        kind: cluster.kubectl("get", f"{kind}.flowcontrol.apiserver.k8s.io", "kubetrain-launchers-finish", "-o",
                              "jsonpath={.metadata.uid}")
        for kind in ("flowschema", "prioritylevelconfiguration")
    }  # fmt: skip
    yield uids
    cluster.kubectl("delete", "-f", str(APF), "--ignore-not-found")


def _classified(cluster: Cluster, token: str, method: str, path: str) -> str:
    """The FlowSchema UID the API server put a `method` request of `path` in, as that token's bearer."""
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
    request = urllib.request.Request(
        server["server"] + path, method=method, headers={"Authorization": f"Bearer {token}"}
    )
    try:
        with urllib.request.urlopen(request, context=context, timeout=30) as reply:
            return str(reply.headers["X-Kubernetes-PF-FlowSchema-UID"])
    except urllib.error.HTTPError as e:  # RBAC may refuse; the classification header is there anyway
        return str(e.headers["X-Kubernetes-PF-FlowSchema-UID"])


def test_the_shipped_flowschema_lifts_only_the_requests_on_a_steps_way_out(
    cluster: Cluster, shipped_apf: dict[str, str]
) -> None:
    cluster.kubectl("apply", "--server-side", "-f", "-", stdin=yaml.safe_dump(
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "pipeline-runner", "namespace": "kubeflow"}}
    ))  # fmt: skip
    token = cluster.kubectl("create", "token", "pipeline-runner", "-n", "kubeflow", "--duration", "10m").strip()
    ours = shipped_apf["flowschema"]
    ns = NAMESPACE

    # The job's delete: the level of its own.
    for method, path in (
        ("DELETE", f"/apis/kubeflow.org/v1/namespaces/{ns}/pytorchjobs/done"),
        ("DELETE", f"/apis/kubeflow.org/v2beta1/namespaces/{ns}/mpijobs/done"),
        ("DELETE", f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{ns}/jobsets/done"),
        ("DELETE", f"/apis/trainer.kubeflow.org/v1alpha1/namespaces/{ns}/trainjobs/done"),
    ):
        assert _classified(cluster, token, method, path) == ours, (method, path)
    # A pod's log is a long-running request: API Priority and Fairness neither classifies nor holds it.
    assert _classified(cluster, token, "GET", f"/api/v1/namespaces/{ns}/pods/done-master-0/log") == "None"
    # The bulk of a launcher's requests, and anything else, keep their default classification.
    for method, path in (
        ("POST", f"/apis/kubeflow.org/v1/namespaces/{ns}/pytorchjobs"),
        ("GET", f"/apis/kubeflow.org/v1/namespaces/{ns}/pytorchjobs"),
        ("GET", f"/api/v1/namespaces/{ns}/events"),
        ("GET", f"/api/v1/namespaces/{ns}/pods"),
        ("DELETE", f"/api/v1/namespaces/{ns}/pods/done-master-0"),
        ("GET", f"/api/v1/namespaces/{ns}/secrets"),
    ):
        assert _classified(cluster, token, method, path) != ours, (method, path)
