"""A local job cannot write outside the local root through its volumes: the audit's two ways, end to end.

Each job's replica would write a file into the directory its volume mount names; the user's
directory beside the root must stay empty, and the job must say why it did not run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kubetrain.backends.local.backend import LocalBackend
from kubetrain.errors import ManifestError
from kubetrain.status import JobPhase
from tests.integration.local_jobs import _follow

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def _job(volume: dict[str, Any], mount: dict[str, Any]) -> dict[str, Any]:
    container = {
        "name": "pytorch",
        "image": "registry.example/t:1",
        "command": ["sh", "-c", "echo written > /mnt/file"],
        "volumeMounts": [{"name": volume["name"], "mountPath": "/mnt", **mount}],
    }
    template = {"spec": {"containers": [container], "volumes": [volume]}}
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "escape"},
        "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "restartPolicy": "Never", "template": template}}},
    }


def test_an_empty_dir_named_as_a_path_is_refused_before_anything_runs(tmp_path: Path) -> None:
    outside = tmp_path / "users-files"
    outside.mkdir()
    root = tmp_path / "root"
    backend = LocalBackend(root, max_grace_seconds=1.0)
    # pod_dir/volumes/NAME, pod_dir being root/jobs/default/escape-UID/pods/escape-master-0: seven levels up is tmp_path.
    name = "../../../../../../../users-files/ESCAPED"
    try:
        with pytest.raises(ManifestError, match=r'volumes\[0\]\.name: Invalid value: "\.\./.*ESCAPED": a lowercase'):
            backend.submit(_job({"name": name, "emptyDir": {}}, {}))
    finally:
        backend.close()
    assert list(outside.iterdir()) == []
    assert not (root / "jobs").exists() or list((root / "jobs").rglob("escape-*")) == []


def test_a_subpath_through_a_link_out_of_the_claim_fails_the_pod_with_the_kubelets_words(tmp_path: Path) -> None:
    outside = tmp_path / "users-files"
    outside.mkdir()
    backend = LocalBackend(tmp_path / "root", max_grace_seconds=1.0)
    try:
        (backend.claim_dir("work") / "link").symlink_to(outside)
        volume = {"name": "work", "persistentVolumeClaim": {"claimName": "work"}}
        status, _ = _follow(backend, backend.submit(_job(volume, {"subPath": "link/x"})))
    finally:
        backend.close()
    assert status.phase is JobPhase.FAILED
    assert 'failed to prepare subPath for volumeMount "work" of container "pytorch"' in status.message
    assert "outside the volume" in status.message
    assert list(outside.iterdir()) == []
