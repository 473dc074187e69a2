"""What both training programs share: flags, the run config, data loading, metrics and a watchdog.

Neither torch nor chainer is imported here, so the PyTorch and the ChainerMN programs (and their
tests) can use this module whichever framework is installed.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import math
import os
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Literal

import numpy as np
import numpy.typing as npt

from kubetrain.data.dataset_format import DatasetInfo, load_split, read_dataset_info
from kubetrain.errors import ExitCode, InvalidInputError, SpecError
from kubetrain.fileio import atomic_write
from kubetrain.train.model_shapes import MODEL_NAMES

__all__ = [
    "METRICS_JSON",
    "MODEL_NAMES",
    "LoadedData",
    "TrainConfig",
    "Watchdog",
    "atomic_write",
    "build_parser",
    "final_metrics",
    "load_data",
    "log",
    "prepare_output_dir",
    "write_metrics",
]

METRICS_JSON = "metrics.json"
BACKENDS = ("auto", "gloo", "nccl")
COMMUNICATORS = ("auto", "naive", "flat", "pure_nccl")

ModelName = Literal["mlp", "cnn"]


def build_parser(*, prog: str, description: str) -> argparse.ArgumentParser:
    """The flag set every training program accepts (DESIGN.md "Command line" plus extras)."""
    p = argparse.ArgumentParser(prog=prog, description=description)
    p.add_argument("--data", required=True, help="dataset directory (dataset.json + shards)")
    p.add_argument("--output", required=True, help="where rank 0 writes the model and metrics.json")
    p.add_argument(
        "--checkpoint-dir",
        default=None,
        help="checkpoints go here and a restarted run resumes from the newest complete one",
    )
    p.add_argument("--epochs", type=int, default=12)
    p.add_argument("--batch-size", type=int, default=32, help="records per process per step (not global)")
    p.add_argument("--lr", type=float, default=0.002, help="Adam learning rate")
    p.add_argument("--model", choices=MODEL_NAMES, default="mlp")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--checkpoint-every",
        type=int,
        default=100,
        help="also checkpoint every N global steps (0: only at the end of each epoch)",
    )
    p.add_argument("--keep-checkpoints", type=int, default=3, help="newest N kept on disk")
    p.add_argument("--eval-every", type=int, default=1, help="evaluate every N epochs")
    p.add_argument(
        "--log-every",
        type=int,
        default=10,
        help="every step's loss is in the history; the ranks' losses are averaged every N steps (one collective)",
    )
    p.add_argument(
        "--timeout-seconds",
        type=float,
        default=120.0,
        help="a collective that waits longer than this (a dead or hung peer) fails the process",
    )
    p.add_argument(
        "--init-timeout-seconds",
        type=float,
        default=900.0,
        help="how long rendezvous waits for every peer to start (pods may pull images)",
    )
    p.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0: library default)")
    p.add_argument("--backend", choices=BACKENDS, default="auto", help="torch: gloo on CPU, nccl with CUDA")
    p.add_argument(
        "--communicator",
        choices=COMMUNICATORS,
        default="auto",
        help="chainermn: naive on CPU, pure_nccl on GPU",
    )
    p.add_argument(
        "--max-steps",
        type=int,
        default=0,
        help="stop after this global step (0: no limit); for tests and benchmarks",
    )
    return p


def _positive(field: str, value: float, *, allow_zero: bool = False) -> None:
    ok = value >= 0 if allow_zero else value > 0
    if not ok or (isinstance(value, float) and not math.isfinite(value)):
        raise SpecError(field, value, ">= 0" if allow_zero else "> 0")


@dataclass(frozen=True)
class TrainConfig:
    """One training run's inputs, validated on construction (flags map 1:1 onto fields)."""

    data: Path
    output: Path
    checkpoint_dir: Path | None
    epochs: int
    batch_size: int
    lr: float
    model: ModelName
    seed: int
    checkpoint_every: int
    keep_checkpoints: int
    eval_every: int
    log_every: int
    timeout_seconds: float
    init_timeout_seconds: float
    threads: int
    backend: str
    communicator: str
    max_steps: int

    def __post_init__(self) -> None:
        for name in ("epochs", "batch_size", "keep_checkpoints", "eval_every", "log_every"):
            _positive(f"--{name.replace('_', '-')}", getattr(self, name))
        for name in ("checkpoint_every", "threads", "max_steps", "seed"):
            _positive(f"--{name.replace('_', '-')}", getattr(self, name), allow_zero=True)
        for name in ("lr", "timeout_seconds", "init_timeout_seconds"):
            _positive(f"--{name.replace('_', '-')}", getattr(self, name))
        if self.model not in MODEL_NAMES:
            raise SpecError("--model", self.model, f"one of {MODEL_NAMES}")
        if self.backend not in BACKENDS:
            raise SpecError("--backend", self.backend, f"one of {BACKENDS}")
        if self.communicator not in COMMUNICATORS:
            raise SpecError("--communicator", self.communicator, f"one of {COMMUNICATORS}")

    @classmethod
    def from_args(cls, ns: argparse.Namespace) -> TrainConfig:
        """Build from the namespace of :func:`build_parser`."""
        return cls(
            data=Path(ns.data),
            output=Path(ns.output),
            checkpoint_dir=Path(ns.checkpoint_dir) if ns.checkpoint_dir else None,
            epochs=ns.epochs,
            batch_size=ns.batch_size,
            lr=ns.lr,
            model=ns.model,
            seed=ns.seed,
            checkpoint_every=ns.checkpoint_every,
            keep_checkpoints=ns.keep_checkpoints,
            eval_every=ns.eval_every,
            log_every=ns.log_every,
            timeout_seconds=ns.timeout_seconds,
            init_timeout_seconds=ns.init_timeout_seconds,
            threads=ns.threads,
            backend=ns.backend,
            communicator=ns.communicator,
            max_steps=ns.max_steps,
        )

    def hyperparameters(self) -> dict[str, Any]:
        """The fields that shape the result, for metrics.json."""
        return {
            "model": self.model,
            "batch_size": self.batch_size,
            "lr": self.lr,
            "seed": self.seed,
            "epochs_requested": self.epochs,
        }


@dataclass(frozen=True)
class LoadedData:
    """A dataset directory read into memory: both splits plus dataset.json."""

    info: DatasetInfo
    x_train: npt.NDArray[np.float32]
    y_train: npt.NDArray[np.int64]
    x_test: npt.NDArray[np.float32]
    y_test: npt.NDArray[np.int64]


def load_data(data_dir: Path, *, splits: Sequence[str] = ("train", "test")) -> LoadedData:
    """Read `data_dir` (the DESIGN.md dataset format); a split not asked for comes back empty."""
    info = read_dataset_info(data_dir)
    empty_x = np.zeros((0, *info.feature_shape), dtype=np.float32)
    empty_y = np.zeros((0,), dtype=np.int64)
    train = load_split(data_dir, "train") if "train" in splits else (empty_x, empty_y)
    test = load_split(data_dir, "test") if "test" in splits else (empty_x, empty_y)
    return LoadedData(info=info, x_train=train[0], y_train=train[1], x_test=test[0], y_test=test[1])


def prepare_output_dir(path: Path) -> None:
    """Create the output directory now, so that an unwritable one fails before training, not after it."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        if not os.access(path, os.W_OK):
            raise PermissionError(13, "Permission denied", str(path))
    except OSError as e:
        raise InvalidInputError(
            f"--output {path}: cannot be created or written ({e.strerror}); choose a writable directory"
        ) from e


def final_metrics(
    *,
    test_accuracy: float,
    test_loss: float,
    train_loss: float,
    samples_per_second: float,
    world_size: int,
    wall_seconds: float,
    epochs: int,
    global_step: int,
    history: Sequence[Mapping[str, Any]],
    extra: Mapping[str, Any],
) -> dict[str, Any]:
    """The metrics.json object of DESIGN.md (required keys first, then `extra`)."""
    out: dict[str, Any] = {
        "test_accuracy": float(test_accuracy),
        "test_loss": float(test_loss),
        "train_loss": float(train_loss),
        "samples_per_second": float(samples_per_second),
        "world_size": int(world_size),
        "wall_seconds": float(wall_seconds),
        "epochs": int(epochs),
        "global_step": int(global_step),
        "history": [dict(h) for h in history],
    }
    for key, value in extra.items():
        out.setdefault(key, value)
    return out


def write_metrics(output_dir: Path, metrics: Mapping[str, Any]) -> Path:
    """Write `output_dir/metrics.json` atomically and return its path."""
    path = output_dir / METRICS_JSON
    text = json.dumps(metrics, indent=2, sort_keys=False, allow_nan=True) + "\n"
    data = text.encode("utf-8")

    def write(f: IO[bytes]) -> None:
        f.write(data)

    atomic_write(path, write)
    return path


def log(rank: int | str, message: str) -> None:
    """One line on stderr, prefixed with the rank, flushed (the launcher tails these logs).

    The line goes out in one write: the ranks run with PYTHONUNBUFFERED (stderr then writes
    through), where `print` writes the text and its newline separately, and mpirun, relaying every
    rank's stderr into one stream, put another rank's line between the two
    (`[rank 0] mpi: rank 0/2[rank 1] mpi: rank 1/2`).
    """
    sys.stderr.write(f"[rank {rank}] {message}\n")
    sys.stderr.flush()


class Watchdog:
    """Kills the process when the training loop stops making progress for `limit_seconds`.

    The process-group timeout covers a peer that dies or hangs inside a collective; this is the
    backstop for everything else that could block forever (a stuck file system, a collective
    implementation that ignores its timeout). Exiting non-zero lets the operator restart the pod,
    which then resumes from the newest checkpoint: a hang would hold the job forever instead.
    """

    def __init__(self, *, limit_seconds: float, rank: int, what: str) -> None:
        _positive("watchdog limit", limit_seconds)
        self._limit = limit_seconds
        self._rank = rank
        self._what = what
        self._last = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kubetrain-watchdog", daemon=True)

    def start(self) -> Watchdog:
        """Start watching; returns self."""
        self._last = time.monotonic()
        self._thread.start()
        return self

    def beat(self) -> None:
        """Record progress (call once per step and around long phases)."""
        self._last = time.monotonic()

    def stop(self) -> None:
        """Stop watching (idempotent)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        poll = min(1.0, self._limit / 4)
        while not self._stop.wait(poll):
            idle = time.monotonic() - self._last
            if idle > self._limit:
                log(
                    self._rank,
                    f"watchdog: no progress in {self._what} for {idle:.0f}s "
                    f"(limit {self._limit:.0f}s); a peer is probably dead or hung; exiting",
                )
                faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
                sys.stderr.flush()
                # os._exit: a thread cannot raise into a main thread blocked in C++ code.
                os._exit(int(ExitCode.JOB_FAILED))
