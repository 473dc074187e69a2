"""The typed training requests: each component's inputs validated once, and the spec they make."""

from __future__ import annotations

import re
from typing import Any

import pytest

from kubetrain.errors import InvalidInputError
from kubetrain.kfp_runtime.frameworks import ChainerMNRequest, PSRequest, PyTorchRequest
from kubetrain.kfp_runtime.request_base import JobPlan
from kubetrain.manifests import build_manifest
from kubetrain.presets import PodOptions, TrainingParams
from kubetrain.specs import MPIJobSpec, PSJobSpec, PyTorchJobSpec
from tests.crd_schema import validate_strict
from tests.unit.task_ids import TaskIds

IDS: TaskIds = {"run_id": "run-1", "task_id": "task-1", "task_name": "pytorch-train"}
PLAN = JobPlan(name="train-0123456789ab", params=TrainingParams(), pod=PodOptions())


def test_unresolved_placeholders_and_bad_settings_are_refused() -> None:
    with pytest.raises(InvalidInputError, match=r"pass dsl\.PIPELINE_JOB_ID_PLACEHOLDER"):
        PyTorchRequest(run_id="{{$.pipeline_job_uuid}}", task_id="t", task_name="n")
    with pytest.raises(InvalidInputError, match="task_id"):
        PyTorchRequest(run_id="r", task_id=" ", task_name="n")
    with pytest.raises(InvalidInputError, match=r"task_name: got '\{\{\$\.pipeline_task_name\}\}'.*PIPELINE_TASK_NAME"):
        PyTorchRequest(run_id="r", task_id="t", task_name="{{$.pipeline_task_name}}")
    with pytest.raises(InvalidInputError, match="task_name"):
        PyTorchRequest.from_inputs({"run_id": "r", "task_id": "t"})
    with pytest.raises(InvalidInputError, match="delete_after: got 'later'"):
        PyTorchRequest(**IDS, delete_after="later")
    with pytest.raises(InvalidInputError, match="learning_rate: got 0"):
        ChainerMNRequest(**IDS, learning_rate=0)
    with pytest.raises(InvalidInputError, match="epochs: got 0"):
        PSRequest(**IDS, epochs=0)
    request = PyTorchRequest(**IDS, timeout_seconds=90.5, backoff_limit=2)
    assert request.run_policy().active_deadline_seconds == 90
    assert request.run_policy().backoff_limit == 2


def test_unknown_inputs_are_named() -> None:
    with pytest.raises(InvalidInputError, match="unknown inputs lr, model"):
        PyTorchRequest.from_inputs({**IDS, "lr": 0.1, "model": "cnn"})


def test_component_names_become_the_programs_flags_once() -> None:
    request = PyTorchRequest(**IDS, learning_rate=0.05, architecture="cnn", epochs=3)
    params = request.training_params(data_dir="/workspace/d", output_dir="/workspace/o", checkpoint_dir="/workspace/c")
    args = params.program_args()
    assert args[args.index("--lr") + 1] == "0.05"
    assert args[args.index("--model") + 1] == "cnn"
    assert args[args.index("--epochs") + 1] == "3"


def test_ps_architecture_is_checked_against_the_ps_models() -> None:
    """ps_train refused the documented `cnn` (issue 34) and used to refuse wide_deep; unknown names fail early."""
    with pytest.raises(InvalidInputError, match=r"architecture: got 'resnet'; expected one of mlp, cnn, wide_deep"):
        PSRequest(**IDS, architecture="resnet")
    cnn = PSRequest(**IDS, architecture="cnn").to_spec(
        JobPlan(name="ps-0123456789ab", params=TrainingParams(model="cnn"), pod=PodOptions())
    )
    assert isinstance(cnn, PSJobSpec)
    assert cnn.master.args[cnn.master.args.index("--model") + 1] == "cnn"
    spec = PSRequest(**IDS, architecture="wide_deep").to_spec(
        JobPlan(name="ps-0123456789ab", params=TrainingParams(model="wide_deep"), pod=PodOptions())
    )
    assert isinstance(spec, PSJobSpec)
    assert spec.master.args[spec.master.args.index("--model") + 1] == "wide_deep"
    with pytest.raises(InvalidInputError, match="architecture: got 'wide_deep'; expected one of mlp, cnn"):
        PyTorchRequest(**IDS, architecture="wide_deep")
    with pytest.raises(InvalidInputError, match="architecture: got 'wide_deep'"):
        ChainerMNRequest(**IDS, architecture="wide_deep")


@pytest.mark.parametrize(
    ("inputs", "expected"),
    [
        ({}, ("python", "-m", "kubetrain.train.torch_ddp")),
        ({"command": "python /app/train.py"}, ("python", "/app/train.py")),
        (
            {"command": "python3 /app/train.py", "elastic_min_workers": 1, "elastic_max_workers": 2},
            ("python", "-m", "torch.distributed.run", "/app/train.py"),
        ),
        (
            {"elastic_min_workers": 1, "elastic_max_workers": 2},
            ("python", "-m", "torch.distributed.run", "-m", "kubetrain.train.torch_ddp"),
        ),
    ],
)
def test_pytorch_program_reaches_every_replica(inputs: dict[str, Any], expected: tuple[str, ...]) -> None:
    spec = PyTorchRequest(**IDS, **inputs).to_spec(PLAN)
    assert isinstance(spec, PyTorchJobSpec)
    for replica in (spec.master, spec.worker):
        if replica is not None:
            assert replica.command == expected
    validate_strict(build_manifest(spec))


def test_chainermn_program_runs_under_mpirun() -> None:
    spec = ChainerMNRequest(**IDS, command="python -m mine --flag 'a b'").to_spec(PLAN)
    assert isinstance(spec, MPIJobSpec)
    assert spec.launcher.command[:3] == ("mpirun", "-n", "2")
    assert spec.launcher.command[-7:] == ("python", "-m", "mpi4py", "-m", "mine", "--flag", "a b")
    validate_strict(build_manifest(spec))


def test_bad_programs_and_bounds_are_refused_before_anything_is_built() -> None:
    with pytest.raises(InvalidInputError, match="elastic job starts the program under torchrun"):
        PyTorchRequest(**IDS, command="./run", elastic_min_workers=1, elastic_max_workers=2)
    with pytest.raises(InvalidInputError, match="elastic_min_workers/elastic_max_workers: got 3/2"):
        PyTorchRequest(**IDS, elastic_min_workers=3, elastic_max_workers=2)
    with pytest.raises(InvalidInputError, match="command: got 'python \"unclosed'"):
        ChainerMNRequest(**IDS, command='python "unclosed')
    with pytest.raises(InvalidInputError, match="backend: got 'mpi'"):
        PyTorchRequest(**IDS, backend="mpi")
    with pytest.raises(InvalidInputError, match="mode: got 'eventual'"):
        PSRequest(**IDS, mode="eventual")


def test_job_api_picks_the_trainjob_and_its_runtime() -> None:
    from kubetrain.specs import TrainJobSpec

    spec = PyTorchRequest(**IDS, job_api="trainjob", workers=2, timeout_seconds=600).to_spec(PLAN)
    assert isinstance(spec, TrainJobSpec)
    assert (spec.runtime, spec.trainer.replicas, spec.active_deadline_seconds) == ("torch-distributed", 3, 600)
    mpi = ChainerMNRequest(**IDS, job_api="trainjob", runtime="my-mpi").to_spec(PLAN)
    assert isinstance(mpi, TrainJobSpec) and mpi.runtime == "my-mpi"
    validate_strict(build_manifest(spec))
    with pytest.raises(InvalidInputError, match="job_api: got 'tfjob'"):
        PyTorchRequest(**IDS, job_api="tfjob")
    with pytest.raises(InvalidInputError, match="a TrainJob is not elastic"):
        PyTorchRequest(**IDS, job_api="trainjob", elastic_min_workers=1, elastic_max_workers=2)
    with pytest.raises(InvalidInputError, match="runtime: got 'x'; a training runtime is only used with job_api"):
        ChainerMNRequest(**IDS, runtime="x")


def test_two_tasks_of_one_dag_get_two_jobs_and_retries_reattach() -> None:
    """On the KFP backend `{{$.pipeline_task_uuid}}` is the enclosing DAG's execution id (driver/resolve.go).

    Two pytorch_train tasks side by side (an mlp against a cnn) used to derive the same job name and
    task label, so the second adopted the first's job and reported its results.
    """
    from kubetrain.kfp_runtime.train_step import job_name

    run, dag = "8d1c0f7e-2b1a-4c39-9f0e-5d3f6e7a1b2c", "1742"  # what the driver passes for both tasks
    mlp = PyTorchRequest(run_id=run, task_id=dag, task_name="pytorch-train", architecture="mlp")
    cnn = PyTorchRequest(run_id=run, task_id=dag, task_name="pytorch-train-2", architecture="cnn")
    assert job_name(mlp) != job_name(cnn)
    labels = [
        build_manifest(r.to_spec(JobPlan(name=job_name(r), params=TrainingParams(), pod=PodOptions())))["metadata"][
            "labels"
        ]["kubetrain.io/kfp-task-id"]
        for r in (mlp, cnn)
    ]
    assert labels[0] != labels[1]  # adoption on 409 compares this label: neither adopts the other's job
    retry = PyTorchRequest(run_id=run, task_id=dag, task_name="pytorch-train", architecture="mlp")
    assert job_name(retry) == job_name(mlp)  # a retried task re-attaches to its job
    other_run = PyTorchRequest(run_id="another-run", task_id=dag, task_name="pytorch-train")
    assert job_name(other_run) != job_name(mlp)


# -- errors name the component's inputs, not the spec fields they become (issue 23) -------------

NUMERIC = [
    # (request, input, bad value): every whole-number input, one below its least value.
    *[(t, name, low) for t in (PyTorchRequest, ChainerMNRequest, PSRequest)
      for name, low in (("epochs", 0), ("batch_size", 0), ("seed", -1), ("gpus", -1), ("backoff_limit", -1))],
    (PyTorchRequest, "workers", -1),
    (PyTorchRequest, "elastic_min_workers", -1),
    (PyTorchRequest, "elastic_max_workers", -1),
    (ChainerMNRequest, "workers", 0),
    (ChainerMNRequest, "slots_per_worker", 0),
    (PSRequest, "ps_replicas", 0),
    (PSRequest, "workers", 0),
    (PSRequest, "records_per_task", 0),
]  # fmt: skip


@pytest.mark.parametrize(("request_type", "name", "value"), NUMERIC)
def test_a_bad_count_is_refused_under_the_inputs_own_name(request_type: Any, name: str, value: int) -> None:
    """`workers=-1` used to say `replicas`, ChainerMN's `workers=0` `worker.replicas`, `ps_replicas=0`
    `ps.replicas`; `records_per_task=0` and `seed=-1` were submitted and failed in the pods."""
    with pytest.raises(InvalidInputError) as refused:
        request_type.from_inputs({**IDS, name: value})
    message = str(refused.value)
    assert message.startswith(f"{name}: got {value}; expected an integer >= {value + 1} (")
    for not_a_bool_or_fraction in (True, 1.5):
        with pytest.raises(InvalidInputError, match=rf"^{name}: got {not_a_bool_or_fraction!r}; expected an integer"):
            request_type.from_inputs({**IDS, name: not_a_bool_or_fraction})


@pytest.mark.parametrize(
    ("request_type", "inputs", "message"),
    [
        (PyTorchRequest, {"job_api": "trainjob", "workers": -1}, "workers: got -1; expected an integer >= 0"),
        (ChainerMNRequest, {"job_api": "trainjob", "workers": 0}, "workers: got 0; expected an integer >= 1"),
        (PyTorchRequest, {"cpu": "lots"}, "cpu: got 'lots'; expected a Kubernetes quantity such as '2' or '500m'"),
        (PSRequest, {"memory": "4 GB"}, "memory: got '4 GB'; expected a Kubernetes quantity such as '4Gi'"),
        (ChainerMNRequest, {"image": "my image"}, "image: got 'my image'; expected a container image reference"),
        (PyTorchRequest, {"workspace_pvc": "My_Claim"}, "workspace_pvc: got 'My_Claim'; expected the name of the"),
        (PSRequest, {"workspace_pvc": ""}, "workspace_pvc: got ''; expected the name of the"),
        (PyTorchRequest, {"namespace": "Team A"}, "namespace: got 'Team A'; expected the name of a namespace"),
        (PSRequest, {"service_account": "Me!"}, "service_account: got 'Me!'; expected the name of a ServiceAccount"),
        (ChainerMNRequest, {"timeout_seconds": 0}, "timeout_seconds: got 0; expected a positive number of seconds"),
        (PSRequest, {"timeout_seconds": "1h"}, "timeout_seconds: got '1h'; expected a positive number of seconds"),
        (PyTorchRequest, {"image_pull_secrets": "regcred"}, "image_pull_secrets: got 'regcred'; expected a list"),
        (PSRequest, {"image_pull_secrets": 3}, "image_pull_secrets: got 3; expected a list of Secret names"),
    ],
)
def test_pod_inputs_are_refused_under_the_inputs_own_name(
    request_type: Any, inputs: dict[str, Any], message: str
) -> None:
    """These used to surface from the spec as `trainer.replicas`, `resources.cpu`, `workspace.claim_name`."""
    with pytest.raises(InvalidInputError) as refused:
        request_type.from_inputs({**IDS, **inputs})
    assert str(refused.value).startswith(message)


def test_the_local_check_of_a_model_module_says_what_it_does(capsys: pytest.CaptureFixture[str]) -> None:
    # Importing torch and the module takes a while: the step says so before, and when it is done (issue 49.14).
    request = PSRequest(**IDS, model_module="docs.examples.digits_ps_model", optimizer="sgd")
    request.preflight("local")
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "ps: checking model module docs.examples.digits_ps_model here (importing torch)"
    assert re.fullmatch(r"ps: model module docs\.examples\.digits_ps_model meets the contract \(\d+ s\)", lines[1])
    assert len(lines) == 2
    request.preflight("kubernetes")  # on a cluster the workers check it: nothing to say here
    assert capsys.readouterr().out == ""
