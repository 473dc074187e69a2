"""PyTorch DDP training: `python -m kubetrain.train.torch_ddp --data DIR --output DIR ...`.

Runs as one plain process, as one replica of a PyTorchJob (topology from the operator's env), or
under torchrun. Each rank trains on its DistributedSampler share of the training split; rank 0
checkpoints every `--checkpoint-every` steps and at each epoch's end, and writes `model.pt` and
`metrics.json`. At start every rank resumes from the newest complete checkpoint (rank 0 chooses
it, so all ranks agree), skipping the batches of the interrupted epoch that were already done.
"""

from __future__ import annotations

import math
import os
import random
import sys
import time
import traceback
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F  # noqa: N812
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data.distributed import DistributedSampler

from kubetrain.errors import KubetrainError, TrainingError
from kubetrain.train import torch_state
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
    LoadedData,
    TrainConfig,
    Watchdog,
    build_parser,
    final_metrics,
    load_data,
    log,
    prepare_output_dir,
    write_metrics,
)
from kubetrain.train.topology import torch_topology_from_env
from kubetrain.train.torch_dist import Group, resolve_backend, select_device
from kubetrain.train.torch_models import ModelShape, build_model, save_model_file

__all__ = ["main"]

MODEL_FILE = "model.pt"
# The collective timeout fires first; the watchdog catches whatever blocks outside collectives.
WATCHDOG_GRACE_SECONDS = 30.0
EVAL_CHUNK = 4096


@dataclass
class _Run:
    """Everything the training loop works on (one per process)."""

    cfg: TrainConfig
    group: Group
    data: LoadedData
    shape: ModelShape
    model: torch.nn.Module  # the bare module (what is saved and evaluated)
    trainable: torch.nn.Module  # DDP wrapper when distributed, else the bare module
    optimizer: torch.optim.Optimizer
    progress: Progress
    ckdir: CheckpointDir | None
    signature: RunSignature
    resumed_from_step: int


def _resume(run: _Run) -> None:
    """Load the newest complete checkpoint on every rank, as chosen by rank 0."""
    if run.ckdir is None:
        return
    rank = run.group.rank
    chosen = choose_resume_step(
        run.ckdir, rank=rank, broadcast=run.group.broadcast_int, load=torch_state.load_checkpoint,
        warn=lambda m: log(rank, m),
    )  # fmt: skip
    if chosen < 0:
        return
    path = run.ckdir.file_for(chosen)
    require_visible(path, run.group.rank)
    payload = torch_state.load_checkpoint(path)
    run.signature.check_resumable(payload["signature"], path)
    run.model.load_state_dict(payload["model"])
    run.optimizer.load_state_dict(payload["optimizer"])
    torch_state.restore_rng(payload["rng"])
    progress = Progress.from_json(payload["progress"])
    run.progress = resumed_progress(progress, saved=payload["signature"], signature=run.signature, rank=rank)
    run.resumed_from_step = progress.global_step
    log(run.group.rank, f"resumed from {path} (epoch {progress.epoch}, step {chosen})")


def _checkpoint(run: _Run) -> None:
    """Collect the epoch's loss sums on rank 0, which then writes the checkpoint."""
    if run.ckdir is None:
        return
    p = run.progress
    gather_epoch_loss(p, rank=run.group.rank, allreduce_sum=run.group.allreduce_sum)
    if run.group.rank == 0:
        torch_state.save_checkpoint(
            run.ckdir,
            model=run.model,
            optimizer=run.optimizer,
            progress=p,
            signature=run.signature,
        )


def _evaluate(run: _Run, device: torch.device) -> tuple[float, float]:
    """Test accuracy and mean loss over the whole test split, each rank scoring every W-th record."""
    x = torch.from_numpy(run.data.x_test[run.group.rank :: run.group.world_size])
    y = torch.from_numpy(run.data.y_test[run.group.rank :: run.group.world_size])
    loss_sum, correct = 0.0, 0.0
    run.model.eval()
    with torch.no_grad():
        for i in range(0, len(x), EVAL_CHUNK):
            xb, yb = x[i : i + EVAL_CHUNK].to(device), y[i : i + EVAL_CHUNK].to(device)
            logits = run.model(xb)
            loss_sum += float(F.cross_entropy(logits, yb, reduction="sum"))
            correct += float((logits.argmax(dim=1) == yb).sum())
    run.model.train()
    loss_sum, correct, n = run.group.allreduce_sum([loss_sum, correct, len(x)])
    if n == 0:
        return math.nan, math.nan
    return correct / n, loss_sum / n


def _train(run: _Run, device: torch.device, watchdog: Watchdog) -> tuple[float, int]:
    """The epoch loop; returns (seconds spent in training steps, records trained by this rank)."""
    cfg, g, p = run.cfg, run.group, run.progress
    x_all = torch.from_numpy(run.data.x_train).to(device)
    y_all = torch.from_numpy(run.data.y_train).to(device)
    sampler = DistributedSampler(range(len(x_all)), num_replicas=g.world_size, rank=g.rank, shuffle=True, seed=cfg.seed)
    batches_per_epoch = math.ceil(len(sampler) / cfg.batch_size)
    train_seconds, samples = 0.0, 0
    stop = False
    while p.epoch < cfg.epochs and not stop:
        sampler.set_epoch(p.epoch)  # the epoch's order depends only on (seed, epoch)
        order = torch.tensor(list(sampler), dtype=torch.int64, device=device)
        t0 = time.perf_counter()
        for b in range(p.batch_in_epoch, batches_per_epoch):
            idx = order[b * cfg.batch_size : (b + 1) * cfg.batch_size]
            run.optimizer.zero_grad(set_to_none=True)
            loss = F.cross_entropy(run.trainable(x_all[idx]), y_all[idx])
            loss.backward()  # DDP all-reduces the gradients here
            run.optimizer.step()
            value = float(loss.detach())
            p.batch_in_epoch, p.global_step = b + 1, p.global_step + 1
            p.epoch_loss_sum, p.epoch_loss_count = p.epoch_loss_sum + value, p.epoch_loss_count + 1
            samples += len(idx)
            watchdog.beat()
            if p.global_step % cfg.log_every == 0:
                mean = g.allreduce_sum([value])[0] / g.world_size
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
        last_loss = total / max(count, 1.0)
        entry: dict[str, Any] = {
            "step": p.global_step,
            "epoch": p.epoch,
            "loss": last_loss,
            "kind": "epoch",
        }
        if (p.epoch + 1) % cfg.eval_every == 0 or p.epoch + 1 == cfg.epochs:
            acc, test_loss = _evaluate(run, device)
            entry.update(test_accuracy=acc, test_loss=test_loss)
            if g.rank == 0:
                log(g.rank, f"epoch {p.epoch}: loss {last_loss:.4f} test accuracy {acc:.4f}")
        p.history.append(entry)
        p.epoch, p.batch_in_epoch, p.epoch_loss_sum, p.epoch_loss_count = p.epoch + 1, 0, 0.0, 0
        _checkpoint(run)
        watchdog.beat()
    return train_seconds, samples


def _run(cfg: TrainConfig, started: float) -> int:
    topo = torch_topology_from_env(os.environ)
    if topo.is_chief:
        prepare_output_dir(cfg.output)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    backend = resolve_backend(cfg.backend, cuda=torch.cuda.is_available())
    device = select_device(backend, topo)
    group = Group(topo, device=device)
    group.init(backend=backend, init_timeout=cfg.init_timeout_seconds, timeout=cfg.timeout_seconds)
    log(topo.rank, f"{topo.launcher}: rank {topo.rank}/{topo.world_size} {backend} on {device}")

    data = load_data(cfg.data)
    shape = ModelShape(tuple(data.info.feature_shape), data.info.num_classes)
    torch.manual_seed(cfg.seed)
    np.random.seed(cfg.seed)
    random.seed(cfg.seed)
    model = build_model(cfg.model, shape).to(device)
    run = _Run(
        cfg=cfg,
        group=group,
        data=data,
        shape=shape,
        model=model,
        trainable=model,
        optimizer=torch.optim.Adam(model.parameters(), lr=cfg.lr),
        progress=Progress(),
        ckdir=(CheckpointDir(cfg.checkpoint_dir, ".pt", cfg.keep_checkpoints) if cfg.checkpoint_dir else None),
        signature=RunSignature(
            model=cfg.model,
            feature_shape=shape.feature_shape,
            num_classes=shape.num_classes,
            seed=cfg.seed,
            batch_size=cfg.batch_size,
            world_size=topo.world_size,
        ),
        resumed_from_step=0,
    )
    _resume(run)
    if topo.distributed:
        # DDP broadcasts rank 0's parameters at construction, after the checkpoint was loaded.
        run.trainable = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    watchdog = Watchdog(
        limit_seconds=cfg.timeout_seconds + WATCHDOG_GRACE_SECONDS,
        rank=topo.rank,
        what="training",
    ).start()
    try:
        train_seconds, samples = _train(run, device, watchdog)
        acc, test_loss = _evaluate(run, device)
        samples_total = group.allreduce_sum([samples])[0]
        watchdog.beat()
    finally:
        watchdog.stop()
    if topo.is_chief:
        cfg.output.mkdir(parents=True, exist_ok=True)
        save_model_file(cfg.output / MODEL_FILE, name=cfg.model, shape=shape, model=model)
        metrics = final_metrics(
            test_accuracy=acc,
            test_loss=test_loss,
            train_loss=last_train_loss(run.progress.history),
            samples_per_second=samples_total / train_seconds if train_seconds > 0 else 0.0,
            world_size=topo.world_size,
            wall_seconds=time.monotonic() - started,
            epochs=run.progress.epoch,
            global_step=run.progress.global_step,
            history=run.progress.history,
            extra={
                "framework": "pytorch",
                "backend": backend,
                "launcher": topo.launcher,
                "resumed_from_step": run.resumed_from_step,
                "samples_trained": int(samples_total),
                "train_seconds": train_seconds,
                **cfg.hyperparameters(),
            },
        )
        write_metrics(cfg.output, metrics)
        log(topo.rank, f"done: test accuracy {acc:.4f}, wrote {cfg.output}")
    group.shutdown()
    return 0


def main(argv: list[str] | None = None) -> int:
    """Parse flags, train, and return the exit code (0, or the failing error's code)."""
    started = time.monotonic()
    parser = build_parser(
        prog="python -m kubetrain.train.torch_ddp",
        description="PyTorch DDP training on a kubetrain dataset directory.",
    )
    args = parser.parse_args(argv)
    try:
        return _run(TrainConfig.from_args(args), started)
    except KubetrainError as e:
        log(os.environ.get("RANK", "0"), f"error: {e}")
        return int(e.exit_code)
    except RuntimeError as e:
        # A collective that failed (peer gone, timeout) surfaces as a RuntimeError (gloo raises
        # the plain class through DDP's reducer), so the traceback is kept for the other kinds.
        traceback.print_exc()
        err = TrainingError(f"distributed training failed: {type(e).__name__}: {e}")
        log(os.environ.get("RANK", "0"), f"error: {err}")
        return int(err.exit_code)


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    if code:
        # A process group broken by a dead peer can block in its destructor at interpreter exit.
        os._exit(code)
    sys.exit(code)
