"""A training step after its job succeeded: what it keeps and what it warns about, and how it follows the job.

The job itself is played by a stand-in for the launcher's `run_job` that writes what a program would
have left in the workspace and returns a succeeded result, so the step's own handling of its
outputs runs for real: the component function, the request, the workspace and the artifacts.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypedDict

import pytest

from kubetrain.errors import ExitCode, JobTimeoutError
from kubetrain.kfp_runtime import frameworks, train_step
from kubetrain.kfp_runtime.frameworks import ChainerMNRequest, PSRequest, PyTorchRequest
from kubetrain.kfp_runtime.workspace import open_workspace
from kubetrain.launcher import AwaitOptions
from kubetrain.status import JobPhase, JobResult
from kubetrain.tooling.catalog import Entry
from tests.unit.task_ids import TaskIds

IDS: TaskIds = {"run_id": "run-1", "task_id": "task-1", "task_name": "train"}
CLAIM = "kubetrain-workspace"
METRICS = {
    "test_accuracy": 0.9, "test_loss": 0.3, "train_loss": 0.2, "samples_per_second": 100.0, "world_size": 2,
    "wall_seconds": 5.0, "epochs": 1, "global_step": 10, "history": [{"step": 10, "epoch": 0, "loss": 0.2}],
}  # fmt: skip


class Artifact:
    """What the step uses of a KFP artifact; log_metric records into `logged`."""

    def __init__(self, path: Path, metadata: dict[str, Any] | None = None) -> None:
        self.path = str(path)
        self.metadata: dict[str, Any] = dict(metadata or {})
        self.logged: dict[str, float] = {}

    def log_metric(self, metric: str, value: float) -> None:
        self.logged[metric] = value


class FakeBackend:
    def close(self) -> None:
        pass


class StepArtifacts(TypedDict):
    """The four artifacts of a training step, as its parameters name them."""

    dataset: Artifact
    model: Artifact
    metrics: Artifact
    report: Artifact


def _artifacts(tmp_path: Path) -> StepArtifacts:
    return {
        "dataset": Artifact(tmp_path / "dataset", {"path": "/workspace/datasets/digits"}),
        "model": Artifact(tmp_path / "model"),
        "metrics": Artifact(tmp_path / "metrics"),
        "report": Artifact(tmp_path / "report.html"),
    }


Program = Callable[[Path], object]  # run on the job's output directory; what it returns is ignored


def _trained(out: Path) -> None:
    """What kubetrain's trainer leaves: a model and the documented metrics."""
    (out / "model.pt").write_bytes(b"m")
    (out / "metrics.json").write_text(json.dumps(METRICS))


class FakeJob:
    """Stands in for `run_job`: runs `program` on the job's output directory, as rank 0 would, then
    reports the job Succeeded; `options` collects the AwaitOptions of every job it ran."""

    def __init__(self) -> None:
        self.program: Program = lambda out: None
        self.options: list[AwaitOptions] = []

    def __call__(self, manifest: dict[str, Any], *, options: AwaitOptions, **_: object) -> JobResult:
        self.options.append(options)
        name = manifest["metadata"]["name"]
        output = open_workspace(CLAIM, kind="local").local(f"/workspace/runs/{name}/output")
        output.mkdir(parents=True, exist_ok=True)
        self.program(output)
        return JobResult(
            name=name, namespace="default", kind=manifest["kind"], uid="u", phase=JobPhase.SUCCEEDED, reason="",
            message="", start_time=None, completion_time=None, restarts=0, backend="local",
        )  # fmt: skip


@pytest.fixture
def job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeJob:
    """Steps here run on the local backend, with the job played by a FakeJob."""
    monkeypatch.setenv("KUBETRAIN_BACKEND", "local")
    monkeypatch.setenv("KUBETRAIN_LOCAL_ROOT", str(tmp_path / "local"))
    monkeypatch.setattr(train_step, "open_backend", lambda *a, **k: FakeBackend())
    fake = FakeJob()
    monkeypatch.setattr(train_step, "run_job", fake)
    return fake


def _run_user_program(tmp_path: Path, job: FakeJob, program: Program) -> StepArtifacts:
    job.program = program
    arts = _artifacts(tmp_path)
    frameworks.train_pytorch(**arts, task_config={}, **IDS, command=["python", "/app/train.py"])
    return arts


def test_a_program_that_writes_nothing_succeeds_with_a_clear_warning(
    tmp_path: Path, job: FakeJob, capsys: pytest.CaptureFixture[str]
) -> None:
    arts = _run_user_program(tmp_path, job, lambda out: None)
    err = capsys.readouterr().err
    name = train_step.job_name(PyTorchRequest(**IDS))
    assert f"WARNING: pytorch: the job succeeded but the program left nothing in its output directory " \
        f"/workspace/runs/{name}/output" in err  # fmt: skip
    assert "the Model artifact is empty" in err and "KUBETRAIN_OUTPUT_DIR" in err
    assert "metrics.json" in err
    assert list(Path(arts["model"].path).iterdir()) == []
    assert arts["model"].metadata["warnings"][0].startswith("the job succeeded but the program left nothing")
    assert "left nothing in its output directory" in Path(arts["report"].path).read_text()


def test_a_program_that_writes_its_model_gets_no_warning(
    tmp_path: Path, job: FakeJob, capsys: pytest.CaptureFixture[str]
) -> None:
    def program(out: Path) -> None:
        (out / "weights.bin").write_bytes(b"w")
        (out / "metrics.json").write_text(json.dumps({"f1": 0.5}))

    arts = _run_user_program(tmp_path, job, program)
    assert "WARNING" not in capsys.readouterr().err
    assert "warnings" not in arts["model"].metadata
    assert arts["metrics"].logged["f1"] == 0.5


def test_unreadable_metrics_keep_the_model_and_say_so(
    tmp_path: Path, job: FakeJob, capsys: pytest.CaptureFixture[str]
) -> None:
    """A malformed metrics.json used to fail the step after the job succeeded, and the model was lost."""

    def program(out: Path) -> None:
        (out / "weights.bin").write_bytes(b"trained")
        (out / "metrics.json").write_text('{"f1": 0.5,')  # cut short

    arts = _run_user_program(tmp_path, job, program)
    err = capsys.readouterr().err
    assert (Path(arts["model"].path) / "weights.bin").read_bytes() == b"trained"
    assert "WARNING: pytorch: " in err and "metrics.json: not readable JSON" in err
    assert "the model was kept, and no metrics were logged from it" in err
    assert set(arts["metrics"].logged) == {"job_seconds"}


def test_kubetrains_trainer_keeps_its_model_when_metrics_are_incomplete(
    tmp_path: Path, job: FakeJob, capsys: pytest.CaptureFixture[str]
) -> None:
    """Missing documented keys used to fail the step and throw the model away; now the readable ones are logged."""

    def program(out: Path) -> None:
        (out / "model.pt").write_bytes(b"trained")
        (out / "metrics.json").write_text(json.dumps({"test_accuracy": 0.8, "epochs": 1}))

    job.program = program
    arts = _artifacts(tmp_path)
    frameworks.train_pytorch(**arts, task_config={}, **IDS)
    err = capsys.readouterr().err
    assert (Path(arts["model"].path) / "model.pt").read_bytes() == b"trained"
    assert "missing keys ['test_loss'" in err
    assert "the model was kept, and only what could be read was logged (test_accuracy, epochs)" in err
    assert {k: v for k, v in arts["metrics"].logged.items() if k != "job_seconds"} == {
        "test_accuracy": 0.8,
        "epochs": 1,
    }
    assert arts["model"].metadata["test_accuracy"] == 0.8 and "world_size" not in arts["model"].metadata


def test_complete_metrics_from_kubetrains_trainer_are_logged_without_warning(
    tmp_path: Path, job: FakeJob, capsys: pytest.CaptureFixture[str]
) -> None:
    def program(out: Path) -> None:
        (out / "model.pt").write_bytes(b"trained")
        (out / "metrics.json").write_text(json.dumps(METRICS))

    job.program = program
    arts = _artifacts(tmp_path)
    frameworks.train_pytorch(**arts, task_config={}, **IDS)
    assert "WARNING" not in capsys.readouterr().err
    assert arts["metrics"].logged["test_accuracy"] == 0.9 and arts["model"].metadata["world_size"] == 2


# -- the start timeout: component input → request → the launcher's AwaitOptions ------------------


@pytest.mark.parametrize("step", [frameworks.train_pytorch, frameworks.train_chainermn, frameworks.train_ps])
def test_start_timeout_reaches_the_launcher(step: Any, tmp_path: Path, job: FakeJob) -> None:
    job.program = _trained
    step(**_artifacts(tmp_path / "a"), task_config={}, **IDS, start_timeout_seconds=45, timeout_seconds=600)
    step(**_artifacts(tmp_path / "b"), task_config={}, **IDS)
    step(**_artifacts(tmp_path / "c"), task_config={}, **IDS, start_timeout_seconds=0)
    assert [(o.start_timeout_seconds, o.timeout_seconds) for o in job.options] == [
        (45, 600),
        (600, 86400),
        (None, 86400),
    ]


@pytest.mark.parametrize(("name", "framework"), [("pytorch_train", "pytorch"), ("chainermn_train", "chainermn"),
                                                ("ps_train", "ps")])  # fmt: skip
def test_a_components_own_body_runs_its_step(name: str, framework: str, tmp_path: Path, job: FakeJob) -> None:
    """The body KFP ships passes every input by name to its step, which takes each one (its defaults too)."""
    job.program = _trained
    body = Entry("component", name).load().python_func
    job_name, status = body(**_artifacts(tmp_path), task_config={}, **IDS, start_timeout_seconds=45)
    assert (job_name.split("-")[0], status) == (framework, "Succeeded")
    assert [o.start_timeout_seconds for o in job.options] == [45]


@pytest.mark.parametrize("request_type", [PyTorchRequest, ChainerMNRequest, PSRequest])
def test_start_timeout_is_checked_as_an_input(request_type: Any) -> None:
    assert request_type(**IDS).await_options().start_timeout_seconds == 600
    for bad in (-1, "soon", True):
        with pytest.raises(Exception, match=rf"start_timeout_seconds: got {bad!r}; expected a number of seconds >= 0"):
            request_type(**IDS, start_timeout_seconds=bad)


def test_a_job_that_does_not_start_fails_the_step_with_the_timeout_exit_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("KUBETRAIN_BACKEND", "local")
    monkeypatch.setenv("KUBETRAIN_LOCAL_ROOT", str(tmp_path / "local"))
    monkeypatch.setattr(train_step, "open_backend", lambda *a, **k: FakeBackend())

    def run_job(manifest: dict[str, Any], **_: object) -> JobResult:
        raise JobTimeoutError("PyTorchJob default/x did not start within 45s (phase Created; pods: x: ErrImagePull)")

    monkeypatch.setattr(train_step, "run_job", run_job)
    with pytest.raises(SystemExit) as exit_:
        frameworks.train_pytorch(**_artifacts(tmp_path), task_config={}, **IDS, start_timeout_seconds=45)
    assert exit_.value.code == ExitCode.TIMEOUT and int(ExitCode.TIMEOUT) == 3
    assert "did not start within 45s" in capsys.readouterr().err


def test_locally_a_step_names_the_image_and_gpus_it_did_not_use(
    tmp_path: Path, job: FakeJob, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 34: a mistyped image or a GPU-only program passed every local trial without a word."""
    frameworks.train_pytorch(
        **_artifacts(tmp_path), task_config={}, **IDS, image="registry.example/team/trainr:1.4", gpus=1,
        command=["python", "/app/train.py"],
    )  # fmt: skip
    err = capsys.readouterr().err
    notices = [line for line in err.splitlines() if "locally, not used" in line]
    assert len(notices) == 1, err
    assert "image registry.example/team/trainr:1.4 (not pulled" in notices[0]
    assert "GPUs (nvidia.com/gpu: 1;" in notices[0]


def test_locally_kubetrains_own_image_on_the_cpu_needs_no_notice(
    tmp_path: Path, job: FakeJob, capsys: pytest.CaptureFixture[str]
) -> None:
    _run_user_program(tmp_path, job, lambda out: (out / "model.pt").write_bytes(b"m"))
    assert "locally, not used" not in capsys.readouterr().err


def test_an_elastic_job_below_its_maximum_says_what_torchrun_waits_for(
    tmp_path: Path, job: FakeJob, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 34: rank 0 started about 40 s late with nothing said."""

    job.program = _trained
    frameworks.train_pytorch(
        **_artifacts(tmp_path), task_config={}, **IDS, workers=2, elastic_min_workers=1, elastic_max_workers=3
    )
    said = "pytorch: elastic job: 2 workers start, up to 3 may join; once 1 has joined, torchrun's rendezvous waits"
    assert f"{said} about 30 s" in capsys.readouterr().out
    # Nothing to wait for: every worker starts at once, a fixed-size job, the other frameworks.
    assert PyTorchRequest(**IDS, workers=3, elastic_min_workers=1, elastic_max_workers=3).start_notice() is None
    assert PyTorchRequest(**IDS, workers=2).start_notice() is None
    assert ChainerMNRequest(**IDS).start_notice() is None and PSRequest(**IDS).start_notice() is None


# -- a diverged model: one behaviour whichever program trained it (issue 49 item 3) --------------


def test_a_user_program_that_wrote_nan_losses_fails_the_step_in_one_line(
    tmp_path: Path, job: FakeJob, capsys: pytest.CaptureFixture[str]
) -> None:
    """The job succeeded, then the report crashed with a 40-line traceback (`nice_ticks: the range [nan, nan]`)."""

    def program(out: Path) -> None:
        (out / "weights.bin").write_bytes(b"w")
        history = [{"step": 1, "loss": 2.3}, {"step": 2, "loss": float("nan"), "test_accuracy": float("nan")}]
        (out / "metrics.json").write_text(json.dumps({"loss": float("nan"), "history": history}))

    with pytest.raises(SystemExit) as exit_:
        _run_user_program(tmp_path, job, program)
    assert exit_.value.code == ExitCode.JOB_FAILED
    err = capsys.readouterr().err
    assert "Traceback" not in err
    name = train_step.job_name(PyTorchRequest(**IDS))
    assert (
        "kubetrain: DivergedError: the model diverged: metrics.json says loss is nan, the history's last loss "
        "(step 2) is nan; lower the learning rate (or check the data for non-finite values); the job's files stay "
        f"in /workspace/runs/{name}/output\n"
    ) in err


def test_a_metric_that_is_not_finite_is_named_not_dropped_in_silence(
    tmp_path: Path, job: FakeJob, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 48 item 6: non-finite metrics went missing from the Metrics artifact without a word."""

    def program(out: Path) -> None:
        (out / "model.pt").write_bytes(b"trained")
        (out / "metrics.json").write_text(json.dumps({**METRICS, "grad_norm": float("inf")}))

    job.program = program
    arts = _artifacts(tmp_path)
    frameworks.train_pytorch(**arts, task_config={}, **IDS)
    said = "metrics.json: grad_norm inf: not finite, so not logged on the Metrics artifact"
    assert f"WARNING: pytorch: {said}" in capsys.readouterr().err
    assert arts["model"].metadata["warnings"] == [said]
    assert said in Path(arts["report"].path).read_text()


def test_integer_metrics_stay_integers(tmp_path: Path, job: FakeJob, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 49 item 11: a program's `"workers_seen": 2` printed as `2.0000`."""

    def program(out: Path) -> None:
        (out / "weights.bin").write_bytes(b"w")
        (out / "metrics.json").write_text(json.dumps({"f1": 0.5, "workers_seen": 2, "tokens": 1.0}))

    arts = _run_user_program(tmp_path, job, program)
    logged = arts["metrics"].logged
    assert logged["workers_seen"] == 2 and isinstance(logged["workers_seen"], int)
    assert isinstance(logged["tokens"], float)  # a float stays one, whatever its value
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("pytorch: Succeeded;"))
    assert "f1 0.5000, workers_seen 2, tokens 1.0000, " in line
    assert '<td class="num">2</td>' in Path(arts["report"].path).read_text()
