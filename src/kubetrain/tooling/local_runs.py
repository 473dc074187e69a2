"""The local runs in a runs directory: list them, read (or follow) a run's log, cancel a running one,
remove ended ones.

`kubetrain run` and `demo` leave in each run directory `kubetrain-run.json` (who runs it: the
process id and its start time, which tells a reused pid apart) while the run goes on, and
`outcome.json` (what `--json` prints) once it has ended. A run whose runner is gone without an
outcome was killed (SIGKILL, a crash) before it could say how it ended: its state is ABORTED. A
run directory with neither file is UNKNOWN.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubetrain.errors import InvalidInputError
from kubetrain.tooling.progress import RUN_LOG, ProgressFilter

ABORTED = "ABORTED"
FOLLOW_POLL_SECONDS = 0.25

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
    """One run directory: its name, its state (RUNNING, the outcome's, ABORTED or UNKNOWN) and its runner."""

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
    if outcome is not None:
        return LocalRun(path.name, path, str(outcome.get("state")))
    # Its runner is gone and said nothing: killed (SIGKILL) or crashed, it will never say more.
    return LocalRun(path.name, path, ABORTED if runner is not None else "UNKNOWN")


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


def log_lines(run: LocalRun, *, raw: bool = False, follow: bool = False) -> Iterator[str]:
    """The run's log, line by line (each ending in a newline).

    By default as the console showed it while the run went on (`tooling.progress.ProgressFilter`:
    each step's progress and what it printed, without kfp.local's executor-input dumps, output
    reprs and ANSI colours); `raw`: `run.log` as it is. `follow`: while the run is RUNNING, wait
    for more, and end once it has ended and its log is read to the end.
    """
    shown = ProgressFilter()

    def emit(line: str) -> Iterator[str]:
        if raw:
            yield line if line.endswith("\n") else line + "\n"
        elif (kept := shown.feed(line.rstrip("\n"))) is not None:
            yield kept + "\n"

    with run.log.open(encoding="utf-8", errors="replace", newline="") as log:
        partial = ""
        while True:
            chunk = log.readline()
            if chunk:
                partial += chunk
                # Following, a line without its newline is still being written: wait for the rest.
                if partial.endswith("\n") or not follow:
                    yield from emit(partial)
                    partial = ""
                continue
            if not follow:
                if partial:
                    yield from emit(partial)
                return
            if describe_run(run.path).state != "RUNNING":
                follow = False  # one more pass reads what the run wrote before it ended
                continue
            time.sleep(FOLLOW_POLL_SECONDS)  # a file has no way to say it grew


def clean_runs(runs_dir: Path, *, keep: int, dry_run: bool = False) -> list[tuple[LocalRun, int]]:
    """Remove every ended run in `runs_dir` but the newest `keep`; what was (or would be) removed, with its size.

    A RUNNING run is never removed, nor anything that is not a run directory (`list_runs` lists only
    directories with a run.log; a symbolic link is left alone).
    """
    if keep < 0:
        raise InvalidInputError(f"--keep: got {keep}; expected 0 or more (how many ended runs to keep)")
    ended = [r for r in list_runs(runs_dir) if r.state != "RUNNING" and not r.path.is_symlink()]
    doomed = ended[: max(len(ended) - keep, 0)]
    removed = []
    for run in doomed:
        size = sum(p.lstat().st_size for p in run.path.rglob("*") if p.is_file() and not p.is_symlink())
        if not dry_run:
            shutil.rmtree(run.path)
        removed.append((run, size))
    return removed
