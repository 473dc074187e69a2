"""Record accounting from the workers' trained-batch logs: was every record of every epoch trained?

Each worker (run with `--trained-log`) appends one line per batch after all its gradients were
accepted, naming the records and, per shard, the generation and version the gradients landed
in. A batch whose gradients landed on a shard generation that a later generation restarted from
an older checkpoint was *lost* (the update is gone) and does not count as training. The audit
counts, per (epoch, shard, record), the batches that count, and reports records never trained
and records trained more than once.

A worker killed between a push and its log line leaves a trained batch unlogged, so the log can
only under-count: "every record trained at least once" proven from it holds for the real run.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt

from kubetrain.ps.common.errors import CheckpointError
from kubetrain.ps.server.checkpoint import GENERATIONS, shard_dir

__all__ = ["Audit", "audit", "read_generations"]


@dataclass
class Audit:
    """The outcome of an audit."""

    epochs: int
    records_per_epoch: int
    batches: int = 0
    lost_batches: int = 0
    records_untrained: int = 0  # (epoch, record) pairs no counted batch covers
    records_trained_twice: int = 0  # (epoch, record) pairs covered more than once
    extra_trainings: int = 0  # trainings beyond the first, summed over all pairs
    untrained_examples: list[tuple[int, int, int]] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        """Every record of every epoch was trained at least once."""
        return self.records_untrained == 0

    def to_json(self) -> dict[str, object]:
        """A JSON-ready summary."""
        return {
            "epochs": self.epochs,
            "records_per_epoch": self.records_per_epoch,
            "batches": self.batches,
            "lost_batches": self.lost_batches,
            "records_untrained": self.records_untrained,
            "records_trained_twice": self.records_trained_twice,
            "extra_trainings": self.extra_trainings,
            "complete": self.complete,
        }


def read_generations(checkpoint_dir: Path, num_shards: int) -> dict[int, list[int]]:
    """Each shard's restored_versions record (generation g restored from element g-1)."""
    out: dict[int, list[int]] = {}
    for shard in range(num_shards):
        path = shard_dir(checkpoint_dir, shard, num_shards) / GENERATIONS
        try:
            out[shard] = [int(v) for v in json.loads(path.read_text())["restored_versions"]]
        except FileNotFoundError:
            out[shard] = []
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise CheckpointError(f"{path}: unreadable generation record: {e}") from e
    return out


def _lost(push: Iterable[Sequence[int]], generations: Mapping[int, list[int]]) -> bool:
    for shard, gen, version in push:
        later = generations.get(shard, [])[gen:]
        if later and min(later) < version:
            return True
    return False


def audit(
    logs: Iterable[Path],
    *,
    epochs: int,
    train_shards: Sequence[int],
    generations: Mapping[int, list[int]],
) -> Audit:
    """Count every logged batch that was not lost; report coverage per (epoch, record)."""
    counts: dict[tuple[int, int], npt.NDArray[np.int64]] = {
        (e, s): np.zeros(n, np.int64) for e in range(epochs) for s, n in enumerate(train_shards)
    }
    result = Audit(epochs=epochs, records_per_epoch=int(sum(train_shards)))
    for path in logs:
        with open(path, encoding="utf-8") as f:
            for line in f:
                if not line.endswith("\n"):
                    continue  # a line cut by a kill: the batch is not claimed
                entry = json.loads(line)
                result.batches += 1
                if _lost(entry["push"], generations):
                    result.lost_batches += 1
                    continue
                counts[(int(entry["epoch"]), int(entry["shard"]))][entry["start"] : entry["end"]] += 1
    for (epoch, shard), c in counts.items():
        zero = np.flatnonzero(c == 0)
        result.records_untrained += len(zero)
        result.untrained_examples.extend((epoch, shard, int(i)) for i in zero[:5])
        result.records_trained_twice += int((c > 1).sum())
        result.extra_trainings += int(np.clip(c - 1, 0, None).sum())
    return result
