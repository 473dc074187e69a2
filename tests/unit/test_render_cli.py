"""`kubetrain render`: the manifest the component submits, refused where the component refuses, exit code 2."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubetrain.cli import build_parser, main
from kubetrain.commands import render
from kubetrain.errors import ExitCode
from kubetrain.kfp_runtime import frameworks, train_step
from kubetrain.kfp_runtime.frameworks import PSRequest, PyTorchRequest
from kubetrain.launcher import AwaitOptions
from kubetrain.status import JobResult
from tests.crd_schema import validate_strict


def test_json_output_is_the_same_manifest(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render", "mpijob", "--name", "m", "--workers", "2", "-o", "json"]) == 0
    manifest = json.loads(capsys.readouterr().out)
    validate_strict(manifest)
    assert manifest["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] == 2


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["pytorchjob", "--name", "Bad_Name"], "name: got 'Bad_Name'; expected a DNS-1035 label"),
        (["mpijob", "--name", "m", "--workers", "0"], "workers: got 0; expected an integer >= 1"),
        (["pytorchjob", "--name", "p", "--elastic", "4:1"], "elastic_min_workers/elastic_max_workers: got 4/1"),
        (["pytorchjob", "--name", "p", "--elastic", "x"], "expected MIN:MAX"),
        (["psjob", "--name", "p", "--ps", "0"], "ps_replicas: got 0; expected an integer >= 1"),
        (["pytorchjob", "--name", "p", "--cpu", "lots"], "cpu: got 'lots'; expected a Kubernetes quantity"),
        (["mpijob", "--name", "m", "--elastic", "1:2"], "--elastic: not an input of chainermn_train"),
        # These used to print manifests the components refuse, and exit 0.
        (["pytorchjob", "--name", "p", "--model", "resnet"], "architecture: got 'resnet'; expected one of mlp, cnn"),
        (["psjob", "--name", "p", "--model", "vgg"], "architecture: got 'vgg'; expected one of mlp, cnn, wide_deep"),
        (["psjob", "--name", "p", "--command", '["python", "t.py"]'], "--command: not an input of ps_train"),
        (["pytorchjob", "--name", "p", "--labels", "[1]"], "--labels: got '[1]'; expected a JSON object"),
        (["pytorchjob", "--name", "p", "--job-api", "trainjob"], "--job-api: got 'trainjob'; render pytorchjob"),
        (["pytorchjob", "--name", "p", "--manifest-patch", '{"spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": "x"}}}}'],
         "manifest_patch: spec.pytorchReplicaSpecs.Worker.replicas"),
        # Past the security line (issue 33): refused in one line, naming the field, before any output.
        (["psjob", "--name", "p", "--manifest-patch", '{"spec": {"replicatedJobs": [{"name": "master", "template": {"spec": {"template": {"spec": {"hostNetwork": true}}}}}]}}'],
         "manifest_patch: spec.replicatedJobs[master].template.spec.template.spec.hostNetwork: may not add"),
    ],
)  # fmt: skip
def test_bad_input_is_refused_with_a_clear_message(argv: list[str], message: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "kubetrain", "render", *argv], capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stdout == ""


class _Captured:
    """Stands in for `run_job` in the step: keeps the manifest the step would submit, submits nothing."""

    def __init__(self) -> None:
        self.manifests: list[dict[str, Any]] = []

    def __call__(self, manifest: dict[str, Any], *, options: AwaitOptions, **_: object) -> JobResult:
        self.manifests.append(manifest)
        raise _StopBeforeSubmitError


class _StopBeforeSubmitError(Exception):
    pass


class _Artifact:
    def __init__(self, path: Path, metadata: dict[str, Any] | None = None) -> None:
        self.path = str(path)
        self.metadata: dict[str, Any] = dict(metadata or {})

    def log_metric(self, metric: str, value: float) -> None:
        raise AssertionError("nothing is logged: the job is never run")


IDS = {"run_id": "run-7", "task_id": "task-3", "task_name": "train-a"}
DATA = "/workspace/datasets/mnist"
CASES: dict[str, tuple[Any, type[Any] | None, dict[str, Any], list[str]]] = {
    "a user's PyTorch program with its metadata and a patch": (
        frameworks.train_pytorch, PyTorchRequest,
        {"workers": 2, "command": ["python", "/app/train.py"], "args": ["--lr", "0.1"], "cpu": "2",
         "labels": {"team": "a"}, "annotations": {"note": "x y"}, "image": "registry.example/me/train:1",
         "manifest_patch": {"spec": {"runPolicy": {"ttlSecondsAfterFinished": 600}}}, "timeout_seconds": 3600},
        ["pytorchjob", "--workers", "2", "--command", '["python", "/app/train.py"]', "--args", '["--lr", "0.1"]',
         "--cpu", "2", "--labels", '{"team": "a"}', "--annotations", '{"note": "x y"}',
         "--image", "registry.example/me/train:1",
         "--manifest-patch", '{"spec": {"runPolicy": {"ttlSecondsAfterFinished": 600}}}', "--timeout-seconds", "3600"],
    ),
    "an elastic PyTorchJob with the short flags": (
        frameworks.train_pytorch, PyTorchRequest,
        {"workers": 2, "elastic_min_workers": 1, "elastic_max_workers": 4, "learning_rate": 0.01,
         "architecture": "cnn"},
        ["pytorchjob", "--workers", "2", "--elastic", "1:4", "--lr", "0.01", "--model", "cnn"],
    ),
    "a PS job with a user's model module": (
        frameworks.train_ps, PSRequest,
        {"ps_replicas": 1, "workers": 2, "model_module": "my_team.ctr", "records_per_task": 16, "mode": "sync"},
        ["psjob", "--ps", "1", "--workers", "2", "--model-module", "my_team.ctr", "--records-per-task", "16",
         "--mode", "sync"],
    ),
    "a ChainerMN TrainJob": (
        frameworks.train_chainermn, None,
        {"job_api": "trainjob", "workers": 3, "slots_per_worker": 2, "namespace": "team-a"},
        ["trainjob", "--framework", "chainermn", "--workers", "3", "--slots-per-worker", "2", "--namespace", "team-a"],
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(CASES))
def test_render_prints_exactly_what_the_step_submits(
    case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The step runs with the inputs, up to the submission; render runs with the same inputs as flags."""
    step, request_type, inputs, argv = CASES[case]
    monkeypatch.setenv("KUBETRAIN_BACKEND", "local")
    monkeypatch.setenv("KUBETRAIN_LOCAL_ROOT", str(tmp_path / "local"))
    monkeypatch.setattr(train_step, "open_backend", lambda *a, **k: type("B", (), {"close": lambda self: None})())
    # On the local backend the step imports a model module first (a cluster's pods import it from the
    # image); the manifest is the same either way, and my_team.ctr exists in no image here.
    monkeypatch.setattr(PSRequest, "preflight", lambda self, backend: None)
    captured = _Captured()
    monkeypatch.setattr(train_step, "run_job", captured)
    arts = {name: _Artifact(tmp_path / name) for name in ("model", "metrics", "report")}
    with pytest.raises(_StopBeforeSubmitError):
        step(dataset=_Artifact(tmp_path / "d", {"path": DATA}), **arts, task_config={}, **IDS, **inputs)
    (submitted,) = captured.manifests
    capsys.readouterr()  # the step's own log lines
    name = submitted["metadata"]["name"]
    if request_type is not None:
        assert name == train_step.job_name(request_type(**IDS, **inputs))
    ids = ["--run-id", IDS["run_id"], "--task-id", IDS["task_id"], "--task-name", IDS["task_name"]]
    assert main(["render", *argv, "--name", name, "--data", DATA, *ids]) == 0
    rendered = yaml.safe_load(capsys.readouterr().out)
    assert rendered == submitted
    validate_strict(rendered)


def test_render_defaults_are_the_components(capsys: pytest.CaptureFixture[str]) -> None:
    """No flags: what the component submits with no inputs set (one worker; a day's deadline; the workspace)."""
    assert main(["render", "pytorchjob", "--name", "p"]) == 0
    manifest = yaml.safe_load(capsys.readouterr().out)
    assert manifest["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 1
    assert manifest["spec"]["runPolicy"]["activeDeadlineSeconds"] == 86400
    (volume, _shm) = manifest["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["volumes"]
    assert volume["persistentVolumeClaim"]["claimName"] == "kubetrain-workspace"
    assert manifest["metadata"]["labels"]["kubetrain.io/kfp-run-id"].startswith("render-")


def test_two_renders_never_share_a_run_id(capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 33: two users' `render | launch -f -` must not adopt each other's job, and the launcher
    adopts on a 409 a job with the same run and task ids: so no two renders emit the same ones."""
    run_ids = []
    for _ in range(2):
        assert main(["render", "pytorchjob", "--name", "p"]) == 0
        manifest = yaml.safe_load(capsys.readouterr().out)
        run_ids.append(manifest["metadata"]["labels"]["kubetrain.io/kfp-run-id"])
        pods = manifest["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["metadata"]["labels"]
        assert pods["kubetrain.io/kfp-run-id"] == run_ids[-1]
    assert run_ids[0] != run_ids[1]


def test_flags_take_files_for_json_inputs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    patch = tmp_path / "patch.json"
    patch.write_text(json.dumps({"spec": {"runPolicy": {"ttlSecondsAfterFinished": 60}}}))
    assert main(["render", "mpijob", "--name", "m", "--manifest-patch", f"@{patch}"]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["spec"]["runPolicy"]["ttlSecondsAfterFinished"] == 60


def test_every_input_type_of_the_components_has_a_flag() -> None:
    fields = render.input_fields()
    assert fields
    for name, (hint, _) in fields.items():
        assert render._flag_type(name, hint) is not None, f"render has no flag for {name} ({hint})"
    boolean = render._flag_type("future_switch", bool)
    assert boolean is not None
    assert (boolean[0]("false"), boolean[0]("Yes")) == (False, True)
    with pytest.raises(argparse.ArgumentTypeError, match="expected true or false"):
        boolean[0]("maybe")


def test_an_input_render_cannot_spell_fails_render_alone(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A future input type must not break every `kubetrain` command while the parser is built."""
    fields = render.input_fields()
    future = {**fields, "fast": (bool, {PyTorchRequest}), "odd": (complex, {PyTorchRequest})}
    monkeypatch.setattr(render, "input_fields", lambda: future)
    parser = build_parser()  # no TypeError
    assert parser.parse_args(["run", "mnist_ps", "--list-params"]).list_params
    args = parser.parse_args(["render", "pytorchjob", "--name", "j", "--fast", "no"])
    assert args.input_fast is False
    assert main(["render", "pytorchjob", "--name", "j"]) == ExitCode.JOB_FAILED
    err = capsys.readouterr().err.strip()
    assert err.startswith("kubetrain render: no flag for the input(s) odd (<class 'complex'>)")
    assert len(err.splitlines()) == 1
