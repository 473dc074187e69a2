"""Every numeric training and time input has an upper bound, and the data set lies on the workspace.

Issue 48.15: `epochs=10**20` and a timeout of 1e30 were accepted; issue 48.12: `--slots-per-worker
100000` and `--data /workspace/../etc` too. Each is refused before anything is submitted, in one
line naming the input, the value and the bound (exit 2 from the command line).
"""

from __future__ import annotations

from typing import Any

import pytest

from kubetrain.cli import main
from kubetrain.errors import ExitCode, InvalidInputError, SpecError
from kubetrain.kfp_runtime.frameworks import ChainerMNRequest, PSRequest, PyTorchRequest
from kubetrain.launcher import AwaitOptions
from kubetrain.presets import JobSettings, TrainingParams, mpi_job_spec, ps_job_spec
from kubetrain.specs import Resources, RunPolicy, limits
from tests.unit.task_ids import TaskIds

IDS: TaskIds = {"run_id": "run-1", "task_id": "task-1", "task_name": "train"}

TOO_BIG: list[tuple[Any, str, object, str]] = [
    (PyTorchRequest, "epochs", 10**20, "at most 100000 (passes over the training data; MAX_EPOCHS)"),
    (PyTorchRequest, "batch_size", limits.MAX_BATCH_SIZE + 1, "MAX_BATCH_SIZE"),
    (ChainerMNRequest, "seed", 2**32, f"at most {limits.MAX_SEED} (the random seed; MAX_SEED)"),
    (PSRequest, "gpus", limits.MAX_GPUS + 1, "MAX_GPUS"),
    (PyTorchRequest, "backoff_limit", 10**9, "MAX_BACKOFF_LIMIT"),
    (ChainerMNRequest, "slots_per_worker", 100_000, "at most 1024 (MPI ranks per worker; MAX_SLOTS_PER_WORKER)"),
    (PSRequest, "records_per_task", limits.MAX_RECORDS_PER_TASK + 1, "MAX_RECORDS_PER_TASK"),
    (PyTorchRequest, "timeout_seconds", 1e30, f"at most {limits.MAX_SECONDS} (366 days; MAX_SECONDS)"),
    (PSRequest, "start_timeout_seconds", 1e30, "MAX_SECONDS"),
]


@pytest.mark.parametrize(("request_type", "name", "value", "bound"), TOO_BIG)
def test_an_absurd_input_is_refused_naming_the_input_the_value_and_the_bound(
    request_type: Any, name: str, value: object, bound: str
) -> None:
    with pytest.raises(InvalidInputError) as refused:
        request_type.from_inputs({**IDS, name: value})
    message = str(refused.value)
    assert message.startswith(f"{name}: got {value!r}; expected "), message
    assert bound in message


@pytest.mark.parametrize(
    ("name", "value"),
    [("epochs", limits.MAX_EPOCHS), ("seed", limits.MAX_SEED), ("timeout_seconds", limits.MAX_SECONDS)],
)
def test_the_bound_itself_is_accepted(name: str, value: int) -> None:
    assert getattr(PyTorchRequest.from_inputs({**IDS, name: value}), name) == value


def test_the_specs_hold_the_same_bounds() -> None:
    """The presets (and so every spec a user builds in Python) refuse what the requests refuse."""
    with pytest.raises(SpecError, match=r"^epochs: got 100000000000000000000; expected at most 100000"):
        TrainingParams(epochs=10**20)
    with pytest.raises(SpecError, match=r"^lr: got inf; expected a finite learning rate > 0"):
        TrainingParams(lr=float("inf"))
    assert TrainingParams(lr=1e20).lr == 1e20  # no upper bound: divergence is caught while training
    with pytest.raises(SpecError, match=r"^slots_per_worker: got 100000; expected at most 1024"):
        mpi_job_spec(JobSettings(name="job", params=TrainingParams()), slots_per_worker=100_000)
    with pytest.raises(SpecError, match=r"^records_per_task: got 0; expected an integer >= 1"):
        ps_job_spec(JobSettings(name="job", params=TrainingParams()), records_per_task=0)
    with pytest.raises(SpecError, match=r"^run_policy.active_deadline_seconds: got 10000000000; expected at most"):
        RunPolicy(active_deadline_seconds=10**10)
    with pytest.raises(SpecError, match=r"^run_policy.backoff_limit: got -1; expected an integer >= 0"):
        RunPolicy(backoff_limit=-1)
    with pytest.raises(SpecError, match=r"^resources.gpus: got 1000; expected at most 64"):
        Resources(gpus=1000)


@pytest.mark.parametrize("field", ["timeout_seconds", "start_timeout_seconds"])
@pytest.mark.parametrize("value", [1e30, float("inf"), float("nan")])
def test_the_launchers_timeouts_are_bounded(field: str, value: float) -> None:
    """`kubetrain launch --timeout 1e30` fed a deadline no clock or wait can hold."""
    timeouts = {"timeout_seconds": 60.0, field: value}
    with pytest.raises(InvalidInputError) as refused:
        AwaitOptions(
            timeout_seconds=timeouts["timeout_seconds"], start_timeout_seconds=timeouts.get("start_timeout_seconds")
        )
    assert str(refused.value).startswith(f"{field}: got {value!r}; expected a positive number of seconds, at most")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["mpijob", "--slots-per-worker", "100000"], "slots_per_worker: got 100000; expected at most 1024"),
        (["pytorchjob", "--epochs", str(10**20)], f"epochs: got {10**20}; expected at most 100000"),
        (["pytorchjob", "--timeout-seconds", "1e30"], "timeout_seconds: got 1e+30; expected a positive number"),
        (["pytorchjob", "--data", "/workspace/../etc"], "data: got '/workspace/../etc'; expected the data set's"),
        (["psjob", "--data", "/etc"], "data: got '/etc'; expected the data set's directory on the workspace"),
        (["mpijob", "--data", "datasets/digits"], "under /workspace without '.' or '..' segments"),
    ],
)
def test_render_refuses_them_in_one_line(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render", *argv[:1], "--name", "job", *argv[1:]]) == ExitCode.INVALID_INPUT
    err = capsys.readouterr().err
    assert message in err, err
    assert "Traceback" not in err


def test_a_data_set_under_the_workspace_is_accepted(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render", "pytorchjob", "--name", "job", "--data", "/workspace/datasets/mnist"]) == 0
    assert "/workspace/datasets/mnist" in capsys.readouterr().out
