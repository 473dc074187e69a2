"""A chatty local pod cannot fill the disk: its captured log is capped by rotation, as the kubelet caps it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kubetrain.backends.local.backend import LocalBackend
from kubetrain.status import JobPhase
from tests.integration.local_jobs import _follow

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

CAP = 4096
LINES = 5000  # about 330 kB of output, some eighty times the cap
CHATTY = f"for i in range({LINES}): print(f'line {{i:05d}} ' + 'x' * 50)"


def test_a_chatty_pods_log_keeps_two_capped_files_and_its_newest_lines(tmp_path: Path) -> None:
    backend = LocalBackend(tmp_path / "root", max_log_bytes=CAP, max_grace_seconds=1.0)
    template = {"spec": {"containers": [{"name": "pytorch", "image": "img", "command": ["python", "-c", CHATTY]}]}}
    manifest = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "chatty"},
        "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "restartPolicy": "Never", "template": template}}},
    }
    try:
        ref = backend.submit(manifest)
        status, _ = _follow(backend, ref)
        assert status.phase is JobPhase.SUCCEEDED
        logs = backend.job_dir(ref) / "logs"
        assert sorted(p.name for p in logs.iterdir()) == ["chatty-master-0.0.log", "chatty-master-0.0.log.1"]
        assert all(p.stat().st_size <= CAP for p in logs.iterdir())
        lines = list(backend.pod_log(ref, backend.pods(ref)[0], follow=False))
    finally:
        backend.close()
    # The current file says where the previous part is and how much was dropped before it.
    note = re.fullmatch(
        rf"\[kubetrain: the log passed {CAP} bytes; the previous part is in chatty-master-0\.0\.log\.1, "
        r"(\d+) earlier bytes were dropped\]",
        lines[0],
    )
    assert note is not None, lines[0]
    assert int(note.group(1)) > 300_000
    # What is kept is the end of the output, in order.
    numbers = [int(line.split()[1]) for line in lines[1:]]
    assert numbers == list(range(LINES - len(numbers), LINES))
