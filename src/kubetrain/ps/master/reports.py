"""What a worker's report must show before the master counts it (pure checks, no book state).

A report counts only when it comes from the worker process holding the lease (its id and the
random incarnation it drew at start, which no other pod knows), names the lease's task, and
covers exactly the task's records; anything else is refused and the task stays with its holder or
goes back to the queue. A non-finite loss means the model diverged: training on cannot help, so
the job fails with that reason instead of finishing with a NaN model (and metrics that drop it).
"""

from __future__ import annotations

import math

from kubetrain.ps.common.evaluation import EvalResult
from kubetrain.ps.common.tasks import EVAL, TaskRange

__all__ = ["count_problem", "divergence"]


def count_problem(task: TaskRange, *, records: int, eval_result: EvalResult | None) -> str | None:
    """Why a success report of `task` cannot count (None: it covers the task's records exactly)."""
    if task.kind == EVAL:
        if eval_result is None:
            return f"task {task.task_id}: an evaluation report without its result"
        records = eval_result.count
    if records != task.records:
        return f"task {task.task_id}: reported {records} records; the task has {task.records}"
    return None


def divergence(
    task_id: str, worker_id: str, *, loss_sum: float, eval_result: EvalResult | None, error: str
) -> str | None:
    """The job's failure reason if the report carries a non-finite loss (None: all finite)."""
    losses = [loss_sum] + ([eval_result.loss_sum] if eval_result is not None else [])
    bad = next((x for x in losses if not math.isfinite(x)), None)
    if bad is None:
        return None
    what = error or f"the loss is not finite ({bad})"
    return (
        f"the model diverged: worker {worker_id}, task {task_id}: {what}; "
        "lower the learning rate (or check the data for non-finite values)"
    )
