"""TrainJobs on the local backend: the runtime resolved as the Trainer does, run as local processes."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from kubetrain.backends.local.backend import LocalBackend
from kubetrain.data.download import download
from kubetrain.errors import ManifestError
from kubetrain.manifests import build_manifest
from kubetrain.manifests.runtimes import torch_distributed_runtime
from kubetrain.presets import JobSettings, TrainingParams, mpi_trainjob_spec, pytorch_trainjob_spec
from kubetrain.specs import RunPolicy
from kubetrain.status import JobPhase
from tests.integration.local_jobs import _follow

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


@pytest.fixture(scope="module")
def digits(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("data") / "digits"
    download("builtin:digits", out, quiet=True)
    return out


def _params(digits: Path, out: Path, epochs: int = 2) -> TrainingParams:
    return TrainingParams(data_dir=str(digits), output_dir=str(out), checkpoint_dir=None, epochs=epochs)


def test_pytorch_and_chainermn_trainjobs_train_on_the_digits(tmp_path: Path, digits: Path) -> None:
    backend = LocalBackend(tmp_path / "root", max_grace_seconds=1.0)
    try:
        for name, spec, world in (
            (
                "tj-torch",
                pytorch_trainjob_spec(JobSettings(name="tj-torch", params=_params(digits, tmp_path / "t")), workers=1),
                2,
            ),
            (
                "tj-mpi",
                mpi_trainjob_spec(JobSettings(name="tj-mpi", params=_params(digits, tmp_path / "m")), workers=2),
                2,
            ),
        ):
            ref = backend.submit(build_manifest(spec))
            status, _ = _follow(backend, ref)
            assert status.phase is JobPhase.SUCCEEDED, status
            out = tmp_path / ("t" if name == "tj-torch" else "m")
            metrics = json.loads((out / "metrics.json").read_text())
            assert metrics["world_size"] == world
            assert metrics["test_accuracy"] > 0.85
            assert {p.replica_type for p in backend.pods(ref)} >= {"node"}
    finally:
        backend.close()


def test_a_failing_trainer_fails_the_trainjob_and_the_deadline_is_enforced(tmp_path: Path) -> None:
    fail, slow = tmp_path / "fail.py", tmp_path / "slow.py"
    fail.write_text("raise SystemExit(3)\n")
    slow.write_text("import time\ntime.sleep(120)\n")
    # The shipped runtime's Job keeps the batch default of 6 retries, each start a torchrun (seconds
    # of torch import): the same runtime with a backoff limit of 1 fails the same way in 2 starts.
    runtime = torch_distributed_runtime()
    runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["backoffLimit"] = 1
    backend = LocalBackend(tmp_path / "root", max_grace_seconds=1.0, restart_backoff_seconds=0.05, runtimes=[runtime])
    try:
        failing = pytorch_trainjob_spec(
            JobSettings(name="tj-fail", params=TrainingParams()), program=("python", str(fail))
        )
        ref = backend.submit(build_manifest(failing))
        status, _ = _follow(backend, ref)
        assert status.phase is JobPhase.FAILED
        assert status.reason != "DeadlineExceeded"
        assert "BackoffLimitExceeded" in status.message, status.message
        assert len(list((backend.job_dir(ref) / "logs").glob("tj-fail-node-0-0-*.log"))) == 2  # a start and a retry
        waiting = pytorch_trainjob_spec(
            JobSettings(name="tj-slow", params=TrainingParams(), run_policy=RunPolicy(active_deadline_seconds=2)),
            program=("python", str(slow)),
        )
        status, _ = _follow(backend, backend.submit(build_manifest(waiting)))
        assert status.phase is JobPhase.FAILED
        assert status.reason == "DeadlineExceeded"
    finally:
        backend.close()


def test_an_unknown_runtime_is_refused_before_anything_runs(tmp_path: Path) -> None:
    backend = LocalBackend(tmp_path / "root")
    try:
        manifest = build_manifest(
            pytorch_trainjob_spec(JobSettings(name="tj-x", params=TrainingParams()), runtime="nope")
        )
        with pytest.raises(ManifestError, match="ClusterTrainingRuntime 'nope' is not known to the local backend"):
            backend.submit(manifest)
        assert not list((tmp_path / "root" / "jobs").glob("*/tj-x-*"))
    finally:
        backend.close()


def test_a_runtime_given_to_the_backend_is_what_a_trainjob_runs_on(tmp_path: Path) -> None:
    """A team's own runtime (here the torch one renamed, with an env var of its own in the node
    container) replaces the shipped ones: its settings reach the program, and a runtime not given
    is refused."""
    runtime = copy.deepcopy(torch_distributed_runtime())
    runtime["metadata"]["name"] = "team-torch"
    node = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    node["containers"][0]["env"] = [{"name": "TEAM", "value": "blue"}]
    seen, script = tmp_path / "seen.txt", tmp_path / "show.py"
    script.write_text(
        f"import os\nopen({str(seen)!r}, 'a').write(os.environ['TEAM'] + ' ' + os.environ['RANK'] + '\\n')\n"
    )
    backend = LocalBackend(tmp_path / "root", max_grace_seconds=1.0, runtimes=[runtime])
    try:
        spec = pytorch_trainjob_spec(JobSettings(name="tj-team", params=TrainingParams()), runtime="team-torch",
                                     workers=1, program=("python", str(script)))  # fmt: skip
        status, _ = _follow(backend, backend.submit(build_manifest(spec)))
        assert status.phase is JobPhase.SUCCEEDED, status
        assert sorted(seen.read_text().split("\n")[:-1]) == ["blue 0", "blue 1"]
        shipped = pytorch_trainjob_spec(JobSettings(name="tj-shipped", params=TrainingParams()))
        with pytest.raises(ManifestError, match="'torch-distributed' is not known to the local backend"):
            backend.submit(build_manifest(shipped))
    finally:
        backend.close()
