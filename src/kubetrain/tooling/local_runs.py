"""The local runs in a runs directory: list them, read a run's log, cancel a running one.

`kubetrain run` and `demo` leave in each run directory `kubetrain-run.json` (who runs it: the
process id and its start time, which tells a reused pid apart) while the run goes on, and
`outcome.json` (what `--json` prints) once it has ended. A run directory with neither is one
whose `kubetrain run` was killed before it could say how it ended.
"""

from __future__ import annotations

import json
import os
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubetrain.errors import InvalidInputError
from kubetrain.tooling.progress import RUN_LOG

RUNNER_FILE = "kubetrain-run.json"
OUTCOME_FILE = "outcome.json"


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (field 22 of /proc/PID/stat), None if gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii")
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: count from its closing one.
    return stat[stat.rindex(")") + 2 :].split()[19]


def mark_running(run_dir: Path) -> None:
    """Record this process as the run's runner (what `kubetrain cancel` signals)."""
    pid = os.getpid()
    (run_dir / RUNNER_FILE).write_text(json.dumps({"pid": pid, "start": _start_time(pid)}), encoding="utf-8")


def mark_ended(run_dir: Path, outcome: dict[str, Any]) -> None:
    """Keep the run's outcome beside it and forget its runner."""
    (run_dir / OUTCOME_FILE).write_text(json.dumps(outcome), encoding="utf-8")
    (run_dir / RUNNER_FILE).unlink(missing_ok=True)


@dataclass(frozen=True)
class LocalRun:
    """One run directory: its name, its state (RUNNING, the outcome's, or UNKNOWN) and its runner."""

    name: str
    path: Path
    state: str
    pid: int | None = None

    @property
    def log(self) -> Path:
        """Everything the run printed."""
        return self.path / RUN_LOG


def _read(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def describe_run(path: Path) -> LocalRun:
    """The run in `path`, its runner checked against the live processes."""
    runner = _read(path / RUNNER_FILE)
    if runner is not None and isinstance(runner.get("pid"), int):
        pid = int(runner["pid"])
        if runner.get("start") is not None and _start_time(pid) == runner.get("start"):
            return LocalRun(path.name, path, "RUNNING", pid)
    outcome = _read(path / OUTCOME_FILE)
    state = str(outcome.get("state")) if outcome is not None else "UNKNOWN"
    return LocalRun(path.name, path, state)


def list_runs(runs_dir: Path) -> list[LocalRun]:
    """Every run in `runs_dir`, oldest first (their names end in their start time)."""
    if not runs_dir.is_dir():
        return []
    found = [p for p in runs_dir.iterdir() if p.is_dir() and (p / RUN_LOG).is_file()]
    return [describe_run(p) for p in sorted(found, key=lambda p: (p.stat().st_mtime, p.name))]


def find_run(runs_dir: Path, wanted: str) -> LocalRun:
    """The run named `wanted` (a whole name, a unique prefix, or `latest`); InvalidInputError else."""
    runs = list_runs(runs_dir)
    if not runs:
        raise InvalidInputError(f"RUN: no runs in {runs_dir}; `kubetrain run PIPELINE` makes one (or pass --runs-dir)")
    if wanted == "latest":
        return runs[-1]
    exact = [r for r in runs if r.name == wanted]
    matches = exact or [r for r in runs if r.name.startswith(wanted)]
    if len(matches) == 1:
        return matches[0]
    what = "matches several runs" if matches else "matches no run"
    names = ", ".join(r.name for r in (matches or runs)[-5:])
    raise InvalidInputError(f"RUN: {wanted!r} {what} in {runs_dir}; expected one of {names} or 'latest'")


def cancel_run(run: LocalRun) -> None:
    """SIGTERM the run's `kubetrain run`: it stops its running step's job and ends CANCELLED."""
    if run.state != "RUNNING" or run.pid is None:
        raise InvalidInputError(f"RUN: {run.name} is not running (state {run.state}); nothing to cancel")
    try:
        os.kill(run.pid, signal.SIGTERM)
    except ProcessLookupError as e:
        raise InvalidInputError(f"RUN: {run.name} ended meanwhile; nothing to cancel") from e
