"""`kubetrain submit --wait`: follow a run on Kubeflow Pipelines to its end, as kfp's
`Client.wait_for_run_completion` does, with the run's end as the exit code.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kubetrain.errors import ExitCode, JobTimeoutError

# The v2beta1 run states that end a run, and the exit code each ends `submit --wait` with.
END_STATES = {
    "SUCCEEDED": ExitCode.SUCCESS,
    "SKIPPED": ExitCode.SUCCESS,
    "FAILED": ExitCode.JOB_FAILED,
    "CANCELED": ExitCode.CANCELLED,
}


@dataclass(frozen=True)
class RunEnd:
    """How a run ended: its KFP state, the exit code for it, its error message if any."""

    state: str
    exit_code: int
    error: str = ""


def wait_for_run(
    client: Any,
    run_id: str,
    *,
    timeout_seconds: float,
    poll_seconds: float = 5.0,
    on_state: Callable[[str], None] = lambda state: None,
    sleep: Callable[[float], None] = time.sleep,
) -> RunEnd:
    """Read the run's state every `poll_seconds` until it ends; `on_state` hears each new state.

    JobTimeoutError when it has not ended within `timeout_seconds` (the run goes on).
    """
    deadline = time.monotonic() + timeout_seconds
    last = ""
    while True:
        # The caller translates the client's API errors (kubetrain.tooling.submit.follow_run).
        run = client.get_run(run_id)
        state = str(getattr(run, "state", "") or "")
        if state != last:
            on_state(state)
            last = state
        if state in END_STATES:
            error = getattr(run, "error", None)
            message = str(getattr(error, "message", "") or "") if error is not None else ""
            return RunEnd(state, int(END_STATES[state]), message)
        if time.monotonic() >= deadline:
            raise JobTimeoutError(
                f"run {run_id} did not end within {timeout_seconds:g}s (last state {state or 'unknown'}); "
                "it goes on: see it in the KFP UI"
            )
        sleep(poll_seconds)
