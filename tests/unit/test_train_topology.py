"""Topology from the launcher's environment: training-operator, torchrun, MPI, or none."""

from __future__ import annotations

import pytest

from kubetrain.errors import InvalidInputError, SpecError
from kubetrain.train.topology import mpi_world_from_env, pytorchjob_env, torch_topology_from_env


def test_no_distributed_env_is_a_single_process() -> None:
    topo = torch_topology_from_env({"HOME": "/root", "PATH": "/usr/bin"})
    assert (topo.rank, topo.world_size, topo.launcher, topo.distributed) == (0, 1, "single", False)


@pytest.mark.parametrize("replica", [(0, True), (0, False), (1, False)])
def test_operator_env_round_trips(replica: tuple[int, bool]) -> None:
    index, is_master = replica
    env = pytorchjob_env(
        replica_index=index,
        is_master=is_master,
        replicas=3,
        master_addr="job-master-0",
        master_port=23456,
    )
    topo = torch_topology_from_env(env)
    assert topo.rank == (index if is_master else index + 1)
    assert (topo.world_size, topo.master_addr, topo.master_port) == (3, "job-master-0", 23456)
    assert topo.launcher == "operator"
    assert topo.local_rank == 0
    assert topo.is_chief == (topo.rank == 0)


def test_operator_env_matches_the_contract() -> None:
    env = pytorchjob_env(replica_index=1, is_master=False, replicas=3, master_addr="j-master-0", master_port=23456)
    assert env["RANK"] == env["PET_NODE_RANK"] == "2"
    assert env["MASTER_ADDR"] == env["PET_MASTER_ADDR"] == "j-master-0"
    assert env["MASTER_PORT"] == env["PET_MASTER_PORT"] == "23456"
    assert env["PET_NNODES"] == env["WORLD_SIZE"] == "3"
    assert env["PYTHONUNBUFFERED"] == "1"


def test_torchrun_env_is_recognised_with_local_rank() -> None:
    env = {
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "29500",
        "WORLD_SIZE": "4",
        "RANK": "3",
        "LOCAL_RANK": "1",
        "LOCAL_WORLD_SIZE": "2",
        "GROUP_RANK": "1",
        "TORCHELASTIC_RUN_ID": "none",
        "PET_NPROC_PER_NODE": "2",
    }
    topo = torch_topology_from_env(env)
    assert (topo.rank, topo.local_rank, topo.world_size, topo.launcher) == (3, 1, 4, "torchrun")


def test_incomplete_env_names_what_is_missing() -> None:
    with pytest.raises(InvalidInputError, match=r"MASTER_PORT"):
        torch_topology_from_env({"MASTER_ADDR": "x", "WORLD_SIZE": "2", "RANK": "0"})


def test_elastic_env_without_torchrun_is_refused() -> None:
    env = {"PET_NNODES": "1:3", "PET_RDZV_ENDPOINT": "job-worker-0:23456"}
    with pytest.raises(InvalidInputError, match="torchrun"):
        torch_topology_from_env(env)


def test_several_processes_per_pod_need_torchrun() -> None:
    env = pytorchjob_env(replica_index=0, is_master=True, replicas=2, master_addr="m", master_port=23456)
    env["PET_NPROC_PER_NODE"] = "4"
    with pytest.raises(InvalidInputError, match="PET_NPROC_PER_NODE=4"):
        torch_topology_from_env(env)


@pytest.mark.parametrize(
    ("var", "value", "field"),
    [("RANK", "3", "RANK"), ("WORLD_SIZE", "zero", "WORLD_SIZE"), ("MASTER_PORT", "70000", "MASTER_PORT")],
)
def test_bad_values_name_the_variable(var: str, value: str, field: str) -> None:
    env = {"MASTER_ADDR": "a", "MASTER_PORT": "1234", "WORLD_SIZE": "3", "RANK": "0", var: value}
    with pytest.raises(SpecError) as info:
        torch_topology_from_env(env)
    assert info.value.field == field


def test_mpi_world_from_open_mpi_and_hydra_env() -> None:
    assert mpi_world_from_env({}) is None
    ompi = mpi_world_from_env(
        {"OMPI_COMM_WORLD_SIZE": "3", "OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_LOCAL_RANK": "2"}
    )
    assert ompi is not None
    assert (ompi.rank, ompi.size, ompi.local_rank) == (2, 3, 2)
    hydra = mpi_world_from_env({"PMI_SIZE": "2", "PMI_RANK": "1"})
    assert hydra is not None
    assert (hydra.rank, hydra.size, hydra.local_rank) == (1, 2, 0)


def test_mpi_rank_out_of_range_is_an_error() -> None:
    with pytest.raises(SpecError, match="MPI rank"):
        mpi_world_from_env({"OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_RANK": "2"})


def test_nccl_with_more_processes_than_gpus_is_refused_before_nccl_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    """Measured on an H100: two torchrun processes with nccl on one GPU fail in NCCL ("Duplicate GPU detected")."""
    import torch

    from kubetrain.train.torch_dist import select_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    env = {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500",
           "TORCHELASTIC_RUN_ID": "x", "LOCAL_WORLD_SIZE": "2"}  # fmt: skip
    with pytest.raises(InvalidInputError, match=r"needs one GPU per process: this node runs 2 processes but sees 1"):
        select_device("nccl", torch_topology_from_env(env))
