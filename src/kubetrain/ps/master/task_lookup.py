"""Finding one of the book's tasks by id, for a report that no live lease backs: whether the job
ever cut it, and taking it back from wherever it is now (a queue, another lease, the dropped list)
so that the late report finishes it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kubetrain.ps.common.tasks import EVAL, TaskRange, task_from_id

if TYPE_CHECKING:
    from kubetrain.ps.master.taskbook import TaskBook

__all__ = ["take_back", "task_known"]


def task_known(book: TaskBook, task_id: str) -> bool:
    """Whether `task_id` names a task of this job that was ever cut."""
    if task_id in book.ledger or task_id in book.dropped:
        return True
    if task_id.startswith(EVAL):
        try:
            return 0 < book.results.evals.round_of(task_id) < book.results.evals.next_round
        except (IndexError, ValueError):
            return False
    if any(t.task_id == task_id for q in (book.todo, book.eval_todo, *book.slot_todo.values()) for t in q):
        return True
    return any(x.task.task_id == task_id for x in (*book.doing.values(), *book.released.values()))


def take_back(book: TaskBook, task_id: str) -> TaskRange | None:
    """A task re-queued, re-leased or dropped meanwhile, reclaimed: this report finishes it."""
    for queue in (book.todo, book.eval_todo, *book.slot_todo.values()):
        for t in queue:
            if t.task_id == task_id:
                queue.remove(t)
                return t
    for other in list(book.doing.values()):
        if other.task.task_id == task_id:
            book.forget_lease(other)  # its worker is told to abandon at its next heartbeat
            return other.task
    if task_id in book.dropped:
        book.counters["records_dropped"] -= book.dropped.pop(task_id)
        book.counters["tasks_dropped"] -= 1
        return task_from_id(task_id)
    return None
