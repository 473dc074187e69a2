"""Golden YAML for representative manifests. Refresh all of them with `make golden`.

A difference means a change in what kubetrain submits to clusters: review the diff, then refresh.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from kubetrain.cli import main
from kubetrain.commands import render
from kubetrain.manifests import build_ps_network_policy
from kubetrain.manifests.runtimes import kubetrain_mpi_runtime
from kubetrain.presets import CHAINERMN_IMAGE, JobSettings, TrainingParams, ps_job_spec
from tests.crd_schema import strict_errors, validate_strict
from tools.cluster.kfp.profiles import Profile, profile_objects

GOLDEN = Path(__file__).resolve().parent.parent / "golden" / "manifests"
UPDATE = os.environ.get("KUBETRAIN_UPDATE_GOLDEN") == "1"

# The "done when" set of issue 2, rendered exactly as a user would.
CASES = {
    "pytorch-master-only": ["pytorchjob", "--name", "mnist-solo", "--workers", "0"],
    "pytorch-master-3-workers": ["pytorchjob", "--name", "mnist-ddp", "--workers", "3"],
    "pytorch-elastic-1-4": ["pytorchjob", "--name", "mnist-elastic", "--workers", "2", "--elastic", "1:4"],
    "mpi-launcher-2-workers": ["mpijob", "--name", "mnist-chainermn", "--workers", "2"],
    "ps-1-master-2-ps-3-workers": ["psjob", "--name", "mnist-ps", "--ps", "2", "--workers", "3",
                                   "--workspace-pvc", "kubetrain-workspace"],
    "pytorch-gpu-workspace": ["pytorchjob", "--name", "gpu", "--workers", "1", "--gpus", "1", "--backend", "nccl",
                              "--cpu", "4", "--memory", "16Gi", "--workspace-pvc", "kubetrain-workspace"],
    # Kubeflow Trainer v2 (issue 13).
    "trainjob-pytorch-2-nodes": ["trainjob", "--name", "mnist-tj", "--workers", "1",
                                 "--workspace-pvc", "kubetrain-workspace"],
    "trainjob-chainermn-2-nodes": ["trainjob", "--framework", "chainermn", "--name", "mnist-tj-mpi", "--workers", "2",
                                   "--workspace-pvc", "kubetrain-workspace"],
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(CASES))
def test_render_matches_golden_and_validates(
    case: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # render's default run id is random (unique per render); a fixed one keeps the files comparable.
    monkeypatch.setattr(render, "render_run_id", lambda: "render-golden")
    assert main(["render", *CASES[case]]) == 0
    text = capsys.readouterr().out
    manifest = yaml.safe_load(text)
    validate_strict(manifest)
    path = GOLDEN / f"{case}.yaml"
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"missing golden file {path}; run `make golden`"
    assert text == path.read_text(), f"{case}: rendered manifest differs from {path}; review, then `make golden`"


NETWORK_POLICY = "ps-network-policy"


def test_the_ps_network_policy_matches_golden_and_validates() -> None:
    """What a PS job's NetworkPolicy admits (issue 48.2), for the golden PS JobSet's job."""
    spec = ps_job_spec(
        JobSettings(name="mnist-ps", params=TrainingParams(), workspace_pvc="kubetrain-workspace"),
        ps_replicas=2,
        workers=3,
    )
    manifest = build_ps_network_policy(spec)
    assert strict_errors(manifest) == []
    text = yaml.safe_dump(manifest, sort_keys=False)
    path = GOLDEN / f"{NETWORK_POLICY}.yaml"
    if UPDATE:
        path.write_text(text)
    assert path.exists(), f"missing golden file {path}; run `make golden`"
    assert text == path.read_text(), f"the PS NetworkPolicy differs from {path}; review, then `make golden`"


# Not a job: beside the job manifests it would be read as one (tests/cluster/test_real_apiserver.py).
PROFILE_GOLDEN = GOLDEN.parent / "cluster" / "profile-alice.yaml"


def test_a_profiles_objects_match_golden() -> None:
    """What the multi-user tier creates for a profile with a quota (tools/cluster/kfp/profiles.py, issue 47)."""
    text = profile_objects(Profile("alice", "alice@example.com", {"requests.cpu": "2", "requests.memory": "4Gi"}))
    path = PROFILE_GOLDEN
    if UPDATE:
        path.write_text(text)
    assert path.exists(), f"missing golden file {path}; run `make golden`"
    assert text == path.read_text(), f"the profile's objects differ from {path}; review, then `make golden`"


def test_no_stale_golden_files() -> None:
    on_disk = {p.stem for p in GOLDEN.glob("*.yaml")}
    expected = {*CASES, NETWORK_POLICY}
    assert on_disk == expected, f"golden files without a case: {sorted(on_disk - expected)}"
    assert {p.name for p in PROFILE_GOLDEN.parent.glob("*.yaml")} == {PROFILE_GOLDEN.name}


RUNTIME_FILE = Path(__file__).resolve().parents[2] / "deploy" / "runtimes" / "kubetrain-mpi.yaml"


def test_the_shipped_mpi_runtime_is_the_builders_and_valid() -> None:
    """deploy/runtimes/kubetrain-mpi.yaml is `kubetrain_mpi_runtime()` (refreshed by `make golden`)."""
    expected = kubetrain_mpi_runtime(CHAINERMN_IMAGE)
    assert strict_errors(expected) == []
    header = "".join(line for line in RUNTIME_FILE.read_text().splitlines(keepends=True) if line.startswith("#"))
    text = header + yaml.safe_dump(expected, sort_keys=False)
    if UPDATE:
        RUNTIME_FILE.write_text(text)
    assert RUNTIME_FILE.read_text() == text, f"{RUNTIME_FILE} differs from kubetrain_mpi_runtime(); `make golden`"
