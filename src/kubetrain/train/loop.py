"""The training loop both programs run; each framework passes in its own step, evaluation and checkpoint format.

Everything about *when* things happen lives here, once: resuming from the checkpoint rank 0 picks,
the epochs of steps (the data order of an epoch is a pure function of the seed and the epoch, so a
resumed run skips exactly the batches already done), the history entries, checkpoints every
`--checkpoint-every` steps and at each epoch's end, evaluation, the watchdog, and rank 0's model file
and `metrics.json`. *How* a step, an evaluation or a checkpoint is done is the framework's
(:class:`Framework`), so neither torch nor chainer is imported here.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence, Sized
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

from kubetrain.errors import DIVERGED_ADVICE, DivergedError
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
from kubetrain.train.common import TrainConfig, Watchdog, final_metrics, log, write_metrics

__all__ = [
    "WATCHDOG_GRACE_SECONDS",
    "Collectives",
    "Framework",
    "LoadedCheckpoint",
    "Outcome",
    "RunState",
    "check_finite",
    "resume",
    "train",
    "write_outputs",
]

# Where the framework's own collectives time out after --timeout-seconds, they fail first, with a
# clearer error than the watchdog's; the watchdog then only catches what blocks outside them.
WATCHDOG_GRACE_SECONDS = 30.0

BatchT = TypeVar("BatchT", bound=Sized)


@dataclass(frozen=True)
class LoadedCheckpoint:
    """A checkpoint read back: the signature it was written with, and how to put its state back."""

    signature: dict[str, Any]
    # Loads model, optimizer and RNG states into the live objects and returns the saved progress.
    restore: Callable[[], Progress]


class Collectives(Protocol):
    """What the loop needs from a framework's process group: who this process is, two small collectives."""

    @property
    def rank(self) -> int:
        """This process's rank."""
        ...

    @property
    def world_size(self) -> int:
        """How many processes train together."""
        ...

    def allreduce_sum(self, values: list[float]) -> list[float]:
        """Element-wise sum over all ranks."""
        ...

    def broadcast_int(self, value: int) -> int:
        """Rank 0's `value` on every rank."""
        ...


class Framework(Protocol[BatchT]):
    """What the loop needs from one framework's program (one per process).

    `BatchT` is what one batch of record indices is in that framework (a tensor, a numpy array).
    """

    @property
    def group(self) -> Collectives:
        """This process's group: its rank, the world size and the collectives the loop uses."""
        ...

    @property
    def collectives_time_out(self) -> bool:
        """Whether a collective fails by itself after --timeout-seconds (torch.distributed does;
        MPI's do not, so there the watchdog is what enforces the timeout)."""
        ...

    @property
    def model_file(self) -> str:
        """The model's file name in the output directory."""
        ...

    def epoch_batches(self, epoch: int, batch_size: int) -> Sequence[BatchT]:
        """This rank's batches of `epoch`, in an order that depends only on the seed and the epoch (and rank)."""
        ...

    def train_step(self, batch: BatchT) -> float:
        """One optimizer step on `batch` (gradients averaged over all ranks); returns this rank's loss."""
        ...

    def evaluate(self) -> tuple[float, float]:
        """Accuracy and mean loss over the whole test split (every rank takes part)."""
        ...

    def save_checkpoint(self, ckdir: CheckpointDir, *, progress: Progress, signature: RunSignature) -> None:
        """Write the checkpoint of `progress.global_step` (called on rank 0 only)."""
        ...

    def load_checkpoint(self, path: Path) -> LoadedCheckpoint:
        """Read a checkpoint; CheckpointCorruptError if it does not read back."""
        ...

    def save_model(self, path: Path) -> None:
        """Write the trained model to `path` (rank 0 only)."""
        ...


@dataclass
class RunState:
    """Where one run stands, whatever the framework: its config, progress and checkpoints."""

    cfg: TrainConfig
    signature: RunSignature
    ckdir: CheckpointDir | None  # None: no --checkpoint-dir, so no checkpoints and no resume
    progress: Progress = field(default_factory=Progress)
    resumed_from_step: int = 0


@dataclass(frozen=True)
class Outcome:
    """What training produced on this rank, for metrics.json."""

    train_seconds: float
    samples_total: float  # records trained by all ranks together
    test_accuracy: float
    test_loss: float


def resume(state: RunState, fw: Framework[Any]) -> None:
    """Load the newest complete checkpoint on every rank, as chosen by rank 0 (nothing without a checkpoint dir)."""
    if state.ckdir is None:
        return
    rank = fw.group.rank
    chosen = choose_resume_step(
        state.ckdir, rank=rank, broadcast=fw.group.broadcast_int, load=fw.load_checkpoint, warn=lambda m: log(rank, m)
    )
    if chosen < 0:
        return
    path = state.ckdir.file_for(chosen)
    require_visible(path, rank)
    loaded = fw.load_checkpoint(path)
    state.signature.check_resumable(loaded.signature, path)
    progress = loaded.restore()
    state.progress = resumed_progress(progress, saved=loaded.signature, signature=state.signature, rank=rank)
    state.resumed_from_step = progress.global_step
    log(rank, f"resumed from {path} (epoch {progress.epoch}, step {chosen})")


def check_finite(what: str, value: float, *, step: int, epoch: int) -> None:
    """DivergedError if `value` is not finite: training on cannot bring the model back.

    Every rank checks the same value (averaged over the ranks, or evaluated by all of them), so
    all of them stop at the same step and none is left waiting in a collective.
    """
    if not math.isfinite(value):
        raise DivergedError(f"the model diverged at step {step} (epoch {epoch}): {what} is {value}; {DIVERGED_ADVICE}")


def _checkpoint(state: RunState, fw: Framework[Any]) -> None:
    """Collect the epoch's loss sums on rank 0, which then writes the checkpoint."""
    if state.ckdir is None:
        return
    p = state.progress
    gather_epoch_loss(p, rank=fw.group.rank, allreduce_sum=fw.group.allreduce_sum)
    if fw.group.rank == 0:
        fw.save_checkpoint(state.ckdir, progress=p, signature=state.signature)


def _epochs(state: RunState, fw: Framework[BatchT], watchdog: Watchdog) -> tuple[float, int]:
    """The epoch loop; returns (seconds spent in training steps, records trained by this rank)."""
    cfg, p = state.cfg, state.progress
    train_seconds, samples = 0.0, 0
    stop = False
    # Every step's loss goes into the history; the ranks' losses are averaged every `log_every`
    # steps in one collective (and before anything that reads the history: a checkpoint, the
    # epoch's entry, the end), so a step costs no extra collective for it.
    pending: list[tuple[int, int, float]] = []  # (step, epoch, this rank's loss)

    def flush() -> None:
        if not pending:
            return
        sums = fw.group.allreduce_sum([value for _, _, value in pending])
        for (step, epoch, _), total in zip(pending, sums, strict=True):
            loss = total / fw.group.world_size
            check_finite("the training loss (averaged over the ranks)", loss, step=step, epoch=epoch)
            p.history.append({"step": step, "epoch": epoch, "loss": loss, "kind": "step"})
        pending.clear()

    while p.epoch < cfg.epochs and not stop:
        batches = fw.epoch_batches(p.epoch, cfg.batch_size)
        t0 = time.perf_counter()
        for b in range(p.batch_in_epoch, len(batches)):
            batch = batches[b]
            value = fw.train_step(batch)
            p.batch_in_epoch, p.global_step = b + 1, p.global_step + 1
            p.epoch_loss_sum, p.epoch_loss_count = p.epoch_loss_sum + value, p.epoch_loss_count + 1
            samples += len(batch)
            watchdog.beat()
            pending.append((p.global_step, p.epoch, value))
            if p.global_step % cfg.log_every == 0:
                flush()
            if cfg.max_steps and p.global_step >= cfg.max_steps:
                stop = True
                break
            mid_epoch = p.batch_in_epoch < len(batches)
            if cfg.checkpoint_every and p.global_step % cfg.checkpoint_every == 0 and mid_epoch:
                flush()
                _checkpoint(state, fw)
        train_seconds += time.perf_counter() - t0
        flush()
        if p.batch_in_epoch < len(batches):
            break  # --max-steps stopped the run mid-epoch
        total, count = fw.group.allreduce_sum([p.epoch_loss_sum, p.epoch_loss_count])
        loss = total / max(count, 1.0)
        entry: dict[str, Any] = {"step": p.global_step, "epoch": p.epoch, "loss": loss, "kind": "epoch"}
        if (p.epoch + 1) % cfg.eval_every == 0 or p.epoch + 1 == cfg.epochs:
            acc, test_loss = _evaluate(fw, step=p.global_step, epoch=p.epoch)
            entry.update(test_accuracy=acc, test_loss=test_loss)
            if fw.group.rank == 0:
                log(fw.group.rank, f"epoch {p.epoch}: loss {loss:.4f} test accuracy {acc:.4f}")
        p.history.append(entry)
        p.epoch, p.batch_in_epoch, p.epoch_loss_sum, p.epoch_loss_count = p.epoch + 1, 0, 0.0, 0
        _checkpoint(state, fw)
        watchdog.beat()
    return train_seconds, samples


def _evaluate(fw: Framework[Any], *, step: int, epoch: int) -> tuple[float, float]:
    """`fw.evaluate()`; DivergedError if the test loss is not finite (an empty test split gives NaN for both: fine)."""
    acc, test_loss = fw.evaluate()
    if math.isfinite(acc):
        check_finite("the test loss", test_loss, step=step, epoch=epoch)
    return acc, test_loss


def train(state: RunState, fw: Framework[Any]) -> Outcome:
    """Train the remaining epochs and evaluate, under a watchdog; every rank calls this."""
    grace = WATCHDOG_GRACE_SECONDS if fw.collectives_time_out else 0.0
    watchdog = Watchdog(limit_seconds=state.cfg.timeout_seconds + grace, rank=fw.group.rank, what="training").start()
    try:
        train_seconds, samples = _epochs(state, fw, watchdog)
        p = state.progress
        acc, test_loss = _evaluate(fw, step=p.global_step, epoch=p.epoch - 1 if p.batch_in_epoch == 0 else p.epoch)
        samples_total = fw.group.allreduce_sum([samples])[0]
        watchdog.beat()
    finally:
        watchdog.stop()
    return Outcome(train_seconds=train_seconds, samples_total=samples_total, test_accuracy=acc, test_loss=test_loss)


def write_outputs(
    state: RunState, fw: Framework[Any], outcome: Outcome, *, started: float, extra: dict[str, Any]
) -> None:
    """Rank 0: the model file and metrics.json (DESIGN.md's keys, then `extra`, then the run's own)."""
    cfg, p = state.cfg, state.progress
    cfg.output.mkdir(parents=True, exist_ok=True)
    fw.save_model(cfg.output / fw.model_file)
    seconds = outcome.train_seconds
    metrics = final_metrics(
        test_accuracy=outcome.test_accuracy,
        test_loss=outcome.test_loss,
        train_loss=last_train_loss(p.history),
        samples_per_second=outcome.samples_total / seconds if seconds > 0 else 0.0,
        world_size=fw.group.world_size,
        wall_seconds=time.monotonic() - started,
        epochs=p.epoch,
        global_step=p.global_step,
        history=p.history,
        extra={
            **extra,
            "resumed_from_step": state.resumed_from_step,
            "samples_trained": int(outcome.samples_total),
            "train_seconds": seconds,
            **cfg.hyperparameters(),
        },
    )
    write_metrics(cfg.output, metrics)
    log(fw.group.rank, f"done: test accuracy {outcome.test_accuracy:.4f}, wrote {cfg.output}")
