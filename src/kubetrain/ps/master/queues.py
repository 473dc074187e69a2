"""The master's queues of work not handed out: training tasks, per static slot or shared, and
evaluation tasks; and the cutting of the data into them: each epoch, the next one when the queue
runs dry, and the test split into each evaluation round.

Owned by the task book, which alone decides what goes in or comes out; this keeps the queues'
own rules (cut order, the static slots' fixed blocks, what "queued" means) in one place.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from kubetrain.ps.common.evaluation import EvalBook
from kubetrain.ps.common.tasks import EVAL, BookConfig, TaskRange, cut_epoch, cut_split

__all__ = ["TaskQueues"]


@dataclass
class TaskQueues:
    """todo (dynamic sharding), slot_todo (static: one queue a slot), eval_todo, and the epochs cut."""

    config: BookConfig
    epoch_created: int = -1
    todo: deque[TaskRange] = field(default_factory=deque)
    slot_todo: dict[int, deque[TaskRange]] = field(default_factory=dict)
    eval_todo: deque[TaskRange] = field(default_factory=deque)

    def __post_init__(self) -> None:
        if self.epoch_created < 0 and self.config.static_slots:
            # Static sharding: each slot owns a fixed block of every epoch, handed out in order.
            self.slot_todo = {s: deque() for s in range(self.config.static_slots)}
            for epoch in range(self.config.epochs):
                for t in self.cut(epoch):
                    self.slot_todo[t.slot].append(t)
            self.epoch_created = self.config.epochs - 1

    def cut(self, epoch: int) -> list[TaskRange]:
        """The training tasks of `epoch`, in its seeded order."""
        c = self.config
        return cut_epoch(c.train_shards, c.records_per_task, epoch=epoch, seed=c.seed, slots=c.static_slots)

    def train_queue(self, slot: int) -> deque[TaskRange]:
        """The queue a worker of `slot` takes training tasks from (static), or the shared one,
        cutting the next epoch when this one's queue runs dry (no epoch barrier)."""
        if self.config.static_slots:
            return self.slot_todo.get(slot, deque())
        while not self.todo and self.epoch_created < self.config.epochs - 1:
            self.epoch_created += 1
            self.todo.extend(self.cut(self.epoch_created))
        return self.todo

    def slots_by_id(self) -> dict[str, int]:
        """Static sharding: every training task's slot, by task id."""
        return {t.task_id: t.slot for e in range(self.config.epochs) for t in self.cut(e)}

    def open_eval_round(self, evals: EvalBook, *, version: int, final: bool, epoch: int | None) -> int:
        """Cut the test split into a new round of `evals` and queue its tasks; returns its id.
        `epoch`: the finished epoch it evaluates (None: the newest one cut)."""
        c = self.config
        rid = evals.next_round
        tasks = cut_split(c.test_shards, c.eval_records_per_task, kind=EVAL, split="test", eval_round=rid)
        evals.open(
            version=version,
            epoch=max(self.epoch_created, 0) if epoch is None else epoch,
            final=final,
            task_ids=tuple(t.task_id for t in tasks),
        )
        self.eval_todo.extend(tasks)
        return rid

    def all_cut(self) -> bool:
        """Every epoch has been cut into tasks."""
        return self.epoch_created >= self.config.epochs - 1

    def train_queued(self) -> bool:
        """Some training task waits to be handed out."""
        return bool(self.todo) or any(self.slot_todo.values())

    def push_front(self, task: TaskRange) -> None:
        """Put a task back at the front of the queue it came from (it goes out next)."""
        if task.kind == EVAL:
            self.eval_todo.appendleft(task)
        elif task.slot >= 0:
            self.slot_todo[task.slot].appendleft(task)
        else:
            self.todo.appendleft(task)

    def _all(self) -> tuple[deque[TaskRange], ...]:
        return (self.todo, self.eval_todo, *self.slot_todo.values())

    def holds(self, task_id: str) -> bool:
        """Whether a task with this id is queued."""
        return any(t.task_id == task_id for q in self._all() for t in q)

    def remove(self, task_id: str) -> TaskRange | None:
        """Take the queued task with this id out of its queue (None if none is queued)."""
        for queue in self._all():
            for t in queue:
                if t.task_id == task_id:
                    queue.remove(t)
                    return t
        return None
