"""`kubetrain submit` against an in-process stand-in for the KFP API (tests/fake_kfp_api.py).

The stand-in is a real HTTP server that `kfp.Client` talks to unmodified; it checks the bearer
token, that uploads are compiled pipelines and that runs reference an uploaded version with
parameters the pipeline declares. It is not a KFP deployment: nothing runs.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from kubetrain.cli import main
from kubetrain.errors import ExitCode
from tests.fake_kfp_api import FakeKfpApi

TOKEN = "t0ken-for-tests"


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[FakeKfpApi]:
    # kfp.Client reads a saved namespace context from $HOME; keep the user's out of the test.
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("KUBETRAIN_KFP_TOKEN", raising=False)
    with FakeKfpApi(token=TOKEN) as server:
        yield server


def _submit(api: FakeKfpApi, *extra: str) -> int:
    return main(["submit", "mnist_pytorch", "--host", api.url, "--token", TOKEN, *extra])


def test_first_submit_uploads_the_pipeline_and_starts_a_run(
    api: FakeKfpApi, capsys: pytest.CaptureFixture[str]
) -> None:
    rc = _submit(api, "--experiment", "digits", "--param", "epochs=3", "--param", "learning_rate=0.01", "--json")
    out = capsys.readouterr().out
    assert rc == 0

    uploads = api.requests_to("POST", "/apis/v2beta1/pipelines/upload")
    assert len(uploads) == 1
    assert uploads[0].query["name"] == "mnist-pytorch"
    spec = next(iter(api.state.specs.values()))
    assert spec["pipelineInfo"]["name"] == "mnist-pytorch"
    assert {"dataset", "workspace_pvc", "epochs"} <= set(spec["root"]["inputDefinitions"]["parameters"])

    (experiment,) = api.state.experiments.values()
    assert experiment["display_name"] == "digits"
    (run,) = api.state.runs.values()
    assert run["experiment_id"] == experiment["experiment_id"]
    assert run["runtime_config"]["parameters"] == {"epochs": 3, "learning_rate": 0.01}
    (pipeline,) = api.state.pipelines.values()
    (version,) = api.state.versions[pipeline["pipeline_id"]]
    assert run["pipeline_version_reference"] == {
        "pipeline_id": pipeline["pipeline_id"],
        "pipeline_version_id": version["pipeline_version_id"],
    }
    # Every request carried the token; the URL printed is the run's.
    assert all(r.headers.get("authorization") == f"Bearer {TOKEN}" for r in api.state.requests)
    result = json.loads(out.strip().splitlines()[-1])
    assert result["run_url"] == f"{api.url}/#/runs/details/{run['run_id']}"
    assert f"{api.url}/#/runs/details/{run['run_id']}" in out


def test_second_submit_adds_a_version_and_reuses_the_experiment(api: FakeKfpApi) -> None:
    assert _submit(api, "--experiment", "digits") == 0
    assert _submit(api, "--experiment", "digits", "--version-name", "second", "--run-name", "again") == 0

    assert len(api.requests_to("POST", "/apis/v2beta1/pipelines/upload")) == 1
    (version_upload,) = api.requests_to("POST", "/apis/v2beta1/pipelines/upload_version")
    (pipeline,) = api.state.pipelines.values()
    assert version_upload.query == {"name": "second", "pipelineid": pipeline["pipeline_id"]}
    assert len(api.requests_to("POST", "/apis/v2beta1/experiments")) == 1
    latest = api.state.versions[pipeline["pipeline_id"]][-1]
    runs = list(api.state.runs.values())
    assert runs[-1]["display_name"] == "again"
    assert runs[-1]["pipeline_version_reference"]["pipeline_version_id"] == latest["pipeline_version_id"]
    # The uploaded version is the freshly compiled pipeline, equal to the committed YAML.
    committed = yaml.safe_load_all(
        (Path(__file__).resolve().parents[2] / "pipelines" / "mnist_pytorch.yaml").read_text()
    )
    assert api.state.specs[latest["pipeline_version_id"]]["root"] == next(iter(committed))["root"]


def test_token_from_the_environment(api: FakeKfpApi, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBETRAIN_KFP_TOKEN", TOKEN)
    assert main(["submit", "mnist_pytorch", "--host", api.url]) == 0
    assert len(api.state.runs) == 1


def test_token_file(api: FakeKfpApi, tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    assert main(["submit", "mnist_ps", "--host", api.url, "--token-file", str(token_file)]) == 0
    (run,) = api.state.runs.values()
    assert all(r.headers.get("authorization") == f"Bearer {TOKEN}" for r in api.state.requests)
    assert run["runtime_config"]["parameters"] == {}


def test_wrong_token_is_refused_before_anything_is_uploaded(
    api: FakeKfpApi, capsys: pytest.CaptureFixture[str]
) -> None:
    rc = main(["submit", "mnist_pytorch", "--host", api.url, "--token", "wrong"])
    assert rc == ExitCode.INFRASTRUCTURE
    assert "refused the credentials (HTTP 401)" in capsys.readouterr().err
    assert not api.state.pipelines
    assert not api.state.runs


def test_unknown_parameter_names_the_pipeline_parameters(api: FakeKfpApi, capsys: pytest.CaptureFixture[str]) -> None:
    rc = _submit(api, "--param", "epochz=3")
    err = capsys.readouterr().err
    assert rc == ExitCode.INVALID_INPUT
    assert "epochz" in err
    assert "epochs" in err
    assert not api.state.requests


def test_bad_parameter_value(api: FakeKfpApi, capsys: pytest.CaptureFixture[str]) -> None:
    assert _submit(api, "--param", "epochs=three") == ExitCode.INVALID_INPUT
    assert "expected an integer" in capsys.readouterr().err


def test_unreachable_host_is_an_infrastructure_error(capsys: pytest.CaptureFixture[str]) -> None:
    with FakeKfpApi() as server:
        url = server.url  # a port that is closed once the server stops
    rc = main(["submit", "mnist_pytorch", "--host", url, "--token", TOKEN])
    assert rc == ExitCode.INFRASTRUCTURE
    assert "cannot reach the KFP API" in capsys.readouterr().err


def test_unknown_pipeline(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["submit", "nope", "--host", "http://127.0.0.1:1"]) == ExitCode.INVALID_INPUT
    assert "expected one of mnist_pytorch" in capsys.readouterr().err


USER_PIPELINES = """
from kfp import dsl

from kubetrain.components.download_dataset import download_dataset


@dsl.pipeline(name="fetch-small")
def fetch_small(shards: int = 1):
    download_dataset(shards=shards)


@dsl.pipeline(name="fetch-big")
def fetch_big(shards: int = 8):
    download_dataset(shards=shards)
"""


def test_submit_a_users_python_file(api: FakeKfpApi, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "mine" / "pipelines.py"
    source.parent.mkdir()
    source.write_text(USER_PIPELINES)
    assert main(["submit", str(source), "--host", api.url, "--token", TOKEN]) == ExitCode.INVALID_INPUT
    assert "choose one with --pipeline-func NAME" in capsys.readouterr().err
    assert not api.state.requests

    rc = main(["submit", str(source), "--pipeline-func", "fetch_big", "--host", api.url, "--token", TOKEN,
               "--param", "shards=4"])  # fmt: skip
    assert rc == 0
    (upload,) = api.requests_to("POST", "/apis/v2beta1/pipelines/upload")
    assert upload.query["name"] == "fetch-big"
    (spec,) = api.state.specs.values()
    assert spec["pipelineInfo"]["name"] == "fetch-big"
    (run,) = api.state.runs.values()
    assert run["runtime_config"]["parameters"] == {"shards": 4}


def test_submit_a_compiled_yaml_uploads_it_as_it_is(api: FakeKfpApi, tmp_path: Path) -> None:
    compiled = tmp_path / "digits_ps.yaml"
    compiled.write_text((Path(__file__).resolve().parents[2] / "pipelines" / "mnist_ps.yaml").read_text())
    assert main(["submit", str(compiled), "--host", api.url, "--token", TOKEN, "--param", "workers=2"]) == 0
    (upload,) = api.requests_to("POST", "/apis/v2beta1/pipelines/upload")
    assert compiled.read_bytes() in upload.body  # the file itself, not a recompile
    (run,) = api.state.runs.values()
    assert run["runtime_config"]["parameters"] == {"workers": 2}


@pytest.mark.parametrize(
    ("states", "code"),
    [(["PENDING", "RUNNING", "SUCCEEDED"], ExitCode.SUCCESS), (["RUNNING", "FAILED"], ExitCode.JOB_FAILED)],
)
def test_wait_follows_the_run_to_its_end_and_exits_with_it(
    api: FakeKfpApi, states: list[str], code: ExitCode, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    """Issue 34: `submit --wait`, as kfp's wait_for_run_completion."""
    monkeypatch.setattr("kubetrain.commands.submit.WAIT_POLL_SECONDS", 0.01)
    api.run_states = states
    assert _submit(api, "--wait", "--json") == code
    captured = capsys.readouterr()
    out = json.loads(captured.out.strip().splitlines()[-1])
    assert out["state"] == states[-1] and out["exit_code"] == code
    assert f"run {out['run_id']} ended {states[-1]}" in captured.out
    assert [line.rsplit(": ", 1)[1] for line in captured.err.splitlines()] == states
    assert len(api.requests_to("GET", f"/apis/v2beta1/runs/{out['run_id']}")) == len(states)


def test_wait_gives_up_after_its_seconds_with_the_timeout_code(
    api: FakeKfpApi, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("kubetrain.commands.submit.WAIT_POLL_SECONDS", 0.01)
    api.run_states = ["RUNNING"]
    assert _submit(api, "--wait", "0.05") == ExitCode.TIMEOUT
    assert "did not end within 0.05s (last state RUNNING); it goes on" in capsys.readouterr().err


UNMOUNTED = """
from kfp import dsl, kubernetes

from kubetrain.components import download_dataset, pytorch_train


@dsl.pipeline(name="unmounted")
def unmounted(claim: str = "kubetrain-workspace"):
    data = download_dataset(source="builtin:digits", workspace_pvc=claim)
    kubernetes.mount_pvc(data, pvc_name=claim, mount_path="/workspace")
    pytorch_train(dataset=data.outputs["dataset"], workspace_pvc=claim)  # the claim not mounted
"""


def test_a_kubetrain_step_without_the_workspace_mounted_is_named_before_upload(
    api: FakeKfpApi, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 49.17: such a step fails on the cluster only when it starts; locally nothing tells."""
    path = tmp_path / "unmounted.py"
    path.write_text(UNMOUNTED)
    assert main(["submit", str(path), "--host", api.url, "--token", TOKEN, "--json"]) == 0
    captured = capsys.readouterr()
    said = (
        "step pytorch-train: mounts no workspace claim at /workspace; on the cluster it fails when it starts: "
        "kfp.kubernetes.mount_pvc(task, pvc_name=CLAIM, mount_path='/workspace')"
    )
    assert f"kubetrain submit: warning: {said}" in captured.err
    assert "download-dataset" not in captured.err  # mounted
    assert json.loads(captured.out.strip().splitlines()[-1])["warnings"] == [said]
    assert _submit(api) == 0  # the shipped pipelines mount it on every step
    assert "warning" not in capsys.readouterr().err
