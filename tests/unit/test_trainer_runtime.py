"""A TrainJob resolved against its runtime, as the Trainer v2.3 controller does it, and localized."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kubetrain.backends.local.operators.trainer_runtime import localize, resolve
from kubetrain.errors import ManifestError
from kubetrain.manifests import build_manifest
from kubetrain.manifests.runtimes import kubetrain_mpi_runtime, torch_distributed_runtime
from kubetrain.presets import CHAINERMN_IMAGE, JobSettings, TrainingParams, mpi_trainjob_spec, pytorch_trainjob_spec
from tests.crd_schema import strict_errors

PARAMS = TrainingParams()


def _rjob(jobset: dict[str, Any], name: str) -> dict[str, Any]:
    return next(r for r in jobset["spec"]["replicatedJobs"] if r["name"] == name)


def _container(rjob: dict[str, Any]) -> dict[str, Any]:
    pod = rjob["template"]["spec"]["template"]["spec"]
    return next(c for c in pod["containers"] if c["name"] == "node")


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env") or []}


def test_torch_trainjob_resolves_to_nodes_with_the_rendezvous_env() -> None:
    trainjob = build_manifest(
        pytorch_trainjob_spec(JobSettings(name="tj", params=PARAMS, workspace_pvc="ws"), workers=2)
    )
    jobset = resolve(trainjob, torch_distributed_runtime())
    assert strict_errors(jobset) == []  # a valid JobSet, as the Trainer would create it
    node = _rjob(jobset, "node")
    assert node["template"]["spec"]["parallelism"] == node["template"]["spec"]["completions"] == 3
    container = _container(node)
    assert container["image"] == trainjob["spec"]["trainer"]["image"]
    assert container["command"][:4] == ["python", "-m", "torch.distributed.run", "-m"]
    env = _env(container)
    assert env["PET_NNODES"] == "3" and env["PET_NPROC_PER_NODE"] == "1"
    assert env["PET_MASTER_ADDR"] == "tj-node-0-0.tj" and env["PET_MASTER_PORT"] == "29500"
    assert "job-completion-index" in str(env["PET_NODE_RANK"])
    # kubetrain's patch: the workspace claim, the restricted security context, the KFP labels.
    pod = node["template"]["spec"]["template"]["spec"]
    assert {"name": "workspace", "persistentVolumeClaim": {"claimName": "ws"}} in pod["volumes"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert {"name": "workspace", "mountPath": "/workspace"} in container["volumeMounts"]


def test_localized_torch_nodes_are_told_the_jobs_own_master_port(tmp_path: Path) -> None:
    """Issue 49: torchrun's store listens on every interface; two local TrainJobs must not share 29500."""
    trainjob = build_manifest(
        pytorch_trainjob_spec(JobSettings(name="tj", params=PARAMS, workspace_pvc="ws"), workers=1)
    )
    held: list[int] = []

    def hold(port: int) -> int:
        held.append(port)
        return 21003

    jobset = localize(resolve(trainjob, torch_distributed_runtime()), workdir=tmp_path, total_ranks=2, hold_port=hold)
    assert _env(_container(_rjob(jobset, "node")))["PET_MASTER_PORT"] == "21003"
    assert held == [29500]


def test_mpi_trainjob_resolves_to_a_launcher_with_the_hostfile_and_sshd_nodes() -> None:
    trainjob = build_manifest(mpi_trainjob_spec(JobSettings(name="tjm", params=PARAMS), workers=3, slots_per_worker=2))
    jobset = resolve(trainjob, kubetrain_mpi_runtime(CHAINERMN_IMAGE))
    assert strict_errors(jobset) == []
    node, launcher = _rjob(jobset, "node"), _rjob(jobset, "launcher")
    assert node["template"]["spec"]["parallelism"] == 3
    assert _container(node)["command"] == ["/usr/sbin/sshd"]  # the runtime's, not the trainer's
    assert _container(launcher)["command"][:3] == ["mpirun", "-n", "6"]
    env = _env(_container(launcher))
    assert env["OMPI_MCA_orte_default_hostfile"] == "/etc/mpi/hostfile"
    assert env["OMPI_MCA_orte_set_default_slots"] == "2"
    assert env["CHAINERMN_FORCE_ABORT_ON_EXCEPTION"] == "1"
    mounts = {m["name"]: m["mountPath"] for m in _container(launcher)["volumeMounts"]}
    assert mounts["mpi-ssh-auth"] == "/home/mpiuser/.ssh" and mounts["mpi-hostfile"] == "/etc/mpi"


def test_localized_mpi_runs_every_rank_here(tmp_path: Path) -> None:
    trainjob = build_manifest(mpi_trainjob_spec(JobSettings(name="tjm", params=PARAMS), workers=3, slots_per_worker=2))
    local = localize(resolve(trainjob, kubetrain_mpi_runtime(CHAINERMN_IMAGE)), workdir=tmp_path, total_ranks=6)
    assert (tmp_path / "etc-mpi" / "hostfile").read_text() == "localhost slots=6\n"
    node = _container(_rjob(local, "node"))
    assert "readinessProbe" not in node and "sshd" not in " ".join(node["command"])
    launcher_pod = _rjob(local, "launcher")["template"]["spec"]["template"]["spec"]
    hostfile = next(v for v in launcher_pod["volumes"] if v["name"] == "mpi-hostfile")
    assert hostfile == {"name": "mpi-hostfile", "hostPath": {"path": str(tmp_path / "etc-mpi")}}
    assert _env(_container(_rjob(local, "launcher")))["OMPI_MCA_rmaps_base_oversubscribe"] == "1"


def test_a_patch_for_a_job_the_runtime_lacks_is_refused() -> None:
    trainjob = build_manifest(mpi_trainjob_spec(JobSettings(name="tjm", params=PARAMS)))
    with pytest.raises(ManifestError, match="patches replicated job 'launcher', which the runtime does not have"):
        resolve(trainjob, torch_distributed_runtime())


def test_trainjob_rules_are_checked_before_submission() -> None:
    from kubetrain.errors import SpecError
    from kubetrain.manifests.validate import validate_manifest
    from kubetrain.presets import PodOptions
    from kubetrain.specs import EnvVar

    with pytest.raises(SpecError, match="PET_MASTER_ADDR"):
        pytorch_trainjob_spec(
            JobSettings(name="tj", params=PARAMS, pod=PodOptions(env=(EnvVar(name="PET_MASTER_ADDR", value="x"),)))
        )
    trainjob = build_manifest(pytorch_trainjob_spec(JobSettings(name="tj", params=PARAMS)))
    trainjob["spec"]["trainer"]["env"] = [{"name": "PET_NNODES", "value": "9"}]
    with pytest.raises(ManifestError, match="PET_NNODES are set by the Trainer"):
        validate_manifest(trainjob)
    long_name = build_manifest(pytorch_trainjob_spec(JobSettings(name="tj", params=PARAMS)))
    long_name["metadata"]["name"] = "t" * 50
    with pytest.raises(ManifestError, match="too long"):
        validate_manifest(long_name)
    with pytest.raises(SpecError, match="a shorter name"):
        pytorch_trainjob_spec(JobSettings(name="t" * 50, params=PARAMS))
