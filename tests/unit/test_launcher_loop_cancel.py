"""Cancelling the await loop: the cancel event and SIGTERM delete the job, at once even while the
main thread is stuck in a create or a watch.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from kubetrain.backends.base import JobRef, JobWatch
from kubetrain.errors import (
    JobCancelledError,
)
from kubetrain.launcher import AwaitOptions, Tuning, run_job
from tests.unit.launcher_memory_backend import FAST, MemoryBackend, cond, launch, manifest

pytestmark = pytest.mark.timeout(60)


def test_cancel_event_deletes_the_job() -> None:
    backend = MemoryBackend()
    cancel = threading.Event()

    def script(b: MemoryBackend) -> None:
        b.set_conditions(cond("Running"))
        b.wait_for_line("→ Running")
        cancel.set()
        b.set_conditions(cond("Running"), cond("Created"))  # any change wakes the watch

    with pytest.raises(JobCancelledError):
        launch(backend, script, cancel=cancel)
    assert backend.calls[-1] == "delete"


def test_sigterm_in_main_thread_deletes_and_restores_handlers() -> None:
    assert threading.current_thread() is threading.main_thread()
    backend = MemoryBackend()
    before = signal.getsignal(signal.SIGTERM)

    def script(b: MemoryBackend) -> None:
        b.set_conditions(cond("Running"))
        b.wait_for_line("→ Running")
        os.kill(os.getpid(), signal.SIGTERM)

    with pytest.raises(JobCancelledError, match="SIGTERM"):
        launch(backend, script, tuning={"watch_window_seconds": 30.0})
    assert "delete" in backend.calls
    assert signal.getsignal(signal.SIGTERM) is before


class StuckBackend(MemoryBackend):
    """A backend whose create or first job watch blocks until the scenario lets it go: the main
    thread is stuck where no check of the cancel guard runs."""

    def __init__(self, *, stuck_in: str) -> None:
        super().__init__()
        self.stuck_in = stuck_in
        self.let_go = threading.Event()
        self.stuck = False
        self.deleted_while_stuck: bool | None = None
        self.deleted_refs: list[JobRef] = []

    def _stick(self, where: str) -> None:
        if self.stuck_in != where or self.let_go.is_set():
            return
        with self.cv:
            self.stuck = True
        self._call(f"stuck in {where}")
        self.let_go.wait(60)  # the scenario lets go once it has seen the delete (or given up)
        with self.cv:
            self.stuck = False

    def submit(self, manifest: Mapping[str, Any]) -> JobRef:
        self._stick("submit")
        return super().submit(manifest)

    def watch(self, ref: JobRef, *, timeout_seconds: float) -> JobWatch:
        self._stick("watch")
        return super().watch(ref, timeout_seconds=timeout_seconds)

    def delete(self, ref: JobRef) -> None:
        with self.cv:
            self.deleted_while_stuck = self.stuck
            self.deleted_refs.append(ref)
        super().delete(ref)


def _run_stuck(backend: StuckBackend, script: Callable[[StuckBackend, threading.Event], None]) -> JobCancelledError:
    cancel = threading.Event()
    errors: list[BaseException] = []

    def play() -> None:
        try:
            backend.wait_for(lambda: f"stuck in {backend.stuck_in}" in backend.calls, "the stuck call")
            script(backend, cancel)
        except BaseException as e:  # noqa: BLE001 - re-raised in the test thread
            errors.append(e)
        finally:
            backend.let_go.set()

    player = threading.Thread(target=play, daemon=True)
    player.start()
    options = AwaitOptions(timeout_seconds=30.0, tuning=Tuning(**FAST))
    try:
        with pytest.raises(JobCancelledError) as info:
            run_job(manifest(), backend=backend, options=options, log_sink=backend.sink, cancel=cancel)
    finally:
        player.join(20)
    if errors:
        raise errors[0]
    return info.value


def test_a_stop_deletes_the_job_at_once_while_the_main_thread_is_stuck() -> None:
    """Issue 33: in a KFP step the container dies about a second after SIGTERM. The delete must not
    wait for the main thread to reach a check: it starts from a thread of its own, at once."""
    assert threading.current_thread() is threading.main_thread()
    backend = StuckBackend(stuck_in="watch")

    def script(b: StuckBackend, cancel: threading.Event) -> None:
        os.kill(os.getpid(), signal.SIGTERM)
        b.wait_for(lambda: "delete" in b.calls, "the delete while the main thread is stuck")

    err = _run_stuck(backend, script)
    assert backend.deleted_while_stuck is True
    assert [r.uid for r in backend.deleted_refs] == ["uid-1"]  # once, the job it created
    assert "cancelled (SIGTERM); deleted PyTorchJob ns/train-abc" in str(err)
    assert any(line == "SIGTERM: deleting PyTorchJob ns/train-abc" for line in backend.lines)


def test_a_stop_during_the_create_deletes_what_it_created_and_nothing_follows() -> None:
    assert threading.current_thread() is threading.main_thread()
    backend = StuckBackend(stuck_in="submit")

    def script(b: StuckBackend, cancel: threading.Event) -> None:
        os.kill(os.getpid(), signal.SIGTERM)
        assert cancel.wait(20), "the guard never saw the signal"

    _run_stuck(backend, script)
    assert backend.calls == ["stuck in submit", "submit", "delete"]
    assert [r.uid for r in backend.deleted_refs] == ["uid-1"]
