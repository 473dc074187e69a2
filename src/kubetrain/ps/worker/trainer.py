"""What a worker does with one task: train on its records through the PS, or evaluate them.

Training a batch: pull the dense tensors and the batch's unique embedding rows, forward and
backward in PyTorch, push the dense gradients and the rows' gradients (already merged per
unique id by autograd). In sync mode a shard may reject the push as stale: the batch is
recomputed from fresh parameters and pushed again to the shards that rejected it. If a shard's
generation changes during a task (it restarted and lost updates), the whole task starts over.

With a trained-log file, a line per batch records what was trained and where its gradients
landed (shard, generation, version); tests use it as the ground truth of record accounting.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np
import numpy.typing as npt
import torch

from kubetrain.data.dataset_format import DatasetInfo, load_shard, read_dataset_info
from kubetrain.errors import TrainingError
from kubetrain.ps.common.errors import DivergedError
from kubetrain.ps.common.evaluation import EvalResult
from kubetrain.ps.common.tasks import TaskRange
from kubetrain.ps.worker.client import PSClient, Pulled
from kubetrain.ps.worker.models import PSModel

__all__ = ["ShardCache", "StragglerPacer", "TaskAbandoned", "TaskProgress", "TrainOutcome", "Trainer"]

MAX_TASK_RESTARTS = 5


class TaskAbandoned(TrainingError):  # noqa: N818 - control flow, not a failure
    """The master took the lease back: stop without reporting."""


class _TaskRestart(TrainingError):  # noqa: N818 - control flow
    """A shard restarted during the task: train it again from its first record."""


class ShardCache:
    """Shards of the dataset loaded on first use."""

    def __init__(self, data_dir: Path) -> None:
        self.dir = data_dir
        self.info: DatasetInfo = read_dataset_info(data_dir)
        self._cache: dict[tuple[str, int], tuple[npt.NDArray[np.float32], npt.NDArray[np.int64]]] = {}

    def records(
        self, split: str, shard: int, start: int, end: int
    ) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.int64]]:
        """Records [start, end) of a shard."""
        key = (split, shard)
        if key not in self._cache:
            self._cache[key] = load_shard(self.dir, split, shard)
        x, y = self._cache[key]
        if end > len(x):
            raise TrainingError(f"{split} shard {shard} has {len(x)} records; task asks [{start}, {end})")
        return x[start:end], y[start:end]


class StragglerPacer:
    """Makes a worker a straggler: each batch takes `factor` times a normal batch.

    A normal batch is this worker's median step over its first steps (after a few warm-up
    steps), measured while its peers run. The pace then stays fixed, as a node that is slower
    than its peers stays slower: on a machine whose processes share a few cores, a straggler
    paced by its *current* step time would speed up whenever its peers finish and free the CPUs.
    Until calibrated, each step is stretched by `factor` directly.
    """

    WARMUP, CALIBRATION = 3, 20

    def __init__(self, factor: float) -> None:
        self.factor = factor
        self._steps: list[float] = []
        self.target: float | None = None

    def delay(self, step_seconds: float) -> float:
        """How long to sleep after a step that took `step_seconds`."""
        if self.target is None:
            self._steps.append(step_seconds)
            calibration = self._steps[self.WARMUP :]
            if len(calibration) >= self.CALIBRATION:
                self.target = self.factor * float(np.median(calibration))
            return (self.factor - 1) * step_seconds
        return max(0.0, self.target - step_seconds)


@dataclass
class TaskProgress:
    """Shared with the heartbeat thread: which lease, how far, and whether to abandon it."""

    lease: int = 0
    records_done: int = 0
    abandon: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self, lease: int) -> None:
        """A new lease begins."""
        with self.lock:
            self.lease, self.records_done, self.abandon = lease, 0, False

    def clear(self) -> None:
        """No lease held."""
        self.start(0)


@dataclass
class TrainOutcome:
    """A trained task: records, summed loss, and per shard (generation, highest version)."""

    records: int = 0
    loss_sum: float = 0.0
    versions: dict[int, tuple[int, int]] = field(default_factory=dict)


@dataclass
class Trainer:
    """Runs tasks for one worker."""

    model: PSModel
    client: PSClient
    data: ShardCache
    worker_id: str
    batch_size: int
    mode: str
    seed: int
    sync_retries: int = 64
    slowdown: float = 1.0
    trained_log: IO[str] | None = None
    stop: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self._params = dict(self.model.named_parameters())
        self._pacer = StragglerPacer(self.slowdown)

    # ----------------------------------------------------------------------------- training

    def train(self, task: TaskRange, lease: int, progress: TaskProgress) -> TrainOutcome:
        """Train every record of the task once (from the start again if a shard restarted)."""
        x, y = self.data.records(task.split, task.shard, task.start, task.end)
        for _ in range(MAX_TASK_RESTARTS + 1):
            try:
                return self._train_once(task, lease, x, y, progress)
            except _TaskRestart:
                with progress.lock:
                    progress.records_done = 0
        raise TrainingError(f"{task.task_id}: PS shards kept restarting ({MAX_TASK_RESTARTS} times)")

    def _train_once(
        self,
        task: TaskRange,
        lease: int,
        x: npt.NDArray[np.float32],
        y: npt.NDArray[np.int64],
        progress: TaskProgress,
    ) -> TrainOutcome:
        out = TrainOutcome()
        generations: list[int] | None = None
        for lo in range(0, len(x), self.batch_size):
            if progress.abandon:
                raise TaskAbandoned(f"lease {lease} taken back by the master")
            t0 = time.monotonic()
            xb, yb = self.model.feed(x[lo : lo + self.batch_size], y[lo : lo + self.batch_size])
            loss, landed, generations = self._step(xb, yb, generations)
            n = len(y[lo : lo + self.batch_size])  # records, whatever shape the model's input has
            out.records += n
            out.loss_sum += loss * n
            for shard, (gen, version) in landed.items():
                prev = out.versions.get(shard, (gen, -1))[1]
                out.versions[shard] = (gen, max(prev, version))
            with progress.lock:
                progress.records_done = out.records
            self._log(task, lease, task.start + lo, task.start + lo + n, landed)
            if self.slowdown > 1:
                self.stop.wait(self._pacer.delay(time.monotonic() - t0))
        return out

    def _step(
        self, xb: torch.Tensor, yb: torch.Tensor, generations: list[int] | None
    ) -> tuple[float, dict[int, tuple[int, int]], list[int]]:
        ids = self.model.ids(xb)
        unique: dict[str, npt.NDArray[np.int64]] = {}
        inverse: dict[str, npt.NDArray[np.int64]] = {}
        for table, table_ids in ids.items():
            unique[table], inv = np.unique(table_ids, return_inverse=True)
            inverse[table] = inv.reshape(table_ids.shape)
        landed: dict[int, tuple[int, int]] = {}
        targets: list[int] | None = None
        for _ in range(self.sync_retries + 1):
            pulled = self.client.pull(unique)
            if not all(pulled.initialized):
                self.offer_init()
                continue
            if generations is None:
                generations = pulled.generations
            elif pulled.generations != generations:
                raise _TaskRestart("a PS shard restarted")
            loss, dense_grads, sparse_grads = self._forward_backward(xb, yb, pulled, unique, inverse)
            outcomes = self.client.push(
                pulled,
                worker_id=self.worker_id,
                dense_grads=dense_grads,
                sparse_grads=sparse_grads,
                batch_size=len(yb),
                shards=targets,
            )
            rejected = []
            for o in outcomes:
                if o.accepted:
                    landed[o.shard] = (o.generation, o.applied_version)
                elif o.reason.startswith("generation"):
                    raise _TaskRestart(o.reason)
                else:
                    rejected.append(o.shard)
            if not rejected:
                return loss, landed, generations
            targets = rejected  # sync: stale on these shards, recompute and push to them only
        raise TrainingError(f"push rejected {self.sync_retries + 1} times in a row (stale)")

    def offer_init(self) -> None:
        """Offer every shard this model's current dense tensors and tables (first offer wins)."""
        dense = {k: v.detach().numpy() for k, v in self._params.items()}
        self.client.ensure_initialized(dense, self.model.tables, self.seed)

    def _load(self, pulled: Pulled) -> None:
        with torch.no_grad():
            for name, value in pulled.dense.items():
                self._params[name].copy_(torch.from_numpy(value))

    def _forward_backward(
        self,
        xb: torch.Tensor,
        yb: torch.Tensor,
        pulled: Pulled,
        unique: Mapping[str, npt.NDArray[np.int64]],
        inverse: Mapping[str, npt.NDArray[np.int64]],
    ) -> tuple[float, dict[str, npt.NDArray[np.float32]], dict[str, Any]]:
        self._load(pulled)
        self.model.zero_grad(set_to_none=True)
        leaves = {t: torch.from_numpy(pulled.rows[t]).requires_grad_(True) for t in unique}
        gathered = {t: leaves[t][torch.from_numpy(inverse[t])] for t in unique}
        logits = self.model(xb, gathered)
        loss = self.model.loss(logits, yb)
        value = float(loss.detach())
        if not math.isfinite(value):
            # Nothing is pushed: the shards refuse non-finite gradients, and training on cannot help.
            raise DivergedError(f"the training loss is not finite ({value}) at model version {max(pulled.versions)}")
        loss.backward()
        dense = {k: p.grad.detach().numpy().copy() for k, p in self._params.items() if p.grad is not None}
        sparse = {
            t: (unique[t], leaf.grad.detach().numpy().copy()) for t, leaf in leaves.items() if leaf.grad is not None
        }
        grads = [*dense.items(), *((t, g) for t, (_, g) in sparse.items())]
        for name, g in grads:
            if not np.isfinite(g).all():
                raise DivergedError(f"the gradient of {name} is not finite (loss {value})")
        return value, dense, sparse

    def _log(self, task: TaskRange, lease: int, start: int, end: int, landed: Mapping[int, tuple[int, int]]) -> None:
        if self.trained_log is None:
            return
        line = {
            "worker": self.worker_id,
            "task": task.task_id,
            "lease": lease,
            "epoch": task.epoch,
            "shard": task.shard,
            "start": start,
            "end": end,
            "push": [[s, g, v] for s, (g, v) in sorted(landed.items())],
        }
        self.trained_log.write(json.dumps(line) + "\n")
        self.trained_log.flush()  # a SIGKILL loses at most the line being written

    # ----------------------------------------------------------------------------- evaluation

    def evaluate(self, task: TaskRange, *, batch: int = 512) -> EvalResult:
        """Loss, correct count (and binary scores/labels) of the task's records."""
        x, y = self.data.records(task.split, task.shard, task.start, task.end)
        loss_sum, correct = 0.0, 0
        scores: list[float] = []
        labels: list[int] = []
        for lo in range(0, len(x), batch):
            xb, yb = self.model.feed(x[lo : lo + batch], y[lo : lo + batch])
            ids = self.model.ids(xb)
            unique = {}
            inverse = {}
            for table, table_ids in ids.items():
                unique[table], inv = np.unique(table_ids, return_inverse=True)
                inverse[table] = torch.from_numpy(inv.reshape(table_ids.shape))
            pulled = self.client.pull(unique)
            if not all(pulled.initialized):
                self.offer_init()
                pulled = self.client.pull(unique)
            self._load(pulled)
            with torch.no_grad():
                rows = {t: torch.from_numpy(pulled.rows[t])[inverse[t]] for t in unique}
                logits = self.model(xb, rows)
                loss_sum += float(self.model.loss(logits, yb, reduction="sum"))
                pred, score = self.model.predictions(logits)
                correct += int((pred == yb).sum())
                if self.model.binary:
                    scores.extend(score.tolist())
                    labels.extend(yb.tolist())
        if not math.isfinite(loss_sum):
            raise DivergedError(f"the evaluation loss is not finite ({loss_sum})")
        return EvalResult(loss_sum, correct, len(x), tuple(scores), tuple(labels))
