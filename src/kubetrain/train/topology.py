"""Where this process sits in the job, read from the environment its launcher set.

PyTorch: the training-operator injects `MASTER_ADDR`, `MASTER_PORT`, `WORLD_SIZE` and `RANK` into
every container of a PyTorchJob with a Master (operator-contracts.md §2); torchrun sets the same
four plus `LOCAL_RANK` for each process it starts (reading its own arguments from `PET_*`). With
none of them set the program is a plain single process.

MPI: `mpiexec` tells each process its rank and size (`OMPI_COMM_WORLD_*` for Open MPI,
`PMI_*` for MPICH/Intel hydra), so the ChainerMN program can tell, without importing mpi4py,
whether it runs under MPI at all.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from kubetrain.errors import InvalidInputError, SpecError

__all__ = [
    "BIND_ENV",
    "MpiWorld",
    "TorchTopology",
    "mpi_world_from_env",
    "pytorchjob_env",
    "torch_topology_from_env",
]

_TORCH_VARS = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK")
# Set by torchrun (torch.distributed.elastic) for every worker process it starts.
_TORCHRUN_MARKERS = ("TORCHELASTIC_RUN_ID", "GROUP_RANK", "LOCAL_WORLD_SIZE")

Launcher = Literal["single", "operator", "torchrun"]

# The address this replica's servers should listen on; the local backend sets it to the
# replica's own loopback address (and a JobSet to the pod IP).
BIND_ENV = "KUBETRAIN_BIND_ADDRESS"


@dataclass(frozen=True)
class TorchTopology:
    """Rank, world size and rendezvous address of one PyTorch training process."""

    rank: int
    world_size: int
    local_rank: int
    master_addr: str
    master_port: int
    launcher: Launcher
    # Where rank 0's store listens; empty: every interface (torch's default, right in a pod).
    bind_address: str = ""

    def __post_init__(self) -> None:
        if self.world_size < 1:
            raise SpecError("WORLD_SIZE", self.world_size, "an integer >= 1")
        if not 0 <= self.rank < self.world_size:
            raise SpecError("RANK", self.rank, f"an integer in [0, {self.world_size - 1}]")
        if self.local_rank < 0:
            raise SpecError("LOCAL_RANK", self.local_rank, "an integer >= 0")
        if self.launcher != "single" and not 0 < self.master_port < 65536:
            raise SpecError("MASTER_PORT", self.master_port, "a TCP port in [1, 65535]")
        if self.launcher != "single" and not self.master_addr:
            raise SpecError("MASTER_ADDR", self.master_addr, "a host name or address")
        if self.bind_address and _ip_literal(self.bind_address) is None:
            raise SpecError(BIND_ENV, self.bind_address, "an IPv4 or IPv6 address")

    @property
    def distributed(self) -> bool:
        """Whether a process group is needed (more than one process)."""
        return self.world_size > 1

    @property
    def is_chief(self) -> bool:
        """Rank 0 writes checkpoints, the model and metrics.json."""
        return self.rank == 0


def _int_var(env: Mapping[str, str], name: str) -> int:
    raw = env[name]
    try:
        return int(raw)
    except ValueError as e:
        raise SpecError(name, raw, "an integer") from e


def _ip_literal(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def _bind_address(env: Mapping[str, str]) -> str:
    """Where rank 0 of an operator-started job hosts its store: `$KUBETRAIN_BIND_ADDRESS`, else
    MASTER_ADDR when that is a loopback address, else every interface ("").

    On one machine (the local backend, tests) several jobs share the loopback device, so a store
    on the wildcard address would take every job's connections to its port; in a pod the
    wildcard is harmless and a host name may resolve to several addresses, so it stays.
    """
    explicit = env.get(BIND_ENV, "").strip()
    if explicit:
        return explicit
    master = _ip_literal(env["MASTER_ADDR"])
    return str(master) if master is not None and master.is_loopback else ""


def torch_topology_from_env(env: Mapping[str, str]) -> TorchTopology:
    """The topology the operator or torchrun described in `env`; single process if none did."""
    present = [v for v in _TORCH_VARS if env.get(v)]
    under_torchrun = any(m in env for m in _TORCHRUN_MARKERS)
    if not present:
        pet = sorted(k for k in env if k.startswith("PET_"))
        if pet:
            # An elastic PyTorchJob sets only PET_* (no Master, so no RANK): those are torchrun's
            # arguments, and only torchrun turns them into a rank.
            raise InvalidInputError(
                f"found torchrun settings {pet} but none of {list(_TORCH_VARS)}; start this "
                "program under torchrun (e.g. `torchrun -m kubetrain.train.torch_ddp ...`)"
            )
        return TorchTopology(rank=0, world_size=1, local_rank=0, master_addr="", master_port=0, launcher="single")
    missing = [v for v in _TORCH_VARS if not env.get(v)]
    if missing:
        raise InvalidInputError(
            f"distributed environment incomplete: {present} set but {missing} missing; "
            f"expected all of {list(_TORCH_VARS)} (as the training-operator or torchrun sets them)"
        )
    nproc = env.get("PET_NPROC_PER_NODE", "")
    if not under_torchrun and nproc.isdigit() and int(nproc) > 1:
        # WORLD_SIZE counts nproc processes per pod but RANK is the pod's index: only torchrun
        # can expand that into per-process ranks.
        raise InvalidInputError(
            f"PET_NPROC_PER_NODE={nproc}: several processes per pod need torchrun to assign "
            "their ranks; start the program under torchrun or set nprocPerNode to 1"
        )
    return TorchTopology(
        rank=_int_var(env, "RANK"),
        world_size=_int_var(env, "WORLD_SIZE"),
        local_rank=_int_var(env, "LOCAL_RANK") if env.get("LOCAL_RANK") else 0,
        master_addr=env["MASTER_ADDR"],
        master_port=_int_var(env, "MASTER_PORT"),
        launcher="torchrun" if under_torchrun else "operator",
        # Under torchrun the agent hosts the store: the training processes bind nothing.
        bind_address="" if under_torchrun else _bind_address(env),
    )


def pytorchjob_env(
    *, replica_index: int, is_master: bool, replicas: int, master_addr: str, master_port: int
) -> dict[str, str]:
    """The variables the training-operator appends to a PyTorchJob replica's container.

    Non-elastic job with a Master, `nprocPerNode` left at its default (operator-contracts.md §2):
    the Master is rank 0, Worker i is rank i+1. Used to start local process groups exactly as the
    operator would (tests, benchmarks) and, inverted, by :func:`torch_topology_from_env`.
    """
    if replicas < 1:
        raise SpecError("replicas", replicas, ">= 1")
    rank = replica_index if is_master else replica_index + 1
    if not 0 <= rank < replicas:
        raise SpecError("replica_index", replica_index, f"a rank in [0, {replicas - 1}]")
    return {
        "PYTHONUNBUFFERED": "1",
        "MASTER_PORT": str(master_port),
        "PET_MASTER_PORT": str(master_port),
        "MASTER_ADDR": master_addr,
        "PET_MASTER_ADDR": master_addr,
        "WORLD_SIZE": str(replicas),
        "RANK": str(rank),
        "PET_NODE_RANK": str(rank),
        "PET_NPROC_PER_NODE": "auto",
        "PET_NNODES": str(replicas),
    }


@dataclass(frozen=True)
class MpiWorld:
    """Rank and size of this process as its MPI launcher announced them."""

    rank: int
    size: int
    local_rank: int

    def __post_init__(self) -> None:
        if self.size < 1:
            raise SpecError("MPI world size", self.size, "an integer >= 1")
        if not 0 <= self.rank < self.size:
            raise SpecError("MPI rank", self.rank, f"an integer in [0, {self.size - 1}]")


# (size, rank, local rank) variables of each MPI launcher family.
_MPI_VARS = (
    ("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK"),
    ("PMI_SIZE", "PMI_RANK", "MPI_LOCALRANKID"),
)


def mpi_world_from_env(env: Mapping[str, str]) -> MpiWorld | None:
    """The MPI world this process was started in, or None when no MPI launcher started it."""
    for size_var, rank_var, local_var in _MPI_VARS:
        if env.get(size_var):
            size = _int_var(env, size_var)
            rank = _int_var(env, rank_var) if env.get(rank_var) else 0
            local = _int_var(env, local_var) if env.get(local_var) else 0
            return MpiWorld(rank=rank, size=size, local_rank=local)
    return None
