"""ChainerMN training: `mpiexec -n N python -m kubetrain.train.chainermn_mpi --data DIR ...`.

Under an MPI launcher (mpiexec, or the MPIJob launcher's mpirun) every rank joins a ChainerMN
communicator (naive on CPU, pure_nccl on GPU); rank 0 reads the dataset and `scatter_dataset`
hands each rank its part; the multi-node optimizer averages gradients. Without MPI it is a plain
single Chainer process. Rank 0 checkpoints every `--checkpoint-every` steps and at each epoch's
end and writes `model.npz` and `metrics.json`; a restarted job resumes from the newest complete
checkpoint. Any exception on any rank calls MPI_Abort, so mpiexec ends the whole job.
"""

from __future__ import annotations

import math
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from kubetrain.errors import KubetrainError
from kubetrain.train import chainer_models, chainer_state
from kubetrain.train.checkpoints import CheckpointDir, Progress, RunSignature
from kubetrain.train.common import TrainConfig, build_parser, load_data, log, prepare_output_dir
from kubetrain.train.loop import LoadedCheckpoint, RunState, resume, train, write_outputs
from kubetrain.train.model_shapes import ModelShape
from kubetrain.train.mpi_group import Group, open_group
from kubetrain.train.topology import mpi_world_from_env

__all__ = ["main"]

chainer = chainer_models.chainer
F = chainer_models.F
MODEL_FILE = "model.npz"
EVAL_CHUNK = 4096


def _distribute_data(cfg: TrainConfig, group: Group) -> tuple[ModelShape, Any, Any, Any, Any]:
    """Rank 0 reads the dataset; scatter_dataset gives each rank its training and test parts."""
    data = load_data(cfg.data) if group.rank == 0 else None
    meta = group.bcast_obj(None if data is None else (tuple(data.info.feature_shape), data.info.num_classes))
    shape = ModelShape(tuple(meta[0]), int(meta[1]))
    train = (data.x_train, data.y_train) if data else None
    test = (data.x_test, data.y_test) if data else None
    x_tr, y_tr = group.scatter(train, feature_shape=shape.feature_shape, shuffle=True, seed=cfg.seed, equal=True)
    x_te, y_te = group.scatter(test, feature_shape=shape.feature_shape, shuffle=False, seed=cfg.seed, equal=False)
    return shape, x_tr, y_tr, x_te, y_te


class _ChainerSteps:
    """The Chainer side of the shared loop: multi-node optimizer steps, evaluation and npz checkpoints."""

    model_file = MODEL_FILE
    # MPI collectives never time out, so the watchdog is what enforces --timeout-seconds here.
    collectives_time_out = False

    def __init__(self, cfg: TrainConfig, group: Group) -> None:
        self.cfg = cfg
        self.group = group
        gpu = chainer.backends.cuda.available and cfg.communicator != "naive"
        self.device: Any = chainer.get_device(f"@cupy:{group.intra_rank}" if gpu else "@numpy")
        self.device.use()
        self.shape, self.x_train, self.y_train, self.x_test, self.y_test = _distribute_data(cfg, group)
        np.random.seed(cfg.seed)  # Chainer's initialisers draw from numpy's global RNG
        random.seed(cfg.seed)
        self.model: Any = chainer_models.build_model(cfg.model, self.shape)
        self.model.to_device(self.device)
        optimizer: Any = chainer.optimizers.Adam(alpha=cfg.lr)
        if group.communicator is not None:
            import chainermn

            optimizer = chainermn.create_multi_node_optimizer(optimizer, group.communicator)
        optimizer.setup(self.model)
        self.optimizer = optimizer

    def distribute(self) -> None:
        """Give every rank rank 0's parameters (so: after resuming)."""
        if self.group.communicator is not None:
            # The multi-node optimizer spends its first update() on broadcasting rank 0's
            # parameters instead of applying gradients; do that broadcast now and let it record
            # the parameter set, so every update() (also the first after a resume) is a real step.
            self.group.communicator.bcast_data(self.model)
            self.optimizer.is_changed(self.model)

    def epoch_batches(self, epoch: int, batch_size: int) -> list[npt.NDArray[np.int64]]:
        """This rank's part of the training split, shuffled, in batches."""
        # A pure function of (seed, epoch, rank): resuming skips exactly the batches already done.
        order = np.random.default_rng([self.cfg.seed, epoch, self.group.rank]).permutation(len(self.x_train))
        return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]

    def train_step(self, batch: npt.NDArray[np.int64]) -> float:
        """One Adam step; the multi-node optimizer all-reduces the gradients first."""
        x, t = self.device.send(self.x_train[batch]), self.device.send(self.y_train[batch])
        loss = F.softmax_cross_entropy(self.model(x), t)
        self.model.cleargrads()
        loss.backward()
        self.optimizer.update()
        return float(loss.array)

    def evaluate(self) -> tuple[float, float]:
        """Accuracy and mean loss over the whole test split (disjoint parts, sums all-reduced)."""
        loss_sum, correct = 0.0, 0.0
        with chainer.using_config("train", False), chainer.no_backprop_mode():
            for i in range(0, len(self.x_test), EVAL_CHUNK):
                x = self.device.send(self.x_test[i : i + EVAL_CHUNK])
                t = self.device.send(self.y_test[i : i + EVAL_CHUNK])
                logits = self.model(x)
                loss_sum += float(F.sum(F.softmax_cross_entropy(logits, t, reduce="no")).array)
                correct += float((logits.array.argmax(axis=1) == t).sum())
        loss_sum, correct, n = self.group.allreduce_sum([loss_sum, correct, len(self.x_test)])
        return (correct / n, loss_sum / n) if n else (math.nan, math.nan)

    def save_checkpoint(self, ckdir: CheckpointDir, *, progress: Progress, signature: RunSignature) -> None:
        """Model and optimizer in Chainer's npz layout, plus progress, RNG states and signature."""
        chainer_state.save_checkpoint(
            ckdir, model=self.model, optimizer=self.optimizer, progress=progress, signature=signature
        )

    def load_checkpoint(self, path: Path) -> LoadedCheckpoint:
        """Read an npz checkpoint; its state goes into the live model and optimizer on restore()."""
        ckpt = chainer_state.load_checkpoint(path)

        def restore() -> Progress:
            ckpt.restore(model=self.model, optimizer=self.optimizer)
            return ckpt.progress

        return LoadedCheckpoint(signature=ckpt.signature, restore=restore)

    def save_model(self, path: Path) -> None:
        """The model's parameters with its name and shape (model.npz)."""
        chainer_models.save_model_file(path, name=self.cfg.model, shape=self.shape, model=self.model)


def _run(cfg: TrainConfig, group: Group, started: float) -> int:
    log(group.rank, f"{'mpi' if group.communicator else 'single'}: rank {group.rank}/{group.world_size}")
    if group.rank == 0:
        prepare_output_dir(cfg.output)
    steps = _ChainerSteps(cfg, group)
    state = RunState(
        cfg=cfg,
        signature=RunSignature(
            model=cfg.model,
            feature_shape=steps.shape.feature_shape,
            num_classes=steps.shape.num_classes,
            seed=cfg.seed,
            batch_size=cfg.batch_size,
            world_size=group.world_size,
        ),
        ckdir=(CheckpointDir(cfg.checkpoint_dir, ".npz", cfg.keep_checkpoints) if cfg.checkpoint_dir else None),
    )
    resume(state, steps)
    steps.distribute()
    outcome = train(state, steps)
    if group.rank == 0:
        extra = {
            "framework": "chainer",
            "communicator": type(group.communicator).__name__ if group.communicator else None,
            "launcher": "mpi" if group.communicator else "single",
        }
        write_outputs(state, steps, outcome, started=started, extra=extra)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Parse flags, train, and return the exit code; under MPI a failure aborts the whole job."""
    started = time.monotonic()
    parser = build_parser(
        prog="python -m kubetrain.train.chainermn_mpi",
        description="ChainerMN training on a kubetrain dataset directory (plain or under mpiexec).",
    )
    args = parser.parse_args(argv)
    world = mpi_world_from_env(os.environ)
    group: Group | None = None
    try:
        cfg = TrainConfig.from_args(args)
        group = open_group(world, communicator=cfg.communicator, gpu=chainer.backends.cuda.available)
        return _run(cfg, group, started)
    except KubetrainError as e:
        log(world.rank if world else 0, f"error: {type(e).__name__}: {e}")
        if group is not None and group.world_size > 1:
            group.abort(int(e.exit_code))  # the other ranks may be waiting in a collective
        return int(e.exit_code)


if __name__ == "__main__":
    sys.exit(main())
