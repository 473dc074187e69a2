"""The launcher's pod stream and primary-pod choice on the local backend, with real processes.

The same behaviour the stand-in API server checks for the Kubernetes backend
(tests/integration/test_k8s_pod_watch.py): an MPI TrainJob's log is its launcher's, never a
node's (a node waits for mpirun and its log never ends); a crash is reported as it happens and a
pod that is gone by the time the job fails (here: a JobSet restart replaced it) is still named
in the failure, with the tail read when it crashed.
"""

from __future__ import annotations

import itertools
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kubetrain.backends.base import PodInfo
from kubetrain.backends.local.backend import LocalBackend
from kubetrain.errors import JobFailedError
from kubetrain.launcher import AwaitOptions, Tuning, run_job
from kubetrain.manifests import build_trainjob
from kubetrain.specs import JobMeta, TrainJobSpec
from kubetrain.specs.common import ReplicaSpec

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

TUNING = Tuning(pending_poll_seconds=0.2, watch_window_seconds=5.0, log_drain_seconds=10.0, log_tail_lines=5)
CRASH = "import sys; print('loading shard 3', flush=True); sys.exit('ValueError: corrupt record 17')"


@pytest.fixture
def backend(tmp_path: Path) -> Iterator[LocalBackend]:
    b = LocalBackend(tmp_path / "root", restart_backoff_seconds=0.05, max_grace_seconds=1.0)
    yield b
    b.close()


def launch(backend: LocalBackend, manifest: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    try:
        run_job(manifest, backend=backend, options=AwaitOptions(timeout_seconds=90, tuning=TUNING),
                log_sink=lines.append)  # fmt: skip
    except JobFailedError as e:
        e.add_note("\n".join(lines))
        raise
    return lines


def test_an_mpi_trainjob_on_the_local_backend_follows_its_launcher(backend: LocalBackend) -> None:
    program = ("python", "-c", "print('mpirun: 2 ranks'); print('rank 0: accuracy 0.97')")
    trainer = ReplicaSpec(image="registry.example/chainermn:1", replicas=2, command=program)
    manifest = build_trainjob(TrainJobSpec(meta=JobMeta(name="tjm"), runtime="kubetrain-mpi", trainer=trainer))
    lines = launch(backend, manifest)
    followed = [line for line in lines if line.startswith("following the log of pod")]
    assert len(followed) == 1 and " [launcher 0], container node" in followed[0], lines
    assert any(line.endswith("] rank 0: accuracy 0.97") for line in lines), lines
    # The nodes (mpirun's ssh targets) ran all along, and the launcher waited for them to be Ready.
    assert any("[node 1]: Running" in line for line in lines), lines


def test_a_crash_looping_pod_replaced_before_the_job_fails_is_named_with_its_tail(backend: LocalBackend) -> None:
    container = {"name": "main", "image": "registry.example/js:1", "command": ["python", "-c", CRASH]}
    job = {"backoffLimit": 1, "template": {"spec": {"restartPolicy": "OnFailure", "containers": [container]}}}
    manifest = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "crash"},
        # Each attempt's pod crashes twice (past backoffLimit 1); the restart replaces it with a new pod.
        "spec": {
            "replicatedJobs": [{"name": "master", "template": {"spec": job}}],
            "failurePolicy": {"maxRestarts": 1},
        },
    }
    with pytest.raises(JobFailedError) as info:
        launch(backend, manifest)
    err = info.value
    lines = "\n".join(err.__notes__)
    assert "ReachedMaxRestarts" in str(err)
    assert len(err.log_tails) == 2, err.log_tails  # the replaced pod of attempt 0 and the pod of attempt 1
    for tail in err.log_tails.values():
        # stdout's line and stderr's come through two pipes, as a kubelet reads them: either may be
        # read first (CI once saw stderr's first), so the tail holds both, in either order.
        assert sorted(tail.splitlines()) == ["ValueError: corrupt record 17", "loading shard 3"], err.log_tails
    [gone] = [key for key in err.log_tails if f"{key} (pod deleted since; read when it crashed:" in str(err)]
    assert f"pod {gone.split('/')[0]}: deleted" in lines
    assert "CrashLoopBackOff" in lines  # as it happened, while the job was still running


def test_local_pod_watch_tells_of_each_change_and_closes_from_another_thread(backend: LocalBackend) -> None:
    script = "import time; time.sleep(30)"
    container = {"name": "main", "image": "registry.example/js:1", "command": [sys.executable, "-c", script]}
    job = {"template": {"spec": {"restartPolicy": "Never", "containers": [container]}}}
    manifest = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "watched"},
        "spec": {"replicatedJobs": [{"name": "master", "template": {"spec": job}}]},
    }
    ref = backend.submit(manifest)
    stream = backend.watch_pods(ref, timeout_seconds=60)
    sets: list[list[PodInfo]] = []
    running = threading.Event()

    def read() -> None:
        for pods in stream:
            sets.append(pods)
            if pods and pods[0].phase == "Running":
                running.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    assert running.wait(30), sets
    stream.close()
    reader.join(10)
    assert not reader.is_alive(), "close() must end the iteration"
    assert all(a != b for a, b in itertools.pairwise(sets)), "a set is sent only when something changed"
    backend.delete(ref)
