"""The torch.distributed side of the DDP program: backend, device, process group, small collectives.

Rendezvous and collectives get separate timeouts. Rendezvous waits for every peer to start
(`--init-timeout-seconds`, long: pods pull images at different speeds); once training runs, any
collective that waits longer than `--timeout-seconds` fails, which is how a dead or hung peer turns
into a non-zero exit instead of a hang.

Rank 0 of an operator-started job hosts the rendezvous store (a TCPStore) at MASTER_PORT. torch's
own store server listens on every interface, so on one machine a second job with the same master
port would either fail to bind or, worse, have its workers' connections to *their* master's
address land in the first job's store. When the topology names a bind address
(`$KUBETRAIN_BIND_ADDRESS`, or a loopback MASTER_ADDR) rank 0 therefore binds the listening
socket itself and hands it to the store (:func:`bound_store`). gloo's own connections need no
such care: each process listens on an ephemeral port of the address its host name resolves to,
and peers learn those addresses through the job's store.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Sequence
from datetime import timedelta

import torch
import torch.distributed as dist

from kubetrain.errors import InvalidInputError, TrainingError
from kubetrain.train.topology import TorchTopology

__all__ = ["Group", "bound_store", "resolve_backend", "select_device"]


def resolve_backend(flag: str, *, cuda: bool) -> str:
    """`auto` is nccl when CUDA is present and gloo otherwise; nccl without CUDA is an error."""
    if flag == "auto":
        return "nccl" if cuda else "gloo"
    if flag == "nccl" and not cuda:
        raise InvalidInputError("--backend nccl needs CUDA, and no GPU is visible; use gloo")
    return flag


def select_device(backend: str, topo: TorchTopology) -> torch.device:
    """The GPU of this process's local rank for nccl (or CUDA single process), else the CPU."""
    if torch.cuda.is_available() and backend == "nccl":
        gpus = torch.cuda.device_count()
        local_processes = int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1)
        if local_processes > gpus:
            # NCCL refuses two ranks on one GPU ("Duplicate GPU detected"), but only once every
            # rank has started: say it now, with what to change.
            raise InvalidInputError(
                f"--backend nccl needs one GPU per process: this node runs {local_processes} processes but sees "
                f"{gpus} GPU(s); run at most {gpus} per node (torchrun --nproc-per-node, a TrainJob's "
                "numProcPerNode) or use gloo"
            )
        index = topo.local_rank % gpus
        torch.cuda.set_device(index)
        return torch.device("cuda", index)
    return torch.device("cpu")


_POLL_SECONDS = 0.05


def _wait_for_listener(topo: TorchTopology, *, timeout: float) -> None:
    """Return once rank 0's store accepts connections (a worker pod often starts first).

    TCPStore's own client retries a refused connection with a growing back-off, which cost
    seconds whenever a worker came up before the master; polling the port is cheap and
    exact. (Under torchrun the agent's store is up before any worker starts.)
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection((topo.master_addr, topo.master_port), timeout=1.0):
                return
        except OSError as e:
            if time.monotonic() > deadline:
                raise TrainingError(
                    f"rank {topo.rank}: rendezvous with {topo.master_addr}:{topo.master_port} "
                    f"failed: rank 0 did not listen within {timeout:.0f}s ({e})"
                ) from e
            time.sleep(_POLL_SECONDS)


def bound_store(host: str, port: int, *, world_size: int, timeout: float) -> dist.TCPStore:
    """Rank 0's TCPStore listening on `host`:`port` only, once `world_size - 1` clients joined.

    torch binds its store server to the wildcard address whatever host it is given; a socket
    bound here and passed as `master_listen_fd` is used as is (libuv and classic server alike).
    The store owns the descriptor from then on and closes it, also when it fails.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        # A master restarted in place finds its port with connections in TIME_WAIT.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(max(128, world_size))
    except OSError as e:
        sock.close()
        raise TrainingError(
            f"rank 0: cannot listen on {host}:{port} for the rendezvous store: {e} "
            "(another job on this machine may hold the port on every interface)"
        ) from e
    fd = sock.detach()
    return dist.TCPStore(
        host,
        port,
        world_size=world_size,
        is_master=True,
        timeout=timedelta(seconds=timeout),
        wait_for_workers=True,
        master_listen_fd=fd,
    )


class Group:
    """This process's membership in the job: rank, world size and the collectives the loop uses.

    With one process there is no process group and every collective is the identity.
    """

    def __init__(self, topo: TorchTopology, *, device: torch.device) -> None:
        self.topo = topo
        self.device = device
        self.rank = topo.rank
        self.world_size = topo.world_size
        self._initialised = False

    def init(self, *, backend: str, init_timeout: float, timeout: float) -> None:
        """Rendezvous at MASTER_ADDR:MASTER_PORT and create the default process group."""
        if not self.topo.distributed:
            return
        if self.rank != 0 and self.topo.launcher == "operator":
            _wait_for_listener(self.topo, timeout=init_timeout)
        try:
            store = self._rendezvous(init_timeout)
        except (RuntimeError, ValueError) as e:  # DistStoreError/DistNetworkError are both
            raise TrainingError(
                f"rank {self.rank}: rendezvous with {self.topo.master_addr}:"
                f"{self.topo.master_port} failed within {init_timeout:.0f}s "
                f"(world size {self.world_size}): {e}"
            ) from e
        store.set_timeout(timedelta(seconds=timeout))
        dist.init_process_group(
            backend=backend,
            store=dist.PrefixStore("default_pg", store),
            rank=self.rank,
            world_size=self.world_size,
            timeout=timedelta(seconds=timeout),
        )
        self._initialised = True

    def _rendezvous(self, init_timeout: float) -> dist.Store:
        """The job's store: hosted here on rank 0 with a bind address, else through env://."""
        if self.rank == 0 and self.topo.launcher == "operator" and self.topo.bind_address:
            return bound_store(
                self.topo.bind_address, self.topo.master_port, world_size=self.world_size, timeout=init_timeout
            )
        # env:// also handles torchrun, whose agent already hosts the store at MASTER_PORT
        # (TORCHELASTIC_USE_AGENT_STORE): rank 0 then connects instead of binding the port.
        store, _, _ = next(
            dist.rendezvous(
                "env://",
                rank=self.rank,
                world_size=self.world_size,
                timeout=timedelta(seconds=init_timeout),
            )
        )
        return store

    def allreduce_sum(self, values: Sequence[float]) -> list[float]:
        """Element-wise sum of `values` over all ranks (float64, so counts stay exact)."""
        if not self._initialised:
            return [float(v) for v in values]
        t = torch.tensor(list(values), dtype=torch.float64, device=self.device)
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
        return [float(v) for v in t.cpu().tolist()]

    def broadcast_int(self, value: int) -> int:
        """Rank 0's `value` on every rank."""
        if not self._initialised:
            return value
        t = torch.tensor([value], dtype=torch.int64, device=self.device)
        dist.broadcast(t, src=0)
        return int(t.item())

    def shutdown(self) -> None:
        """Tear the process group down after a clean run (not after a failed collective)."""
        if self._initialised:
            dist.destroy_process_group()
            self._initialised = False
