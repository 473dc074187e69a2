"""Component steps end with the launcher's documented exit codes, not a traceback.

A KFP step fails on any non-zero exit; the code says why (kubetrain.errors.ExitCode: 1 the job
failed, 2 invalid input and nothing submitted, 3 timed out, 4 API errors after retries,
5 cancelled), readable in the pod's status and the step's log. Errors kubetrain raises on
purpose end in one line; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from kubetrain.errors import KubetrainError

P = ParamSpec("P")
R = TypeVar("R")


def step(func: Callable[P, R]) -> Callable[P, R]:
    """Wrap a component step: KubetrainError → one line on stderr and SystemExit(exit code)."""

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return func(*args, **kwargs)
        except KubetrainError as e:
            print(f"kubetrain: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
            raise SystemExit(int(e.exit_code)) from e

    return wrapper
