"""The library behind the component bodies (kubetrain.kfp_runtime), without KFP or a backend running:
the backend and workspace a step uses, the download step, dataset locations and pipeline parameters.
"""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

import pytest

from kubetrain.data.sources import Source
from kubetrain.errors import DataError, ExitCode, InvalidInputError
from kubetrain.kfp_runtime.download_step import DownloadRequest, download_dataset_step
from kubetrain.kfp_runtime.train_step import dataset_location
from kubetrain.kfp_runtime.workspace import (
    WorkspaceView,
    backend_kind,
    dataset_dir,
    open_workspace,
    resolve_workspace_path,
)
from kubetrain.manifests import build_manifest
from kubetrain.presets import JobSettings, TrainingParams, ps_job_spec
from kubetrain.tooling.params import PipelineInput, parse_params
from tests.crd_schema import validate_strict
from tests.unit.fake_kfp_artifact import FakeArtifact

# -- backend and workspace ---------------------------------------------------------------------


def test_backend_kind_from_the_environment(tmp_path: Path) -> None:
    account = tmp_path / "serviceaccount"
    account.mkdir()
    (account / "token").write_text("t")
    cluster = {"KUBERNETES_SERVICE_HOST": "10.0.0.1"}
    assert backend_kind(cluster, service_account_dir=account) == "kubernetes"
    assert backend_kind({"KUBETRAIN_BACKEND": "Local", **cluster}, service_account_dir=account) == "local"
    assert backend_kind({"KUBETRAIN_BACKEND": "kubernetes"}, service_account_dir=tmp_path / "none") == "kubernetes"


def test_outside_a_cluster_the_step_uses_the_local_backend(tmp_path: Path) -> None:
    """A component run from its YAML under kfp.local used to fail: 'the workspace claim is not mounted'."""
    assert backend_kind({}, service_account_dir=tmp_path / "none") == "local"
    # A service host without a mounted token (or the reverse) is not a pod that can reach its API server.
    assert backend_kind({"KUBERNETES_SERVICE_HOST": "10.0.0.1"}, service_account_dir=tmp_path / "none") == "local"
    with pytest.raises(InvalidInputError, match="KUBETRAIN_BACKEND: got 'docker'"):
        backend_kind({"KUBETRAIN_BACKEND": "docker"})


def test_workspace_paths_map_between_pod_and_launcher(tmp_path: Path) -> None:
    view = WorkspaceView(claim="ws", local_dir=tmp_path)
    assert view.pod("datasets", "digits") == "/workspace/datasets/digits"
    assert view.local("/workspace/datasets/digits") == tmp_path / "datasets" / "digits"
    assert view.local("/workspace") == tmp_path
    with pytest.raises(InvalidInputError, match="not on the workspace volume"):
        view.local("/etc/passwd")
    with pytest.raises(InvalidInputError, match="not on the workspace volume"):
        view.local("/workspace/../etc")


def test_local_workspace_is_the_local_backends_claim_directory(tmp_path: Path) -> None:
    view = open_workspace("my-claim", kind="local", environ={"KUBETRAIN_LOCAL_ROOT": str(tmp_path)})
    assert view.local_dir == tmp_path / "claims" / "my-claim"
    assert view.local_dir.is_dir()
    with pytest.raises(InvalidInputError, match="workspace_pvc: got 'Not_A_Name'"):
        open_workspace("Not_A_Name", kind="local", environ={"KUBETRAIN_LOCAL_ROOT": str(tmp_path)})


def test_cluster_workspace_must_be_mounted() -> None:
    # This test machine has nothing mounted at /workspace: the launcher refuses to write the
    # data into its own container, where no training pod would ever see it.
    with pytest.raises(InvalidInputError, match="not mounted at /workspace"):
        open_workspace("kubetrain-workspace", kind="kubernetes")


# -- download step ------------------------------------------------------------------------------


def _request(source: str, *, sha256: str = "", shards: int = 1) -> DownloadRequest:
    return DownloadRequest(source=source, sha256=sha256, shards=shards, workspace_pvc="ws", refresh=False)


def test_dataset_directory_names() -> None:
    assert _request("builtin:digits").directory_name.startswith("digits-")
    assert _request("https://example.com/data/mnist.npz").directory_name.startswith("mnist-")
    assert _request("builtin:digits", shards=2).directory_name != _request("builtin:digits").directory_name


@pytest.mark.parametrize(
    ("source", "sha256", "shards", "name"),
    [
        ("builtin:digits", "", 1, "digits-d809e078"),
        ("https://example.com/data/mnist.npz?X-Amz-Signature=abc", "", 2, "mnist-60ac7017"),
        ("https://h/mnist/train-images-idx3-ubyte.gz,\nhttps://h/mnist/train-labels-idx1-ubyte.gz", "", 1,
         "train-images-idx3-ubyte-e77d5f9d"),
        ("https://h/data.npz", "cd" * 32, 1, "data-4719d83c"),
    ],
)  # fmt: skip
def test_a_data_sets_directory_keeps_its_name_across_versions(source: str, sha256: str, shards: int, name: str) -> None:
    # A later run reuses what an earlier one left on the claim only under the same name: these
    # are the names kubetrain has given these sources (the source as given goes into the digest).
    assert _request(source, sha256=sha256, shards=shards).directory_name == name


def test_the_request_checks_shards_then_the_source() -> None:
    with pytest.raises(InvalidInputError, match="shards: got 0; expected an integer >= 1"):
        _request("", shards=0)  # both wrong: shards first, as `kubetrain run` checks them
    with pytest.raises(DataError, match="source: got nothing"):
        _request(" , ")
    with pytest.raises(DataError, match=r"https://REDACTED@h/d.npz: credentials in the URL"):
        _request("https://u:secret@h/d.npz")
    with pytest.raises(DataError, match="unknown built-in data set"):
        _request("builtin:nope")
    request = _request("https://x/a.npz,\n https://x/b.npz")
    assert request.parsed.urls == ("https://x/a.npz", "https://x/b.npz")
    assert request.parsed.label == "https://x/a.npz, https://x/b.npz"
    assert not request.pinned


def test_the_step_parses_its_source_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBETRAIN_BACKEND", "local")
    monkeypatch.setenv("KUBETRAIN_LOCAL_ROOT", str(tmp_path / "local"))
    parsed: list[object] = []
    real = Source.__post_init__

    def counting(self: Source) -> None:
        parsed.append(self.given)
        real(self)

    monkeypatch.setattr(Source, "__post_init__", counting)
    step = partial(download_dataset_step, source="builtin:digits", sha256="", shards=1, workspace_pvc="ws")
    step(refresh=True, dataset=FakeArtifact(tmp_path / "a"))  # checked, named, downloaded, described
    assert parsed == ["builtin:digits"]
    step(refresh=False, dataset=FakeArtifact(tmp_path / "b"))  # checked, named, compared, reused
    assert parsed == ["builtin:digits"] * 2


def test_download_step_writes_the_workspace_and_describes_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBETRAIN_BACKEND", "local")
    monkeypatch.setenv("KUBETRAIN_LOCAL_ROOT", str(tmp_path / "local"))
    out = FakeArtifact(tmp_path / "kfp" / "dataset")
    meta = download_dataset_step(
        source="builtin:digits", sha256="", shards=2, workspace_pvc="ws", refresh=False, dataset=out
    )
    assert meta["path"].startswith("/workspace/datasets/digits-")
    assert meta["records"] == {"train": 1438, "test": 359}
    assert meta["shards"] == {"train": 2, "test": 1}
    assert meta["feature_shape"] == [1, 8, 8]
    assert meta["num_classes"] == 10
    assert meta["reused"] is False
    assert out.metadata == meta
    on_disk = tmp_path / "local" / "claims" / "ws" / meta["path"].removeprefix("/workspace/")
    assert (on_disk / "dataset.json").is_file()
    assert json.loads(Path(out.path).read_text())["name"] == "digits"

    again = download_dataset_step(
        source="builtin:digits",
        sha256="",
        shards=2,
        workspace_pvc="ws",
        refresh=False,
        dataset=FakeArtifact(tmp_path / "b"),
    )
    assert again["reused"] is True
    assert again["path"] == meta["path"]
    fresh = download_dataset_step(
        source="builtin:digits",
        sha256="",
        shards=2,
        workspace_pvc="ws",
        refresh=True,
        dataset=FakeArtifact(tmp_path / "c"),
    )
    assert fresh["reused"] is False


def test_a_step_ends_with_the_documented_exit_code(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        download_dataset_step(
            source="builtin:digits",
            sha256="",
            shards=0,
            workspace_pvc="ws",
            refresh=False,
            dataset=FakeArtifact(tmp_path),
        )
    assert exited.value.code == ExitCode.INVALID_INPUT
    assert "kubetrain: InvalidInputError: shards: got 0" in capsys.readouterr().err


# -- dataset location -------------------------------------------------------------------------


def test_dataset_location_comes_from_the_artifact(tmp_path: Path) -> None:
    good = FakeArtifact(tmp_path, {"path": "/workspace/datasets/x", "workspace_pvc": "ws"})
    assert dataset_location(good, workspace_pvc="ws") == "/workspace/datasets/x"
    with pytest.raises(InvalidInputError, match="lies on claim 'ws' but this step mounts 'other'"):
        dataset_location(good, workspace_pvc="other")
    with pytest.raises(InvalidInputError, match="no 'path' metadata"):
        dataset_location(FakeArtifact(tmp_path), workspace_pvc="ws")


def test_ps_batch_size_goes_to_the_master() -> None:
    spec = ps_job_spec(JobSettings(name="ps-0123456789ab", params=TrainingParams(batch_size=16)))
    assert "--batch-size" not in spec.worker.args
    i = spec.master.args.index("--batch-size")
    assert spec.master.args[i + 1] == "16"
    validate_strict(build_manifest(spec))


# -- parameters ---------------------------------------------------------------------------------

INPUTS = {
    "epochs": PipelineInput("epochs", "Integer", 5, True),
    "learning_rate": PipelineInput("learning_rate", "Float", 0.1, True),
    "refresh": PipelineInput("refresh", "Boolean", False, True),
    "dataset": PipelineInput("dataset", "String", "builtin:digits", True),
    "needed": PipelineInput("needed", "String", None, False),
}


def test_params_are_typed_by_the_pipeline() -> None:
    got = parse_params(["epochs=3", "learning_rate=0.5", "refresh=yes", "dataset=https://x/y=z", "needed=1"], INPUTS)
    assert got == {"epochs": 3, "learning_rate": 0.5, "refresh": True, "dataset": "https://x/y=z", "needed": "1"}


@pytest.mark.parametrize(
    ("pairs", "message"),
    [
        (["epochs=x", "needed=1"], "expected an integer"),
        (["refresh=maybe", "needed=1"], "expected true or false"),
        (["nope=1", "needed=1"], "no such parameter; it has dataset, epochs"),
        (["epochs", "needed=1"], "expected KEY=VALUE"),
        (["epochs=1", "epochs=2", "needed=1"], "given twice"),
        ([], "missing required parameters: needed"),
    ],
)
def test_bad_params(pairs: list[str], message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        parse_params(pairs, INPUTS)


def test_a_users_step_resolves_a_workspace_path_where_it_lies(tmp_path: Path) -> None:
    local = {"KUBETRAIN_BACKEND": "local", "KUBETRAIN_LOCAL_ROOT": str(tmp_path / "root")}
    claim_dir = tmp_path / "root" / "claims" / "team-claim"
    path = "/workspace/datasets/digits-1234"
    assert resolve_workspace_path(path, claim="team-claim", environ=local) == claim_dir / "datasets" / "digits-1234"
    dataset = FakeArtifact(tmp_path / "dataset.json", {"path": path, "workspace_pvc": "team-claim"})
    assert dataset_dir(dataset, environ=local) == claim_dir / "datasets" / "digits-1234"
    with pytest.raises(InvalidInputError, match="not on the workspace volume"):
        resolve_workspace_path("/etc/passwd", environ=local)
    with pytest.raises(InvalidInputError, match="no 'path'"):
        dataset_dir(FakeArtifact(tmp_path / "other", {}), environ=local)
    # In a cluster the path is itself, once the step mounts the claim; without it, the fix is named.
    with pytest.raises(InvalidInputError, match=r"kfp.kubernetes.mount_pvc"):
        resolve_workspace_path(path, environ={"KUBETRAIN_BACKEND": "kubernetes"})


def test_an_unpinned_download_warns_that_later_runs_get_this_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.data_helpers import mnist_files, sha256_hex, write_files

    monkeypatch.setenv("KUBETRAIN_BACKEND", "local")
    monkeypatch.setenv("KUBETRAIN_LOCAL_ROOT", str(tmp_path / "local"))
    files, _ = mnist_files(60, 20)
    write_files(tmp_path / "mnist", files)
    source = str(tmp_path / "mnist")
    step = partial(download_dataset_step, sha256="", shards=1, workspace_pvc="ws", refresh=False)
    step(source=source, dataset=FakeArtifact(tmp_path / "a"))
    assert "has no checksum" in capsys.readouterr().err
    # Reused from the claim: nothing downloaded, nothing to warn about.
    step(source=source, dataset=FakeArtifact(tmp_path / "b"))
    assert "has no checksum" not in capsys.readouterr().err
    pinned = ",".join(f"{tmp_path / 'mnist' / name}#sha256={sha256_hex(data)}" for name, data in files.items())
    step(source=pinned, dataset=FakeArtifact(tmp_path / "c"))
    assert "has no checksum" not in capsys.readouterr().err
    assert _request("builtin:digits").pinned and _request("https://x/a.npz", sha256="ab" * 32).pinned
    assert not _request("https://x/a.npz").pinned and not _request(f"{pinned},https://x/extra.gz").pinned
