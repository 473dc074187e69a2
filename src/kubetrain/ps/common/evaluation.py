"""Evaluation rounds: the master's separate eval queue, and metrics computed centrally.

Every N model versions (and once at the end) the master cuts the test split into eval tasks for a
new round. Workers evaluate and report loss sums, correct counts and, for binary models, scores
and labels; the master combines them. Results are kept per task id, so an eval task that is
re-queued and done twice counts once (a problem ElasticDL's design notes leave open).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["EvalBook", "EvalResult", "EvalRound", "history_entry", "roc_auc"]


def roc_auc(scores: npt.ArrayLike, labels: npt.ArrayLike) -> float:
    """Area under the ROC curve (Mann-Whitney U with average ranks for ties); NaN if one class."""
    s = np.asarray(scores, np.float64)
    y = np.asarray(labels).astype(bool)
    pos, neg = int(y.sum()), int((~y).sum())
    if pos == 0 or neg == 0:
        return float("nan")
    order = np.argsort(s, kind="mergesort")
    sorted_s = s[order]
    ranks = np.empty(len(s), np.float64)
    # Average ranks over runs of equal scores.
    boundaries = np.flatnonzero(np.diff(sorted_s)) + 1
    starts = np.concatenate([[0], boundaries])
    ends = np.concatenate([boundaries, [len(s)]])
    for a, b in zip(starts, ends, strict=True):
        ranks[order[a:b]] = (a + b + 1) / 2.0
    u = ranks[y].sum() - pos * (pos + 1) / 2.0
    return float(u / (pos * neg))


@dataclass(frozen=True)
class EvalResult:
    """One eval task's outcome."""

    loss_sum: float
    correct: int
    count: int
    scores: tuple[float, ...] = ()
    labels: tuple[int, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """JSON form; scores rounded to 6 digits to keep the state file small."""
        return {
            "loss_sum": self.loss_sum,
            "correct": self.correct,
            "count": self.count,
            "scores": [round(x, 6) for x in self.scores],
            "labels": list(self.labels),
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> EvalResult:
        """Inverse of to_json."""
        return cls(
            float(raw["loss_sum"]),
            int(raw["correct"]),
            int(raw["count"]),
            tuple(float(x) for x in raw.get("scores", ())),
            tuple(int(x) for x in raw.get("labels", ())),
        )


@dataclass
class EvalRound:
    """One evaluation of the model at a version: its tasks and the results so far."""

    round_id: int
    version: int
    epoch: int
    final: bool
    task_ids: tuple[str, ...]
    results: dict[str, EvalResult] = field(default_factory=dict)
    dropped: set[str] = field(default_factory=set)

    def record(self, task_id: str, result: EvalResult) -> bool:
        """Keep a task's result unless one is already kept; True if this one counted."""
        if task_id not in self.task_ids or task_id in self.results:
            return False
        self.results[task_id] = result
        return True

    @property
    def complete(self) -> bool:
        """Every task has a result or was dropped."""
        return all(t in self.results or t in self.dropped for t in self.task_ids)

    def metrics(self) -> dict[str, float]:
        """test_loss, test_accuracy (and test_auc for binary scores) over the results kept."""
        parts = list(self.results.values())
        count = sum(r.count for r in parts)
        if count == 0:
            return {}
        out = {
            "test_loss": sum(r.loss_sum for r in parts) / count,
            "test_accuracy": sum(r.correct for r in parts) / count,
            "test_records": float(count),
        }
        scores: list[float] = [x for r in parts for x in r.scores]
        labels: list[int] = [y for r in parts for y in r.labels]
        if scores and len(scores) == len(labels):
            out["test_auc"] = roc_auc(scores, labels)
        return out

    def to_json(self) -> dict[str, Any]:
        """JSON form for the master's state file."""
        return {
            "round": self.round_id,
            "version": self.version,
            "epoch": self.epoch,
            "final": self.final,
            "tasks": list(self.task_ids),
            "results": {k: v.to_json() for k, v in self.results.items()},
            "dropped": sorted(self.dropped),
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> EvalRound:
        """Inverse of to_json."""
        return cls(
            round_id=int(raw["round"]),
            version=int(raw["version"]),
            epoch=int(raw["epoch"]),
            final=bool(raw["final"]),
            task_ids=tuple(raw["tasks"]),
            results={k: EvalResult.from_json(v) for k, v in raw["results"].items()},
            dropped=set(raw.get("dropped", ())),
        )


def history_entry(round_: EvalRound, *, train_loss: float | None) -> dict[str, Any]:
    """The metrics.json history entry of a completed round."""
    entry: dict[str, Any] = {"step": round_.version, "epoch": round_.epoch}
    if train_loss is not None:
        entry["loss"] = train_loss
    entry.update(round_.metrics())
    return entry


@dataclass
class EvalBook:
    """The open evaluation rounds, by id."""

    rounds: dict[int, EvalRound] = field(default_factory=dict)
    next_round: int = 1
    last_version: int = 0

    def open(self, *, version: int, epoch: int, final: bool, task_ids: tuple[str, ...]) -> int:
        """Open a round at `version` over `task_ids` (cut by the caller); returns its id."""
        rid = self.next_round
        self.next_round += 1
        self.rounds[rid] = EvalRound(rid, version, epoch, final, task_ids)
        self.last_version = version
        return rid

    @staticmethod
    def round_of(task_id: str) -> int:
        """The round id inside an eval task id (`eval/r{round}/...`)."""
        return int(task_id.split("/")[1][1:])

    def record(self, task_id: str, result: EvalResult) -> EvalRound | None:
        """Keep a result (once per task); returns the round if this completed it."""
        r = self.rounds.get(self.round_of(task_id))
        if r is None:
            return None
        r.record(task_id, result)
        return self._close_if_complete(r)

    def drop(self, task_id: str) -> EvalRound | None:
        """An eval task given up on; returns the round if that completed it."""
        r = self.rounds.get(self.round_of(task_id))
        if r is None:
            return None
        r.dropped.add(task_id)
        return self._close_if_complete(r)

    def _close_if_complete(self, r: EvalRound) -> EvalRound | None:
        if not r.complete:
            return None
        del self.rounds[r.round_id]
        return r

    def to_json(self) -> dict[str, Any]:
        """JSON form for the master's state file."""
        return {
            "rounds": [r.to_json() for r in self.rounds.values()],
            "next_round": self.next_round,
            "last_version": self.last_version,
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> EvalBook:
        """Inverse of to_json."""
        rounds = [EvalRound.from_json(r) for r in raw.get("rounds", ())]
        return cls(
            rounds={r.round_id: r for r in rounds},
            next_round=int(raw.get("next_round", 1)),
            last_version=int(raw.get("last_version", 0)),
        )
