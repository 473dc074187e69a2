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
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from kubetrain.errors import KubetrainError
from kubetrain.train import chainer_models, chainer_state
from kubetrain.train.checkpoints import (
    CheckpointDir,
    Progress,
    RunSignature,
    choose_resume_step,
    gather_epoch_loss,
    last_train_loss,
    require_visible,
    resumed_progress,
)
from kubetrain.train.common import (
    TrainConfig,
    Watchdog,
    build_parser,
    final_metrics,
    load_data,
    log,
    prepare_output_dir,
    write_metrics,
)
from kubetrain.train.model_shapes import ModelShape
from kubetrain.train.mpi_group import Group, open_group
from kubetrain.train.topology import mpi_world_from_env

__all__ = ["main"]

chainer = chainer_models.chainer
F = chainer_models.F
MODEL_FILE = "model.npz"
EVAL_CHUNK = 4096


@dataclass
class _Run:
    cfg: TrainConfig
    group: Group
    device: Any  # chainer.backend.Device
    shape: ModelShape
    x_train: npt.NDArray[np.float32]
    y_train: npt.NDArray[np.int64]
    x_test: npt.NDArray[np.float32]
    y_test: npt.NDArray[np.int64]
    model: Any
    optimizer: Any
    progress: Progress
    ckdir: CheckpointDir | None
    signature: RunSignature
    resumed_from_step: int = 0


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


def _resume(run: _Run) -> None:
    """Every rank loads the checkpoint rank 0 picked (the newest complete one)."""
    if run.ckdir is None:
        return
    rank = run.group.rank
    chosen = choose_resume_step(
        run.ckdir, rank=rank, broadcast=lambda value: int(run.group.bcast_obj(value)),
        load=chainer_state.load_checkpoint, warn=lambda m: log(rank, m),
    )  # fmt: skip
    if chosen < 0:
        return
    require_visible(run.ckdir.file_for(chosen), run.group.rank)
    ckpt = chainer_state.load_checkpoint(run.ckdir.file_for(chosen))
    run.signature.check_resumable(ckpt.signature, ckpt.path)
    ckpt.restore(model=run.model, optimizer=run.optimizer)
    progress = resumed_progress(ckpt.progress, saved=ckpt.signature, signature=run.signature, rank=rank)
    run.progress = progress
    run.resumed_from_step = progress.global_step
    log(run.group.rank, f"resumed from {ckpt.path} (epoch {progress.epoch}, step {chosen})")


def _checkpoint(run: _Run) -> None:
    if run.ckdir is None:
        return
    p = run.progress
    gather_epoch_loss(p, rank=run.group.rank, allreduce_sum=run.group.allreduce_sum)
    if run.group.rank == 0:
        chainer_state.save_checkpoint(
            run.ckdir,
            model=run.model,
            optimizer=run.optimizer,
            progress=p,
            signature=run.signature,
        )


def _evaluate(run: _Run) -> tuple[float, float]:
    """Accuracy and mean loss over the whole test split (disjoint parts, sums all-reduced)."""
    loss_sum, correct = 0.0, 0.0
    with chainer.using_config("train", False), chainer.no_backprop_mode():
        for i in range(0, len(run.x_test), EVAL_CHUNK):
            x = run.device.send(run.x_test[i : i + EVAL_CHUNK])
            t = run.device.send(run.y_test[i : i + EVAL_CHUNK])
            logits = run.model(x)
            loss_sum += float(F.sum(F.softmax_cross_entropy(logits, t, reduce="no")).array)
            correct += float((logits.array.argmax(axis=1) == t).sum())
    loss_sum, correct, n = run.group.allreduce_sum([loss_sum, correct, len(run.x_test)])
    return (correct / n, loss_sum / n) if n else (math.nan, math.nan)


def _train(run: _Run, watchdog: Watchdog) -> tuple[float, int]:
    """The epoch loop; returns (seconds spent in training steps, records trained by this rank)."""
    cfg, g, p = run.cfg, run.group, run.progress
    n = len(run.x_train)
    batches_per_epoch = math.ceil(n / cfg.batch_size)
    train_seconds, samples = 0.0, 0
    stop = False
    while p.epoch < cfg.epochs and not stop:
        # The epoch's order is a pure function of (seed, epoch, rank): resuming skips exactly
        # the batches already done.
        order = np.random.default_rng([cfg.seed, p.epoch, g.rank]).permutation(n)
        t0 = time.perf_counter()
        for b in range(p.batch_in_epoch, batches_per_epoch):
            idx = order[b * cfg.batch_size : (b + 1) * cfg.batch_size]
            x, t = run.device.send(run.x_train[idx]), run.device.send(run.y_train[idx])
            loss = F.softmax_cross_entropy(run.model(x), t)
            run.model.cleargrads()
            loss.backward()
            run.optimizer.update()  # the multi-node optimizer all-reduces the gradients first
            value = float(loss.array)
            p.batch_in_epoch, p.global_step = b + 1, p.global_step + 1
            p.epoch_loss_sum, p.epoch_loss_count = p.epoch_loss_sum + value, p.epoch_loss_count + 1
            samples += len(idx)
            watchdog.beat()
            if p.global_step % cfg.log_every == 0:
                mean = g.allreduce_sum([value])[0] / g.size
                p.history.append({"step": p.global_step, "epoch": p.epoch, "loss": mean, "kind": "step"})
            if cfg.max_steps and p.global_step >= cfg.max_steps:
                stop = True
                break
            mid_epoch = p.batch_in_epoch < batches_per_epoch
            if cfg.checkpoint_every and p.global_step % cfg.checkpoint_every == 0 and mid_epoch:
                _checkpoint(run)
        train_seconds += time.perf_counter() - t0
        if p.batch_in_epoch < batches_per_epoch:
            break  # --max-steps stopped the run mid-epoch
        total, count = g.allreduce_sum([p.epoch_loss_sum, p.epoch_loss_count])
        entry: dict[str, Any] = {
            "step": p.global_step,
            "epoch": p.epoch,
            "loss": total / max(count, 1.0),
            "kind": "epoch",
        }
        if (p.epoch + 1) % cfg.eval_every == 0 or p.epoch + 1 == cfg.epochs:
            acc, test_loss = _evaluate(run)
            entry.update(test_accuracy=acc, test_loss=test_loss)
            if g.rank == 0:
                log(g.rank, f"epoch {p.epoch}: loss {entry['loss']:.4f} test accuracy {acc:.4f}")
        p.history.append(entry)
        p.epoch, p.batch_in_epoch, p.epoch_loss_sum, p.epoch_loss_count = p.epoch + 1, 0, 0.0, 0
        _checkpoint(run)
        watchdog.beat()
    return train_seconds, samples


def _setup(cfg: TrainConfig, group: Group) -> _Run:
    gpu = chainer.backends.cuda.available and cfg.communicator != "naive"
    device = chainer.get_device(f"@cupy:{group.intra_rank}" if gpu else "@numpy")
    device.use()
    shape, x_tr, y_tr, x_te, y_te = _distribute_data(cfg, group)
    np.random.seed(cfg.seed)  # Chainer's initialisers draw from numpy's global RNG
    random.seed(cfg.seed)
    model = chainer_models.build_model(cfg.model, shape)
    model.to_device(device)
    optimizer: Any = chainer.optimizers.Adam(alpha=cfg.lr)
    if group.communicator is not None:
        import chainermn

        optimizer = chainermn.create_multi_node_optimizer(optimizer, group.communicator)
    optimizer.setup(model)
    run = _Run(
        cfg=cfg,
        group=group,
        device=device,
        shape=shape,
        x_train=x_tr,
        y_train=y_tr,
        x_test=x_te,
        y_test=y_te,
        model=model,
        optimizer=optimizer,
        progress=Progress(),
        ckdir=(CheckpointDir(cfg.checkpoint_dir, ".npz", cfg.keep_checkpoints) if cfg.checkpoint_dir else None),
        signature=RunSignature(
            model=cfg.model,
            feature_shape=shape.feature_shape,
            num_classes=shape.num_classes,
            seed=cfg.seed,
            batch_size=cfg.batch_size,
            world_size=group.size,
        ),
    )
    _resume(run)
    if group.communicator is not None:
        # The multi-node optimizer spends its first update() on broadcasting rank 0's
        # parameters instead of applying gradients; do that broadcast now and let it record
        # the parameter set, so every update() (also the first after a resume) is a real step.
        group.communicator.bcast_data(model)
        optimizer.is_changed(model)
    return run


def _run(cfg: TrainConfig, group: Group, started: float) -> int:
    log(group.rank, f"{'mpi' if group.communicator else 'single'}: rank {group.rank}/{group.size}")
    if group.rank == 0:
        prepare_output_dir(cfg.output)
    run = _setup(cfg, group)
    watchdog = Watchdog(limit_seconds=cfg.timeout_seconds, rank=group.rank, what="training")
    watchdog.start()
    try:
        train_seconds, samples = _train(run, watchdog)
        acc, test_loss = _evaluate(run)
        samples_total = group.allreduce_sum([samples])[0]
    finally:
        watchdog.stop()
    if group.rank == 0:
        cfg.output.mkdir(parents=True, exist_ok=True)
        chainer_models.save_model_file(cfg.output / MODEL_FILE, name=cfg.model, shape=run.shape, model=run.model)
        metrics = final_metrics(
            test_accuracy=acc,
            test_loss=test_loss,
            train_loss=last_train_loss(run.progress.history),
            samples_per_second=samples_total / train_seconds if train_seconds > 0 else 0.0,
            world_size=group.size,
            wall_seconds=time.monotonic() - started,
            epochs=run.progress.epoch,
            global_step=run.progress.global_step,
            history=run.progress.history,
            extra={
                "framework": "chainer",
                "communicator": type(group.communicator).__name__ if group.communicator else None,
                "launcher": "mpi" if group.communicator else "single",
                "resumed_from_step": run.resumed_from_step,
                "samples_trained": int(samples_total),
                "train_seconds": train_seconds,
                **cfg.hyperparameters(),
            },
        )
        write_metrics(cfg.output, metrics)
        log(group.rank, f"done: test accuracy {acc:.4f}, wrote {cfg.output}")
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
        log(world.rank if world else 0, f"error: {e}")
        if group is not None and group.size > 1:
            group.abort(int(e.exit_code))  # the other ranks may be waiting in a collective
        return int(e.exit_code)


if __name__ == "__main__":
    sys.exit(main())
