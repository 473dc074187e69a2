"""The env the local backend injects is the env the operators inject (operator-contracts.md §2, §6)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from kubetrain.backends.local.operators.mpijob import mpi_operator_env
from kubetrain.backends.local.operators.pytorchjob import pytorch_operator_env, rendezvous_ports
from kubetrain.manifests import build_mpijob, build_pytorchjob
from kubetrain.specs import JobMeta, MPIJobSpec, PyTorchJobSpec
from kubetrain.specs.common import ReplicaSpec
from kubetrain.specs.jobs import ElasticPolicy


def _env(items: list[dict[str, str]]) -> dict[str, str]:
    names = [i["name"] for i in items]
    assert len(names) == len(set(names)), f"duplicate env names: {names}"
    return {i["name"]: i["value"] for i in items}


def _pytorchjob(workers: int, *, master: bool = True, nproc: str = "1", **kw: Any) -> dict[str, Any]:
    replica = ReplicaSpec(image="img", command=("python", "t.py"))
    spec = PyTorchJobSpec(
        meta=JobMeta(name="tj"),
        master=replica if master else None,
        worker=ReplicaSpec(image="img", command=("python", "t.py"), replicas=workers) if workers else None,
        nproc_per_node=nproc,
        master_port=29400,
        **kw,
    )
    return build_pytorchjob(spec)


def test_master_and_workers_get_rank_world_size_and_master_address() -> None:
    job = _pytorchjob(2)
    common = {
        "PYTHONUNBUFFERED": "1",
        "MASTER_PORT": "29400",
        "MASTER_ADDR": "tj-master-0",
        "PET_MASTER_PORT": "29400",
        "PET_MASTER_ADDR": "tj-master-0",
        "WORLD_SIZE": "3",
        "PET_NNODES": "3",
        "PET_NPROC_PER_NODE": "1",
    }
    assert _env(pytorch_operator_env(job, "Master", 0)) == {**common, "RANK": "0", "PET_NODE_RANK": "0"}
    assert _env(pytorch_operator_env(job, "Worker", 0)) == {**common, "RANK": "1", "PET_NODE_RANK": "1"}
    assert _env(pytorch_operator_env(job, "Worker", 1)) == {**common, "RANK": "2", "PET_NODE_RANK": "2"}


def test_world_size_multiplies_an_integer_nproc_per_node_only() -> None:
    assert _env(pytorch_operator_env(_pytorchjob(1, nproc="4"), "Worker", 0))["WORLD_SIZE"] == "8"
    auto = _env(pytorch_operator_env(_pytorchjob(1, nproc="auto"), "Worker", 0))
    assert (auto["WORLD_SIZE"], auto["PET_NPROC_PER_NODE"]) == ("2", "auto")


def test_without_a_master_there_is_no_master_rank_or_world_size() -> None:
    env = _env(pytorch_operator_env(_pytorchjob(2, master=False), "Worker", 1))
    assert env == {"PYTHONUNBUFFERED": "1", "PET_NNODES": "2", "PET_NPROC_PER_NODE": "1"}


def test_elastic_jobs_get_the_rendezvous_env() -> None:
    job = _pytorchjob(2, master=False, elastic=ElasticPolicy(min_replicas=1, max_replicas=3, max_restarts=2))
    env = _env(pytorch_operator_env(job, "Worker", 0))
    assert env == {
        "PYTHONUNBUFFERED": "1",
        "PET_RDZV_ENDPOINT": "tj-worker-0:29400",
        "PET_RDZV_BACKEND": "c10d",
        "PET_NNODES": "1:3",
        "PET_MAX_RESTARTS": "2",
        "PET_NPROC_PER_NODE": "1",
    }


def test_locally_the_rendezvous_ports_are_the_jobs_own() -> None:
    """Issue 49: torch's stores listen on every interface; two local jobs must not share a port."""
    job = _pytorchjob(1)
    assert rendezvous_ports(job) == {29400}
    env = _env(pytorch_operator_env(job, "Worker", 0, ports={29400: 21001}))
    assert (env["MASTER_PORT"], env["PET_MASTER_PORT"]) == ("21001", "21001")
    elastic = _pytorchjob(2, master=False, elastic=ElasticPolicy(min_replicas=1, max_replicas=2))
    assert rendezvous_ports(elastic) == {29400}  # worker-0 hosts torchrun's c10d store there
    assert _env(pytorch_operator_env(elastic, "Worker", 1, ports={29400: 21002}))["PET_RDZV_ENDPOINT"] == (
        "tj-worker-0:21002"
    )
    # A rendezvous server outside the job keeps its port.
    elastic["spec"]["elasticPolicy"]["rdzvHost"] = "etcd.infra"
    assert rendezvous_ports(elastic) == set()
    assert _env(pytorch_operator_env(elastic, "Worker", 1, ports={29400: 21002}))["PET_RDZV_ENDPOINT"] == (
        "etcd.infra:29400"
    )


def test_a_missing_port_defaults_to_the_operator_default() -> None:
    job = _pytorchjob(1)
    for replica in job["spec"]["pytorchReplicaSpecs"].values():
        del replica["template"]["spec"]["containers"][0]["ports"]
    assert _env(pytorch_operator_env(job, "Worker", 0))["MASTER_PORT"] == "23456"


@pytest.mark.parametrize(
    ("impl", "expected"),
    [
        (
            "OpenMPI",
            {
                "OMPI_MCA_orte_keep_fqdn_hostnames": "true",
                "OMPI_MCA_orte_default_hostfile": "/etc/mpi/hostfile",
                "OMPI_MCA_plm_rsh_args": "-o ConnectionAttempts=10",
                "OMPI_MCA_orte_set_default_slots": "2",
            },
        ),
        (
            "Intel",
            {
                "I_MPI_HYDRA_HOST_FILE": "/etc/mpi/hostfile",
                "I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS": "-o ConnectionAttempts=10",
                "I_MPI_PERHOST": "2",
            },
        ),
        ("MPICH", {"HYDRA_HOST_FILE": "/etc/mpi/hostfile", "HYDRA_LAUNCH_EXTRA_ARGS": "-o ConnectionAttempts=10"}),
    ],
)
def test_mpi_launcher_env_per_implementation(impl: str, expected: dict[str, str]) -> None:
    spec = MPIJobSpec(
        meta=JobMeta(name="mj"),
        launcher=ReplicaSpec(image="img", command=("mpirun", "python", "t.py")),
        worker=ReplicaSpec(image="img", replicas=2),
        slots_per_worker=2,
        mpi_implementation=impl,  # type: ignore[arg-type]
    )
    job = build_mpijob(spec)
    env = _env(mpi_operator_env(job, 2))
    nvidia = {"NVIDIA_VISIBLE_DEVICES": "", "NVIDIA_DRIVER_CAPABILITIES": ""}
    assert env == {"K_MPI_JOB_ROLE": "launcher", **expected, **nvidia}
    as_worker = copy.deepcopy(job)
    as_worker["spec"]["runLauncherAsWorker"] = True
    assert "NVIDIA_VISIBLE_DEVICES" not in _env(mpi_operator_env(as_worker, 2))
