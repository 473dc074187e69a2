"""The master's ledger of finished training tasks, and what PS restarts did to them.

A finished task stays an open entry (its lease and, per shard, the generation and version its
gradients landed in) while a shard restart could still lose its update: a restarted shard comes
back from its newest checkpoint, and updates past that version are gone, so their tasks must be
trained again. Once every shard the task pushed to has checkpointed past the task's version, the
update is durable and the entry is folded into a per-epoch bitmap of finished task indexes. That
keeps the master's state file (written after every change) small however long the job runs.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kubetrain.errors import SpecError
from kubetrain.ps.common.tasks import TRAIN, DoneEntry, task_from_id

__all__ = ["Ledger", "restart_event"]


@dataclass
class Ledger:
    """Open done-entries, folded bitmaps, and each shard's generation and checkpoint record."""

    train_shards: tuple[int, ...]
    records_per_task: int
    open: dict[str, DoneEntry] = field(default_factory=dict)
    folded: dict[int, int] = field(default_factory=dict)  # epoch -> bitmap of task indexes
    folded_records: dict[int, int] = field(default_factory=dict)
    ps_history: dict[int, list[int]] = field(default_factory=dict)  # shard -> restored_versions
    ps_checkpointed: dict[int, tuple[int, int]] = field(default_factory=dict)  # -> (generation, version)

    def __post_init__(self) -> None:
        # Index of a task inside its epoch: tasks of earlier shards, then start // records_per_task.
        self._offsets = [0]
        for n in self.train_shards:
            self._offsets.append(self._offsets[-1] + -(-n // self.records_per_task))

    def _index(self, task_id: str) -> tuple[int, int] | None:
        """(epoch, index in the epoch) of a training task; None for an id no training task has."""
        try:
            t = task_from_id(task_id)
        except SpecError:
            return None
        if t.kind != TRAIN or t.split != "train" or not 0 <= t.shard < len(self.train_shards):
            return None
        return t.epoch, self._offsets[t.shard] + t.start // self.records_per_task

    # ----------------------------------------------------------------------------- entries

    def __contains__(self, task_id: object) -> bool:
        if not isinstance(task_id, str):
            return False
        if task_id in self.open:
            return True
        found = self._index(task_id)
        if found is None:
            return False
        epoch, index = found
        return bool(self.folded.get(epoch, 0) >> index & 1)

    def __len__(self) -> int:
        return len(self.open) + sum(bin(b).count("1") for b in self.folded.values())

    def get(self, task_id: str) -> DoneEntry | None:
        """The open entry of a task (None if not done, or folded)."""
        return self.open.get(task_id)

    def add(self, task_id: str, entry: DoneEntry) -> None:
        """A task finished."""
        self.open[task_id] = entry

    def done_in_epoch(self, epoch: int) -> int:
        """How many tasks of `epoch` are finished."""
        prefix = f"train/e{epoch}/"
        return bin(self.folded.get(epoch, 0)).count("1") + sum(1 for k in self.open if k.startswith(prefix))

    def records(self) -> int:
        """Records covered by finished tasks, all epochs."""
        return sum(e.records for e in self.open.values()) + sum(self.folded_records.values())

    def items(self) -> Iterator[tuple[str, DoneEntry]]:
        """The open entries."""
        return iter(list(self.open.items()))

    # ----------------------------------------------------------------------------- PS state

    def lost(self, entry: DoneEntry) -> bool:
        """True if a shard restarted from a checkpoint older than the entry's update there."""
        for shard, (gen, version) in entry.versions.items():
            later = self.ps_history.get(shard, [])[gen:]  # restores of the generations after `gen`
            if later and min(later) < version:
                return True
        return False

    def _durable(self, entry: DoneEntry) -> bool:
        for shard, (gen, version) in entry.versions.items():
            history = self.ps_history.get(shard, [])
            if gen < len(history):
                continue  # survived later restarts (not lost), so it is in their state
            checkpoint = self.ps_checkpointed.get(shard)  # this generation's newest checkpoint
            if checkpoint is None or checkpoint[0] != gen or version > checkpoint[1]:
                return False
        return not self.lost(entry)

    def note_ps_state(
        self, shard: int, restored_versions: Sequence[int], checkpointed: int
    ) -> list[tuple[str, DoneEntry]]:
        """A shard's generation record and newest checkpoint; removes and returns lost entries."""
        lost: list[tuple[str, DoneEntry]] = []
        if len(restored_versions) > len(self.ps_history.get(shard, [])):
            self.ps_history[shard] = list(restored_versions)
            lost = [(tid, e) for tid, e in self.open.items() if shard in e.versions and self.lost(e)]
            for tid, _ in lost:
                del self.open[tid]
        if restored_versions:
            self.ps_checkpointed[shard] = (len(restored_versions), int(checkpointed))
        self.fold()
        return lost

    def fold(self) -> int:
        """Fold every durable open entry into its epoch's bitmap; returns how many."""
        # Every open entry is a training task of this job (report() adds no other), so each has an index.
        durable = [(tid, found) for tid, e in self.open.items() if self._durable(e) and (found := self._index(tid))]
        for tid, (epoch, index) in durable:
            entry = self.open.pop(tid)
            self.folded[epoch] = self.folded.get(epoch, 0) | (1 << index)
            self.folded_records[epoch] = self.folded_records.get(epoch, 0) + entry.records
        return len(durable)

    # ----------------------------------------------------------------------------- JSON

    def to_json(self) -> dict[str, Any]:
        """JSON form (bitmaps as hex strings)."""
        return {
            "open": {k: v.to_json() for k, v in self.open.items()},
            "folded": {str(e): format(b, "x") for e, b in self.folded.items()},
            "folded_records": {str(e): n for e, n in self.folded_records.items()},
            "ps_history": {str(k): v for k, v in self.ps_history.items()},
            "ps_checkpointed": {str(k): list(v) for k, v in self.ps_checkpointed.items()},
        }

    def load_json(self, raw: Mapping[str, Any]) -> None:
        """Replace the content with a to_json() dict."""
        self.open = {k: DoneEntry.from_json(v) for k, v in raw["open"].items()}
        self.folded = {int(e): int(b, 16) for e, b in raw["folded"].items()}
        self.folded_records = {int(e): int(n) for e, n in raw["folded_records"].items()}
        self.ps_history = {int(k): [int(x) for x in v] for k, v in raw["ps_history"].items()}
        self.ps_checkpointed = {int(k): (int(v[0]), int(v[1])) for k, v in raw["ps_checkpointed"].items()}


def restart_event(shard: int, restored_versions: Sequence[int], *, requeued: int) -> str:
    """The master's log line for a shard seen restarted: where it came back from, what went back on the queue."""
    restored = restored_versions[-1]
    start = f"from its checkpoint at version {restored}" if restored >= 0 else "with no checkpoint"
    tasks = f"{requeued} finished task{'' if requeued == 1 else 's'}"
    return f"PS shard {shard} restarted {start} (generation {len(restored_versions)}); {tasks} re-queued"
