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
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F  # noqa: N812
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data.distributed import DistributedSampler

from kubetrain.errors import KubetrainError, TrainingError
from kubetrain.train import torch_state
from kubetrain.train.checkpoints import CheckpointDir, Progress, RunSignature
from kubetrain.train.common import LoadedData, TrainConfig, build_parser, load_data, log, prepare_output_dir
from kubetrain.train.loop import LoadedCheckpoint, RunState, resume, train, write_outputs
from kubetrain.train.topology import torch_topology_from_env
from kubetrain.train.torch_dist import Group, resolve_backend, select_device
from kubetrain.train.torch_models import ModelShape, build_model, save_model_file

__all__ = ["main"]

MODEL_FILE = "model.pt"
EVAL_CHUNK = 4096


class _TorchSteps:
    """The PyTorch side of the shared loop: DDP steps, evaluation and torch checkpoints (one per process)."""

    model_file = MODEL_FILE
    collectives_time_out = True  # the process group's timeout (--timeout-seconds)

    def __init__(self, cfg: TrainConfig, group: Group, data: LoadedData, shape: ModelShape) -> None:
        self.cfg = cfg
        self.group = group
        self.data = data
        self.shape = shape
        self.device: torch.device = group.device
        self.model: torch.nn.Module = build_model(cfg.model, shape).to(self.device)  # what is saved and evaluated
        self.trainable: torch.nn.Module = self.model  # the DDP wrapper once distributed
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=cfg.lr)
        self._x = torch.from_numpy(data.x_train).to(self.device)
        self._y = torch.from_numpy(data.y_train).to(self.device)
        self._sampler = DistributedSampler(
            range(len(self._x)), num_replicas=group.world_size, rank=group.rank, shuffle=True, seed=cfg.seed
        )

    def distribute(self) -> None:
        """Wrap the model in DDP, which broadcasts rank 0's parameters (so: after resuming)."""
        if self.group.topo.distributed:
            device_ids = [self.device.index] if self.device.type == "cuda" else None
            self.trainable = DistributedDataParallel(self.model, device_ids=device_ids)

    def epoch_batches(self, epoch: int, batch_size: int) -> list[torch.Tensor]:
        """This rank's DistributedSampler share of the training split, in batches."""
        self._sampler.set_epoch(epoch)  # the epoch's order depends only on (seed, epoch)
        order = torch.tensor(list(self._sampler), dtype=torch.int64, device=self.device)
        return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]

    def train_step(self, batch: torch.Tensor) -> float:
        """One Adam step; DDP all-reduces the gradients in backward()."""
        self.optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(self.trainable(self._x[batch]), self._y[batch])
        loss.backward()
        self.optimizer.step()
        return float(loss.detach())

    def evaluate(self) -> tuple[float, float]:
        """Test accuracy and mean loss over the whole test split, each rank scoring every W-th record."""
        g = self.group
        x = torch.from_numpy(self.data.x_test[g.rank :: g.world_size])
        y = torch.from_numpy(self.data.y_test[g.rank :: g.world_size])
        loss_sum, correct = 0.0, 0.0
        self.model.eval()
        with torch.no_grad():
            for i in range(0, len(x), EVAL_CHUNK):
                xb, yb = x[i : i + EVAL_CHUNK].to(self.device), y[i : i + EVAL_CHUNK].to(self.device)
                logits = self.model(xb)
                loss_sum += float(F.cross_entropy(logits, yb, reduction="sum"))
                correct += float((logits.argmax(dim=1) == yb).sum())
        self.model.train()
        loss_sum, correct, n = g.allreduce_sum([loss_sum, correct, len(x)])
        if n == 0:
            return math.nan, math.nan
        return correct / n, loss_sum / n

    def save_checkpoint(self, ckdir: CheckpointDir, *, progress: Progress, signature: RunSignature) -> None:
        """Model, optimizer, RNG states and progress in one torch file."""
        torch_state.save_checkpoint(
            ckdir, model=self.model, optimizer=self.optimizer, progress=progress, signature=signature
        )

    def load_checkpoint(self, path: Path) -> LoadedCheckpoint:
        """Read a torch checkpoint; its state goes into the live model and optimizer on restore()."""
        payload = torch_state.load_checkpoint(path)

        def restore() -> Progress:
            self.model.load_state_dict(payload["model"])
            self.optimizer.load_state_dict(payload["optimizer"])
            torch_state.restore_rng(payload["rng"])
            return Progress.from_json(payload["progress"])

        return LoadedCheckpoint(signature=payload["signature"], restore=restore)

    def save_model(self, path: Path) -> None:
        """The bare module's weights with its name and shape (model.pt)."""
        save_model_file(path, name=self.cfg.model, shape=self.shape, model=self.model)


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
    steps = _TorchSteps(cfg, group, data, shape)
    state = RunState(
        cfg=cfg,
        signature=RunSignature(
            model=cfg.model,
            feature_shape=shape.feature_shape,
            num_classes=shape.num_classes,
            seed=cfg.seed,
            batch_size=cfg.batch_size,
            world_size=topo.world_size,
        ),
        ckdir=(CheckpointDir(cfg.checkpoint_dir, ".pt", cfg.keep_checkpoints) if cfg.checkpoint_dir else None),
    )
    resume(state, steps)
    steps.distribute()
    outcome = train(state, steps)
    if topo.is_chief:
        extra = {"framework": "pytorch", "backend": backend, "launcher": topo.launcher}
        write_outputs(state, steps, outcome, started=started, extra=extra)
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
        log(os.environ.get("RANK", "0"), f"error: {type(e).__name__}: {e}")
        return int(e.exit_code)
    except RuntimeError as e:
        # A collective that failed (peer gone, timeout) surfaces as a RuntimeError (gloo raises
        # the plain class through DDP's reducer), so the traceback is kept for the other kinds.
        traceback.print_exc()
        err = TrainingError(f"distributed training failed: {type(e).__name__}: {e}")
        log(os.environ.get("RANK", "0"), f"error: {type(err).__name__}: {err}")
        return int(err.exit_code)


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    if code:
        # A process group broken by a dead peer can block in its destructor at interpreter exit.
        os._exit(code)
    sys.exit(code)
