"""The identity inputs every training component takes, typed, for the tests' `Request(**IDS, ...)`."""

from __future__ import annotations

from typing import TypedDict


class TaskIds(TypedDict):
    """`run_id`, `task_id` and `task_name` (TrainingRequest's first fields): one test's KFP task."""

    run_id: str
    task_id: str
    task_name: str
