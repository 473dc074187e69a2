"""The shared training loop (train/loop.py) with a fake framework: when it steps, logs, checkpoints and resumes."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import IO, Any

import pytest

from kubetrain.errors import DivergedError
from kubetrain.train import loop
from kubetrain.train.checkpoints import CheckpointDir, Progress, RunSignature
from kubetrain.train.common import TrainConfig, Watchdog, build_parser
from kubetrain.train.loop import LoadedCheckpoint, RunState


class FakeSteps:
    """One process, 10 records, loss = the batch's first index; checkpoints as JSON files.

    It is its own process group (`group`): rank, world size and the collectives are its own.
    """

    model_file = "model.fake"

    def __init__(self, *, collectives_time_out: bool = True) -> None:
        self.collectives_time_out = collectives_time_out
        self.rank, self.world_size = 0, 1
        self.group = self
        self.trained: list[tuple[int, ...]] = []
        self.saved_steps: list[int] = []
        self.restored = False

    def allreduce_sum(self, values: list[float]) -> list[float]:
        return [float(v) for v in values]

    def broadcast_int(self, value: int) -> int:
        return value

    def epoch_batches(self, epoch: int, batch_size: int) -> list[tuple[int, ...]]:
        order = list(range(10))
        return [tuple(order[i : i + batch_size]) for i in range(0, len(order), batch_size)]

    def train_step(self, batch: tuple[int, ...]) -> float:
        self.trained.append(batch)
        return float(batch[0])

    def evaluate(self) -> tuple[float, float]:
        return 0.5, 1.5

    def save_checkpoint(self, ckdir: CheckpointDir, *, progress: Progress, signature: RunSignature) -> None:
        self.saved_steps.append(progress.global_step)
        data = json.dumps({"signature": signature.to_payload(), "progress": progress.to_json()}).encode()

        def write(f: IO[bytes]) -> None:
            f.write(data)

        ckdir.save(progress.global_step, write)

    def load_checkpoint(self, path: Path) -> LoadedCheckpoint:
        raw = json.loads(path.read_text())

        def restore() -> Progress:
            self.restored = True
            return Progress.from_json(raw["progress"])

        return LoadedCheckpoint(signature=raw["signature"], restore=restore)

    def save_model(self, path: Path) -> None:
        path.write_text("model")


def _state(tmp_path: Path, *flags: str, checkpoints: bool = True) -> RunState:
    args = ["--data", str(tmp_path / "data"), "--output", str(tmp_path / "out"), "--batch-size", "4"]
    if checkpoints:
        args += ["--checkpoint-dir", str(tmp_path / "ck")]
    cfg = TrainConfig.from_args(build_parser(prog="t", description="t").parse_args([*args, *flags]))
    signature = RunSignature(model="mlp", feature_shape=(2,), num_classes=2, seed=0, batch_size=4, world_size=1)
    ckdir = CheckpointDir(cfg.checkpoint_dir, ".pt") if cfg.checkpoint_dir else None
    return RunState(cfg=cfg, signature=signature, ckdir=ckdir)


def test_epochs_of_batches_with_history_checkpoints_and_metrics(tmp_path: Path) -> None:
    state, steps = _state(tmp_path, "--epochs", "2", "--log-every", "2", "--checkpoint-every", "2"), FakeSteps()
    outcome = loop.train(state, steps)
    assert [b[0] for b in steps.trained] == [0, 4, 8] * 2  # 3 batches per epoch, ceil(10 / 4)
    # Mid-epoch every 2 steps (not at step 6: that is an epoch's end), and at each epoch's end.
    assert steps.saved_steps == [2, 3, 4, 6]
    kinds = [(h["kind"], h["step"]) for h in state.progress.history]
    # Every step is in the history (the chart draws each); the epoch's mean follows its last step.
    epoch_0 = [("step", 1), ("step", 2), ("step", 3), ("epoch", 3)]
    assert kinds == [*epoch_0, ("step", 4), ("step", 5), ("step", 6), ("epoch", 6)]
    assert [h["loss"] for h in state.progress.history[:3]] == [0.0, 4.0, 8.0]
    assert state.progress.history[3]["loss"] == pytest.approx(4.0)  # (0 + 4 + 8) / 3
    assert [h["epoch"] for h in state.progress.history if h["kind"] == "step"] == [0, 0, 0, 1, 1, 1]
    assert (outcome.samples_total, outcome.test_accuracy) == (20, 0.5)

    loop.write_outputs(state, steps, outcome, started=0.0, extra={"framework": "fake"})
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert list(metrics)[:10] == [
        "test_accuracy", "test_loss", "train_loss", "samples_per_second", "world_size", "wall_seconds",
        "epochs", "global_step", "history", "framework",
    ]  # fmt: skip
    assert (metrics["epochs"], metrics["global_step"], metrics["samples_trained"]) == (2, 6, 20)
    assert (tmp_path / "out" / "model.fake").read_text() == "model"


def test_step_losses_are_averaged_over_ranks_every_log_every_steps_in_one_collective(tmp_path: Path) -> None:
    class TwoRanks(FakeSteps):
        """Rank 0 of two; the other rank's loss is always 1 higher."""

        def __init__(self) -> None:
            super().__init__()
            self.world_size = 2
            self.reduced: list[int] = []

        def allreduce_sum(self, values: list[float]) -> list[float]:
            self.reduced.append(len(values))
            return [2 * v + 1 for v in values]

    state, steps = (
        _state(tmp_path, "--epochs", "1", "--batch-size", "1", "--log-every", "4", checkpoints=False),
        TwoRanks(),
    )
    loop.train(state, steps)
    step_losses = [h["loss"] for h in state.progress.history if h["kind"] == "step"]
    assert step_losses == [v + 0.5 for v in range(10)]  # all 10 steps, each the mean of both ranks
    assert steps.reduced[:3] == [4, 4, 2]  # steps 1-4, 5-8, then 9-10 at the epoch's end


def test_max_steps_stops_mid_epoch(tmp_path: Path) -> None:
    state, steps = _state(tmp_path, "--epochs", "3", "--max-steps", "4", checkpoints=False), FakeSteps()
    loop.train(state, steps)
    assert (state.progress.epoch, state.progress.batch_in_epoch, state.progress.global_step) == (1, 1, 4)


def test_resume_skips_the_batches_already_done(tmp_path: Path) -> None:
    first = FakeSteps()
    loop.train(_state(tmp_path, "--epochs", "2", "--max-steps", "5", "--checkpoint-every", "2"), first)
    assert first.saved_steps == [2, 3, 4]  # killed after step 5: the newest checkpoint is step 4

    again, steps = _state(tmp_path, "--epochs", "2", "--checkpoint-every", "2"), FakeSteps()
    loop.resume(again, steps)
    assert steps.restored and again.resumed_from_step == 4
    loop.train(again, steps)
    assert [b[0] for b in steps.trained] == [4, 8]  # epoch 1 from its second batch
    assert again.progress.global_step == 6


@pytest.mark.parametrize(("collectives_time_out", "limit"), [(True, 12.0 + loop.WATCHDOG_GRACE_SECONDS), (False, 12.0)])
def test_the_watchdog_waits_for_collectives_that_time_out_themselves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, collectives_time_out: bool, limit: float
) -> None:
    limits: list[float] = []
    real = Watchdog

    def recording(**kw: Any) -> Any:
        limits.append(kw["limit_seconds"])
        return real(**kw)

    monkeypatch.setattr(loop, "Watchdog", recording)
    state = _state(tmp_path, "--epochs", "1", "--timeout-seconds", "12", checkpoints=False)
    loop.train(state, FakeSteps(collectives_time_out=collectives_time_out))
    assert limits == [limit]


class DivergingSteps(FakeSteps):
    """The loss turns NaN from the 4th step on, as a learning rate of 1e20 makes it."""

    def train_step(self, batch: tuple[int, ...]) -> float:
        super().train_step(batch)
        return float("nan") if len(self.trained) >= 4 else 1.0


def test_a_diverged_run_fails_naming_the_non_finite_loss_and_writes_nothing(tmp_path: Path) -> None:
    """Issue 48 item 6: with learning_rate=1e20 the DDP and ChainerMN trainers ended SUCCEEDED at chance accuracy."""
    state, steps = _state(tmp_path, "--epochs", "3", "--log-every", "2"), DivergingSteps()
    with pytest.raises(DivergedError) as caught:
        loop.train(state, steps)
    assert str(caught.value) == (
        "the model diverged at step 4 (epoch 1): the training loss (averaged over the ranks) is nan; "
        "lower the learning rate (or check the data for non-finite values)"
    )
    assert len(steps.trained) == 4  # stopped at the first collective that saw it, not after every epoch
    assert steps.saved_steps == [3]  # the epoch before it; no checkpoint of the diverged model


def test_a_non_finite_test_loss_fails_too_but_an_empty_test_split_does_not(tmp_path: Path) -> None:
    steps = FakeSteps()
    steps.evaluate = lambda: (0.1, float("inf"))  # type: ignore[method-assign]
    with pytest.raises(DivergedError, match=r"at step 3 \(epoch 0\): the test loss is inf"):
        loop.train(_state(tmp_path, "--epochs", "1"), steps)
    empty = FakeSteps()
    empty.evaluate = lambda: (float("nan"), float("nan"))  # type: ignore[method-assign]
    assert math.isnan(loop.train(_state(tmp_path / "e", "--epochs", "1"), empty).test_loss)
