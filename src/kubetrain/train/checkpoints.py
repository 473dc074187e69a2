"""Checkpoint files on disk and the training progress they carry, for both frameworks.

A checkpoint is one file `ckpt-<global step, 10 digits>.<pt|npz>`, written atomically (temporary
file, fsync, rename), so a file with its final name is always complete: a rank killed mid-write
leaves only a hidden temporary file, which is ignored and cleaned up. The newest N are kept.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, TypeVar

from kubetrain.errors import SpecError, TrainingError
from kubetrain.fileio import atomic_write

__all__ = ["CheckpointCorruptError", "CheckpointDir", "Progress", "RunSignature", "require_visible"]

T = TypeVar("T")
_NAME = re.compile(r"^ckpt-(\d{10})\.(pt|npz)$")
_TMP_GLOB = ".ckpt-*.tmp"


class CheckpointCorruptError(TrainingError):
    """A checkpoint file that exists under its final name but cannot be read back."""


@dataclass
class Progress:
    """Where training stands: what a resumed run needs besides the model and optimizer state.

    `batch_in_epoch` batches of `epoch` are done (the data order of an epoch is a pure function
    of the seed and the epoch, so a resumed run skips exactly those). The epoch's loss sums are
    global (all ranks) so the epoch's train loss stays exact across a restart.
    """

    epoch: int = 0
    batch_in_epoch: int = 0
    global_step: int = 0
    epoch_loss_sum: float = 0.0
    epoch_loss_count: int = 0
    history: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> str:
        """Serialise (a JSON string fits both a torch payload and an npz)."""
        return json.dumps(
            {
                "epoch": self.epoch,
                "batch_in_epoch": self.batch_in_epoch,
                "global_step": self.global_step,
                "epoch_loss_sum": self.epoch_loss_sum,
                "epoch_loss_count": self.epoch_loss_count,
                "history": self.history,
            }
        )

    @classmethod
    def from_json(cls, text: str) -> Progress:
        """Inverse of :meth:`to_json`."""
        try:
            d = json.loads(text)
            return cls(
                epoch=int(d["epoch"]),
                batch_in_epoch=int(d["batch_in_epoch"]),
                global_step=int(d["global_step"]),
                epoch_loss_sum=float(d["epoch_loss_sum"]),
                epoch_loss_count=int(d["epoch_loss_count"]),
                history=list(d["history"]),
            )
        except (ValueError, KeyError, TypeError) as e:
            raise CheckpointCorruptError(f"checkpoint progress record is malformed: {e}") from e


def require_visible(path: Path, rank: int) -> None:
    """Fail clearly when the checkpoint rank 0 chose is not on this rank's file system."""
    if not path.is_file():
        raise TrainingError(
            f"rank {rank}: checkpoint {path}, chosen by rank 0, is not visible here; "
            "--checkpoint-dir must be on storage every rank shares (the job's volume)"
        )


@dataclass(frozen=True)
class CheckpointDir:
    """The checkpoint directory of one run: naming, atomic save, newest-complete lookup, pruning."""

    path: Path
    suffix: str
    keep: int = 3

    def __post_init__(self) -> None:
        if self.suffix not in (".pt", ".npz"):
            raise SpecError("checkpoint suffix", self.suffix, "'.pt' or '.npz'")
        if self.keep < 1:
            raise SpecError("--keep-checkpoints", self.keep, ">= 1")

    def file_for(self, step: int) -> Path:
        """The final name of the checkpoint taken after global step `step`."""
        return self.path / f"ckpt-{step:010d}{self.suffix}"

    def complete(self) -> list[tuple[int, Path]]:
        """Complete checkpoints as (step, path), newest first."""
        if not self.path.is_dir():
            return []
        found: list[tuple[int, Path]] = []
        for p in self.path.iterdir():
            m = _NAME.match(p.name)
            if m and "." + m.group(2) == self.suffix and p.is_file():
                found.append((int(m.group(1)), p))
        return sorted(found, reverse=True)

    def save(self, step: int, write: Callable[[IO[bytes]], object]) -> Path:
        """Write the checkpoint of `step` atomically, then drop all but the newest `keep`."""
        target = self.file_for(step)
        try:
            atomic_write(target, write)
            for _, old in self.complete()[self.keep :]:
                old.unlink(missing_ok=True)
        except OSError as e:
            raise TrainingError(f"cannot write checkpoint {target}: {e}") from e
        return target

    def prepare(self) -> None:
        """Create the directory and clear a killed writer's temporaries (rank 0, at start)."""
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            for p in self.path.glob(_TMP_GLOB):
                p.unlink(missing_ok=True)
        except OSError as e:
            raise TrainingError(f"--checkpoint-dir {self.path}: cannot use it: {e}") from e

    def load_newest(self, load: Callable[[Path], T], *, warn: Callable[[str], None]) -> tuple[int, T] | None:
        """Load the newest checkpoint that reads back; skip (and report) unreadable ones."""
        for step, p in self.complete():
            try:
                return step, load(p)
            except CheckpointCorruptError as e:
                warn(f"skipping unreadable checkpoint {p}: {e}")
        return None


@dataclass(frozen=True)
class RunSignature:
    """What a checkpoint must match to be resumed (model shape) or remapped (data position)."""

    model: str
    feature_shape: tuple[int, ...]
    num_classes: int
    seed: int
    batch_size: int
    world_size: int

    def to_payload(self) -> dict[str, Any]:
        """Plain values for the checkpoint payload."""
        return {
            "model": self.model,
            "feature_shape": list(self.feature_shape),
            "num_classes": self.num_classes,
            "seed": self.seed,
            "batch_size": self.batch_size,
            "world_size": self.world_size,
        }

    def check_resumable(self, saved: dict[str, Any], path: Path) -> None:
        """Raise if the checkpoint was written for another model or data set."""
        for key in ("model", "feature_shape", "num_classes"):
            mine = self.to_payload()[key]
            if saved.get(key) != mine:
                raise TrainingError(
                    f"{path}: written with {key}={saved.get(key)!r} but this run has {mine!r}; "
                    "use a fresh --checkpoint-dir or the original settings"
                )

    def remap_position(self, saved: dict[str, Any], batch_in_epoch: int) -> int:
        """The batch to resume at when batch size or world size changed since the checkpoint.

        Positions are exact when neither changed; otherwise the records already consumed in the
        epoch are converted into this run's batches (the per-rank split then differs anyway).
        """
        old = int(saved["batch_size"]) * int(saved["world_size"])
        new = self.batch_size * self.world_size
        return batch_in_epoch if old == new else (batch_in_epoch * old) // new


# What resuming and checkpointing need from a process group, whatever the framework.
Broadcast = Callable[[int], int]  # rank 0's value on every rank
AllreduceSum = Callable[[list[float]], list[float]]


def choose_resume_step(
    ckdir: CheckpointDir,
    *,
    rank: int,
    broadcast: Broadcast,
    load: Callable[[Path], object],
    warn: Callable[[str], None],
) -> int:
    """The step of the newest complete checkpoint, as rank 0 sees it, on every rank (-1: none).

    Rank 0 decides: a rank restarted earlier than rank 0 must not pick a file rank 0 skipped.
    """
    chosen = -1
    if rank == 0:
        ckdir.prepare()
        found = ckdir.load_newest(load, warn=warn)
        chosen = -1 if found is None else found[0]
    return broadcast(chosen)


def resumed_progress(progress: Progress, *, saved: dict[str, Any], signature: RunSignature, rank: int) -> Progress:
    """A checkpoint's progress for this run: the position remapped to its batches, the loss sums on rank 0 only.

    The epoch's loss sums are global and kept by rank 0 alone, so they are counted once.
    """
    progress.batch_in_epoch = signature.remap_position(saved, progress.batch_in_epoch)
    if rank != 0:
        progress.epoch_loss_sum, progress.epoch_loss_count = 0.0, 0
    return progress


def gather_epoch_loss(progress: Progress, *, rank: int, allreduce_sum: AllreduceSum) -> None:
    """Sum every rank's epoch loss into rank 0's progress (which the checkpoint carries)."""
    total, count = allreduce_sum([progress.epoch_loss_sum, float(progress.epoch_loss_count)])
    progress.epoch_loss_sum, progress.epoch_loss_count = (total, int(count)) if rank == 0 else (0.0, 0)


def last_train_loss(history: list[dict[str, Any]]) -> float:
    """The mean loss of the last complete epoch, or the last logged step's if none completed."""
    for h in reversed(history):
        if h.get("kind") == "epoch":
            return float(h["loss"])
    return float(history[-1]["loss"]) if history else math.nan
