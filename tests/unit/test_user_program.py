"""Bring your own program: command and args as lists, no kubetrain flags, the workspace in the env."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kubetrain.errors import InvalidInputError
from kubetrain.kfp_runtime import artifacts
from kubetrain.kfp_runtime.frameworks import ChainerMNRequest, PyTorchRequest
from kubetrain.kfp_runtime.request_base import JobPlan
from kubetrain.manifests import build_manifest
from kubetrain.presets import WORKSPACE_ENV, PodOptions, TrainingParams, UserProgram
from kubetrain.specs import EnvVar
from tests.crd_schema import validate_strict
from tests.unit.task_ids import TaskIds

IDS: TaskIds = {"run_id": "run-1", "task_id": "task-1", "task_name": "train"}
PARAMS = TrainingParams(data_dir="/workspace/d", output_dir="/workspace/o", checkpoint_dir="/workspace/c")
PLAN = JobPlan(name="train-0123456789ab", params=PARAMS, pod=PodOptions(env=(EnvVar(name="MINE", value="1"),)))


def _env(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in container.get("env", ())}


def test_a_users_pytorch_program_runs_as_given_with_the_workspace_in_its_env() -> None:
    request = PyTorchRequest(**IDS, workers=1, command=["python", "/app/train.py"], args=["--lr", "0.1"])
    assert request.user_program == UserProgram(command=("python", "/app/train.py"), args=("--lr", "0.1"))
    manifest = build_manifest(request.to_spec(PLAN))
    validate_strict(manifest)
    for role in ("Master", "Worker"):
        (container,) = manifest["spec"]["pytorchReplicaSpecs"][role]["template"]["spec"]["containers"]
        assert container["command"] == ["python", "/app/train.py"]
        assert container["args"] == ["--lr", "0.1"]  # no --data/--output/--epochs injected
        env = _env(container)
        assert env["KUBETRAIN_DATA_DIR"] == "/workspace/d"
        assert env["KUBETRAIN_OUTPUT_DIR"] == "/workspace/o"
        assert env["KUBETRAIN_CHECKPOINT_DIR"] == "/workspace/c"
        assert env["MINE"] == "1"  # the task's own env stays
        assert container["securityContext"]["runAsNonRoot"] is True  # the restricted PSS settings stay


def test_a_users_mpi_program_gets_the_workspace_forwarded_to_every_rank() -> None:
    request = ChainerMNRequest(**IDS, command=["python", "/app/mpi_train.py"])
    manifest = build_manifest(request.to_spec(PLAN))
    validate_strict(manifest)
    (launcher,) = manifest["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"]
    command = launcher["command"]
    # Under mpi4py's runner: a rank's non-zero exit aborts the job instead of hanging it (issue 34).
    assert command[-4:] == ["python", "-m", "mpi4py", "/app/mpi_train.py"]
    for name in WORKSPACE_ENV:
        assert command[command.index(name) - 1] == "-x"
    assert launcher.get("args", []) == []
    assert "--data" not in command


def test_a_users_programs_run_as_given_in_a_trainjob_too() -> None:
    """job_api=trainjob: the user's script runs under torchrun (the Trainer's PET_* rendezvous is
    torchrun's) or under the runtime's mpirun, with the workspace env and no kubetrain flags."""
    torch = build_manifest(
        PyTorchRequest(**IDS, job_api="trainjob", workers=1, command=["python", "/app/train.py"], args=["--lr", "0.1"])
        .to_spec(PLAN)
    )  # fmt: skip
    validate_strict(torch)
    trainer = torch["spec"]["trainer"]
    assert trainer["command"] == ["python", "-m", "torch.distributed.run", "/app/train.py"]
    assert trainer["args"] == ["--lr", "0.1"]
    assert _env(trainer)["KUBETRAIN_DATA_DIR"] == "/workspace/d" and _env(trainer)["MINE"] == "1"
    mpi = build_manifest(
        ChainerMNRequest(**IDS, job_api="trainjob", command=["python", "/app/mpi_train.py"]).to_spec(PLAN)
    )
    validate_strict(mpi)
    command = mpi["spec"]["trainer"]["command"]
    assert command[0] == "mpirun" and command[-4:] == ["python", "-m", "mpi4py", "/app/mpi_train.py"]
    for name in WORKSPACE_ENV:
        assert command[command.index(name) - 1] == "-x"
    assert "--data" not in command and not mpi["spec"]["trainer"].get("args")


def test_kubetrains_trainer_stays_the_default_and_a_string_command_keeps_its_flags() -> None:
    default = build_manifest(PyTorchRequest(**IDS).to_spec(PLAN))
    (master,) = default["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"]
    assert master["command"] == ["python", "-m", "kubetrain.train.torch_ddp"]
    assert "--data" in master["args"]
    assert "KUBETRAIN_DATA_DIR" not in _env(master)
    legacy = build_manifest(PyTorchRequest(**IDS, command="python my.py").to_spec(PLAN))
    (master,) = legacy["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"]
    assert master["command"] == ["python", "my.py"] and "--data" in master["args"]


@pytest.mark.parametrize(
    ("inputs", "match"),
    [
        ({"args": ["--x"]}, r"args: got \['--x'\] without a command"),
        ({"command": ["python", 3]}, "command: got .*expected a list of strings"),
        ({"command": ["python", ""]}, "command: got .*non-empty strings"),
        ({"command": ["python", "t.py"], "args": "--x"}, "args: got '--x'; expected a list of strings"),
        ({"command": ["./train"], "elastic_min_workers": 1, "elastic_max_workers": 2}, "command: .*torchrun"),
    ],
)
def test_bad_programs_are_refused_before_submission(inputs: dict[str, Any], match: str) -> None:
    with pytest.raises(InvalidInputError, match=match):
        PyTorchRequest(**IDS, **inputs)


def test_whatever_the_program_left_becomes_the_outputs(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert artifacts.read_metrics(out, missing_ok=True) == artifacts.MetricsRead({})  # none is fine
    (out / "weights").mkdir(parents=True)
    (out / "weights" / "w.bin").write_bytes(b"w")
    (out / "notes.txt").write_text("n")
    (out / "metrics.json").write_text(json.dumps({"f1": 0.8, "ok": True, "n": 3, "tag": "x", "history": []}))
    metrics = artifacts.read_metrics(out, missing_ok=True).metrics
    assert artifacts.numeric_metrics(metrics) == {"f1": 0.8, "n": 3.0}

    class Model:
        def __init__(self) -> None:
            self.path = str(tmp_path / "model")
            self.metadata: dict[str, Any] = {}

    names = artifacts.copy_outputs(out, Model(), metadata={"job_name": "j"})
    assert names == ["metrics.json", "notes.txt", "weights"]
    assert (tmp_path / "model" / "weights" / "w.bin").read_bytes() == b"w"
    (out / "metrics.json").write_text("[1, 2]")
    read = artifacts.read_metrics(out, missing_ok=True)
    assert read.metrics == {} and "expected a JSON object of metrics, got list" in read.problems[0]


def test_image_pull_secrets_reach_the_training_pods() -> None:
    import dataclasses

    request = PyTorchRequest(**IDS, image_pull_secrets=["regcred"])
    plan = dataclasses.replace(PLAN, pod=dataclasses.replace(PLAN.pod, image_pull_secrets=("regcred",)))
    manifest = build_manifest(request.to_spec(plan))
    validate_strict(manifest)
    pod = manifest["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]
    with pytest.raises(InvalidInputError, match="image_pull_secrets: got 'Reg Cred'"):
        PyTorchRequest(**IDS, image_pull_secrets=["Reg Cred"])


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        (("python", "/app/t.py", "-u"), ("python", "-m", "mpi4py", "/app/t.py", "-u")),
        (("python", "-u", "-W", "ignore", "/app/t.py"), ("python", "-u", "-W", "ignore", "-m", "mpi4py", "/app/t.py")),
        (("python3", "-X", "dev", "-m", "pkg.train"), ("python3", "-X", "dev", "-m", "mpi4py", "-m", "pkg.train")),
        (("python", "-u", "-m", "mpi4py", "/app/t.py"), ("python", "-u", "-m", "mpi4py", "/app/t.py")),
        (("python", "-c", "print(1)"), ("python", "-m", "mpi4py", "-c", "print(1)")),
        (("bash", "/app/run.sh"), ("bash", "/app/run.sh")),
    ],
)
def test_mpi4pys_runner_goes_after_pythons_own_options(command: tuple[str, ...], expected: tuple[str, ...]) -> None:
    """Issue 34: mpi4py's runner refuses Python's options (`-u`), so they stay before `-m mpi4py`."""
    from kubetrain.presets.defaults import under_mpi4py

    assert under_mpi4py(command) == expected
