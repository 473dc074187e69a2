"""The task identity a training step reads from its output URI, on the KFP backend and under kfp.local.

The URIs are in the forms the 2.17 sources write: the backend driver's ``provisionOutputs``
(``<root>/<pipeline>/<run uuid>/<task>/<uuid>/<output>``, root ``minio://mlpipeline/v2/artifacts`` by
default, also as README's table measured it) and kfp.local's ``construct_local_task_root`` (copied
from tests/unit/data/kfp_local_mnist_pytorch.txt, a real run's log), with ParallelFor iterations
under ``for-loop-N-iteration-I``. The job names made from them must differ between tasks and
iterations and stay the same for a retry (which reuses the driver's URIs).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kubetrain.errors import InvalidInputError
from kubetrain.kfp_runtime import frameworks, train_step
from kubetrain.kfp_runtime.frameworks import PyTorchRequest
from kubetrain.kfp_runtime.task_identity import TaskIdentity, from_output_uri, resolve_identity

RUN = "5f0c7b62-3a0e-4f63-9a61-2d2f0f3c1a9e"
SALT_A = "0d5e6f9a-8b7c-4d3e-9f21-6a5b4c3d2e1f"
SALT_B = "7c1b2a3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"
BACKEND = "minio://mlpipeline/v2/artifacts/mnist-pytorch/{run}/{task}/{salt}/{output}"
LOCAL_RUN = "mnist-pytorch-2026-11-24-13-22-02-306842"
LOCAL_ROOT = f"/home/me/runs/mnist_pytorch-20261124-132202-295766/kfp/{LOCAL_RUN}"


def _name(identity: TaskIdentity | None) -> str:
    """The job name a training step makes for the task `identity` names (which must be found)."""
    assert identity is not None, "the URI names no KFP task"
    request = PyTorchRequest(run_id=identity.run_id, task_id=identity.task_id, task_name=identity.task_name)
    return train_step.job_name(request)


def _backend(task: str = "pytorch-train", salt: str = SALT_A, output: str = "model", run: str = RUN) -> str:
    return BACKEND.format(run=run, task=task, salt=salt, output=output)


def test_the_backend_uri_gives_run_task_and_execution() -> None:
    assert from_output_uri(_backend()) == TaskIdentity(
        run_id=RUN, task_id=SALT_A, task_name="pytorch-train", source="kfp-backend"
    )
    # Another pipeline root (an s3 bucket with a prefix, a query string) reads the same.
    s3 = f"s3://team-bucket/kfp/roots/mnist-pytorch/{RUN}/pytorch-train/{SALT_A}/model?region=eu-1"
    assert from_output_uri(s3) == from_output_uri(_backend())


def test_backend_tasks_and_iterations_get_distinct_jobs_and_a_retry_the_same() -> None:
    first = _name(from_output_uri(_backend()))
    # Every output of one execution names the same job: the retry re-reads the same executor input.
    assert _name(from_output_uri(_backend(output="metrics"))) == first
    # Another task of the DAG; another ParallelFor iteration (same task name, its own driver uuid); another run.
    others = [_backend(task="pytorch-train-2", salt=SALT_B), _backend(salt=SALT_B), _backend(run=SALT_B)]
    names = {_name(from_output_uri(uri)) for uri in others}
    assert len(names) == 3 and first not in names


def test_the_kfp_local_uri_gives_the_run_and_the_task_path() -> None:
    found = from_output_uri(f"{LOCAL_ROOT}/pytorch-train/model")
    assert found == TaskIdentity(
        run_id=LOCAL_RUN, task_id="pytorch-train", task_name="pytorch-train", source="kfp-local"
    )
    iteration = from_output_uri(f"{LOCAL_ROOT}/for-loop-2-iteration-1/pytorch-train/model")
    assert iteration is not None
    assert (iteration.run_id, iteration.task_id) == (LOCAL_RUN, "for-loop-2-iteration-1/pytorch-train")
    names = {
        _name(from_output_uri(f"{LOCAL_ROOT}/{where}/model"))
        for where in ("pytorch-train", "pytorch-train-2", "for-loop-2-iteration-0/pytorch-train",
                      "for-loop-2-iteration-1/pytorch-train")
    }  # fmt: skip
    assert len(names) == 4


@pytest.mark.parametrize(
    "uri",
    [
        "/tmp/somewhere/model",  # a caller's own artifact
        f"minio://mlpipeline/v2/artifacts/mnist-pytorch/{RUN}/pytorch-train/model",  # no per-execution uuid
        "gs://bucket/123456/mnist-pytorch-20261124/pytorch-train_789/model",  # another runner's form
        "",
    ],
)
def test_an_unknown_uri_is_not_guessed(uri: str) -> None:
    assert from_output_uri(uri) is None
    with pytest.raises(InvalidInputError, match=r"run_id, task_id, task_name: not given.*pass run_id, task_id and"):
        resolve_identity({}, output_uri=uri)


def test_explicit_inputs_override_field_by_field() -> None:
    given = {"run_id": "r-1", "task_id": "t-1", "task_name": "train"}
    assert resolve_identity(given, output_uri="") == TaskIdentity(**given, source="inputs")
    mixed = resolve_identity({"task_name": "mine", "run_id": ""}, output_uri=_backend())
    assert (mixed.run_id, mixed.task_id, mixed.task_name, mixed.source) == (RUN, SALT_A, "mine", "kfp-backend")


def test_a_literal_placeholder_is_refused_with_the_fix() -> None:
    with pytest.raises(InvalidInputError, match=r"run_id: got '\{\{\$\.pipeline_job_uuid\}\}'; leave it out"):
        resolve_identity({"run_id": "{{$.pipeline_job_uuid}}"}, output_uri=_backend())


class _Artifact:
    def __init__(self, uri: str, metadata: dict[str, Any] | None = None) -> None:
        self.uri = uri
        self.path = uri
        self.metadata: dict[str, Any] = dict(metadata or {})

    def log_metric(self, metric: str, value: float) -> None:
        self.metadata[metric] = value


class _StopError(Exception):
    pass


def test_the_step_names_its_job_from_the_model_uri_when_the_inputs_are_left_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[PyTorchRequest] = []

    def launch(request: PyTorchRequest, **_: Any) -> tuple[str, str]:
        seen.append(request)
        raise _StopError

    monkeypatch.setattr(frameworks, "launch_training", launch)
    arts = {name: _Artifact(_backend(output=name)) for name in ("model", "metrics", "report")}
    with pytest.raises(_StopError):
        frameworks.train_pytorch.__wrapped__(  # type: ignore[attr-defined]
            dataset=_Artifact(str(tmp_path)), **arts, task_config={}, epochs=1
        )
    (request,) = seen
    assert (request.run_id, request.task_id, request.task_name) == (RUN, SALT_A, "pytorch-train")
