"""The job's end as the master recorded it in its state dir, for workers that cannot reach it.

The master keeps answering after the job ended only until every worker it knows has heard the
end; a worker that starts later (importing torch takes a while) or whose master is gone would
otherwise retry for its whole `--retry-deadline`, and a JobSet that is not torn down would wait
that long. The state dir is on the shared volume (every pod of the JobSet gets it as
`$KUBETRAIN_PS_STATE_DIR`), so the master writes one small file there, atomically, once its
durable state says done or failed, and removes a stale one when it starts a job that has not
ended. A worker reads it only when a call to the master or a shard cannot get through.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kubetrain.fileio import atomic_write_bytes
from kubetrain.ps.common.errors import CheckpointError, JobEndedError
from kubetrain.ps.common.tasks import DONE, FAILED

__all__ = [
    "OUTCOME_FILE",
    "STATE_DIR_ENV",
    "JobOutcome",
    "clear_outcome",
    "read_outcome",
    "state_dir_from",
    "stop_if_ended",
    "write_outcome",
]

OUTCOME_FILE = "master_outcome.json"
STATE_DIR_ENV = "KUBETRAIN_PS_STATE_DIR"


@dataclass(frozen=True)
class JobOutcome:
    """How the job ended: phase `done` or `failed`, and why it failed."""

    phase: str
    reason: str = ""

    def __post_init__(self) -> None:
        if self.phase not in (DONE, FAILED):
            raise CheckpointError(f"job outcome: phase {self.phase!r}; expected {DONE!r} or {FAILED!r}")


def write_outcome(state_dir: Path, outcome: JobOutcome) -> None:
    """Record `outcome` in `state_dir` (readers see no file or the whole one)."""
    data = json.dumps({"phase": outcome.phase, "reason": outcome.reason}).encode()
    try:
        atomic_write_bytes(Path(state_dir) / OUTCOME_FILE, data)
    except OSError as e:
        raise CheckpointError(f"{state_dir}/{OUTCOME_FILE}: cannot write the job outcome: {e}") from e


def clear_outcome(state_dir: Path) -> None:
    """Remove a recorded outcome (a master starting a job that has not ended)."""
    try:
        (Path(state_dir) / OUTCOME_FILE).unlink(missing_ok=True)
    except OSError as e:
        raise CheckpointError(f"{state_dir}/{OUTCOME_FILE}: cannot remove a stale job outcome: {e}") from e


def read_outcome(state_dir: Path) -> JobOutcome | None:
    """The recorded outcome, None while the job has not ended (or the dir is not visible)."""
    path = Path(state_dir) / OUTCOME_FILE
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise CheckpointError(f"{path}: unreadable job outcome: {e}") from e
    if not isinstance(raw, dict):
        raise CheckpointError(f"{path}: expected a JSON object")
    return JobOutcome(phase=str(raw.get("phase")), reason=str(raw.get("reason", "")))


def state_dir_from(flag: Path | None) -> Path | None:
    """`--state-dir` if given, else `$KUBETRAIN_PS_STATE_DIR`, else None (no shared state)."""
    if flag is not None:
        return flag
    env = os.environ.get(STATE_DIR_ENV, "").strip()
    return Path(env) if env else None


def stop_if_ended(state_dir: Path) -> Callable[[], None]:
    """A retry hook: raises JobEndedError once the master has recorded the job's end."""

    def check() -> None:
        outcome = read_outcome(state_dir)
        if outcome is None:
            return
        if outcome.phase == FAILED:
            raise JobEndedError(f"the master is gone and recorded that the job failed: {outcome.reason}", failed=True)
        raise JobEndedError("the master is gone and recorded that the job is done", failed=False)

    return check
