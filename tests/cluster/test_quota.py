"""A namespace's ResourceQuota, as a Kubeflow profile sets it: a job that can never fit fails at once.

Against the real kube-apiserver's ResourceQuota admission and the real controllers that create the
pods (the training-operator for a PyTorchJob, the Job controller for a JobSet's child Jobs), whose
FailedCreate events are all that says why no pod appears. The step must fail within seconds with
one line naming the quota, the request and the room, not wait out its start timeout (600 s here).
"""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from kubetrain.errors import ExitCode
from tests.cluster.jobs import KINDS, finish, launch, render, simulate
from tools.cluster.controlplane import NAMESPACE, Cluster

pytestmark = [pytest.mark.timeout(600)]
QUOTA = "kf-resource-quota"


@pytest.fixture
def quota(cluster: Cluster) -> Iterator[None]:
    """The namespace limited to 2 CPUs of requests while the test runs (the scenarios run one at a time)."""
    body = {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": QUOTA},
            "spec": {"hard": {"requests.cpu": "2"}}}  # fmt: skip
    cluster.kubectl("apply", "-n", NAMESPACE, "-f", "-", stdin=yaml.safe_dump(body))
    try:
        yield
    finally:
        cluster.kubectl("delete", "resourcequota", QUOTA, "-n", NAMESPACE, "--ignore-not-found")


@pytest.mark.parametrize("case", ["pytorch", "psjob"])
def test_a_job_larger_than_the_quota_fails_the_step_within_seconds(
    cluster: Cluster, quota: None, tmp_path: Path, case: str
) -> None:
    kind = KINDS[case]
    kind = dataclasses.replace(kind, render=(*kind.render, "--cpu", "4"))
    name = f"quota-{case}"
    cluster.kubectl("delete", kind.plural, name, "-n", NAMESPACE, "--ignore-not-found", "--wait=true")
    manifest = simulate(render(kind, name))
    started = time.monotonic()
    code, result, err = finish(launch(cluster, manifest, tmp_path, "--start-timeout", "600", "--timeout", "900"), 300)
    took = time.monotonic() - started
    assert code == ExitCode.JOB_FAILED, err[-4000:]
    # "used" is what the namespace's other pods hold meanwhile (the quota counts every pod in it).
    line = rf"pods refused by ResourceQuota {QUOTA} in {NAMESPACE}: requested requests.cpu=4, used \d+m? of 2\."
    assert re.search(line, err), err[-4000:]
    assert result.get("phase") == "Failed", result
    # Not the start timeout: the launcher's first looks at the events (5 s, then 10 s, ...) find it.
    assert took < 300, f"{took:.0f} s"
    cluster.kubectl("delete", kind.plural, name, "-n", NAMESPACE, "--wait=true")  # kept for debugging: it failed
