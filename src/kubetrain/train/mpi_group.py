"""Membership of the ChainerMN program: a ChainerMN communicator under MPI, or a single process.

mpi4py and chainermn are imported only when an MPI launcher started this process, so the
program runs as a plain Chainer process on a machine (or image) without MPI.
"""

from __future__ import annotations

import os
import sys
from typing import Any, NoReturn, Protocol

import numpy as np
import numpy.typing as npt

from kubetrain.errors import InvalidInputError, TrainingError
from kubetrain.train.chainer_models import chainer  # first: makes chainer importable
from kubetrain.train.common import log
from kubetrain.train.topology import MpiWorld

__all__ = ["Group", "MpiGroup", "SingleGroup", "open_group"]

Arrays = tuple[npt.NDArray[np.float32], npt.NDArray[np.int64]]


class Group(Protocol):
    """What the training loop needs from its process group."""

    rank: int
    world_size: int
    intra_rank: int
    communicator: Any  # the ChainerMN communicator, None for a single process

    def allreduce_sum(self, values: list[float]) -> list[float]:
        """Element-wise sum over all ranks."""
        ...

    def bcast_obj(self, obj: Any) -> Any:
        """Rank 0's `obj` on every rank."""
        ...

    def broadcast_int(self, value: int) -> int:
        """Rank 0's `value` on every rank."""
        ...

    def scatter(
        self,
        arrays: Arrays | None,
        *,
        feature_shape: tuple[int, ...],
        shuffle: bool,
        seed: int,
        equal: bool,
    ) -> Arrays:
        """This rank's part of rank 0's (x, y)."""
        ...

    def abort(self, code: int) -> NoReturn:
        """End the whole job with `code`."""
        ...


class SingleGroup:
    """One plain process: every collective is the identity."""

    rank = 0
    world_size = 1
    intra_rank = 0
    communicator: Any = None

    def allreduce_sum(self, values: list[float]) -> list[float]:
        """The values themselves."""
        return [float(v) for v in values]

    def bcast_obj(self, obj: Any) -> Any:
        """The object itself."""
        return obj

    def broadcast_int(self, value: int) -> int:
        """The value itself."""
        return int(value)

    def scatter(
        self,
        arrays: Arrays | None,
        *,
        feature_shape: tuple[int, ...],
        shuffle: bool,
        seed: int,
        equal: bool,
    ) -> Arrays:
        """All of the data (order is up to the training loop)."""
        del feature_shape, shuffle, seed, equal
        if arrays is None:
            raise TrainingError("rank 0 has no data to scatter")
        return arrays

    def abort(self, code: int) -> NoReturn:
        """Exit with `code`."""
        sys.exit(code)


class MpiGroup:
    """A ChainerMN communicator over MPI.COMM_WORLD."""

    def __init__(self, communicator: Any) -> None:
        self.communicator = communicator
        self.rank = int(communicator.rank)
        self.world_size = int(communicator.size)
        self.intra_rank = int(communicator.intra_rank)

    def allreduce_sum(self, values: list[float]) -> list[float]:
        """Element-wise sum over all ranks (float64 numpy allreduce, not pickled objects)."""
        out = self.communicator.allreduce(np.asarray(values, dtype=np.float64))
        return [float(v) for v in np.asarray(out)]

    def bcast_obj(self, obj: Any) -> Any:
        """Rank 0's `obj` on every rank (ChainerMN requires None as the other ranks' argument)."""
        return self.communicator.bcast_obj(obj if self.rank == 0 else None, root=0)

    def broadcast_int(self, value: int) -> int:
        """Rank 0's `value` on every rank."""
        return int(self.bcast_obj(value))

    def scatter(
        self,
        arrays: Arrays | None,
        *,
        feature_shape: tuple[int, ...],
        shuffle: bool,
        seed: int,
        equal: bool,
    ) -> Arrays:
        """chainermn.scatter_dataset of rank 0's (x, y), turned back into two arrays.

        `equal=True` gives every rank ceil(N/size) records (a few appear on two ranks), which
        keeps the number of steps per epoch identical everywhere; `equal=False` gives disjoint
        parts for exact evaluation.
        """
        import chainermn

        ds = chainer.datasets.TupleDataset(*arrays) if self.rank == 0 and arrays else None
        if self.rank == 0 and ds is None:
            raise TrainingError("rank 0 has no data to scatter")
        part = chainermn.scatter_dataset(ds, self.communicator, shuffle=shuffle, seed=seed, force_equal_length=equal)
        if len(part) == 0:  # more ranks than records (disjoint test split)
            return np.zeros((0, *feature_shape), dtype=np.float32), np.zeros((0,), dtype=np.int64)
        x, y = chainer.dataset.concat_examples(part[:])
        return np.asarray(x, dtype=np.float32), np.asarray(y, dtype=np.int64)

    def abort(self, code: int) -> NoReturn:
        """MPI_Abort: mpiexec then kills every rank of the job, none is left waiting."""
        log(self.rank, f"calling MPI_Abort({code}) to end the whole job")
        self.communicator.mpi_comm.Abort(code)
        os._exit(code)  # Abort does not return; this keeps the type checker and reader honest


def _install_abort_hook() -> None:
    # An uncaught exception on one rank must not leave the others blocked in a collective
    # (chainer/chainermn#236): ChainerMN's hook calls MPI_Abort.
    from chainermn import global_except_hook

    if sys.excepthook is not global_except_hook._global_except_hook:
        global_except_hook.add_hook()


def open_group(world: MpiWorld | None, *, communicator: str, gpu: bool) -> Group:
    """A ChainerMN communicator when an MPI launcher started us, else a single-process group."""
    if world is None:
        return SingleGroup()
    # Read by `import chainermn`, which then installs the abort hook itself.
    os.environ.setdefault("CHAINERMN_FORCE_ABORT_ON_EXCEPTION", "1")
    try:
        import chainermn
    except ImportError as e:
        raise InvalidInputError(
            f"started by an MPI launcher (world size {world.size}) but chainermn/mpi4py cannot "
            f"be imported: {e}; install mpi4py or run the program without mpiexec"
        ) from e
    _install_abort_hook()
    name = communicator
    if name == "auto":
        name = "pure_nccl" if gpu else "naive"
    if name in ("pure_nccl", "flat") and not gpu:
        raise InvalidInputError(f"--communicator {name} needs a GPU (CuPy); use naive on CPU")
    comm = chainermn.create_communicator(name)
    if comm.size != world.size:
        raise TrainingError(f"MPI reports world size {comm.size} but the launcher's environment said {world.size}")
    return MpiGroup(comm)
