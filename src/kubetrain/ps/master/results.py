"""What a PS job has produced so far: losses, the model version, the history and the final metrics.

The task book (`taskbook`) decides who trains what; this is the record of what came of it. Every
finished training task adds its loss sum to its epoch's, to the window since the last evaluation
round and to the current loss point: every `tasks_per_point` tasks make one history entry
`{step, epoch, loss, kind: "step"}`, so the report's loss curve is as dense as the DDP trainer's
(at most POINTS_PER_EPOCH a epoch). An epoch whose tasks are all done gets one entry of kind
"epoch" (stamped with the model version its last task reached), and every closed evaluation round
one of kind "eval". The final round's test metrics and the last epoch's loss are the job's final
metrics. Each of those epoch and eval entries is also one line of the master's log, the job's
progress as the launcher shows it (the master's log is the one it follows), in the DDP trainer's
words: `epoch 3: loss 0.4123 test accuracy 0.9020`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kubetrain.ps.common.evaluation import EvalBook, EvalRound, history_entry
from kubetrain.ps.common.tasks import Loss

__all__ = ["POINTS_PER_EPOCH", "TrainingResults"]

log = logging.getLogger("kubetrain.ps.master")

# The loss curve's resolution: a 60,000-record epoch in 64-record tasks would otherwise add 938
# entries to the master's state, which is rewritten on every report.
POINTS_PER_EPOCH = 100


@dataclass
class TrainingResults:
    """Losses, model version, evaluation rounds, history and final metrics of one job."""

    evals: EvalBook = field(default_factory=EvalBook)
    model_version: int = 0
    epoch_loss: dict[int, Loss] = field(default_factory=dict)
    window_loss: Loss = field(default_factory=Loss)
    point_loss: Loss = field(default_factory=Loss)  # the tasks since the last loss point
    point_tasks: int = 0
    history: list[dict[str, Any]] = field(default_factory=list)
    final_metrics: dict[str, float] = field(default_factory=dict)
    epochs_logged: set[int] = field(default_factory=set)

    def add_trained(
        self,
        epoch: int,
        loss_sum: float,
        records: int,
        versions: Mapping[int, tuple[int, int]],
        *,
        tasks_per_point: int = 1,
    ) -> None:
        """A training task of `epoch` finished, with its loss sum and the (generation, version) per shard;
        every `tasks_per_point` such tasks add one loss point to the history."""
        self.epoch_loss.setdefault(epoch, Loss()).add(loss_sum, records)
        self.window_loss.add(loss_sum, records)
        # The report carries the versions its pushes produced: the freshest view of the model's
        # step, so an epoch's history entry is stamped with the step it ended at, not with the
        # last periodic poll of the shards.
        if versions:
            self.model_version = max(self.model_version, *(version for _, version in versions.values()))
        self.point_loss.add(loss_sum, records)
        self.point_tasks += 1
        mean = self.point_loss.mean()
        if self.point_tasks >= tasks_per_point and mean is not None:
            self.history.append({"step": self.model_version, "epoch": epoch, "loss": mean, "kind": "step"})
            self.point_loss, self.point_tasks = Loss(), 0

    def log_epoch(self, epoch: int) -> None:
        """The history entry {step, epoch, loss} of an epoch whose tasks are all done (once)."""
        if epoch in self.epochs_logged:
            return
        self.epochs_logged.add(epoch)
        mean = self.epoch_loss[epoch].mean()
        self.history.append({"step": self.model_version, "epoch": epoch, "loss": mean, "kind": "epoch"})
        log.info("epoch %d trained: loss %s at model version %d", epoch, _number(mean), self.model_version)

    def close_round(self, r: EvalRound | None) -> bool:
        """Record a round that just closed (None: nothing closed); True when it was the final one."""
        if r is None:
            return False
        train_loss = self.window_loss.mean()
        if r.final and self.epoch_loss:
            # The final round's loss is the last epoch's, as in the per-epoch entries (the window
            # since the last periodic round would mix in every earlier epoch).
            train_loss = self.epoch_loss[max(self.epoch_loss)].mean()
        entry = history_entry(r, train_loss=train_loss)
        self.window_loss = Loss()
        self.history.append({**entry, "kind": "eval"})
        log.info(
            "%s: loss %s test accuracy %s (model version %d)",
            "final evaluation" if r.final else f"epoch {r.epoch}",
            _number(train_loss),
            _number(entry.get("test_accuracy")),
            r.version,
        )
        if not r.final:
            return False
        self.final_metrics = {k: v for k, v in entry.items() if k.startswith("test_")}
        if self.epoch_loss:
            last = self.epoch_loss[max(self.epoch_loss)].mean()
            if last is not None:
                self.final_metrics["train_loss"] = last
        return True

    def epoch_to_evaluate(self, *, last_epoch: int) -> int | None:
        """The earliest finished epoch before `last_epoch` (the final round's) that no round has evaluated."""
        seen = {int(h["epoch"]) for h in self.history if h.get("kind") == "eval"}
        seen |= {r.epoch for r in self.evals.rounds.values()}
        waiting = sorted(e for e in self.epochs_logged if e < last_epoch and e not in seen)
        return waiting[0] if waiting else None


def _number(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4f}"
